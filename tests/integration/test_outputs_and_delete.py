"""Output files, the preview image and deleting a job's data (docs/http-api.md job routes)."""

from __future__ import annotations

import base64
import json
from typing import Any

import boto3
import requests

from functions.handlers import api
from functions.logic import queries
from tests.events import api_event, batch_event, job_lifecycle
from tests.fakes import FakeLambdaContext

T0 = 1_796_000_000_000
BUCKET = "test-data-us-east-1"
PNG = b"\x89PNG\r\n\x1a\nfake"


def finished(stack, outputs):
    _, job = stack.api("POST", "/jobs", body={"command": ["true"]})
    job_id = job["jobId"]
    batch_id = stack.services.store.get_job(job_id).batch_job_id
    s3 = boto3.client("s3", region_name="us-east-1")
    for name, body in outputs.items():
        s3.put_object(Bucket=BUCKET, Key=f"outputs/{job_id}/{name}", Body=body)
    for event in job_lifecycle(job_id, batch_id, created_at=T0, started_at=T0, stopped_at=T0 + 1_000):
        stack.deliver(event)
    return job_id


def test_outputs_list_files_with_presigned_urls(stack):
    job_id = finished(stack, {"files/out/a.csv": b"x,y\n1,2\n", "files/b.txt": b"hi", "result.json": b"{}"})
    status, body = stack.api("GET", f"/jobs/{job_id}/outputs")
    assert status == 200
    assert [(f["name"], f["size"]) for f in body["files"]] == [("b.txt", 2), ("out/a.csv", 8)]
    assert all(
        f["url"].startswith("https://") and f"outputs/{job_id}/files/" in f["url"] for f in body["files"]
    )
    assert stack.api("GET", "/jobs/job-nope/outputs")[0] == 404


def test_preview_png_is_a_303_to_its_presigned_url_and_404_when_there_is_none(stack):
    job_id = finished(stack, {"preview.png": PNG})
    response = api.handler(api_event("GET", f"/jobs/{job_id}/preview.png"), FakeLambdaContext())
    assert response["statusCode"] == 303
    assert response["isBase64Encoded"] is False
    headers = {k: v[0] for k, v in (response.get("multiValueHeaders") or {}).items()}
    headers.update(response.get("headers") or {})
    location = headers["Location"]
    assert location.startswith(f"https://{BUCKET}.s3.us-east-1.amazonaws.com/outputs/{job_id}/preview.png?")
    assert "X-Amz-Algorithm=AWS4-HMAC-SHA256" in location
    body = json.loads(response["body"])
    assert body == {"jobId": job_id, "url": location, "size": len(PNG), "expiresIn": 900}
    # The link serves the PNG (moto answers the presigned GET in-process).
    assert requests.get(location, timeout=10).content == PNG
    other = finished(stack, {})
    status, error = stack.api("GET", f"/jobs/{other}/preview.png")
    assert status == 404
    assert error["error"]["code"] == "NotFound"


def test_delete_removes_inputs_outputs_and_log_of_a_final_job_only(stack):
    _, running = stack.api("POST", "/jobs", body={"code": "1"})
    batch_id = stack.services.store.get_job(running["jobId"]).batch_job_id
    stack.deliver(batch_event(running["jobId"], batch_id, "RUNNING", created_at=T0, started_at=T0))
    status, error = stack.api("DELETE", f"/jobs/{running['jobId']}")
    assert status == 409
    assert error["error"]["code"] == "Conflict"

    job_id = finished(stack, {"result.json": b'{"result": 1, "resultRepr": "1"}', "files/a": b"a"})
    stream = stack.services.store.get_job(job_id).log_stream_name
    logs = boto3.client("logs", region_name="us-east-1")
    logs.create_log_stream(logGroupName="/aws/batch/job", logStreamName=stream)
    status, body = stack.api("DELETE", f"/jobs/{job_id}")
    assert (status, body) == (204, "")
    s3 = boto3.client("s3", region_name="us-east-1")
    for prefix in (f"inputs/{job_id}/", f"outputs/{job_id}/"):
        assert s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("KeyCount") == 0
    assert (
        logs.describe_log_streams(logGroupName="/aws/batch/job", logStreamNamePrefix=stream)["logStreams"]
        == []
    )
    assert stack.api("GET", f"/jobs/{job_id}")[0] == 200  # the record stays
    assert stack.api("GET", f"/jobs/{job_id}/result")[1]["error"]["code"] == "Expired"  # as after expiry
    assert stack.api("GET", f"/jobs/{job_id}/outputs")[0] == 410
    assert stack.api("DELETE", f"/jobs/{job_id}", account_id="someone-else")[0] == 404


def _all_pages(stack, job_id: str, **params: str) -> list[dict[str, Any]]:
    pages, token = [], None
    while True:
        query = {**params, **({"nextToken": token} if token else {})}
        status, body = stack.api("GET", f"/jobs/{job_id}/outputs", query=query)
        assert status == 200, body
        pages.append(body)
        token = body["nextToken"]
        if token is None:
            return pages


def test_outputs_page_by_limit_and_every_file_comes_once_in_name_order(stack):
    names = [f"part-{index:03d}.txt" for index in range(25)] + ["dir/é.txt"]
    job_id = finished(stack, {f"files/{name}": b"x" for name in names})

    pages = _all_pages(stack, job_id, limit="10")

    assert [len(page["files"]) for page in pages] == [10, 10, 6]
    listed = [f["name"] for page in pages for f in page["files"]]
    assert listed == sorted(names, key=lambda n: n.encode())


def test_outputs_pages_stay_under_their_budget_whatever_the_names(stack, monkeypatch):
    # Given names that escape to six bytes a character in JSON and in the URL, and a page budget
    # small enough that the limit is never what ends a page
    monkeypatch.setattr(queries, "OUTPUTS_PAGE_BYTES", 40_000)
    names = [f"{index:02d}-" + "é" * 300 for index in range(40)]
    job_id = finished(stack, {f"files/{name}": b"x" for name in names})

    pages = _all_pages(stack, job_id)

    assert len(pages) > 1
    for page in pages:
        files = page["files"]
        assert files
        # as the body carries them, and as the Lambda invoke response carries the body
        assert len(json.dumps(json.dumps(files))) <= queries.OUTPUTS_PAGE_BYTES
    assert [f["name"] for page in pages for f in page["files"]] == names


def test_an_outputs_token_not_issued_by_the_api_is_a_400_naming_it(stack):
    job_id = finished(stack, {"files/a.txt": b"a"})
    documents: list[Any] = [{"after": 1}, {}, [], {"after": "\ud800"}, {"after": "x" * 2000}]
    tokens = [base64.urlsafe_b64encode(json.dumps(document).encode()).decode() for document in documents]
    for token in ["garbage", *tokens]:
        status, body = stack.api("GET", f"/jobs/{job_id}/outputs", query={"nextToken": token})
        assert status == 400, token
        assert body["error"]["field"] == "nextToken"


def test_an_outputs_token_changed_or_issued_for_another_job_is_a_400_naming_it(stack):
    # Given a token the API issued for one job's outputs
    first = finished(stack, {"files/a.txt": b"a", "files/b.txt": b"b"})
    second = finished(stack, {"files/a.txt": b"a", "files/b.txt": b"b"})
    status, page = stack.api("GET", f"/jobs/{first}/outputs", query={"limit": "1"})
    assert status == 200 and page["nextToken"]
    token = page["nextToken"]
    forged = base64.urlsafe_b64encode(json.dumps({"after": "a.txt"}).encode()).decode()

    # When it is used for another job, changed, or forged without the job, Then each is refused
    for job_id, sent in [
        (second, token),
        (first, token + "\n"),
        (first, token[:4] + "é" + token[4:]),
        (first, forged),
    ]:
        status, body = stack.api("GET", f"/jobs/{job_id}/outputs", query={"nextToken": sent})
        assert status == 400, (job_id, sent, body)
        assert body["error"] == {
            "code": "ValidationError",
            "message": "nextToken is not one this API issued for this job.",
            "field": "nextToken",
        }
    # and the token still pages the job it was issued for
    status, page = stack.api("GET", f"/jobs/{first}/outputs", query={"nextToken": token})
    assert status == 200 and [f["name"] for f in page["files"]] == ["b.txt"]
