"""The api Lambda's submit, read and account routes on moto (DynamoDB, S3) with a recording Batch."""

from __future__ import annotations

import base64
import json
from decimal import Decimal

import boto3
import pytest

from functions.domain.fair_share import share_identifier
from functions.domain.machine_classes import GeoZone
from functions.logic import dispatch_rules
from functions.logic.dispatch_rules import MAX_RECEIVES, SUBMIT_ATTEMPTS

JOBS = "test-jobs"


def _nothing_written(stack) -> None:
    assert stack.count_items(JOBS) == 0
    assert stack.count_objects() == 0
    assert stack.batch[GeoZone.UNITED_STATES].submissions == []


def test_submit_code_writes_job_input_and_batch_submission(stack):
    # When
    status, job = stack.api("POST", "/jobs", body={"code": "2 + 2", "name": "sum"})
    # Then: 202 with docs/http-api.md's Job, Queued, normalized notifications
    assert status == 202
    assert job["jobId"].startswith("job-")
    assert job["status"] == "Queued"
    assert job["name"] == "sum"
    assert job["machineClass"] == "Basic1x8"
    assert job["geoZone"] == "UnitedStates"
    assert job["creditsSpent"] == Decimal(0)
    assert job["submittedAt"] == "2026-11-29T17:20:00Z"
    assert job["expiresAt"] == "2026-12-13T17:20:00Z"
    assert job["notifications"] == [
        {"events": ["JobStarting", "JobCompleted", {"JobCreditsUsed": 20000}], "methods": ["Email"]}
    ]
    # The input is in the zone's bucket, the submission names the job and carries its environment.
    s3 = boto3.client("s3", region_name="us-east-1")
    document = json.loads(
        s3.get_object(Bucket="test-data-us-east-1", Key=f"inputs/{job['jobId']}/input.json")["Body"].read()
    )
    assert document == {"kind": "code", "code": "2 + 2"}
    (submission,) = stack.batch[GeoZone.UNITED_STATES].submissions
    assert submission.job_name == job["jobId"]
    assert (submission.vcpus, submission.memory_mib, submission.gpus) == (1, 8192, 0)
    assert submission.environment["REMOTE_BATCH_INPUT_KEY"] == f"inputs/{job['jobId']}/input.json"
    assert submission.environment["REMOTE_BATCH_OUTPUT_PREFIX"] == f"outputs/{job['jobId']}/"
    assert submission.timeout_seconds is None
    # The class's shared queue schedules by fair share: the job carries its account's share.
    stored = stack.services.store.get_job(job["jobId"])
    assert stored is not None and stored.batch_job_id is not None
    assert submission.share_identifier == share_identifier(stored.account_id)


def test_submit_command_and_pickle_and_zone(stack):
    status, job = stack.api(
        "POST", "/jobs", body={"command": ["python", "-c", "print(1)"], "geoZone": "EuropeanUnion"}
    )
    assert status == 202 and job["geoZone"] == "EuropeanUnion"
    assert stack.batch[GeoZone.EUROPEAN_UNION].submissions[0].environment["REMOTE_BATCH_BUCKET"] == (
        "test-data-eu-central-1"
    )
    payload = base64.b64encode(b"not really a pickle, never unpickled here").decode()
    status, job = stack.api("POST", "/jobs", body={"pickle": payload, "machineClass": "GPU1xL40S"})
    assert status == 202
    submission = stack.batch[GeoZone.UNITED_STATES].submissions[-1]
    assert (submission.vcpus, submission.memory_mib, submission.gpus) == (8, 65536, 1)


def test_caps_become_the_batch_timeout(stack):
    status, _ = stack.api("POST", "/jobs", body={"code": "1", "timeConstraint": 300})
    assert status == 202
    assert stack.batch[GeoZone.UNITED_STATES].submissions[-1].timeout_seconds == 300
    # 0.5 credits of Basic1x8 (60/h) is 30 s; + 1 s rounding + 120 s margin.
    status, job = stack.api("POST", "/jobs", body={"code": "1", "creditConstraint": 0.5})
    assert status == 202 and job["creditConstraint"] == Decimal("0.5")
    assert stack.batch[GeoZone.UNITED_STATES].submissions[-1].timeout_seconds == 151


@pytest.mark.parametrize(
    ("body", "field", "fragment"),
    [
        ({"code": "1", "machineClass": "Huge"}, "machineClass", "Basic1x8, Basic2x8"),
        ({"code": "1", "command": ["ls"]}, None, "exactly one of code, command or pickle"),
        ({"name": "x"}, None, "exactly one of code, command or pickle"),
        ({"code": "1", "creditConstraint": -1}, "creditConstraint", "greater than 0"),
        ({"code": "1", "creditConstraint": 0.00001}, "creditConstraint", "decimal"),
        ({"code": "1", "timeConstraint": 0}, "timeConstraint", "greater than 0"),
        (
            {"code": "1", "notifications": [{"events": ["Sometimes"]}]},
            "notifications[0].events[0]",
            "Sometimes",
        ),
        (
            {"code": "1", "notifications": [{"events": [{"HoursElapsed": 0}]}]},
            "notifications[0].events[0].HoursElapsed",
            "greater than 0",
        ),
        (
            {"code": "1", "notifications": [{"events": ["JobStarted"], "methods": ["Pigeon"]}]},
            "notifications[0].methods[0]",
            "Pigeon",
        ),
        ({"code": "1", "geoZone": "Mars"}, "geoZone", "UnitedStates"),
        ({"code": "1", "arrayItems": []}, "arrayItems", "at least 1"),
        ({"code": "1", "arrayItems": list(range(10_001))}, "arrayItems", "at most 10000"),
        ({"code": "1", "arrayItems": [1], "arrayItemsKey": "k"}, "arrayItemsKey", "not both"),
        ({"code": "1", "machineclass": "Basic1x8"}, "machineclass", "Unknown field"),
        ({"command": []}, "command", "at least 1"),
        ({"pickle": "%%% not base64 %%%"}, "pickle", "base64"),
        ({"code": "1", "name": ""}, "name", "at least 1"),
    ],
)
def test_bad_submit_is_400_and_writes_nothing(stack, body, field, fragment):
    status, error = stack.api("POST", "/jobs", body=body)
    assert status == 400
    assert set(error) == {"error"}
    assert error["error"]["code"] == "ValidationError"
    assert error["error"]["field"] == field
    assert fragment.lower() in error["error"]["message"].lower()
    _nothing_written(stack)


@pytest.mark.parametrize("raw", ["{bad json", "[1, 2]", "", "null"])
def test_malformed_body_is_400(stack, raw):
    status, error = stack.api("POST", "/jobs", raw_body=raw)
    assert status == 400
    assert error["error"]["code"] == "ValidationError"
    _nothing_written(stack)


def test_no_identity_is_401_and_health_needs_none(stack):
    status, error = stack.api("GET", "/jobs", account_id=None)
    assert status == 401
    assert error == {"error": {"code": "Unauthorized", "message": error["error"]["message"], "field": None}}
    assert stack.api("GET", "/health", account_id=None) == (200, {"status": "ok"})


def test_another_accounts_job_is_404(stack):
    stack.add_account("alice", "100")
    _, job = stack.api("POST", "/jobs", body={"code": "1"})
    for method, path in [
        ("GET", f"/jobs/{job['jobId']}"),
        ("POST", f"/jobs/{job['jobId']}/abort"),
        ("GET", f"/jobs/{job['jobId']}/result"),
        ("GET", f"/jobs/{job['jobId']}/log"),
        ("GET", "/jobs/job-doesnotexist"),
    ]:
        status, error = stack.api(method, path, account_id="alice")
        assert status == 404, path
        assert error["error"]["code"] == "NotFound"
    assert stack.api("GET", "/jobs", account_id="alice")[1]["jobs"] == []
    assert stack.batch[GeoZone.UNITED_STATES].terminations == []


def test_a_job_aws_batch_never_takes_ends_terminated_free(stack, monkeypatch):
    # POST /jobs no longer calls AWS Batch: the dispatcher does (here within the request, no queue),
    # retries what AWS Batch refuses for now and ends the job when it never takes it.
    monkeypatch.setattr(dispatch_rules, "backoff_seconds", lambda attempt: 0.0)
    stack.batch[GeoZone.UNITED_STATES].fail = True
    balance = stack.balance("dev")
    status, job = stack.api("POST", "/jobs", body={"code": "1"})
    assert status == 202
    assert job["status"] == "Terminated"
    assert job["statusReason"] == (
        f"AWS Batch did not accept the job after {MAX_RECEIVES * SUBMIT_ATTEMPTS} "
        "attempts; nothing was charged"
    )
    assert job["creditsSpent"] == 0
    assert stack.balance("dev") == balance
    assert "Traceback" not in json.dumps(job, default=str)


def test_insufficient_credits_is_402(stack):
    stack.add_account("broke", "0")
    status, error = stack.api("POST", "/jobs", body={"code": "1"}, account_id="broke")
    assert status == 402
    assert error["error"]["code"] == "InsufficientCredits"
    assert stack.count_items(JOBS) == 0


def test_idempotency_key_returns_the_same_job_and_conflicts_on_another_body(stack):
    headers = {"Idempotency-Key": "run-42"}
    first = stack.api("POST", "/jobs", body={"code": "2 + 2"}, headers=headers)
    second = stack.api("POST", "/jobs", body={"code": "2 + 2"}, headers=headers)
    assert first[0] == second[0] == 202
    assert first[1]["jobId"] == second[1]["jobId"]
    assert len(stack.batch[GeoZone.UNITED_STATES].submissions) == 1
    status, error = stack.api("POST", "/jobs", body={"code": "3 + 3"}, headers=headers)
    assert status == 409
    assert error["error"]["code"] == "Conflict"
    # The key is per account: another account's same key is a new job.
    stack.add_account("alice", "10")
    status, other = stack.api("POST", "/jobs", body={"code": "2 + 2"}, headers=headers, account_id="alice")
    assert status == 202 and other["jobId"] != first[1]["jobId"]


def test_list_is_newest_first_paginated_and_filtered(stack):
    ids = []
    for _ in range(3):
        ids.append(stack.api("POST", "/jobs", body={"code": "1"})[1]["jobId"])
        stack.clock.advance(1)
    status, page = stack.api("GET", "/jobs", query={"limit": "2"})
    assert status == 200
    assert [j["jobId"] for j in page["jobs"]] == [ids[2], ids[1]]
    assert page["nextToken"]
    status, rest = stack.api("GET", "/jobs", query={"limit": "2", "nextToken": page["nextToken"]})
    assert [j["jobId"] for j in rest["jobs"]] == [ids[0]]
    assert rest["nextToken"] is None
    assert stack.api("GET", "/jobs", query={"status": "Succeeded"})[1]["jobs"] == []
    assert len(stack.api("GET", "/jobs", query={"status": "Queued"})[1]["jobs"]) == 3
    for query, field in [
        ({"limit": "0"}, "limit"),
        ({"limit": "101"}, "limit"),
        ({"status": "Done"}, "status"),
        ({"nextToken": "garbage"}, "nextToken"),
    ]:
        status, error = stack.api("GET", "/jobs", query=query)
        assert status == 400, query
        assert error["error"]["field"] == field
    # A token is bound to its account.
    stack.add_account("alice", "1")
    status, error = stack.api("GET", "/jobs", query={"nextToken": page["nextToken"]}, account_id="alice")
    assert status == 400 and error["error"]["field"] == "nextToken"


def test_a_page_of_large_jobs_ends_at_the_response_budget_and_goes_on_after_its_last_job(stack, monkeypatch):
    from functions.handlers.api import jobs as jobs_routes

    # Given five jobs and a budget (lowered for the test) that holds two of their views
    ids = []
    for _ in range(5):
        ids.append(stack.api("POST", "/jobs", body={"code": "1", "name": "x" * 100})[1]["jobId"])
        stack.clock.advance(1)
    one_view = len(json.dumps(json.dumps(stack.api("GET", f"/jobs/{ids[0]}")[1], default=str)))
    monkeypatch.setattr(jobs_routes, "RESPONSE_BUDGET_BYTES", one_view * 2 + one_view // 2)

    # When the list is followed page by page, asking for up to 100 a page
    seen, pages, token = [], 0, None
    while True:
        query = {"limit": "100", **({"nextToken": token} if token else {})}
        status, page = stack.api("GET", "/jobs", query=query)
        assert status == 200, page
        assert len(page["jobs"]) <= 2
        seen += [j["jobId"] for j in page["jobs"]]
        pages += 1
        token = page["nextToken"]
        if token is None:
            break

    # Then every job came once, newest first, two a page
    assert seen == ids[::-1] and pages == 3


def test_machine_classes_account_and_openapi(stack):
    status, body = stack.api("GET", "/machine-classes")
    assert status == 200
    by_name = {m["name"]: m for m in body["machineClasses"]}
    assert len(by_name) == 10
    assert by_name["Basic1x8"] == {
        "name": "Basic1x8",
        "vcpus": 1,
        "memoryGiB": 8,
        "gpus": 0,
        "gpuType": None,
        "creditsPerHour": Decimal(60),
    }
    assert by_name["GPU4xL4"]["gpuType"] == "L4" and by_name["GPU4xL4"]["gpus"] == 4
    status, account = stack.api("GET", "/account")
    assert (status, account) == (
        200,
        {
            "accountId": "dev",
            "creditBalance": Decimal(10000),
            "email": "dev@example.com",
            "phone": None,
            "roles": ["user"],
            "emailStatus": "pending",
            "webhookUrl": None,
        },
    )
    status, document = stack.api("GET", "/openapi.json")
    assert status == 200
    assert document["openapi"].startswith("3.1")
    assert "/jobs" in document["paths"] and "/jobs/{jobId}/result" in document["paths"]
    assert "SubmitJobBody" in str(document["components"])


def test_unknown_route_and_oversized_body(stack):
    status, error = stack.api("GET", "/nothing-here")
    assert status == 404 and error["error"]["code"] == "NotFound"
    status, error = stack.api("POST", "/jobs", raw_body=json.dumps({"code": "x" * (5 * 1024 * 1024 + 10)}))
    assert status == 413 and error["error"]["code"] == "PayloadTooLarge"
    assert stack.count_items(JOBS) == 0


def test_body_is_json_whatever_the_content_type(stack):
    # curl -d without -H sends application/x-www-form-urlencoded; the body is still JSON.
    status, job = stack.api(
        "POST",
        "/jobs",
        raw_body='{"code": "2 + 2"}',
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert status == 202
    assert job["status"] == "Queued"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"code": "1", "creditConstraint": "10"}, "creditConstraint"),
        ({"code": "1", "creditConstraint": True}, "creditConstraint"),
        ({"code": "1", "creditConstraint": 10**40}, "creditConstraint"),
        ({"code": "1", "timeConstraint": "10"}, "timeConstraint"),
        ({"code": "1", "timeConstraint": True}, "timeConstraint"),
        ({"code": "1", "timeConstraint": 10**10}, "timeConstraint"),
        ({"code": "1", "timeConstraint": 10**40}, "timeConstraint"),
        ({"code": "1", "name": "a\nSubject: spoof"}, "name"),
        ({"code": "1", "name": "   "}, "name"),
        ({"code": "1", "notifications": [{"events": ["JobStarted"]}] * 21}, "notifications"),
        ({"code": "1", "notifications": [{"events": ["JobStarted"] * 21}]}, "notifications[0].events"),
    ],
)
def test_wrong_types_and_out_of_range_values_are_400_not_converted(stack, body, field):
    status, error = stack.api("POST", "/jobs", body=body)
    assert status == 400, error
    assert error["error"]["field"] == field
    _nothing_written(stack)


def test_bodies_that_are_not_utf8_or_nest_too_deeply_are_400(stack):
    from functions.handlers import api
    from tests.events import api_event
    from tests.fakes import FakeLambdaContext

    event = api_event("POST", "/jobs")
    event.update({"body": base64.b64encode(b'{"code": "\xff"}').decode(), "isBase64Encoded": True})
    response = api.handler(event, FakeLambdaContext())
    assert response["statusCode"] == 400
    assert "UTF-8" in json.loads(response["body"])["error"]["message"]
    status, error = stack.api(
        "POST", "/jobs", raw_body='{"code": "1", "arrayItems": ' + "[" * 100_000 + "]" * 100_000 + "}"
    )
    assert status == 400
    assert "deeply" in error["error"]["message"]
    _nothing_written(stack)


def test_idempotency_key_errors_name_the_header_and_openapi_documents_400(stack):
    status, error = stack.api("POST", "/jobs", body={"code": "1"}, headers={"Idempotency-Key": "k" * 129})
    assert status == 400
    assert error["error"]["field"] == "Idempotency-Key"
    _, document = stack.api("GET", "/openapi.json")
    submit = document["paths"]["/jobs"]["post"]["responses"]
    assert "422" not in submit
    assert submit["400"]["content"]["application/json"]["schema"]["$ref"] == "#/components/schemas/ErrorBody"
