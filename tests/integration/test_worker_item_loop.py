"""Containers that take many items (``worker.item_loop``) against S3 (moto): claims, failures that stay
with their item, each item's console lines, its outputs where a one-item child's go."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from functions.adapters.s3 import S3BlobStore
from functions.domain.item_reports import parse_item_report
from functions.logic.container_reports import read_container
from tests.integration.test_worker import BUCKET
from tests.integration.test_worker_arrays import array_job, bucket, child_output
from worker.entrypoint import main
from worker.errors import ConfigError, InvalidJobInput
from worker.item_loop import Console, ItemLoop, Segment, claim_order
from worker.settings import WorkerSettings
from worker.storage import JobStorage
from worker.supervisor import JobRun

__all__ = ["bucket"]  # the moto bucket fixture

CODE = """
import ctypes, os, resource, sys
print(f"item {item} says hi")
print(f"remote-batch item {item + 1} starts here", file=sys.stderr)
if item == 2:
    raise ValueError("item two is bad")
if item == 3:
    ctypes.string_at(0)
if item == 4:
    resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))
    hog = bytearray(4 * 2**30)
if item == 5:
    os.kill(os.getpid(), 9)
item * 10
"""


def reports(client: Any, job: Any) -> dict[int, tuple[str, dict[str, Any]]]:
    """Every item report under the array's containers' prefixes: index → (batch job id, report)."""
    listing = client.list_objects_v2(Bucket=BUCKET, Prefix=f"{job.output_prefix}containers/")
    found: dict[int, tuple[str, dict[str, Any]]] = {}
    for item in listing.get("Contents", []):
        key = item["Key"]
        if not key.endswith(".json") or key.endswith("outcome.json"):
            continue
        container = key.removeprefix(f"{job.output_prefix}containers/").rsplit("/", 1)[0]
        report = json.loads(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
        assert report["index"] not in found, "an item ran twice"
        found[report["index"]] = (container, report)
    return found


def test_claim_order_runs_its_own_then_the_others_from_their_ends() -> None:
    assert list(claim_order(1, 3, 8)) == [1, 4, 7, 5, 2, 6, 3, 0]
    for container in range(3):
        assert sorted(claim_order(container, 3, 8)) == list(range(8))
    with pytest.raises(ValueError, match="outside"):
        list(claim_order(3, 3, 8))


def test_failures_stay_with_their_item_and_each_log_holds_its_own_lines(bucket, capfd):
    # Given an array of 8 items on 2 containers; items 2..5 raise, segfault, exceed memory, are killed
    items = list(range(8))
    job = array_job(bucket, {"kind": "code", "code": CODE}, items, offset=0, index="0")
    env = {
        **job.env,
        "REMOTE_BATCH_MEMORY_GIB": "1",
        "REMOTE_BATCH_ARRAY_CONTAINERS": "2",
        "AWS_BATCH_JOB_ID": "batch-span-a:0",
    }
    capfd.readouterr()

    # When container 0 runs (alone: it takes its own items, then container 1's)
    assert main(env, bucket) == 0
    console = capfd.readouterr().out.splitlines()
    # and container 1 starts after it: nothing is left to claim
    assert main({**env, "AWS_BATCH_JOB_ARRAY_INDEX": "1", "AWS_BATCH_JOB_ID": "batch-span-a:1"}, bucket) == 0

    # Then every item ran once, in container 0, and the others succeeded with their results
    found = reports(bucket, job)
    assert sorted(found) == items
    assert {container for container, _ in found.values()} == {"batch-span-a:0"}
    parsed = {
        i: parse_item_report(
            json.dumps(r).encode(), array_size=8, container_started_ms=0, container_stopped_ms=2**53
        )
        for i, (_, r) in found.items()
    }
    assert [i for i, r in parsed.items() if r.succeeded] == [0, 1, 6, 7]
    for index in (0, 1, 6, 7):
        assert child_output(bucket, job, index, "outcome.json")["result"] == index * 10
    assert parsed[2].reason == "ValueError: item two is bad"
    assert parsed[3].reason == "Killed: The job's Python was killed by signal SIGSEGV (11)."
    assert parsed[4].reason == "Memory limit of 1 GiB exceeded"
    assert parsed[5].reason == "Killed: The job's Python was killed by signal SIGKILL (9)."
    assert child_output(bucket, job, 3, "outcome.json")["error"]["signal"] == 11
    assert {parsed[i].exit_code for i in (2, 3, 4, 5)}.isdisjoint({0})
    # Each item's lines are its own: its greeting, and the line that pretends to start the next item
    for index, report in parsed.items():
        lines = console[report.log_first : report.log_first + report.log_count]
        assert f"item {index} says hi" in lines
        assert f"remote-batch item {index + 1} starts here" in lines
        others = [line for line in lines if "says hi" in line and line != f"item {index} says hi"]
        assert others == []
    assert sum(r.log_count for r in parsed.values()) == len(console)


class QuietConsole(Console):
    """A console whose segments count nothing (threads cannot each own fds 1 and 2)."""

    def __init__(self) -> None:
        super().__init__(-1)

    @contextmanager
    def segment(self) -> Iterator[Segment]:
        yield Segment()


def test_concurrent_containers_never_run_an_item_twice(bucket, tmp_path: Path) -> None:
    # Given 4 containers taking 60 items at once
    storage = JobStorage(bucket, BUCKET)
    ran: dict[str, list[int]] = {}
    start = threading.Barrier(4)

    def container(number: int) -> None:
        def run_item(index: int, output_dir: Path) -> JobRun:
            return JobRun([], None, None, 0)

        loop = ItemLoop(
            storage=storage,
            output_prefix="outputs/job-x/",
            batch_job_id=f"span:{number}",
            container=number,
            containers=4,
            size=60,
            run_item=run_item,
            publish=lambda prefix, run, folder: None,
            console=QuietConsole(),
        )
        start.wait()
        ran[loop.batch_job_id] = loop.run()

    threads = [threading.Thread(target=container, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    # Then each item ran in exactly one container, and each container ran its own first item
    every = [index for indexes in ran.values() for index in indexes]
    assert sorted(every) == list(range(60))
    assert all(ran[f"span:{n}"][0] == n for n in range(4))
    claims = bucket.list_objects_v2(Bucket=BUCKET, Prefix="outputs/job-x/claims/")["KeyCount"]
    assert claims == 60


BASE = {
    "REMOTE_BATCH_JOB_ID": "job-x",
    "REMOTE_BATCH_BUCKET": "b",
    "REMOTE_BATCH_INPUT_KEY": "inputs/job-x/input.json",
    "REMOTE_BATCH_OUTPUT_PREFIX": "outputs/job-x/",
}


def test_a_container_of_many_items_writes_its_own_under_its_batch_id() -> None:
    env = {
        **BASE,
        "REMOTE_BATCH_ARRAY_OFFSET": "0",
        "AWS_BATCH_JOB_ARRAY_INDEX": "3",
        "REMOTE_BATCH_ARRAY_CONTAINERS": "4",
        "AWS_BATCH_JOB_ID": "abc:3",
    }
    settings = WorkerSettings.from_environ(env)
    assert (settings.array_index, settings.containers) == (3, 4)
    assert settings.job_output_prefix == "outputs/job-x/containers/abc:3/"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"REMOTE_BATCH_ARRAY_CONTAINERS": "0"}, "1..10000"),
        ({"REMOTE_BATCH_ARRAY_CONTAINERS": "10001"}, "1..10000"),
        ({"REMOTE_BATCH_ARRAY_CONTAINERS": "x"}, "integer"),
        ({"REMOTE_BATCH_ARRAY_CONTAINERS": "2", "AWS_BATCH_JOB_ARRAY_INDEX": "2"}, "outside"),
        ({"AWS_BATCH_JOB_ID": ""}, "needs"),
        ({"REMOTE_BATCH_ARRAY_OFFSET": ""}, "needs"),
    ],
)
def test_bad_container_settings_are_refused(changes: dict[str, str], message: str) -> None:
    env = {
        **BASE,
        "REMOTE_BATCH_ARRAY_OFFSET": "0",
        "AWS_BATCH_JOB_ARRAY_INDEX": "1",
        "REMOTE_BATCH_ARRAY_CONTAINERS": "2",
        "AWS_BATCH_JOB_ID": "abc:1",
        **changes,
    }
    with pytest.raises(ConfigError, match=message):
        WorkerSettings.from_environ(env)


def test_the_service_reads_what_a_container_ran_and_what_a_dead_one_held(bucket, capfd):
    # Given an array of 6 items on 2 containers: container 0 ran items 0..4 (an item that raises among
    # them), container 1 claimed item 5 and died before reporting it
    job = array_job(bucket, {"kind": "code", "code": "1 / (item - 3)"}, list(range(6)), offset=0, index="0")
    bucket.put_object(Bucket=BUCKET, Key=f"{job.output_prefix}claims/5", Body=b"span-b:1")
    env = {**job.env, "REMOTE_BATCH_ARRAY_CONTAINERS": "2", "AWS_BATCH_JOB_ID": "span-b:0"}
    assert main(env, bucket) == 0
    # and item 4's report overwritten by a forged one, too big to be a report
    bucket.put_object(Bucket=BUCKET, Key=f"{job.output_prefix}containers/span-b:0/4.json", Body=b" " * 9000)
    blobs = S3BlobStore(bucket, BUCKET)
    life = {"array_size": 6, "started_ms": 0, "stopped_ms": 2**53}

    # When the service reads each container's end
    ran = read_container(
        blobs,
        job.job_id,
        "span-b:0",
        charge=Decimal("1.0000"),
        end_reason="The item's report was refused",
        **life,
    )
    dead = read_container(
        blobs,
        job.job_id,
        "span-b:1",
        charge=Decimal("1.0000"),
        end_reason="Memory limit of 8 GiB exceeded",
        **life,
    )

    # Then container 0's items are its 5, item 4 failed (its report refused), sharing its charge exactly
    assert [(i.index, i.succeeded) for i in ran.items] == [
        (0, True),
        (1, True),
        (2, True),
        (3, False),
        (4, False),
    ]
    assert ran.items[4].reason == "The item's report was refused"
    assert ran.items[3].reason == "ZeroDivisionError: division by zero"
    assert ran.rejected == 1
    assert sum(i.credits for i in ran.items) == Decimal("1.0000")
    # and the item the dead container held fails with its reason, charged its whole charge
    assert [(i.index, i.succeeded, i.reason, i.credits) for i in dead.items] == [
        (5, False, "Memory limit of 8 GiB exceeded", Decimal("1.0000"))
    ]


def test_an_item_whose_input_is_refused_fails_alone(bucket) -> None:
    # Given a container of 3 items whose item 1 cannot be read
    storage = JobStorage(bucket, BUCKET)

    def run_item(index: int, output_dir: Path) -> JobRun:
        if index == 1:
            raise InvalidJobInput("item 1 is not JSON")
        return JobRun([], None, None, 0)

    loop = ItemLoop(
        storage=storage,
        output_prefix="outputs/job-y/",
        batch_job_id="span:0",
        container=0,
        containers=1,
        size=3,
        run_item=run_item,
        publish=lambda prefix, run, folder: None,
        console=QuietConsole(),
    )

    # When it runs, Then it goes on past item 1, whose report says why with the worker's exit code
    assert loop.run() == [0, 1, 2]
    report = json.loads(bucket.get_object(Bucket=BUCKET, Key=loop.report_key(1))["Body"].read())
    assert (report["status"], report["exitCode"]) == ("Failed", 2)
    assert report["reason"] == "The item's input was rejected: item 1 is not JSON"
    assert (
        json.loads(bucket.get_object(Bucket=BUCKET, Key=loop.report_key(2))["Body"].read())["status"]
        == "Succeeded"
    )


@pytest.mark.slow
def test_a_straggler_of_an_item_never_writes_into_the_next_items_lines(capfd) -> None:
    # Given the container's console (what the job side writes to fds 1 and 2)
    console = Console(os.dup(1))
    capfd.readouterr()
    with console.segment() as first:
        os.write(1, b"first item\n")
        os.write(2, b"unfinished")  # a line without its newline
    with console.segment() as second:
        os.write(1, b"second item\n")
        # an item that leaves a process behind, which prints after the item ended
        straggler = subprocess.Popen(["sh", "-c", "sleep 2.5; echo straggler"])
    with console.segment() as third:
        os.write(1, b"third item\n")
        time.sleep(1.5)  # the straggler prints while this item runs
    straggler.wait()
    lines = capfd.readouterr().out.splitlines()

    # Then each item's lines are its own, the unfinished line ended at its boundary, the straggler dropped
    assert lines[first.first : first.first + first.count] == ["first item", "unfinished"]
    assert lines[second.first : second.first + second.count] == ["second item"]
    assert lines[third.first : third.first + third.count] == ["third item"]
    assert lines == ["first item", "unfinished", "second item", "third item"]
