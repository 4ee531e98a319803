"""50 jobs of one account settling at once, from 8 threads, with duplicates (docs/architecture.md "Credits").

Each settlement is a transaction conditional on the exact balance it read, so concurrent settlements
of one account make all but one fail; the logic re-reads and retries (``MAX_WRITE_ATTEMPTS``, with
jitter). The books must end exact: one charge per job, the balance never below 0, grants − charges.

moto is not thread-safe, so its request handling is serialized here (``one_request_at_a_time``): its
DynamoDB ``transact_write_items`` deep-copies the tables, applies the items one by one and, when one
is cancelled, puts the copies back, erasing what other requests wrote meanwhile; nothing locks it.
Unserialized, this test saw charges of 10.8 credits against a 7.5-credit balance and events that
exhausted their retries: moto's races, not the service's. ``ThreadedMotoServer`` would not fix it: it
serves each request on its own thread against the same backend code, so the race is only rarer (the
unserialized test passed 8 runs of 8 on it here; nothing there prevents the race).
DynamoDB makes each request atomic and isolated; the lock gives moto that guarantee and nothing more:
the service's threads still interleave freely between requests (read balance, compute, conditional
write), which is what this test is about.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import pytest

from functions.domain.jobs import LedgerKind
from tests.events import job_lifecycle

THREADS = 8
JOBS = 50
RATE = Decimal(60)  # Basic1x8, credits per hour (docs/architecture.md)


def cost_of(run_ms: int) -> Decimal:
    seconds = max(60, -(-run_ms // 1000))
    return (Decimal(seconds) * RATE / 3600).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP)


def run_ms_of(index: int) -> int:
    """65 to 74 s (1.0833 to 1.2333 credits): 6 whole charges fit in 7.5 credits, 7 do not."""
    return 64_001 + (index * 211) % 9_999


def submit_running_jobs(stack, account_id: str) -> list[tuple[str, dict[str, Any]]]:
    """Submit ``JOBS`` jobs and deliver their RUNNING; returns (job id, final event) per job."""
    created = int(stack.clock().timestamp() * 1000)
    jobs = []
    for index in range(JOBS):
        status, view = stack.api("POST", "/jobs", body={"code": "1"}, account_id=account_id)
        assert status == 202, view
        job_id = view["jobId"]
        batch_id = stack.services.store.get_job(job_id).batch_job_id
        events = job_lifecycle(
            job_id,
            batch_id,
            created_at=created,
            started_at=created + 1_000,
            stopped_at=created + 1_000 + run_ms_of(index),
            succeeded=index % 3 != 0,
        )
        stack.deliver(events[3])  # RUNNING
        jobs.append((job_id, events[4]))
    return jobs


def settle_concurrently(stack, finals: list[dict[str, Any]]) -> None:
    """Deliver the final events from ``THREADS`` threads that start together; every thread also
    re-delivers some of its events (and one of another thread's), as EventBridge may."""
    barrier = threading.Barrier(THREADS)
    shares = [finals[i::THREADS] for i in range(THREADS)]

    def deliver_share(index: int) -> None:
        share = shares[index]
        barrier.wait()
        for event in share:
            stack.deliver(event)
        for event in [*share[::2], shares[(index + 1) % THREADS][0]]:
            stack.deliver(event)

    with ThreadPoolExecutor(THREADS) as pool:
        for future in [pool.submit(deliver_share, i) for i in range(THREADS)]:
            future.result()


@pytest.mark.parametrize(
    ("balance", "expected_final"),
    [
        (Decimal(10000), Decimal(10000) - sum(cost_of(run_ms_of(i)) for i in range(JOBS))),
        (Decimal("7.5"), Decimal(0)),  # the cap by balance bites: 50 jobs of ≥ 1 credit each
    ],
    ids=["balance-covers-all", "balance-runs-out"],
)
def test_concurrent_settlements_of_one_account_keep_exact_books(
    one_request_at_a_time, stack, balance, expected_final
):
    # Given: 50 running jobs of one account.
    stack.clock.now = datetime(2027, 3, 1, tzinfo=UTC)
    stack.add_account("busy", str(balance))
    jobs = submit_running_jobs(stack, "busy")

    # When: their final events arrive at once, from 8 threads, with duplicates.
    settle_concurrently(stack, [final for _, final in jobs])

    # Then: the balance is exact and never went below 0; one charge per charged job.
    assert stack.balance("busy") == expected_final
    entries = stack.services.store.list_ledger("busy", None, None)
    charges = [e for e in entries if e.kind == LedgerKind.CHARGE]
    assert all(e.balance_after >= 0 for e in entries)
    assert sum((e.credits for e in charges), Decimal(0)) == balance - expected_final
    assert len({e.job_id for e in charges}) == len(charges)
    by_job = {e.job_id: e for e in charges}
    costs = {job_id: cost_of(run_ms_of(i)) for i, (job_id, _) in enumerate(jobs)}
    for job_id, _ in jobs:
        job = stack.services.store.get_job(job_id)
        assert job.is_final
        entry = by_job.get(job_id)
        assert job.credits_spent == (entry.credits if entry else Decimal(0))
        if entry:
            assert entry.credits + entry.unbilled == costs[job_id]
    # The ledger replays: each entry's balanceAfter is the one before it less its credits.
    running = balance
    for entry in sorted(charges, key=lambda e: (-e.balance_after, -e.credits)):
        running -= entry.credits
        assert entry.balance_after == running
    assert len(charges) == JOBS  # every job's cost is explained by one entry
    if expected_final > 0:
        assert all(e.unbilled == 0 for e in charges)
    else:
        # Six whole charges, then the one the balance could not cover is cut (unbilled recorded);
        # the jobs after it are charged 0 and their whole cost is recorded as unbilled.
        assert len([e for e in charges if e.credits > 0 and e.unbilled == 0]) == 6
        (partial,) = [e for e in charges if e.credits > 0 and e.unbilled > 0]
        assert partial.balance_after == 0
        assert len([e for e in charges if e.credits == 0]) == JOBS - 7
