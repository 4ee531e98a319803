"""The local stack as a separate process (``python -m remote_batch.local``) and clients of its HTTP API.

One stack per session, in a temporary ``REMOTE_BATCH_HOME`` on a free port, with a 1-second meter
and snapshot interval. Tests talk to it only over HTTP (and read the outbox, as a person would).
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
import requests

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_SECONDS = 60
STOP_SECONDS = 30
FINAL = ("Succeeded", "Terminated")

T = TypeVar("T")


def wait_for(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.2) -> T:
    """Poll ``check`` until it returns something truthy; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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


@dataclass
class Client:
    """``requests`` with one account's token; JSON numbers with a fraction parse as ``Decimal``."""

    endpoint: str
    token: str | None

    def request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = dict(kwargs.pop("headers", {}) or {})
        if self.token is not None:
            headers.setdefault("Authorization", f"Bearer {self.token}")
        return requests.request(method, self.endpoint + path, headers=headers, timeout=30, **kwargs)

    def get(self, path: str, **kwargs: Any) -> requests.Response:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, **kwargs: Any) -> requests.Response:
        return self.request("POST", path, **kwargs)

    @staticmethod
    def body(response: requests.Response) -> Any:
        return json.loads(response.text, parse_float=Decimal)

    # -- job helpers ---------------------------------------------------------------------------------
    def submit(self, body: dict[str, Any]) -> dict[str, Any]:
        response = self.post("/jobs", json=body)
        assert response.status_code == 202, response.text
        submitted: dict[str, Any] = self.body(response)
        return submitted

    def job(self, job_id: str) -> dict[str, Any]:
        response = self.get(f"/jobs/{job_id}")
        assert response.status_code == 200, response.text
        job: dict[str, Any] = self.body(response)
        return job

    def wait_status(
        self, job_id: str, statuses: tuple[str, ...] = FINAL, timeout: float = 30
    ) -> dict[str, Any]:
        def reached() -> dict[str, Any] | None:
            job = self.job(job_id)
            return job if job["status"] in statuses else None

        return wait_for(reached, timeout, f"job {job_id} to be {'/'.join(statuses)}")

    def balance(self) -> Decimal:
        response = self.get("/account")
        assert response.status_code == 200, response.text
        return Decimal(str(self.body(response)["creditBalance"]))


class LocalStackProcess:
    """``python -m remote_batch.local`` in a subprocess, with its home, port and console log."""

    def __init__(
        self, home: Path, port: int, extra_env: dict[str, str] | None = None, new_session: bool = False
    ) -> None:
        self.home = home
        self.port = port
        self.extra_env = dict(extra_env or {})
        # In its own session (and process group), so ``kill_group`` can take down it and its jobs.
        self.new_session = new_session
        self.endpoint = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen[bytes] | None = None
        self.tokens: dict[str, str] = {}
        self.starts = 0

    @property
    def stderr_path(self) -> Path:
        return self.home.parent / f"stack-{self.starts}.err"

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "REMOTE_BATCH_", "MOTO_"))}
        env.update(
            {
                "REMOTE_BATCH_HOME": str(self.home),
                "REMOTE_BATCH_PORT": str(self.port),
                "REMOTE_BATCH_METER_INTERVAL": "1",
                "REMOTE_BATCH_SNAPSHOT_INTERVAL": "1",
                "PYTHONUNBUFFERED": "1",
                **self.extra_env,
            }
        )
        self.starts += 1
        with (
            self.stderr_path.open("wb") as err,
            (self.home.parent / f"stack-{self.starts}.out").open("wb") as out,
        ):
            self.process = subprocess.Popen(
                [sys.executable, "-m", "remote_batch.local"],
                cwd=REPO_ROOT,
                env=env,
                stdout=out,
                stderr=err,
                start_new_session=self.new_session,
            )
        wait_for(self._healthy, READY_SECONDS, "the local stack's /health")
        credentials = json.loads((self.home / "credentials.json").read_text())
        assert credentials["endpoint"] == self.endpoint
        self.tokens = credentials["tokens"]

    def _healthy(self) -> bool:
        assert self.process is not None
        if self.process.poll() is not None:
            pytest.fail(f"local stack exited with {self.process.returncode}:\n{self.stderr_path.read_text()}")
        try:
            response = requests.get(self.endpoint + "/health", timeout=2)
        except requests.ConnectionError:
            return False
        return response.status_code == 200 and response.json() == {"status": "ok"}

    def stop(self, sig: signal.Signals = signal.SIGINT) -> int:
        """Signal the stack and return its exit code (fails the test when it does not exit in time)."""
        assert self.process is not None
        self.process.send_signal(sig)
        try:
            return self.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            pytest.fail(f"local stack did not exit within {STOP_SECONDS} s of {sig.name}")

    def kill_group(self) -> None:
        """``kill -9`` of the stack's whole process group (its job workers included): a crash."""
        assert self.process is not None and self.new_session
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def restart(self) -> None:
        assert self.stop() == 0
        self.start()

    def moto_endpoint(self) -> str:
        """The in-process moto server of the current run (from the stack's console log)."""
        match = re.search(r"moto started endpoint=(\S+)", self.stderr_path.read_text())
        assert match, "the stack's log names no moto endpoint"
        return match.group(1)

    def moto_credentials(self) -> dict[str, str]:
        """The current run's moto endpoint and the stack's own IAM keys (``moto-credentials.json``)."""
        return dict(json.loads((self.home / "moto-credentials.json").read_text()))

    def client(self, account: str) -> Client:
        return Client(self.endpoint, self.tokens[account])

    def outbox(self, job_id: str) -> list[dict[str, Any]]:
        path = self.home / "outbox.jsonl"
        if not path.exists():
            return []
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return [line for line in lines if line["jobId"] == job_id]


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
