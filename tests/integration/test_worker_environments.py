"""The cloud build program (``python -m worker build``) and a job's fetch of its environment, on moto
S3 and CloudWatch Logs, with the real uv resolving and installing tiny wheels from a local folder (no
network): the build stored once per hash (a second build reuses it), copied to the other zones, its
log in the environment's stream, the resolver's first error line, the limits; the job side run with
only the build's site, from a host cache filled once even by concurrent first jobs."""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import boto3
import pytest
from moto import mock_aws

from functions.domain import environment_builds as builds
from functions.domain.environment_builds import outcome_from_document, request_document
from functions.domain.environments import EnvironmentSpec
from functions.domain.environments import build_hash as service_build_hash
from tests.wheels import make_wheel, uv_offline
from worker import build as build_program
from worker import environments as worker_environments
from worker.entrypoint import main as worker_main
from worker.environments import archive_key, environment_site, manifest_key
from worker.storage import JobStorage

BUCKET = "remote-batch-test-us"
REPLICA = "remote-batch-test-eu"
REGION = "us-east-1"
REPLICA_REGION: Final = "eu-central-1"
LOG_GROUP = "/remote-batch/test/jobs"
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or "uv"


@pytest.fixture
def aws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "tinyenv", "1.0")
    make_wheel(wheels, "six", "1.16.0", "__version__ = '1.16.0'\n")
    for name, value in {**uv_offline(wheels), "AWS_DEFAULT_REGION": REGION}.items():
        monkeypatch.setenv(name, value)
    with mock_aws():
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket=BUCKET)
        replica = boto3.client("s3", region_name=REPLICA_REGION)
        replica.create_bucket(
            Bucket=REPLICA, CreateBucketConfiguration={"LocationConstraint": REPLICA_REGION}
        )
        logs = boto3.client("logs", region_name=REGION)
        logs.create_log_group(logGroupName=LOG_GROUP)
        yield {"s3": s3, "replica": replica, "logs": logs}


def build_environment(
    aws: dict[str, Any], requirements: list[str], build_id: str, **options: Any
) -> tuple[int, dict[str, Any]]:
    """Write the request as the api does, run the build program, read its outcome."""
    spec = EnvironmentSpec(python=PYTHON, requirements=tuple(requirements))
    aws["s3"].put_object(
        Bucket=BUCKET, Key=builds.request_key(build_id), Body=json.dumps(request_document(spec)).encode()
    )
    environ = {
        builds.BUCKET_VARIABLE: BUCKET,
        builds.REQUEST_KEY_VARIABLE: builds.request_key(build_id),
        builds.OUTCOME_KEY_VARIABLE: builds.outcome_key(build_id),
        builds.LOG_GROUP_VARIABLE: LOG_GROUP,
        builds.LOG_STREAM_VARIABLE: f"environments/alice/ml/{build_id}",
        builds.REPLICAS_VARIABLE: json.dumps([{"bucket": REPLICA, "region": REPLICA_REGION}]),
        build_program.JOB_PYTHON: sys.executable,
        build_program.UV: UV,
    }
    code = build_program.main(environ, aws["s3"], aws["logs"], lambda region: aws["replica"], **options)
    body = aws["s3"].get_object(Bucket=BUCKET, Key=builds.outcome_key(build_id))["Body"].read()
    return code, json.loads(body)


def log_lines(aws: dict[str, Any], build_id: str) -> list[str]:
    events = aws["logs"].get_log_events(
        logGroupName=LOG_GROUP, logStreamName=f"environments/alice/ml/{build_id}"
    )
    return [event["message"] for event in events["events"]]


def test_the_program_and_the_service_agree_on_names_and_the_build_hash() -> None:
    assert (
        build_program.BUCKET,
        build_program.REQUEST_KEY,
        build_program.OUTCOME_KEY,
        build_program.LOG_GROUP,
        build_program.LOG_STREAM,
        build_program.REPLICAS,
        build_program.REQUEST_FORMAT,
        build_program.OUTCOME_FORMAT,
    ) == (
        builds.BUCKET_VARIABLE,
        builds.REQUEST_KEY_VARIABLE,
        builds.OUTCOME_KEY_VARIABLE,
        builds.LOG_GROUP_VARIABLE,
        builds.LOG_STREAM_VARIABLE,
        builds.REPLICAS_VARIABLE,
        builds.REQUEST_FORMAT,
        builds.OUTCOME_FORMAT,
    )
    lock = "six==1.16.0\ntinyenv==1.0\n"
    assert worker_environments.build_hash("3.12", lock, "linux-x86_64") == service_build_hash(
        "3.12", lock, "linux-x86_64"
    )
    from functions.domain.environments import BUILD_SIZE_LIMIT_BYTES, BUILD_TIME_LIMIT_SECONDS

    assert (build_program.TIME_LIMIT_SECONDS, build_program.SIZE_LIMIT_BYTES) == (
        BUILD_TIME_LIMIT_SECONDS,
        BUILD_SIZE_LIMIT_BYTES,
    )


def test_a_build_is_stored_in_every_zone_once_and_reused(aws: dict[str, Any]) -> None:
    code, outcome = build_environment(aws, ["six==1.16.0", "tinyenv"], "b1")

    assert code == 0 and outcome["error"] is None
    report = outcome_from_document(outcome)
    assert [(p.name, p.version) for p in report.packages] == [("six", "1.16.0"), ("tinyenv", "1.0")]
    digest = outcome["hash"]
    assert digest == service_build_hash(PYTHON, "six==1.16.0\ntinyenv==1.0\n", worker_environments.PLATFORM)
    for client, bucket in ((aws["s3"], BUCKET), (aws["replica"], REPLICA)):
        manifest = json.loads(client.get_object(Bucket=bucket, Key=manifest_key(digest))["Body"].read())
        assert manifest["sizeBytes"] == outcome["sizeBytes"] > 0
        assert client.head_object(Bucket=bucket, Key=archive_key(digest))["ContentLength"] > 0
    lines = log_lines(aws, "b1")
    assert lines[0] == f"resolving 2 requirements for Python {PYTHON} on {worker_environments.PLATFORM}"
    assert any(line.startswith("stored build") and "2 zone(s)" in line for line in lines)

    # Given the archive gone from the replica, a second environment with the same lock reuses the
    # build (nothing installed) and copies it back there.
    aws["replica"].delete_object(Bucket=REPLICA, Key=manifest_key(digest))
    code, again = build_environment(aws, ["tinyenv==1.0", "six==1.16.0"], "b2")
    assert code == 0 and again["hash"] == digest and again["sizeBytes"] == outcome["sizeBytes"]
    second = log_lines(aws, "b2")
    assert f"reusing build {digest} ({outcome['sizeBytes']} bytes)" in second
    assert not any(line.startswith("installed") for line in second)
    assert f"copied build {digest} to 1 more zone(s)" in second
    aws["replica"].head_object(Bucket=REPLICA, Key=manifest_key(digest))


def test_a_requirement_that_does_not_exist_fails_with_the_resolvers_first_line(aws: dict[str, Any]) -> None:
    code, outcome = build_environment(aws, ["nonexistent==9"], "b3")

    assert code == 0  # an outcome, not a fault of the builder
    report = outcome_from_document(outcome)
    assert report.hash is None and report.error is not None
    assert report.error.startswith("No solution found when resolving dependencies: Because nonexistent")
    assert f"build failed: {report.error}" in log_lines(aws, "b3")
    assert aws["s3"].list_objects_v2(Bucket=BUCKET, Prefix="environments/").get("KeyCount") == 0


def test_the_size_limit_names_itself(aws: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build_program, "SIZE_LIMIT_BYTES", 10)

    code, outcome = build_environment(aws, ["tinyenv==1.0"], "b4")

    assert code == 0
    assert outcome["error"].startswith("the installed packages take 0.0 GiB, over the size limit of ")


def test_the_time_limit_names_itself(aws: dict[str, Any]) -> None:
    ticks = iter([0.0])  # the deadline set at start; every later reading is 31 minutes on

    code, outcome = build_environment(aws, ["tinyenv==1.0"], "b5", clock=lambda: next(ticks, 1_860.0))

    assert code == 0
    assert outcome["error"] == "the build took longer than its time limit of 30 minutes"


def test_another_python_than_the_images_is_refused(aws: dict[str, Any]) -> None:
    aws["s3"].put_object(
        Bucket=BUCKET,
        Key=builds.request_key("b6"),
        Body=json.dumps(request_document(EnvironmentSpec(python="3.2", requirements=("six",)))).encode(),
    )
    environ = {
        builds.BUCKET_VARIABLE: BUCKET,
        builds.REQUEST_KEY_VARIABLE: builds.request_key("b6"),
        builds.OUTCOME_KEY_VARIABLE: builds.outcome_key("b6"),
        builds.LOG_GROUP_VARIABLE: LOG_GROUP,
        builds.LOG_STREAM_VARIABLE: "environments/alice/ml/b6",
        build_program.JOB_PYTHON: sys.executable,
        build_program.UV: UV,
    }
    assert build_program.main(environ, aws["s3"], aws["logs"]) == 0
    outcome = json.loads(aws["s3"].get_object(Bucket=BUCKET, Key=builds.outcome_key("b6"))["Body"].read())
    assert outcome["error"] == f"this build image runs Python {PYTHON}, not 3.2"


def test_missing_variables_exit_2_without_an_outcome(
    aws: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    assert build_program.main({}, aws["s3"], aws["logs"]) == build_program.EXIT_BUILDER_ERROR
    assert "missing environment variable(s): REMOTE_BATCH_BUCKET" in capsys.readouterr().err


def test_a_job_runs_with_only_its_environments_site_fetched_once_per_host(
    aws: dict[str, Any], tmp_path: Path
) -> None:
    _, outcome = build_environment(aws, ["six==1.16.0"], "b7")
    digest = outcome["hash"]
    cache = tmp_path / "cache"
    cache.mkdir()
    job_id = "job-env-1"
    code = "import six, sys\n{'six': six.__version__, 'path': [p for p in sys.path if 'site-packages' in p]}"
    aws["s3"].put_object(
        Bucket=BUCKET,
        Key=f"inputs/{job_id}/input.json",
        Body=json.dumps({"kind": "code", "code": code}).encode(),
    )
    environ = {
        "REMOTE_BATCH_JOB_ID": job_id,
        "REMOTE_BATCH_BUCKET": BUCKET,
        "REMOTE_BATCH_INPUT_KEY": f"inputs/{job_id}/input.json",
        "REMOTE_BATCH_OUTPUT_PREFIX": f"outputs/{job_id}/",
        "REMOTE_BATCH_ENVIRONMENT_HASH": digest,
        "REMOTE_BATCH_ENVIRONMENT_CACHE": str(cache),
        "PATH": os.environ["PATH"],
    }

    assert worker_main(environ, aws["s3"]) == 0

    result = json.loads(
        aws["s3"].get_object(Bucket=BUCKET, Key=f"outputs/{job_id}/outcome.json")["Body"].read()
    )
    assert result["error"] is None
    assert result["result"] == {"six": "1.16.0", "path": []}  # no site-packages of any interpreter
    assert (cache / digest / "site" / "six" / "__init__.py").is_file()
    assert sorted(p.name for p in cache.iterdir()) == [digest]  # no temporary folder left


def test_concurrent_first_fetches_on_one_host_leave_one_whole_build(
    aws: dict[str, Any], tmp_path: Path
) -> None:
    _, outcome = build_environment(aws, ["tinyenv==1.0"], "b8")
    digest = outcome["hash"]
    cache = tmp_path / "cache"
    cache.mkdir()
    storage = JobStorage(aws["s3"], BUCKET)
    start = threading.Barrier(4)
    sites: list[Path] = []
    errors: list[BaseException] = []

    def fetch(index: int) -> None:
        start.wait()
        try:
            sites.append(environment_site(storage, digest, cache, tmp_path / f"scratch{index}"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=fetch, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    assert set(sites) == {cache / digest / "site"}
    assert (cache / digest / "site" / "tinyenv" / "__init__.py").read_text() == "VERSION = '1.0'\n"
    assert sorted(p.name for p in cache.iterdir()) == [digest]


def test_a_job_whose_environment_is_missing_fails_saying_so(aws: dict[str, Any], tmp_path: Path) -> None:
    job_id = "job-env-2"
    aws["s3"].put_object(
        Bucket=BUCKET, Key=f"inputs/{job_id}/input.json", Body=b'{"kind": "code", "code": "1"}'
    )
    environ = {
        "REMOTE_BATCH_JOB_ID": job_id,
        "REMOTE_BATCH_BUCKET": BUCKET,
        "REMOTE_BATCH_INPUT_KEY": f"inputs/{job_id}/input.json",
        "REMOTE_BATCH_OUTPUT_PREFIX": f"outputs/{job_id}/",
        "REMOTE_BATCH_ENVIRONMENT_HASH": "f" * 64,
        "REMOTE_BATCH_ENVIRONMENT_CACHE": str(tmp_path),
    }

    assert worker_main(environ, aws["s3"]) == 2

    result = json.loads(
        aws["s3"].get_object(Bucket=BUCKET, Key=f"outputs/{job_id}/outcome.json")["Body"].read()
    )
    assert result["error"]["reason"].startswith("The job's environment is not in its zone's bucket")


def test_python_m_worker_build_is_the_build_program() -> None:
    import subprocess

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-m", "worker", "build"],
        cwd=root,
        env={"PATH": os.environ["PATH"], "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == build_program.EXIT_BUILDER_ERROR
    assert "remote-batch build: missing environment variable(s): REMOTE_BATCH_BUCKET" in done.stderr
