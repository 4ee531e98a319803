"""AWS Batch array jobs in the local executor: real subprocesses, events on the bus (issue 12 item 8).

What is asserted is AWS Batch's documented behaviour (``remote_batch_local.batch_arrays``): children
``<id>:<index>`` with the parent's name and ``arrayProperties.index``, queued for the host's vCPUs,
each with ``AWS_BATCH_JOB_ARRAY_INDEX``; a parent that goes PENDING, then SUCCEEDED only if every child
did, with ``arrayProperties.size`` and ``statusSummary``; TerminateJob of the parent cascading.
"""

from __future__ import annotations

import logging
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import boto3
import psutil
import pytest
from botocore.exceptions import ClientError
from moto.server import ThreadedMotoServer

from functions.domain.errors import DependencyFailed
from functions.ports import BatchSubmission
from remote_batch_local.bus import EventBus
from remote_batch_local.executor import LocalBatchExecutor, LocalBatchGateway

REGION = "eu-central-1"
LOG_GROUP = "/remote-batch/jobs"
MARKER = f"remote-batch-array-worker-{uuid.uuid4().hex}"
FINAL = ("SUCCEEDED", "FAILED")
NONE_IN = {
    "SUBMITTED": 0,
    "PENDING": 0,
    "RUNNABLE": 0,
    "STARTING": 0,
    "RUNNING": 0,
    "SUCCEEDED": 0,
    "FAILED": 0,
}

WORKER = textwrap.dedent(
    f"""
    # {MARKER}
    import os, sys, time
    index = os.environ.get("AWS_BATCH_JOB_ARRAY_INDEX")
    size = os.environ.get("AWS_BATCH_JOB_ARRAY_SIZE")
    print("index", index, "of", size, "id", os.environ["AWS_BATCH_JOB_ID"])
    print("base", os.environ.get("BASE_VAR"), "job", os.environ.get("JOB_VAR"), flush=True)
    time.sleep(float(os.environ.get("SLEEP", "0")))
    sys.exit(1 if index is not None and index == os.environ.get("FAIL_INDEX") else 0)
    """
)

Envelope = dict[str, Any]


class Delivered:
    """A fake batch_events Lambda: every envelope in delivery order (and by job), with waits."""

    def __init__(self) -> None:
        self.envelopes: list[Envelope] = []
        self.by_job: dict[str, list[Envelope]] = {}
        self.cond = threading.Condition()

    def __call__(self, envelope: Envelope) -> None:
        with self.cond:
            self.envelopes.append(envelope)
            self.by_job.setdefault(envelope["detail"]["jobId"], []).append(envelope)
            self.cond.notify_all()

    def of(self, batch_job_id: str) -> list[Envelope]:
        with self.cond:
            return list(self.by_job.get(batch_job_id, []))

    def statuses(self, batch_job_id: str) -> list[str]:
        return [e["detail"]["status"] for e in self.of(batch_job_id)]

    def wait_for(self, batch_job_id: str, statuses: tuple[str, ...], timeout: float = 20) -> Envelope:
        def found() -> Envelope | None:
            events = self.by_job.get(batch_job_id, [])
            return next((e for e in events if e["detail"]["status"] in statuses), None)

        with self.cond:
            self.cond.wait_for(lambda: found() is not None, timeout)
            event = found()
        assert event is not None, f"no {statuses} for {batch_job_id}; got {self.statuses(batch_job_id)}"
        return event


class Issuer:
    """A fake CredentialIssuer that records what it was asked."""

    def __init__(self) -> None:
        self.issued: list[str] = []
        self.revoked: list[str] = []

    def issue(self, batch_job_id: str, submission: BatchSubmission) -> dict[str, str]:
        self.issued.append(batch_job_id)
        return {"AWS_ACCESS_KEY_ID": f"key-{batch_job_id}", "AWS_SECRET_ACCESS_KEY": "secret"}

    def revoke(self, batch_job_id: str) -> None:
        self.revoked.append(batch_job_id)


class Stack:
    def __init__(self, executor: LocalBatchExecutor, delivered: Delivered) -> None:
        self.executor = executor
        self.delivered = delivered
        self.gateway: LocalBatchGateway = executor.gateway(REGION, LOG_GROUP)


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def _logs_client(endpoint: str, region: str) -> Any:
    return boto3.client(
        "logs",
        region_name=region,
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",  # moto's fake credentials
    )


@pytest.fixture
def make_stack(moto_endpoint: str, tmp_path: Path) -> Iterator[Callable[..., Stack]]:
    stacks: list[tuple[Stack, EventBus]] = []

    def make(**kwargs: Any) -> Stack:
        delivered = Delivered()
        bus = EventBus(delivered, tmp_path / f"events-{len(stacks)}.jsonl")
        bus.start()
        kwargs.setdefault("worker_command", [sys.executable, "-c", WORKER])
        kwargs.setdefault("min_timeout_seconds", 0)
        kwargs.setdefault("kill_grace_seconds", 0.5)
        kwargs.setdefault("vcpus", 2)
        executor = LocalBatchExecutor(
            bus, lambda region: _logs_client(moto_endpoint, region), {"BASE_VAR": "base"}, **kwargs
        )
        stack = Stack(executor, delivered)
        stacks.append((stack, bus))
        return stack

    yield make
    for stack, bus in stacks:
        stack.executor.shutdown(timeout=5)
        bus.stop(timeout=5)
    assert _eventually(lambda: _workers() == []), _workers()


def _array(size: int, vcpus: int = 1, **env: str) -> BatchSubmission:
    return BatchSubmission(
        job_name=f"job-{uuid.uuid4().hex[:8]}",
        job_queue="remote-batch-Basic1x8",
        job_definition="remote-batch-worker",
        vcpus=vcpus,
        memory_mib=512,
        gpus=0,
        environment={"JOB_VAR": "job", **env},
        timeout_seconds=60,
        tags={"remote-batch:account": "dev"},
        array_size=size,
    )


def _workers() -> list[psutil.Process]:
    """Live processes (not zombies) whose command line carries this module's worker marker."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if MARKER in cmdline and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


def _eventually(condition: Callable[[], bool], timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def _summary(**counts: int) -> dict[str, int]:
    return {**NONE_IN, **counts}


def test_children_run_with_their_index_and_the_parent_rolls_up_as_aws_batch_does(
    make_stack: Callable[..., Stack], moto_endpoint: str
) -> None:
    stack = make_stack()
    submission = _array(3)

    parent = stack.gateway.submit_job(submission)
    final = stack.delivered.wait_for(parent, FINAL)["detail"]

    assert uuid.UUID(parent).version == 4
    assert final["status"] == "SUCCEEDED"
    assert final["arrayProperties"] == {"size": 3, "statusSummary": _summary(SUCCEEDED=3)}
    assert stack.delivered.statuses(parent) == ["PENDING", "SUCCEEDED"]
    order = [(e["detail"]["jobId"], e["detail"]["status"]) for e in stack.delivered.envelopes]
    logs = _logs_client(moto_endpoint, REGION)
    for index in range(3):
        child = f"{parent}:{index}"
        assert stack.delivered.statuses(child) == ["PENDING", "RUNNABLE", "STARTING", "RUNNING", "SUCCEEDED"]
        # The parent's final event comes after every child's.
        assert order.index((child, "SUCCEEDED")) < order.index((parent, "SUCCEEDED"))
        for envelope in stack.delivered.of(child):
            detail = envelope["detail"]
            assert detail["jobName"] == submission.job_name
            assert detail["jobArn"] == f"arn:aws:batch:{REGION}:000000000000:job/{child}"
            assert detail["arrayProperties"] == {"index": index}
            assert {"name": "AWS_BATCH_JOB_ARRAY_INDEX", "value": str(index)} in detail["container"][
                "environment"
            ]
            assert detail["timeout"] == {"attemptDurationSeconds": 60}
        done = stack.delivered.of(child)[-1]["detail"]
        assert done["container"]["exitCode"] == 0
        stream = done["container"]["logStreamName"]
        assert ":" not in stream and stream.startswith("remote-batch-worker/default/")
        messages = [
            e["message"]
            for e in logs.get_log_events(logGroupName=LOG_GROUP, logStreamName=stream, startFromHead=True)[
                "events"
            ]
        ]
        assert messages == [f"index {index} of 3 id {child}", "base base job job"]
    # AWS: the parent is PENDING once a child is RUNNABLE.
    assert order.index((f"{parent}:0", "RUNNABLE")) < order.index((parent, "PENDING"))
    pending = stack.delivered.of(parent)[0]["detail"]
    assert pending["jobName"] == submission.job_name
    assert pending["arrayProperties"]["size"] == 3
    assert "arrayProperties" in pending and "index" not in pending["arrayProperties"]
    assert "startedAt" not in final and final["attempts"] == []
    assert final["stoppedAt"] == max(
        stack.delivered.of(f"{parent}:{i}")[-1]["detail"]["stoppedAt"] for i in range(3)
    )


def test_one_failed_child_fails_the_parent_and_only_itself(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack()

    parent = stack.gateway.submit_job(_array(3, FAIL_INDEX="1"))
    final = stack.delivered.wait_for(parent, FINAL)["detail"]

    assert final["status"] == "FAILED"
    assert final["arrayProperties"]["statusSummary"] == _summary(SUCCEEDED=2, FAILED=1)
    assert [stack.delivered.statuses(f"{parent}:{i}")[-1] for i in range(3)] == [
        "SUCCEEDED",
        "FAILED",
        "SUCCEEDED",
    ]
    failed = stack.delivered.of(f"{parent}:1")[-1]["detail"]
    assert (failed["container"]["exitCode"], failed["statusReason"]) == (
        1,
        "Essential container in task exited",
    )


@pytest.mark.parametrize("size", [0, 1, 10_001])
def test_a_size_aws_batch_refuses_is_refused_with_its_client_exception(
    make_stack: Callable[..., Stack], size: int
) -> None:
    stack = make_stack()

    with pytest.raises(DependencyFailed) as refused:
        stack.gateway.submit_job(_array(size))

    cause = refused.value.__cause__
    assert isinstance(cause, ClientError)
    assert cause.response["Error"]["Code"] == "ClientException"
    assert stack.delivered.envelopes == []


def test_children_queue_for_the_hosts_vcpus_in_index_order(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(vcpus=1)

    parent = stack.gateway.submit_job(_array(3, SLEEP="0.2"))
    stack.delivered.wait_for(parent, FINAL)

    runs = []
    for index in range(3):
        events = {e["detail"]["status"]: e["detail"] for e in stack.delivered.of(f"{parent}:{index}")}
        runs.append((events["RUNNING"]["startedAt"], events["SUCCEEDED"]["stoppedAt"]))
    assert runs == sorted(runs)
    assert all(runs[i][1] <= runs[i + 1][0] for i in range(2)), runs
    waiting = stack.delivered.of(f"{parent}:2")[1]["detail"]
    assert waiting["status"] == "RUNNABLE"
    assert waiting["statusReason"] == "Waiting for 1 vCPU: 1 of 1 in use by other jobs, 1 job queued ahead"


def test_terminating_the_parent_ends_every_child_that_is_not_final(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(vcpus=2)
    parent = stack.gateway.submit_job(_array(5, SLEEP="60"))
    for index in range(2):
        stack.delivered.wait_for(f"{parent}:{index}", ("RUNNING",))
    assert _eventually(lambda: len(_workers()) >= 2)

    asked = time.monotonic()
    stack.gateway.terminate_job(parent, "Aborted by the user")
    final = stack.delivered.wait_for(parent, FINAL, timeout=10)["detail"]

    assert time.monotonic() - asked < 5
    assert (final["status"], final["statusReason"]) == ("FAILED", "Aborted by the user")
    assert final["arrayProperties"]["statusSummary"] == _summary(FAILED=5)
    for index in range(5):
        child = stack.delivered.of(f"{parent}:{index}")[-1]["detail"]
        assert (child["status"], child["statusReason"]) == ("FAILED", "Aborted by the user")
        assert ("startedAt" in child) is (index < 2)
    for index in (2, 3, 4):
        assert stack.delivered.statuses(f"{parent}:{index}") == ["PENDING", "RUNNABLE", "FAILED"]
    assert _eventually(lambda: _workers() == [])
    assert stack.executor.status_of(parent) == "FAILED"


def test_terminating_one_child_ends_only_that_child(make_stack: Callable[..., Stack]) -> None:
    stack = make_stack(vcpus=3)
    parent = stack.gateway.submit_job(_array(3, SLEEP="1"))
    stack.delivered.wait_for(f"{parent}:1", ("RUNNING",))

    stack.gateway.terminate_job(f"{parent}:1", "Too slow")
    final = stack.delivered.wait_for(parent, FINAL)["detail"]

    assert final["status"] == "FAILED"
    assert "statusReason" not in final
    assert [stack.delivered.statuses(f"{parent}:{i}")[-1] for i in range(3)] == [
        "SUCCEEDED",
        "FAILED",
        "SUCCEEDED",
    ]
    assert stack.delivered.of(f"{parent}:1")[-1]["detail"]["statusReason"] == "Too slow"


def test_describe_jobs_answers_for_the_parent_with_its_live_summary_and_for_children(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(vcpus=1)
    parent = stack.gateway.submit_job(_array(3, SLEEP="30"))
    stack.delivered.wait_for(f"{parent}:0", ("RUNNING",))

    described = {
        d["jobId"]: d for d in stack.executor.describe([parent, f"{parent}:0", f"{parent}:2", "unknown"])
    }

    assert set(described) == {parent, f"{parent}:0", f"{parent}:2"}
    assert described[parent]["status"] == "PENDING"
    assert described[parent]["arrayProperties"] == {
        "size": 3,
        "statusSummary": _summary(RUNNABLE=2, RUNNING=1),
    }
    assert (described[f"{parent}:0"]["status"], described[f"{parent}:0"]["arrayProperties"]) == (
        "RUNNING",
        {"index": 0},
    )
    states = {s.batch_job_id: s for s in stack.gateway.describe_jobs([parent, f"{parent}:2"], 0)}
    assert (states[f"{parent}:2"].status, states[f"{parent}:2"].job_name) == (
        "RUNNABLE",
        described[parent]["jobName"],
    )
    listed = stack.executor.list_jobs(parent, "RUNNABLE")
    assert [(s["jobId"], s["arrayProperties"]) for s in listed] == [
        (f"{parent}:1", {"index": 1}),
        (f"{parent}:2", {"index": 2}),
    ]
    # AWS ListJobs without a status lists the RUNNING jobs only.
    assert [s["jobId"] for s in stack.executor.list_jobs(parent)] == [f"{parent}:0"]
    stack.gateway.terminate_job(parent, "done looking")
    stack.delivered.wait_for(parent, FINAL)


def test_children_share_one_set_of_credentials_revoked_once_the_array_ended(
    make_stack: Callable[..., Stack],
) -> None:
    issuer = Issuer()
    stack = make_stack(credentials=issuer)

    parent = stack.gateway.submit_job(_array(3))
    stack.delivered.wait_for(parent, FINAL)

    assert issuer.issued == [parent]
    assert _eventually(lambda: issuer.revoked == [parent])


def test_a_stopped_executor_ends_the_running_children_and_leaves_the_rest_to_recovery(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(vcpus=1)
    parent = stack.gateway.submit_job(_array(3, SLEEP="60"))
    stack.delivered.wait_for(f"{parent}:0", ("RUNNING",))

    started = time.monotonic()
    stack.executor.shutdown(timeout=5)

    assert time.monotonic() - started < 5
    ran = stack.delivered.wait_for(f"{parent}:0", FINAL)["detail"]
    assert (ran["status"], ran["statusReason"]) == ("FAILED", "Local stack stopped while the job ran")
    # Children that never ran send nothing, nor does their array: the next start settles them.
    assert [stack.delivered.statuses(f"{parent}:{i}") for i in (1, 2)] == [["PENDING", "RUNNABLE"]] * 2
    assert stack.delivered.statuses(parent) == ["PENDING"]
    assert _workers() == []


def test_an_array_of_ten_thousand_children_is_taken_and_cancelled_promptly(
    make_stack: Callable[..., Stack],
) -> None:
    stack = make_stack(vcpus=1)

    started = time.monotonic()
    parent = stack.gateway.submit_job(_array(10_000, SLEEP="60"))
    stack.gateway.terminate_job(parent, "enough")
    final = stack.delivered.wait_for(parent, FINAL, timeout=60)["detail"]

    assert final["arrayProperties"]["statusSummary"] == _summary(FAILED=10_000)
    assert stack.delivered.of(f"{parent}:9999")[-1]["detail"]["statusReason"] == "enough"
    assert time.monotonic() - started < 30
