"""POST /jobs/uploads and POST /jobs with inputKey: large inputs go straight to S3."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
import requests

from functions.domain.limits import MAX_UPLOAD_BYTES

SOURCE = b"x = 6\nx * 7\n"


def upload(stack, data, content_type="text/x-python", account_id="dev", zone="UnitedStates"):
    status, body = stack.api(
        "POST",
        "/jobs/uploads",
        body={"size": len(data), "contentType": content_type, "geoZone": zone},
        account_id=account_id,
    )
    assert status == 201, body
    put = requests.put(body["uploadUrl"], data=data, headers=body["headers"], timeout=30)
    assert put.status_code == 200
    return body


def test_an_upload_url_is_a_signed_expiring_size_limited_put(stack):
    status, body = stack.api("POST", "/jobs/uploads", body={"size": 1234, "contentType": "text/x-python"})
    assert status == 201
    assert body["inputKey"].startswith("inputs/uploads/dev/upl-")
    url = urlsplit(body["uploadUrl"])
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert url.netloc == "test-data-us-east-1.s3.us-east-1.amazonaws.com"
    assert url.path == "/" + body["inputKey"]
    assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert query["X-Amz-Expires"] == "900"
    assert query["X-Amz-SignedHeaders"] == "content-length;content-type;host"
    assert body["headers"] == {"Content-Type": "text/x-python", "Content-Length": "1234"}
    assert body["expiresAt"] == "2026-11-29T17:35:00Z"
    assert body["method"] == "PUT"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"size": 0, "contentType": "text/x-python"}, "size"),
        ({"size": MAX_UPLOAD_BYTES + 1, "contentType": "text/x-python"}, "size"),
        ({"size": "10", "contentType": "text/x-python"}, "size"),
        ({"size": 10, "contentType": "application/json"}, "contentType"),
        ({"size": 10, "contentType": "text/x-python", "geoZone": "Mars"}, "geoZone"),
        ({"size": 10}, "contentType"),
    ],
)
def test_bad_upload_requests_are_400_naming_the_field(stack, body, field):
    status, error = stack.api("POST", "/jobs/uploads", body=body)
    assert status == 400
    assert error["error"]["code"] == "ValidationError"
    assert error["error"]["field"] == field


def test_a_job_runs_its_uploaded_input(stack):
    key = upload(stack, SOURCE)["inputKey"]
    status, job = stack.api("POST", "/jobs", body={"inputKey": key})
    assert status == 202, job
    document = json.loads(
        boto3.client("s3", region_name="us-east-1")
        .get_object(Bucket="test-data-us-east-1", Key=f"inputs/{job['jobId']}/input.json")["Body"]
        .read()
    )
    assert document == {"kind": "code", "payloadKey": key}
    environment = stack.batch[job["geoZone"]].submissions[-1].environment
    assert environment["REMOTE_BATCH_INPUT_KEY"] == f"inputs/{job['jobId']}/input.json"

    pickled = upload(stack, b"\x80\x05pickle", "application/x-python-pickle")["inputKey"]
    status, job = stack.api("POST", "/jobs", body={"inputKey": pickled})
    assert status == 202
    stored = stack.services.store.get_job(job["jobId"])
    assert stored.payload_kind.value == "pickle"


def test_only_the_callers_own_existing_upload_in_the_jobs_zone_is_accepted(stack):
    stack.add_account("eve", "100")
    theirs = upload(stack, SOURCE, account_id="eve")["inputKey"]
    status, error = stack.api("POST", "/jobs", body={"inputKey": theirs})
    assert (status, error["error"]["field"]) == (400, "inputKey")

    _, signed = stack.api("POST", "/jobs/uploads", body={"size": 3, "contentType": "text/x-python"})
    status, error = stack.api("POST", "/jobs", body={"inputKey": signed["inputKey"]})  # never PUT
    assert (status, error["error"]["field"]) == (400, "inputKey")
    assert "Nothing is uploaded" in error["error"]["message"]

    mine = upload(stack, SOURCE)["inputKey"]
    status, error = stack.api("POST", "/jobs", body={"inputKey": mine, "geoZone": "EuropeanUnion"})
    assert (status, error["error"]["field"]) == (400, "inputKey")

    for bad in ("inputs/uploads/dev/../eve/x", f"inputs/{'job-x'}/input.json", "inputs/uploads/dev/upl-1"):
        status, error = stack.api("POST", "/jobs", body={"inputKey": bad})
        assert (status, error["error"]["field"]) == (400, "inputKey"), bad

    status, error = stack.api("POST", "/jobs", body={"inputKey": mine, "code": "1"})
    assert status == 400
    assert "exactly one of code, command or pickle, or an inputKey" in error["error"]["message"]
    assert stack.count_objects() == 2  # the two uploads sent; no job input was written
