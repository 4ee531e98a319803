"""functions/settings.py: each variable read once, strict booleans, JSON parsed, errors without values."""

from __future__ import annotations

import json

import pytest

from functions.domain.machine_classes import MACHINE_CLASSES, GeoZone
from functions.domain.runtime import PythonRuntime
from functions.settings import RouteSettings, Settings, SettingsError, ZoneSettings, load_settings

SECRET_LOOKING = "arn:aws:kms:us-east-1:123456789012:key/very-secret-0123"


def settings() -> Settings:
    route = RouteSettings(job_queue="queue-basic", job_definition="definition-basic")
    zone = ZoneSettings(
        region="us-east-1", bucket="data-us", log_group="/jobs", routes=dict.fromkeys(MACHINE_CLASSES, route)
    )
    return Settings(
        jobs_table="t-jobs",
        accounts_table="t-accounts",
        ledger_table="t-ledger",
        idempotency_table="t-idem",
        operations_table="t-ops",
        computes_table="computes-table",
        compute_prefix="remote-batch-test",
        quotas_table="t-quotas",
        email_topic_arn_prefix="arn:aws:sns:us-east-1:123456789012:rb-email-",
        email_topic_key=SECRET_LOOKING,
        sms_per_account_per_hour=12,
        home_region="us-east-1",
        zones={GeoZone.UNITED_STATES: zone},
        allow_http_webhooks=True,
    )


def environ(**changes: str | None) -> dict[str, str]:
    env = settings().to_environment()
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def failure(env: dict[str, str]) -> str:
    with pytest.raises(SettingsError) as caught:
        load_settings(env)
    message = str(caught.value)
    assert caught.value.__cause__ is None  # the ValidationError (holding the values) is not chained
    return message


def test_the_environment_round_trips() -> None:
    assert load_settings(environ()) == settings()


def test_a_process_variable_never_leaks_into_settings_built_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REMOTE_BATCH_ALLOW_HTTP_WEBHOOKS", "true")
    monkeypatch.setenv("REMOTE_BATCH_SMS_PER_ACCOUNT_PER_HOUR", "99")
    built = Settings(
        **{**settings().model_dump(), "allow_http_webhooks": False, "sms_per_account_per_hour": 30}
    )
    assert built.allow_http_webhooks is False
    assert built.sms_per_account_per_hour == 30


def test_os_environ_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in environ().items():
        monkeypatch.setenv(name, value)
    assert load_settings() == settings()


@pytest.mark.parametrize(("text", "expected"), [("true", True), ("FALSE", False), ("True", True)])
def test_booleans_are_true_or_false_in_any_case(text: str, expected: bool) -> None:
    assert load_settings(environ(REMOTE_BATCH_ALLOW_HTTP_WEBHOOKS=text)).allow_http_webhooks is expected


@pytest.mark.parametrize("text", ["ture", "yes", "1", "on", "no", "0", "f"])
def test_a_misspelt_boolean_is_an_error_naming_the_variable_never_false(text: str) -> None:
    message = failure(environ(REMOTE_BATCH_ALLOW_HTTP_WEBHOOKS=text))
    assert (
        message == "malformed remote-batch settings: REMOTE_BATCH_ALLOW_HTTP_WEBHOOKS: must be true or false"
    )


def test_optional_variables_take_their_defaults_when_absent_or_empty() -> None:
    loaded = load_settings(
        environ(
            REMOTE_BATCH_ALLOW_HTTP_WEBHOOKS=None,
            REMOTE_BATCH_SMS_PER_ACCOUNT_PER_HOUR="",
            REMOTE_BATCH_EMAIL_TOPIC_KEY=None,
        )
    )
    assert loaded.allow_http_webhooks is False
    assert loaded.sms_per_account_per_hour == 30
    assert loaded.email_topic_key == ""


def test_missing_and_empty_required_variables_are_named_together() -> None:
    message = failure(environ(REMOTE_BATCH_JOBS_TABLE=None, REMOTE_BATCH_ZONES="", AWS_REGION=None))
    assert message == (
        "missing environment variables: REMOTE_BATCH_JOBS_TABLE, AWS_REGION, REMOTE_BATCH_ZONES"
    )


def test_zones_that_are_not_json_name_the_variable_not_the_text() -> None:
    text = '{"UnitedStates": ' + json.dumps(SECRET_LOOKING)
    message = failure(environ(REMOTE_BATCH_ZONES=text))
    assert message.startswith("malformed remote-batch settings: REMOTE_BATCH_ZONES: is not JSON")
    assert SECRET_LOOKING not in message
    assert "very-secret" not in message


def test_zones_json_is_validated_with_its_path() -> None:
    zones = json.loads(environ()["REMOTE_BATCH_ZONES"])
    del zones["UnitedStates"]["routes"]["Basic1x8"]
    zones["UnitedStates"]["bucket"] = "x"
    message = failure(environ(REMOTE_BATCH_ZONES=json.dumps(zones)))
    assert "REMOTE_BATCH_ZONES.UnitedStates.bucket: String should have at least 3 characters" in message
    assert "REMOTE_BATCH_ZONES.UnitedStates.routes: no job queue for machine classes ['Basic1x8']" in message


def test_an_unknown_zone_is_named() -> None:
    zones = json.loads(environ()["REMOTE_BATCH_ZONES"])
    zones["Mars"] = zones.pop("UnitedStates")
    message = failure(environ(REMOTE_BATCH_ZONES=json.dumps(zones)))
    assert "REMOTE_BATCH_ZONES.Mars.[key]: Input should be 'UnitedStates' or 'EuropeanUnion'" in message


def test_empty_zones_are_refused() -> None:
    message = failure(environ(REMOTE_BATCH_ZONES="{}"))
    assert message.startswith("malformed remote-batch settings: REMOTE_BATCH_ZONES:")
    assert "at least 1 item" in message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("12x", "Input should be a valid integer, unable to parse string as an integer"),
        ("-1", "Input should be greater than or equal to 0"),
        ("10001", "Input should be less than or equal to 10000"),
    ],
)
def test_a_bad_sms_limit_names_the_variable_not_the_value(value: str, expected: str) -> None:
    message = failure(environ(REMOTE_BATCH_SMS_PER_ACCOUNT_PER_HOUR=value))
    assert message == f"malformed remote-batch settings: REMOTE_BATCH_SMS_PER_ACCOUNT_PER_HOUR: {expected}"
    assert value not in message.split(": ", 2)[2]


def test_a_bad_topic_prefix_never_echoes_the_value() -> None:
    value = "arn:aws:sns:us-east-1:123456789012:has space/" + "s3cr3t-token"
    message = failure(environ(REMOTE_BATCH_EMAIL_TOPIC_ARN_PREFIX=value))
    assert message.startswith(
        "malformed remote-batch settings: REMOTE_BATCH_EMAIL_TOPIC_ARN_PREFIX: String should match pattern"
    )
    assert "s3cr3t-token" not in message


def test_a_short_table_name_is_named() -> None:
    message = failure(environ(REMOTE_BATCH_LEDGER_TABLE="ab"))
    assert message == (
        "malformed remote-batch settings: REMOTE_BATCH_LEDGER_TABLE: String should have at least 3 characters"
    )


def test_every_malformed_variable_is_reported_at_once() -> None:
    message = failure(
        environ(REMOTE_BATCH_ALLOW_HTTP_WEBHOOKS="ture", REMOTE_BATCH_SMS_PER_ACCOUNT_PER_HOUR="x")
    )
    assert "REMOTE_BATCH_ALLOW_HTTP_WEBHOOKS: must be true or false" in message
    assert "REMOTE_BATCH_SMS_PER_ACCOUNT_PER_HOUR:" in message


def test_the_python_versions_default_to_the_images_and_are_validated() -> None:
    default = load_settings(environ(REMOTE_BATCH_PYTHON_VERSIONS=None, REMOTE_BATCH_DEFAULT_PYTHON=None))
    assert default.python_runtime == PythonRuntime(versions=("3.11", "3.12", "3.13"), default="3.12")
    local = load_settings(
        environ(
            REMOTE_BATCH_PYTHON_VERSIONS="3.11, 3.13",
            REMOTE_BATCH_DEFAULT_PYTHON="3.11",
            REMOTE_BATCH_PYTHON_INTERPRETERS='{"3.11": "CPython 3.11.7 (/usr/bin/python3.11)"}',
        )
    )
    assert local.python_runtime == PythonRuntime(
        versions=("3.11", "3.13"),
        default="3.11",
        interpreters={"3.11": "CPython 3.11.7 (/usr/bin/python3.11)"},
    )
    assert load_settings(local.to_environment()) == local
    message = failure(environ(REMOTE_BATCH_PYTHON_VERSIONS="3.11.7"))
    assert message.startswith("malformed remote-batch settings: REMOTE_BATCH_PYTHON_VERSIONS")
    assert "REMOTE_BATCH_DEFAULT_PYTHON 3.12 is not one of" in failure(
        environ(REMOTE_BATCH_PYTHON_VERSIONS="3.13")
    )
