"""How long does a snapshot of the local stack's tables hold up the table writes?

A moto server of the stack's own (journal on) gets ``--jobs`` jobs' worth of items (a job item of
about 30 attributes, two ledger entries and an idempotency record per job, as after that many
submits), then a snapshot is taken while another client writes (``PutItem``) without pause. Two
ways of reading the tables, in the same run:

- **Scan under the lock** (the stack before issue 14 item 5): every table read with ``Scan``
  while the table writes are held (``StateSnapshots`` without ``tables``);
- **changed items** (now): the items written since the last snapshot copied out of moto's backend
  under the lock (``TableImages``), the file written after; ``--changed`` items are updated between
  the snapshots (the first, at the restore, copies the tables whole before anything is served).

Printed: how long the table writes were held, and the longest a concurrent ``PutItem`` took while
the snapshot ran (the pause a request sees). Run by hand:
``python -m benchmarks.snapshot_pause [--jobs 400] [--changed 200]``.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from functions.adapters.tables import ALL_TABLES


def _job_item(index: int) -> dict[str, Any]:
    job = f"job-{index:06d}-0000-4000-8000-000000000000"
    item: dict[str, Any] = {
        "jobId": {"S": job},
        "accountId": {"S": "dev"},
        "status": {"S": "Succeeded"},
        "listKey": {"S": f"2026-12-01T00:00:00.000Z#{job}"},
        "creditsSpent": {"N": "1"},
        "creditsCharged": {"N": "1"},
        "machineClass": {"S": "Basic"},
        "geoZone": {"S": "us"},
        "codeHash": {"S": "0" * 64},
        "statusReason": {"S": "Essential container in task exited"},
        "limits": {"M": {"seconds": {"N": "3600"}, "credits": {"N": "100"}}},
        "history": {"L": [{"M": {"status": {"S": s}, "at": {"N": "1764547200000"}}} for s in "QRS"]},
    }
    for n in range(18):
        item[f"field{n}"] = {"S": f"value {n} of {job}"} if n % 2 else {"N": str(n * 1000 + index)}
    return item


def _fill(clients: Any, tables: dict[str, str], jobs: int) -> None:
    dynamodb = clients.client("dynamodb")
    requests: list[tuple[str, dict[str, Any]]] = []
    for index in range(jobs):
        requests.append((tables["jobs"], _job_item(index)))
        for kind in ("grant", "charge"):
            entry = {"accountId": {"S": "dev"}, "entryId": {"S": f"{kind}#{index}"}, "at": {"S": "2026"}}
            requests.append((tables["ledger"], {**entry, "credits": {"N": "1"}}))
        requests.append((tables["idempotency"], {"id": {"S": f"submit#{index}"}, "data": {"S": "x" * 200}}))
    for start in range(0, len(requests), 25):
        batch: dict[str, list[dict[str, Any]]] = {}
        for table, item in requests[start : start + 25]:
            batch.setdefault(table, []).append({"PutRequest": {"Item": item}})
        dynamodb.batch_write_item(RequestItems=batch)


@contextmanager
def _writer(clients: Any, table: str) -> Iterator[list[float]]:
    """A client putting items without pause while the block runs; yields its latencies (s)."""
    dynamodb = clients.client("dynamodb")
    latencies: list[float] = []
    stop = threading.Event()

    def run() -> None:
        n = 0
        while not stop.is_set():
            started = time.perf_counter()
            dynamodb.put_item(TableName=table, Item={"id": {"S": f"probe#{n}"}})
            latencies.append(time.perf_counter() - started)
            n += 1

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(0.3)  # the writer is going
    try:
        yield latencies
    finally:
        stop.set()
        thread.join()


def _variant(home: Path, jobs: int, changed: int, images: bool) -> tuple[float, float]:
    from moto.moto_api._internal.models import moto_api_backend

    from remote_batch_local.journal import Journal
    from remote_batch_local.resources import AwsClients, MotoServer, local_settings, provision, table_name
    from remote_batch_local.state import SnapshotScope, StateSnapshots

    moto_api_backend.reset()
    server = MotoServer(Journal(home / "state" / "journal"))
    server.start(home / "moto-credentials.json")
    try:
        clients = AwsClients()
        settings = local_settings()
        provision(clients, settings)
        names = {spec.logical_name.lower(): table_name(spec) for spec in ALL_TABLES}
        if server.journaling is None or server.moto_app is None or server.access is None:
            raise RuntimeError("moto's server did not start")
        scope = SnapshotScope(
            tables=tuple(names.values()),
            buckets={},
            log_groups=(),
            topic_arn_prefix=settings.email_topic_arn_prefix,
            home_region=settings.home_region,
        )
        snapshots = StateSnapshots(
            home / "state",
            home / "s3",
            scope,
            clients,
            server.write_counts,
            journal=server.journaling.journal,
            moto_app=server.moto_app,
            tables=server.access.tables if images else None,
        )
        _fill(clients, names, jobs)
        snapshots.restore()  # with images: the whole copy, before anything is served
        server.journaling.enable()
        dynamodb = clients.client("dynamodb")
        for index in range(changed):
            dynamodb.update_item(
                TableName=names["jobs"],
                Key={"jobId": _job_item(index)["jobId"]},
                UpdateExpression="SET creditsSpent = :c",
                ExpressionAttributeValues={":c": {"N": "2"}},
            )
        journal = server.journaling.journal
        held: list[float] = []
        applying = journal.applying

        @contextmanager
        def timed(service: str) -> Iterator[None]:
            with applying(service):
                started = time.perf_counter()
                try:
                    yield
                finally:
                    if service == "dynamodb":
                        held.append(time.perf_counter() - started)

        journal.applying = timed  # type: ignore[method-assign]
        with _writer(clients, names["idempotency"]) as latencies:
            snapshots.take()
        journal.applying = applying  # type: ignore[method-assign]
        return max(held), max(latencies)
    finally:
        server.stop()


def main(argv: Sequence[str] | None = None) -> None:
    """Measure both ways and print one table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=400)
    parser.add_argument("--changed", type=int, default=200)
    args = parser.parse_args(argv)
    print(
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, load average {os.getloadavg()[0]:.1f}; {args.jobs} jobs, "
        f"{args.changed} changed"
    )
    print("| tables read | table writes held | longest concurrent PutItem |")
    print("|---|---:|---:|")
    for images in (False, True):
        with tempfile.TemporaryDirectory() as home:
            held, longest = _variant(Path(home), args.jobs, args.changed, images)
        label = "changed items (TableImages)" if images else "Scan under the lock"
        print(f"| {label} | {held * 1000:.1f} ms | {longest * 1000:.1f} ms |", flush=True)


if __name__ == "__main__":
    main()
