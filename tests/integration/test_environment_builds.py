"""The cloud builder on moto through the handlers: ``PUT /environments`` writes the build's request and
submits the build job on the build zone's build queue (the definition of its Python, its tags and
variables); the build job's final ``Batch Job State Change`` through batch_events makes the
environment Ready from the outcome document, or Failed with its first error line, AWS Batch's timeout
naming the time limit, or an unreadable outcome said so; a job's event is not taken for a build's; a
build that cannot be started leaves nothing Building; the builder is wired from the zones' settings."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import boto3
import pytest

from functions import bootstrap
from functions.adapters.batch_builder import BatchEnvironmentBuilder
from functions.domain import environment_builds as builds
from functions.domain.machine_classes import GeoZone
from functions.ports import BatchRoute
from functions.settings import RouteSettings
from tests.events import batch_event
from tests.integration.conftest import Stack

SPEC = {"python": "3.12", "requirements": ["six==1.16.0"]}
DIGEST = "a" * 64
ZONE = GeoZone.UNITED_STATES


@pytest.fixture
def cloud(stack: Stack) -> Stack:
    builder = BatchEnvironmentBuilder(
        ZONE,
        stack.services.zones[ZONE],
        BatchRoute("remote-batch-test-build", "remote-batch-test-build"),
        log_group="/aws/batch/job",
        replicas=[("test-data-eu-central-1", "eu-central-1")],
        new_id=lambda: "b" * 32,
    )
    stack.services = replace(stack.services, environment_builder=builder)
    bootstrap.install(stack.services)
    return stack


def _bucket(stack: Stack) -> tuple[Any, str]:
    zone = stack.settings.zones[ZONE]
    return boto3.client("s3", region_name=zone.region), zone.bucket


def _build_event(stack: Stack, status: str, status_reason: str | None = None) -> dict[str, Any]:
    submission = stack.batch[ZONE].submissions[0]
    event = batch_event(
        submission.job_name,
        stack.batch[ZONE].submitted_ids[0],
        status,
        created_at=int(stack.clock().timestamp() * 1000) - 5_000,
        started_at=int(stack.clock().timestamp() * 1000) - 4_000,
        stopped_at=int(stack.clock().timestamp() * 1000) - 1_000,
        status_reason=status_reason,
    )
    event["detail"]["tags"] = dict(submission.tags)
    return event


def _write_outcome(stack: Stack, document: dict[str, Any]) -> None:
    s3, bucket = _bucket(stack)
    s3.put_object(Bucket=bucket, Key=builds.outcome_key("b" * 32), Body=json.dumps(document).encode())


def test_put_submits_the_build_job_on_the_build_queue_with_its_request(cloud: Stack) -> None:
    status, created = cloud.api("PUT", "/environments/ml", body=SPEC)

    assert status == 201 and created["status"] == "Building"
    (submission,) = cloud.batch[ZONE].submissions
    assert submission.job_queue == "remote-batch-test-build"
    assert submission.job_definition == "remote-batch-test-build-py312"
    assert submission.job_name == f"environment-build-{created_spec_hash(cloud)[:32]}"
    assert (submission.vcpus, submission.memory_mib, submission.gpus) == (2, 8192, 0)
    assert submission.timeout_seconds == 35 * 60
    assert submission.share_identifier is None  # the build queue is first in, first out
    assert submission.tags == {
        "remote-batch:accountId": "dev",
        "remote-batch:environment": "ml",
        "remote-batch:specHash": created_spec_hash(cloud),
        "remote-batch:buildId": "b" * 32,
        "remote-batch:logStream": created_log_stream(cloud),
    }
    assert dict(submission.environment) == {
        "REMOTE_BATCH_BUCKET": "test-data-us-east-1",
        "REMOTE_BATCH_BUILD_REQUEST_KEY": f"environment-builds/{'b' * 32}/request.json",
        "REMOTE_BATCH_BUILD_OUTCOME_KEY": f"environment-builds/{'b' * 32}/outcome.json",
        "REMOTE_BATCH_BUILD_LOG_GROUP": "/aws/batch/job",
        "REMOTE_BATCH_BUILD_LOG_STREAM": created_log_stream(cloud),
        "REMOTE_BATCH_BUILD_REPLICAS": '[{"bucket":"test-data-eu-central-1","region":"eu-central-1"}]',
    }
    s3, bucket = _bucket(cloud)
    request = json.loads(s3.get_object(Bucket=bucket, Key=builds.request_key("b" * 32))["Body"].read())
    assert request == {
        "format": "remote-batch.build-request/1",
        "python": "3.12",
        "requirements": ["six==1.16.0"],
        "indexUrl": None,
        "extraIndexUrls": [],
    }


def created_spec_hash(stack: Stack) -> str:
    environment = stack.services.environment_store.get_environment("dev", "ml")  # type: ignore[union-attr]
    assert environment is not None
    return environment.spec_hash


def created_log_stream(stack: Stack) -> str:
    environment = stack.services.environment_store.get_environment("dev", "ml")  # type: ignore[union-attr]
    assert environment is not None
    return environment.log_stream_name


def test_the_build_jobs_success_makes_the_environment_ready_from_its_outcome(cloud: Stack) -> None:
    cloud.api("PUT", "/environments/ml", body=SPEC)
    # Earlier statuses change nothing.
    assert cloud.deliver(_build_event(cloud, "RUNNING")) == {"applied": False}
    _write_outcome(
        cloud,
        {
            "format": "remote-batch.build-outcome/1",
            "hash": DIGEST,
            "packages": [{"name": "six", "version": "1.16.0"}],
            "sizeBytes": 1234,
            "error": None,
        },
    )

    answer = cloud.deliver(_build_event(cloud, "SUCCEEDED"))

    assert answer == {"applied": True, "environment": "ml", "status": "Ready"}
    status, ready = cloud.api("GET", "/environments/ml")
    assert status == 200
    assert (ready["status"], ready["hash"], ready["sizeBytes"]) == ("Ready", DIGEST, 1234)
    assert ready["packages"] == [{"name": "six", "version": "1.16.0"}]
    # Delivered twice: nothing changes.
    assert cloud.deliver(_build_event(cloud, "SUCCEEDED"))["status"] == "Ready"
    # No job was touched: the event was the build's.
    assert cloud.api("GET", "/jobs")[1]["jobs"] == []


@pytest.mark.parametrize(
    ("status", "outcome", "reason", "expected"),
    [
        (
            "SUCCEEDED",
            {"hash": None, "packages": [], "sizeBytes": 0, "error": "No solution found: nonexistent"},
            None,
            "Environment ml failed: No solution found: nonexistent",
        ),
        (
            "FAILED",
            None,
            "Job attempt duration exceeded timeout",
            "Environment ml failed: the build took longer than its time limit of 30 minutes",
        ),
        (
            "FAILED",
            None,
            "Host EC2 (instance i-0abc) terminated.",
            "Environment ml failed: the build job failed: Host EC2 (instance i-0abc) terminated.",
        ),
        (
            "SUCCEEDED",
            None,
            None,
            "Environment ml failed: the build ended without reporting its outcome",
        ),
        (
            "SUCCEEDED",
            {"hash": "not-a-hash", "packages": [], "sizeBytes": 1, "error": None},
            None,
            "Environment ml failed: the build's outcome could not be read",
        ),
    ],
    ids=["resolver", "timeout", "host-lost", "no-outcome", "malformed"],
)
def test_a_failed_build_says_why(
    cloud: Stack, status: str, outcome: dict[str, Any] | None, reason: str | None, expected: str
) -> None:
    cloud.api("PUT", "/environments/ml", body=SPEC)
    if outcome is not None:
        _write_outcome(cloud, {"format": "remote-batch.build-outcome/1", **outcome})

    answer = cloud.deliver(_build_event(cloud, status, reason))

    assert answer["status"] == "Failed"
    failed = cloud.api("GET", "/environments/ml")[1]
    assert failed["status"] == "Failed" and failed["statusReason"] == expected


def test_a_build_that_cannot_be_started_leaves_nothing_building(cloud: Stack) -> None:
    cloud.batch[ZONE].fail = True
    status, answer = cloud.api("PUT", "/environments/ml", body=SPEC)
    assert status == 500, answer
    assert cloud.api("GET", "/environments")[1]["environments"] == []

    cloud.batch[ZONE].fail = False
    status, created = cloud.api("PUT", "/environments/ml", body=SPEC)
    assert status == 201 and created["status"] == "Building"


def test_a_user_jobs_event_with_partial_build_tags_is_a_jobs_event(cloud: Stack) -> None:
    event = batch_event(
        "job-x", "batch-x", "SUCCEEDED", stopped_at=1_764_000_010_000, started_at=1_764_000_001_000
    )
    event["detail"]["tags"] = {"remote-batch:accountId": "dev", "remote-batch:environment": "ml"}

    assert cloud.deliver(event) == {"applied": False}  # no such job; not reported as a build
    assert builds.build_tags(event["detail"]["tags"]) is None


def test_the_builder_is_wired_in_the_zone_with_a_build_route_home_region_first() -> None:
    from tests.integration.conftest import make_settings

    settings = make_settings()
    assert bootstrap.build_services(settings).environment_builder is None
    route = RouteSettings(job_queue="q-build", job_definition="d-build")
    zones = {zone: replace_zone(z, route) for zone, z in settings.zones.items()}
    services = bootstrap.build_services(settings.model_copy(update={"zones": zones}))
    builder = services.environment_builder
    assert isinstance(builder, BatchEnvironmentBuilder)
    assert builder.zone is GeoZone.UNITED_STATES  # the home region's zone
    assert builder.site_packages(DIGEST) is None
    only_eu = {
        zone: replace_zone(z, route) if zone is GeoZone.EUROPEAN_UNION else z
        for zone, z in settings.zones.items()
    }
    services = bootstrap.build_services(settings.model_copy(update={"zones": only_eu}))
    assert (
        services.environment_builder is not None
        and services.environment_builder.zone is GeoZone.EUROPEAN_UNION
    )


def replace_zone(zone: Any, route: RouteSettings) -> Any:
    return zone.model_copy(update={"build": route})


def test_an_inline_environments_build_releases_the_job_that_waits_for_it(cloud: Stack) -> None:
    # Given a job with an inline spec: an unnamed environment, Building, and its build job
    status, job = cloud.api(
        "POST",
        "/jobs",
        body={
            "code": "import six; six.__version__",
            "environment": {"python": "3.12", "requirements": ["six==1.16.0"]},
        },
    )
    assert status == 202 and job["status"] == "Queued", job
    (build,) = cloud.batch[ZONE].submissions
    assert build.tags["remote-batch:environment"] == ""  # no name: found by its spec hash
    # When its build job succeeds
    _write_outcome(
        cloud,
        {
            "format": "remote-batch.build-outcome/1",
            "hash": DIGEST,
            "packages": [{"name": "six", "version": "1.16.0"}],
            "sizeBytes": 10,
            "error": None,
        },
    )
    answer = cloud.deliver(_build_event(cloud, "SUCCEEDED"))
    # Then the job is released and sent to AWS Batch with the build's hash
    assert answer["applied"] is True and answer["status"] == "Ready"
    sent = [s for s in cloud.batch[ZONE].submissions if s is not build]
    assert len(sent) == 1 and sent[0].environment["REMOTE_BATCH_ENVIRONMENT_HASH"] == DIGEST
