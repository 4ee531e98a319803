"""An array submitted with ``parallelism`` on moto (issue 26): its spans count containers, each
container's SubmitJob says how many there are, and its Batch events (delivered to the handler, or
described by AWS Batch at the meter's reconciliation) reach ``container_events``: a container's
RUNNING starts the array, its end settles the items it ran with one exact charge."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from functions.domain.arrays import visible_counts
from functions.domain.dependencies import Dependency, DependencyMode
from functions.domain.errors import ValidationFailed
from functions.domain.jobs import ABORTED_BY_USER, BatchJobState, Job, PayloadKind
from functions.domain.machine_classes import GeoZone
from functions.domain.quotas import Family, QuotaKey, QuotaLimits
from functions.domain.status import JobStatus
from functions.logic import arrays, queries
from functions.logic.container_events import container_entry_id
from functions.logic.submission import JobRequest, abort_job
from functions.logic.unclaimed_items import NO_CONTAINER_LEFT
from tests.events import batch_event

US = GeoZone.UNITED_STATES
T0 = 1_764_436_800_000  # 2025-11-29T17:20:00Z
OOM = "OutOfMemoryError: Container killed due to memory usage"


@pytest.fixture(autouse=True)
def _submitted_before_the_events(stack: Any) -> None:
    """Jobs are submitted at T0, before the times their events carry (a charge lies in the job's life)."""
    stack.clock.now = datetime(2025, 11, 29, 17, 20, tzinfo=UTC)


def submit(stack: Any, size: int, parallelism: int | None) -> Job:
    request = JobRequest(
        payload_kind=PayloadKind.CODE,
        payload="item + 1",
        array_items=list(range(size)),
        parallelism=parallelism,
    )
    parent = arrays.submit(stack.services, "dev", request, stack.clock())
    stored: Job | None = stack.services.store.get_job(parent.job_id)
    assert stored is not None
    return stored


def ran(stack: Any, parent: Job, container: str, index: int, start_s: int, seconds: int) -> None:
    """What ``worker.item_loop`` leaves for one item it ran: its claim, its result and its report."""
    blobs = stack.services.zones[US].blobs
    blobs.put(f"outputs/{parent.job_id}/claims/{index}", container.encode(), "application/json")
    result = json.dumps({"result": index + 1}).encode()
    blobs.put(f"outputs/{parent.job_id}/{index}/result.json", result, "application/json")
    report = {
        "index": index,
        "startedAt": T0 + start_s * 1000,
        "stoppedAt": T0 + (start_s + seconds) * 1000,
        "exitCode": 0,
        "status": "Succeeded",
        "reason": None,
        "logFirst": index * 10,
        "logCount": 10,
    }
    key = f"outputs/{parent.job_id}/containers/{container}/{index}.json"
    blobs.put(key, json.dumps(report).encode(), "application/json")


def container_event(parent: Job, container: str, status: str, start_s: int, stop_s: int | None = None) -> Any:
    """A container's ``Batch Job State Change`` (an array child of the parent's first span)."""
    return batch_event(
        parent.job_id,
        container,
        status,
        created_at=T0,
        started_at=T0 + start_s * 1000,
        stopped_at=None if stop_s is None else T0 + stop_s * 1000,
        exit_code=None if stop_s is None else 0,
        log_stream_name=f"remote-batch/default/{container}",
        array_index=int(container.rsplit(":", 1)[1]),
    )


def charges(stack: Any) -> dict[str, Decimal]:
    return {
        e.entry_id: e.credits
        for e in stack.services.store.list_ledger("dev", None, None)
        if e.kind.value == "charge"
    }


def item_credits(stack: Any, parent: Job) -> list[Decimal]:
    items = stack.services.store.get_jobs([f"{parent.job_id}:{i}" for i in range(parent.array_size or 0)])
    return [i.credits_spent for i in sorted(items, key=lambda i: i.array_index)]


def test_six_items_on_two_containers_one_span_of_two_routed_to_their_settlement(stack):
    parent = submit(stack, 6, parallelism=2)
    assert (parent.array_size, parent.array_containers, parent.array_children) == (6, 2, 2)
    [submission] = stack.batch[US].submissions
    assert submission.array_size == 2
    assert submission.environment["REMOTE_BATCH_ARRAY_CONTAINERS"] == "2"
    assert submission.environment["REMOTE_BATCH_ARRAY_OFFSET"] == "0"
    a, b = f"{parent.array_spans[0]}:0", f"{parent.array_spans[0]}:1"

    stack.deliver(container_event(parent, a, "RUNNING", 10))
    running = stack.services.store.get_job(parent.job_id)
    assert running.status == JobStatus.RUNNING
    assert running.child_status_counts == {"Queued": 6}  # an item has a record once its container ended

    for index, start in ((0, 10), (2, 20), (4, 30)):
        ran(stack, parent, a, index, start, 10)
    for index, start in ((1, 10), (3, 40), (5, 70)):
        ran(stack, parent, b, index, start, 30)
    stack.deliver(container_event(parent, a, "SUCCEEDED", 10, 100))  # 90 s: 1.5 credits, 10:10:10
    stack.deliver(container_event(parent, b, "SUCCEEDED", 10, 130))  # 120 s: 2 credits, 30:30:30
    stack.deliver(container_event(parent, b, "SUCCEEDED", 10, 130))  # a replay changes nothing

    done = stack.services.store.get_job(parent.job_id)
    assert (done.status, visible_counts(done.child_status_counts)) == (JobStatus.SUCCEEDED, {"Succeeded": 6})
    assert charges(stack) == {
        container_entry_id(parent.job_id, a): Decimal("1.5000"),
        container_entry_id(parent.job_id, b): Decimal("2.0000"),
    }
    credits = item_credits(stack, parent)
    # Items 0, 2, 4 share a's 1.5 credits; 1, 3, 5 b's 2 (the last takes the rounding remainder).
    assert credits == [Decimal(c) for c in ("0.5000", "0.6667", "0.5000", "0.6667", "0.5000", "0.6666")]
    assert sum(credits) == done.credits_spent == Decimal("3.5000")
    assert stack.balance("dev") == Decimal("9996.5000")
    result = queries.get_result(stack.services, "dev", parent.job_id, stack.clock(), as_pickle=False)
    assert result.result == [1, 2, 3, 4, 5, 6]


def test_a_containers_lost_end_is_settled_by_the_meters_reconciliation(stack):
    parent = submit(stack, 3, parallelism=2)
    span = parent.array_spans[0]
    a, b = f"{span}:0", f"{span}:1"
    stack.deliver(container_event(parent, a, "RUNNING", 10))
    for index, start in ((0, 10), (2, 30)):
        ran(stack, parent, a, index, start, 20)
    ran(stack, parent, b, 1, 10, 20)
    stack.deliver(container_event(parent, b, "SUCCEEDED", 10, 40))
    # Container a's end event was lost: AWS Batch describes it (and its span) to the meter.
    described: dict[str, Any] = {
        "status_reason": None,
        "created_at_ms": T0,
        "log_stream_name": None,
        "attempt_count": 1,
    }
    known = stack.batch[US].known
    known[span] = BatchJobState(
        batch_job_id=span,
        job_name=parent.job_id,
        status="SUCCEEDED",
        started_at_ms=T0 + 10_000,
        stopped_at_ms=T0 + 130_000,
        exit_code=None,
        array_size=2,
        **described,
    )
    known[a] = BatchJobState(
        batch_job_id=a,
        job_name=parent.job_id,
        status="SUCCEEDED",
        started_at_ms=T0 + 10_000,
        stopped_at_ms=T0 + 130_000,
        exit_code=0,
        array_index=0,
        **described,
    )

    stack.clock.now = datetime(2025, 11, 29, 17, 32, tzinfo=UTC)
    stack.tick()

    done = stack.services.store.get_job(parent.job_id)
    assert (done.status, visible_counts(done.child_status_counts)) == (JobStatus.SUCCEEDED, {"Succeeded": 3})
    assert done.array_containers_settled == frozenset({0, 1})
    assert charges(stack) == {
        container_entry_id(parent.job_id, a): Decimal("2.0000"),
        container_entry_id(parent.job_id, b): Decimal("1.0000"),
    }
    assert item_credits(stack, parent) == [Decimal("1.0000"), Decimal("1.0000"), Decimal("1.0000")]


@pytest.mark.parametrize("parallelism", [0, 10_001])
def test_a_parallelism_outside_one_to_ten_thousand_is_refused_and_nothing_is_sent(stack, parallelism):
    with pytest.raises(ValidationFailed) as refused:
        submit(stack, 3, parallelism=parallelism)
    assert refused.value.field == "parallelism"
    assert stack.batch[US].submissions == []


@pytest.mark.parametrize("parallelism", ["2", " 3 ", "2.0", True, 1.5, [2]])
def test_a_parallelism_that_is_not_a_json_whole_number_is_a_400_naming_it(stack, parallelism):
    status, body = stack.api(
        "POST", "/jobs", body={"code": "item", "arrayItems": [1, 2, 3], "parallelism": parallelism}
    )
    assert status == 400, body
    assert body["error"]["field"] == "parallelism"
    assert stack.count_items("test-jobs") == 0


def test_a_whole_float_parallelism_is_that_number_as_json_has_one_number_type(stack):
    status, body = stack.api(
        "POST", "/jobs", body={"code": "item", "arrayItems": [1, 2, 3], "parallelism": 2.0}
    )
    assert status == 202, body


def test_parallelism_on_a_single_job_is_a_400_and_writes_nothing(stack):
    status, body = stack.api("POST", "/jobs", body={"code": "1", "parallelism": 2})
    assert (status, body["error"]["field"]) == (400, "parallelism"), body
    assert "arrayItems" in body["error"]["message"]
    assert stack.count_items("test-jobs") == 0
    assert stack.batch[US].submissions == []


def test_a_parallelism_above_the_items_runs_a_container_per_item(stack):
    parent = submit(stack, 3, parallelism=50)
    assert parent.array_containers == 3
    [submission] = stack.batch[US].submissions
    assert (submission.array_size, submission.environment["REMOTE_BATCH_ARRAY_CONTAINERS"]) == (3, "3")


def failed_event(parent: Job, container: str, start_s: int, stop_s: int, reason: str) -> Any:
    """A container's FAILED event (killed: exit 137) with ``reason``."""
    return batch_event(
        parent.job_id,
        container,
        "FAILED",
        created_at=T0,
        started_at=T0 + start_s * 1000,
        stopped_at=T0 + stop_s * 1000,
        exit_code=137,
        status_reason=reason,
        log_stream_name=f"remote-batch/default/{container}",
        array_index=int(container.rsplit(":", 1)[1]),
    )


def item_outcomes(stack: Any, parent: Job) -> list[tuple[JobStatus, str | None]]:
    items = stack.services.store.get_jobs([f"{parent.job_id}:{i}" for i in range(parent.array_size or 0)])
    return [(i.status, i.status_reason) for i in sorted(items, key=lambda i: i.array_index)]


def test_items_no_container_claimed_end_once_every_container_ended_and_the_array_finishes(stack):
    parent = submit(stack, 5, parallelism=2)
    a, b = f"{parent.array_spans[0]}:0", f"{parent.array_spans[0]}:1"
    ran(stack, parent, a, 0, 10, 10)
    stack.deliver(container_event(parent, a, "SUCCEEDED", 10, 30))
    ran(stack, parent, b, 1, 10, 10)
    claim = f"outputs/{parent.job_id}/claims/3"
    stack.services.zones[US].blobs.put(claim, b.encode(), "application/json")  # b died holding item 3
    stack.deliver(failed_event(parent, b, 10, 50, OOM))
    stack.deliver(failed_event(parent, b, 10, 50, OOM))  # a replay changes nothing

    done = stack.services.store.get_job(parent.job_id)
    assert done.status == JobStatus.TERMINATED
    assert visible_counts(done.child_status_counts) == {"Succeeded": 2, "Terminated": 3}
    assert item_outcomes(stack, parent) == [
        (JobStatus.SUCCEEDED, None),
        (JobStatus.SUCCEEDED, None),
        (JobStatus.TERMINATED, NO_CONTAINER_LEFT),
        (JobStatus.TERMINATED, OOM),
        (JobStatus.TERMINATED, NO_CONTAINER_LEFT),
    ]
    assert charges(stack) == {
        container_entry_id(parent.job_id, a): Decimal("1.0000"),
        container_entry_id(parent.job_id, b): Decimal("1.0000"),
    }
    # Only the items that ran share the containers' charges; the unclaimed ones cost nothing.
    assert item_credits(stack, parent) == [Decimal(c) for c in ("1.0000", "0.2500", "0", "0.7500", "0")]
    assert done.credits_spent == Decimal("2.0000")


def test_an_abort_in_the_middle_ends_the_held_and_the_unclaimed_items_with_its_reason(stack):
    parent = submit(stack, 4, parallelism=2)
    span = parent.array_spans[0]
    a, b = f"{span}:0", f"{span}:1"
    stack.deliver(container_event(parent, a, "RUNNING", 10))
    ran(stack, parent, a, 0, 10, 20)
    ran(stack, parent, b, 1, 10, 20)
    stack.services.zones[US].blobs.put(f"outputs/{parent.job_id}/claims/2", a.encode(), "application/json")

    abort_job(stack.services, "dev", parent.job_id)
    assert [t[0] for t in stack.batch[US].terminations] == [span]
    stack.deliver(failed_event(parent, a, 10, 100, ABORTED_BY_USER))  # 90 s: 1.5 credits, 20:70
    stack.deliver(failed_event(parent, b, 10, 40, ABORTED_BY_USER))  # 30 s: the 60-s minimum, 1

    done = stack.services.store.get_job(parent.job_id)
    assert (done.status, done.status_reason) == (JobStatus.TERMINATED, ABORTED_BY_USER)
    assert item_outcomes(stack, parent) == [
        (JobStatus.SUCCEEDED, None),
        (JobStatus.SUCCEEDED, None),
        (JobStatus.TERMINATED, ABORTED_BY_USER),
        (JobStatus.TERMINATED, ABORTED_BY_USER),
    ]
    assert item_credits(stack, parent) == [Decimal(c) for c in ("0.3333", "1.0000", "1.1667", "0")]
    assert done.credits_spent == Decimal("2.5000") == sum(charges(stack).values())
    assert stack.balance("dev") == Decimal("9997.5000")


def test_aborting_with_containers_held_for_quota_withdraws_them_and_ends_every_unclaimed_item(stack):
    key = QuotaKey(Family.BASIC, US)
    stack.services.store.put_quota_limits("dev", QuotaLimits({key: 2}))
    parent = submit(stack, 8, parallelism=4)
    [submission] = stack.batch[US].submissions
    assert (submission.array_size, submission.environment["REMOTE_BATCH_ARRAY_CONTAINERS"]) == (2, "4")
    span = parent.array_spans[0]
    a, b = f"{span}:0", f"{span}:1"
    ran(stack, parent, a, 0, 10, 20)
    stack.services.zones[US].blobs.put(f"outputs/{parent.job_id}/claims/1", b.encode(), "application/json")

    abort_job(stack.services, "dev", parent.job_id)
    withdrawn = stack.services.store.get_job(parent.job_id)
    # The two held containers are withdrawn; no item ends while a and b may still claim one.
    assert withdrawn.array_containers_settled == frozenset({2, 3})
    assert visible_counts(withdrawn.child_status_counts) == {"Queued": 8}
    assert stack.services.store.list_held_jobs("dev") == []
    stack.deliver(failed_event(parent, a, 10, 40, ABORTED_BY_USER))
    stack.deliver(failed_event(parent, b, 10, 40, ABORTED_BY_USER))

    done = stack.services.store.get_job(parent.job_id)
    assert (done.status, done.status_reason) == (JobStatus.TERMINATED, ABORTED_BY_USER)
    assert (
        item_outcomes(stack, parent)
        == [(JobStatus.SUCCEEDED, None)] + [(JobStatus.TERMINATED, ABORTED_BY_USER)] * 7
    )
    assert stack.services.store.get_quota_usage("dev").used(key) == 0
    assert charges(stack) == {
        container_entry_id(parent.job_id, a): Decimal("1.0000"),
        container_entry_id(parent.job_id, b): Decimal("1.0000"),
    }
    assert done.credits_spent == Decimal("2.0000") == sum(item_credits(stack, parent))


def test_parallelism_and_a_per_item_dependency_are_refused_either_way_round(stack):
    whole = submit(stack, 3, parallelism=None)
    per_item = (Dependency(whole.job_id, mode=DependencyMode.PER_ITEM),)
    with pytest.raises(ValidationFailed) as on_child:
        arrays.submit(
            stack.services,
            "dev",
            JobRequest(
                payload_kind=PayloadKind.CODE,
                payload="item",
                array_items=[1, 2, 3],
                parallelism=2,
                depends_on=per_item,
            ),
            stack.clock(),
        )
    assert on_child.value.field == "parallelism"
    containers = submit(stack, 3, parallelism=2)
    with pytest.raises(ValidationFailed) as on_parent:
        arrays.submit(
            stack.services,
            "dev",
            JobRequest(
                payload_kind=PayloadKind.CODE,
                payload="item",
                array_items=[1, 2, 3],
                depends_on=(Dependency(containers.job_id, mode=DependencyMode.PER_ITEM),),
            ),
            stack.clock(),
        )
    assert "parallelism" in on_parent.value.message
