"""Does a meter tick cost the same for an array with 5,000 finished children as for one without?

An array's children are jobs in the same sparse ``metered`` index as any job (Starting/Running only),
and the array's settled spend is one attribute of its parent (``creditsSettled``), so a tick reads
the running children, their parent once, and nothing per finished child. This benchmark loads two
arrays on moto (``mock_aws``, in-process, each in a region of its own): A, 100 running children and
none finished; B, 100 running and 5,000 finished (bulk-loaded child records); then ticks both and
counts what each tick asks of DynamoDB (calls per operation, items the queries return).

Run by hand: ``python -m benchmarks.array_meter`` (or ``make bench`` for every benchmark).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from benchmarks.meter_scaling import (
    IdleBatchGateway,
    NullNotifier,
    RequestLog,
    _bulk_load,
    _machine,
    _offline_environment,
    _settings,
)

REGIONS = ("us-east-1", "us-west-2")
TICK_STEP = timedelta(seconds=20)


@dataclass(frozen=True)
class Result:
    """One array's figures: children, tick time (median, seconds), requests of the last tick."""

    finished: int
    running: int
    tick_median: float
    calls: dict[str, int]
    items_returned: int


def _parent(t0: datetime, size: int) -> Any:
    from functions.domain.arrays import initial_counts
    from functions.domain.jobs import Job, JobType, PayloadKind
    from functions.domain.machine_classes import GeoZone
    from functions.domain.status import JobStatus
    from functions.logic.submission import new_job_id

    return Job(
        job_id=new_job_id(int(t0.timestamp() * 1000)),
        account_id="bench",
        name=None,
        type=JobType.ARRAY,
        payload_kind=PayloadKind.CODE,
        machine_class="Basic1x8",
        geo_zone=GeoZone.UNITED_STATES,
        credit_constraint=None,
        time_constraint=None,
        notifications=(),
        submitted_at=t0,
        status=JobStatus.RUNNING,
        status_history=(JobStatus.QUEUED, JobStatus.STARTING, JobStatus.RUNNING),
        started_at=t0,
        array_size=size,
        child_status_counts=initial_counts(size),
        array_spans=("bench-span",),
        batch_job_id="bench-span",
    )


def _children(parent: Any, indexes: range, running: bool) -> Iterator[Any]:
    from functions.domain.arrays import child_template
    from functions.domain.status import JobStatus

    for index in indexes:
        child = child_template(parent, index)
        history = (JobStatus.QUEUED, JobStatus.STARTING, JobStatus.RUNNING)
        yield replace(
            child,
            status=JobStatus.RUNNING if running else JobStatus.SUCCEEDED,
            status_history=history if running else (*history, JobStatus.SUCCEEDED),
            event_position=4 if running else 15,
            started_at=parent.started_at,
            completed_at=None if running else parent.started_at + timedelta(seconds=30),
            credits_spent=Decimal(0) if running else Decimal("1.0000"),
            batch_job_id=f"bench-span:{index}",
            last_event_at=parent.started_at,
        )


def deploy(region: str, finished: int, running: int, t0: datetime) -> tuple[Any, RequestLog]:
    """Tables in ``region``, one Running array of ``finished + running`` children as described."""
    import boto3

    from functions import bootstrap
    from functions.adapters.tables import ALL_TABLES, create_table_request
    from functions.domain.jobs import Account
    from functions.domain.machine_classes import GeoZone

    settings = _settings(region)
    names = {
        "Jobs": settings.jobs_table,
        "Accounts": settings.accounts_table,
        "Ledger": settings.ledger_table,
        "Idempotency": settings.idempotency_table,
    }
    log = RequestLog()
    session = boto3.Session(region_name=region)
    session.events.register("before-call.dynamodb", log.before)
    session.events.register("after-call.dynamodb", log.after)
    services = bootstrap.build_services(
        settings,
        session=session,
        batch_gateways={GeoZone.UNITED_STATES: IdleBatchGateway()},
        notifier=NullNotifier(),
    )
    loader = boto3.client("dynamodb", region_name=region)
    for spec in ALL_TABLES:
        loader.create_table(**create_table_request(spec, names[spec.logical_name]))
    services.store.create_account(Account(account_id="bench", credit_balance=Decimal(10**9)), t0)
    parent = _parent(t0, finished + running)
    counts = {"Queued": 0, "Running": running, "Succeeded": finished}
    settled = Decimal(finished)
    services.store.create_job(replace(parent, child_status_counts=counts, credits_settled=settled))
    _bulk_load(loader, settings.jobs_table, _children(parent, range(finished), running=False))
    _bulk_load(
        loader, settings.jobs_table, _children(parent, range(finished, finished + running), running=True)
    )
    return services, log


def measure(shapes: Sequence[tuple[int, int]], ticks: int) -> list[Result]:
    """Tick each array ``ticks`` times, in turn; the requests counted are the last tick's."""
    from moto import mock_aws

    from functions.logic.metering import meter_tick

    t0 = datetime(2026, 11, 29, 17, 0, tzinfo=UTC)
    results = []
    with mock_aws():
        deployed = [deploy(region, f, r, t0) for (f, r), region in zip(shapes, REGIONS, strict=False)]
        durations: list[list[float]] = [[] for _ in deployed]
        now = t0
        for _ in range(ticks):
            now += TICK_STEP
            for i, (services, log) in enumerate(deployed):
                log.reset()
                started = time.perf_counter()
                meter_tick(services, now)
                durations[i].append(time.perf_counter() - started)
        for (finished, running), (_, log), spent in zip(shapes, deployed, durations, strict=False):
            results.append(
                Result(
                    finished=finished,
                    running=running,
                    tick_median=sorted(spent)[len(spent) // 2],
                    calls=dict(sorted(log.calls.items())),
                    items_returned=log.query_count,
                )
            )
    return results


def render(results: Sequence[Result]) -> str:
    """The results as a Markdown table."""
    lines = [
        "| array's children | tick median | requests per tick | items read per tick |",
        "|---|---:|---|---:|",
    ]
    for r in results:
        calls = ", ".join(f"{name} {count}" for name, count in r.calls.items())
        lines.append(
            f"| {r.finished:,} finished + {r.running} running | {r.tick_median * 1000:.0f} ms | {calls} "
            f"| {r.items_returned} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark, print a Markdown table, and fail when the two ticks' requests differ."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.array_meter", description=__doc__)
    parser.add_argument("--finished", type=int, default=5_000, help="finished children of array B")
    parser.add_argument("--running", type=int, default=100, help="running children of both arrays")
    parser.add_argument("--ticks", type=int, default=5, help="ticks per array")
    args = parser.parse_args(argv)
    _offline_environment()
    results = measure([(0, args.running), (args.finished, args.running)], args.ticks)
    print(f"\nmeter tick of one array, {args.ticks} ticks\nmachine: {_machine()}\n")
    print(render(results))
    same = results[0].calls == results[1].calls and results[0].items_returned == results[1].items_returned
    print(f"\nsame requests with and without finished children: {'yes' if same else 'NO'}")
    if not same:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
