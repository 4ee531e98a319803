"""The account a client acts in (X-Account-Id from connect(account=), REMOTE_BATCH_ACCOUNT or the
CLI's --account) and the members functions and commands, against a fake server."""

from __future__ import annotations

import json

import pytest
from pytest_httpserver import HTTPServer
from typer.testing import CliRunner

import remote_batch as rb
from remote_batch.cli import app
from tests.sdk.conftest import TOKEN, Recorder, error, ok

MEMBERS = {
    "accountId": "lab",
    "members": [
        {"userId": "lab", "role": "owner", "updatedAt": None, "updatedBy": None},
        {"userId": "rita", "role": "reader", "updatedAt": "2026-12-01T07:00:00Z", "updatedBy": "lab"},
    ],
}


def test_without_an_account_no_header_is_sent(httpserver: HTTPServer, api: rb.Client) -> None:
    recorder = Recorder(ok({"machineClasses": []}))
    httpserver.expect_request("/machine-classes").respond_with_handler(recorder)
    rb.machine_classes()
    assert "X-Account-Id" not in recorder.requests[0]["headers"]


def test_connect_account_names_the_account_of_every_request(httpserver: HTTPServer) -> None:
    rb.connect(httpserver.url_for("").rstrip("/"), TOKEN, account="lab")
    recorder = Recorder(ok(MEMBERS), ok({}, 204))
    httpserver.expect_request("/account/members").respond_with_handler(recorder)
    httpserver.expect_request("/account/members/rita", method="DELETE").respond_with_handler(recorder)
    found = rb.members()
    rb.remove_member("rita")
    assert [(m.user_id, m.role, m.updated_by) for m in found] == [
        ("lab", "owner", None),
        ("rita", "reader", "lab"),
    ]
    assert [r["headers"]["X-Account-Id"] for r in recorder.requests] == ["lab", "lab"]


def test_the_environment_names_the_account(httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REMOTE_BATCH_ACCOUNT", "lab")
    rb.connect(httpserver.url_for("").rstrip("/"), TOKEN)
    recorder = Recorder(ok({"userId": "rita", "role": "contributor", "updatedAt": None, "updatedBy": "lab"}))
    httpserver.expect_request("/account/members/rita", method="PUT").respond_with_handler(recorder)
    member = rb.set_member("rita", "contributor")
    assert (member.user_id, member.role) == ("rita", "contributor")
    assert recorder.requests[0]["headers"]["X-Account-Id"] == "lab"
    assert json.loads(recorder.requests[0]["body"]) == {"role": "contributor"}


def test_a_denied_action_is_forbidden_with_the_services_message(
    httpserver: HTTPServer, api: rb.Client
) -> None:
    message = "This request needs jobs/write; your role reader in account lab does not have it."
    httpserver.expect_request("/jobs", method="POST").respond_with_response(error(403, "Forbidden", message))
    with pytest.raises(rb.Forbidden, match="needs jobs/write"):
        rb.submit("1")


def test_the_cli_acts_in_the_account_given(httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REMOTE_BATCH_ENDPOINT", httpserver.url_for("").rstrip("/"))
    monkeypatch.setenv("REMOTE_BATCH_TOKEN", TOKEN)
    recorder = Recorder(ok(MEMBERS))
    httpserver.expect_request("/account/members").respond_with_handler(recorder)
    result = CliRunner().invoke(app, ["--account", "lab", "members", "list"])
    assert result.exit_code == 0, result.output
    assert "rita" in result.output and "reader" in result.output
    assert recorder.requests[0]["headers"]["X-Account-Id"] == "lab"
    result = CliRunner().invoke(app, ["--account", "lab", "members", "list", "--json"])
    # --json is the API's document, camelCase, as every read command prints it
    assert json.loads(result.output) == MEMBERS["members"]
