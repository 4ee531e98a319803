"""The web console's files at /console/ on the local gateway (remote_batch_local.console): served
without a token, with the console's Content-Security-Policy on every answer, nothing outside the build."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest
from werkzeug.test import Client
from werkzeug.wrappers import Request

from remote_batch_local.console import CONTENT_SECURITY_POLICY, NOT_BUILT_MESSAGE, ConsoleFiles
from remote_batch_local.gateway import ApiGateway
from remote_batch_local.tokens import TokenStore

INDEX = b'<!doctype html><script type="module" src="/console/assets/index-1.js"></script>'


@pytest.fixture
def client(tmp_path: Path) -> Client:
    dist = tmp_path / "dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_bytes(INDEX)
    (dist / "assets" / "index-1.js").write_text("console.log(1)", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("not served", encoding="utf-8")

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        return {"statusCode": 200, "body": '{"invoked": true}'}

    gateway = ApiGateway(
        tokens=TokenStore(tmp_path / "tokens.json"),
        invoke_api=invoke,
        events=None,  # type: ignore[arg-type]
        accounts=None,  # type: ignore[arg-type]
        admin_environment=contextlib.nullcontext,
        console=ConsoleFiles(dist),
    )
    return Client(gateway)


def test_index_and_assets_are_served_without_a_token_under_the_csp(client: Client) -> None:
    # Given a built console, When its index and an asset are fetched without a token
    index = client.get("/console/")
    asset = client.get("/console/assets/index-1.js")
    # Then both are served, typed, with the strict policy (no inline script) and nosniff
    assert index.status_code == 200
    assert index.data == INDEX
    assert index.headers["Content-Type"] == "text/html; charset=utf-8"
    assert index.headers["Cache-Control"] == "no-cache"
    assert asset.status_code == 200
    assert asset.headers["Content-Type"] == "text/javascript; charset=utf-8"
    assert asset.headers["Cache-Control"] == "public, max-age=31536000, immutable"
    for answer in (index, asset):
        assert answer.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert "script-src 'self';" in CONTENT_SECURITY_POLICY
    assert "unsafe-inline" not in CONTENT_SECURITY_POLICY


def test_console_without_slash_redirects(client: Client) -> None:
    answer = client.get("/console")
    assert answer.status_code == 308
    assert answer.headers["Location"] == "/console/"


@pytest.mark.parametrize("path", ["/console/../secret.txt", "/console/%2e%2e/secret.txt", "/console/nope.js"])
def test_nothing_outside_the_build_is_served(client: Client, path: str) -> None:
    answer = client.get(path)
    assert answer.status_code == 404
    assert b"not served" not in answer.data


def test_only_get_and_head(client: Client) -> None:
    answer = client.post("/console/", data=b"x")
    assert answer.status_code == 405
    assert answer.headers["Allow"] == "GET, HEAD"


def test_api_routes_still_need_a_token(client: Client) -> None:
    answer = client.get("/jobs")
    assert answer.status_code == 401
    assert b"invoked" not in answer.data


def test_an_unbuilt_console_says_how_to_build_it(tmp_path: Path) -> None:
    answer = Client(ConsoleFilesApp(ConsoleFiles(tmp_path / "missing"))).get("/console/")
    assert answer.status_code == 503
    assert answer.data.decode() == NOT_BUILT_MESSAGE


class ConsoleFilesApp:
    """ConsoleFiles alone as a WSGI app."""

    def __init__(self, files: ConsoleFiles) -> None:
        self._files = files

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Any:
        return self._files.answer(Request(environ))(environ, start_response)
