"""The local stack's HTTP request handler: errors its server answers before a request reaches the
gateway, in the contract's error body (docs/http-api.md "Errors"), and the header lines as sent.

Python's ``http.server`` (under werkzeug's development server) refuses some requests while it reads
them (a header line over 65,536 bytes or over 100 headers: 431; a request line over 65,536 bytes:
414; a malformed request line: 400) and answers with an HTML page. Clients of this service read
docs/http-api.md's error body (``{"error": {"code", "message", "field"}}``) on every route, so the local
stack's
server answers those refusals with it too.

A WSGI environ joins a repeated header's values with commas (``HTTP_AUTHORIZATION`` = ``"a,b"``),
so the handler also keeps the name of each header line as sent, under ``HEADER_LINES``, for the
gateway's check of headers that must come once (``functions.domain.headers``).
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import TYPE_CHECKING

from werkzeug.serving import WSGIRequestHandler

if TYPE_CHECKING:
    from _typeshed.wsgi import WSGIEnvironment

#: The environ key of the request's header names, one per header line as sent.
HEADER_LINES = "remote_batch_local.header_lines"

#: Error codes (docs/http-api.md) for the refusals ``http.server`` makes itself (status → code, message).
_REFUSALS: dict[int, tuple[str, str]] = {
    HTTPStatus.BAD_REQUEST: ("ValidationError", "The request line or its headers are malformed."),
    HTTPStatus.REQUEST_URI_TOO_LONG: (
        "UriTooLong",
        "The request line is over 65,536 bytes; put long values in the body.",
    ),
    HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE: (
        "HeadersTooLarge",
        "The request's headers are over the server's limits (65,536 bytes a line, 100 headers); "
        "send fewer or shorter headers.",
    ),
}


def error_body(status: int) -> bytes:
    """The JSON error body (UTF-8 bytes) for a refusal with HTTP ``status`` (docs/http-api.md "Errors");
    a status without its own code gets ``BadRequest`` (4xx) or ``InternalError`` (5xx)."""
    fallback = ("BadRequest" if status < 500 else "InternalError", HTTPStatus(status).phrase + ".")
    code, message = _REFUSALS.get(status, fallback)
    return json.dumps({"error": {"code": code, "message": message, "field": None}}).encode()


class JsonErrorRequestHandler(WSGIRequestHandler):
    """werkzeug's request handler with ``send_error`` answering the JSON error body, and each header
    line's name in the environ (``HEADER_LINES``)."""

    def make_environ(self) -> WSGIEnvironment:
        """werkzeug's environ, plus ``HEADER_LINES``."""
        environ = super().make_environ()
        environ[HEADER_LINES] = list(self.headers.keys())
        return environ

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Send the refusal ``code`` with the JSON body of ``error_body`` and close the connection
        (``http.server``'s own behaviour: the rest of the request is not read)."""
        self.log_error("code %d, message %s", code, message or "")
        self.send_response(code, message)
        self.send_header("Connection", "close")
        body = error_body(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
