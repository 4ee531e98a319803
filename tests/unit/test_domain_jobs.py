"""How a ``Batch Job State Change`` moves a job, and the reason a terminated job gives."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from functions.domain.jobs import (
    MAX_STATUS_REASON,
    BatchJobState,
    DispatchState,
    Job,
    apply_batch_event,
    charge_entry_id,
    describe_failure,
    ms_to_datetime,
)
from functions.domain.machine_classes import MACHINE_CLASSES
from functions.domain.status import JobStatus, event_position
from tests.builders import build_job

Q, ST, R, S, T = (
    JobStatus.QUEUED,
    JobStatus.STARTING,
    JobStatus.RUNNING,
    JobStatus.SUCCEEDED,
    JobStatus.TERMINATED,
)
SUBMITTED_AT = datetime(2026, 11, 29, 17, 20, tzinfo=UTC)
T0 = int(SUBMITTED_AT.timestamp() * 1000)
# When the events arrive: late enough for every time these tests send to be inside the job's life.
ARRIVED = SUBMITTED_AT + timedelta(days=30)
STARTED_MS = T0 + 30_250
STOPPED_MS = T0 + 95_500
BATCH_ID = "3f1c9a52-0d2e-4f3b-9a77-6b1d1b0e2c11"
LOG_STREAM = "remote-batch/default/abc123"
FAILED_REASON = "Exited with code 1"


def make_job(**overrides) -> Job:
    fields: dict[str, Any] = {
        "account_id": "alice",
        "name": "factor",
        "submitted_at": SUBMITTED_AT,
        "batch_job_id": None,
    }
    return build_job(**(fields | overrides))


def event(
    status: str,
    attempts: int = 0,
    *,
    started: int | None = None,
    stopped: int | None = None,
    exit_code: int | None = None,
    reason: str | None = None,
    log: str | None = None,
) -> BatchJobState:
    return BatchJobState(
        batch_job_id=BATCH_ID,
        job_name="job-01JDXYZ0000000000000000000",
        status=status,
        status_reason=reason,
        created_at_ms=T0,
        started_at_ms=started,
        stopped_at_ms=stopped,
        exit_code=exit_code,
        log_stream_name=log,
        attempt_count=attempts,
    )


def life(final: str) -> list[BatchJobState]:
    """One job's events in the order Batch emits them, ending SUCCEEDED or FAILED."""
    return [
        event("SUBMITTED"),
        event("PENDING"),
        event("RUNNABLE", reason="Waiting for compute"),
        event("STARTING"),
        event("RUNNING", started=STARTED_MS, log=LOG_STREAM),
        event(
            final,
            1,
            started=STARTED_MS,
            stopped=STOPPED_MS,
            exit_code=0 if final == "SUCCEEDED" else 1,
            reason=None if final == "SUCCEEDED" else "Essential container in task exited",
            log=LOG_STREAM,
        ),
    ]


def deliver(job: Job, events) -> Job:
    """Apply events one after another, as the batch_events handler would, checking invariants."""
    for state in events:
        transition = apply_batch_event(
            job, state, FAILED_REASON if state.status == "FAILED" else None, arrived_at=ARRIVED
        )
        if job.is_final:
            assert transition is None
        if transition is None:
            continue
        assert transition.before is job
        after = transition.after
        # The history only grows, by exactly what was entered.
        assert after.status_history == job.status_history + transition.entered
        assert after.event_position > job.event_position
        job = after
    return job


def in_order(final: str) -> Job:
    return deliver(make_job(), life(final))


@pytest.mark.parametrize(
    ("final", "status", "reason", "exit_code"),
    [("SUCCEEDED", S, None, 0), ("FAILED", T, FAILED_REASON, 1)],
)
def test_in_order_delivery(final, status, reason, exit_code):
    job = in_order(final)

    assert job.status is status
    assert job.status_reason == reason
    assert job.status_history == (Q, ST, R, status)
    assert job.started_at == datetime(2026, 11, 29, 17, 20, 30, 250000, tzinfo=UTC)
    assert job.completed_at == datetime(2026, 11, 29, 17, 21, 35, 500000, tzinfo=UTC)
    assert job.exit_code == exit_code
    assert job.event_position == event_position(1, final)
    assert job.batch_job_id == BATCH_ID
    assert job.log_stream_name == LOG_STREAM


def test_first_event_on_a_new_job_applies_without_entering_a_status():
    transition = apply_batch_event(make_job(), event("SUBMITTED"), arrived_at=ARRIVED)

    assert transition is not None
    assert transition.entered == ()
    assert transition.after.status is Q
    assert transition.after.event_position == event_position(0, "SUBMITTED")
    assert transition.after.batch_job_id == BATCH_ID
    assert not transition.settles


def test_status_reason_of_a_non_final_event_comes_from_the_event():
    transition = apply_batch_event(
        make_job(), event("RUNNABLE", reason="Waiting for compute capacity"), arrived_at=ARRIVED
    )

    assert transition is not None
    assert transition.after.status_reason == "Waiting for compute capacity"


def test_long_non_final_reason_is_cut():
    transition = apply_batch_event(make_job(), event("RUNNABLE", reason="x" * 5000), arrived_at=ARRIVED)

    assert transition is not None
    assert transition.after.status_reason == "x" * MAX_STATUS_REASON


def test_next_non_final_event_replaces_the_reason():
    job = deliver(make_job(), [event("RUNNABLE", reason="Waiting for compute"), event("STARTING")])

    assert job.status is ST
    assert job.status_reason is None


def test_duplicate_event_returns_none():
    job = deliver(make_job(), life("SUCCEEDED")[:5])

    assert apply_batch_event(job, life("SUCCEEDED")[4], arrived_at=ARRIVED) is None


@pytest.mark.parametrize("stale", ["SUBMITTED", "PENDING", "RUNNABLE", "STARTING"])
def test_older_event_returns_none(stale):
    job = deliver(make_job(), life("SUCCEEDED")[:5])

    assert apply_batch_event(job, event(stale), arrived_at=ARRIVED) is None


@pytest.mark.parametrize("final", ["SUCCEEDED", "FAILED"])
@pytest.mark.parametrize("attempts", [0, 1, 2, 3])
@pytest.mark.parametrize("late", ["RUNNABLE", "STARTING", "RUNNING", "SUCCEEDED", "FAILED"])
def test_final_is_never_left(final, attempts, late):
    job = in_order(final)

    assert (
        apply_batch_event(
            job, event(late, attempts, started=STARTED_MS + 1, stopped=STOPPED_MS + 1), arrived_at=ARRIVED
        )
        is None
    )


def test_late_running_after_succeeded_is_ignored():
    job = deliver(make_job(), [life("SUCCEEDED")[-1]])

    assert job.status is S
    assert apply_batch_event(job, life("SUCCEEDED")[4], arrived_at=ARRIVED) is None


def test_final_first_fills_in_starting_and_running():
    transition = apply_batch_event(make_job(), life("SUCCEEDED")[-1], arrived_at=ARRIVED)

    assert transition is not None
    assert transition.entered == (ST, R, S)
    assert transition.settles
    assert transition.after.started_at == ms_to_datetime(STARTED_MS)
    assert transition.after.completed_at == ms_to_datetime(STOPPED_MS)
    assert transition.after.exit_code == 0
    assert transition.after.log_stream_name == LOG_STREAM


def test_failed_without_starting_enters_only_terminated():
    failed = event("FAILED", 0, reason="Dependent job failed")

    transition = apply_batch_event(make_job(), failed, "Dependent job failed", arrived_at=ARRIVED)

    assert transition is not None
    assert transition.entered == (T,)
    assert transition.after.started_at is None
    assert transition.after.status_reason == "Dependent job failed"
    assert transition.settles


def test_running_records_start_time_and_log_stream():
    transition = apply_batch_event(
        make_job(), event("RUNNING", started=STARTED_MS, log=LOG_STREAM), arrived_at=ARRIVED
    )

    assert transition is not None
    assert transition.entered == (ST, R)
    assert transition.after.started_at == datetime(2026, 11, 29, 17, 20, 30, 250000, tzinfo=UTC)
    assert transition.after.completed_at is None
    assert transition.after.log_stream_name == LOG_STREAM
    assert not transition.settles


def test_succeeded_ignores_a_final_reason():
    transition = apply_batch_event(
        make_job(), life("SUCCEEDED")[-1], "should not be recorded", arrived_at=ARRIVED
    )

    assert transition is not None
    assert transition.after.status_reason is None


def test_a_retry_moves_running_back_to_queued_and_counts_again():
    # Given attempt 0 reached Running
    job = deliver(make_job(), life("SUCCEEDED")[:5])
    # When the infrastructure fails and Batch retries (attempts list now has 1 entry)
    job = deliver(job, [event("RUNNABLE", 1, reason="Host terminated")])
    # Then the job is Queued again, and attempt 0's late events change nothing
    assert job.status is Q
    assert job.status_reason == "Host terminated"
    assert job.status_history == (Q, ST, R, Q)
    for stale in life("SUCCEEDED")[:5]:
        assert apply_batch_event(job, stale, arrived_at=ARRIVED) is None
    # And the second attempt's run and end are recorded from its own times
    second_start = STOPPED_MS + 10_000
    job = deliver(
        job,
        [
            event("STARTING", 1),
            event("RUNNING", 1, started=second_start, log="stream-2"),
            event(
                "SUCCEEDED",
                2,
                started=second_start,
                stopped=second_start + 61_000,
                exit_code=0,
                log="stream-2",
            ),
        ],
    )
    assert job.status is S
    assert job.status_history == (Q, ST, R, Q, ST, R, S)
    assert job.started_at == ms_to_datetime(second_start)
    assert job.completed_at == ms_to_datetime(second_start + 61_000)
    assert job.log_stream_name == "stream-2"


def test_exit_code_is_kept_when_a_later_event_has_none():
    job = make_job(exit_code=3, event_position=0)

    transition = apply_batch_event(job, event("PENDING"), arrived_at=ARRIVED)

    assert transition is not None
    assert transition.after.exit_code == 3


def deliveries(final: str, required: range):
    """Any order, with duplicates, of the events of ``life(final)`` at ``required`` plus any others."""
    n = len(life(final))
    return st.lists(st.integers(0, n - 1), max_size=8).flatmap(
        lambda extra: st.permutations([*required, *extra])
    )


@given(
    st.sampled_from(["SUCCEEDED", "FAILED"]).flatmap(lambda f: st.tuples(st.just(f), deliveries(f, range(6))))
)
def test_any_order_with_duplicates_ends_like_in_order_delivery(case):
    final, order = case
    events = life(final)

    job = deliver(make_job(), [events[i] for i in order])

    expected = in_order(final)
    assert (job.status, job.status_history, job.event_position) == (
        expected.status,
        expected.status_history,
        expected.event_position,
    )
    assert (job.started_at, job.completed_at, job.exit_code) == (
        expected.started_at,
        expected.completed_at,
        expected.exit_code,
    )
    assert job == expected


@given(
    st.sampled_from(["SUCCEEDED", "FAILED"]).flatmap(
        lambda f: st.tuples(st.just(f), deliveries(f, range(5, 6)))
    )
)
def test_lost_events_before_the_final_one_change_nothing_at_the_end(case):
    # Only the final event is guaranteed to arrive here; anything else may be lost, repeated or late.
    final, order = case
    events = life(final)

    job = deliver(make_job(), [events[i] for i in order])

    assert job == in_order(final)


@given(st.permutations(range(9)))
def test_retried_job_in_any_order_ends_with_the_final_attempts_times(order):
    second_start = STOPPED_MS + 10_000
    second_stop = second_start + 61_000
    events = [
        event("PENDING"),
        event("RUNNABLE"),
        event("STARTING"),
        event("RUNNING", started=STARTED_MS, log="stream-1"),
        event("RUNNABLE", 1, reason="Host terminated"),
        event("STARTING", 1),
        event("RUNNING", 1, started=second_start, log="stream-2"),
        event("SUCCEEDED", 2, started=second_start, stopped=second_stop, exit_code=0, log="stream-2"),
        event("RUNNING", started=STARTED_MS, log="stream-1"),  # a duplicate of attempt 0's RUNNING
    ]

    job = deliver(make_job(), [events[i] for i in order])

    assert job.status is S
    assert job.started_at == ms_to_datetime(second_start)
    assert job.completed_at == ms_to_datetime(second_stop)
    assert job.exit_code == 0
    assert job.event_position == event_position(2, "SUCCEEDED")
    assert job.status_history[0] is Q
    assert job.status_history[-1] is S
    assert job.status_history[-3:] == (ST, R, S)


def test_running_ms_and_times():
    assert event("RUNNING", started=STARTED_MS).running_ms is None
    assert life("SUCCEEDED")[-1].running_ms == STOPPED_MS - STARTED_MS
    assert event("FAILED", started=STOPPED_MS, stopped=STARTED_MS).running_ms == 0
    assert ms_to_datetime(T0) == SUBMITTED_AT
    assert ms_to_datetime(T0 + 1).microsecond == 1000


def test_job_expires_14_days_after_submission():
    job = make_job()

    assert job.expires_at == datetime(2026, 12, 13, 17, 20, tzinfo=UTC)
    assert not job.is_expired(job.expires_at - timedelta(microseconds=1))
    assert job.is_expired(job.expires_at)


def test_charge_entry_id_is_deterministic():
    assert charge_entry_id("job-1") == charge_entry_id("job-1") == "charge#job-1"
    assert charge_entry_id("job-1") != charge_entry_id("job-2")


BASIC = MACHINE_CLASSES["Basic1x8"]
OOM = "OutOfMemoryError: Container killed due to memory usage"
TIMEOUT = "Job attempt duration exceeded timeout"
ESSENTIAL = "Essential container in task exited"


@pytest.mark.parametrize(
    ("job_fields", "machine", "batch_reason", "exit_code", "summary", "expected"),
    [
        # The service's own reason wins over everything.
        ({"termination_reason": "Aborted by user"}, BASIC, OOM, 137, "ValueError: boom", "Aborted by user"),
        (
            {"termination_reason": "CreditConstraint of 50 credits reached", "time_constraint": 60},
            BASIC,
            TIMEOUT,
            None,
            None,
            "CreditConstraint of 50 credits reached",
        ),
        # Then the worker's error summary (the exception's last line).
        ({}, BASIC, OOM, 1, "ValueError: boom", "ValueError: boom"),
        ({"time_constraint": 600}, BASIC, TIMEOUT, 1, "KeyError: 'x'", "KeyError: 'x'"),
        # Then Batch's reason made readable.
        ({}, BASIC, OOM, 137, None, "Memory limit of 8 GiB exceeded"),
        ({}, MACHINE_CLASSES["Memory192x1536"], OOM, None, None, "Memory limit of 1536 GiB exceeded"),
        ({"time_constraint": 600}, BASIC, OOM, None, None, "Memory limit of 8 GiB exceeded"),
        ({"time_constraint": 600}, BASIC, TIMEOUT, None, None, "TimeConstraint of 600 s reached"),
        ({"time_constraint": 600}, BASIC, TIMEOUT, 2, None, "TimeConstraint of 600 s reached"),
        # Then the exit code.
        ({}, BASIC, ESSENTIAL, 2, None, "Exited with code 2"),
        ({}, BASIC, None, 2, None, "Exited with code 2"),
        ({}, BASIC, "", 2, None, "Exited with code 2"),
        # Otherwise what Batch said (one line, no trailing dots), or a default.
        (
            {},
            BASIC,
            "Job cancelled by the queue's\n state limit.",
            None,
            None,
            "Job cancelled by the queue's state limit",
        ),
        ({}, BASIC, None, None, None, "Terminated by AWS Batch"),
    ],
)
def test_describe_failure_precedence(job_fields, machine, batch_reason, exit_code, summary, expected):
    job = make_job(**job_fields)

    assert describe_failure(job, machine, batch_reason, exit_code, summary) == expected


def test_describe_failure_timeout_without_time_constraint_is_not_called_a_time_constraint():
    reason = describe_failure(make_job(), BASIC, TIMEOUT, None, None)

    assert "TimeConstraint" not in reason


@pytest.mark.parametrize(
    ("credit_constraint", "time_constraint"),
    [
        (Decimal("50"), None),
        # 1 credit of Basic1x8 backs a Batch timeout of ~3 min, far below the 3600 s TimeConstraint.
        (Decimal("1"), 3600),
    ],
)
def test_describe_failure_batch_timeout_set_by_a_credit_constraint(credit_constraint, time_constraint):
    # Given a creditConstraint, which also sets the Batch timeout (docs/architecture.md "Credits"), and the
    # meter
    # down, so Batch's timeout is what stops the job
    job = make_job(credit_constraint=credit_constraint, time_constraint=time_constraint)

    reason = describe_failure(job, BASIC, TIMEOUT, None, None)

    # Then the reason is docs/http-api.md's CreditConstraint sentence, not a TimeConstraint that was not
    # reached
    assert reason == f"CreditConstraint of {credit_constraint} credits reached"


def test_describe_failure_cuts_long_reasons():
    assert describe_failure(make_job(), BASIC, None, 1, "e" * 5000) == "e" * MAX_STATUS_REASON
    assert describe_failure(make_job(), BASIC, "b" * 5000, None, None) == "b" * MAX_STATUS_REASON


def test_final_reason_is_what_a_failed_event_records():
    job = make_job(termination_reason="Aborted by user")
    failed = event("FAILED", 1, started=STARTED_MS, stopped=STOPPED_MS, exit_code=137, reason=OOM)
    reason = describe_failure(job, BASIC, failed.status_reason, failed.exit_code, None)

    transition = apply_batch_event(job, failed, reason, arrived_at=ARRIVED)

    assert transition is not None
    assert transition.after.status_reason == "Aborted by user"
    assert transition.after.exit_code == 137
    assert transition.after.status is T
    assert transition.after.credits_spent == Decimal("0.0000")  # settling is the caller's job


def test_a_job_is_gone_from_its_record_ttl_on_whether_or_not_dynamodb_deleted_it():
    job = make_job()
    assert not job.is_gone(SUBMITTED_AT + timedelta(days=400) - timedelta(seconds=1))
    assert job.is_gone(SUBMITTED_AT + timedelta(days=400))
    # The stored ttl, when the item carries one, is what counts.
    short = make_job(record_expires_at=SUBMITTED_AT + timedelta(hours=1))
    assert not short.is_gone(SUBMITTED_AT + timedelta(minutes=59))
    assert short.is_gone(SUBMITTED_AT + timedelta(hours=1))


@pytest.mark.parametrize(
    "state", [DispatchState.ADMITTED, DispatchState.DISPATCHING, DispatchState.DISPATCHED]
)
def test_an_admitted_job_holds_quota_unless_it_runs_on_a_dedicated_compute(state: DispatchState) -> None:
    assert make_job(dispatch_state=state).holds_quota
    # On a compute it runs on the compute's reservation: it holds nothing of its own.
    assert not make_job(dispatch_state=state, compute="lab").holds_quota
    assert not make_job(dispatch_state=DispatchState.HELD).holds_quota
