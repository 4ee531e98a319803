"""Calling a WSGI app in-process to its whole answer (the local stack's moto server, its journal's
replay, the boto3 transport that skips the socket).

werkzeug's ``run_wsgi_app`` does the calling: ``buffered`` reads the app's iterable to the end and
then calls its ``close()`` whatever happens (PEP 3333), which moto needs to finish its answer.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from werkzeug.test import run_wsgi_app


@dataclass(frozen=True, slots=True)
class WsgiAnswer:
    """A WSGI app's answer: its status line (``"200 OK"``), headers as WSGI lists them, and body."""

    status: str
    headers: list[tuple[str, str]]
    body: bytes

    @property
    def status_code(self) -> int:
        """The status as a number (``200``)."""
        return int(self.status[:3])


def call_app(app: Callable[..., Any], environ: dict[str, Any]) -> WsgiAnswer:
    """Run ``app`` on ``environ`` (werkzeug copies it: what the app writes into it stays there) and
    return its whole answer."""
    body, status, headers = run_wsgi_app(app, environ, buffered=True)
    return WsgiAnswer(status, headers.to_wsgi_list(), b"".join(body))
