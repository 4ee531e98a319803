"""The stack's own AWS requests to its moto server, handed to the server's application in process.

The in-process Lambdas, the snapshots, the executor's log shipping and job credentials all make
their boto3 clients from one session (``AwsClients``) and send every request to the local moto
server. Over HTTP each request costs, in this one process (one GIL), the client's socket I/O and
response parsing plus a server thread's request parsing and answer writing, besides what moto
does. ``InProcessTransport``, registered on that session's ``before-send`` event (botocore's hook for
answering a signed request without sending it; moto's own ``mock_aws`` answers through it too),
gives each request to the server's WSGI application directly (``EnvironBuilder``, as the journal's
replay does) and returns its answer as botocore's response. The request passes every middleware in
the same order as over HTTP (write counter, IAM gate with SigV4 checks, journal, service locks), so
nothing but the socket is skipped. Job workers, in processes of their own, still use HTTP.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.compat import HTTPHeaders
from moto.core.botocore_stubber import MockRawResponse
from werkzeug.test import EnvironBuilder

from remote_batch_local.journal import IN_PROCESS
from remote_batch_local.wsgi_calls import call_app

logger = logging.getLogger(__name__)


class InProcessTransport:
    """A botocore ``before-send`` handler answering requests to ``endpoint`` with ``app``.

    Parameters
    ----------
    endpoint : str
        The moto server's URL (``http://127.0.0.1:<port>``); requests to other hosts are sent
        as usual (the handler returns None).
    app : Callable
        The server's WSGI application (its middlewares included).
    """

    def __init__(self, endpoint: str, app: Callable[..., Iterable[bytes]]) -> None:
        split = urlsplit(endpoint)
        self._netloc = split.netloc
        self._base_url = f"{split.scheme}://{split.netloc}/"
        self._app = app

    def __call__(self, request: AWSPreparedRequest, **kwargs: Any) -> Any:
        """Answer ``request`` in process when it goes to the endpoint (an ``AWSResponse``); None
        otherwise (botocore then sends it)."""
        split = urlsplit(request.url)
        if split.netloc != self._netloc:
            return None
        raw: Any = request.body
        body: bytes = b""
        if hasattr(raw, "read"):
            raw = raw.read()
        if isinstance(raw, str):
            body = raw.encode("utf-8")
        elif isinstance(raw, bytes | bytearray):
            body = bytes(raw)
        headers = [
            (name, value.decode("utf-8") if isinstance(value, bytes) else str(value))
            for name, value in request.headers.items()
        ]
        environ = EnvironBuilder(
            method=request.method,
            path=split.path or "/",
            query_string=split.query,
            headers=headers,
            data=body,
            base_url=self._base_url,
        ).get_environ()
        environ["REMOTE_ADDR"] = "127.0.0.1"
        # A write the state disk refuses raises to this process's caller (journal.IN_PROCESS).
        environ[IN_PROCESS] = True
        answer = call_app(self._app, environ)
        response_headers = HTTPHeaders()
        for name, value in answer.headers:
            response_headers[name] = value
        return AWSResponse(request.url, answer.status_code, response_headers, MockRawResponse(answer.body))
