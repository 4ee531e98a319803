"""Environments on moto through the api handler: idempotent creation, 409 for another spec, bad
input naming the field with nothing written, the build quota, tenant isolation, the build's report,
the paged build log, deletion."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import boto3
import pytest

from functions import bootstrap
from functions.domain.environments import MAX_CONCURRENT_BUILDS, MAX_PACKAGES, BuildOutcome, Package
from functions.domain.machine_classes import GeoZone
from functions.logic import environments
from functions.ports import BuildRequest
from tests.fakes import RecordingEnvironmentBuilder
from tests.integration.conftest import Stack

SPEC = {"python": "3.12", "requirements": ["six==1.16.0"]}


@pytest.fixture
def builder(stack: Stack) -> RecordingEnvironmentBuilder:
    fake = RecordingEnvironmentBuilder()
    stack.services = replace(stack.services, environment_builder=fake)
    bootstrap.install(stack.services)
    return fake


def _finish(stack: Stack, request: BuildRequest, outcome: BuildOutcome) -> None:
    environments.record_build(
        stack.services,
        request.account_id,
        request.name,
        spec_hash=request.spec_hash,
        outcome=outcome,
        now=stack.clock(),
    )


def test_put_is_idempotent_and_another_spec_conflicts(
    stack: Stack, builder: RecordingEnvironmentBuilder
) -> None:
    status, created = stack.api("PUT", "/environments/ml", body=SPEC)
    assert status == 201, created
    assert (created["status"], created["hash"], created["packages"]) == ("Building", None, [])
    assert created["python"] == "3.12" and created["requirements"] == ["six==1.16.0"]
    status, again = stack.api("PUT", "/environments/ml", body={**SPEC, "requirements": ["six == 1.16.0"]})
    assert status == 200 and again["createdAt"] == created["createdAt"]
    status, other = stack.api("PUT", "/environments/ml", body={**SPEC, "python": "3.13"})
    assert status == 409 and other["error"]["code"] == "Conflict"
    assert len(builder.requests) == 1
    status, listed = stack.api("GET", "/environments")
    assert status == 200 and [e["name"] for e in listed["environments"]] == ["ml"]
    # Another account's environment is not found, and its list is empty.
    assert stack.api("GET", "/environments/ml", account_id="other")[0] == 404
    assert stack.api("GET", "/environments", account_id="other")[1]["environments"] == []


def test_a_build_report_makes_it_ready_with_its_lock(
    stack: Stack, builder: RecordingEnvironmentBuilder
) -> None:
    stack.api("PUT", "/environments/ml", body=SPEC)
    _finish(stack, builder.requests[0], BuildOutcome("a" * 64, (Package("six", "1.16.0"),), 987_654))
    status, ready = stack.api("GET", "/environments/ml")
    assert status == 200
    assert (ready["status"], ready["hash"], ready["sizeBytes"]) == ("Ready", "a" * 64, 987_654)
    assert ready["packages"] == [{"name": "six", "version": "1.16.0"}]
    assert ready["readyAt"] is not None and ready["statusReason"] is None and ready["failedAt"] is None


def test_a_failed_build_says_why(stack: Stack, builder: RecordingEnvironmentBuilder) -> None:
    stack.api("PUT", "/environments/ml", body={**SPEC, "requirements": ["nonexistent-zzz==1.0"]})
    _finish(
        stack, builder.requests[0], BuildOutcome(None, error="No solution found when resolving dependencies")
    )
    failed = stack.api("GET", "/environments/ml")[1]
    assert failed["status"] == "Failed"
    assert failed["statusReason"] == "Environment ml failed: No solution found when resolving dependencies"
    # It never became Ready: the time it failed is failedAt, here and in the list.
    assert failed["readyAt"] is None and failed["failedAt"] is not None
    listed = stack.api("GET", "/environments")[1]["environments"][0]
    assert (listed["readyAt"], listed["failedAt"]) == (None, failed["failedAt"])


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**SPEC, "python": "3.9"}, "python"),
        ({**SPEC, "requirements": ["six==1.16.0", "numpy==>2"]}, "requirements[1]"),
        ({**SPEC, "requirements": ["six"] * 501}, "requirements"),
        ({**SPEC, "indexUrl": "http://pypi.example.com/simple"}, "indexUrl"),
        ({**SPEC, "extraIndexUrls": ["ftp://x.example"]}, "extraIndexUrls[0]"),
        ({**SPEC, "image": "Not An Image"}, "image"),
        # A well-formed image: this deployment runs none (the local stack has no container runtime).
        ({**SPEC, "image": "python:3.12-slim"}, "image"),
        ({"python": "3.12", "image": "python:3.12-slim"}, "image"),
        ({**SPEC, "extra": 1}, "extra"),
    ],
)
def test_bad_specs_are_400_naming_the_field_and_write_nothing(
    stack: Stack, builder: RecordingEnvironmentBuilder, body: dict[str, Any], field: str
) -> None:
    before = stack.count_items(stack.settings.computes_table)
    status, answer = stack.api("PUT", "/environments/ml", body=body)
    assert status == 400, answer
    assert answer["error"]["field"] == field
    assert stack.count_items(stack.settings.computes_table) == before
    assert builder.requests == []


def test_a_name_over_the_pattern_is_400(stack: Stack, builder: RecordingEnvironmentBuilder) -> None:
    status, answer = stack.api("PUT", "/environments/9lives", body=SPEC)
    assert status == 400 and answer["error"]["field"] == "name"


def test_an_account_builds_a_few_at_once(stack: Stack, builder: RecordingEnvironmentBuilder) -> None:
    for index in range(MAX_CONCURRENT_BUILDS):
        assert stack.api("PUT", f"/environments/env{index}", body=SPEC)[0] == 201
    status, refused = stack.api("PUT", "/environments/one-more", body=SPEC)
    assert status == 400 and refused["error"]["code"] == "QuotaExceeded"
    assert f"{MAX_CONCURRENT_BUILDS} environments at once" in refused["error"]["message"]
    # Another account has its own count; one build ending frees a place.
    assert stack.api("PUT", "/environments/one-more", body=SPEC, account_id="other")[0] == 201
    _finish(stack, builder.requests[0], BuildOutcome("b" * 64))
    assert stack.api("PUT", "/environments/one-more", body=SPEC)[0] == 201


def test_the_list_is_paged_by_name_without_the_lists(
    stack: Stack, builder: RecordingEnvironmentBuilder
) -> None:
    for name in ("cc", "aa", "bb"):
        stack.api("PUT", f"/environments/{name}", body=SPEC)
        _finish(stack, builder.requests[-1], BuildOutcome(name * 32, (Package("six", "1.16.0"),), 1))
    names, token, pages = [], None, 0
    while True:
        query = {"limit": "2", **({"nextToken": token} if token else {})}
        status, page = stack.api("GET", "/environments", query=query)
        assert status == 200 and len(page["environments"]) <= 2
        names += [e["name"] for e in page["environments"]]
        pages += 1
        token = page["nextToken"]
        if token is None:
            break
    assert names == ["aa", "bb", "cc"] and pages == 2
    first = stack.api("GET", "/environments", query={"limit": "1"})[1]
    assert set(first["environments"][0]) == {
        "name", "python", "image", "imageDigest", "status", "statusReason", "hash", "sizeBytes",
        "createdAt", "readyAt", "failedAt",
    }  # fmt: skip
    # A token is the caller's own: another account's use of it, or a forged one, is a 400.
    for account, forged in (("other", first["nextToken"]), ("acct", "bm90LWEta2V5"), ("acct", "!")):
        status, error = stack.api("GET", "/environments", query={"nextToken": forged}, account_id=account)
        assert (status, error["error"]["field"]) == (400, "nextToken")


def test_a_lock_past_the_package_limit_fails_the_build(
    stack: Stack, builder: RecordingEnvironmentBuilder
) -> None:
    stack.api("PUT", "/environments/ml", body=SPEC)
    lock = tuple(Package(f"p{i}", "1.0") for i in range(MAX_PACKAGES + 1))
    _finish(stack, builder.requests[0], BuildOutcome("c" * 64, lock, 10))
    failed = stack.api("GET", "/environments/ml")[1]
    assert (failed["status"], failed["packages"]) == ("Failed", [])
    assert f"more than the {MAX_PACKAGES}" in failed["statusReason"]


def test_delete_frees_the_name_and_a_late_report_is_ignored(
    stack: Stack, builder: RecordingEnvironmentBuilder
) -> None:
    stack.api("PUT", "/environments/ml", body=SPEC)
    status, deleted = stack.api("DELETE", "/environments/ml")
    assert status == 200 and deleted["name"] == "ml"
    assert stack.api("GET", "/environments/ml")[0] == 404
    assert stack.api("DELETE", "/environments/ml")[0] == 404
    assert stack.api("PUT", "/environments/ml", body={**SPEC, "python": "3.13"})[0] == 201
    # The first build's report names the first spec: the new environment stays Building.
    _finish(stack, builder.requests[0], BuildOutcome("c" * 64))
    assert stack.api("GET", "/environments/ml")[1]["status"] == "Building"


def test_the_build_log_is_paged(stack: Stack, builder: RecordingEnvironmentBuilder) -> None:
    stack.api("PUT", "/environments/ml", body=SPEC)
    request = builder.requests[0]
    zone = stack.settings.zones[GeoZone.UNITED_STATES]
    logs = boto3.client("logs", region_name=zone.region)
    logs.create_log_stream(logGroupName=zone.log_group, logStreamName=request.log_stream_name)
    start = int(stack.clock().timestamp() * 1000)
    logs.put_log_events(
        logGroupName=zone.log_group,
        logStreamName=request.log_stream_name,
        logEvents=[{"timestamp": start + i, "message": f"line {i}"} for i in range(3)],
    )
    status, page = stack.api("GET", "/environments/ml/log")
    assert status == 200, page
    assert [e["message"] for e in page["events"]] == ["line 0", "line 1", "line 2"]
    assert page["nextToken"] is None
    assert stack.api("GET", "/environments/ml/log", account_id="other")[0] == 404


def test_a_job_in_a_ready_environment_records_it_and_its_build(
    stack: Stack, builder: RecordingEnvironmentBuilder
) -> None:
    stack.api("PUT", "/environments/ml", body={**SPEC, "python": "3.13"})
    _finish(stack, builder.requests[0], BuildOutcome("d" * 64, (Package("six", "1.16.0"),), 10))
    status, job = stack.api("POST", "/jobs", body={"code": "import six", "environment": "ml"})
    assert status == 202, job
    assert job["environment"] == {"name": "ml", "hash": "d" * 64, "python": "3.13", "image": None}
    assert job["pythonVersion"] == "3.13"
    assert stack.api("GET", f"/jobs/{job['jobId']}")[1]["environment"] == job["environment"]
    submission = stack.batch[GeoZone.UNITED_STATES].submissions[-1]
    assert submission.environment["REMOTE_BATCH_ENVIRONMENT_HASH"] == "d" * 64
    assert submission.job_definition.endswith("-py313:1")


@pytest.mark.parametrize(
    ("build", "body", "field", "fragment"),
    [
        (
            "fail",
            {"environment": "ml"},
            "environment",
            "Environment ml failed: No solution found. To use it, delete environment ml and create it "
            "with a spec that builds.",
        ),
        ("ready", {"environment": "ml", "pythonVersion": "3.13"}, "pythonVersion", "runs Python 3.12"),
        ("ready", {"environment": "nope"}, "environment", "No environment nope"),
    ],
)
def test_a_job_in_a_failed_or_unknown_environment_is_400_and_written_nowhere(
    stack: Stack,
    builder: RecordingEnvironmentBuilder,
    build: str | None,
    body: dict[str, Any],
    field: str,
    fragment: str,
) -> None:
    stack.api("PUT", "/environments/ml", body=SPEC)
    if build == "fail":
        _finish(stack, builder.requests[0], BuildOutcome(None, error="No solution found"))
    elif build == "ready":
        _finish(stack, builder.requests[0], BuildOutcome("e" * 64))
    status, answer = stack.api("POST", "/jobs", body={"code": "1", **body})
    assert status == 400, answer
    assert answer["error"]["field"] == field and fragment in answer["error"]["message"]
    assert stack.api("GET", "/jobs")[1]["jobs"] == []
    assert stack.batch[GeoZone.UNITED_STATES].submissions == []


def test_a_deployment_without_a_builder_says_so_in_the_error_body(stack: Stack) -> None:
    # The cloud deployment wires no builder (as this stack does without the ``builder`` fixture).
    assert stack.services.environment_builder is None
    before = stack.count_items(stack.settings.computes_table)
    status, answer = stack.api("PUT", "/environments/ml", body=SPEC)
    assert status == 501, answer
    assert answer["error"]["code"] == "NotSupported" and answer["error"]["field"] is None
    assert "does not build environments" in answer["error"]["message"]
    assert stack.count_items(stack.settings.computes_table) == before
    # Reading works and finds nothing; a job naming an environment is 400 on ``environment``.
    assert stack.api("GET", "/environments")[1]["environments"] == []
    status, job = stack.api("POST", "/jobs", body={"code": "1", "environment": "ml"})
    assert status == 400 and job["error"]["field"] == "environment"
