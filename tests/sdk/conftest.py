"""The SDK and CLI against a fake HTTP server (pytest-httpserver on 127.0.0.1): retries, errors,
connection lookup, token refresh. Only the loopback interface is reachable."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from pytest_socket import enable_socket, socket_allow_hosts
from werkzeug import Request, Response

import remote_batch as rb
from remote_batch import client as client_module
from remote_batch import connection

TOKEN = "rb_test-token"

JOB: dict[str, Any] = {
    "jobId": "job-01TEST",
    "name": None,
    "type": "Single",
    "parentJobId": None,
    "arrayIndex": None,
    "arraySize": None,
    "status": "Succeeded",
    "statusReason": None,
    "machineClass": "Basic1x8",
    "geoZone": "UnitedStates",
    "creditConstraint": None,
    "timeConstraint": None,
    "notifications": [],
    "creditsSpent": 1.0,
    "exitCode": 0,
    "submittedAt": "2026-11-29T17:20:00Z",
    "startedAt": "2026-11-29T17:20:01Z",
    "completedAt": "2026-11-29T17:20:02Z",
    "expiresAt": "2026-12-13T17:20:00Z",
    "childStatusCounts": None,
}


def job(**changes: Any) -> dict[str, Any]:
    """A ``Job`` body of docs/http-api.md with ``changes``."""
    return {**JOB, **changes}


def error(status: int, code: str, message: str, field: str | None = None) -> Response:
    """docs/http-api.md's error body."""
    body = {"error": {"code": code, "message": message, "field": field}}
    return Response(json.dumps(body), status=status, content_type="application/json")


def ok(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body), status=status, content_type="application/json")


class Recorder:
    """A handler answering from a list of responses in turn, keeping each request it saw."""

    def __init__(self, *responses: Response) -> None:
        self.responses = list(responses)
        self.requests: list[dict[str, Any]] = []

    def __call__(self, request: Request) -> Response:
        self.requests.append(
            {
                "headers": dict(request.headers),
                "body": request.get_data(),
                "args": dict(request.args),
                "path": request.path,
            }
        )
        return self.responses[min(len(self.requests), len(self.responses)) - 1]

    @property
    def count(self) -> int:
        return len(self.requests)


@pytest.fixture(scope="session")
def httpserver_listen_address() -> tuple[str, int]:
    """pytest-httpserver on the IPv4 loopback, a free port."""
    return ("127.0.0.1", 0)


@pytest.fixture(autouse=True)
def _loopback_only() -> Iterator[None]:
    """Connections to 127.0.0.1 only (pytest-socket); anything else fails the test."""
    socket_allow_hosts(["127.0.0.1"], allow_unix_socket=True)
    yield
    enable_socket()


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No connection leaks in from the machine: an empty config folder, no variables, no default
    client, an empty working directory; urllib3's backoff made short."""
    for name in ("REMOTE_BATCH_ENDPOINT", "REMOTE_BATCH_TOKEN", "REMOTE_BATCH_PROFILE", "REMOTE_BATCH_HOME",
                 "REMOTE_BATCH_LOCAL_ACCOUNT", "REMOTE_BATCH_ACCOUNT"):  # fmt: skip
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("REMOTE_BATCH_CONFIG_DIR", str(tmp_path / "config"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(connection, "_default", None)
    monkeypatch.setattr(client_module, "BACKOFF_FACTOR", 0.01)


@pytest.fixture
def api(httpserver: HTTPServer) -> rb.Client:
    """A client of the fake server, the process's default."""
    return rb.connect(httpserver.url_for("").rstrip("/"), TOKEN)
