"""What does the write-ahead journal cost a submit on the local stack?

Starts the local stack twice, each in a child process with a fresh home: once as it runs
(``--journal on``: every acknowledged moto write is journaled and fsync-ed before it is answered)
and once with the journaling middleware never enabled (``--journal off``: the stack before the
journal, which loses what was acknowledged since the last snapshot at a crash). Against each it
times ``POST /jobs`` (a job of ``1``), first one client at a time, then ``--threads`` clients at
once, and prints the median and 90th percentile latency of each.

Run by hand: ``python -m benchmarks.journal_latency [--submits 200] [--threads 8]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import requests

REPO_ROOT = Path(__file__).resolve().parents[1]
READY_SECONDS = 60


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(journal: bool) -> None:
    """Run the local stack in this process (the child), with or without the journal."""
    from remote_batch_local import __main__ as local_main
    from remote_batch_local.journal import JournalingApp

    if not journal:
        JournalingApp.enable = lambda self: None  # type: ignore[method-assign]
    sys.exit(local_main.main([]))


def start_served(arguments: Sequence[str], home: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    """Run ``python -m <arguments>`` (a module serving the local stack, in its own session) with
    ``home`` as its ``REMOTE_BATCH_HOME`` on a free port and none of the caller's AWS, remote-batch or
    moto variables; wait (``READY_SECONDS``) for ``/health``. Returns the process, the endpoint and
    dev's token; ``RuntimeError`` (the process killed) when it does not come up."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "REMOTE_BATCH_", "MOTO_"))}
    env.update({"REMOTE_BATCH_HOME": str(home), "REMOTE_BATCH_PORT": str(port), "PYTHONPATH": str(REPO_ROOT)})
    process = subprocess.Popen(
        [sys.executable, "-m", *arguments],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        try:
            if requests.get(endpoint + "/health", timeout=2).status_code == 200:
                token = json.loads((home / "credentials.json").read_text())["tokens"]["dev"]
                return process, endpoint, token
        except requests.ConnectionError:
            pass
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)
    raise RuntimeError("the local stack did not start")


def _start(journal: bool, home: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    return start_served(["benchmarks.journal_latency", "--serve", "on" if journal else "off"], home)


def _submit(endpoint: str, token: str) -> float:
    started = time.perf_counter()
    response = requests.post(
        endpoint + "/jobs",
        json={"code": "1", "notifications": "None"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=30,
    )
    elapsed = time.perf_counter() - started
    if response.status_code != 202:
        raise RuntimeError(f"submit answered {response.status_code}: {response.text}")
    return elapsed


def _measure(endpoint: str, token: str, submits: int, threads: int) -> tuple[list[float], list[float]]:
    for _ in range(5):  # warm-up: first imports, connections
        _submit(endpoint, token)
    sequential = [_submit(endpoint, token) for _ in range(submits)]
    concurrent: list[float] = []
    lock = threading.Lock()

    def client() -> None:
        for _ in range(submits // threads):
            elapsed = _submit(endpoint, token)
            with lock:
                concurrent.append(elapsed)

    workers = [threading.Thread(target=client) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sequential, concurrent


def _ms(values: Sequence[float], quantile: float) -> str:
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(quantile * len(ordered)))] * 1000:.1f} ms"


def main(argv: Sequence[str] | None = None) -> None:
    """Measure both variants and print one table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--submits", type=int, default=200)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--serve", choices=("on", "off"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        _serve(args.serve == "on")
        return
    machine = platform.processor() or platform.machine()
    load = os.getloadavg()[0]
    print(f"{machine}, {os.cpu_count()} cores, Python {platform.python_version()}, load average {load:.1f}")
    print(
        "| journal | submit median | submit p90 | submit max "
        "| concurrent median | concurrent p90 | concurrent max |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for journal in (False, True):
        with tempfile.TemporaryDirectory() as home:
            process, endpoint, token = _start(journal, Path(home) / "home")
            try:
                sequential, concurrent = _measure(endpoint, token, args.submits, args.threads)
            finally:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        print(
            f"| {'on' if journal else 'off'} | {statistics.median(sequential) * 1000:.1f} ms "
            f"| {_ms(sequential, 0.9)} | {_ms(sequential, 1.0)} "
            f"| {statistics.median(concurrent) * 1000:.1f} ms "
            f"| {_ms(concurrent, 0.9)} | {_ms(concurrent, 1.0)} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
