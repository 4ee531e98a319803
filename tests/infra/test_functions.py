"""The three Lambdas: runtime, code asset, layer, tracing, roles, and the settings they are given."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.machine_classes import MACHINE_CLASSES
from functions.settings import load_settings
from tests.infra.conftest import Synth

pytestmark = pytest.mark.infra

HANDLERS = {
    "api": "functions.handlers.api.handler",
    "batch_events": "functions.handlers.batch_events.handler",
    "meter": "functions.handlers.meter.handler",
}
ENVIRONMENT = {
    "POWERTOOLS_SERVICE_NAME",
    "REMOTE_BATCH_JOBS_TABLE",
    "REMOTE_BATCH_ACCOUNTS_TABLE",
    "REMOTE_BATCH_LEDGER_TABLE",
    "REMOTE_BATCH_IDEMPOTENCY_TABLE",
    "REMOTE_BATCH_EMAIL_TOPIC_ARN",
    "REMOTE_BATCH_ZONES",
}


def _function(synth: Synth, name: str) -> dict[str, Any]:
    function = getattr(synth.stack.functions, name)
    return synth.template_json["Resources"][synth.logical_id(function)]["Properties"]


def _render(value: Any) -> str:
    """A CloudFormation string expression with every reference replaced by a readable stand-in."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(_render(part) for part in parts)
    if "Ref" in value:
        return f"ref-{value['Ref']}"
    if "Fn::GetAtt" in value:
        return "arn-" + "-".join(value["Fn::GetAtt"])
    raise AssertionError(f"unexpected expression {value}")


@pytest.mark.parametrize("name", HANDLERS)
def test_function_runtime_and_handler(synth: Synth, name: str) -> None:
    props = _function(synth, name)

    assert props["Runtime"] == "python3.12"
    assert props["Architectures"] == ["arm64"]
    assert props["Handler"] == HANDLERS[name]
    assert props["TracingConfig"] == {"Mode": "Active"}
    (layer,) = props["Layers"]
    assert ":017000801446:layer:AWSLambdaPowertoolsPythonV3-python312-arm64:" in _render(layer)


@pytest.mark.parametrize("name", HANDLERS)
def test_function_logs_are_kept_14_days(synth: Synth, name: str) -> None:
    log_group = _function(synth, name)["LoggingConfig"]["LogGroup"]["Ref"]

    assert synth.template_json["Resources"][log_group]["Properties"]["RetentionInDays"] == 14


@pytest.mark.parametrize("name", HANDLERS)
def test_function_settings_load(synth: Synth, name: str) -> None:
    variables = _function(synth, name)["Environment"]["Variables"]
    environ = {key: _render(value) for key, value in variables.items()} | {"AWS_REGION": "us-east-1"}

    settings = load_settings(environ)

    assert set(variables) == ENVIRONMENT
    zone = settings.zones["UnitedStates"]
    assert set(zone.routes) == set(MACHINE_CLASSES)
    queue = synth.logical_id(synth.stack.compute.job_queue)
    assert {route.job_queue for route in zone.routes.values()} == {f"arn-{queue}-JobQueueArn"}
    assert zone.log_group == f"ref-{synth.logical_id(synth.stack.compute.job_log_group)}"
    assert zone.bucket == f"ref-{synth.logical_id(synth.stack.data.bucket)}"


def test_each_function_has_its_own_role(synth: Synth) -> None:
    roles = [_function(synth, name)["Role"]["Fn::GetAtt"][0] for name in HANDLERS]

    assert len(set(roles)) == len(HANDLERS)


def test_code_asset_holds_only_the_functions_package(synth: Synth) -> None:
    code = _function(synth, "api")["Code"]
    asset_hash = code["S3Key"].removesuffix(".zip")
    asset_dir = synth.outdir / f"asset.{asset_hash}"

    assert [p.name for p in asset_dir.iterdir()] == ["functions"]
    assert (asset_dir / "functions" / "settings.py").is_file()
    assert not list(asset_dir.rglob("__pycache__"))
