"""An array child's worker against S3 (moto): its item read by index from the array's one copy of the
items, its outputs under the parent's prefix at its global index."""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from typing import Any

import boto3
import cloudpickle
import pytest
from moto import mock_aws

from functions.domain.arrays import encode_items
from tests.integration.test_worker import BUCKET, REGION, Job
from worker.entrypoint import main


@pytest.fixture
def bucket(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """An S3 client of a moto bucket, as ``test_worker``'s ``s3`` fixture makes it."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(name, "testing")
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_DEFAULT_REGION", REGION)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket=BUCKET)
        yield client


def array_job(bucket: Any, document: dict[str, Any], items: list[Any], offset: int, index: str | None) -> Job:
    """A span of an array: the items and their index stored as the service stores them, the
    span's environment (offset, and AWS Batch's index in the span unless it is a one-item span)."""
    env = {"REMOTE_BATCH_ARRAY_OFFSET": str(offset)}
    if index is not None:
        env["AWS_BATCH_JOB_ARRAY_INDEX"] = index
    job = Job(bucket, **env)
    data, idx = encode_items(items)
    prefix = f"inputs/{job.job_id}/"
    bucket.put_object(Bucket=BUCKET, Key=prefix + "items.jsonl", Body=data)
    bucket.put_object(Bucket=BUCKET, Key=prefix + "items.idx", Body=idx)
    document = {
        **document,
        "arrayItemsKey": prefix + "items.jsonl",
        "arrayIndexKey": prefix + "items.idx",
        "arraySize": len(items),
    }
    return job.put_input(document)


def child_output(bucket: Any, job: Job, index: int, name: str) -> Any:
    key = f"{job.output_prefix}{index}/{name}"
    return json.loads(bucket.get_object(Bucket=BUCKET, Key=key)["Body"].read())


def test_code_sees_its_item_and_global_index_and_writes_under_it(bucket):
    items = [{"n": i} for i in range(300)]
    job = array_job(
        bucket, {"kind": "code", "code": "(item['n'] ** 2, arrayIndex)"}, items, offset=200, index="57"
    )

    assert main(job.env, bucket) == 0
    assert child_output(bucket, job, 257, "outcome.json")["result"] == [257**2, 257]
    assert all(name.startswith("257/") for name in job.output_names())
    assert job.output_names() == ["257/outcome.json"]  # one object for the whole outcome


def test_a_one_item_span_is_its_index_zero(bucket):
    job = array_job(bucket, {"kind": "code", "code": "item"}, ["a", "b", "c"], offset=2, index=None)
    assert main(job.env, bucket) == 0
    assert child_output(bucket, job, 2, "outcome.json")["result"] == "c"


def test_a_pickled_function_gets_the_item_first(bucket):
    payload = cloudpickle.dumps((lambda item, k: item * k, (3,), {}))
    document = {"kind": "pickle", "pickle": base64.b64encode(payload).decode()}
    job = array_job(bucket, document, [1, 2, 3, 4], offset=0, index="2")
    assert main(job.env, bucket) == 0
    assert child_output(bucket, job, 2, "outcome.json")["result"] == 9


def test_a_command_reads_its_item_file_and_its_index(bucket):
    script = (
        "import json, os, pathlib\n"
        "item = json.load(open(os.environ['REMOTE_BATCH_ITEM_FILE']))\n"
        "out = pathlib.Path(os.environ['REMOTE_BATCH_OUTPUT_DIR'], 'out.txt')\n"
        "out.write_text(f\"{item['word'].upper()} {os.environ['AWS_BATCH_JOB_ARRAY_INDEX']}\")\n"
    )
    items = [{"word": w} for w in ("zero", "one", "two")]
    job = array_job(
        bucket, {"kind": "command", "command": [sys.executable, "-c", script]}, items, offset=1, index="1"
    )

    assert main(job.env, bucket) == 0
    key = f"{job.output_prefix}2/files/out.txt"
    assert bucket.get_object(Bucket=BUCKET, Key=key)["Body"].read() == b"TWO 2"


def test_an_index_past_the_items_is_refused_before_any_user_code(bucket):
    job = array_job(bucket, {"kind": "code", "code": "item"}, [1, 2], offset=0, index="5")
    assert main(job.env, bucket) == 2
    error = child_output(bucket, job, 5, "outcome.json")["error"]
    assert "array index 5 is outside the array's 2 items" in error["reason"]
