"""An array child's worker against S3 (moto): its item read by index from the array's one copy of the
items, its outputs under the parent's prefix at its global index."""

from __future__ import annotations

import base64
import json
import sys
from typing import Any

import cloudpickle

from functions.domain.arrays import encode_items
from tests.integration.test_worker import BUCKET, Job, s3  # noqa: F401 - the fixture
from worker.entrypoint import main


def array_job(s3: Any, document: dict[str, Any], items: list[Any], offset: int, index: str | None) -> Job:
    """A span of an array: the items and their index stored as the service stores them, the
    span's environment (offset, and AWS Batch's index in the span unless it is a one-item span)."""
    env = {"REMOTE_BATCH_ARRAY_OFFSET": str(offset)}
    if index is not None:
        env["AWS_BATCH_JOB_ARRAY_INDEX"] = index
    job = Job(s3, **env)
    data, idx = encode_items(items)
    prefix = f"inputs/{job.job_id}/"
    s3.put_object(Bucket=BUCKET, Key=prefix + "items.jsonl", Body=data)
    s3.put_object(Bucket=BUCKET, Key=prefix + "items.idx", Body=idx)
    document = {
        **document,
        "arrayItemsKey": prefix + "items.jsonl",
        "arrayIndexKey": prefix + "items.idx",
        "arraySize": len(items),
    }
    return job.put_input(document)


def child_output(s3: Any, job: Job, index: int, name: str) -> Any:
    key = f"{job.output_prefix}{index}/{name}"
    return json.loads(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())


def test_code_sees_its_item_and_global_index_and_writes_under_it(s3):
    items = [{"n": i} for i in range(300)]
    job = array_job(
        s3, {"kind": "code", "code": "(item['n'] ** 2, arrayIndex)"}, items, offset=200, index="57"
    )

    assert main(job.env, s3) == 0
    assert child_output(s3, job, 257, "result.json")["result"] == [257**2, 257]
    assert all(name.startswith("257/") for name in job.output_names())
    assert "257/messages.json" in job.output_names()


def test_a_one_item_span_is_its_index_zero(s3):
    job = array_job(s3, {"kind": "code", "code": "item"}, ["a", "b", "c"], offset=2, index=None)
    assert main(job.env, s3) == 0
    assert child_output(s3, job, 2, "result.json")["result"] == "c"


def test_a_pickled_function_gets_the_item_first(s3):
    payload = cloudpickle.dumps((lambda item, k: item * k, (3,), {}))
    document = {"kind": "pickle", "pickle": base64.b64encode(payload).decode()}
    job = array_job(s3, document, [1, 2, 3, 4], offset=0, index="2")
    assert main(job.env, s3) == 0
    assert child_output(s3, job, 2, "result.json")["result"] == 9


def test_a_command_reads_its_item_file_and_its_index(s3):
    script = (
        "import json, os, pathlib\n"
        "item = json.load(open(os.environ['REMOTE_BATCH_ITEM_FILE']))\n"
        "out = pathlib.Path(os.environ['REMOTE_BATCH_OUTPUT_DIR'], 'out.txt')\n"
        "out.write_text(f\"{item['word'].upper()} {os.environ['AWS_BATCH_JOB_ARRAY_INDEX']}\")\n"
    )
    items = [{"word": w} for w in ("zero", "one", "two")]
    job = array_job(
        s3, {"kind": "command", "command": [sys.executable, "-c", script]}, items, offset=1, index="1"
    )

    assert main(job.env, s3) == 0
    key = f"{job.output_prefix}2/files/out.txt"
    assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"TWO 2"


def test_an_index_past_the_items_is_refused_before_any_user_code(s3):
    job = array_job(s3, {"kind": "code", "code": "item"}, [1, 2], offset=0, index="5")
    assert main(job.env, s3) == 2
    error = child_output(s3, job, 5, "messages.json")["error"]
    assert "array index 5 is outside the array's 2 items" in error["reason"]
