"""Does the local stack stay bounded while one job prints a gigabyte? (issue 10, "Done when")

Starts ``python -m remote_batch.local`` in a temporary home, runs a warm-up job (so the Lambdas and
clients are loaded before the baseline is taken), then a Basic1x8 ``code`` job writing ``--megabytes``
MB of 100-byte lines to stdout, 1 MB at a time. While it runs, every 0.1 s it samples the stack
process's RSS (psutil; the job's own processes are not the stack's) and the age of
``state/snapshot.json`` (the snapshot lag). At the end it prints the stack's peak RSS over its
baseline, the largest snapshot lag, the job's status, ``statusReason``, ``creditsSpent`` and
running time, and the bytes in the log store.

With the default 1 GiB log limit of the Basic classes, a 1,100 MB job is ended at the limit with
``Log limit of 1 GiB exceeded``; ``--megabytes 1000`` stays just under it and succeeds.

Run by hand: ``python -m benchmarks.log_volume [--megabytes 1100] [--log-limit BYTES]``.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
import requests

REPO_ROOT = Path(__file__).resolve().parents[1]
MIB = 1024 * 1024
FINAL = ("Succeeded", "Terminated")

PRINTER = """
import sys
block = ("x" * 99 + "\\n") * 10_000
for i in range({blocks}):
    sys.stdout.write(block)
print("done")
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Stack:
    def __init__(self, home: Path, extra_env: dict[str, str]) -> None:
        self.home = home
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "REMOTE_BATCH_", "MOTO_"))}
        env.update(
            {
                "REMOTE_BATCH_HOME": str(home),
                "REMOTE_BATCH_PORT": str(self.port),
                "REMOTE_BATCH_SNAPSHOT_INTERVAL": "5",
                **extra_env,
            }
        )
        self._log = (home.parent / "stack.err").open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "remote_batch.local"],
            cwd=REPO_ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if requests.get(self.endpoint + "/health", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            if self.process.poll() is not None:
                raise SystemExit(f"the stack exited with {self.process.returncode}")
            time.sleep(0.2)
        token = json.loads((home / "credentials.json").read_text())["tokens"]["dev"]
        self.headers = {"Authorization": f"Bearer {token}"}

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = requests.request(method, self.endpoint + path, headers=self.headers, timeout=60, **kwargs)
        response.raise_for_status()
        return response.json()

    def run(self, code: str, timeout: float) -> dict[str, Any]:
        job_id = self.call("POST", "/jobs", json={"code": code})["jobId"]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            job = self.call("GET", f"/jobs/{job_id}")
            if job["status"] in FINAL:
                return dict(job)
            time.sleep(0.5)
        raise SystemExit(f"job {job_id} not final after {timeout} s")

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        self.process.wait(60)
        self._log.close()


class _Sampler:
    def __init__(self, pid: int, meta: Path) -> None:
        self._process = psutil.Process(pid)
        self._meta = meta
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


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=1100, help="MB the job prints (default 1100)")
    parser.add_argument("--log-limit", type=int, default=None, help="REMOTE_BATCH_LOG_LIMIT_BYTES")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for the job")
    args = parser.parse_args(argv)
    extra = {} if args.log_limit is None else {"REMOTE_BATCH_LOG_LIMIT_BYTES": str(args.log_limit)}
    with tempfile.TemporaryDirectory(prefix="log-volume-") as tmp:
        stack = _Stack(Path(tmp) / "home", extra)
        try:
            stack.run("print('warm')", 60)
            sampler = _Sampler(stack.process.pid, stack.home / "state" / "snapshot.json")
            started = time.monotonic()
            job = stack.run(PRINTER.format(blocks=args.megabytes), args.timeout)
            wall = time.monotonic() - started
            sampler.stop()
            stored = sum(p.stat().st_size for p in (stack.home / "logs").glob("*.log"))
            print(f"job printed (asked)   {args.megabytes} MB in 100-byte lines")
            print(f"status                {job['status']}")
            print(f"statusReason          {job['statusReason']}")
            print(f"creditsSpent          {job['creditsSpent']}")
            print(f"startedAt..completed  {job['startedAt']} .. {job['completedAt']}")
            print(f"wall time to final    {wall:.1f} s")
            print(f"stack RSS baseline    {sampler.baseline / MIB:.0f} MiB")
            print(
                f"stack RSS peak        {sampler.peak / MIB:.0f} MiB "
                f"(+{(sampler.peak - sampler.baseline) / MIB:.0f})"
            )
            print(f"max snapshot lag      {sampler.max_lag:.1f} s (interval 5 s)")
            print(f"log store on disk     {stored / MIB:.0f} MiB")
        finally:
            stack.stop()


if __name__ == "__main__":
    main()
