"""Issue 22 item 7 on a real filesystem: the local stack's home on a small tmpfs, filled to the last byte.

Needs ``mount`` (root, or a user namespace that allows it): skipped elsewhere. The same refusals on every
write path are tested without a mount in ``tests/integration/test_local_full_disk.py``.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.local_stack import LocalStackProcess, free_port, wait_for

DISK_BYTES = 48 * 1024 * 1024
RESERVE_BYTES = 8 * 1024 * 1024
SUBMITS = 40


@pytest.fixture
def small_home(tmp_path: Path) -> Iterator[Path]:
    """A ``DISK_BYTES`` tmpfs mounted as the stack's home (its console logs stay outside it)."""
    home = tmp_path / "home"
    home.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES},mode=0700", "tmpfs", str(home)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield home
    finally:
        subprocess.run(["umount", "--lazy", str(home)], check=False)


def _fill(path: Path) -> None:
    """Write ``path`` until the filesystem has no byte left."""
    chunk = b"\0" * (1024 * 1024)
    with path.open("wb", buffering=0) as filler:
        for _ in range(DISK_BYTES // len(chunk) + 2):
            try:
                filler.write(chunk)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                return
    pytest.fail(f"{path} was written past the filesystem's size")


def _health(stack: LocalStackProcess, status: int) -> dict[str, Any] | None:
    """``GET /health``'s body when it answers ``status``, else None."""
    response = requests.get(stack.endpoint + "/health", timeout=5)
    body: dict[str, Any] = response.json()
    return body if response.status_code == status else None


def test_a_full_home_answers_503_writes_nothing_and_resumes_when_space_returns(small_home: Path) -> None:
    stack = LocalStackProcess(
        small_home, free_port(), {"REMOTE_BATCH_DISK_RESERVE_BYTES": str(RESERVE_BYTES)}
    )
    stack.start()
    try:
        dev = stack.client("dev")
        kept = dev.submit({"code": "6 * 7"})
        assert dev.wait_status(kept["jobId"])["status"] == "Succeeded"

        # When the home's filesystem fills to the last byte
        _fill(small_home / "filler")

        # Then /health says so, every submit is refused with 503 and the reason, and nothing is written
        health = wait_for(lambda: _health(stack, 503), 5, "/health to answer 503")
        assert health["error"]["code"] == "ServiceUnavailable"
        assert health["error"]["message"].startswith("The local stack's state disk is full")
        answers = [dev.post("/jobs", json={"code": f"{n} * 2"}) for n in range(SUBMITS)]
        assert {r.status_code for r in answers} == {503}
        assert {r.json()["error"]["code"] for r in answers} == {"ServiceUnavailable"}
        assert {r.headers["Retry-After"] for r in answers} == {"5"}
        listed = dev.get("/jobs")  # reads still work
        assert listed.status_code == 200
        assert [job["jobId"] for job in listed.json()["jobs"]] == [kept["jobId"]]

        # When space returns, the stack takes writes again by itself
        (small_home / "filler").unlink()
        assert wait_for(lambda: _health(stack, 200), 5, "/health to answer 200") == {"status": "ok"}
        later = dev.submit({"code": "6 * 7"})
        assert dev.wait_status(later["jobId"])["status"] == "Succeeded"

        # And what was acknowledged survives a restart
        stack.restart()
        jobs = {job["jobId"]: job["status"] for job in dev.get("/jobs").json()["jobs"]}
        assert jobs == {kept["jobId"]: "Succeeded", later["jobId"]: "Succeeded"}
    finally:
        if stack.process is not None and stack.process.poll() is None:
            assert stack.stop() == 0
