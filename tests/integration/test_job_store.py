"""The DynamoDB job store on moto: no update brings back a deleted or expired job, and no read serves
a job past its TTL (issue 9, items 5 and 6)."""

from __future__ import annotations

import inspect
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import boto3
import pytest

from functions.adapters.dynamodb import MAX_LIST_QUERIES, DynamoJobStore
from functions.domain.arrays import child_template
from functions.domain.credits import Charge
from functions.domain.errors import RecordMissing, UnreadableRecord
from functions.domain.jobs import (
    Account,
    BatchJobState,
    Job,
    JobType,
    NotificationRecord,
    apply_batch_event,
)
from functions.domain.notification_schedule import failure_record
from functions.domain.status import JobStatus
from tests.builders import build_job

JOBS = "test-jobs"

# When the events arrive: after every time these tests send.
ARRIVED = datetime(2100, 1, 1, tzinfo=UTC)


def client():
    return boto3.client("dynamodb", region_name="us-east-1")


def raw_item(job_id: str) -> dict[str, Any] | None:
    item: dict[str, Any] | None = (
        client().get_item(TableName=JOBS, Key={"jobId": {"S": job_id}}, ConsistentRead=True).get("Item")
    )
    return item


def make_job(
    stack, job_id: str, *, status: JobStatus = JobStatus.RUNNING, ttl_in: timedelta | None = None
) -> Job:
    now = stack.clock()
    job = build_job(
        job_id,
        submitted_at=now - timedelta(minutes=5),
        status=status,
        status_history=(JobStatus.QUEUED, JobStatus.STARTING, JobStatus.RUNNING)[: 1 + status.rank],
        event_position=4 if status == JobStatus.RUNNING else -1,
        started_at=now - timedelta(minutes=4) if status == JobStatus.RUNNING else None,
        record_expires_at=now + ttl_in if ttl_in is not None else None,
    )
    stack.services.store.create_job(job)
    return job


def final_transition(job: Job):
    assert job.started_at is not None and job.batch_job_id is not None
    started = int(job.started_at.timestamp() * 1000)
    state = BatchJobState(
        batch_job_id=job.batch_job_id,
        job_name=job.job_id,
        status="SUCCEEDED",
        status_reason=None,
        created_at_ms=started,
        started_at_ms=started,
        stopped_at_ms=started + 5_000,
        exit_code=0,
        log_stream_name=None,
        attempt_count=1,
    )
    transition = apply_batch_event(job, state, arrived_at=ARRIVED)
    assert transition is not None
    return transition


def running_transition(job: Job):
    assert job.batch_job_id is not None
    queued = replace(job, status=JobStatus.QUEUED, event_position=-1)
    state = BatchJobState(
        batch_job_id=job.batch_job_id,
        job_name=job.job_id,
        status="STARTING",
        status_reason=None,
        created_at_ms=0,
        started_at_ms=None,
        stopped_at_ms=None,
        exit_code=None,
        log_stream_name=None,
        attempt_count=0,
    )
    transition = apply_batch_event(queued, state, arrived_at=ARRIVED)
    assert transition is not None
    return transition


def child_event(store: DynamoJobStore, parent: Job, now: Any) -> None:
    """The first event of a child of ``parent`` (as an array), written with its parent's counters."""
    array = replace(parent, type=JobType.ARRAY, array_size=2, child_status_counts={"Queued": 2})
    child = child_template(array, 0)
    state = BatchJobState(
        "span:0", parent.job_id, "STARTING", None, 0, None, None, None, None, 0, array_index=0
    )
    transition = apply_batch_event(child, state, arrived_at=ARRIVED)
    assert transition is not None
    store.save_child_event(transition, created=True, charge=None, entry=None, settled_at_most=None, now=now)


# Every method of the store that updates an existing job, with arguments for a job.
UPDATES = {
    "set_batch_job_id": lambda s, job, now: s.set_batch_job_id(job.job_id, "other"),
    "save_transition": lambda s, job, now: s.save_transition(running_transition(job), now),
    "settle": lambda s, job, now: s.settle(
        final_transition(job), Charge(Decimal("1"), Decimal("1"), Decimal("0")), None, now
    ),
    "set_termination_reason": lambda s, job, now: s.set_termination_reason(job.job_id, "Aborted by user"),
    "claim_termination": lambda s, job, now: s.claim_termination(job.job_id, now),
    "release_termination": lambda s, job, now: s.release_termination(job.job_id),
    "claim_notification": lambda s, job, now: s.claim_notification(job.job_id, "JobStarting#1/Email"),
    "release_notification": lambda s, job, now: s.release_notification(
        job.job_id, "JobStarting#1/Email", failure_record("JobStarting#1/Email", 1, now)
    ),
    "request_notification_retry": lambda s, job, now: s.request_notification_retry(job.job_id),
    "clear_notification_retry": lambda s, job, now: s.clear_notification_retry(job.job_id),
    "append_notification_record": lambda s, job, now: s.append_notification_record(
        job.job_id, NotificationRecord(now, "JobStarting", "Email", "sent", None, "Email sent")
    ),
    "mark_data_deleted": lambda s, job, now: s.mark_data_deleted(job.job_id, now),
    "mark_reconciled": lambda s, job, now: s.mark_reconciled(job.job_id, now),
    "raise_credits_spent": lambda s, job, now: s.raise_credits_spent(job.job_id, Decimal("99")),
    # Array jobs: the parent's writes.
    "set_array_spans": lambda s, job, now: s.set_array_spans(job.job_id, ["span-a", "span-b"]),
    "save_child_event": child_event,
    "start_array": lambda s, job, now: s.start_array(job.job_id, now, now),
    "finish_array": lambda s, job, now: s.finish_array(replace(job, status=JobStatus.SUCCEEDED), now),
    # Quotas and the dispatcher (functions/adapters/dynamodb/quotas.py).
    "set_waiting_reason": lambda s, job, now: s.set_waiting_reason(job.job_id, "Waiting for quota"),
    "set_wait_reason": lambda s, job, now: s.set_wait_reason(job.job_id, "Building environment ml"),
    "claim_dispatch": lambda s, job, now: s.claim_dispatch(job.job_id, now),
    "release_dispatch": lambda s, job, now: s.release_dispatch(job.job_id),
    "record_dispatch": lambda s, job, now: s.record_dispatch(job.job_id, "batch-1"),
    # An array's spans through the dispatcher (functions/adapters/dynamodb/array_spans.py).
    "claim_span": lambda s, job, now: s.claim_span(job.job_id, 0, now),
    "release_span": lambda s, job, now: s.release_span(job.job_id, 0),
    "record_span": lambda s, job, now: s.record_span(job.job_id, 0, "batch-1"),
    # A perItem array's items ended with their parent's (functions/adapters/dynamodb/array_spans.py).
    "end_items": lambda s, job, now: s.end_items(replace(job, type=JobType.ARRAY, array_size=2), [0], now),
}


def test_every_job_update_of_the_store_is_covered_here():
    # A new update method must join UPDATES (and so these tests) to pass.
    updating = {
        name
        for name, method in inspect.getmembers(DynamoJobStore, inspect.isfunction)
        if not name.startswith("_")
        and any(
            marker in inspect.getsource(method)
            for marker in ("_update_job(", "_transition_update(", "_parent_rollup(")
        )
    }
    assert updating == set(UPDATES)


@pytest.mark.parametrize("method", sorted(UPDATES))
def test_an_update_of_a_deleted_job_creates_nothing_and_says_the_job_is_missing(stack, method):
    job = make_job(stack, "job-deleted")
    client().delete_item(TableName=JOBS, Key={"jobId": {"S": job.job_id}})

    with pytest.raises(RecordMissing):
        UPDATES[method](stack.services.store, job, stack.clock())

    assert raw_item(job.job_id) is None
    assert stack.count_items(JOBS) == 0


@pytest.mark.parametrize("method", sorted(UPDATES))
def test_an_update_of_a_job_past_its_ttl_changes_nothing_and_says_the_job_is_missing(stack, method):
    job = make_job(stack, "job-expired", ttl_in=timedelta(days=1))
    before = raw_item(job.job_id)
    stack.clock.advance(timedelta(days=1).total_seconds())

    with pytest.raises(RecordMissing):
        UPDATES[method](stack.services.store, job, stack.clock())

    assert raw_item(job.job_id) == before


def test_updates_of_a_live_job_still_work_and_a_failed_condition_is_not_a_missing_job(stack):
    store = stack.services.store
    job = make_job(stack, "job-live")
    now = stack.clock()
    assert store.claim_notification(job.job_id, "k") is True
    assert store.claim_notification(job.job_id, "k") is False  # condition, not a missing job
    assert store.claim_termination(job.job_id, now) is True
    assert store.claim_termination(job.job_id, now) is False
    assert store.raise_credits_spent(job.job_id, Decimal("2")) is True
    assert store.raise_credits_spent(job.job_id, Decimal("1")) is False
    assert store.get_job(job.job_id).credits_spent == Decimal("2")


def test_update_contacts_of_a_missing_account_creates_nothing(stack):
    with pytest.raises(RecordMissing):
        stack.services.store.update_contacts(
            Account(account_id="nobody", credit_balance=Decimal(0), email="a@b.c")
        )
    assert stack.services.store.get_account("nobody") is None


def test_a_job_past_its_ttl_is_not_read(stack):
    job = make_job(stack, "job-old", ttl_in=timedelta(hours=1))
    assert stack.services.store.get_job(job.job_id) is not None
    stack.clock.advance(3600)
    assert raw_item(job.job_id) is not None  # DynamoDB has not deleted it (TTL deletes days late)
    assert stack.services.store.get_job(job.job_id) is None
    assert list(stack.services.store.list_metered_jobs()) == []
    assert list(stack.services.store.list_stale_jobs(stack.clock() + timedelta(days=1))) == []
    assert stack.services.store.list_jobs("dev", None, 50, None) == ([], None)


def test_listing_skips_expired_jobs_with_short_pages_and_misses_none(stack):
    live = [make_job(stack, f"job-{i:02d}", status=JobStatus.QUEUED) for i in range(2)]
    stack.clock.advance(1)
    for i in range(MAX_LIST_QUERIES + 5):  # newer, and all past their TTL
        make_job(stack, f"job-x{i:02d}", status=JobStatus.QUEUED, ttl_in=timedelta(seconds=1))
    stack.clock.advance(2)

    first, token = stack.services.store.list_jobs("dev", None, 1, None)
    assert first == []  # a short page: only expired jobs were read
    assert token is not None
    seen: list[str] = []
    pages = 1
    while token is not None:
        page, token = stack.services.store.list_jobs("dev", None, 1, token)
        seen += [j.job_id for j in page]
        pages += 1
        assert pages < 50
    assert sorted(seen) == sorted(j.job_id for j in live)


def test_readers_of_many_jobs_skip_and_report_an_unreadable_item(stack):
    make_job(stack, "job-good")
    for index in ("meterPartition", "openPartition"):
        client().put_item(
            TableName=JOBS,
            Item={
                "jobId": {"S": f"job-stub-{index}"},
                index: {"S": "metered" if index == "meterPartition" else "open"},
                "lastEventAt": {"S": "0"},
            },
        )
    problems: list[UnreadableRecord] = []

    metered = list(stack.services.store.list_metered_jobs(on_unreadable=problems.append))
    stale = list(stack.services.store.list_stale_jobs(stack.clock() + timedelta(days=1), problems.append))

    assert [j.job_id for j in metered] == ["job-good"]
    assert [j.job_id for j in stale] == ["job-good"]
    assert sorted(p.key for p in problems) == ["job-stub-meterPartition", "job-stub-openPartition"]
    with pytest.raises(UnreadableRecord):
        stack.services.store.get_job("job-stub-meterPartition")
