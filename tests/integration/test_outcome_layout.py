"""The worker's one-object outcome (``worker.layout``) as the api serves it: result, pickle, messages,
preview, an array's children, deletion; the layout before it still read (issue 14, item 2).

The outputs are written by the real worker code (``worker.runner.run_code`` then
``worker.entrypoint.publish``) into the stack's moto bucket, then the job's Batch events are delivered.
"""

from __future__ import annotations

import base64
import json
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import cloudpickle
import pytest
import requests

from functions.domain.jobs import PayloadKind
from functions.domain.machine_classes import GeoZone
from functions.logic import arrays
from functions.logic.submission import JobRequest
from tests.events import array_child_lifecycle, job_lifecycle
from worker.entrypoint import publish
from worker.runner import run_code
from worker.storage import JobStorage
from worker.supervisor import JobRun

T0 = 1_796_000_000_000
BUCKET = "test-data-us-east-1"
US = GeoZone.UNITED_STATES


def objects(prefix: str) -> list[str]:
    s3 = boto3.client("s3", region_name="us-east-1")
    listing = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"].removeprefix(prefix) for o in listing.get("Contents", []))


def worker_publishes(prefix: str, code: str, tmp_path: Path) -> Counter[str]:
    """Run ``code`` as the worker does and publish its outcome under ``prefix``; the S3 requests the
    worker made, by operation."""
    s3 = boto3.client("s3", region_name="us-east-1")
    calls: Counter[str] = Counter()
    s3.meta.events.register("before-call.s3", lambda model, **_: calls.update([model.name]))
    output_dir = tmp_path / "out"
    output_dir.mkdir(exist_ok=True)
    publish(JobStorage(s3, BUCKET), prefix, JobRun.from_outcome(run_code(code)), output_dir)
    return calls


def finished_job(
    stack: Any, code: str, tmp_path: Path, *, succeeded: bool = True
) -> tuple[str, Counter[str]]:
    status, job = stack.api("POST", "/jobs", body={"code": code})
    assert status == 202
    job_id = job["jobId"]
    batch_id = stack.services.store.get_job(job_id).batch_job_id
    calls = worker_publishes(f"outputs/{job_id}/", code, tmp_path)
    for event in job_lifecycle(
        job_id, batch_id, created_at=T0, started_at=T0, stopped_at=T0 + 1_000, succeeded=succeeded
    ):
        stack.deliver(event)
    return job_id, calls


@pytest.fixture
def api_s3_calls(stack: Any) -> Counter[str]:
    """The S3 requests the Lambdas make from now on, by operation."""
    calls: Counter[str] = Counter()
    client = stack.services.zones[US].blobs._s3
    client.meta.events.register("before-call.s3", lambda model, **_: calls.update([model.name]))
    return calls


def test_a_job_whose_result_is_4_is_one_put_and_its_result_one_get(stack, tmp_path, api_s3_calls):
    code = "import warnings\nwarnings.warn('w')\n2 + 2"
    job_id, worker_calls = finished_job(stack, code, tmp_path)

    assert worker_calls == Counter({"PutObject": 1})
    assert objects(f"outputs/{job_id}/") == ["outcome.json"]
    api_s3_calls.clear()
    status, result = stack.api("GET", f"/jobs/{job_id}/result")
    assert (status, result) == (
        200,
        {"jobId": job_id, "result": 4, "resultRepr": "4", "messages": ["<job>:2: UserWarning: w"]},
    )
    assert api_s3_calls == Counter({"GetObject": 1})
    status, pickled = stack.api("GET", f"/jobs/{job_id}/result", query={"format": "pickle"})
    assert status == 200
    assert cloudpickle.loads(base64.b64decode(pickled["pickle"])) == 4  # the test unpickles, never the api


def test_failed_code_gives_its_status_reason_messages_and_a_none_pickle(stack, tmp_path):
    job_id, _ = finished_job(stack, "1/0", tmp_path, succeeded=False)

    job = stack.api("GET", f"/jobs/{job_id}")[1]
    assert (job["status"], job["statusReason"]) == ("Terminated", "ZeroDivisionError: division by zero")
    status, result = stack.api("GET", f"/jobs/{job_id}/result")
    assert status == 200
    assert (result["result"], result["resultRepr"]) == (None, "None")
    assert result["messages"][0] == "ZeroDivisionError: division by zero"
    assert result["messages"][1].startswith("Traceback (most recent call last):")
    pickled = stack.api("GET", f"/jobs/{job_id}/result", query={"format": "pickle"})[1]
    assert cloudpickle.loads(base64.b64decode(pickled["pickle"])) is None


def test_a_text_preview_is_written_to_its_object_at_the_first_request(stack, tmp_path, api_s3_calls):
    job_id, _ = finished_job(stack, "{'answer': 42}", tmp_path)
    inline = base64.b64decode(
        json.loads(stack.services.zones[US].blobs.get(f"outputs/{job_id}/outcome.json"))["preview"]
    )
    assert inline.startswith(b"\x89PNG\r\n\x1a\n")

    api_s3_calls.clear()
    status, link = stack.api("GET", f"/jobs/{job_id}/preview.png")
    assert status == 303
    assert link["size"] == len(inline) and f"outputs/{job_id}/preview.png" in link["url"]
    assert requests.get(link["url"], timeout=10).content == inline
    assert api_s3_calls == Counter({"HeadObject": 1, "GetObject": 1, "PutObject": 1})
    api_s3_calls.clear()
    assert stack.api("GET", f"/jobs/{job_id}/preview.png")[0] == 303
    assert api_s3_calls == Counter({"HeadObject": 1})  # written once, then only linked


def test_a_figure_preview_is_the_workers_own_object(stack, tmp_path):
    code = "from matplotlib.figure import Figure\nfig = Figure()\nfig.add_subplot().plot([3, 1, 2])\nfig"
    job_id, worker_calls = finished_job(stack, code, tmp_path)

    assert worker_calls == Counter({"PutObject": 2})
    assert objects(f"outputs/{job_id}/") == ["outcome.json", "preview.png"]
    status, link = stack.api("GET", f"/jobs/{job_id}/preview.png")
    assert status == 303
    assert requests.get(link["url"], timeout=10).content.startswith(b"\x89PNG\r\n\x1a\n")


def test_a_none_result_has_no_preview(stack, tmp_path):
    job_id, _ = finished_job(stack, "x = 1", tmp_path)
    status, error = stack.api("GET", f"/jobs/{job_id}/preview.png")
    assert (status, error["error"]["code"]) == (404, "NotFound")
    assert objects(f"outputs/{job_id}/") == ["outcome.json"]


def test_a_big_result_and_pickle_get_objects_of_their_own_served_inline_or_linked(stack, tmp_path):
    medium, _ = finished_job(stack, "'y' * 2_000_000", tmp_path)  # 2 MB: over the 1 MiB inlined
    assert objects(f"outputs/{medium}/") == ["outcome.json", "result.json", "result.pickle"]
    result = stack.api("GET", f"/jobs/{medium}/result")[1]
    assert result["result"] == "y" * 2_000_000 and result["resultRepr"].startswith("'yyy")
    pickled = stack.api("GET", f"/jobs/{medium}/result", query={"format": "pickle"})[1]
    assert cloudpickle.loads(base64.b64decode(pickled["pickle"])) == "y" * 2_000_000

    big, _ = finished_job(stack, "'x' * (5 * 1024 * 1024 + 1)", tmp_path)  # over the 5 MiB response
    result = stack.api("GET", f"/jobs/{big}/result")[1]
    assert "result" not in result and f"outputs/{big}/result.json?" in result["resultUrl"]
    assert json.loads(requests.get(result["resultUrl"], timeout=30).content)["result"] == "x" * (
        5 * 1024 * 1024 + 1
    )
    pickled = stack.api("GET", f"/jobs/{big}/result", query={"format": "pickle"})[1]
    assert "pickle" not in pickled and f"outputs/{big}/result.pickle?" in pickled["resultUrl"]


def test_messages_over_their_budget_link_the_outcome(stack, tmp_path):
    job_id, _ = finished_job(stack, "4", tmp_path)
    long = ["w" * 8_000] * 80  # 640 kB: over the 512 KiB inlined
    document = {
        "format": "remote-batch.outcome/1",
        "messages": long,
        "error": None,
        "result": 4,
        "resultRepr": "4",
    }
    stack.services.zones[US].blobs.put(
        f"outputs/{job_id}/outcome.json", json.dumps(document).encode(), "application/json"
    )

    result = stack.api("GET", f"/jobs/{job_id}/result")[1]
    assert result["result"] == 4 and result["messages"] == []
    assert f"outputs/{job_id}/outcome.json?" in result["messagesUrl"]
    assert json.loads(requests.get(result["messagesUrl"], timeout=10).content)["messages"] == long


def test_an_outcome_of_another_format_is_an_internal_error_not_a_guess(stack, tmp_path):
    job_id, _ = finished_job(stack, "4", tmp_path)
    document = {"format": "remote-batch.outcome/99", "result": 5, "resultRepr": "5"}
    stack.services.zones[US].blobs.put(
        f"outputs/{job_id}/outcome.json", json.dumps(document).encode(), "application/json"
    )
    status, error = stack.api("GET", f"/jobs/{job_id}/result")
    assert (status, error["error"]["code"]) == (500, "InternalError")


def test_the_previous_layout_is_still_served(stack):
    """A job its worker wrote before outcome.json (within its 14 days when this layout shipped)."""
    _, job = stack.api("POST", "/jobs", body={"code": "2 + 2"})
    job_id = job["jobId"]
    blobs = stack.services.zones[US].blobs
    blobs.put(f"outputs/{job_id}/result.json", b'{"result": 4, "resultRepr": "4"}', "application/json")
    blobs.put(f"outputs/{job_id}/result.pickle", cloudpickle.dumps(4), "application/octet-stream")
    blobs.put(f"outputs/{job_id}/preview.png", b"\x89PNG old", "image/png")
    blobs.put(f"outputs/{job_id}/messages.json", b'{"messages": ["old"], "error": null}', "application/json")
    batch_id = stack.services.store.get_job(job_id).batch_job_id
    for event in job_lifecycle(job_id, batch_id, created_at=T0, started_at=T0, stopped_at=T0 + 1_000):
        stack.deliver(event)

    assert stack.api("GET", f"/jobs/{job_id}/result")[1] == {
        "jobId": job_id,
        "result": 4,
        "resultRepr": "4",
        "messages": ["old"],
    }
    pickled = stack.api("GET", f"/jobs/{job_id}/result", query={"format": "pickle"})[1]
    assert cloudpickle.loads(base64.b64decode(pickled["pickle"])) == 4
    assert stack.api("GET", f"/jobs/{job_id}/preview.png")[1]["size"] == len(b"\x89PNG old")


def test_delete_removes_the_outcome_its_objects_and_a_written_preview(stack, tmp_path):
    job_id, _ = finished_job(stack, "'z' * 1_500_000", tmp_path)  # 1.5 MB: result.json and result.pickle too
    assert stack.api("GET", f"/jobs/{job_id}/preview.png")[0] == 303
    assert objects(f"outputs/{job_id}/") == ["outcome.json", "preview.png", "result.json", "result.pickle"]

    assert stack.api("DELETE", f"/jobs/{job_id}")[0] == 204
    assert objects(f"outputs/{job_id}/") == []


def test_an_arrays_result_reads_its_childrens_outcomes_and_the_previous_layout(stack, tmp_path):
    parent = arrays.submit(
        stack.services,
        "dev",
        JobRequest(payload_kind=PayloadKind.CODE, payload="item", array_items=[1, 2, 3, 4]),
        stack.clock(),
    )
    worker_publishes(f"outputs/{parent.job_id}/0/", "{'n': 1}", tmp_path)
    worker_publishes(
        f"outputs/{parent.job_id}/1/", "'q' * 1_100_000", tmp_path
    )  # 1.1 MB: its own result.json
    blobs = stack.services.zones[US].blobs
    blobs.put(
        f"outputs/{parent.job_id}/2/result.json", b'{"result": 3, "resultRepr": "3"}', "application/json"
    )
    worker_publishes(f"outputs/{parent.job_id}/3/", "1/0", tmp_path)
    span = parent.array_spans[0]
    for index in range(4):
        for event in array_child_lifecycle(
            parent.job_id,
            span,
            index,
            created_at=T0,
            started_at=T0,
            stopped_at=T0 + 1_000,
            succeeded=index != 3,
        ):
            stack.deliver(event)

    status, result = stack.api("GET", f"/jobs/{parent.job_id}/result")
    assert status == 200
    assert result["result"] == [{"n": 1}, None, 3, None]
    assert f"GET /jobs/{parent.job_id}:1/result" in result["resultRepr"]
    assert result["errors"] == [{"index": 3, "message": "ZeroDivisionError: division by zero"}]
    child = stack.api("GET", f"/jobs/{parent.job_id}:1/result")[1]
    assert child["result"] == "q" * 1_100_000
