"""Does a meter tick cost more for an array with 5,000 finished children than for one with none?

The meter reads Starting/Running jobs from the sparse ``metered`` index, array children included,
and an array's reading is its ``creditsSettled`` (what its finished children were charged) plus
what its running children have spent so far (``functions.domain.metering.read_array_meter``): so a
tick's DynamoDB requests should grow with running children, not with finished ones. This benchmark
loads, in two regions of one in-process moto (``mock_aws``), an array with 5,000 Succeeded and 100
Running children, and one with 100 Running children and none finished, ticks the meter over both
in turn and counts what each tick asks of DynamoDB (calls per operation, items the queries return).

Run by hand: ``python -m benchmarks.array_meter [--finished 5000] [--running 100] [--ticks 10]``
(``make bench`` runs every benchmark).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from benchmarks.meter_scaling import (
    TICK_STEP,
    RequestLog,
    _bulk_load,
    _machine,
    _offline_environment,
    tables,
)

REGIONS = ("us-east-1", "us-west-2")
# Basic1x8 is 1 credit a minute: a finished child that ran under 60 s was charged the minimum, 1.
CHILD_CHARGE = Decimal(1)


def _parent(size: int, finished: int, running: int, t0: datetime) -> Any:
    """A Running ``Array`` job of ``size`` items: ``finished`` children settled, ``running`` running."""
    from functions.domain.jobs import Job, JobType, PayloadKind
    from functions.domain.machine_classes import GeoZone
    from functions.domain.notifications import normalize_notifications
    from functions.domain.status import JobStatus
    from functions.logic.submission import new_job_id

    job_id = new_job_id(int(t0.timestamp() * 1000))
    counts = {"Succeeded": finished, "Running": running}
    if size - finished - running:
        counts["Queued"] = size - finished - running
    return Job(
        job_id=job_id,
        account_id="bench",
        name=None,
        type=JobType.ARRAY,
        payload_kind=PayloadKind.CODE,
        machine_class="Basic1x8",
        geo_zone=GeoZone.UNITED_STATES,
        credit_constraint=None,
        time_constraint=None,
        notifications=normalize_notifications("None"),
        submitted_at=t0 - timedelta(minutes=5),
        status=JobStatus.RUNNING,
        status_history=(JobStatus.QUEUED, JobStatus.STARTING, JobStatus.RUNNING),
        started_at=t0 - timedelta(minutes=4),
        last_event_at=t0,
        array_size=size,
        child_status_counts=counts,
        credits_settled=CHILD_CHARGE * finished,
        credits_spent=CHILD_CHARGE * finished,
        batch_job_id=f"span-{job_id}",
        array_spans=(f"span-{job_id}",),
    )


def _children(parent: Any, first: int, count: int, running: bool, t0: datetime) -> Iterator[Any]:
    """``count`` ``ArrayChild`` jobs of ``parent`` from index ``first``: Running since ``t0`` - 30 s,
    or Succeeded after 40 s (charged the 60 s minimum)."""
    from functions.domain.jobs import JobType
    from functions.domain.status import JobStatus

    history = (JobStatus.QUEUED, JobStatus.STARTING, JobStatus.RUNNING)
    for index in range(first, first + count):
        started = t0 - timedelta(seconds=30) if running else t0 - timedelta(minutes=3)
        yield replace(
            parent,
            job_id=f"{parent.job_id}:{index}",
            type=JobType.ARRAY_CHILD,
            parent_job_id=parent.job_id,
            array_index=index,
            status=JobStatus.RUNNING if running else JobStatus.SUCCEEDED,
            status_history=history if running else (*history, JobStatus.SUCCEEDED),
            event_position=4 if running else 15,
            started_at=started,
            completed_at=None if running else started + timedelta(seconds=40),
            last_event_at=started if running else started + timedelta(seconds=40),
            credits_spent=Decimal(0) if running else CHILD_CHARGE,
            exit_code=None if running else 0,
            batch_job_id=f"{parent.batch_job_id}:{index}",
            child_status_counts=None,
            credits_settled=Decimal(0),
            array_spans=(),
        )


@dataclass
class Deployment:
    """One array's tables, in a region of its own."""

    finished: int
    running: int
    services: Any
    log: RequestLog
    calls: list[dict[str, int]] = field(default_factory=list)
    items: list[int] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


def deploy(finished: int, running: int, region: str, t0: datetime) -> Deployment:
    """Create the tables in ``region`` and load one array: its parent, ``finished`` Succeeded and
    ``running`` Running children."""
    services, log, loader, jobs_table = tables(region, t0)
    parent = _parent(finished + running, finished, running, t0)
    children = [*_children(parent, 0, finished, False, t0), *_children(parent, finished, running, True, t0)]
    assert _bulk_load(loader, jobs_table, iter([parent, *children])) == 1 + len(children)
    return Deployment(finished, running, services, log)


def measure(finished: int, running: int, ticks: int, warmup: int) -> list[Deployment]:
    """Tick the meter over both arrays in turn; every tick's calls, items and time are kept."""
    from moto import mock_aws

    from functions.logic.metering import meter_tick

    t0 = datetime(2026, 11, 29, 17, 0, tzinfo=UTC)
    with mock_aws():
        deployments = [
            deploy(finished, running, REGIONS[0], t0),
            deploy(0, running, REGIONS[1], t0),
        ]
        now = t0
        for round_ in range(warmup + ticks):
            now += TICK_STEP
            for deployment in deployments:
                deployment.log.reset()
                started = time.perf_counter()
                report = meter_tick(deployment.services, now)
                elapsed = time.perf_counter() - started
                assert report.terminated == 0, report
                assert report.reconciled == 0, report
                if round_ >= warmup:
                    deployment.calls.append(dict(sorted(deployment.log.calls.items())))
                    deployment.items.append(deployment.log.query_count)
                    deployment.seconds.append(elapsed)
    return deployments


def render(deployments: Sequence[Deployment]) -> str:
    """The figures as a Markdown table (requests and items per tick: the same every tick)."""
    lines = [
        "| array's children | DynamoDB requests per tick | items read per tick | tick median |",
        "|---|---|---:|---:|",
    ]
    for d in deployments:
        calls = ", ".join(f"{name} {count}" for name, count in d.calls[0].items())
        lines.append(
            f"| {d.finished:,} finished + {d.running} running | {calls} (total {sum(d.calls[0].values())}) "
            f"| {d.items[0]} | {statistics.median(d.seconds) * 1000:.0f} ms |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark, print a Markdown table, and fail when the two arrays' ticks differ."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.array_meter", description=__doc__)
    parser.add_argument("--finished", type=int, default=5_000, help="finished children of the first array")
    parser.add_argument("--running", type=int, default=100, help="running children of both arrays")
    parser.add_argument("--ticks", type=int, default=10, help="timed ticks")
    parser.add_argument("--warmup", type=int, default=2, help="untimed ticks first")
    args = parser.parse_args(argv)
    _offline_environment()
    deployments = measure(args.finished, args.running, args.ticks, args.warmup)
    print(f"\nmeter tick over one array, {args.ticks} ticks after {args.warmup} warm-up")
    print(f"machine: {_machine()}\n")
    print(render(deployments))
    many, none = deployments
    same = many.calls == none.calls and many.items == none.items
    print(f"\nrequests and items per tick equal with and without finished children: {same}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
