"""The local executor's per-job process limit: a fork bomb is killed at it, with its reason, exit code
137 and a last log line, and leaves no process; a job under it runs on (``process_limit``)."""

from __future__ import annotations

import sys
import textwrap
import uuid

import psutil

from tests.integration import test_local_executor as executor_tests
from tests.integration.test_local_executor import LOG_GROUP, _eventually, _submission

# The executor tests' fixtures: a moto server per module, an executor factory, a Logs client.
moto_endpoint = executor_tests.moto_endpoint
make_stack = executor_tests.make_stack
logs = executor_tests.logs


# A bounded fork bomb: 2**9 = 512 processes at most, each sleeping; the marker (its last argument)
# is in every process's command line.
FORK_BOMB = textwrap.dedent(
    """
    import os, sys, time
    print("bombing", flush=True)
    for _ in range(9):
        os.fork()
    time.sleep(60)
    """
)


def test_a_fork_bomb_is_killed_at_the_process_limit_with_the_reason(make_stack, logs):
    # Given an executor allowing 32 tasks per job
    marker = f"remote-batch-bomb-{uuid.uuid4().hex}"

    def bomb_processes() -> list[psutil.Process]:
        found = []
        for process in psutil.process_iter(["cmdline", "status"]):
            if marker in (process.info["cmdline"] or []) and process.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(process)
        return found

    stack = make_stack(worker_command=[sys.executable, "-c", FORK_BOMB, marker], process_limit=32)

    # When a job forks toward 512 processes
    job_id = stack.gateway.submit_job(_submission())
    final = stack.delivered.wait_for(job_id, "FAILED", timeout=30)

    # Then it is killed (SIGKILL: exit code 137) within seconds, with the process limit as its reason
    detail = final["detail"]
    assert detail["statusReason"] == "Process limit of 32 exceeded"
    assert detail["container"]["exitCode"] == 137
    assert detail["stoppedAt"] - detail["startedAt"] < 5_000
    # and none of its processes is left
    assert _eventually(lambda: bomb_processes() == []), bomb_processes()
    # and its log ends with why
    events = logs.get_log_events(
        logGroupName=LOG_GROUP, logStreamName=detail["container"]["logStreamName"], startFromHead=True
    )["events"]
    messages = [event["message"] for event in events]
    assert messages[0] == "bombing"
    assert messages[-1].startswith("Process limit of 32 exceeded: the job held ")
    assert messages[-1].endswith(" processes and threads; all were killed.")


def test_a_job_within_its_process_limit_runs_to_its_end(make_stack):
    # Given an executor allowing 32 tasks per job
    stack = make_stack(
        worker_command=[
            sys.executable,
            "-c",
            "import subprocess, sys\n"
            "sleeper = [sys.executable, '-c', 'import time; time.sleep(1)']\n"
            "children = [subprocess.Popen(sleeper) for _ in range(8)]\n"
            "sys.exit(sum(child.wait() for child in children))",
        ],
        process_limit=32,
    )

    # When a job runs 8 children for a second (10 processes and a few threads: under the limit)
    job_id = stack.gateway.submit_job(_submission())
    final = stack.delivered.wait_for(job_id, "SUCCEEDED", timeout=30)

    # Then it succeeds as usual
    assert final["detail"]["statusReason"] == "Essential container in task exited"
    assert final["detail"]["container"]["exitCode"] == 0
