"""The local stack's one way of calling a WSGI app in-process to its whole answer."""

from __future__ import annotations

from typing import Any

import pytest
from werkzeug.test import EnvironBuilder

from remote_batch_local.wsgi_calls import call_app


class Answer:
    """A WSGI body in parts that records whether the server closed it."""

    def __init__(self, parts: list[bytes], fail_at: int | None = None) -> None:
        self.parts, self.fail_at, self.closed = parts, fail_at, False

    def __iter__(self) -> Any:
        for index, part in enumerate(self.parts):
            if index == self.fail_at:
                raise RuntimeError("the app failed while answering")
            yield part

    def close(self) -> None:
        self.closed = True


def test_the_whole_body_status_and_headers_come_back_and_the_body_is_closed() -> None:
    body = Answer([b"<a>", b"", b"</a>"])

    def app(environ: dict[str, Any], start_response: Any) -> Answer:
        environ["app.saw"] = True
        start_response("201 Created", [("Content-Type", "text/xml"), ("X-Amz-Id", "1")])
        return body

    environ = EnvironBuilder(method="POST", path="/").get_environ()
    answer = call_app(app, environ)

    assert (answer.status, answer.status_code, answer.body) == ("201 Created", 201, b"<a></a>")
    assert answer.headers == [("Content-Type", "text/xml"), ("X-Amz-Id", "1")]
    assert body.closed
    assert "app.saw" not in environ  # the app had a copy


def test_a_body_that_fails_midway_is_closed_and_the_failure_raised() -> None:
    body = Answer([b"a", b"b"], fail_at=1)

    def app(environ: dict[str, Any], start_response: Any) -> Answer:
        start_response("200 OK", [])
        return body

    with pytest.raises(RuntimeError, match="failed while answering"):
        call_app(app, EnvironBuilder().get_environ())
    assert body.closed
