"""What the API hands out stays deployable: presigned URLs S3 accepts (SigV4, regional virtual-hosted
host, never past ``expiresAt``) and no response over 5 MiB (API Gateway + Lambda's 6 MB invoke limit)."""

from __future__ import annotations

import base64
import json
import time
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest

from functions.domain.limits import MAX_BODY_BYTES
from functions.domain.log_lines import AWSLOGS_PART_BYTES, CUT_MARKER, MAX_LINE_BYTES
from functions.domain.machine_classes import GeoZone
from functions.handlers import api
from tests.events import api_event, job_lifecycle
from tests.fakes import FakeLambdaContext

T0 = 1_796_000_000_000
MIB = 1024 * 1024
REGIONS = {"UnitedStates": "us-east-1", "EuropeanUnion": "eu-central-1"}


def finished(stack, outputs, zone="UnitedStates"):
    _, job = stack.api("POST", "/jobs", body={"command": ["true"], "geoZone": zone})
    job_id = job["jobId"]
    stored = stack.services.store.get_job(job_id)
    s3 = boto3.client("s3", region_name=REGIONS[zone])
    for name, body in outputs.items():
        s3.put_object(Bucket=f"test-data-{REGIONS[zone]}", Key=f"outputs/{job_id}/{name}", Body=body)
    for event in job_lifecycle(
        job_id, stored.batch_job_id, created_at=T0, started_at=T0, stopped_at=T0 + 1_000
    ):
        stack.deliver(event)
    return job_id


def call(method, path, **kwargs):
    """The proxy response and the size (bytes) of the Lambda invoke payload that carries it."""
    response = api.handler(api_event(method, path, **kwargs), FakeLambdaContext())
    return response, len(json.dumps(response))


def location(response):
    return response["multiValueHeaders"]["Location"][0]


def url_parts(url):
    parts = urlsplit(url)
    return parts.netloc, {k: v[0] for k, v in parse_qs(parts.query).items()}


@pytest.mark.parametrize("zone", ["UnitedStates", "EuropeanUnion"])
def test_presigned_urls_are_sigv4_on_the_regional_host_and_never_outlive_expires_at(stack, zone):
    region = REGIONS[zone]
    job_id = finished(stack, {"files/a.txt": b"a", "preview.png": b"png"}, zone)
    expires_at = stack.services.store.get_job(job_id).expires_at

    status, body = stack.api("GET", f"/jobs/{job_id}/outputs")
    assert status == 200
    host, query = url_parts(body["files"][0]["url"])
    print(f"{zone} fresh: {body['files'][0]['url']}")
    assert host == f"test-data-{region}.s3.{region}.amazonaws.com"
    assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert query["X-Amz-Credential"].split("/")[2] == region
    assert query["X-Amz-Expires"] == "900"

    # 300 s before expiresAt every link is clamped to the 300 s its data has left.
    stack.clock.now = expires_at - timedelta(seconds=300)
    _, body = stack.api("GET", f"/jobs/{job_id}/outputs")
    url = body["files"][0]["url"]
    print(f"{zone} 300 s before expiry: {url}")
    host, query = url_parts(url)
    assert host == f"test-data-{region}.s3.{region}.amazonaws.com"
    assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert query["X-Amz-Expires"] == "300"
    response, _ = call("GET", f"/jobs/{job_id}/preview.png")
    preview_host, preview_query = url_parts(location(response))
    assert preview_host == host
    assert preview_query["X-Amz-Expires"] == "300"
    assert json.loads(response["body"])["expiresIn"] == 300

    stack.clock.now = expires_at
    assert stack.api("GET", f"/jobs/{job_id}/outputs")[0] == 410


def test_a_6_mb_result_and_a_5_mb_pickle_are_links_with_small_responses(stack):
    big = json.dumps({"result": "r" * (6 * 1000 * 1000), "resultRepr": "'rrr...'"}).encode()
    job_id = finished(stack, {"result.json": big, "result.pickle": b"p" * (5 * 1000 * 1000)})

    response, wire = call("GET", f"/jobs/{job_id}/result")
    body = json.loads(response["body"])
    assert response["statusCode"] == 200
    assert "result" not in body
    assert f"outputs/{job_id}/result.json" in body["resultUrl"]
    print(f"6 MB result: invoke payload {wire} bytes, body {len(response['body'])} bytes")
    assert wire < 5 * MIB

    response, wire = call("GET", f"/jobs/{job_id}/result", query={"format": "pickle"})
    body = json.loads(response["body"])
    assert "pickle" not in body
    assert f"outputs/{job_id}/result.pickle" in body["resultUrl"]
    assert wire < 5 * MIB


def test_a_result_that_grows_when_escaped_is_linked_and_a_small_one_inlined(stack):
    # 1.5 MB of UTF-8 that JSON escapes to 6 bytes a character: 12 MB in the invoke payload.
    escaping = json.dumps({"result": "é" * 750_000, "resultRepr": "..."}, ensure_ascii=False).encode()
    job_id = finished(stack, {"result.json": escaping})
    response, wire = call("GET", f"/jobs/{job_id}/result")
    assert "resultUrl" in json.loads(response["body"])
    assert wire < 5 * MIB

    small = finished(
        stack, {"result.json": b'{"result": [1, 2], "resultRepr": "[1, 2]"}', "result.pickle": b"pk"}
    )
    assert stack.api("GET", f"/jobs/{small}/result")[1]["result"] == [1, 2]
    assert stack.api("GET", f"/jobs/{small}/result", query={"format": "pickle"})[1]["pickle"] == (
        base64.b64encode(b"pk").decode()
    )


def test_messages_over_512_kib_are_a_link(stack):
    messages = json.dumps({"messages": ["w" * 1000] * 1000}).encode()
    job_id = finished(stack, {"result.json": b'{"result": 1, "resultRepr": "1"}', "messages.json": messages})
    status, body = stack.api("GET", f"/jobs/{job_id}/result")
    assert status == 200
    assert body["result"] == 1
    assert body["messages"] == []
    assert f"outputs/{job_id}/messages.json" in body["messagesUrl"]


def test_a_5_mb_preview_is_a_303_with_a_small_response(stack):
    job_id = finished(stack, {"preview.png": b"\x89PNG" + b"\0" * (5 * MIB)})
    response, wire = call("GET", f"/jobs/{job_id}/preview.png")
    assert response["statusCode"] == 303
    assert json.loads(response["body"])["size"] == 5 * MIB + 4
    print(f"5 MiB preview: invoke payload {wire} bytes")
    assert wire < 5 * MIB


def _put_log(stack, job_id, events):
    stream = stack.services.store.get_job(job_id).log_stream_name
    logs = boto3.client("logs", region_name="us-east-1")
    logs.create_log_stream(logGroupName="/aws/batch/job", logStreamName=stream)
    batch: list[Any] = []
    size = 0
    for event in events:
        cost = len(event["message"].encode()) + 26
        if batch and size + cost > 1_000_000:
            logs.put_log_events(logGroupName="/aws/batch/job", logStreamName=stream, logEvents=batch)
            batch, size = [], 0
        batch.append(event)
        size += cost
    logs.put_log_events(logGroupName="/aws/batch/job", logStreamName=stream, logEvents=batch)


def _all_pages(job_id, fmt="json"):
    """Every page of the log: (lines, largest invoke payload in bytes, pages)."""
    lines, token, largest, pages = [], None, 0, 0
    while True:
        query = {"format": fmt, **({"nextToken": token} if token else {})}
        response, wire = call("GET", f"/jobs/{job_id}/log", query=query)
        assert response["statusCode"] == 200
        largest, pages = max(largest, wire), pages + 1
        if fmt == "json":
            body = json.loads(response["body"])
            lines += [e["message"] for e in body["events"]]
            token = body["nextToken"]
        else:
            lines += response["body"].splitlines()
            token = (response.get("multiValueHeaders") or {}).get("X-Next-Token", [None])[0]
        if token is None:
            return lines, largest, pages


def test_a_6_mb_log_comes_in_pages_under_5_mib(stack):
    job_id = finished(stack, {})
    base = (int(time.time()) - 600) * 1000
    # 6 MB of log: 24 lines of 250,000 bytes of quotes, the character JSON escaping doubles twice.
    lines = [f"{i:03d}" + '"' * 249_997 for i in range(24)]
    _put_log(stack, job_id, [{"timestamp": base + i, "message": m} for i, m in enumerate(lines)])

    seen, largest, pages = _all_pages(job_id)
    print(f"6 MB log (json): {pages} pages, largest invoke payload {largest} bytes")
    assert seen == lines
    assert largest < 5 * MIB
    assert pages > 1
    seen, largest, pages = _all_pages(job_id, "text")
    print(f"6 MB log (text): {pages} pages, largest invoke payload {largest} bytes")
    assert seen == lines
    assert largest < 5 * MIB


def test_a_line_cloudwatch_split_comes_back_whole_and_one_over_1_mib_is_cut_and_marked(stack):
    job_id = finished(stack, {})
    base = (int(time.time()) - 600) * 1000
    line = "B" * 300_000
    huge = "H" * (3 * MIB)
    parts = [line[:AWSLOGS_PART_BYTES], line[AWSLOGS_PART_BYTES:]]
    # A multi-byte character at the part boundary: awslogs cuts before it (a part 2 bytes short).
    accented = "a" * (AWSLOGS_PART_BYTES - 2) + "é" + "tail"
    accented_parts = ["a" * (AWSLOGS_PART_BYTES - 2), "é" + "tail"]
    huge_parts = [huge[i : i + AWSLOGS_PART_BYTES] for i in range(0, len(huge), AWSLOGS_PART_BYTES)]
    events = (
        [{"timestamp": base, "message": "before"}]
        + [{"timestamp": base + 1, "message": p} for p in parts]
        + [{"timestamp": base + 2, "message": p} for p in accented_parts]
        + [{"timestamp": base + 3, "message": p} for p in huge_parts]
        + [
            {"timestamp": base + 3, "message": "same ms, next line"},
            {"timestamp": base + 4, "message": "after"},
        ]
    )
    _put_log(stack, job_id, events)

    status, text = stack.api("GET", f"/jobs/{job_id}/log", query={"format": "text"})
    assert status == 200
    got = text.split("\n")[:-1]
    assert got[:3] == ["before", line, accented]
    assert got[3] == "H" * MAX_LINE_BYTES + CUT_MARKER
    assert got[4:] == ["same ms, next line", "after"]
    _, body = stack.api("GET", f"/jobs/{job_id}/log")
    assert [len(e["message"]) for e in body["events"]][1] == 300_000


def test_a_cut_line_longer_than_a_page_of_reading_continues_on_the_next_page(stack, monkeypatch):
    from functions.logic import queries

    monkeypatch.setattr(queries, "MAX_DROPPED_PARTS", 2)
    job_id = finished(stack, {})
    base = (int(time.time()) - 600) * 1000
    huge = "H" * (2 * MIB)  # 9 parts: 5 read for the first MiB, 4 to drop, 2 a request
    huge_parts = [huge[i : i + AWSLOGS_PART_BYTES] for i in range(0, len(huge), AWSLOGS_PART_BYTES)]
    _put_log(
        stack,
        job_id,
        [{"timestamp": base, "message": p} for p in huge_parts]
        + [{"timestamp": base + 1, "message": "next"}],
    )
    seen, _, pages = _all_pages(job_id)
    assert seen == ["H" * MAX_LINE_BYTES + CUT_MARKER, "next"]
    # Page 1: the cut line (and 2 of its 4 last parts dropped); page 2: 2 more dropped, then "next".
    assert pages == 2


def test_a_7_mb_body_is_413_with_the_api_error_body(stack):
    body = json.dumps({"code": "x = '" + "a" * (7 * 1000 * 1000) + "'"})
    response = api.handler(api_event("POST", "/jobs", raw_body=body), FakeLambdaContext())
    assert len(body) > MAX_BODY_BYTES
    assert response["statusCode"] == 413
    assert json.loads(response["body"]) == {
        "error": {
            "code": "PayloadTooLarge",
            "message": "The request body is over 5 MiB; upload large inputs through an upload URL.",
            "field": None,
        }
    }


def test_every_zone_is_checked(stack):
    assert set(stack.services.zones) == {GeoZone.UNITED_STATES, GeoZone.EUROPEAN_UNION}
