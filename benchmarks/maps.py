"""Issue 26's table in one run: a map against a single job, its credits, DynamoDB requests per item,
the 200-job burst and a 10,000-item map.

Each row is a ratio or a figure measured in this run, beside the issue's target:

1. **Map vs round trip** (a local stack in a child, fresh home, 2 vCPUs: ``benchmarks.performance``'s
   ``_Local``): the median of 5 ``2 + 2`` round trips (POST → Succeeded → result), then
   ``{"code": "item + 1", "arrayItems": [0, ..., 999]}`` from its POST to its result (checked), polled
   every second; the ratio of the two. Target ≤ 20×.
2. **The map's credits** (the same array): its ``creditsSpent`` against today's rule, every item charged
   ``credits.running_cost`` of its own Running time (the 60-second minimum per item), summed from
   ``GET /jobs/{id}/children``. Target ≤ 20 credits.
3. **DynamoDB requests per item in the cloud path** (the handlers in-process on moto,
   ``tests.integration.conftest.moto_stack``, every botocore call counted by
   ``benchmarks.capacity.RequestRecorder`` as ``tests/integration/test_request_counts.py`` does): an
   array of 100 items submitted through the api handler, each child's Batch events (STARTING, RUNNING,
   SUCCEEDED, as the tree's EventBridge rule delivers them) with the child's ``result.json`` written as
   its worker writes it, one meter tick while they run, the settlement of the last, the parent's result
   read: all its DynamoDB requests / 100. Target ≤ 3. This drives AWS Batch's array model (one
   container per item) and refuses to measure (``RuntimeError``) an array submitted on fewer containers
   than items, whose life is the containers' events and their item reports.
4. **The burst** (``benchmarks.performance.run_burst`` on the stack of 1): 200 concurrent ``2 + 2``
   submits (``notifications: "None"``), wall time until every one is final, submit p99. Targets ≤ 30 s
   wall, p99 ≤ 1 s.
5. **A 10,000-item map** (``--all`` only, a fresh stack): ``item + 1`` over 10,000 items to its result,
   bounded: past ``--big-timeout`` seconds (default 600) it is aborted and the row says how many items
   had finished. Target < 5 minutes.

The maps pass no ``parallelism``: its default is what the quota allows, on the server's contract with
or without it. A map that does not finish within its timeout is aborted (``POST /jobs/{id}/abort``) and
reported as timed out with its children's counts, never waited on without end.

Results: ``benchmarks/results/maps.json`` and ``maps.md``. Run: ``make bench`` (``ALL=1`` adds the
10,000-item map) or ``python -m benchmarks.maps [--items 1000] [--burst 200] [--all]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from benchmarks.performance import FINAL_STATUSES, REPO_ROOT, RESULTS_DIR, ROUND_TRIPS, _Local, run_burst

REQUEST_ITEMS = 100
MAP_ITEMS = 1_000
BIG_ITEMS = 10_000
MAP_TIMEOUT = 1_800.0
BIG_TIMEOUT = 600.0
BURST = 200

TARGETS = {
    "map": "≤ 20× one `2 + 2` round trip",
    "credits": "≤ 20 credits (today's rule: 1 per item)",
    "requests": "≤ 3 per item",
    "burst": "≤ 30 s wall, p99 submit ≤ 1 s",
    "big": "< 5 minutes",
}


def _load() -> str:
    """``uptime``'s load averages (1, 5, 15 min): the shared machine's load beside each figure."""
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


# -- the local stack -------------------------------------------------------------------------------------
def _children(stack: _Local, job_id: str) -> list[dict[str, Any]]:
    children: list[dict[str, Any]] = []
    token: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 100, **({"nextToken": token} if token else {})}
        page = stack.call("GET", f"/jobs/{job_id}/children", params=params).json()
        children += page["jobs"]
        token = page.get("nextToken")
        if not token:
            return children


def _today_rule(children: list[dict[str, Any]]) -> Decimal:
    """Every child charged for its own Running time with the 60-second minimum (``credits.running_cost``)
    at its machine class's ``credits_per_hour``."""
    from functions.domain.credits import running_cost
    from functions.domain.machine_classes import machine_class

    total = Decimal(0)
    for child in children:
        if child.get("startedAt") and child.get("completedAt"):
            started = datetime.fromisoformat(child["startedAt"])
            running_ms = int((datetime.fromisoformat(child["completedAt"]) - started).total_seconds() * 1000)
            total += running_cost(running_ms, machine_class(child["machineClass"]).credits_per_hour)
    return total


def run_map(stack: _Local, items: int, timeout: float) -> dict[str, Any]:
    """``item + 1`` over ``range(items)`` from its POST to its result, or aborted past ``timeout`` s."""
    started = time.perf_counter()
    load = _load()
    response = stack.call(
        "POST", "/jobs", json={"code": "item + 1", "arrayItems": list(range(items)), "notifications": "None"}
    )
    if response.status_code != 202:
        raise RuntimeError(f"the map's POST answered {response.status_code}: {response.text[:500]}")
    job = response.json()
    while job["status"] not in FINAL_STATUSES and time.perf_counter() - started < timeout:
        time.sleep(1.0)
        job = stack.call("GET", f"/jobs/{job['jobId']}").json()
    figures: dict[str, Any] = {"items": items, "load": load, "timeoutSeconds": timeout}
    if job["status"] not in FINAL_STATUSES:
        figures["childStatusCounts"] = job.get("childStatusCounts")
        stack.call("POST", f"/jobs/{job['jobId']}/abort")
        figures.update(timedOut=True, wallSeconds=time.perf_counter() - started)
        return figures
    result = stack.call("GET", f"/jobs/{job['jobId']}/result").json()
    wall = time.perf_counter() - started
    if job["status"] != "Succeeded" or result.get("result") != [i + 1 for i in range(items)]:
        raise RuntimeError(f"the map ended {job['status']}: {job.get('statusReason')}")
    children = _children(stack, job["jobId"])
    figures.update(
        timedOut=False,
        wallSeconds=wall,
        creditsSpent=str(job["creditsSpent"]),
        creditsTodayRule=str(_today_rule(children)),
        children=len(children),
    )
    return figures


def part_local(items: int, burst: int) -> dict[str, Any]:
    """Round trips, the map and its credits, then the burst, on one fresh local stack."""
    with tempfile.TemporaryDirectory(prefix="rb-bench-maps-") as home:
        stack = _Local(REPO_ROOT, Path(home))
        try:
            stack.round_trip("2 + 2")  # warm-up: first imports, first worker
            load = _load()
            trips = [stack.round_trip("2 + 2")[1] for _ in range(ROUND_TRIPS)]
            mapped = run_map(stack, items, MAP_TIMEOUT)
            burst_load = _load()
            bursted = run_burst(stack, burst)
        finally:
            stack.stop()
    trip = statistics.median(trips)
    mapped["roundTripSeconds"] = trip
    mapped["roundTripLoad"] = load
    mapped["ratio"] = None if mapped["timedOut"] else mapped["wallSeconds"] / trip
    bursted["load"] = burst_load
    return {"map": mapped, "burst": bursted}


def part_big(items: int, timeout: float) -> dict[str, Any]:
    """The big map alone on a fresh local stack, bounded by ``timeout`` seconds."""
    with tempfile.TemporaryDirectory(prefix="rb-bench-big-") as home:
        stack = _Local(REPO_ROOT, Path(home))
        try:
            stack.round_trip("2 + 2")  # warm-up
            return run_map(stack, items, timeout)
        finally:
            stack.stop()


# -- the cloud path on moto ------------------------------------------------------------------------------
def part_requests(items: int) -> dict[str, Any]:
    """DynamoDB requests of one array's life per item, the handlers in-process on moto."""
    from benchmarks.capacity import RequestRecorder
    from functions.domain.machine_classes import GeoZone
    from functions.domain.quotas import Family, QuotaKey, QuotaLimits
    from remote_batch_local.bus import matches_rule
    from tests.events import array_child_lifecycle
    from tests.integration.conftest import moto_stack

    load = _load()
    with moto_stack() as stack:
        # A benchmark setting: a Basic quota that admits the whole array at once.
        limits = QuotaLimits({QuotaKey(Family.BASIC, zone): 10_000 for zone in GeoZone})
        stack.services.store.put_quota_limits("dev", limits)
        with RequestRecorder(units=False) as recorder:
            status, job = stack.api(
                "POST",
                "/jobs",
                body={"code": "item + 1", "arrayItems": list(range(items)), "notifications": "None"},
            )
            if status != 202:
                raise RuntimeError(f"the array's POST answered {status}: {job}")
            parent = stack.services.store.get_job(job["jobId"])
            assert parent is not None
            created = int(stack.clock().timestamp() * 1000)
            if len(parent.array_spans) != 1:
                raise RuntimeError(f"{items} items ran as {len(parent.array_spans)} spans: use fewer items")
            [submission] = stack.batch[parent.geo_zone].submissions
            if submission.array_size != items:
                # Containers that take many items end with per-item reports the worker writes: the
                # events of one container per item, as below, would not be that array's life.
                raise RuntimeError(
                    f"the array's {items} items run on {submission.array_size} containers: this part drives"
                    " one AWS Batch child per item and needs the containers' item reports to measure that"
                )
            events: list[list[dict[str, Any]]] = [
                array_child_lifecycle(
                    parent.job_id,
                    parent.array_spans[0],
                    index,
                    created_at=created,
                    started_at=created + 5_000,
                    stopped_at=created + 6_000,
                )
                for index in range(items)
            ]
            zone_services = stack.services.zones[parent.geo_zone]
            for index, life in enumerate(events):
                for event in life[:4]:  # PENDING, RUNNABLE, STARTING, RUNNING
                    if matches_rule(event):
                        stack.deliver(event)
                if index == items // 2:
                    stack.tick()
            stack.clock.advance(10)
            for index, life in enumerate(events):
                body = json.dumps({"result": index + 1, "resultRepr": repr(index + 1)}).encode()
                zone_services.blobs.put(
                    f"outputs/{parent.job_id}/{index}/result.json", body, "application/json"
                )
                stack.deliver(life[4])
            status, result = stack.api("GET", f"/jobs/{parent.job_id}/result")
            if status != 200 or result.get("result") != [i + 1 for i in range(items)]:
                raise RuntimeError(f"the array's result answered {status}: {str(result)[:300]}")
    counts = Counter(
        {k.split(":", 1)[1]: v for k, v in recorder.usage.requests.items() if k.startswith("dynamodb:")}
    )
    total = sum(counts.values())
    return {"items": items, "requests": dict(counts), "total": total, "perItem": total / items, "load": load}


# -- the table -------------------------------------------------------------------------------------------
def rows(figures: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(what, target, figure with the load beside it) for each part measured."""
    table: list[tuple[str, str, str]] = []
    local = figures.get("local")
    if local:
        m = local["map"]
        name = f"local map of {m['items']:,} `item + 1` vs one `2 + 2` round trip"
        if m["timedOut"]:
            value = (
                f"> {m['wallSeconds'] / m['roundTripSeconds']:.0f}×: aborted after {m['wallSeconds']:.0f} s"
                f" (children {m['childStatusCounts']}) vs {m['roundTripSeconds']:.2f} s"
            )
        else:
            value = f"{m['ratio']:.0f}× ({m['wallSeconds']:.1f} s vs {m['roundTripSeconds']:.2f} s)"
        table.append((name, TARGETS["map"], f"{value}; load {m['load']}"))
        if not m["timedOut"]:
            table.append(
                (
                    "its credits vs today's rule (60-s minimum per item)",
                    TARGETS["credits"],
                    f"{Decimal(m['creditsSpent'])} vs {Decimal(m['creditsTodayRule'])}",
                )
            )
    requests = figures.get("requests")
    if requests:
        ops = ", ".join(f"{k} {v}" for k, v in sorted(requests["requests"].items()))
        table.append(
            (
                f"DynamoDB requests per item, cloud path (array of {requests['items']} on moto)",
                TARGETS["requests"],
                f"{requests['perItem']:.1f} ({requests['total']}: {ops}); load {requests['load']}",
            )
        )
    if local:
        b = local["burst"]
        table.append(
            (
                f"{b['jobs']} concurrent `2 + 2` singles on the local stack",
                TARGETS["burst"],
                f"{b['wallSeconds']:.1f} s wall, p50 {b['submitP50Seconds']:.2f} s,"
                f" p99 {b['submitP99Seconds']:.2f} s, {b['serverErrors']} server errors,"
                f" {b['unfinished']} unfinished; load {b['load']}",
            )
        )
    big = figures.get("big")
    if big:
        if big["timedOut"]:
            counts = big["childStatusCounts"]
            value = f"did not finish in {big['timeoutSeconds']:.0f} s: aborted, children {counts}"
        else:
            value = f"{big['wallSeconds']:.0f} s"
        table.append(
            (
                f"local map of {big['items']:,} items to its result",
                TARGETS["big"],
                f"{value}; load {big['load']}",
            )
        )
    return table


def markdown(figures: dict[str, Any]) -> str:
    lines = [
        f"# issue 26 benchmarks: {figures['startedAt']} at {figures['commit']}",
        "",
        "| what | target | measured (load average 1/5/15 min at its start) |",
        "|---|---|---|",
    ]
    lines += [f"| {what} | {target} | {value} |" for what, target, value in rows(figures)]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    """Run the parts, print the table, write ``maps.json`` and ``maps.md`` under ``--out``."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.maps", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--items", type=int, default=MAP_ITEMS, help="items of the map timed against a round trip"
    )
    parser.add_argument("--request-items", type=int, default=REQUEST_ITEMS, help="items of the array on moto")
    parser.add_argument("--burst", type=int, default=BURST)
    parser.add_argument("--all", action="store_true", help="also the 10,000-item map")
    parser.add_argument("--big-items", type=int, default=BIG_ITEMS)
    parser.add_argument(
        "--big-timeout", type=float, default=BIG_TIMEOUT, help="seconds before the big map is aborted"
    )
    parser.add_argument("--parts", default="requests,local", help="of requests, local (big with --all)")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    commit = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    figures: dict[str, Any] = {"startedAt": datetime.now(UTC).isoformat(timespec="seconds"), "commit": commit}
    parts = [p for p in args.parts.split(",") if p]
    args.out.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        """Every part's figures as soon as it ends: a later part that fails loses nothing measured."""
        (args.out / "maps.json").write_text(json.dumps(figures, indent=2) + "\n")

    if "requests" in parts:
        print("== DynamoDB requests per item (moto in-process)", flush=True)
        # The handlers' EMF metrics and logs go to stdout: the figures come back in the table.
        with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            figures["requests"] = part_requests(args.request_items)
        save()
    if "local" in parts:
        print(f"== local stack: {args.items}-item map, round trips, {args.burst}-job burst", flush=True)
        figures["local"] = part_local(args.items, args.burst)
        save()
    if args.all:
        print(f"== local stack: {args.big_items}-item map (at most {args.big_timeout:.0f} s)", flush=True)
        figures["big"] = part_big(args.big_items, args.big_timeout)
    figures["finishedAt"] = datetime.now(UTC).isoformat(timespec="seconds")
    save()
    summary = markdown(figures)
    (args.out / "maps.md").write_text(summary)
    print(summary, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
