"""The four Lambdas: runtime, code asset, dependencies layer, tracing, roles, and the settings they get."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from functions.domain.images import ImagePolicy
from functions.domain.machine_classes import MACHINE_CLASSES, GeoZone
from functions.domain.runtime import PythonRuntime
from functions.settings import load_settings
from infra import constants, lambda_bundle
from tests.infra.conftest import REPO_ROOT, ZONE_REGIONS, Synth, check_compiled

HANDLERS = {
    "api": "functions.handlers.api.handler",
    "batch_events": "functions.handlers.batch_events.handler",
    "meter": "functions.handlers.meter.handler",
    "dispatcher": "functions.handlers.dispatcher.handler",
}
ENVIRONMENT = {
    "POWERTOOLS_SERVICE_NAME",
    "REMOTE_BATCH_JOBS_TABLE",
    "REMOTE_BATCH_ACCOUNTS_TABLE",
    "REMOTE_BATCH_LEDGER_TABLE",
    "REMOTE_BATCH_IDEMPOTENCY_TABLE",
    "REMOTE_BATCH_OPERATIONS_TABLE",
    "REMOTE_BATCH_COMPUTES_TABLE",
    "REMOTE_BATCH_COMPUTE_PREFIX",
    "REMOTE_BATCH_QUOTAS_TABLE",
    # The dispatch queue and the dispatcher's SubmitJob pacing (functions/logic/dispatch_rules.py).
    "REMOTE_BATCH_DISPATCH_QUEUE_URL",
    "REMOTE_BATCH_DISPATCH_TPS",
    "REMOTE_BATCH_DISPATCH_CONCURRENCY",
    "REMOTE_BATCH_EMAIL_TOPIC_ARN_PREFIX",
    "REMOTE_BATCH_EMAIL_TOPIC_KEY",
    "REMOTE_BATCH_ZONES",
    # The Python versions jobs run on (one worker image each) and the default, served by GET /runtime.
    "REMOTE_BATCH_PYTHON_VERSIONS",
    "REMOTE_BATCH_DEFAULT_PYTHON",
    # Where environments' own images may come from (functions/domain/images.py).
    "REMOTE_BATCH_IMAGES",
}


def _function(synth: Synth, name: str) -> dict[str, Any]:
    function = getattr(synth.stack.functions, name)
    properties: dict[str, Any] = synth.template_json["Resources"][synth.logical_id(function)]["Properties"]
    return properties


ACCOUNT_ID = "123456789012"
# The longest a CloudFormation-generated physical id can resolve to here, as an SNS topic ARN
# ("arn:aws:sns:<region>:<account>:<stack>-<logical id>-<13 characters>"); tables are shorter.
GENERATED_ARN_PREFIX = f"arn:aws:sns:us-east-1:{ACCOUNT_ID}:"
GENERATED_SUFFIX = "-ABCDEFGHIJKLM"


def _render(value: Any, stack_name: str = "stack") -> str:
    """A CloudFormation string expression with every reference replaced by a stand-in as long as
    the value it resolves to (at most)."""
    if isinstance(value, str):
        return value
    if "Fn::Join" in value:
        separator: str
        parts: list[Any]
        separator, parts = value["Fn::Join"]
        return separator.join(_render(part, stack_name) for part in parts)
    if value.get("Ref") == "AWS::AccountId":
        return ACCOUNT_ID
    if "Ref" in value:
        return f"{GENERATED_ARN_PREFIX}{stack_name}-{value['Ref']}{GENERATED_SUFFIX}"
    if "Fn::GetAtt" in value:
        return f"{GENERATED_ARN_PREFIX}{stack_name}-{'-'.join(value['Fn::GetAtt'])}{GENERATED_SUFFIX}"
    raise AssertionError(f"unexpected expression {value}")


@pytest.mark.parametrize("name", HANDLERS)
def test_function_runtime_and_handler(synth: Synth, name: str) -> None:
    props = _function(synth, name)

    # The interpreter and machine the deployed-bundle test runs the layer on (test_deployed_bundle).
    assert props["Runtime"] == "python3.13"
    assert props["Architectures"] == ["x86_64"]
    assert props["Handler"] == HANDLERS[name]
    assert props["TracingConfig"] == {"Mode": "Active"}
    # One layer, built in this app from functions/requirements.lock: no public layer.
    (layer,) = props["Layers"]
    assert layer == {"Ref": synth.logical_id(synth.stack.functions.dependencies)}


def test_dependencies_layer_is_built_for_the_function_runtime(synth: Synth) -> None:
    layer = synth.template_json["Resources"][synth.logical_id(synth.stack.functions.dependencies)]

    assert layer["Properties"]["CompatibleRuntimes"] == ["python3.13"]
    assert layer["Properties"]["CompatibleArchitectures"] == ["x86_64"]
    assert "S3Key" in layer["Properties"]["Content"]


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
    assert {zone.value: z.region for zone, z in settings.zones.items()} == ZONE_REGIONS
    for zone, region in ZONE_REGIONS.items():
        zone_settings = settings.zones[GeoZone(zone)]
        assert set(zone_settings.routes) == set(MACHINE_CLASSES)
        # Names, not ARNs: the compute stacks create them with exactly these names.
        for machine_class, route in zone_settings.routes.items():
            assert route.job_queue == f"remote-batch-dev-{machine_class}"
            # The base of the class's definitions: the api adds the job's Python (-py312).
            assert route.job_definition == f"remote-batch-dev-{machine_class}"
        assert zone_settings.bucket == f"remote-batch-dev-data-{ACCOUNT_ID}-{region}"
        assert zone_settings.log_group == "/remote-batch/dev/jobs"
    assert settings.python_runtime == PythonRuntime(versions=("3.11", "3.12", "3.13"), default="3.12")
    assert settings.images is not None
    assert settings.images.policy == ImagePolicy(
        ACCOUNT_ID, "remote-batch-dev-images/", "remote-batch/dev/registry/"
    )


@pytest.mark.parametrize("name", HANDLERS)
def test_function_environment_stays_under_lambdas_4_kb(
    synth: Synth, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    variables = _function(synth, name)["Environment"]["Variables"]
    # Lambda counts keys and values; AWS_REGION and friends are reserved and not counted.
    resolved = {key: _render(value, synth.stack.stack_name) for key, value in variables.items()}

    size = sum(len(key.encode()) + len(value.encode()) for key, value in resolved.items())

    assert size < constants.LAMBDA_ENVIRONMENT_MAX_BYTES
    if name == "api":
        with capsys.disabled():
            print(f"\nlambda environment, estimated resolved size: {size} bytes", end="")


def test_each_function_has_its_own_role(synth: Synth) -> None:
    roles = [_function(synth, name)["Role"]["Fn::GetAtt"][0] for name in HANDLERS]

    assert len(set(roles)) == len(HANDLERS)


def test_code_asset_holds_only_the_functions_package(synth: Synth) -> None:
    code = _function(synth, "api")["Code"]
    asset_hash = code["S3Key"].removesuffix(".zip")
    asset_dir = synth.outdir / f"asset.{asset_hash}"

    assert [p.name for p in asset_dir.iterdir()] == ["functions"]
    assert (asset_dir / "functions" / "settings.py").is_file()
    # The sources of functions/ as they are in the repository, and nothing else besides their .pyc.
    shipped = sorted(p.relative_to(asset_dir) for p in asset_dir.rglob("*") if p.is_file())
    sources = [p.relative_to(REPO_ROOT) for p in lambda_bundle.code_files(REPO_ROOT / "functions")]
    assert [p for p in shipped if p.suffix != ".pyc"] == sources
    for source in sources:
        assert (asset_dir / source).read_bytes() == (REPO_ROOT / source).read_bytes()
    # The lock files are build inputs of the layer, not code.
    assert not list(asset_dir.rglob("*.lock"))
    assert not list(asset_dir.rglob("*.in"))


def test_code_asset_ships_each_module_compiled_for_the_lambda_runtime(synth: Synth, tmp_path: Path) -> None:
    """Each module's .pyc is in the asset, one per module, loadable by the runtime's Python whatever
    the mtimes Lambda's unzip leaves: read by a Python LAMBDA_PYTHON_VERSION (asserted), its magic
    number is that interpreter's, its PEP 552 flags say hash-based and unchecked (1), it holds the
    source's hash and the module's code under /var/task, Lambda's task root."""
    code = _function(synth, "api")["Code"]
    asset_dir = synth.outdir / f"asset.{code['S3Key'].removesuffix('.zip')}"

    report = check_compiled(asset_dir, tmp_path)

    assert report["python"].startswith(constants.LAMBDA_PYTHON_VERSION + ".")
    assert report["modules"] > 50
    assert (report["missing"], report["stray"], report["hash_mismatches"]) == ([], [], [])
    assert report["magic_ok"] is True
    assert report["flags"] == [0b01]  # hash-based, check_source off
    for module, filename in report["filenames"].items():
        assert filename == f"/var/task/{module}", module
