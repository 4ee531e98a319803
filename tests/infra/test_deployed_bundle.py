"""What is deployed is what is tested: the synthesized Lambda assets, run as Lambda would run them.

Versions: the layer that ``make lambda-bundle`` built, the layer zip in the synthesized cloud
assembly (the very file CDK uploads) and the venv the other tests run in all hold exactly
``functions/requirements.lock``.

Deployed bundle: for each handler, a fresh interpreter of the Lambda runtime's version (CPython
``LAMBDA_PYTHON_VERSION`` found on this machine by ``lambda_bundle.runtime_interpreter``; ``-I -S``: the
standard library only)
whose sys.path is the synthesized code asset, the synthesized layer zip unpacked and the runtime's SDK
(``functions/runtime.lock``, behind the layer as /var/runtime is on Lambda) imports the handler and
runs requests through it: ``GET /health`` (and a job read) through api, a ``Batch Job State Change``
through batch_events, a tick through meter. AWS is a moto server this process runs
(``AWS_ENDPOINT_URL``), so moto never enters the child; X-Ray segments go to a UDP socket here.
Select with ``-m bundle``.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import time
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from functions.domain.machine_classes import GeoZone
from functions.settings import Settings
from infra import constants, lambda_bundle
from tests.infra.conftest import Synth, check_compiled

pytestmark = pytest.mark.bundle

CHILD = Path(__file__).with_name("lambda_child.py")
# Nothing from the dev, local or worker extras, nor the client package or the worker, may be
# importable by a deployed function.
FORBIDDEN = ["moto", "aws_cdk", "remote_batch", "worker", "numpy", "requests", "tests", "pytest", "werkzeug"]
TRACE_HEADER = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"


def _function(synth: Synth, name: str) -> dict[str, Any]:
    function = getattr(synth.stack.functions, name)
    properties: dict[str, Any] = synth.template_json["Resources"][synth.logical_id(function)]["Properties"]
    return properties


def _asset_dir(synth: Synth, s3_key: str) -> Path:
    """A folder asset of the cloud assembly (CDK zips it at upload)."""
    asset = synth.outdir / f"asset.{s3_key.removesuffix('.zip')}"
    assert asset.is_dir(), f"{asset} is not in the cloud assembly"
    return asset


def _layer_asset(synth: Synth) -> Path:
    """The layer's zip in the cloud assembly: the file CDK uploads as is."""
    layer = synth.template_json["Resources"][synth.logical_id(synth.stack.functions.dependencies)]
    s3_key = layer["Properties"]["Content"]["S3Key"]
    asset = synth.outdir / f"asset.{s3_key}"
    assert asset.is_file(), f"{asset} is not in the cloud assembly"
    return asset


@pytest.fixture(scope="module")
def layer_dir(synth: Synth, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The synthesized layer zip unpacked, as Lambda unpacks it under /opt."""
    target = tmp_path_factory.mktemp("opt")
    with zipfile.ZipFile(_layer_asset(synth)) as archive:
        archive.extractall(target)
    return target


# -- versions ----------------------------------------------------------------------------------------


def test_lock_pins_every_package_the_functions_need() -> None:
    pins = lambda_bundle.read_pins()

    # The imports of functions/ (Powertools with Tracer and parser, pydantic, boto3, urllib3).
    for name in ("aws-lambda-powertools", "aws-xray-sdk", "pydantic", "pydantic-core", "boto3", "urllib3"):
        assert name in pins
    # Powertools' Depends (functions/handlers/api.py) appeared in 3.28.
    assert tuple(int(part) for part in pins["aws-lambda-powertools"].split(".")[:2]) >= (3, 28)
    lock_text = lambda_bundle.LOCK_FILE.read_text()
    assert lock_text.count("--hash=sha256:") >= len(pins)


def test_built_bundle_holds_the_locked_versions() -> None:
    pins = lambda_bundle.read_pins()

    built = lambda_bundle.installed_versions(lambda_bundle.LAYER_SITE)
    zipped = lambda_bundle.zip_versions(lambda_bundle.LAYER_ZIP)

    assert lambda_bundle.differences(pins, built) == []
    assert lambda_bundle.differences(pins, zipped) == []


def test_deployed_layer_asset_is_the_built_zip_of_the_locked_versions(synth: Synth) -> None:
    pins = lambda_bundle.read_pins()
    asset = _layer_asset(synth)

    deployed = lambda_bundle.zip_versions(asset)

    assert lambda_bundle.differences(pins, deployed) == []
    digest = hashlib.sha256(asset.read_bytes()).hexdigest()
    assert digest == hashlib.sha256(lambda_bundle.LAYER_ZIP.read_bytes()).hexdigest()


def test_layer_ships_every_module_compiled_for_the_lambda_runtime(tmp_path: Path) -> None:
    """Each module of the layer zip has its .pyc for Python LAMBDA_PYTHON_VERSION (its cache tag and
    magic number, read by that interpreter), unchecked-hash (PEP 552 flags 1): loaded as is whatever
    the mtimes after Lambda unzips the layer, never compiled at a cold start."""
    report = check_compiled(lambda_bundle.LAYER_ZIP, tmp_path)

    assert report["python"].startswith(constants.LAMBDA_PYTHON_VERSION + ".")
    assert report["modules"] > 500
    assert report["missing"] == []
    assert report["magic_ok"] is True
    assert report["flags"] == [0b01]


def test_layer_zip_is_reproducible(tmp_path: Path) -> None:
    """The same files zip to the same bytes whatever their mtimes: the layer's asset hash is stable."""
    source = tmp_path / "layer"
    (source / "python" / "pkg").mkdir(parents=True)
    (source / "python" / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    (source / "python" / "six.py").write_text("# six\n")
    lambda_bundle.write_zip(source, tmp_path / "first.zip")
    os.utime(source / "python" / "six.py", (1_000_000_000, 1_000_000_000))

    lambda_bundle.write_zip(source, tmp_path / "second.zip")

    assert (tmp_path / "first.zip").read_bytes() == (tmp_path / "second.zip").read_bytes()
    with zipfile.ZipFile(tmp_path / "second.zip") as archive:
        assert archive.namelist() == ["python/pkg/__init__.py", "python/six.py"]


def test_tests_run_the_deployed_versions() -> None:
    """The venv the unit and integration tests import from holds the bundle's versions."""
    pins = lambda_bundle.read_pins()
    built = lambda_bundle.zip_versions(lambda_bundle.LAYER_ZIP)

    tested = {name: metadata.version(name) for name in pins}

    assert lambda_bundle.differences(pins, tested) == []
    assert lambda_bundle.differences(built, tested) == []


def test_check_bundle_refuses_a_bundle_that_differs_from_the_lock(tmp_path: Path) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text("pydantic==2.14.4 \\\n    --hash=sha256:00\nboto3==1.44.8\n")
    site = tmp_path / "python"
    (site / "pydantic-2.14.4.dist-info").mkdir(parents=True)
    (site / "pydantic-2.14.4.dist-info" / "METADATA").write_text("Name: pydantic\nVersion: 2.14.4\n")
    (site / "boto3-1.40.0.dist-info").mkdir()
    (site / "boto3-1.40.0.dist-info" / "METADATA").write_text("Name: boto3\nVersion: 1.40.0\n")

    with pytest.raises(lambda_bundle.BundleError, match=r"boto3: locked 1\.44\.8, found 1\.40\.0"):
        lambda_bundle.check_bundle(site, lock)
    with pytest.raises(lambda_bundle.BundleError, match="run `make lambda-bundle`"):
        lambda_bundle.check_bundle(tmp_path / "missing", lock)


# -- the deployed bundle, run ------------------------------------------------------------------------


@dataclass
class Aws:
    """The moto server, the settings the functions get, and a job submitted through it."""

    endpoint: str
    settings: Settings
    job_id: str
    batch_job_id: str
    started_ms: int
    xray: socket.socket


@pytest.fixture(scope="module")
def aws() -> Iterator[Aws]:
    import logging

    from moto.server import ThreadedMotoServer

    from functions import bootstrap
    from functions.domain.jobs import Account
    from functions.handlers import api
    from tests.events import api_event
    from tests.fakes import FakeLambdaContext, RecordingBatchGateway, RecordingNotifier
    from tests.integration.conftest import create_resources, make_settings

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    xray = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    xray.bind(("127.0.0.1", 0))
    xray.settimeout(0.2)
    try:
        with pytest.MonkeyPatch.context() as env:
            env.setenv("AWS_ENDPOINT_URL", endpoint)
            settings = make_settings()
            create_resources(settings)
            # The job the children's events are about: submitted here (Batch is a recording fake:
            # moto's Batch cannot run jobs without Docker), stored in the moto server's tables.
            gateways = {zone: RecordingBatchGateway() for zone in GeoZone}
            services = bootstrap.build_services(
                settings, batch_gateways=gateways, notifier=RecordingNotifier()
            )
            services.store.create_account(
                Account(account_id="dev", credit_balance=Decimal("10000")),
                services.clock(),
            )
            bootstrap.install(services)
            try:
                response = api.handler(
                    api_event("POST", "/jobs", body={"code": "1", "machineClass": "Basic1x8"}),
                    FakeLambdaContext(),
                )
            finally:
                bootstrap.install(None)
            assert response["statusCode"] == 202, response
            job_id = json.loads(response["body"])["jobId"]
            stored = services.store.get_job(job_id)
            assert stored is not None
            assert stored.batch_job_id is not None
        yield Aws(endpoint, settings, job_id, stored.batch_job_id, int(time.time() * 1000), xray)
    finally:
        xray.close()
        server.stop()


def _child_environment(aws: Aws, name: str, asset: Path) -> dict[str, str]:
    """What Lambda sets for the function, plus the moto endpoint and the X-Ray daemon address."""
    xray_host, xray_port = aws.xray.getsockname()
    return {
        **aws.settings.to_environment(),
        "POWERTOOLS_SERVICE_NAME": constants.SERVICE_NAME,
        "AWS_ENDPOINT_URL": aws.endpoint,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": aws.settings.home_region,
        "AWS_DEFAULT_REGION": aws.settings.home_region,
        "AWS_LAMBDA_FUNCTION_NAME": f"remote-batch-{name}",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(constants.LAMBDA_MEMORY_MIB[name]),
        "AWS_EXECUTION_ENV": f"AWS_Lambda_python{constants.LAMBDA_PYTHON_VERSION}",
        "LAMBDA_TASK_ROOT": str(asset),
        "_HANDLER": constants.LAMBDA_HANDLERS[name],
        "_X_AMZN_TRACE_ID": TRACE_HEADER,
        "AWS_XRAY_DAEMON_ADDRESS": f"{xray_host}:{xray_port}",
        "POWERTOOLS_LOG_LEVEL": "WARNING",
        "LANG": "C.UTF-8",
    }


def _xray_segments(xray: socket.socket) -> list[dict[str, Any]]:
    segments: list[dict[str, Any]] = []
    while True:
        try:
            datagram = xray.recv(65536)
        except TimeoutError:
            return segments
        # Each datagram: a JSON header line, then the (sub)segment document.
        _header, _, body = datagram.decode().partition("\n")
        segments.append(json.loads(body))


def _run_child(
    aws: Aws, synth: Synth, layer_dir: Path, tmp_path: Path, name: str, events: list[dict[str, Any]]
) -> dict[str, Any]:
    props = _function(synth, name)
    asset = _asset_dir(synth, props["Code"]["S3Key"])
    layer = layer_dir / "python"
    spec = {
        "paths": {"asset": str(asset), "layer": str(layer), "runtime": str(lambda_bundle.RUNTIME_SITE)},
        "handler": props["Handler"],
        "function_name": f"remote-batch-{name}",
        "events": events,
        "forbidden": FORBIDDEN,
        "distributions": sorted(lambda_bundle.read_pins()),
        "report": str(tmp_path / f"{name}.json"),
    }
    spec_file = tmp_path / f"{name}-spec.json"
    spec_file.write_text(json.dumps(spec))
    result = subprocess.run(
        [lambda_bundle.runtime_interpreter(), "-I", "-S", "-B", str(CHILD), str(spec_file)],
        env=_child_environment(aws, name, asset),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"{name} handler failed in the deployed bundle:\n{result.stderr}"
    report: dict[str, Any] = json.loads(Path(spec["report"]).read_text())
    report["segments"] = _xray_segments(aws.xray)
    print(
        f"\n[{name}] python {report['python']} {report['machine']}; sys.path: "
        f"{[*report['sys_path'], *report['stdlib']]}\n[{name}] imported from the layer: "
        + ", ".join(f"{dist} {version}" for dist, version in sorted(report["versions"].items()))
        + f"\n[{name}] module origins: {report['origins']}\n[{name}] importable: {report['importable']}"
        + f"\n[{name}] X-Ray (sub)segments: {sorted({str(seg.get('name')) for seg in report['segments']})}"
        + f"\n[{name}] responses: "
        + json.dumps(report["responses"])[:600]
    )
    return report


def _assert_deployed_bundle_ran(report: dict[str, Any]) -> None:
    assert report["python"].startswith(constants.LAMBDA_PYTHON_VERSION + ".")
    assert report["machine"] == constants.LAMBDA_ARCHITECTURE
    # Only the standard library came with the interpreter: no site-packages of any kind.
    assert report["stdlib"], report
    assert not [path for path in report["stdlib"] if "-packages" in path]
    assert report["importable"] == dict.fromkeys(FORBIDDEN, False)
    # The layer shadows the runtime's SDK: nothing third-party was loaded from the runtime folder.
    assert report["origins"]["functions"] == "asset"
    for module in ("boto3", "botocore", "pydantic", "pydantic_core", "aws_lambda_powertools", "urllib3"):
        assert report["origins"].get(module) == "layer", (module, report["origins"])
    assert "runtime" not in report["origins"].values()
    assert report["versions"] == lambda_bundle.read_pins()
    # Every module of the code asset and of the layer was loaded from its shipped .pyc, none compiled.
    assert [path for path in report["compiled_from_source"] if path.startswith(("asset:", "layer:"))] == []


def _assert_traced(report: dict[str, Any], handler: str) -> None:
    """Active tracing works in the bundle: the handler's subsegment reached the X-Ray daemon."""
    names = {segment.get("name") for segment in report["segments"]}
    assert f"## {handler}" in names, names


def test_api_handler_answers_health_from_the_deployed_bundle(
    aws: Aws, synth: Synth, layer_dir: Path, tmp_path: Path
) -> None:
    from tests.events import api_event

    report = _run_child(
        aws,
        synth,
        layer_dir,
        tmp_path,
        "api",
        [api_event("GET", "/health", account_id=None), api_event("GET", f"/jobs/{aws.job_id}")],
    )

    _assert_deployed_bundle_ran(report)
    health, job = report["responses"]
    assert health["statusCode"] == 200
    assert json.loads(health["body"]) == {"status": "ok"}
    # A DynamoDB read through the layer's boto3, on the moto server.
    assert job["statusCode"] == 200, job
    assert json.loads(job["body"])["jobId"] == aws.job_id
    _assert_traced(report, "handler")


def _running_event(aws: Aws) -> dict[str, Any]:
    """The job's RUNNING ``Batch Job State Change`` event (AWS Batch's schema, tests/events.py)."""
    from tests.events import batch_event

    return batch_event(
        aws.job_id, aws.batch_job_id, "RUNNING", created_at=aws.started_ms, started_at=aws.started_ms
    )


def test_batch_events_handler_applies_an_event_from_the_deployed_bundle(
    aws: Aws, synth: Synth, layer_dir: Path, tmp_path: Path
) -> None:
    report = _run_child(aws, synth, layer_dir, tmp_path, "batch_events", [_running_event(aws)])

    _assert_deployed_bundle_ran(report)
    assert report["responses"] == [{"applied": True, "jobId": aws.job_id, "status": "Running"}]
    _assert_traced(report, "handler")


def test_meter_handler_ticks_from_the_deployed_bundle(
    aws: Aws, synth: Synth, layer_dir: Path, tmp_path: Path
) -> None:
    from tests.events import scheduled_event

    if not _job_is_running(aws):  # run alone (-k meter): the job must be Running to be metered
        _run_child(aws, synth, layer_dir, tmp_path, "batch_events", [_running_event(aws)])

    report = _run_child(aws, synth, layer_dir, tmp_path, "meter", [scheduled_event()])

    _assert_deployed_bundle_ran(report)
    (tick,) = report["responses"]
    assert tick["metered"] == 1, tick
    assert tick["terminated"] == 0
    _assert_traced(report, "handler")


def _job_is_running(aws: Aws) -> bool:
    import boto3

    client = boto3.client("dynamodb", region_name=aws.settings.home_region, endpoint_url=aws.endpoint)
    item = client.get_item(TableName=aws.settings.jobs_table, Key={"jobId": {"S": aws.job_id}}).get("Item")
    return item is not None and item.get("status", {}).get("S") == "Running"


def test_child_environment_names_no_local_path(aws: Aws) -> None:
    """The child gets the variables Lambda sets, not this process's (PATH, PYTHONPATH, VIRTUAL_ENV)."""
    environment = _child_environment(aws, "api", Path("/var/task"))

    assert not {"PATH", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"} & set(environment)
    assert environment["AWS_EXECUTION_ENV"] == f"AWS_Lambda_python{constants.LAMBDA_PYTHON_VERSION}"
    assert os.environ.get("AWS_ENDPOINT_URL") is None  # the fixture left this process's environment as it was
