"""Ended containers of an array whose containers take many items, on moto (issue 26): their items'
records, ONE charge per container split exactly over its items, replays, a container that died
holding an item, the result in order, and the DynamoDB requests per item."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from benchmarks.capacity import RequestRecorder
from functions.domain.errors import DependencyFailed
from functions.domain.jobs import ABORTED_BY_USER, BatchJobState, Job, PayloadKind
from functions.domain.machine_classes import GeoZone
from functions.domain.quotas import Family, QuotaKey
from functions.domain.status import JobStatus
from functions.logic import arrays, queries
from functions.logic.container_events import container_entry_id, settle_container_end
from functions.logic.submission import JobRequest, abort_job

US = GeoZone.UNITED_STATES
T0 = 1_764_436_800_000  # 2025-11-29T17:20:00Z
OOM = "OutOfMemoryError: Container killed due to memory usage"


@pytest.fixture(autouse=True)
def _submitted_before_the_events(stack: Any) -> None:
    """Jobs are submitted at T0, before the times their events carry (a charge lies in the job's life)."""
    stack.clock.now = datetime(2025, 11, 29, 17, 20, tzinfo=UTC)


def submit(stack: Any, size: int, **fields: Any) -> Job:
    request = JobRequest(
        payload_kind=PayloadKind.CODE, payload="item + 1", array_items=list(range(size)), **fields
    )
    return arrays.submit(stack.services, "dev", request, stack.clock())


def put(stack: Any, key: str, body: bytes) -> None:
    stack.services.zones[US].blobs.put(key, body, "application/json")


def ran(
    stack: Any, parent: Job, container: str, index: int, start_s: int, seconds: int, **outcome: Any
) -> None:
    """What ``worker.item_loop`` leaves for one item: its claim, its result and its report."""
    put(stack, f"outputs/{parent.job_id}/claims/{index}", container.encode())
    put(stack, f"outputs/{parent.job_id}/{index}/result.json", json.dumps({"result": index + 1}).encode())
    report = {
        "index": index,
        "startedAt": T0 + start_s * 1000,
        "stoppedAt": T0 + (start_s + seconds) * 1000,
        "exitCode": outcome.get("exit_code", 0),
        "status": outcome.get("status", "Succeeded"),
        "reason": outcome.get("reason"),
        "logFirst": index * 10,
        "logCount": 10,
    }
    put(stack, f"outputs/{parent.job_id}/containers/{container}/{index}.json", json.dumps(report).encode())


def ended(container: str, start_s: int, stop_s: int, *, reason: str | None = None) -> BatchJobState:
    """A container's SUCCEEDED (or, with ``reason``, FAILED) event as the service reads it."""
    return BatchJobState(
        batch_job_id=container,
        job_name="span",
        status="FAILED" if reason else "SUCCEEDED",
        status_reason=reason,
        created_at_ms=T0,
        started_at_ms=T0 + start_s * 1000,
        stopped_at_ms=T0 + stop_s * 1000,
        exit_code=137 if reason else 0,
        log_stream_name=f"remote-batch/default/{container}",
        attempt_count=1,
        array_index=int(container.rsplit(":", 1)[1]),
    )


def settle(stack: Any, parent: Job, state: BatchJobState) -> Job:
    """Settle a container of the array's first span (its global index is its index in the span)."""
    container = int(state.batch_job_id.rsplit(":", 1)[1])
    # The event arrives after the times it carries (a charge's time lies inside the array's life).
    stack.clock.now = max(stack.clock.now, datetime(2025, 11, 29, 17, 30, tzinfo=UTC))
    return settle_container_end(stack.services, parent, state, container, stack.clock())


def charges(stack: Any) -> dict[str, Decimal]:
    return {
        e.entry_id: e.credits
        for e in stack.services.store.list_ledger("dev", None, None)
        if e.kind.value == "charge"
    }


def item(stack: Any, parent: Job, index: int) -> Job:
    stored: Job | None = stack.services.store.get_job(f"{parent.job_id}:{index}")
    assert stored is not None
    return stored


def test_five_items_on_two_containers_one_exact_charge_each_and_the_result_in_order(stack):
    parent = submit(stack, 5)
    a, b = f"{parent.array_spans[0]}:0", f"{parent.array_spans[0]}:1"
    for index, start, seconds in ((0, 10, 10), (2, 20, 20), (4, 40, 10)):
        ran(stack, parent, a, index, start, seconds)
    for index, start, seconds in ((1, 10, 5), (3, 15, 5)):
        ran(stack, parent, b, index, start, seconds)

    after = settle(stack, parent, ended(a, 10, 100))  # 90 s: 1.5 credits, split 10:20:10
    assert after.status == JobStatus.RUNNING
    assert after.child_status_counts == {"Queued": 2, "Succeeded": 3}
    assert [item(stack, parent, i).credits_spent for i in (0, 2, 4)] == [
        Decimal("0.3750"),
        Decimal("0.7500"),
        Decimal("0.3750"),
    ]
    first = item(stack, parent, 2)
    assert (first.status, first.exit_code, first.batch_job_id) == (JobStatus.SUCCEEDED, 0, a)
    assert (first.started_at, first.completed_at) == (
        datetime.fromtimestamp((T0 + 20_000) / 1000, tz=UTC),
        datetime.fromtimestamp((T0 + 40_000) / 1000, tz=UTC),
    )

    done = settle(stack, parent, ended(b, 10, 40))  # 30 s: the 60-s minimum, 1 credit, split 5:5
    assert (done.status, done.status_reason) == (JobStatus.SUCCEEDED, None)
    assert [item(stack, parent, i).credits_spent for i in (1, 3)] == [Decimal("0.5000"), Decimal("0.5000")]
    assert charges(stack) == {
        container_entry_id(parent.job_id, a): Decimal("1.5000"),
        container_entry_id(parent.job_id, b): Decimal("1.0000"),
    }
    assert (done.credits_spent, done.credits_settled) == (Decimal("2.5000"), Decimal("2.5000"))
    assert stack.balance("dev") == Decimal("9997.5000")
    result = queries.get_result(stack.services, "dev", parent.job_id, stack.clock(), as_pickle=False)
    assert result.result == [1, 2, 3, 4, 5]


def test_a_replayed_container_end_changes_nothing(stack):
    parent = submit(stack, 3)
    a = f"{parent.array_spans[0]}:0"
    for index in range(2):
        ran(stack, parent, a, index, 10 + index * 10, 10)
    settle(stack, parent, ended(a, 10, 130))
    before = (charges(stack), stack.balance("dev"), stack.services.store.get_job(parent.job_id))

    settle(stack, parent, ended(a, 10, 130))
    settle(stack, parent, ended(a, 10, 130))

    stored = stack.services.store.get_job(parent.job_id)
    assert (charges(stack), stack.balance("dev")) == before[:2]
    assert charges(stack) == {container_entry_id(parent.job_id, a): Decimal("2.0000")}
    assert (stored.child_status_counts, stored.credits_settled) == (
        before[2].child_status_counts,
        before[2].credits_settled,
    )
    assert stored.child_status_counts["Queued"] == 1
    assert stored.credits_settled == Decimal("2.0000")


def test_a_container_that_dies_fails_only_the_item_it_held_which_takes_the_rest_of_its_time(stack):
    parent = submit(stack, 3)
    a, b = f"{parent.array_spans[0]}:0", f"{parent.array_spans[0]}:1"
    ran(stack, parent, a, 0, 10, 30)  # reported; then item 1 claimed and the container killed
    put(stack, f"outputs/{parent.job_id}/claims/1", a.encode())
    ran(stack, parent, b, 2, 10, 20, status="Failed", exit_code=1, reason="ValueError: boom")

    settle(stack, parent, ended(a, 10, 130, reason=OOM))  # 120 s: 2 credits, split 30:90
    held = item(stack, parent, 1)
    assert (held.status, held.status_reason, held.exit_code) == (JobStatus.TERMINATED, OOM, None)
    assert [item(stack, parent, i).credits_spent for i in (0, 1)] == [Decimal("0.5000"), Decimal("1.5000")]
    assert item(stack, parent, 0).status == JobStatus.SUCCEEDED

    done = settle(stack, parent, ended(b, 10, 40))
    raised = item(stack, parent, 2)
    assert (raised.status, raised.status_reason, raised.exit_code) == (
        JobStatus.TERMINATED,
        "ValueError: boom",
        1,
    )
    assert done.status == JobStatus.TERMINATED
    assert done.credits_spent == Decimal("3.0000")
    assert stack.balance("dev") == Decimal("9997.0000")


def test_a_container_of_ten_items_costs_under_three_dynamodb_requests_an_item(stack):
    parent = submit(stack, 10)
    a = f"{parent.array_spans[0]}:0"
    for index in range(10):
        ran(stack, parent, a, index, 10 + index * 6, 6)
    with RequestRecorder() as recorder:
        done = settle(stack, parent, ended(a, 10, 70))
    counts = Counter(
        {k.split(":", 1)[1]: v for k, v in recorder.usage.requests.items() if k.startswith("dynamodb:")}
    )
    assert done.status == JobStatus.SUCCEEDED
    assert [item(stack, parent, i).credits_spent for i in range(10)] == [Decimal("0.1000")] * 10
    # The parent and account reads, ONE transaction for the ten items, their
    # roll-up and the charge, then the array's start and finish (conditional writes and their reads).
    assert counts == Counter({"GetItem": 6, "UpdateItem": 6, "TransactWriteItems": 1, "BatchGetItem": 1})
    assert sum(counts.values()) < 3 * 10


def test_a_settlement_cut_short_between_transactions_splits_the_same_charge_when_replayed(stack, monkeypatch):
    # Under a cap of 4 credits: charged again from what the cap leaves, the replay would split 0.8333.
    parent = submit(stack, 100, credit_constraint=Decimal(4))
    a = f"{parent.array_spans[0]}:0"
    for index in range(95):  # two transactions: 90 items with the charge, then 5
        ran(stack, parent, a, index, 10, 1)
    store = stack.services.store
    real = type(store).save_container_items
    calls: list[int] = []

    def cut_short(self: Any, parent_id: str, items: Any, **kwargs: Any) -> None:
        calls.append(len(items))
        if len(calls) == 2:
            raise DependencyFailed("DynamoDB failed")
        real(self, parent_id, items, **kwargs)

    monkeypatch.setattr(type(store), "save_container_items", cut_short)
    with pytest.raises(DependencyFailed):
        settle(stack, parent, ended(a, 10, 200))  # 190 s: 3.1667 credits
    monkeypatch.setattr(type(store), "save_container_items", real)
    assert store.get_job(f"{parent.job_id}:94") is None
    stored = store.get_job(parent.job_id)
    assert (stored.child_status_counts, stored.credits_settled) == (
        {"Queued": 10, "Succeeded": 90},
        Decimal("3.1667"),
    )

    settle(stack, parent, ended(a, 10, 200))
    parts = [item(stack, parent, i).credits_spent for i in range(95)]
    assert sum(parts) == Decimal("3.1667")
    assert charges(stack) == {container_entry_id(parent.job_id, a): Decimal("3.1667")}
    assert store.get_job(parent.job_id).child_status_counts == {"Queued": 5, "Succeeded": 95}
    assert stack.balance("dev") == Decimal("9996.8333")


def test_an_abort_in_the_middle_fails_the_item_each_container_held_and_keeps_what_they_reported(stack):
    parent = submit(stack, 4)
    span = parent.array_spans[0]
    a, b = f"{span}:0", f"{span}:1"
    ran(stack, parent, a, 0, 10, 20)
    ran(stack, parent, b, 1, 10, 20)
    put(stack, f"outputs/{parent.job_id}/claims/2", a.encode())  # running when the abort came
    settle(stack, parent, ended(b, 10, 40))  # b ran out of its run before the abort

    abort_job(stack.services, "dev", parent.job_id)
    assert [t[0] for t in stack.batch[US].terminations] == [span]
    settle(stack, parent, ended(a, 10, 100, reason=ABORTED_BY_USER))  # 90 s: 1.5 credits, 20:70

    assert [(item(stack, parent, i).status, item(stack, parent, i).status_reason) for i in (0, 1, 2)] == [
        (JobStatus.SUCCEEDED, None),
        (JobStatus.SUCCEEDED, None),
        (JobStatus.TERMINATED, ABORTED_BY_USER),
    ]
    assert [item(stack, parent, i).credits_spent for i in (0, 2)] == [Decimal("0.3333"), Decimal("1.1667")]
    assert (
        store_of(stack).get_job(f"{parent.job_id}:3") is None
    )  # never claimed: nothing ran, nothing charged
    assert charges(stack) == {
        container_entry_id(parent.job_id, a): Decimal("1.5000"),
        container_entry_id(parent.job_id, b): Decimal("1.0000"),
    }
    assert stack.balance("dev") == Decimal("9997.5000")


def test_a_container_whose_charge_reaches_the_arrays_cap_is_cut_to_it_and_stops_the_array(stack):
    parent = submit(stack, 3, credit_constraint=Decimal(2))
    span = parent.array_spans[0]
    a = f"{span}:0"
    ran(stack, parent, a, 0, 10, 50)
    ran(stack, parent, a, 1, 60, 100)

    after = settle(stack, parent, ended(a, 10, 160))  # 150 s: 2.5 credits, cut to the cap's 2

    assert charges(stack) == {container_entry_id(parent.job_id, a): Decimal("2.0000")}
    assert [item(stack, parent, i).credits_spent for i in (0, 1)] == [Decimal("0.6667"), Decimal("1.3333")]
    assert after.credits_settled == Decimal("2.0000")
    assert stack.batch[US].terminations == [(span, "CreditConstraint of 2 credits reached")]


def store_of(stack: Any) -> Any:
    return stack.services.store


def test_a_container_that_never_ran_gives_its_quota_back_once_and_costs_nothing(stack):
    parent = submit(stack, 3)
    b = f"{parent.array_spans[0]}:1"
    key = QuotaKey(Family.BASIC, US)
    before = store_of(stack).get_quota_usage("dev").used(key)
    assert before > 0  # the array's span holds units
    never_ran = replace(ended(b, 0, 0, reason=ABORTED_BY_USER), started_at_ms=None)

    for _ in range(3):  # the event and two replays
        settle(stack, parent, never_ran)

    assert store_of(stack).get_quota_usage("dev").used(key) == before - 1
    stored = store_of(stack).get_job(parent.job_id)
    assert (stored.array_containers_settled, stored.child_status_counts) == (frozenset({1}), {"Queued": 3})
    assert charges(stack) == {}
    assert stack.balance("dev") == Decimal("10000.0000")


def test_a_container_that_claimed_no_item_costs_nothing_so_the_items_sum_is_what_the_array_spent(stack):
    parent = submit(stack, 3)
    a, b = f"{parent.array_spans[0]}:0", f"{parent.array_spans[0]}:1"
    key = QuotaKey(Family.BASIC, US)
    before = store_of(stack).get_quota_usage("dev").used(key)
    for index in range(3):  # container a took every item before b started
        ran(stack, parent, a, index, 10 + index * 10, 10)

    settle(stack, parent, ended(b, 20, 50))  # ran 30 s, found every item claimed
    settle(stack, parent, ended(b, 20, 50))  # a replay
    done = settle(stack, parent, ended(a, 10, 100))  # 90 s: 1.5 credits over three items

    assert charges(stack) == {container_entry_id(parent.job_id, a): Decimal("1.5000")}
    assert [item(stack, parent, i).credits_spent for i in range(3)] == [Decimal("0.5000")] * 3
    assert (done.status, done.credits_spent, done.credits_settled) == (
        JobStatus.SUCCEEDED,
        Decimal("1.5000"),
        Decimal("1.5000"),
    )
    assert stack.balance("dev") == Decimal("9998.5000")
    assert store_of(stack).get_quota_usage("dev").used(key) == before - 2


def test_a_containers_time_past_the_events_arrival_is_not_charged(stack):
    parent = submit(stack, 2)
    a = f"{parent.array_spans[0]}:0"
    ran(stack, parent, a, 0, 10, 10)
    ran(stack, parent, a, 1, 20, 10_000)  # a report as late as the container's clock says

    settle(stack, parent, ended(a, 10, 10_000))  # arrives at T0 + 600 s: 590 s are charged

    assert charges(stack) == {container_entry_id(parent.job_id, a): Decimal("9.8333")}
    # Item 1's report is clamped to the container's corrected life too: 10 s against 580 s.
    assert [item(stack, parent, i).credits_spent for i in (0, 1)] == [Decimal("0.1667"), Decimal("9.6666")]
