"""The local Batch executor: real subprocesses, CloudWatch Logs on a moto server, events on the bus.

The worker is a tiny fake (``FAKE_WORKER``) steered by the submission's environment, so these tests
do not depend on the real worker.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import boto3
import psutil
import pytest
from botocore.exceptions import ClientError
from moto.server import ThreadedMotoServer

from functions.adapters.batch_detail import BatchJobDetail, to_state
from functions.domain.batch_reasons import LOCAL_HOST_LOST_REASON
from functions.domain.credits import settle_charge
from functions.domain.errors import DependencyFailed
from functions.ports import BatchSubmission
from remote_batch_local.bus import EventBus
from remote_batch_local.events import BatchAttempt
from remote_batch_local.executor import AcceptedJob, AcceptedJobs, LocalBatchExecutor, PriorRun
from remote_batch_local.recovery import remove_leftover_jobs
from remote_batch_local.sandbox import ProcessRegistry, Sandbox, SandboxKind, kill_marked_processes
from remote_batch_local.state_disk import DiskCondition, DiskStatus, StateDisk, StateDiskUnavailable

REGION = "eu-central-1"
LOG_GROUP = "/remote-batch/jobs"
ACCOUNT = "000000000000"
MARKER = f"remote-batch-fake-worker-{uuid.uuid4().hex}"  # unique to this test run

FAKE_WORKER = textwrap.dedent(
    f"""
    # {MARKER}
    import importlib.util, os, resource, signal, subprocess, sys, tempfile, time
    if os.environ.get("IGNORE_TERM"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if os.environ.get("SHOW_LIMITS"):
        print("cpus", sorted(os.sched_getaffinity(0)))
        print("as", resource.getrlimit(resource.RLIMIT_AS)[0])
        print("threads", os.environ["OMP_NUM_THREADS"], os.environ["OPENBLAS_NUM_THREADS"])
        print("region", os.environ["AWS_REGION"], os.environ["AWS_DEFAULT_REGION"])
        print("base", os.environ.get("BASE_VAR"), "job", os.environ.get("JOB_VAR"))
    if os.environ.get("IMPORT_SCIENCE"):
        import numpy, scipy.linalg, sklearn.linear_model
        a = numpy.random.rand(300, 300)
        print("science ok", float(scipy.linalg.norm(a @ a.T)) > 0)
    if os.environ.get("SHOW_DIRS"):
        print("cwd", os.getcwd())
        print("tmp", tempfile.gettempdir())
        print("output", tempfile.mkdtemp(prefix="remote-batch-output-"))
        print("worker importable", importlib.util.find_spec("worker") is not None)
    if os.environ.get("ESCAPE"):
        # A new session and process group: out of reach of killpg.
        print("escaped", subprocess.Popen(["setsid", "sleep", "780"]).pid)
    if os.environ.get("GRANDCHILD"):
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)  # {MARKER}"])
    if os.environ.get("LONG_LINE"):
        sys.stdout.write("B" * 262117 + "\\u00e9" + "B" * 40000 + "\\n")
        sys.stdout.flush()
    for i in range(int(os.environ.get("LINES", "1"))):
        print("line", i)
    if os.environ.get("SHOW_ATTEMPT"):
        print("attempt", os.environ["AWS_BATCH_JOB_ATTEMPT"])
    if os.environ.get("STDERR"):
        print("oops", file=sys.stderr)
    if os.environ.get("OPERATOR_NOTE"):
        with open(os.environ["REMOTE_BATCH_OPERATOR_LOG"], "a") as operator_log:
            operator_log.write(os.environ["OPERATOR_NOTE"])
    print("ready", flush=True)
    time.sleep(float(os.environ.get("SLEEP", "0")))
    sys.exit(int(os.environ.get("EXIT", "0")))
    """
)


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="module")
def logs(moto_endpoint):
    return _logs_client(moto_endpoint, REGION)


def _logs_client(endpoint: str, region: str):
    return boto3.client(
        "logs",
        region_name=region,
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",  # moto's fake credentials
    )


class Delivered:
    """A fake batch_events Lambda: collects envelopes and lets tests wait for a status."""

    def __init__(self) -> None:
        self.envelopes: list[dict[str, Any]] = []
        self.cond = threading.Condition()
        self.on_final: Callable[[dict[str, Any]], None] | None = None

    def __call__(self, envelope: dict[str, Any]) -> None:
        if self.on_final and envelope["detail"]["status"] in {"SUCCEEDED", "FAILED"}:
            self.on_final(envelope)
        with self.cond:
            self.envelopes.append(envelope)
            self.cond.notify_all()

    def of(self, batch_job_id: str) -> list[dict[str, Any]]:
        with self.cond:
            return [e for e in self.envelopes if e["detail"]["jobId"] == batch_job_id]

    def statuses(self, batch_job_id: str) -> list[str]:
        return [e["detail"]["status"] for e in self.of(batch_job_id)]

    def wait_for(self, batch_job_id: str, status: str, timeout: float = 10) -> dict[str, Any]:
        with self.cond:
            found = self.cond.wait_for(
                lambda: any(
                    e["detail"]["jobId"] == batch_job_id and e["detail"]["status"] == status
                    for e in self.envelopes
                ),
                timeout,
            )
        assert found, f"no {status} for {batch_job_id}; got {self.statuses(batch_job_id)}"
        return next(e for e in self.of(batch_job_id) if e["detail"]["status"] == status)


class Stack:
    def __init__(self, executor: LocalBatchExecutor, bus: EventBus, delivered: Delivered) -> None:
        self.executor = executor
        self.bus = bus
        self.delivered = delivered
        self.gateway = executor.gateway(REGION, LOG_GROUP)


@pytest.fixture
def make_stack(moto_endpoint, tmp_path) -> Iterator[Callable[..., Stack]]:
    stacks: list[Stack] = []

    def make(**kwargs) -> Stack:
        delivered = Delivered()
        bus = EventBus(delivered, tmp_path / f"events-{len(stacks)}.jsonl")
        bus.start()
        kwargs.setdefault("worker_command", [sys.executable, "-c", FAKE_WORKER])
        kwargs.setdefault("min_timeout_seconds", 0)
        kwargs.setdefault("kill_grace_seconds", 0.5)
        executor = LocalBatchExecutor(
            bus,
            lambda region: _logs_client(moto_endpoint, region),
            {"BASE_VAR": "base"},
            account=ACCOUNT,
            **kwargs,
        )
        stack = Stack(executor, bus, delivered)
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        stack.executor.shutdown(timeout=5)
        stack.bus.stop(timeout=5)
    # A sandbox's outer bwrap may still be on its way out when shutdown returns (the kernel ends it
    # once its namespace's init is gone): give it the same 5 s a job's processes get.
    assert _eventually(lambda: _fake_workers() == []), _fake_workers()


def _submission(
    vcpus: int = 1, memory_mib: int = 512, timeout: int | None = None, **env: str
) -> BatchSubmission:
    return BatchSubmission(
        job_name=f"job-{uuid.uuid4().hex[:8]}",
        job_queue="remote-batch-Basic1x8",
        job_definition="remote-batch-worker",
        vcpus=vcpus,
        memory_mib=memory_mib,
        gpus=0,
        environment={"JOB_VAR": "job", **env},
        timeout_seconds=timeout,
        tags={"remote-batch:account": "dev"},
    )


def _fake_workers() -> list[psutil.Process]:
    """Live processes (not zombies) whose command line carries the fake worker's marker."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(process.info["cmdline"] or [])
        if MARKER in cmdline and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


def _log_messages(logs, stream: str) -> list[str]:
    events = logs.get_log_events(
        logGroupName=LOG_GROUP, logStreamName=stream, startFromHead=True, limit=10_000
    )
    return [e["message"] for e in events["events"]]


def _running_pid(stack: Stack, batch_job_id: str, timeout: float = 5) -> int:
    """The host pid of the job's fake worker (not the sandbox that runs it), once it runs."""
    stack.delivered.wait_for(batch_job_id, "RUNNING")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for process in _fake_workers():
            try:
                if process.cmdline()[0] != sys.executable:
                    continue
                if process.environ().get("AWS_BATCH_JOB_ID") == batch_job_id:
                    return int(process.pid)
            except (psutil.Error, IndexError):
                continue
        time.sleep(0.02)
    raise AssertionError("no worker process for the job")


def _job_process(batch_job_id: str, cmdline: list[str], timeout: float = 5) -> int:
    """The host pid of the job's process running ``cmdline`` (found by the job id in its environment)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for process in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error):
                if (
                    process.info["cmdline"] == cmdline
                    and process.environ().get("AWS_BATCH_JOB_ID") == batch_job_id
                ):
                    return int(process.pid)
        time.sleep(0.02)
    raise AssertionError(f"no {cmdline} process for the job")


def _carries(process: psutil.Process, marker: str) -> bool:
    """Whether ``process`` has ``AWS_BATCH_JOB_ID`` = ``marker`` (False once it is gone)."""
    try:
        return bool(process.environ().get("AWS_BATCH_JOB_ID") == marker)
    except psutil.Error:
        return False


def _ignores_sigterm(pid: int, timeout: float = 5) -> bool:
    """Poll /proc until the process's ignored-signal mask has SIGTERM (the fake worker sets it first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = Path(f"/proc/{pid}/status").read_text()
        ignored = int(status.split("SigIgn:")[1].split()[0], 16)
        if ignored & (1 << (signal.SIGTERM - 1)):
            return True
        time.sleep(0.01)
    return False


def _wait_log_line(logs, job_id: str, prefix: str, timeout: float = 10) -> str:
    """The first console line of the job starting with ``prefix`` (polls CloudWatch Logs)."""
    stream = f"remote-batch-worker/default/{job_id}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(logs.exceptions.ResourceNotFoundException):
            for message in _log_messages(logs, stream):
                if message.startswith(prefix):
                    return message
        time.sleep(0.05)
    raise AssertionError(f"no line {prefix!r} in the log of {job_id}")


def _dead(pid: int, timeout: float = 5) -> bool:
    """Whether the process is gone (or a zombie, waiting for a reaper) within ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def _eventually(condition: Callable[[], bool], timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def _kill_if_sleep_780(pid: int) -> None:
    """Cleanup of an escaped ``sleep 780`` the executor missed (checked, in case the pid was reused)."""
    with contextlib.suppress(psutil.Error):
        process = psutil.Process(pid)
        if process.cmdline() == ["sleep", "780"]:
            process.kill()


def _wait_gone(pid: int, timeout: float = 5) -> bool:
    try:
        psutil.Process(pid).wait(timeout)
    except psutil.NoSuchProcess:
        return True
    except psutil.TimeoutExpired:
        return False
    return True


def test_successful_job_emits_the_batch_lifecycle_with_real_fields(make_stack, logs):
    stack = make_stack(vcpus=2, memory_mib=4096)
    submission = _submission(timeout=30)

    job_id = stack.gateway.submit_job(submission)
    final = stack.delivered.wait_for(job_id, "SUCCEEDED")

    assert uuid.UUID(job_id).version == 4
    assert stack.delivered.statuses(job_id) == ["PENDING", "RUNNABLE", "STARTING", "RUNNING", "SUCCEEDED"]
    events = stack.delivered.of(job_id)
    assert [e["detail-type"] for e in events] == ["Batch Job State Change"] * 5
    assert all(e["source"] == "aws.batch" and e["region"] == REGION for e in events)
    assert len({e["id"] for e in events}) == 5
    queue_arn = f"arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/remote-batch-Basic1x8"
    stream = f"remote-batch-worker/default/{job_id}"
    for envelope in events:
        detail = envelope["detail"]
        assert detail["jobName"] == submission.job_name
        assert detail["jobId"] == job_id
        assert detail["jobArn"] == f"arn:aws:batch:{REGION}:{ACCOUNT}:job/{job_id}"
        assert detail["jobQueue"] == queue_arn
        assert detail["timeout"] == {"attemptDurationSeconds": 30}
        assert detail["tags"] == {"remote-batch:account": "dev"}
        assert "statusReason" not in detail or detail["status"] == "SUCCEEDED"
    pending, _, starting, running, _ = (e["detail"] for e in events)
    assert "startedAt" not in pending
    assert "startedAt" not in starting
    assert "logStreamName" not in starting["container"]
    assert running["container"]["logStreamName"] == stream
    assert "stoppedAt" not in running
    detail = final["detail"]
    assert isinstance(detail["createdAt"], int)
    assert isinstance(detail["startedAt"], int)
    assert detail["createdAt"] <= detail["startedAt"] <= detail["stoppedAt"]
    assert detail["startedAt"] == running["startedAt"]
    assert detail["container"]["exitCode"] == 0
    assert detail["container"]["logStreamName"] == stream
    assert detail["statusReason"] == "Essential container in task exited"
    assert detail["attempts"][0]["container"]["exitCode"] == 0
    assert detail["attempts"][0]["startedAt"] == detail["startedAt"]
    assert detail["attempts"][0]["stoppedAt"] == detail["stoppedAt"]
    assert stack.executor.status_of(job_id) == "SUCCEEDED"
    assert stack.bus.emitted_for(submission.job_name) == events


def test_failing_exit_fails_the_job_with_its_exit_code(make_stack):
    stack = make_stack()

    job_id = stack.gateway.submit_job(_submission(EXIT="3"))
    final = stack.delivered.wait_for(job_id, "FAILED")["detail"]

    assert stack.delivered.statuses(job_id) == ["PENDING", "RUNNABLE", "STARTING", "RUNNING", "FAILED"]
    assert final["container"]["exitCode"] == 3
    assert final["statusReason"] == "Essential container in task exited"
    assert "startedAt" in final


def test_console_lines_reach_cloudwatch_in_order_before_the_final_event(make_stack, logs):
    stack = make_stack()
    seen_at_final: dict[str, list[str]] = {}
    stack.delivered.on_final = lambda envelope: seen_at_final.setdefault(
        envelope["detail"]["jobId"], _log_messages(logs, envelope["detail"]["container"]["logStreamName"])
    )

    job_id = stack.gateway.submit_job(_submission(LINES="250", STDERR="1"))
    stack.delivered.wait_for(job_id, "SUCCEEDED")

    expected = [f"line {i}" for i in range(250)]
    messages = seen_at_final[job_id]
    assert [m for m in messages if m.startswith("line ")] == expected
    assert "oops" in messages
    assert messages[-1] == "ready"
    events = logs.get_log_events(
        logGroupName=LOG_GROUP, logStreamName=f"remote-batch-worker/default/{job_id}", startFromHead=True
    )["events"]
    stamps = [e["timestamp"] for e in events]
    assert stamps == sorted(stamps)


def test_a_line_over_256_kib_is_shipped_in_awslogs_parts_that_the_reader_joins(make_stack, logs):
    from functions.domain.log_lines import PartJoiner
    from functions.ports import LogEvent

    stack = make_stack()
    job_id = stack.gateway.submit_job(_submission(LONG_LINE="1"))
    stack.delivered.wait_for(job_id, "SUCCEEDED")
    events = logs.get_log_events(
        logGroupName=LOG_GROUP, logStreamName=f"remote-batch-worker/default/{job_id}", startFromHead=True
    )["events"]
    line = "B" * 262117 + "\u00e9" + "B" * 40000
    # As Docker's awslogs driver does: cut before the character that would straddle 262,118 bytes,
    # both parts with the line's timestamp.
    assert [len(e["message"].encode()) for e in events[:2]] == [262117, 40002]
    assert events[0]["timestamp"] == events[1]["timestamp"]
    assert events[2]["message"] == "line 0"
    joiner = PartJoiner(LogEvent(e["timestamp"], e["message"]) for e in events)
    assert [line_.message for line_ in iter(lambda: joiner.next_line(64), None)][:2] == [line, "line 0"]


def test_the_workers_operator_report_goes_to_the_executor_log_not_the_job_log(make_stack, logs, caplog):
    stack = make_stack()
    note = 'Traceback (most recent call last):\n  File "/opt/worker/x.py"\nRuntimeError: a worker bug\n'

    with caplog.at_level(logging.WARNING, logger="remote_batch_local.executor"):
        job_id = stack.gateway.submit_job(_submission(OPERATOR_NOTE=note, EXIT="2"))
        stack.delivered.wait_for(job_id, "FAILED")

    reports = [r.getMessage() for r in caplog.records if "worker reported its own error" in r.getMessage()]
    assert reports == [f"worker reported its own error batch_job_id={job_id}\n{note.rstrip()}"]
    job_log = _log_messages(logs, f"remote-batch-worker/default/{job_id}")
    assert not any("RuntimeError" in line or "Traceback" in line for line in job_log)


def test_worker_runs_with_its_limits_and_environment(make_stack, logs):
    stack = make_stack(vcpus=1, memory_mib=2048)

    job_id = stack.gateway.submit_job(_submission(vcpus=1, memory_mib=1024, SHOW_LIMITS="1"))
    stack.delivered.wait_for(job_id, "SUCCEEDED")

    messages = _log_messages(logs, f"remote-batch-worker/default/{job_id}")
    first_cpu = sorted(os.sched_getaffinity(0))[0]
    assert f"cpus [{first_cpu}]" in messages
    assert f"as {1024 * 1024 * 1024}" in messages
    assert "threads 1 1" in messages
    assert f"region {REGION} {REGION}" in messages
    assert "base base job job" in messages


def test_class_bigger_than_host_runs_with_a_reason(make_stack):
    stack = make_stack(vcpus=1, memory_mib=2048)

    job_id = stack.gateway.submit_job(_submission(vcpus=8, memory_mib=64 * 1024))
    stack.delivered.wait_for(job_id, "SUCCEEDED")

    reasons = {e["detail"]["status"]: e["detail"].get("statusReason") for e in stack.delivered.of(job_id)}
    note = "Machine class needs 8 vCPUs and 64 GiB; this host runs it with 1 vCPU and 2 GiB"
    assert reasons["RUNNABLE"] == note
    assert reasons["RUNNING"] == note
    assert reasons["SUCCEEDED"] == "Essential container in task exited"


def test_gpu_class_runs_on_cpu_and_says_so(make_stack):
    stack = make_stack(vcpus=2, memory_mib=4096)

    submission = dataclasses.replace(_submission(vcpus=2, memory_mib=1024), gpus=1)
    job_id = stack.gateway.submit_job(submission)
    stack.delivered.wait_for(job_id, "SUCCEEDED")

    reasons = {e["detail"]["status"]: e["detail"].get("statusReason") for e in stack.delivered.of(job_id)}
    note = (
        "Machine class needs 2 vCPUs, 1 GiB and 1 GPU; this host runs it on CPU only, with 2 vCPUs and 1 GiB"
    )
    assert reasons["RUNNABLE"] == note
    assert reasons["RUNNING"] == note
    assert reasons["SUCCEEDED"] == "Essential container in task exited"


def test_one_vcpu_runs_jobs_one_after_the_other(make_stack):
    stack = make_stack(vcpus=1)

    first = stack.gateway.submit_job(_submission(SLEEP="0.5"))
    second = stack.gateway.submit_job(_submission())
    stack.delivered.wait_for(second, "SUCCEEDED")

    order = [(e["detail"]["jobId"], e["detail"]["status"]) for e in stack.delivered.envelopes]
    assert order.index((second, "RUNNABLE")) < order.index((first, "SUCCEEDED"))
    assert order.index((first, "SUCCEEDED")) < order.index((second, "STARTING"))
    first_final = stack.delivered.wait_for(first, "SUCCEEDED")["detail"]
    second_final = stack.delivered.wait_for(second, "SUCCEEDED")["detail"]
    assert first_final["stoppedAt"] <= second_final["startedAt"]


def test_terminate_while_queued_fails_at_once_without_starting(make_stack):
    stack = make_stack(vcpus=1)
    blocker = stack.gateway.submit_job(_submission(SLEEP="30"))
    queued = stack.gateway.submit_job(_submission())
    stack.delivered.wait_for(queued, "RUNNABLE")

    stack.gateway.terminate_job(queued, "Terminated by the user")
    final = stack.delivered.wait_for(queued, "FAILED")["detail"]

    assert stack.delivered.statuses(queued) == ["PENDING", "RUNNABLE", "FAILED"]
    assert final["statusReason"] == "Terminated by the user"
    assert "startedAt" not in final
    assert final["attempts"] == []
    assert "exitCode" not in final["container"]
    # A final job: terminate again is a no-op, and so is an unknown id.
    stack.gateway.terminate_job(queued, "again")
    stack.gateway.terminate_job(str(uuid.uuid4()), "nobody")
    stack.gateway.terminate_job(blocker, "done")
    stack.delivered.wait_for(blocker, "FAILED")
    assert stack.bus.wait_idle(5)
    assert stack.delivered.statuses(queued) == ["PENDING", "RUNNABLE", "FAILED"]


def test_terminate_while_running_kills_the_process_group(make_stack):
    stack = make_stack()
    job_id = stack.gateway.submit_job(_submission(SLEEP="30", GRANDCHILD="1"))
    pid = _running_pid(stack, job_id)

    before = time.time() * 1000
    stack.gateway.terminate_job(job_id, "CreditConstraint of 5 credits reached")
    final = stack.delivered.wait_for(job_id, "FAILED")["detail"]

    assert _wait_gone(pid)
    assert final["statusReason"] == "CreditConstraint of 5 credits reached"
    assert final["container"]["exitCode"] == 128 + signal.SIGTERM
    assert before - 1000 <= final["stoppedAt"] <= time.time() * 1000
    assert final["startedAt"] <= final["stoppedAt"]
    assert _fake_workers() == []  # the grandchild went with the group


def test_terminate_escalates_to_sigkill_when_sigterm_is_ignored(make_stack):
    stack = make_stack(kill_grace_seconds=0.3)
    job_id = stack.gateway.submit_job(_submission(SLEEP="30", IGNORE_TERM="1"))
    pid = _running_pid(stack, job_id)
    assert _ignores_sigterm(pid), "the worker did not get to ignore SIGTERM"

    stack.gateway.terminate_job(job_id, "Terminated by the user")
    final = stack.delivered.wait_for(job_id, "FAILED")["detail"]

    assert _wait_gone(pid)
    assert final["container"]["exitCode"] == 128 + signal.SIGKILL
    assert final["statusReason"] == "Terminated by the user"


def test_timeout_kills_the_job(make_stack):
    stack = make_stack()

    job_id = stack.gateway.submit_job(_submission(timeout=1, SLEEP="30"))
    final = stack.delivered.wait_for(job_id, "FAILED", timeout=10)["detail"]

    assert final["statusReason"] == "Job attempt duration exceeded timeout"
    assert final["timeout"] == {"attemptDurationSeconds": 1}
    assert 1000 <= final["stoppedAt"] - final["startedAt"] < 5000


def test_timeout_is_raised_to_the_aws_minimum(make_stack):
    stack = make_stack(min_timeout_seconds=60)

    job_id = stack.gateway.submit_job(_submission(timeout=5))
    final = stack.delivered.wait_for(job_id, "SUCCEEDED")["detail"]

    assert final["timeout"] == {"attemptDurationSeconds": 60}


def test_shutdown_terminates_everything_and_leaves_no_process(make_stack):
    stack = make_stack(vcpus=2)
    running = [stack.gateway.submit_job(_submission(SLEEP="30", GRANDCHILD="1")) for _ in range(2)]
    queued = stack.gateway.submit_job(_submission(SLEEP="30"))
    pids = [_running_pid(stack, job_id) for job_id in running]
    stack.delivered.wait_for(queued, "RUNNABLE")

    stack.executor.shutdown()

    assert stack.bus.wait_idle(5)
    for job_id in running:
        final = stack.delivered.wait_for(job_id, "FAILED", timeout=1)["detail"]
        assert final["statusReason"] == "Local stack stopped while the job ran"
    # A job that never started was not stopped "while it ran".
    final = stack.delivered.wait_for(queued, "FAILED", timeout=1)["detail"]
    assert final["statusReason"] == "Local stack stopped before the job ran"
    assert "startedAt" not in stack.delivered.wait_for(queued, "FAILED")["detail"]
    assert not any(psutil.pid_exists(pid) for pid in pids)
    assert _fake_workers() == []
    with pytest.raises(DependencyFailed):
        stack.gateway.submit_job(_submission())


def test_spawn_failure_fails_the_job_without_starting(make_stack):
    stack = make_stack(worker_command=["/nonexistent/python"])

    job_id = stack.gateway.submit_job(_submission())
    final = stack.delivered.wait_for(job_id, "FAILED")["detail"]

    assert stack.delivered.statuses(job_id) == ["PENDING", "RUNNABLE", "STARTING", "FAILED"]
    assert final["statusReason"].startswith("CannotStartContainerError")
    assert "startedAt" not in final


def test_a_timeout_beyond_the_longest_wait_does_not_stop_the_scheduler(make_stack):
    # Given a running job whose timeout is further away than Condition.wait can wait
    stack = make_stack(vcpus=2)
    far = stack.gateway.submit_job(_submission(timeout=10**10, SLEEP="30"))
    stack.delivered.wait_for(far, "RUNNING")
    time.sleep(0.2)  # the scheduler goes back to waiting on the far deadline

    # When another job comes
    other = stack.gateway.submit_job(_submission())

    # Then it still runs, and the far one can still be terminated
    stack.delivered.wait_for(other, "SUCCEEDED")
    stack.gateway.terminate_job(far, "Terminated by the user")
    assert stack.delivered.wait_for(far, "FAILED")["detail"]["timeout"] == {"attemptDurationSeconds": 10**10}


def test_an_error_handling_one_job_fails_it_and_scheduling_goes_on(make_stack, monkeypatch):
    # Given a bus that cannot take one job's RUNNABLE event
    stack = make_stack(vcpus=1)
    poisoned = _submission()
    publish = stack.bus.publish

    def flaky_publish(envelope: dict[str, Any]) -> None:
        detail = envelope["detail"]
        if detail["jobName"] == poisoned.job_name and detail["status"] == "RUNNABLE":
            raise OSError("No space left on device")
        publish(envelope)

    monkeypatch.setattr(stack.bus, "publish", flaky_publish)

    # When it and another job are submitted
    bad = stack.gateway.submit_job(poisoned)
    good = stack.gateway.submit_job(_submission())

    # Then that job fails with the error, and the other one runs
    final = stack.delivered.wait_for(bad, "FAILED")["detail"]
    assert final["statusReason"] == "Local Batch executor error: OSError: No space left on device"
    assert "startedAt" not in final
    stack.delivered.wait_for(good, "SUCCEEDED")
    assert stack.delivered.statuses(good) == ["PENDING", "RUNNABLE", "STARTING", "RUNNING", "SUCCEEDED"]


@pytest.mark.parametrize("ending", ["terminated", "exited"])
def test_processes_that_left_the_process_group_end_with_the_job(make_stack, logs, ending):
    # Given a job that started a process in a new session (reparented to init when the worker dies)
    stack = make_stack()
    job_id = stack.gateway.submit_job(
        _submission(ESCAPE="1", SLEEP="30" if ending == "terminated" else "1.5")
    )
    _wait_log_line(logs, job_id, "escaped ")
    pid = _job_process(job_id, ["sleep", "780"])
    try:
        assert os.getsid(pid) == pid  # it leads a session of its own

        # When the job is terminated, or its worker exits
        if ending == "terminated":
            stack.gateway.terminate_job(job_id, "Terminated by the user")
            stack.delivered.wait_for(job_id, "FAILED")
        else:
            stack.delivered.wait_for(job_id, "SUCCEEDED")

        # Then that process is killed too
        assert _dead(pid, timeout=3), "the escaped process survived the job"
    finally:
        _kill_if_sleep_780(pid)


@pytest.mark.parametrize("ending", ["exited", "terminated"])
def test_each_job_runs_in_its_own_directory_removed_when_it_ends(make_stack, logs, ending):
    stack = make_stack()

    job_id = stack.gateway.submit_job(
        _submission(SHOW_DIRS="1", SLEEP="30" if ending == "terminated" else "0")
    )
    if ending == "terminated":
        _wait_log_line(logs, job_id, "worker importable")
        stack.gateway.terminate_job(job_id, "Terminated by the user")
        stack.delivered.wait_for(job_id, "FAILED")
    else:
        stack.delivered.wait_for(job_id, "SUCCEEDED")

    messages = _log_messages(logs, f"remote-batch-worker/default/{job_id}")
    lines = dict(m.split(" ", 1) for m in messages if m.startswith(("cwd ", "tmp ", "output ")))
    job_dir = Path(lines["cwd"])
    assert job_dir.name.startswith("remote-batch-job-")
    assert job_dir != Path(__file__).resolve().parents[2]
    assert Path(lines["tmp"]).is_relative_to(job_dir)
    assert Path(lines["output"]).is_relative_to(job_dir)
    assert "worker importable True" in messages  # the repository is on PYTHONPATH
    # (removed just after the final event is published)
    assert _eventually(lambda: not job_dir.exists()), f"{job_dir} is left behind"


def test_runnable_event_says_why_the_job_waits(make_stack):
    # Given a 2-vCPU host with 1 vCPU taken
    stack = make_stack(vcpus=2, memory_mib=4096)
    blocker = stack.gateway.submit_job(_submission(SLEEP="30"))
    stack.delivered.wait_for(blocker, "RUNNING")

    # When a job needing 2 vCPUs (and more than the host has) and one needing 1 vCPU queue up
    big = stack.gateway.submit_job(_submission(vcpus=8, memory_mib=8192))
    small = stack.gateway.submit_job(_submission())
    stack.delivered.wait_for(small, "RUNNABLE")
    stack.gateway.terminate_job(blocker, "done")
    stack.delivered.wait_for(small, "SUCCEEDED")

    # Then their RUNNABLE events say why they wait (FIFO: the small one waits behind the big one)
    def reasons(job_id: str) -> dict[str, str | None]:
        return {e["detail"]["status"]: e["detail"].get("statusReason") for e in stack.delivered.of(job_id)}

    note = "Machine class needs 8 vCPUs and 8 GiB; this host runs it with 2 vCPUs and 4 GiB"
    assert reasons(big)["RUNNABLE"] == f"{note}. Waiting for 2 vCPUs: 1 of 2 in use by other jobs"
    assert reasons(big)["RUNNING"] == note
    assert reasons(small)["RUNNABLE"] == "Waiting for 1 vCPU: 1 of 2 in use by other jobs, 1 job queued ahead"
    assert reasons(small)["RUNNING"] is None
    assert reasons(blocker)["RUNNABLE"] is None
    for job_id in (big, small):
        statuses = stack.delivered.statuses(job_id)
        assert statuses == ["PENDING", "RUNNABLE", "STARTING", "RUNNING", "SUCCEEDED"]


def test_runnable_event_says_all_vcpus_are_in_use(make_stack):
    stack = make_stack(vcpus=2)
    blocker = stack.gateway.submit_job(_submission(vcpus=2, SLEEP="30"))
    stack.delivered.wait_for(blocker, "RUNNING")

    queued = stack.gateway.submit_job(_submission())
    runnable = stack.delivered.wait_for(queued, "RUNNABLE")["detail"]

    assert runnable["statusReason"] == "Waiting for 1 vCPU: 2 of 2 in use by other jobs"
    stack.gateway.terminate_job(blocker, "done")
    stack.delivered.wait_for(queued, "SUCCEEDED")


@pytest.mark.skipif(
    subprocess.run([sys.executable, "-c", "import numpy, scipy, sklearn"], check=False).returncode != 0,
    reason="numpy/scipy/scikit-learn not installed",
)
def test_scientific_stack_imports_under_the_address_space_limit(make_stack, logs):
    stack = make_stack()

    job_id = stack.gateway.submit_job(_submission(memory_mib=8 * 1024, IMPORT_SCIENCE="1"))
    final = stack.delivered.wait_for(job_id, "SUCCEEDED", timeout=30)["detail"]

    assert final["container"]["exitCode"] == 0
    assert "science ok True" in _log_messages(logs, f"remote-batch-worker/default/{job_id}")


EXECUTOR_PROCESS = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from functions.ports import BatchSubmission
    from remote_batch_local.executor import LocalBatchExecutor

    class Bus:
        def publish(self, envelope):
            if envelope["detail"]["status"] == "RUNNING":
                print("running", flush=True)

    class Logs:
        def __getattr__(self, name):
            return lambda **kwargs: {}

    worker = [sys.executable, "-c", sys.argv[1]]
    executor = LocalBatchExecutor(Bus(), lambda region: Logs(), {}, worker_command=worker)
    executor.gateway("us-east-1", "g").submit_job(
        BatchSubmission("j", "q", "d", 1, 512, 0, {"SLEEP": "60"})
    )
    time.sleep(60)
    """
)


def test_worker_dies_with_a_killed_executor():
    # Given an executor in its own process, running a job
    repo_root = Path(__file__).resolve().parents[2]
    host = subprocess.Popen(
        [sys.executable, "-c", EXECUTOR_PROCESS, FAKE_WORKER],
        cwd=repo_root,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert host.stdout is not None
        assert host.stdout.readline().strip() == "running"
        workers = psutil.Process(host.pid).children()
        assert len(workers) == 1
        job_dir = Path(workers[0].cwd())
        marker = workers[0].environ()["AWS_BATCH_JOB_ID"]

        # When the executor is SIGKILLed (no chance to clean up)
        host.kill()
        host.wait(5)

        # Then its worker dies too (PR_SET_PDEATHSIG)
        assert _wait_gone(workers[0].pid)
        # (nobody was left to remove the job's directory)
        assert job_dir.name.startswith("remote-batch-job-")
        shutil.rmtree(job_dir)
        # And what the stack's restart does for such a job (remove_leftover_jobs: every process still
        # carrying its marker) leaves nothing: under load a sandbox's inner bwrap (its PID namespace's
        # init) was seen orphaned before it could arrange to die with its parent, asleep for good.
        kill_marked_processes(frozenset({marker}))
        assert _eventually(lambda: not [p for p in _fake_workers() if _carries(p, marker)])
    finally:
        host.kill()
        host.wait(5)
        if host.stdout is not None:
            host.stdout.close()


def test_class_bigger_than_free_memory_is_capped_below_it_with_a_reason(make_stack, logs):
    # Given an executor sized from this host's memory (no memory_mib): free memory less a headroom
    stack = make_stack(vcpus=1)
    ceiling = stack.executor.memory_mib
    total_mib = psutil.virtual_memory().total // (1024 * 1024)
    assert ceiling < total_mib

    # When a class bigger than the host runs
    job_id = stack.gateway.submit_job(_submission(vcpus=1, memory_mib=1024 * 1024, SHOW_LIMITS="1"))
    final = stack.delivered.wait_for(job_id, "SUCCEEDED")["detail"]

    # Then its address space is capped at the ceiling, and its reason says so
    assert f"as {ceiling * 1024 * 1024}" in _log_messages(logs, f"remote-batch-worker/default/{job_id}")
    running = stack.delivered.wait_for(job_id, "RUNNING")["detail"]["statusReason"]
    assert running.startswith("Machine class needs 1 vCPU and 1024 GiB; this host runs it with 1 vCPU and ")
    assert running.endswith("GiB kept for the local stack)")
    assert final["statusReason"] == "Essential container in task exited"


ESCAPES = {
    # each starts `sleep 781` (its marker) so that it outlives the worker, if it can
    "new session": "subprocess.Popen(['setsid', 'sleep', '781'])",
    "env -i": "subprocess.Popen(['env', '-i', 'sleep', '781'], start_new_session=True)",
    "double fork": "subprocess.Popen(['sh', '-c', '(sleep 781 &) ; exit 0']).wait()",
    "SIGTERM ignored": (
        "subprocess.Popen(['sh', '-c', 'trap \"\" TERM; sleep 781; :'], start_new_session=True)"
    ),
}


def _sleep_781() -> list[psutil.Process]:
    return [
        p
        for p in psutil.process_iter(["cmdline", "status"])
        if (p.info["cmdline"] or [])[-2:] == ["sleep", "781"] and p.info["status"] != psutil.STATUS_ZOMBIE
    ]


@pytest.mark.parametrize("kind", [SandboxKind.BUBBLEWRAP, SandboxKind.UNSHARE])
def test_escaped_processes_die_with_the_job_in_each_sandbox(make_stack, logs, kind):
    # Given jobs that each escape in one way, run in bubblewrap, or in the unshare fallback
    escape = "import subprocess\n" + "\n".join(ESCAPES.values()) + "\nprint('escaped', flush=True)\n"
    worker = [sys.executable, "-c", escape + "import time; time.sleep(30)"]
    stack = make_stack(vcpus=len(ESCAPES), sandbox=Sandbox(kind), worker_command=worker)
    try:
        jobs = [stack.gateway.submit_job(_submission()) for _ in range(2)]
        for job_id in jobs:
            _wait_log_line(logs, job_id, "escaped")
        assert _eventually(lambda: len(_sleep_781()) == 2 * len(ESCAPES))

        # When one is terminated and the other's worker is killed outright
        stack.gateway.terminate_job(jobs[0], "Terminated by the user")
        stack.delivered.wait_for(jobs[0], "FAILED")
        assert len(_sleep_781()) == len(ESCAPES)
        stack.gateway.terminate_job(jobs[1], "Terminated by the user")
        stack.delivered.wait_for(jobs[1], "FAILED")

        # Then nothing they started is left
        assert _sleep_781() == []
    finally:
        for process in _sleep_781():
            process.kill()


def test_registry_kills_a_crashed_runs_leftovers_and_removes_its_folders(tmp_path):
    # Given a record of a job whose process outlived a crash, and one whose pid was reused since
    registry = ProcessRegistry(tmp_path / "processes")
    workdir = Path(tempfile.mkdtemp(prefix="remote-batch-job-"))
    leftover = subprocess.Popen(["sleep", "782"], start_new_session=True)
    bystander = subprocess.Popen(["sleep", "783"], start_new_session=True)
    try:
        registry.record("job-a", workdir, [psutil.Process(leftover.pid)])
        (tmp_path / "processes" / "job-b.json").write_text(
            json.dumps({"workdir": str(tmp_path / "not-a-job-folder"), "processes": [[bystander.pid, 1.0]]})
        )

        # When the next start cleans up
        found = remove_leftover_jobs(registry)

        # Then the recorded process is killed, the reused pid is not, the job's folder is gone
        assert leftover.wait(5) == -signal.SIGKILL
        assert bystander.poll() is None
        assert found.jobs == ("job-a", "job-b")
        assert found.killed == (leftover.pid,)
        assert found.removed == (str(workdir),)
        assert not workdir.exists()
        assert list((tmp_path / "processes").iterdir()) == []
    finally:
        for process in (leftover, bystander):
            process.kill()
            process.wait()
        shutil.rmtree(workdir, ignore_errors=True)


class _SlowLogs:
    """A CloudWatch Logs client whose PutLogEvents takes ``delay`` seconds (a slow log store)."""

    def __init__(self, client, delay: float) -> None:
        self._client = client
        self._delay = delay
        self.last_put_at = 0.0

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    def put_log_events(self, **kwargs):
        time.sleep(self._delay)
        response = self._client.put_log_events(**kwargs)
        self.last_put_at = time.time()
        return response


def _printer(megabytes: int, then_sleep: float = 0) -> list[str]:
    code = (
        f"# {MARKER}\n"
        "import sys, time\n"
        "block = ''.join(f'{i:07d} ' + 'x' * 91 + '\\n' for i in range(10_000))\n"
        f"for _ in range({megabytes}):\n"
        "    sys.stdout.write(block)\n"
        "sys.stdout.flush()\n"
        f"time.sleep({then_sleep})\n"
    )
    return [sys.executable, "-c", code]


def test_a_slow_log_store_holds_the_job_on_its_pipe_and_shipping_after_its_exit_is_not_billed(
    make_stack, moto_endpoint, logs
):
    # Given a log store taking 0.3 s per PutLogEvents (about 1 MB)
    slow = _SlowLogs(_logs_client(moto_endpoint, REGION), 0.3)
    stack = make_stack(worker_command=_printer(12))
    stack.gateway.logs = slow

    # When a job prints 12 MB (100-byte lines) and exits
    job_id = stack.gateway.submit_job(_submission())
    final = stack.delivered.wait_for(job_id, "SUCCEEDED", timeout=60)

    # Then every line reached the log, and the job's stoppedAt (its billed end) is its own exit:
    # the last seconds of shipping came after it
    stream = final["detail"]["container"]["logStreamName"]
    count = 0
    token = None
    while True:
        page = logs.get_log_events(
            logGroupName=LOG_GROUP,
            logStreamName=stream,
            startFromHead=True,
            **({"nextToken": token} if token else {}),
        )
        count += len(page["events"])
        if not page["events"] or page["nextForwardToken"] == token:
            break
        token = page["nextForwardToken"]
    assert count == 120_000
    stopped_at = final["detail"]["stoppedAt"] / 1000
    assert slow.last_put_at - stopped_at >= 0.6, (slow.last_put_at, stopped_at)


def test_a_job_past_its_log_limit_is_ended_with_the_reason(make_stack, logs):
    # Given an executor capping job logs at 1 MiB
    stack = make_stack(worker_command=_printer(6, then_sleep=60), log_limit_bytes=1024 * 1024)

    # When a job prints 6 MB and then waits
    job_id = stack.gateway.submit_job(_submission())
    final = stack.delivered.wait_for(job_id, "FAILED", timeout=30)

    # Then it is ended for its log volume at once (SIGTERM), and the log holds the first 1 MiB
    assert final["detail"]["statusReason"] == "Log limit of 1 MiB exceeded"
    assert final["detail"]["stoppedAt"] - final["detail"]["startedAt"] < 20_000
    stream = final["detail"]["container"]["logStreamName"]
    stored = logs.describe_log_streams(logGroupName=LOG_GROUP, logStreamNamePrefix=stream)["logStreams"][0]
    # 10,485 whole 100-byte lines (99 bytes each without the newline) and the first 76 bytes of the next
    full, partial = divmod(1024 * 1024, 100)
    assert stored["storedBytes"] == full * 99 + partial


# -- dedicated computes (remote_batch_local/executor/computes.py) ---------------------------------------
def _field(state: Any, name: str) -> Any:
    """A field of a describe's answer (None when the resource is gone)."""
    return getattr(state, name, None)


def _compute_up(stack: Stack, name: str, vcpus: int) -> Any:
    """Create a dedicated compute's environment and queue as the meter would (a describe between each
    asynchronous change), scaled to ``vcpus``; returns the region's ComputeEnvironments."""
    from functions.domain.machine_classes import MACHINE_CLASSES

    batch = stack.executor.compute_environments(REGION)
    batch.create_environment(name, MACHINE_CLASSES["Basic1x8"])
    with pytest.raises(DependencyFailed, match="is not VALID"):
        batch.create_queue(name, name)  # AWS: a queue needs a VALID environment
    assert _field(batch.describe_environment(name), "status") == "CREATING"
    assert _field(batch.describe_environment(name), "status") == "VALID"
    batch.create_queue(name, name)
    batch.describe_queue(name)
    assert _field(batch.describe_queue(name), "status") == "VALID"
    batch.set_capacity(name, vcpus)
    assert _field(batch.describe_environment(name), "status") == "UPDATING"
    return batch


def test_a_started_compute_reserves_vcpus_and_its_jobs_skip_the_shared_queue(make_stack):
    # Given 2 vCPUs, one reserved by a started compute
    stack = make_stack(vcpus=2)
    batch = _compute_up(stack, "rb-cmp-lab", 1)
    assert _eventually(lambda: _field(batch.describe_environment("rb-cmp-lab"), "desired_vcpus") == 1)
    # When a 2-vCPU job waits on the shared queue (1 vCPU free there) and a job goes to the compute
    shared = stack.gateway.submit_job(_submission(vcpus=2))
    runnable = stack.delivered.wait_for(shared, "RUNNABLE")
    assert "Waiting for 2 vCPUs" in runnable["detail"]["statusReason"]
    on_compute = stack.gateway.submit_job(
        dataclasses.replace(_submission(SLEEP="0.2"), job_queue="rb-cmp-lab")
    )
    # Then the compute's job runs at once and the shared one stays queued
    stack.delivered.wait_for(on_compute, "SUCCEEDED")
    assert stack.executor.status_of(shared) == "RUNNABLE"
    # When the compute is stopped, its vCPU goes back and the shared job runs
    batch.set_capacity("rb-cmp-lab", 0)
    stack.delivered.wait_for(shared, "SUCCEEDED")


def test_a_stopped_computes_jobs_wait_and_aws_order_is_enforced(make_stack):
    stack = make_stack(vcpus=2)
    batch = _compute_up(stack, "rb-cmp-idle", 0)
    waiting = stack.gateway.submit_job(dataclasses.replace(_submission(), job_queue="rb-cmp-idle"))
    runnable = stack.delivered.wait_for(waiting, "RUNNABLE")
    assert runnable["detail"]["statusReason"] == "Waiting for dedicated compute rb-cmp-idle to start"
    with pytest.raises(DependencyFailed, match="must be DISABLED"):
        batch.delete_queue("rb-cmp-idle")
    batch.disable_queue("rb-cmp-idle")
    batch.describe_queue("rb-cmp-idle")
    batch.disable_environment("rb-cmp-idle")
    with pytest.raises(DependencyFailed, match="used by a job queue"):
        batch.delete_environment("rb-cmp-idle")
    batch.delete_queue("rb-cmp-idle")
    # Its waiting job fails as AWS Batch fails a deleted queue's jobs
    failed = stack.delivered.wait_for(waiting, "FAILED")
    assert failed["detail"]["statusReason"] == "The job queue was deleted"
    assert _field(batch.describe_queue("rb-cmp-idle"), "status") == "DELETING"
    assert batch.describe_queue("rb-cmp-idle") is None
    batch.delete_environment("rb-cmp-idle")
    batch.describe_environment("rb-cmp-idle")
    assert batch.describe_environment("rb-cmp-idle") is None


def test_list_jobs_by_name_finds_a_job_of_any_status_in_its_queue_and_zone(make_stack):
    stack = make_stack(vcpus=1)
    done = _submission()
    done_id = stack.gateway.submit_job(done)
    stack.delivered.wait_for(done_id, "SUCCEEDED")
    blocker = _submission(SLEEP="30")
    blocker_id = stack.gateway.submit_job(blocker)
    stack.delivered.wait_for(blocker_id, "RUNNING")

    # Any status (ListJobs with a JOB_NAME filter ignores jobStatus); the queue by name or ARN.
    assert stack.gateway.find_job_by_name("remote-batch-Basic1x8", done.job_name) == done_id
    queue_arn = f"arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/remote-batch-Basic1x8"
    assert stack.gateway.find_job_by_name(queue_arn, blocker.job_name) == blocker_id
    # Not another queue's, nor another zone's, nor a name never submitted.
    assert stack.gateway.find_job_by_name("remote-batch-Basic2x8", done.job_name) is None
    other_zone = stack.executor.gateway("us-east-1", LOG_GROUP)
    assert other_zone.find_job_by_name("remote-batch-Basic1x8", done.job_name) is None
    assert stack.gateway.find_job_by_name("remote-batch-Basic1x8", "job-never") is None
    stack.gateway.terminate_job(blocker_id, "done")
    stack.delivered.wait_for(blocker_id, "FAILED")


def test_two_computes_never_take_the_shared_queues_last_vcpu(make_stack):
    # Given 2 vCPUs and two started 1-vCPU computes (the trial's case)
    stack = make_stack(vcpus=2)
    first = _compute_up(stack, "rb-cmp-one", 1)
    assert _eventually(lambda: _field(first.describe_environment("rb-cmp-one"), "desired_vcpus") == 1)
    second = _compute_up(stack, "rb-cmp-two", 1)
    # Then the second cannot have a vCPU: the shared queue keeps the last one. Its environment is
    # INVALID with the reason (the compute fails, not charged for its start) and holds nothing.
    state = second.describe_environment("rb-cmp-two")
    assert _field(state, "status") == "INVALID" and _field(state, "desired_vcpus") == 0
    assert "no vCPU left" in _field(state, "reason") and "REMOTE_BATCH_LOCAL_VCPUS" in _field(state, "reason")
    # And a shared job starts at once on the last vCPU
    shared = stack.gateway.submit_job(_submission(SLEEP="0.2"))
    runnable = stack.delivered.wait_for(shared, "RUNNABLE")
    assert runnable["detail"].get("statusReason") is None
    stack.delivered.wait_for(shared, "SUCCEEDED")
    # Once the first compute stops, the failed one still takes nothing (it is INVALID, as in AWS)
    first.set_capacity("rb-cmp-one", 0)
    blocker = stack.gateway.submit_job(_submission(vcpus=2, SLEEP="0.2"))
    stack.delivered.wait_for(blocker, "SUCCEEDED")


def test_a_share_that_ran_waits_behind_a_share_that_did_not(make_stack):
    # Given one vCPU busy with account A's first job, then A's two more and B's one queued after them
    stack = make_stack(vcpus=1)
    a = [
        stack.gateway.submit_job(dataclasses.replace(_submission(SLEEP="0.3"), share_identifier="acct1"))
        for _ in range(3)
    ]
    b = stack.gateway.submit_job(dataclasses.replace(_submission(), share_identifier="acct2"))
    stack.delivered.wait_for(a[2], "SUCCEEDED", timeout=30)
    # Then B's job starts second: A's share has used the vCPU, B's has not (fair share, not FIFO)
    starts = [e["detail"]["jobId"] for e in stack.delivered.envelopes if e["detail"]["status"] == "STARTING"]
    assert starts == [a[0], b, a[1], a[2]], starts


def test_fair_share_queues_need_a_share_identifier_and_a_computes_queue_takes_none(make_stack):
    stack = make_stack(vcpus=1)
    stack.executor.fleet.add_zone(REGION, {"Basic1x8": "remote-batch-Basic1x8"})
    with pytest.raises(DependencyFailed, match="shareIdentifier is required") as missing:
        stack.gateway.submit_job(_submission())
    cause = missing.value.__cause__
    assert isinstance(cause, ClientError) and cause.response["Error"]["Code"] == "ClientException"
    taken = stack.gateway.submit_job(dataclasses.replace(_submission(), share_identifier="acct1"))
    stack.delivered.wait_for(taken, "SUCCEEDED")
    _compute_up(stack, "rb-cmp-fifo", 1)
    with pytest.raises(DependencyFailed, match="takes no shareIdentifier"):
        stack.gateway.submit_job(
            dataclasses.replace(_submission(), job_queue="rb-cmp-fifo", share_identifier="acct1")
        )


# -- issue 22 item 8: accepted jobs kept on disk and taken back after a crash ----------------------


def test_an_accepted_job_is_on_disk_before_submit_job_answers(make_stack, tmp_path):
    # Given an executor that keeps its accepted jobs
    accepted = AcceptedJobs(tmp_path / "accepted.jsonl")
    stack = make_stack(accepted=accepted)
    submission = _submission(SLEEP="30")

    # When a job and an array job are submitted
    single = stack.gateway.submit_job(submission)
    array = stack.gateway.submit_job(dataclasses.replace(submission, array_size=3))

    # Then both are recorded, with their zone, createdAt and the whole submission
    records = AcceptedJobs(accepted.path).load()
    assert [(r.job_id, r.region, r.log_group, r.submission) for r in records] == [
        (single, REGION, LOG_GROUP, submission),
        (array, REGION, LOG_GROUP, dataclasses.replace(submission, array_size=3)),
    ]
    created = stack.delivered.wait_for(single, "RUNNABLE")["detail"]["createdAt"]
    assert records[0].created_at_ms == created
    # and forgetting one keeps the other, whole
    accepted.forget({single})
    assert [r.job_id for r in accepted.load()] == [array]


def test_a_cut_last_record_is_no_job_and_the_next_record_starts_a_line(tmp_path):
    path = tmp_path / "accepted.jsonl"
    record = AcceptedJob("id-1", REGION, LOG_GROUP, 1, _submission())
    path.write_text(record.to_line() + "\n" + record.to_line()[:40])
    accepted = AcceptedJobs(path)
    accepted.record(dataclasses.replace(record, job_id="id-2"))
    assert [r.job_id for r in accepted.load()] == ["id-1", "id-2"]


def test_a_readmitted_job_runs_as_its_next_attempt_with_its_attempts(make_stack, logs):
    # Given a job the last run accepted, whose first attempt was lost to a crash
    stack = make_stack()
    lost = BatchAttempt(None, "s", "t", 1_000, 2_000, LOCAL_HOST_LOST_REASON)
    record = AcceptedJob(str(uuid.uuid4()), REGION, LOG_GROUP, 500, _submission(SHOW_ATTEMPT="1"))

    # When the new executor takes it back
    stack.executor.readmit(record, {record.job_id: PriorRun(status="RUNNING", attempts=(lost,))})

    # Then it runs under its own id as attempt 2, and its events carry both attempts
    final = stack.delivered.wait_for(record.job_id, "SUCCEEDED")["detail"]
    assert final["createdAt"] == 500
    assert [a["statusReason"] for a in final["attempts"]] == [
        LOCAL_HOST_LOST_REASON,
        "Essential container in task exited",
    ]
    assert "attempt 2" in _log_messages(logs, final["container"]["logStreamName"])
    assert stack.executor.status_of(record.job_id) == "SUCCEEDED"


def test_a_readmitted_job_whose_attempts_are_spent_fails_at_once_with_the_reason(make_stack):
    stack = make_stack()
    lost = tuple(
        BatchAttempt(None, "s", "t", n * 1_000, n * 1_000 + 500, LOCAL_HOST_LOST_REASON) for n in (1, 2, 3)
    )
    record = AcceptedJob(str(uuid.uuid4()), REGION, LOG_GROUP, 500, _submission())

    stack.executor.readmit(
        record, {record.job_id: PriorRun(status="RUNNING", attempts=lost, end_reason=LOCAL_HOST_LOST_REASON)}
    )

    final = stack.delivered.wait_for(record.job_id, "FAILED")["detail"]
    assert stack.delivered.statuses(record.job_id) == ["FAILED"]  # it never ran again
    assert (final["statusReason"], final["startedAt"], final["stoppedAt"]) == (
        LOCAL_HOST_LOST_REASON,
        3_000,
        3_500,
    )
    assert len(final["attempts"]) == 3


def test_a_readmitted_array_runs_its_unfinished_children_and_keeps_the_ended_ones(make_stack):
    # Given an array of three: child 0 succeeded before the crash, child 1 was running, child 2 waited
    stack = make_stack()
    record = AcceptedJob(
        str(uuid.uuid4()), REGION, LOG_GROUP, 500, dataclasses.replace(_submission(), array_size=3)
    )
    ended = {"jobId": f"{record.job_id}:0", "status": "SUCCEEDED", "stoppedAt": 900}
    lost = BatchAttempt(None, "s", "t", 600, 800, LOCAL_HOST_LOST_REASON)
    prior = {
        f"{record.job_id}:0": PriorRun(status="SUCCEEDED", detail=ended),
        f"{record.job_id}:1": PriorRun(status="RUNNING", attempts=(lost,)),
    }

    # When the new executor takes it back
    stack.executor.readmit(record, prior)

    # Then children 1 and 2 run (1 as its second attempt), child 0 sends nothing again, and the parent
    # succeeds by its children
    parent = stack.delivered.wait_for(record.job_id, "SUCCEEDED")["detail"]
    assert parent["arrayProperties"]["statusSummary"]["SUCCEEDED"] == 3
    assert stack.delivered.statuses(f"{record.job_id}:0") == []
    child = stack.delivered.wait_for(f"{record.job_id}:1", "SUCCEEDED")["detail"]
    assert [a["statusReason"] for a in child["attempts"]] == [
        LOCAL_HOST_LOST_REASON,
        "Essential container in task exited",
    ]
    assert len(stack.delivered.wait_for(f"{record.job_id}:2", "SUCCEEDED")["detail"]["attempts"]) == 1
    assert stack.executor.describe([f"{record.job_id}:0"]) == [ended]


def test_submit_job_is_refused_and_nothing_queued_while_the_state_disk_takes_no_writes(make_stack, tmp_path):
    # Given an executor whose accepted-jobs file is on a full filesystem (below the reserve)
    def full(path):
        return os.statvfs_result((4096, 1, 0, 0, 0, 0, 0, 0, 0, 255))

    accepted = AcceptedJobs(tmp_path / "accepted.jsonl", StateDisk(tmp_path, 1000, statvfs=full))
    stack = make_stack(accepted=accepted)

    # When a job is submitted, then it is refused with the disk's reason, and nothing was kept or queued
    submission = _submission()
    with pytest.raises(DependencyFailed, match="full"):
        stack.gateway.submit_job(submission)
    assert not accepted.path.exists()
    assert stack.executor.find_job_by_name(REGION, submission.job_queue, submission.job_name) is None
    assert stack.delivered.envelopes == []


# -- a state disk that refuses writes (issue 22 item 7) ------------------------------------------------
class _SwitchedDisk:
    """A state disk (``StateDisk`` over tmp_path) whose ``statvfs`` says full while ``full`` is set;
    every look the executor takes is counted (``looks``)."""

    def __init__(self, home: Path) -> None:
        self.full = False
        self.looks = 0
        self.disk = StateDisk(home, 1000, statvfs=self._statvfs, probe_interval=0.0)

    def _statvfs(self, path: Path) -> os.statvfs_result:
        self.looks += 1
        free = 0 if self.full else 1 << 20
        return os.statvfs_result((4096, 1, 0, 0, free, 0, 0, 0, 0, 255))


def _basic_charge(final: dict[str, Any]) -> Decimal:
    """What the service charges for a Basic1x8 job (60 credits an hour, 60 s minimum) on its final
    event: the final attempt's Running time only (``settle_charge``)."""
    state = to_state(BatchJobDetail.model_validate(final["detail"]), final["detail"]["stoppedAt"])
    return settle_charge(state.running_ms, Decimal(60), None, Decimal(1000)).credits


def test_a_job_queued_while_the_state_disk_refuses_writes_stays_runnable_and_starts_once_it_takes_them(
    make_stack, logs, tmp_path, monkeypatch
):
    monkeypatch.setattr("remote_batch_local.executor.scheduler.DISK_RECHECK_SECONDS", 0.05)
    # Given a full state disk
    switched = _SwitchedDisk(tmp_path)
    switched.full = True
    stack = make_stack(disk=switched.disk)

    # When a job is submitted, it is queued and stays RUNNABLE while the scheduler looks again
    job_id = stack.gateway.submit_job(_submission())
    stack.delivered.wait_for(job_id, "RUNNABLE")
    looked = switched.looks
    assert _eventually(lambda: switched.looks >= looked + 2)
    assert stack.delivered.statuses(job_id) == ["PENDING", "RUNNABLE"]
    assert stack.executor.describe([job_id])[0]["status"] == "RUNNABLE"

    # When space returns, it starts by itself and runs once, charged for its own Running time only
    freed_at_ms = int(time.time() * 1000)
    switched.full = False
    final = stack.delivered.wait_for(job_id, "SUCCEEDED")
    assert stack.delivered.statuses(job_id) == [
        "PENDING", "RUNNABLE", "STARTING", "RUNNING", "SUCCEEDED"
    ]  # fmt: skip
    assert final["detail"]["startedAt"] >= freed_at_ms
    assert len(final["detail"]["attempts"]) == 1
    assert _basic_charge(final) == Decimal("1.00")  # the 60-second minimum: the wait cost nothing
    assert _log_messages(logs, final["detail"]["container"]["logStreamName"])[-1] == "ready"


class _RefusingLogs:
    """A logs client whose CreateLogStream meets a state disk that filled after the scheduler's check
    (``StateDiskUnavailable``, as the in-process client raises it) while ``full`` is set."""

    def __init__(self, inner: Any, home: Path) -> None:
        self._inner = inner
        self._status = DiskStatus(DiskCondition.FULL, home, 0, 1000)
        self.full = True
        self.refused = 0

    def create_log_stream(self, **kwargs: str) -> Any:
        if self.full:
            self.refused += 1
            raise StateDiskUnavailable(self._status)
        return self._inner.create_log_stream(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_job_whose_log_stream_the_full_disk_refuses_waits_starting_uncharged_then_runs(
    make_stack, moto_endpoint, logs, tmp_path, monkeypatch
):
    monkeypatch.setattr("remote_batch_local.executor.runner.DISK_RECHECK_SECONDS", 0.02)
    stack = make_stack()
    refusing = _RefusingLogs(_logs_client(moto_endpoint, REGION), tmp_path)
    stack.gateway.logs = refusing

    # When a job starts while its log stream cannot be made, it waits STARTING: no worker, no charge
    job_id = stack.gateway.submit_job(_submission())
    stack.delivered.wait_for(job_id, "STARTING")
    assert _eventually(lambda: refusing.refused >= 3)
    assert stack.delivered.statuses(job_id)[-1] == "STARTING"
    assert _fake_workers() == []

    # Then, once the disk takes writes, it runs its one attempt and its log is complete
    refusing.full = False
    final = stack.delivered.wait_for(job_id, "SUCCEEDED")
    assert stack.delivered.statuses(job_id)[-3:] == ["STARTING", "RUNNING", "SUCCEEDED"]
    assert len(final["detail"]["attempts"]) == 1
    assert _basic_charge(final) == Decimal("1.00")
    assert _log_messages(logs, final["detail"]["container"]["logStreamName"]) == ["line 0", "ready"]


def test_a_job_terminated_while_it_waits_for_the_state_disk_fails_without_running_and_is_free(
    make_stack, moto_endpoint, tmp_path, monkeypatch
):
    monkeypatch.setattr("remote_batch_local.executor.runner.DISK_RECHECK_SECONDS", 0.02)
    stack = make_stack()
    refusing = _RefusingLogs(_logs_client(moto_endpoint, REGION), tmp_path)
    stack.gateway.logs = refusing
    job_id = stack.gateway.submit_job(_submission())
    stack.delivered.wait_for(job_id, "STARTING")
    assert _eventually(lambda: refusing.refused >= 1)

    stack.gateway.terminate_job(job_id, "Terminated by the user")

    final = stack.delivered.wait_for(job_id, "FAILED")
    assert final["detail"]["statusReason"] == "Terminated by the user"
    assert "RUNNING" not in stack.delivered.statuses(job_id)
    assert _basic_charge(final) == Decimal("0")
    # Its vCPU is free again: the next job starts once the disk takes writes
    refusing.full = False
    stack.delivered.wait_for(stack.gateway.submit_job(_submission()), "SUCCEEDED")
