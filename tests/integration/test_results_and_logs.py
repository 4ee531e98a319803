"""Result, log and meter routes on moto: what a finished job shows its owner."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime, timedelta

import boto3

from tests.events import batch_event, job_lifecycle

T0 = 1_796_000_000_000


def finished_job(stack, code="2 + 2", succeeded=True, outputs=None):
    status, job = stack.api("POST", "/jobs", body={"code": code})
    assert status == 202
    job_id = job["jobId"]
    batch_id = stack.services.store.get_job(job_id).batch_job_id
    s3 = boto3.client("s3", region_name="us-east-1")
    for name, body in (outputs or {}).items():
        s3.put_object(Bucket="test-data-us-east-1", Key=f"outputs/{job_id}/{name}", Body=body)
    for event in job_lifecycle(
        job_id, batch_id, created_at=T0, started_at=T0, stopped_at=T0 + 1_000, succeeded=succeeded
    ):
        stack.deliver(event)
    return job_id, batch_id


def test_result_before_final_is_409_job_not_finished(stack):
    _, job = stack.api("POST", "/jobs", body={"code": "1"})
    status, error = stack.api("GET", f"/jobs/{job['jobId']}/result")
    assert status == 409
    assert error["error"]["code"] == "JobNotFinished"


def test_result_json_and_pickle(stack):
    job_id, _ = finished_job(
        stack,
        outputs={
            "result.json": json.dumps({"result": 4, "resultRepr": "4"}),
            "result.pickle": b"\x80\x05K\x04.",
            "messages.json": json.dumps({"messages": ["a warning"], "error": None}),
        },
    )
    status, result = stack.api("GET", f"/jobs/{job_id}/result")
    assert status == 200
    assert result == {"jobId": job_id, "result": 4, "resultRepr": "4", "messages": ["a warning"]}
    status, pickled = stack.api("GET", f"/jobs/{job_id}/result", query={"format": "pickle"})
    assert status == 200
    assert base64.b64decode(pickled["pickle"]) == b"\x80\x05K\x04."
    status, error = stack.api("GET", f"/jobs/{job_id}/result", query={"format": "xml"})
    assert status == 400 and error["error"]["field"] == "format"


def test_failed_code_result_is_null_with_messages(stack):
    messages = {
        "messages": ["ZeroDivisionError: division by zero", "Traceback (most recent call last): ..."],
        "error": {"type": "ZeroDivisionError", "message": "division by zero", "traceback": "..."},
    }
    job_id, _ = finished_job(
        stack,
        code="1/0",
        succeeded=False,
        outputs={
            "result.json": json.dumps({"result": None, "resultRepr": "None"}),
            "messages.json": json.dumps(messages),
        },
    )
    status, result = stack.api("GET", f"/jobs/{job_id}/result")
    assert status == 200
    assert result["result"] is None
    assert result["messages"][0] == "ZeroDivisionError: division by zero"
    assert stack.api("GET", f"/jobs/{job_id}")[1]["statusReason"] == "ZeroDivisionError: division by zero"


def test_terminated_without_output_is_409_no_output(stack):
    _, job = stack.api("POST", "/jobs", body={"code": "1"})
    job_id = job["jobId"]
    batch_id = stack.services.store.get_job(job_id).batch_job_id
    stack.api("POST", f"/jobs/{job_id}/abort")
    stack.deliver(batch_event(job_id, batch_id, "FAILED", created_at=T0, status_reason="Aborted by user"))
    status, error = stack.api("GET", f"/jobs/{job_id}/result")
    assert status == 409
    assert error["error"]["code"] == "NoOutput"
    assert "Aborted by user" in error["error"]["message"]


def test_result_over_5_mib_is_a_presigned_url(stack):
    big = json.dumps({"result": "x" * (5 * 1024 * 1024 + 1), "resultRepr": "'xxx…'"})
    job_id, _ = finished_job(stack, outputs={"result.json": big})
    status, result = stack.api("GET", f"/jobs/{job_id}/result")
    assert status == 200
    assert "result" not in result
    assert result["resultUrl"].startswith("https://")
    assert f"outputs/{job_id}/result.json" in result["resultUrl"]


def test_after_expiry_result_and_log_are_410(stack):
    job_id, _ = finished_job(stack, outputs={"result.json": json.dumps({"result": 1, "resultRepr": "1"})})
    stack.clock.advance(timedelta(days=14).total_seconds())
    for path in (f"/jobs/{job_id}/result", f"/jobs/{job_id}/log"):
        status, error = stack.api("GET", path)
        assert status == 410, path
        assert error["error"]["code"] == "Expired"
    assert stack.api("GET", f"/jobs/{job_id}")[0] == 200  # the record stays


def test_log_in_json_text_and_csv(stack):
    job_id, batch_id = finished_job(
        stack, outputs={"result.json": json.dumps({"result": 1, "resultRepr": "1"})}
    )
    stream = stack.services.store.get_job(job_id).log_stream_name
    logs = boto3.client("logs", region_name="us-east-1")
    logs.create_log_stream(logGroupName="/aws/batch/job", logStreamName=stream)
    # CloudWatch Logs refuses events from the future or over 14 days old: stamp them near the wall clock.
    base = (int(time.time()) - 60) * 1000
    first = datetime.fromtimestamp(base / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
    logs.put_log_events(
        logGroupName="/aws/batch/job",
        logStreamName=stream,
        logEvents=[
            {"timestamp": base + 10, "message": "hello"},
            {"timestamp": base + 20, "message": 'a, "quoted" line'},
        ],
    )
    status, body = stack.api("GET", f"/jobs/{job_id}/log")
    assert status == 200
    assert body == {
        "jobId": job_id,
        "events": [
            {"timestamp": f"{first}.010Z", "message": "hello"},
            {"timestamp": f"{first}.020Z", "message": 'a, "quoted" line'},
        ],
        "nextToken": None,
    }
    status, text = stack.api("GET", f"/jobs/{job_id}/log", query={"format": "text"})
    assert status == 200 and text == 'hello\na, "quoted" line\n'
    status, csv_text = stack.api("GET", f"/jobs/{job_id}/log", query={"format": "csv"})
    assert status == 200
    assert csv_text.splitlines() == [
        "timestamp,message",
        f"{first}.010Z,hello",
        f'{first}.020Z,"a, ""quoted"" line"',
    ]
    status, since = stack.api("GET", f"/jobs/{job_id}/log", query={"since": f"{first}.015Z"})
    assert [e["message"] for e in since["events"]] == ['a, "quoted" line']
    status, error = stack.api("GET", f"/jobs/{job_id}/log", query={"since": "yesterday"})
    assert status == 400 and error["error"]["field"] == "since"


def test_log_of_a_job_without_a_stream_is_empty(stack):
    _, job = stack.api("POST", "/jobs", body={"code": "1"})
    assert stack.api("GET", f"/jobs/{job['jobId']}/log") == (
        200,
        {"jobId": job["jobId"], "events": [], "nextToken": None},
    )


def test_a_long_log_comes_in_pages_with_a_next_token(stack, monkeypatch):
    from functions.logic import queries

    monkeypatch.setattr(queries, "MAX_LOG_EVENTS", 3)
    job_id, _ = finished_job(stack, outputs={"result.json": json.dumps({"result": 1, "resultRepr": "1"})})
    stream = stack.services.store.get_job(job_id).log_stream_name
    logs = boto3.client("logs", region_name="us-east-1")
    logs.create_log_stream(logGroupName="/aws/batch/job", logStreamName=stream)
    base = (int(time.time()) - 60) * 1000
    # Seven lines, three of them in one millisecond across a page boundary.
    stamps = [base, base + 1, base + 2, base + 2, base + 2, base + 3, base + 4]
    logs.put_log_events(
        logGroupName="/aws/batch/job",
        logStreamName=stream,
        logEvents=[{"timestamp": t, "message": f"line {i}"} for i, t in enumerate(stamps)],
    )
    seen, token, pages = [], None, 0
    while True:
        query = {"nextToken": token} if token else None
        status, page = stack.api("GET", f"/jobs/{job_id}/log", query=query)
        assert status == 200
        seen += [e["message"] for e in page["events"]]
        pages += 1
        token = page["nextToken"]
        if token is None:
            break
    assert seen == [f"line {i}" for i in range(7)]
    assert pages == 3
    status, error = stack.api("GET", f"/jobs/{job_id}/log", query={"nextToken": "bogus"})
    assert status == 400
    assert error["error"]["field"] == "nextToken"
