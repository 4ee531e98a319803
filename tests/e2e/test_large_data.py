"""Large data on the local stack over HTTP: uploads, links instead of big bodies, 413, long log lines."""

from __future__ import annotations

import hashlib
import time

import pytest
import requests

from tests.e2e.conftest import Client

MIB = 1024 * 1024


@pytest.mark.slow
def test_a_50_mb_input_goes_through_the_upload_route_and_the_job_reads_it(dev: Client) -> None:
    started = time.monotonic()
    # 50 MB of Python source: a 50 MB string literal; the job's result is its length and digest.
    filler = "x" * (50 * 1000 * 1000)
    source = f"import hashlib\ndata = '{filler}'\n(len(data), hashlib.sha256(data.encode()).hexdigest())\n"
    payload = source.encode()
    signed = dev.post("/jobs/uploads", json={"size": len(payload), "contentType": "text/x-python"})
    assert signed.status_code == 201, signed.text
    upload = signed.json()
    assert "X-Amz-Algorithm=AWS4-HMAC-SHA256" in upload["uploadUrl"]
    put = requests.put(upload["uploadUrl"], data=payload, headers=upload["headers"], timeout=60)
    assert put.status_code == 200, put.text

    job = dev.submit({"inputKey": upload["inputKey"]})
    final = dev.wait_status(job["jobId"], timeout=60)
    assert final["status"] == "Succeeded", final
    result = dev.get(f"/jobs/{job['jobId']}/result").json()
    assert result["result"] == [len(filler), hashlib.sha256(filler.encode()).hexdigest()]
    print(f"50 MB upload: {len(payload)} bytes, job {final['status']} in {time.monotonic() - started:.1f} s")


def test_a_7_mb_body_is_413_with_the_api_error_body(dev: Client) -> None:
    body = b'{"code": "' + b"a" * (7 * 1000 * 1000) + b'"}'
    response = dev.post("/jobs", data=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 413, response.text
    assert response.json() == {
        "error": {
            "code": "PayloadTooLarge",
            "message": "The request body is over 5 MiB; upload large inputs through an upload URL.",
            "field": None,
        }
    }


def test_a_300000_byte_line_comes_back_as_one_line(dev: Client) -> None:
    job = dev.submit({"code": "import sys\nsys.stdout.write('B'*300000+'\\n')\n1"})
    assert dev.wait_status(job["jobId"])["status"] == "Succeeded"
    text = dev.get(f"/jobs/{job['jobId']}/log", params={"format": "text"})
    assert text.status_code == 200
    lines = [line for line in text.text.split("\n") if line]
    assert lines == ["B" * 300_000]


def test_a_preview_is_a_303_that_a_client_follows_to_the_png(dev: Client) -> None:
    job = dev.submit({"code": "'hello'"})
    assert dev.wait_status(job["jobId"])["status"] == "Succeeded"
    response = dev.get(f"/jobs/{job['jobId']}/preview.png", allow_redirects=False)
    assert response.status_code == 303
    assert response.headers["Location"] == response.json()["url"]
    followed = dev.get(f"/jobs/{job['jobId']}/preview.png")
    assert followed.status_code == 200
    assert followed.content.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(followed.content) == response.json()["size"]
