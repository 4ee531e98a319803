"""The local stack as a separate process (``python -m remote_batch_local``) and clients of its HTTP API.

One stack per session, in a temporary ``REMOTE_BATCH_HOME`` on a free port, with a 1-second meter
and snapshot interval. Tests talk to it only over HTTP (and read the outbox, as a person would).
"""

from __future__ import annotations

from collections.abc import Iterator

import psutil
import pytest

from tests.local_stack import (
    FINAL,
    READY_SECONDS,
    REPO_ROOT,
    STOP_SECONDS,
    Client,
    LocalStackProcess,
    free_port,
    wait_for,
)

__all__ = [
    "FINAL",
    "READY_SECONDS",
    "REPO_ROOT",
    "STOP_SECONDS",
    "Client",
    "LocalStackProcess",
    "_free_port",
    "wait_for",
    "worker_processes",
]

_free_port = free_port


def worker_processes(job_id: str) -> list[psutil.Process]:
    """The ``python -m worker`` processes running the job (by command line or environment)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        try:
            cmdline = " ".join(process.info["cmdline"] or [])
            if "worker" not in cmdline:
                continue
            if job_id in cmdline or process.environ().get("REMOTE_BATCH_JOB_ID") == job_id:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackProcess]:
    """The running local stack; stopped with SIGINT at the end, which must exit 0 within 30 s."""
    root = tmp_path_factory.mktemp("local-stack")
    process = LocalStackProcess(root / "home", _free_port())
    process.start()
    yield process
    assert process.stop() == 0


@pytest.fixture(scope="module")
def duplicating_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackProcess]:
    """A second local stack whose bus delivers every Batch event twice (``REMOTE_BATCH_DUPLICATE_EVENTS=1``),
    as EventBridge may; stopped with SIGINT at the end of the module."""
    root = tmp_path_factory.mktemp("duplicating-stack")
    process = LocalStackProcess(root / "home", _free_port(), {"REMOTE_BATCH_DUPLICATE_EVENTS": "1"})
    process.start()
    yield process
    assert process.stop() == 0


@pytest.fixture
def dev(stack: LocalStackProcess) -> Client:
    """The ``dev`` account's client."""
    return stack.client("dev")


@pytest.fixture
def admin(stack: LocalStackProcess) -> Client:
    """The ``admin`` account's client."""
    return stack.client("admin")
