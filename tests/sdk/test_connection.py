"""Where the SDK finds its endpoint and token, and Cognito login and refresh over HTTPS."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer
from typer.testing import CliRunner

import remote_batch as rb
from remote_batch import config
from remote_batch.cli import app
from tests.sdk.conftest import TOKEN, Recorder, ok


def write_local_credentials(folder: Path, endpoint: str) -> None:
    (folder / ".remote-batch").mkdir()
    document = {"endpoint": endpoint, "tokens": {"dev": "rb_dev", "admin": "rb_admin"}}
    (folder / ".remote-batch" / "credentials.json").write_text(json.dumps(document))


def test_nothing_configured_says_every_place_it_looked() -> None:
    with pytest.raises(rb.ConfigurationError) as caught:
        rb.connect()
    message = str(caught.value)
    assert "rb.connect(endpoint, token)" in message and "REMOTE_BATCH_ENDPOINT" in message
    assert str(config.profiles_path()) in message and ".remote-batch/credentials.json" in message


def test_the_local_stacks_credentials_in_the_working_directory(tmp_path: Path) -> None:
    write_local_credentials(Path.cwd(), "http://127.0.0.1:8787")
    client = rb.connect()
    assert client.endpoint == "http://127.0.0.1:8787"
    assert client.profile.token == "rb_dev"
    assert client.profile.source.startswith("local stack ")


def test_local_account_can_be_chosen(monkeypatch: pytest.MonkeyPatch) -> None:
    write_local_credentials(Path.cwd(), "http://127.0.0.1:8787")
    monkeypatch.setenv("REMOTE_BATCH_LOCAL_ACCOUNT", "admin")
    assert rb.connect().profile.token == "rb_admin"
    monkeypatch.setenv("REMOTE_BATCH_LOCAL_ACCOUNT", "carol")
    with pytest.raises(rb.ConfigurationError, match="has no account 'carol' \\(it has: admin, dev\\)"):
        rb.connect()


def test_a_profile_wins_over_the_local_stack() -> None:
    write_local_credentials(Path.cwd(), "http://127.0.0.1:8787")
    config.save_profile("default", rb.Profile(endpoint="https://api.example.com/prod", token="jwt"))
    client = rb.connect()
    assert (client.endpoint, client.profile.token) == ("https://api.example.com/prod", "jwt")
    assert client.profile_name == "default"


def test_the_environment_wins_over_a_profile(monkeypatch: pytest.MonkeyPatch) -> None:
    config.save_profile("default", rb.Profile(endpoint="https://api.example.com/prod", token="jwt"))
    monkeypatch.setenv("REMOTE_BATCH_ENDPOINT", "http://127.0.0.1:1234")
    monkeypatch.setenv("REMOTE_BATCH_TOKEN", "env-token")
    client = rb.connect()
    assert (client.endpoint, client.profile.token, client.profile.source) == (
        "http://127.0.0.1:1234",
        "env-token",
        "environment",
    )


def test_connect_wins_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REMOTE_BATCH_ENDPOINT", "http://127.0.0.1:1234")
    monkeypatch.setenv("REMOTE_BATCH_TOKEN", "env-token")
    assert rb.connect("http://127.0.0.1:5678", "mine").profile.token == "mine"


def test_half_an_environment_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REMOTE_BATCH_ENDPOINT", "http://127.0.0.1:1234")
    with pytest.raises(rb.ConfigurationError, match="REMOTE_BATCH_TOKEN is not set"):
        rb.connect()


def test_a_named_profile_that_does_not_exist_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    write_local_credentials(Path.cwd(), "http://127.0.0.1:8787")
    monkeypatch.setenv("REMOTE_BATCH_PROFILE", "work")
    with pytest.raises(rb.ConfigurationError, match="No profile 'work'"):
        rb.connect()


def test_profiles_are_private_to_their_owner() -> None:
    path = config.save_profile("default", rb.Profile(endpoint="https://x", token="t", refresh_token="r"))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert json.loads(path.read_text())["profiles"]["default"] == {
        "endpoint": "https://x",
        "token": "t",
        "refresh_token": "r",
    }


def cognito_result(id_token: str, refresh: str | None = None) -> dict[str, object]:
    result: dict[str, object] = {"IdToken": id_token, "AccessToken": "access", "ExpiresIn": 3600}
    if refresh:
        result["RefreshToken"] = refresh
    return {"AuthenticationResult": result}


def test_an_expired_token_is_refreshed_and_stored(httpserver: HTTPServer) -> None:
    cognito = Recorder(ok(cognito_result("fresh-jwt")))
    httpserver.expect_request("/cognito", method="POST").respond_with_handler(cognito)
    api = Recorder(
        ok({"accountId": "u-1", "creditBalance": 5, "email": None, "phone": None, "roles": ["user"]})
    )
    httpserver.expect_request("/account").respond_with_handler(api)
    expired = rb.Profile(
        endpoint=httpserver.url_for("").rstrip("/"),
        token="old-jwt",
        refresh_token="refresh-1",
        client_id="client-1",
        region="eu-west-1",
        expires_at=time.time() - 5,
        cognito_endpoint=httpserver.url_for("/cognito"),
    )
    config.save_profile("default", expired)

    assert rb.account().account_id == "u-1"

    request = cognito.requests[0]
    assert request["headers"]["X-Amz-Target"] == "AWSCognitoIdentityProviderService.InitiateAuth"
    assert request["headers"]["Content-Type"] == "application/x-amz-json-1.1"
    assert json.loads(request["body"]) == {
        "AuthFlow": "REFRESH_TOKEN_AUTH",
        "ClientId": "client-1",
        "AuthParameters": {"REFRESH_TOKEN": "refresh-1"},
    }
    assert api.requests[0]["headers"]["Authorization"] == "Bearer fresh-jwt"
    stored = config.load_profile("default")
    assert stored is not None and stored.token == "fresh-jwt" and stored.refresh_token == "refresh-1"
    assert stored.expires_at is not None and stored.expires_at > time.time() + 3000


def test_a_401_refreshes_once_and_resends(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/cognito", method="POST").respond_with_json(cognito_result("fresh-jwt"))
    api = Recorder(
        ok({"message": "Unauthorized"}, 401),
        ok({"accountId": "u-1", "creditBalance": 5, "email": None, "phone": None, "roles": []}),
    )
    httpserver.expect_request("/account").respond_with_handler(api)
    profile = rb.Profile(
        endpoint=httpserver.url_for("").rstrip("/"),
        token="revoked",
        refresh_token="refresh-1",
        client_id="client-1",
        region="eu-west-1",
        expires_at=time.time() + 3000,
        cognito_endpoint=httpserver.url_for("/cognito"),
    )
    assert rb.account(client=rb.Client(profile)).account_id == "u-1"
    assert [r["headers"]["Authorization"] for r in api.requests] == ["Bearer revoked", "Bearer fresh-jwt"]


def test_a_refused_refresh_says_to_log_in_again(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/cognito", method="POST").respond_with_json(
        {"__type": "NotAuthorizedException", "message": "Refresh Token has expired"}, status=400
    )
    profile = rb.Profile(
        endpoint=httpserver.url_for("").rstrip("/"),
        token="old",
        refresh_token="refresh-1",
        client_id="client-1",
        region="eu-west-1",
        expires_at=time.time() - 1,
        cognito_endpoint=httpserver.url_for("/cognito"),
    )
    with pytest.raises(rb.LoginFailed, match="NotAuthorizedException: Refresh Token has expired"):
        rb.account(client=rb.Client(profile))


def test_login_answers_the_mfa_challenge_and_writes_the_profile(httpserver: HTTPServer) -> None:
    cognito = Recorder(
        ok({"ChallengeName": "SOFTWARE_TOKEN_MFA", "Session": "s-1", "ChallengeParameters": {}}),
        ok(cognito_result("id-jwt", "refresh-9")),
    )
    httpserver.expect_request("/cognito", method="POST").respond_with_handler(cognito)
    account = {
        "accountId": "sub-1",
        "creditBalance": 10,
        "email": "a@example.com",
        "phone": None,
        "roles": [],
    }
    api = Recorder(ok(account))
    httpserver.expect_request("/prod/account").respond_with_handler(api)
    endpoint = httpserver.url_for("/prod")

    result = CliRunner().invoke(
        app,
        ["login", "--endpoint", endpoint, "--client-id", "c-1", "--region", "us-east-1",
         "--username", "a@example.com", "--profile", "work",
         "--cognito-endpoint", httpserver.url_for("/cognito")],
        input="s3cret-Passw0rd!\n123456\n",
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert "signed in as sub-1" in result.output
    first, second = (json.loads(r["body"]) for r in cognito.requests)
    assert first == {
        "AuthFlow": "USER_PASSWORD_AUTH",
        "ClientId": "c-1",
        "AuthParameters": {"USERNAME": "a@example.com", "PASSWORD": "s3cret-Passw0rd!"},
    }
    assert second == {
        "ClientId": "c-1",
        "ChallengeName": "SOFTWARE_TOKEN_MFA",
        "Session": "s-1",
        "ChallengeResponses": {"USERNAME": "a@example.com", "SOFTWARE_TOKEN_MFA_CODE": "123456"},
    }
    assert api.requests[0]["headers"]["Authorization"] == "Bearer id-jwt"
    stored = config.load_profile("work")
    assert stored is not None
    assert (stored.endpoint, stored.token, stored.refresh_token, stored.client_id, stored.region) == (
        endpoint,
        "id-jwt",
        "refresh-9",
        "c-1",
        "us-east-1",
    )


def test_login_with_a_wrong_password_prints_cognitos_message(httpserver: HTTPServer) -> None:
    httpserver.expect_request("/cognito", method="POST").respond_with_json(
        {"__type": "NotAuthorizedException", "message": "Incorrect username or password."}, status=400
    )
    result = CliRunner().invoke(
        app,
        ["login", "--endpoint", "https://abc.execute-api.eu-west-1.amazonaws.com/prod", "--client-id", "c-1",
         "--username", "a@example.com", "--cognito-endpoint", httpserver.url_for("/cognito")],
        input="wrong\n",
    )  # fmt: skip
    assert result.exit_code == 1
    assert "Error: NotAuthorizedException: Incorrect username or password." in result.output
    assert "Traceback" not in result.output
    assert config.load_profile("default") is None


def test_the_token_is_not_used_before_it_is_needed() -> None:
    """A client of a profile without a token is refused at once, naming the fix."""
    with pytest.raises(rb.ConfigurationError, match="run `remote-batch login`"):
        rb.Client(rb.Profile(endpoint="https://x", token=None, source="profile default"))


def test_the_environment_token_is_sent(httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REMOTE_BATCH_ENDPOINT", httpserver.url_for("").rstrip("/"))
    monkeypatch.setenv("REMOTE_BATCH_TOKEN", TOKEN)
    recorder = Recorder(ok({"machineClasses": []}))
    httpserver.expect_request("/machine-classes").respond_with_handler(recorder)
    assert rb.machine_classes() == []
    assert recorder.requests[0]["headers"]["Authorization"] == f"Bearer {TOKEN}"
