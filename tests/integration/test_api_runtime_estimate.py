"""``GET /runtime``, ``POST /estimate`` and the job's ``pythonVersion`` on moto (issues 13 and 24)."""

from __future__ import annotations

import base64
from decimal import Decimal

from functions.domain.machine_classes import GeoZone
from functions.domain.runtime import job_definition_name
from tests.events import JOB_DEFINITION_ARN

PICKLE = base64.b64encode(b"a pickle, never unpickled by the service").decode()


def test_runtime_serves_the_python_versions_and_the_default(stack):
    status, body = stack.api("GET", "/runtime")
    assert (status, body) == (
        200,
        {"pythonVersion": "3.12", "pythonVersions": ["3.11", "3.12", "3.13"], "interpreters": {}},
    )


def test_a_python_version_not_run_here_is_refused_before_anything_is_written(stack):
    status, body = stack.api("POST", "/jobs", body={"pickle": PICKLE, "pythonVersion": "3.10"})
    assert status == 400
    assert body["error"]["code"] == "ValidationError" and body["error"]["field"] == "pythonVersion"
    assert body["error"]["message"].startswith("Jobs here run Python 3.11, 3.12, 3.13, not 3.10;")
    assert stack.count_items("test-jobs") == 0 and stack.count_objects() == 0
    assert stack.batch[GeoZone.UNITED_STATES].submissions == []
    assert stack.balance("dev") == Decimal(10000)


def test_each_job_runs_the_python_it_names_on_that_versions_job_definition(stack):
    for body, version in [
        ({"pickle": PICKLE, "pythonVersion": "3.11"}, "3.11"),
        ({"pickle": PICKLE, "pythonVersion": "3.13"}, "3.13"),
        ({"code": "1", "pythonVersion": "3.13"}, "3.13"),
        ({"code": "1"}, "3.12"),  # the default
    ]:
        status, job = stack.api("POST", "/jobs", body=body)
        assert status == 202 and job["status"] == "Queued", job
        status, shown = stack.api("GET", f"/jobs/{job['jobId']}")
        assert shown["pythonVersion"] == version
        (listed,) = [j for j in stack.api("GET", "/jobs")[1]["jobs"] if j["jobId"] == job["jobId"]]
        assert listed["pythonVersion"] == version
    definitions = [s.job_definition for s in stack.batch[GeoZone.UNITED_STATES].submissions]
    assert definitions == [
        job_definition_name(JOB_DEFINITION_ARN, version) for version in ("3.11", "3.13", "3.13", "3.12")
    ]
    assert definitions[0].endswith("job-definition/remote-batch-worker-py311:1")


def test_keyed_requests_refuse_a_version_not_run_here_and_record_nothing_for_the_key(stack):
    status, body = stack.api(
        "POST", "/jobs", body={"pickle": PICKLE, "pythonVersion": "3.10"}, headers={"Idempotency-Key": "k-1"}
    )
    assert (status, body["error"]["field"]) == (400, "pythonVersion")
    # Nothing was recorded for the key: the same key with a good body makes a job.
    status, job = stack.api(
        "POST", "/jobs", body={"pickle": PICKLE, "pythonVersion": "3.12"}, headers={"Idempotency-Key": "k-1"}
    )
    assert status == 202


def test_a_malformed_python_version_is_a_validation_error(stack):
    for version in ("3.11.7", "python3.12", "3", ""):
        status, body = stack.api("POST", "/jobs", body={"pickle": PICKLE, "pythonVersion": version})
        assert (status, body["error"]["field"]) == (400, "pythonVersion"), version


ESTIMATES = [
    ({"seconds": 1}, Decimal("1.0"), 60),  # Basic1x8 at 60 credits/hour, the 60-second minimum
    ({"machineClass": "Basic1x8", "seconds": 90.5}, Decimal("1.5167"), 91),  # 91 s × 60 / 3600, half-up
    ({"seconds": 3600, "creditConstraint": 12.5}, Decimal("12.5"), 3600),  # capped as a job is
    ({"seconds": 3600, "timeConstraint": 600}, Decimal("10.0"), 600),  # cut as a job is
]


def test_estimate_prices_a_run_as_the_settlement_would(stack):
    for body, credits, billed in ESTIMATES:
        status, estimate = stack.api("POST", "/estimate", body=body)
        assert status == 200, estimate
        assert estimate == {
            "credits": credits,
            "creditsPerHour": Decimal("60.0"),
            "minimumSeconds": 60,
            "billedSeconds": billed,
        }, body
    # A GPU hour costs the class's served price; a submit body's payload is taken and ignored.
    classes = {m["name"]: m for m in stack.api("GET", "/machine-classes")[1]["machineClasses"]}
    status, estimate = stack.api(
        "POST", "/estimate", body={"machineClass": "GPU1xL40S", "seconds": 3600, "code": "x"}
    )
    assert status == 200
    assert estimate["credits"] == estimate["creditsPerHour"] == classes["GPU1xL40S"]["creditsPerHour"]


def test_estimate_refuses_bad_input_naming_the_field(stack):
    cases = [
        ({}, "seconds"),
        ({"seconds": 0}, "seconds"),
        ({"seconds": -5}, "seconds"),
        ({"seconds": "60"}, "seconds"),
        ({"seconds": 60, "machineClass": "Nope"}, "machineClass"),
        ({"seconds": 60, "arrayItems": [1, 2]}, "arrayItems"),
        ({"seconds": 60, "unknown": 1}, "unknown"),
    ]
    for body, field in cases:
        status, answer = stack.api("POST", "/estimate", body=body)
        assert (status, answer["error"]["field"]) == (400, field), (body, answer)
