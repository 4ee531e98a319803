"""Does a meter tick cost the same with 1,000 and with 100,000 jobs in the jobs table?

The meter reads the Starting/Running jobs from the sparse ``metered`` index and the unfinished ones
from the sparse ``unfinished`` index, so on DynamoDB its reads grow with running jobs, not with
history. This benchmark loads N finished jobs (N = 1,000 and 100,000) plus 100 Running jobs into
DynamoDB on moto (``mock_aws``, in-process; each size in a region of its own, ticked in turn so a
busy machine slows both alike), then times ``meter_tick`` and counts what each tick asks of DynamoDB
(calls per operation; items the queries return, ``Count`` / ``ScannedCount``).

moto answers a query on an index by walking and sorting the whole table (``Table.query`` over
``all_items()``), which DynamoDB does not do; so the time spent inside the Query calls is reported on
its own, and the rest of the tick (the service's code and its other requests) separately.

Run by hand: ``python -m benchmarks.meter_scaling`` (or ``make bench`` for every benchmark).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

REGIONS = ("us-east-1", "us-west-2", "eu-west-1", "eu-central-1")  # one per size measured
RUNNING_JOBS = 100
TICK_STEP = timedelta(seconds=20)  # 20 ticks stay under the 10-minute staleness of reconciliation
BATCH_WRITE_SIZE = 25  # DynamoDB's BatchWriteItem limit
ACCOUNTS = 50


def _offline_environment() -> None:
    """Fake credentials and no endpoint: everything goes to moto, nothing to AWS."""
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        os.environ.pop(var, None)
    os.environ.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": REGIONS[0],
            "POWERTOOLS_LOG_LEVEL": "WARNING",
        }
    )


@dataclass
class RequestLog:
    """DynamoDB requests seen through botocore's event hooks: count per operation, items the
    queries returned, and wall time spent in Query calls."""

    calls: Counter[str] = field(default_factory=Counter)
    query_count: int = 0
    query_scanned: int = 0
    query_seconds: float = 0.0
    _started: float = 0.0

    def before(self, model: Any, **_: Any) -> None:
        if model.name == "Query":
            self._started = time.perf_counter()

    def after(self, parsed: dict[str, Any], model: Any, **_: Any) -> None:
        self.calls[model.name] += 1
        if model.name == "Query":
            self.query_seconds += time.perf_counter() - self._started
            self.query_count += int(parsed.get("Count", 0))
            self.query_scanned += int(parsed.get("ScannedCount", 0))

    def reset(self) -> None:
        self.calls.clear()
        self.query_count = self.query_scanned = 0
        self.query_seconds = 0.0


class IdleBatchGateway:
    """AWS Batch stand-in: nothing is submitted; every job is still running when asked."""

    def submit_job(self, submission: Any) -> str:
        raise RuntimeError("the benchmark loads its jobs straight into the table; it submits none")

    def terminate_job(self, batch_job_id: str, reason: str) -> None:
        return None

    def describe_jobs(self, batch_job_ids: Sequence[str], observed_at_ms: int) -> list[Any]:
        return []

    def find_job_by_name(self, job_queue: str, job_name: str) -> str | None:
        return None


class NullNotifier:
    """Sends nothing (the meter sends no notification for these jobs)."""

    def send(self, notification: Any) -> None:
        return None


@dataclass(frozen=True)
class Result:
    """One history size's figures; times in seconds."""

    history: int
    load_seconds: float
    tick_median: float
    tick_p90: float
    query_median: float
    rest_median: float
    calls: dict[str, int]
    items_returned: int
    items_scanned: int


def _settings(region: str) -> Any:
    from functions.domain.machine_classes import MACHINE_CLASSES, GeoZone
    from functions.settings import RouteSettings, Settings, ZoneSettings

    routes = {
        name: RouteSettings(job_queue="bench-queue", job_definition="bench-definition")
        for name in MACHINE_CLASSES
    }
    return Settings(
        jobs_table="bench-jobs",
        accounts_table="bench-accounts",
        ledger_table="bench-ledger",
        idempotency_table="bench-idempotency",
        operations_table="bench-operations",
        computes_table="computes-table",
        compute_prefix="remote-batch-test",
        quotas_table="bench-quotas",
        email_topic_arn_prefix=f"arn:aws:sns:{region}:123456789012:bench-email-",
        home_region=region,
        zones={
            GeoZone.UNITED_STATES: ZoneSettings(
                region=region, bucket="bench-data", log_group="/aws/batch/job", routes=routes
            )
        },
    )


def _job(account_id: str, submitted: datetime, running: bool) -> Any:
    """A Basic1x8 job that started 30 s after submission: Running, or Succeeded after 90 s."""
    from functions.domain.notifications import normalize_notifications
    from functions.domain.status import JobStatus
    from functions.logic.submission import new_job_id
    from tests.builders import build_job

    started = submitted + timedelta(seconds=30)
    history = (JobStatus.QUEUED, JobStatus.STARTING, JobStatus.RUNNING)
    job_id = new_job_id(int(submitted.timestamp() * 1000))
    return build_job(
        job_id,
        account_id=account_id,
        notifications=normalize_notifications("Automatic"),
        submitted_at=submitted,
        status=JobStatus.RUNNING if running else JobStatus.SUCCEEDED,
        status_history=history if running else (*history, JobStatus.SUCCEEDED),
        event_position=4 if running else 15,
        credits_spent=Decimal(0) if running else Decimal("1.5000"),
        exit_code=None if running else 0,
        started_at=started,
        completed_at=None if running else started + timedelta(seconds=90),
        log_stream_name=f"remote-batch-worker/default/batch-{job_id}",
        last_event_at=started if running else started + timedelta(seconds=90),
        sent_notifications=frozenset(
            {"JobStarting/Email"} if running else {"JobStarting/Email", "JobCompleted/Email"}
        ),
    )


def _finished_jobs(count: int, now: datetime) -> Iterator[Any]:
    """``count`` Succeeded jobs of ``ACCOUNTS`` accounts, submitted over the past 300 days."""
    first = now - timedelta(days=300)
    for index in range(count):
        submitted = first + timedelta(seconds=index * 300 * 86_400 // count)
        yield _job(f"history-{index % ACCOUNTS}", submitted, running=False)


def _bulk_load(client: Any, table: str, jobs: Iterator[Any]) -> int:
    """``BatchWriteItem`` in chunks of 25 of ``job_to_item`` items; returns how many were written."""
    from boto3.dynamodb.types import TypeSerializer

    from functions.adapters.dynamodb import job_to_item

    serializer = TypeSerializer()
    written = 0
    chunk: list[dict[str, Any]] = []

    def flush() -> None:
        requests: dict[str, Any] = {table: chunk}
        while requests:
            requests = client.batch_write_item(RequestItems=requests).get("UnprocessedItems") or {}

    for job in jobs:
        item = {k: serializer.serialize(v) for k, v in job_to_item(job).items() if v is not None}
        chunk.append({"PutRequest": {"Item": item}})
        if len(chunk) == BATCH_WRITE_SIZE:
            flush()
            written += len(chunk)
            chunk = []
    if chunk:
        flush()
        written += len(chunk)
    return written


def _percentile(samples: Sequence[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


@dataclass
class Deployment:
    """One size's tables, in a region of its own on the shared moto backend."""

    history: int
    services: Any
    log: RequestLog
    load_seconds: float
    durations: list[float] = field(default_factory=list)
    in_queries: list[float] = field(default_factory=list)

    def result(self) -> Result:
        rest = [d - q for d, q in zip(self.durations, self.in_queries, strict=True)]
        return Result(
            history=self.history,
            load_seconds=self.load_seconds,
            tick_median=statistics.median(self.durations),
            tick_p90=_percentile(self.durations, 0.9),
            query_median=statistics.median(self.in_queries),
            rest_median=statistics.median(rest),
            calls=dict(sorted(self.log.calls.items())),
            items_returned=self.log.query_count,
            items_scanned=self.log.query_scanned,
        )


def tables(region: str, t0: datetime) -> tuple[Any, RequestLog, Any, str]:
    """Create the service's tables in ``region`` (moto) and the ``bench`` account (10⁹ credits, at
    ``t0``). Returns the services (DynamoDB calls counted by the ``RequestLog``, idle Batch, no
    notifications), that log, a plain DynamoDB client to bulk-load with, and the Jobs table's name."""
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
        "Quotas": settings.quotas_table,
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
    loader: Any = boto3.client("dynamodb", region_name=region)
    for spec in ALL_TABLES:
        loader.create_table(**create_table_request(spec, names[spec.logical_name]))
    services.store.create_account(Account(account_id="bench", credit_balance=Decimal(10**9)), t0)
    return services, log, loader, settings.jobs_table


def deploy(history: int, region: str, t0: datetime) -> Deployment:
    """Create the tables in ``region``, bulk-load ``history`` finished jobs (timed), add
    ``RUNNING_JOBS`` jobs Running since ``t0`` and their account."""
    services, log, loader, jobs_table = tables(region, t0)
    started = time.perf_counter()
    loaded = _bulk_load(loader, jobs_table, _finished_jobs(history, t0))
    load_seconds = time.perf_counter() - started
    assert loaded == history
    for _ in range(RUNNING_JOBS):
        services.store.create_job(_job("bench", t0 - timedelta(seconds=30), running=True))
    return Deployment(history, services, log, load_seconds)


def measure(sizes: Sequence[int], ticks: int, warmup: int) -> list[Result]:
    """Deploy each size in its own region of one moto backend, then time ticks of the sizes in
    turn (A, B, A, B, ...), so a busy machine slows every size alike."""
    from moto import mock_aws

    from functions.logic.metering import meter_tick

    t0 = datetime(2026, 11, 29, 17, 0, tzinfo=UTC)
    with mock_aws():
        deployments = []
        for size, region in zip(sizes, REGIONS, strict=False):
            deployments.append(deploy(size, region, t0))
            print(f"loaded {size:,} finished jobs in {deployments[-1].load_seconds:.1f} s", flush=True)
        now = t0
        for round_ in range(warmup + ticks):
            now += TICK_STEP
            for deployment in deployments:
                deployment.log.reset()
                started = time.perf_counter()
                report = meter_tick(deployment.services, now)
                elapsed = time.perf_counter() - started
                assert (report.metered, report.updated, report.terminated) == (RUNNING_JOBS, RUNNING_JOBS, 0)
                assert report.reconciled == 0
                if round_ >= warmup:
                    deployment.durations.append(elapsed)
                    deployment.in_queries.append(deployment.log.query_seconds)
        return [deployment.result() for deployment in deployments]


def _machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            cpu = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    from importlib.metadata import version

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, moto {version('moto')}, "
        f"{datetime.now(UTC):%Y-%m-%d}, load average {load}"
    )


def render(results: Sequence[Result]) -> str:
    """The results as a Markdown table."""
    ms = 1000
    lines = [
        "| jobs in table | bulk load | tick median | tick p90 | in Query calls (median) "
        "| rest of tick (median) | requests per tick | items read per tick |",
        "|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in results:
        calls = ", ".join(f"{name} {count}" for name, count in r.calls.items())
        total = r.history + RUNNING_JOBS
        lines.append(
            f"| {r.history:,} finished + {RUNNING_JOBS} running = {total:,} | {r.load_seconds:.1f} s "
            f"| {r.tick_median * ms:.0f} ms | {r.tick_p90 * ms:.0f} ms | {r.query_median * ms:.0f} ms "
            f"| {r.rest_median * ms:.0f} ms | {calls} | {r.items_returned} (scanned {r.items_scanned}) |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark and print a Markdown table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.meter_scaling", description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 100_000], help="finished jobs")
    parser.add_argument("--ticks", type=int, default=15, help="timed ticks per size")
    parser.add_argument("--warmup", type=int, default=3, help="untimed ticks first")
    args = parser.parse_args(argv)
    _offline_environment()
    if len(args.sizes) > len(REGIONS):
        parser.error(f"at most {len(REGIONS)} sizes")
    results = measure(args.sizes, args.ticks, args.warmup)
    print(f"\nmeter tick with {RUNNING_JOBS} running jobs, {args.ticks} ticks after {args.warmup} warm-up")
    print(f"machine: {_machine()}\n")
    print(render(results))


if __name__ == "__main__":
    main()
