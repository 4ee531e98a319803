"""The local executor's warm workers: the real worker (``python -u -m worker.warm``) started ahead of
its job in its own sandbox, against S3 and CloudWatch Logs on a moto server.

Each job prints what it sees of itself (``FACTS``) as one JSON line, read back from its log.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
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
from moto.server import ThreadedMotoServer

from functions.ports import BatchSubmission
from remote_batch_local.executor import LocalBatchExecutor
from remote_batch_local.recovery import remove_leftover_jobs
from remote_batch_local.sandbox import ProcessRegistry, namespace_members

REGION = "eu-central-1"
LOG_GROUP = "/remote-batch/warm-jobs"
BUCKET = "remote-batch-warm-tests"
MIB = 1024 * 1024
REPO_ROOT = Path(__file__).resolve().parents[2]

# What a job sees of itself, as one JSON line prefixed "facts ".
FACTS = textwrap.dedent(
    """
    import json, os, resource
    # The worker's supervisor: the job's code runs in its job side, a child (worker/job_side.py), or a
    # child of the supervisor's zygote (worker/zygote.py) when it forks its job sides.
    parent = open(f"/proc/{os.getppid()}/cmdline").read().split("\\0")
    forked = any("worker.zygote" in part for part in parent)
    with open(f"/proc/{os.getppid()}/stat") as stat:
        supervisor = int(stat.read().rsplit(")", 1)[1].split()[1]) if forked else os.getppid()
    print("facts " + json.dumps({
        "cmdline": open("/proc/self/cmdline").read().split("\\0"),
        "forked": forked,
        "supervisor": open(f"/proc/{supervisor}/cmdline").read().split("\\0"),
        "ppid": os.getppid(),
        "pid": os.getpid(), "pgid": os.getpgid(0), "sid": os.getsid(0),
        "namespace": os.readlink("/proc/self/ns/pid"),
        "cwd": os.getcwd(),
        "env": dict(os.environ),
        "as": resource.getrlimit(resource.RLIMIT_AS),
        "cpus": sorted(os.sched_getaffinity(0)),
        "stdinIsNull": os.path.samestat(os.fstat(0), os.stat(os.devnull)),
    }), flush=True)
    """
)


@pytest.fixture(scope="module")
def endpoint() -> Iterator[str]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def _client(endpoint: str, service: str) -> Any:
    return boto3.client(
        service,  # type: ignore[call-overload]
        region_name=REGION,
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",  # moto's fake credentials
    )


@pytest.fixture(scope="module")
def s3(endpoint: str) -> Any:
    client = _client(endpoint, "s3")
    client.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    return client


class Events:
    """The executor's bus: keeps each job's statuses and lets a test wait for one."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []
        self.cond = threading.Condition()

    def publish(self, envelope: dict[str, Any]) -> None:
        with self.cond:
            self.seen.append((envelope["detail"]["jobId"], envelope["detail"]["status"]))
            self.cond.notify_all()

    def wait_for(self, job_id: str, status: str, timeout: float = 30) -> None:
        with self.cond:
            found = self.cond.wait_for(lambda: (job_id, status) in self.seen, timeout)
        assert found, f"no {status} for {job_id}; got {[s for j, s in self.seen if j == job_id]}"


class Credentials:
    """Issues each job keys of its own (moto takes any) and records what it revoked."""

    def __init__(self) -> None:
        self.revoked: list[str] = []

    def issue(self, batch_job_id: str, submission: BatchSubmission) -> dict[str, str]:
        return {"AWS_ACCESS_KEY_ID": f"AKIA{batch_job_id[:8].upper()}", "AWS_SECRET_ACCESS_KEY": "testing"}

    def revoke(self, batch_job_id: str) -> None:
        self.revoked.append(batch_job_id)


class WarmStack:
    def __init__(self, endpoint: str, s3: Any, registry: ProcessRegistry, **kwargs: Any) -> None:
        self.s3 = s3
        self.logs = _client(endpoint, "logs")
        self.events = Events()
        self.registry = registry
        self.executor = LocalBatchExecutor(
            self.events,
            lambda region: _client(endpoint, "logs"),
            {"AWS_ENDPOINT_URL": endpoint},
            registry=registry,
            credentials=Credentials(),
            **kwargs,
        )
        self.gateway = self.executor.gateway(REGION, LOG_GROUP)

    def submit(self, code: str, memory_mib: int = 1024, **env: str) -> str:
        job_id = f"job-{uuid.uuid4().hex}"
        key = f"inputs/{job_id}/input.json"
        self.s3.put_object(Bucket=BUCKET, Key=key, Body=json.dumps({"kind": "code", "code": code}).encode())
        submission = BatchSubmission(
            job_name=f"warm-{job_id[-8:]}",
            job_queue="remote-batch-Basic1x8",
            job_definition="remote-batch-worker",
            vcpus=1,
            memory_mib=memory_mib,
            gpus=0,
            environment={
                "REMOTE_BATCH_JOB_ID": job_id,
                "REMOTE_BATCH_BUCKET": BUCKET,
                "REMOTE_BATCH_INPUT_KEY": key,
                "REMOTE_BATCH_OUTPUT_PREFIX": f"outputs/{job_id}/",
                "JOB_VAR": job_id,
                **env,
            },
            timeout_seconds=None,
            tags={},
        )
        return self.gateway.submit_job(submission)

    def lines(self, batch_job_id: str) -> list[str]:
        events = self.logs.get_log_events(
            logGroupName=LOG_GROUP,
            logStreamName=f"remote-batch-worker/default/{batch_job_id}",
            startFromHead=True,
        )
        return [e["message"] for e in events["events"]]

    def facts(self, batch_job_id: str, timeout: float = 30) -> dict[str, Any]:
        """The job's ``FACTS`` line, once it printed it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(self.logs.exceptions.ResourceNotFoundException):
                for line in self.lines(batch_job_id):
                    if line.startswith("facts "):
                        return dict(json.loads(line.removeprefix("facts ")))
            time.sleep(0.05)
        raise AssertionError(f"no facts in the log of {batch_job_id}: {self.lines(batch_job_id)}")

    def idle_warm_records(self) -> list[Path]:
        """The registry's records of idle warm workers (a job's record is named by its id)."""
        return sorted((self.registry.directory / "warm").glob("warm-*.json"))


@pytest.fixture
def make_stack(endpoint: str, s3: Any, tmp_path: Path) -> Iterator[Callable[..., WarmStack]]:
    stacks: list[WarmStack] = []

    def make(**kwargs: Any) -> WarmStack:
        kwargs.setdefault("min_timeout_seconds", 0)
        kwargs.setdefault("kill_grace_seconds", 0.5)
        stack = WarmStack(endpoint, s3, ProcessRegistry(tmp_path / f"processes-{len(stacks)}"), **kwargs)
        stacks.append(stack)
        return stack

    yield make
    for stack in stacks:
        stack.executor.shutdown(timeout=5)


def _eventually(condition: Callable[[], bool], timeout: float = 20) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def _descendants() -> list[psutil.Process]:
    """This process's live descendants (zombies excluded)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
    return found


def _in_another_stack(process: psutil.Process) -> bool:
    """Whether ``process`` runs under a ``python -m remote_batch_local`` of its own: the warm workers
    of a stack another test's fixture keeps up in this session, not this test's executor's."""
    for parent in process.parents():
        if parent.pid == os.getpid():
            return False
        if "remote_batch_local" in parent.cmdline():
            return True
    return False


def _warm_processes() -> list[psutil.Process]:
    """This test's executor's ``-m worker.warm`` processes (sandboxes and the worker itself):
    descendants of this process, less those of a local stack another fixture runs meanwhile."""
    found = []
    for process in _descendants():
        with contextlib.suppress(psutil.Error):
            if "worker.warm" in process.cmdline() and not _in_another_stack(process):
                found.append(process)
    return found


def _records(paths: list[Path]) -> list[dict[str, Any]]:
    return [json.loads(path.read_text()) for path in paths]


def _ran_warm(facts: dict[str, Any]) -> bool:
    return bool(facts["supervisor"][1:4] == ["-u", "-m", "worker.warm"])


def test_a_job_in_a_warm_worker_has_its_own_session_environment_folder_and_limits(make_stack):
    # Given an executor whose warm workers are started and idle
    stack = make_stack(vcpus=2)
    assert _eventually(lambda: len(stack.idle_warm_records()) == 2)
    warm_folders = {record["workdir"] for record in _records(stack.idle_warm_records())}

    # When a job of 1 vCPU and 1 GiB runs
    batch_job_id = stack.submit(FACTS + "2 + 2", memory_mib=1024)
    facts = stack.facts(batch_job_id)
    stack.events.wait_for(batch_job_id, "SUCCEEDED")

    # Then it ran in a warm worker started before it, in that worker's folder
    assert _ran_warm(facts)
    assert facts["cwd"] in warm_folders
    # forked from the warm worker's zygote, in a session and process group of its own (in its box)
    assert facts["forked"] is True
    assert facts["pgid"] == facts["sid"] == facts["pid"]
    # and, seen from here, each box is a process group of its own, not this process's
    boxes = [p for p in psutil.Process().children() if "worker.warm" in p.cmdline()]
    assert boxes
    assert all(os.getpgid(box.pid) == box.pid != os.getpgid(0) for box in boxes)
    # with its own environment: its id, its variables, its credentials, its zone, its folder's tmp
    env = facts["env"]
    assert env["AWS_BATCH_JOB_ID"] == batch_job_id
    assert env["JOB_VAR"].startswith("job-")
    assert env["AWS_ACCESS_KEY_ID"] == f"AKIA{batch_job_id[:8].upper()}"
    assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == REGION
    assert env["TMPDIR"] == str(Path(facts["cwd"]) / "tmp")
    assert env["OMP_NUM_THREADS"] == "1"
    assert not [k for k, v in env.items() if v.startswith("warm-")]  # nothing left of the warm worker's
    # with its limits: one CPU, an address space of 1 GiB that it cannot raise, no stdin
    assert len(facts["cpus"]) == 1
    assert facts["as"] == [1024 * MIB, 1024 * MIB]
    assert facts["stdinIsNull"] is True
    # and its result is the worker's, as from a fresh worker
    result = stack.s3.get_object(Bucket=BUCKET, Key=f"outputs/{env['JOB_VAR']}/outcome.json")
    assert json.loads(result["Body"].read())["result"] == 4
    # and its folder is removed, its record gone, a fresh warm worker takes its place
    assert _eventually(lambda: not Path(facts["cwd"]).exists())
    assert not (stack.registry.directory / f"{batch_job_id}.json").exists()
    assert _eventually(lambda: len(stack.idle_warm_records()) == 2)


def test_a_warm_worker_runs_one_job_and_is_gone_after_it(make_stack):
    # Given an executor with warm workers
    stack = make_stack(vcpus=2)

    # When three jobs run one after the other
    seen = []
    for _ in range(3):
        assert _eventually(lambda: len(stack.idle_warm_records()) == 2)
        batch_job_id = stack.submit(FACTS + "2 + 2")
        facts = stack.facts(batch_job_id)
        stack.events.wait_for(batch_job_id, "SUCCEEDED")
        seen.append(facts)
        # Then nothing is left in its box once it ended
        namespace = str(facts["namespace"])
        assert _eventually(lambda: namespace_members(namespace) == [], timeout=5)

    # each in a warm worker of its own: its own PID namespace and folder
    assert all(_ran_warm(facts) for facts in seen)
    assert len({facts["namespace"] for facts in seen}) == 3
    assert len({facts["cwd"] for facts in seen}) == 3


def test_terminating_a_job_in_a_warm_worker_kills_what_it_started(make_stack):
    # Given a job in a warm worker that started a process in a new session (out of its process group)
    stack = make_stack(vcpus=2)
    assert _eventually(lambda: len(stack.idle_warm_records()) == 2)
    code = FACTS + "import subprocess, time\nsubprocess.Popen(['setsid', 'sleep', '785'])\ntime.sleep(60)\n"
    batch_job_id = stack.submit(code)
    assert _ran_warm(stack.facts(batch_job_id))
    assert _eventually(lambda: len(_sleeps_785()) == 1)
    # (seen from here, the worker's environment is its job's, as a process search by the job id reads it)
    marked = _marked(batch_job_id)
    assert any("worker.warm" in process.cmdline() for process in marked)
    assert all("REMOTE_BATCH_WARM_ROOM" not in process.environ() for process in marked)

    # When it is terminated
    stack.gateway.terminate_job(batch_job_id, "Terminated by the user")
    stack.events.wait_for(batch_job_id, "FAILED")

    # Then its worker and what it started are gone
    assert _eventually(lambda: _sleeps_785() == [], timeout=5)


def _marked(batch_job_id: str) -> list[psutil.Process]:
    """Live processes whose ``/proc/<pid>/environ`` has ``AWS_BATCH_JOB_ID=<batch_job_id>``."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.environ().get("AWS_BATCH_JOB_ID") == batch_job_id:
                found.append(process)
    return found


def _sleeps_785() -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if process.info["cmdline"] == ["sleep", "785"] and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


def test_the_pool_follows_free_vcpus_and_queued_jobs(make_stack):
    # Given an idle executor of 1 vCPU: one warm worker, for its free vCPU
    stack = make_stack(vcpus=1)
    assert _eventually(lambda: len(stack.idle_warm_records()) == 1)
    time.sleep(1.5)  # more than the pool's check interval: never more than the free vCPUs
    assert len(stack.idle_warm_records()) == 1

    # When a job takes the vCPU, nothing is kept warm for a job that could not start
    running = stack.submit(FACTS + "import time\ntime.sleep(60)\n")
    assert _ran_warm(stack.facts(running))
    time.sleep(1.5)
    assert stack.idle_warm_records() == []

    # When a second job waits for the vCPU, a warm worker is made ready for it, and it runs there
    queued = stack.submit(FACTS + "2 + 2")
    assert _eventually(lambda: len(stack.idle_warm_records()) == 1)
    stack.gateway.terminate_job(running, "Terminated by the user")
    assert _ran_warm(stack.facts(queued))
    stack.events.wait_for(queued, "SUCCEEDED")


def test_a_job_that_changes_how_python_starts_gets_a_fresh_worker(make_stack):
    # Given warm workers started without PYTHONHASHSEED
    stack = make_stack(vcpus=2)
    assert _eventually(lambda: len(stack.idle_warm_records()) == 2)

    # When a job sets it
    batch_job_id = stack.submit(FACTS + "2 + 2", PYTHONHASHSEED="123")
    facts = stack.facts(batch_job_id)
    stack.events.wait_for(batch_job_id, "SUCCEEDED")

    # Then it ran in a worker started for it, which saw the variable as it started
    assert facts["supervisor"][1:4] == ["-u", "-m", "worker"]
    assert facts["forked"] is False  # python -m worker starts its one job side fresh
    assert facts["env"]["PYTHONHASHSEED"] == "123"
    assert len(stack.idle_warm_records()) == 2  # the warm ones were left for others


def test_stop_leaves_no_warm_worker_process_folder_or_record(make_stack):
    # Given idle warm workers, recorded with their folders for a crash's cleanup
    stack = make_stack(vcpus=2)
    assert _eventually(lambda: len(stack.idle_warm_records()) == 2)
    assert _eventually(lambda: len(_warm_processes()) >= 2)
    processes = _warm_processes()
    folders = [Path(record["workdir"]) for record in _records(stack.idle_warm_records())]
    assert all(folder.is_dir() for folder in folders)

    # When the executor stops
    stack.executor.shutdown(timeout=5)

    # Then no warm worker process, folder or record is left
    assert _eventually(lambda: not any(p.is_running() and p.status() != "zombie" for p in processes), 5)
    assert _warm_processes() == []
    assert not any(folder.exists() for folder in folders)
    assert list(stack.registry.directory.glob("**/*.json")) == []


EXECUTOR_PROCESS = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from remote_batch_local.executor import LocalBatchExecutor
    from remote_batch_local.sandbox import ProcessRegistry

    class Bus:
        def publish(self, envelope):
            pass

    registry = ProcessRegistry(Path(sys.argv[1]))
    executor = LocalBatchExecutor(Bus(), lambda region: None, {}, vcpus=2, registry=registry)
    while len(list(registry.directory.glob("warm/warm-*.json"))) < 2:
        time.sleep(0.05)
    print("warm", flush=True)
    time.sleep(60)
    """
)


def test_warm_workers_die_with_a_killed_executor_and_the_next_start_removes_their_folders(tmp_path):
    # Given an executor in its own process, with its warm workers started
    records = tmp_path / "processes"
    host = subprocess.Popen(
        [sys.executable, "-c", EXECUTOR_PROCESS, str(records)],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert host.stdout is not None
        assert host.stdout.readline().strip() == "warm"
        sandboxes = psutil.Process(host.pid).children()
        assert len(sandboxes) >= 2
        tree = [p for s in sandboxes for p in [s, *s.children(recursive=True)]]
        folders = [Path(json.loads(path.read_text())["workdir"]) for path in records.glob("warm/*.json")]
        assert len(folders) >= 2

        # When the executor is SIGKILLed (no chance to clean up)
        host.send_signal(signal.SIGKILL)
        host.wait(5)

        # Then its warm workers die too (PR_SET_PDEATHSIG), whole box
        assert _eventually(lambda: not any(_alive(p) for p in tree), timeout=5)
        # and the next start's cleanup removes their folders and records
        remove_leftover_jobs(ProcessRegistry(records))
        assert not any(folder.exists() for folder in folders)
        assert list(records.glob("**/*.json")) == []
    finally:
        host.kill()
        host.wait(5)
        if host.stdout is not None:
            host.stdout.close()


def _alive(process: psutil.Process) -> bool:
    try:
        return bool(process.is_running() and process.status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False
