"""How fast does the local stack map ``item + 1`` over 2,000 items, and what does a child cost?

Starts the local stack in a child process with a fresh home (its DynamoDB requests counted by a hook
on botocore's client, written to ``bench-requests.json`` in the home), then

1. times ``--singles`` Single jobs (``{"code": "1"}``) one after the other, each from ``POST /jobs`` to
   its final status (polled every 50 ms): the round trip of one job;
2. submits ``{"code": "item + 1", "arrayItems": [1, ..., N]}`` and times it to the parent's final
   status (polled every second), checks its result, and reads every child's start and end
   (``GET /jobs/{id}/children``).

It prints the array's wall time, the wall time and host vCPU-seconds per child, a child's mean
Running time, the Single round trip, and the DynamoDB requests the stack made per Single job and per
child (the api, batch_events and meter functions, all in the stack process).

Run by hand: ``python -m benchmarks.array_map [--items 2000] [--singles 5]`` (``make bench`` runs
every benchmark).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import requests

from benchmarks.journal_latency import start_served
from benchmarks.meter_scaling import _machine

COUNTS_FILE = "bench-requests.json"
FINAL = ("Succeeded", "Terminated")


def _serve(home: Path) -> None:
    """Run the local stack in this process (the child), counting every AWS request it makes."""
    import botocore.client

    from remote_batch_local import __main__ as local_main

    counts: Counter[str] = Counter()
    lock = threading.Lock()
    original = getattr(botocore.client.BaseClient, "_make_api_call")  # noqa: B009 - private, untyped

    def counted(client: Any, operation: str, params: Any) -> Any:
        with lock:
            counts[f"{client.meta.service_model.service_name}.{operation}"] += 1
        return original(client, operation, params)

    def write() -> None:
        while True:
            with lock:
                snapshot = dict(counts)
            partial = home / (COUNTS_FILE + ".tmp")
            partial.write_text(json.dumps(snapshot))
            partial.replace(home / COUNTS_FILE)
            time.sleep(0.25)

    home.mkdir(mode=0o700, parents=True, exist_ok=True)

    setattr(botocore.client.BaseClient, "_make_api_call", counted)  # noqa: B010 - private, untyped
    threading.Thread(target=write, name="bench-counts", daemon=True).start()
    sys.exit(local_main.main([]))


def _start(home: Path) -> tuple[Any, str, str]:
    return start_served(["benchmarks.array_map", "--serve", str(home)], home)


class Api:
    """The dev account's HTTP client."""

    def __init__(self, endpoint: str, token: str) -> None:
        self.endpoint = endpoint
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {token}"

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.session.request(method, self.endpoint + path, timeout=60, **kwargs)
        if response.status_code >= 400:
            raise RuntimeError(f"{method} {path} answered {response.status_code}: {response.text[:500]}")
        return response.json()

    def run(self, body: dict[str, Any], poll: float) -> tuple[dict[str, Any], float]:
        """Submit ``body`` and wait for its final status; returns the job and the seconds it took."""
        started = time.perf_counter()
        job = self.call("POST", "/jobs", json={**body, "notifications": "None"})
        while job["status"] not in FINAL:
            time.sleep(poll)
            job = self.call("GET", f"/jobs/{job['jobId']}")
        return job, time.perf_counter() - started


def _dynamodb(home: Path) -> int:
    counts = json.loads((home / COUNTS_FILE).read_text())
    return sum(n for name, n in counts.items() if name.startswith("dynamodb."))


def _settled_dynamodb(home: Path) -> int:
    """The DynamoDB request count once it stopped moving (the last events' writes landed)."""
    last = -1
    while (current := _dynamodb(home)) != last:
        last = current
        time.sleep(1.0)
    return current


def _children_running_seconds(api: Api, job_id: str) -> list[float]:
    seconds: list[float] = []
    token: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 100, **({"nextToken": token} if token else {})}
        page = api.call("GET", f"/jobs/{job_id}/children", params=params)
        for child in page["jobs"]:
            if child["startedAt"] and child["completedAt"]:
                started = datetime.fromisoformat(child["startedAt"])
                seconds.append((datetime.fromisoformat(child["completedAt"]) - started).total_seconds())
        token = page.get("nextToken")
        if not token:
            return seconds


def measure(items: int, singles: int) -> dict[str, Any]:
    """Run both measurements against one fresh local stack; returns the figures."""
    with tempfile.TemporaryDirectory() as root:
        home = Path(root) / "home"
        process, endpoint, token = _start(home)
        try:
            api = Api(endpoint, token)
            api.run({"code": "1"}, 0.05)  # warm-up: first imports in the stack and the worker
            before = _settled_dynamodb(home)
            round_trips = [api.run({"code": "1"}, 0.05)[1] for _ in range(singles)]
            single_requests = (_settled_dynamodb(home) - before) / singles
            before = _settled_dynamodb(home)
            job, wall = api.run({"code": "item + 1", "arrayItems": list(range(1, items + 1))}, 1.0)
            child_requests = (_settled_dynamodb(home) - before) / items
            result = api.call("GET", f"/jobs/{job['jobId']}/result")
            running = _children_running_seconds(api, job["jobId"])
        finally:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    expected = [i + 1 for i in range(1, items + 1)]
    if job["status"] != "Succeeded" or result.get("result") != expected:
        raise RuntimeError(f"the array ended {job['status']}: {job.get('statusReason')}")
    vcpus = len(os.sched_getaffinity(0))
    return {
        "items": items,
        "wall": wall,
        "per_child": wall / items,
        "vcpu_seconds_per_child": wall * vcpus / items,
        "vcpus": vcpus,
        "child_running_mean": statistics.mean(running),
        "single_median": statistics.median(round_trips),
        "single_requests": single_requests,
        "child_requests": child_requests,
    }


def main(argv: Sequence[str] | None = None) -> None:
    """Measure and print a Markdown table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.array_map", description=__doc__)
    parser.add_argument("--items", type=int, default=2_000, help="items of the map")
    parser.add_argument("--singles", type=int, default=5, help="Single jobs timed")
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        _serve(args.serve)
        return
    figures = measure(args.items, args.singles)
    print(f"\nmachine: {_machine()}\n")
    print("| measure | value |\n|---|---:|")
    rows = [
        (f"`item + 1` over {figures['items']:,} items: wall time", f"{figures['wall']:.1f} s"),
        ("wall time per child", f"{figures['per_child'] * 1000:.0f} ms"),
        (
            f"host vCPU-seconds per child ({figures['vcpus']} vCPUs)",
            f"{figures['vcpu_seconds_per_child']:.2f} s",
        ),
        ("a child's Running time (mean)", f"{figures['child_running_mean']:.2f} s"),
        ("one Single job's round trip (median)", f"{figures['single_median']:.2f} s"),
        ("DynamoDB requests per Single job", f"{figures['single_requests']:.1f}"),
        ("DynamoDB requests per child", f"{figures['child_requests']:.1f}"),
    ]
    for name, value in rows:
        print(f"| {name} | {value} |")


if __name__ == "__main__":
    main()
