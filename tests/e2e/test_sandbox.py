"""Issue 10 acceptance: every process of a job dies with it, whatever it did to escape.

Five jobs each start a child that tries to outlive them (a new session, a cleared environment, a
double fork, SIGTERM ignored, and all of these at once), then sleep. The children carry a marker in
their command line that is unique to this test run; after an abort, and after ``kill -9`` of the
stack and a restart, none may be left.
"""

from __future__ import annotations

import json
import signal
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.e2e.conftest import Client, LocalStackProcess, _free_port, wait_for

pytestmark = pytest.mark.e2e

MARKER = f"remote-batch-escapee-{uuid.uuid4().hex}"

# The escaping child: python sleeping 600 s with the marker as its argument (SIGTERM ignored if asked).
ESCAPE_JOB = textwrap.dedent(
    """
    import os, subprocess, sys, time
    VARIANT = {variant!r}
    MARKER = {marker!r}
    sleeper = "import signal, sys, time\\n"
    if VARIANT in ("sigterm-ignored", "all"):
        sleeper += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
    sleeper += "time.sleep(600)"
    child = [sys.executable, "-c", sleeper, MARKER]
    if VARIANT in ("env-i", "all"):
        child = ["env", "-i", *child]
    if VARIANT in ("double-fork", "all"):
        if os.fork() == 0:
            if VARIANT == "all":
                os.setsid()
            if os.fork() == 0:
                os.execvp(child[0], child)
            os._exit(0)
        os.wait()
    else:
        subprocess.Popen(child, start_new_session=VARIANT == "new-session", stdin=subprocess.DEVNULL)
    print("escaped", VARIANT, flush=True)
    time.sleep(600)
    """
)
VARIANTS = ("new-session", "env-i", "double-fork", "sigterm-ignored", "all")


def escapees() -> list[psutil.Process]:
    """Live (not zombie) processes carrying this run's marker."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if MARKER in (process.info["cmdline"] or []) and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


@pytest.fixture(scope="module")
def escape_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackProcess]:
    """A stack of its own (it is killed with SIGKILL), with room for the five jobs at once."""
    root = tmp_path_factory.mktemp("escape-stack")
    process = LocalStackProcess(root / "home", _free_port(), {"REMOTE_BATCH_LOCAL_VCPUS": str(len(VARIANTS))})
    process.start()
    yield process
    for leftover in escapees():  # never leave a test's processes behind, even when it failed
        leftover.kill()
    assert process.stop() == 0


def _start_escapes(client: Client) -> dict[str, str]:
    """Submit one job per variant; returns variant → job id once every child has escaped."""
    jobs = {
        variant: client.submit({"code": ESCAPE_JOB.format(variant=variant, marker=MARKER)})["jobId"]
        for variant in VARIANTS
    }
    for job_id in jobs.values():
        client.wait_status(job_id, ("Running",), timeout=30)
    wait_for(lambda: len(escapees()) == len(VARIANTS), 30, f"{len(VARIANTS)} escaped children")
    return jobs


def test_escaped_processes_die_when_their_jobs_are_aborted(escape_stack: LocalStackProcess) -> None:
    client = escape_stack.client("dev")
    jobs = _start_escapes(client)
    assert len(escapees()) == 5

    for job_id in jobs.values():
        response = client.post(f"/jobs/{job_id}/abort")
        assert response.status_code == 202, response.text
    for job_id in jobs.values():
        assert client.wait_status(job_id, timeout=30)["status"] == "Terminated"

    assert escapees() == []


def test_escaped_processes_die_after_kill_9_and_folders_are_removed_at_restart(
    escape_stack: LocalStackProcess,
) -> None:
    client = escape_stack.client("dev")
    jobs = _start_escapes(client)
    records = [json.loads(p.read_text()) for p in (escape_stack.home / "processes").glob("*.json")]
    folders = [Path(record["workdir"]) for record in records]
    assert len(records) == 5
    assert all(folder.is_dir() for folder in folders)
    assert all(len(record["processes"]) == 2 for record in records)  # the sandbox and its namespace's init

    escape_stack.stop(signal.SIGKILL)
    escape_stack.start()

    assert escapees() == []
    assert [folder for folder in folders if folder.exists()] == []
    assert list((escape_stack.home / "processes").glob("*.json")) == []
    # (settled by recovery: which reason depends on whether a snapshot saw them run)
    assert [client.wait_status(job_id, timeout=30)["status"] for job_id in jobs.values()] == [
        "Terminated"
    ] * 5
