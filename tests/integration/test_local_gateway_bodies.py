"""The local API gateway reads a request's whole body before it invokes anything: a body that ends
before its Content-Length is refused (400, docs/http-api.md's error body), never passed on cut short."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest
from werkzeug.test import EnvironBuilder

from remote_batch_local.gateway import ApiGateway
from remote_batch_local.tokens import TokenStore

BODY = b'{"code":"1"}'


class Trickle(io.RawIOBase):
    """A request body that arrives ``size`` bytes per read (as a slow network delivers it), then
    ends (the client closed its side)."""

    def __init__(self, data: bytes, size: int) -> None:
        self._data = data
        self._size = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        part, self._data = (
            self._data[: min(self._size, len(buffer))],
            self._data[min(self._size, len(buffer)) :],
        )
        buffer[: len(part)] = part
        return len(part)


class Gateway:
    """An ``ApiGateway`` whose api Lambda records the events it is invoked with."""

    def __init__(self, home: Path) -> None:
        self.invoked: list[dict[str, Any]] = []
        tokens = TokenStore(home / "tokens.json")
        self.token = tokens.mint("acct-1", ("user",))

        def invoke(event: dict[str, Any]) -> dict[str, Any]:
            self.invoked.append(event)
            return {"statusCode": 202, "body": json.dumps({"jobId": "j-1"})}

        self.app = ApiGateway(
            tokens=tokens,
            invoke_api=invoke,
            events=None,  # type: ignore[arg-type]
            accounts=None,  # type: ignore[arg-type]
            admin_environment=contextlib.nullcontext,
        )

    def post(self, stream: io.RawIOBase, content_length: int) -> tuple[int, dict[str, Any]]:
        environ = EnvironBuilder(
            method="POST",
            path="/jobs",
            headers=[("Authorization", f"Bearer {self.token}"), ("Content-Type", "application/json")],
        ).get_environ()
        environ["wsgi.input"] = io.BufferedReader(stream)
        environ["CONTENT_LENGTH"] = str(content_length)
        status: list[str] = []
        chunks = self.app(environ, lambda code, headers, *rest: status.append(code))
        return int(status[0].split()[0]), json.loads(b"".join(chunks))


@pytest.fixture
def gateway(tmp_path: Path) -> Gateway:
    return Gateway(tmp_path)


def test_a_body_shorter_than_its_content_length_is_refused_and_nothing_is_invoked(gateway: Gateway) -> None:
    # When a client announces 100 bytes, sends the 12 of a valid job and closes
    status, body = gateway.post(Trickle(BODY, 64), content_length=100)

    # Then the gateway answers 400 with docs/http-api.md's error body, and the api Lambda never ran
    assert status == 400
    assert body == {
        "error": {
            "code": "ValidationError",
            "message": "The request body ended after 12 of the 100 bytes its Content-Length announced; "
            "send the whole body.",
            "field": None,
        }
    }
    assert gateway.invoked == []


def test_an_empty_body_announced_with_a_length_is_refused(gateway: Gateway) -> None:
    status, body = gateway.post(Trickle(b"", 64), content_length=12)

    assert status == 400
    assert body["error"]["code"] == "ValidationError"
    assert gateway.invoked == []


def test_a_whole_body_arriving_in_small_pieces_is_passed_on_whole(gateway: Gateway) -> None:
    # When the 12 bytes arrive 5 at a time
    status, body = gateway.post(Trickle(BODY, 5), content_length=len(BODY))

    # Then the api Lambda gets the whole body once
    assert (status, body) == (202, {"jobId": "j-1"})
    assert [event["body"] for event in gateway.invoked] == [BODY.decode()]


@pytest.mark.parametrize(
    ("request_bytes", "status", "code"),
    [
        # http.server refuses a header line over 65,536 bytes before the gateway sees the request.
        (b"GET /jobs HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n", 431, "HeadersTooLarge"),
        (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "UriTooLong"),
        (
            b"GET /jobs HTTP/1.1\r\n" + b"".join(b"X-%d: 1\r\n" % i for i in range(101)) + b"\r\n",
            431,
            "HeadersTooLarge",
        ),  # over 100 headers
    ],
)
def test_the_servers_own_refusals_answer_the_json_error_body(
    gateway: Gateway, request_bytes: bytes, status: int, code: str
) -> None:
    import socket
    import threading

    from werkzeug.serving import make_server

    from remote_batch_local.http_errors import JsonErrorRequestHandler

    server = make_server("127.0.0.1", 0, gateway.app, threaded=True, request_handler=JsonErrorRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", server.server_port), timeout=10) as sock:
            sock.sendall(request_bytes)
            answer = b""
            while chunk := sock.recv(65_536):
                answer += chunk
    finally:
        server.shutdown()
        thread.join(timeout=10)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0].split()[1] == str(status).encode(), head
    assert b"Content-Type: application/json" in head, head
    error = json.loads(body)["error"]
    assert error["code"] == code
    assert error["field"] is None
    assert error["message"].endswith(".")
    assert gateway.invoked == []


def _exchange(gateway: Gateway, request_bytes: bytes) -> tuple[int, bytes]:
    """Send raw request bytes to the gateway behind the local stack's server; (status, body)."""
    import socket
    import threading

    from werkzeug.serving import make_server

    from remote_batch_local.http_errors import JsonErrorRequestHandler

    server = make_server("127.0.0.1", 0, gateway.app, threaded=True, request_handler=JsonErrorRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", server.server_port), timeout=10) as sock:
            sock.sendall(request_bytes)
            answer = b""
            while chunk := sock.recv(65_536):
                answer += chunk
    finally:
        server.shutdown()
        thread.join(timeout=10)
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b"\r\n")[0].split()[1]), body


@pytest.mark.parametrize(
    ("lines", "field"),
    [
        (["Authorization: Bearer {token}", "Authorization: Bearer {token}"], "Authorization"),
        (["Authorization: Bearer {token}", "authorization: Bearer other"], "Authorization"),
        (["Authorization: Bearer {token}", "Idempotency-Key: a", "Idempotency-Key: b"], "Idempotency-Key"),
    ],
)
def test_a_header_that_must_come_once_sent_twice_is_refused_naming_it(
    gateway: Gateway, lines: list[str], field: str
) -> None:
    headers = "".join(f"{line.format(token=gateway.token)}\r\n" for line in lines)
    request = (
        f"POST /jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{headers}"
        f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY

    status, body = _exchange(gateway, request)

    assert status == 400
    assert json.loads(body)["error"] == {
        "code": "ValidationError",
        "message": f"The {field} header is sent 2 times; send it once.",
        "field": field,
    }
    assert gateway.invoked == []


def test_each_header_once_is_passed_on(gateway: Gateway) -> None:
    request = (
        f"POST /jobs HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer {gateway.token}\r\n"
        f"Idempotency-Key: a\r\nX-Trace: 1\r\nX-Trace: 2\r\nContent-Length: {len(BODY)}\r\n\r\n"
    ).encode() + BODY

    status, _ = _exchange(gateway, request)

    assert status == 202
    (event,) = gateway.invoked
    assert event["headers"]["Idempotency-Key"] == "a"
