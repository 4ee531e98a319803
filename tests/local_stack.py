"""The local stack as a separate process (``python -m remote_batch_local``) and a client of its HTTP
API: one starter shared by the end-to-end tests (``tests/e2e/conftest.py``) and the benchmarks that run
the stack (``benchmarks/log_volume.py``), with a sampler of the stack's memory and snapshot age."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
import requests

REPO_ROOT = Path(__file__).resolve().parents[1]
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


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


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
        created: dict[str, Any] = self.body(response)
        return created

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
    """``python -m remote_batch_local`` in a subprocess, with its home, port and console log."""

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
                [sys.executable, "-m", "remote_batch_local"],
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


class StackSampler:
    """Samples a stack's RSS (bytes, psutil) and its snapshot's age (seconds since
    ``state/snapshot.json``'s ``takenAtMs``) every 0.1 s on a thread, from construction to ``stop``:
    ``baseline`` and ``peak`` RSS, ``max_lag`` seconds."""

    def __init__(self, stack: LocalStackProcess) -> None:
        assert stack.process is not None
        self._process = psutil.Process(stack.process.pid)
        self._meta = stack.home / "state" / "snapshot.json"
        self.baseline = self._process.memory_info().rss
        self.peak = self.baseline
        self.max_lag = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            self.peak = max(self.peak, self._process.memory_info().rss)
            try:
                taken = json.loads(self._meta.read_text())["takenAtMs"] / 1000
            except (OSError, ValueError, KeyError):
                continue
            self.max_lag = max(self.max_lag, time.time() - taken)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
