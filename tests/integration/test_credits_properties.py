"""The one charge of a job, whatever EventBridge, the meter and the user do meanwhile (docs/architecture.md
"Credits").

One property: however a job's Batch events arrive (duplicated, in any order), interleaved with meter
ticks at any running time and an abort at any point, the ledger ends with one charge for the job (none
when it is 0), equal to the job's ``creditsSpent`` and to the rule computed here with ``Decimal`` from
the pricing table of docs/architecture.md; the balance is grants − charges; the status never goes back.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from functions.domain.jobs import BatchJobState, LedgerKind
from functions.domain.machine_classes import GeoZone
from tests.events import batch_event, job_lifecycle

# docs/architecture.md "Credits", copied rather than imported so the test checks the code against the design.
CREDITS_PER_HOUR = {
    "Basic1x8": Decimal(60),
    "Basic2x8": Decimal(90),
    "Basic4x16": Decimal(180),
    "Memory8x64": Decimal(480),
    "Memory16x128": Decimal(960),
    "Memory192x1536": Decimal(11500),
    "Compute64x128": Decimal(2700),
    "Compute192x384": Decimal(8200),
    "GPU1xL40S": Decimal(2300),
    "GPU4xL4": Decimal(4700),
}
QUANTUM = Decimal("0.0001")
STATUS_RANK = {"Queued": 0, "Starting": 1, "Running": 2, "Succeeded": 3, "Terminated": 3}
FIRST_DAY = datetime(2027, 1, 1, tzinfo=UTC)
_examples = itertools.count()


def running_cost(run_ms: int, machine: str) -> Decimal:
    """``ceil(seconds) × rate / 3600`` with the 60-second minimum, half-up to 4 places."""
    seconds = max(60, -(-run_ms // 1000))
    return (Decimal(seconds) * CREDITS_PER_HOUR[machine] / 3600).quantize(QUANTUM, rounding=ROUND_HALF_UP)


def to_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def credits(max_units: int) -> st.SearchStrategy[Decimal]:
    """Positive amounts with at most 4 decimal places, up to ``max_units`` × 0.0001."""
    return st.integers(min_value=1, max_value=max_units).map(lambda n: Decimal(n).scaleb(-4))


def never_ran_events(job_id: str, batch_id: str, created: int) -> list[dict[str, Any]]:
    """A job terminated before it started: FAILED without ``startedAt``."""
    return [
        batch_event(job_id, batch_id, "PENDING", created_at=created),
        batch_event(job_id, batch_id, "RUNNABLE", created_at=created),
        batch_event(job_id, batch_id, "STARTING", created_at=created),
        batch_event(
            job_id, batch_id, "FAILED", created_at=created, status_reason="Job terminated before it started"
        ),
    ]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.data(),
    machine=st.sampled_from(sorted(CREDITS_PER_HOUR)),
    cap=st.none() | credits(20_000_000),
    balance=credits(100_000_000),
    ran=st.sampled_from([True, True, True, False]),
    succeeded=st.booleans(),
    run_ms=st.integers(min_value=0, max_value=120_000) | st.integers(min_value=0, max_value=7_200_000),
    queued_ms=st.integers(min_value=0, max_value=300_000),
    with_abort=st.booleans(),
)
def test_a_job_is_charged_once_by_the_rule_whatever_the_interleaving(
    stack, data, machine, cap, balance, ran, succeeded, run_ms, queued_ms, with_abort
):
    # Given: a fresh account and a job submitted on its own day, so examples do not meet.
    n = next(_examples)
    account_id = f"acct-{n}"
    stack.clock.now = FIRST_DAY + timedelta(days=n)
    stack.add_account(account_id, str(balance))
    body = (
        f'{{"code": "1", "machineClass": "{machine}", "creditConstraint": {"null" if cap is None else cap}}}'
    )
    status, view = stack.api("POST", "/jobs", raw_body=body, account_id=account_id)
    assert status == 202, view
    job_id = view["jobId"]
    job = stack.services.store.get_job(job_id)
    assert job.credit_constraint == cap
    batch_id = job.batch_job_id
    created = to_ms(stack.clock())
    started = created + queued_ms
    stopped = started + run_ms
    if ran:
        events = job_lifecycle(
            job_id, batch_id, created_at=created, started_at=started, stopped_at=stopped, succeeded=succeeded
        )
    else:
        events = never_ran_events(job_id, batch_id, created)
    # What DescribeJobs says while the ticks run, should the meter reconcile the job (quiet for 10 min).
    stack.batch[GeoZone.UNITED_STATES].known[batch_id] = BatchJobState(
        batch_job_id=batch_id,
        job_name=job_id,
        status="RUNNING" if ran else "RUNNABLE",
        status_reason=None,
        created_at_ms=created,
        started_at_ms=started if ran else None,
        stopped_at_ms=None,
        exit_code=None,
        log_stream_name=None,
        attempt_count=0,
    )
    # Ticks between the start and the stop (offsets, so the draws do not depend on the example's day).
    first_tick, window = (started, run_ms) if ran else (created, queued_ms + run_ms)
    offsets = data.draw(st.lists(st.integers(min_value=0, max_value=window), max_size=5), label="ticks")
    ticks = [first_tick + offset for offset in offsets]
    duplicates = data.draw(st.lists(st.sampled_from(range(len(events))), max_size=6), label="duplicates")
    actions = [("event", i) for i in range(len(events))] + [("event", i) for i in duplicates]
    actions += [("tick", at) for at in ticks] + ([("abort", None)] if with_abort else [])
    actions = data.draw(st.permutations(actions), label="interleaving")

    # When: every action, recording the status and creditsSpent after each.
    ranks = []
    for kind, arg in actions:
        if kind == "event":
            stack.deliver(events[arg])
        elif kind == "tick":
            stack.clock.now = from_ms(arg)
            stack.tick()
        else:
            status, _ = stack.api("POST", f"/jobs/{job_id}/abort", account_id=account_id)
            assert status == 202
        seen = stack.services.store.get_job(job_id)
        ranks.append(STATUS_RANK[seen.status.value])
        assert cap is None or seen.credits_spent <= cap

    # Then: the status never went back, and the job ended as its last event says.
    assert ranks == sorted(ranks), [a[0] for a in actions]
    job = stack.services.store.get_job(job_id)
    assert job.status.value == ("Succeeded" if ran and succeeded else "Terminated")
    # The one charge: min(running cost, cap, starting balance); nothing when the job never ran.
    cost = running_cost(run_ms, machine) if ran else Decimal(0)
    capped = min(cost, cap) if cap is not None else cost
    expected = min(capped, balance)
    assert job.credits_spent == expected
    entries = stack.services.store.list_ledger(account_id, None, None)
    charges = [e for e in entries if e.kind == LedgerKind.CHARGE]
    if capped > 0:
        # One entry explains the cost, even when the balance covered none of it (credits 0, unbilled).
        (charge,) = charges
        assert (charge.job_id, charge.credits, charge.unbilled) == (job_id, expected, capped - expected)
        assert charge.balance_after == balance - expected
    else:
        assert charges == []
    grants = sum((e.credits for e in entries if e.kind == LedgerKind.GRANT), Decimal(0))
    assert grants == balance
    assert stack.balance(account_id) == grants - sum((e.credits for e in charges), Decimal(0))
    assert all(e.balance_after >= 0 for e in entries)
