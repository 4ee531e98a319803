"""Issue 2 acceptance: bad requests answer docs/http-api.md's error body and write nothing."""

from __future__ import annotations

import uuid
from typing import Any

import boto3
import pytest

from functions.domain.machine_classes import MACHINE_CLASSES
from tests.e2e.conftest import Client, LocalStackProcess

BUCKETS = {"remote-batch-local-us-east-1": "us-east-1", "remote-batch-local-eu-central-1": "eu-central-1"}


def _assert_error(response: Any, status: int, code: str, field: Any = ...) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "field"}, body
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str)
    assert body["error"]["message"]
    if field is not ...:
        assert body["error"]["field"] == field, body
    error: dict[str, Any] = body["error"]
    return error


def _job_count(client: Client) -> int:
    count, token = 0, None
    while True:
        response = client.get("/jobs", params={"limit": 100, **({"nextToken": token} if token else {})})
        assert response.status_code == 200, response.text
        page = response.json()
        count += len(page["jobs"])
        token = page["nextToken"]
        if not token:
            return count


def _object_count(stack: LocalStackProcess) -> int:
    total = 0
    for bucket, region in BUCKETS.items():
        moto = stack.moto_credentials()
        s3 = boto3.client(
            "s3",
            region_name=region,
            endpoint_url=moto["endpoint"],
            aws_access_key_id=moto["accessKeyId"],
            aws_secret_access_key=moto["secretAccessKey"],
        )
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
            total += len(page.get("Contents", []))
    return total


BAD_SUBMISSIONS = {
    "unknown machine class": ({"code": "1", "machineClass": "Huge1x1"}, "machineClass"),
    "code and command": ({"code": "1", "command": ["true"]}, ...),
    "code and pickle": ({"code": "1", "pickle": "gASVAAAAAAAAAAAu"}, ...),
    "no payload": ({"name": "nothing to run"}, ...),
    "negative credit constraint": ({"code": "1", "creditConstraint": -1}, "creditConstraint"),
    "zero time constraint": ({"code": "1", "timeConstraint": 0}, "timeConstraint"),
    "unknown notification event": ({"code": "1", "notifications": "Sometimes"}, ...),
    "unknown notification method": (
        {"code": "1", "notifications": [{"events": ["JobCompleted"], "methods": ["Pigeon"]}]},
        ...,
    ),
}


@pytest.mark.parametrize(("body", "field"), BAD_SUBMISSIONS.values(), ids=BAD_SUBMISSIONS.keys())
def test_bad_submission_is_400_and_writes_nothing(stack: LocalStackProcess, dev: Client, body, field) -> None:
    jobs, objects = _job_count(dev), _object_count(stack)

    response = dev.post("/jobs", json=body)

    error = _assert_error(response, 400, "ValidationError", field)
    if field == "machineClass":
        assert all(name in error["message"] for name in MACHINE_CLASSES)
    if "notifications" in body:
        assert str(error["field"]).startswith("notifications"), error
    assert _job_count(dev) == jobs
    assert _object_count(stack) == objects


def test_malformed_json_is_400_and_writes_nothing(stack: LocalStackProcess, dev: Client) -> None:
    jobs, objects = _job_count(dev), _object_count(stack)

    response = dev.post("/jobs", data=b'{"code": "1"', headers={"Content-Type": "application/json"})

    _assert_error(response, 400, "ValidationError")
    assert _job_count(dev) == jobs
    assert _object_count(stack) == objects


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer rb_not-a-token"}, {"Authorization": "Basic ZGV2OmRldg=="}],
    ids=["no token", "unknown token", "not a bearer token"],
)
def test_unauthenticated_is_401_and_writes_nothing(stack: LocalStackProcess, dev: Client, headers) -> None:
    jobs, objects = _job_count(dev), _object_count(stack)
    anonymous = Client(stack.endpoint, None)

    response = anonymous.post("/jobs", json={"code": "2 + 2"}, headers=headers)

    _assert_error(response, 401, "Unauthorized", None)
    assert _job_count(dev) == jobs
    assert _object_count(stack) == objects


def test_missing_and_unknown_tokens_are_told_apart(stack: LocalStackProcess) -> None:
    anonymous = Client(stack.endpoint, None)

    missing = _assert_error(anonymous.get("/jobs"), 401, "Unauthorized")
    unknown = _assert_error(
        anonymous.get("/jobs", headers={"Authorization": "Bearer rb_x"}), 401, "Unauthorized"
    )

    assert missing["message"] != unknown["message"]


def test_another_accounts_job_is_404(stack: LocalStackProcess, dev: Client, admin: Client) -> None:
    # Given alice, made by the admin, and a job of dev's
    alice_id = f"alice-{uuid.uuid4().hex[:8]}"
    created = admin.post("/admin/accounts", json={"accountId": alice_id, "email": None, "credits": 1000})
    assert created.status_code == 201, created.text
    assert created.json()["accountId"] == alice_id
    alice = Client(stack.endpoint, created.json()["token"])
    job = dev.submit({"code": "2 + 2"})
    dev.wait_status(job["jobId"])

    # Then alice cannot see, read or abort it: 404, never 403
    for method, path in [
        ("GET", f"/jobs/{job['jobId']}"),
        ("GET", f"/jobs/{job['jobId']}/result"),
        ("GET", f"/jobs/{job['jobId']}/log"),
        ("POST", f"/jobs/{job['jobId']}/abort"),
    ]:
        _assert_error(alice.request(method, path), 404, "NotFound")
    assert _job_count(alice) == 0
    # and the same account id cannot be created twice
    again = admin.post("/admin/accounts", json={"accountId": alice_id, "credits": 5})
    _assert_error(again, 409, "Conflict", "accountId")


def test_local_admin_routes_need_the_admin_role(dev: Client) -> None:
    _assert_error(dev.get("/local/batch-events", params={"jobId": "job-x"}), 403, "Forbidden")
    _assert_error(dev.post("/local/batch-events", json={"events": []}), 403, "Forbidden")
    _assert_error(dev.post("/admin/accounts", json={"accountId": "mallory"}), 403, "Forbidden")


def test_oversized_body_is_413(dev: Client) -> None:
    response = dev.post(
        "/jobs", data=b"x" * (10 * 1024 * 1024 + 1), headers={"Content-Type": "application/json"}
    )

    _assert_error(response, 413, "PayloadTooLarge")
