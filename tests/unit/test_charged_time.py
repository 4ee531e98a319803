"""Every charge lies inside the job's own life (issue 22 item 1): whatever times AWS Batch sends
(in any order, any offset from the submission and the arrival, or missing), a single job's, an array
child's, the meter's running charge and a crashed local stack's recovery are charged for time between
the job's submission and the arrival of the event that ends it, and never more than that time costs."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.adapters.batch_detail import BatchJobDetail, to_state
from functions.domain.arrays import child_template
from functions.domain.charged_time import Cause, Window, epoch_ms, final_attempt_times
from functions.domain.credits import running_cost, settle_charge
from functions.domain.jobs import BatchJobState, Job, JobType, apply_batch_event, job_rate, ms_to_datetime
from functions.domain.metering import read_meter
from functions.domain.status import JobStatus
from remote_batch_local.recovery import recover_unfinished_jobs
from remote_batch_local.recovery_arrays import settle_array
from remote_batch_local.resources import local_settings
from tests.builders import build_job
from tests.unit.test_local_recovery import SUBMITTED, _array_event, _Table

T0 = epoch_ms(SUBMITTED)
YEAR_MS = 366 * 24 * 3600 * 1000
BALANCE = Decimal(10) ** 10

# Any time, as an offset from the submission: years before it to years after.
offsets = st.integers(min_value=-3 * YEAR_MS, max_value=3 * YEAR_MS)
# When the event arrives: at the submission, seconds after it, or days.
arrivals = st.integers(min_value=0, max_value=30 * 24 * 3600 * 1000)


def single_job() -> Job:
    return build_job("job-life", account_id="alice", submitted_at=SUBMITTED, batch_job_id=None)


def array_child() -> Job:
    parent = replace(single_job(), type=JobType.ARRAY, array_size=4, child_status_counts={"Queued": 4})
    return child_template(parent, 2)


def state(status: str, attempts: int, started: int | None, stopped: int | None, observed: int | None):
    return BatchJobState(
        batch_job_id="batch-life",
        job_name="job-life",
        status=status,
        status_reason=None,
        created_at_ms=T0,
        started_at_ms=started,
        stopped_at_ms=stopped,
        exit_code=0 if status == "SUCCEEDED" else 1,
        log_stream_name=None,
        attempt_count=attempts,
        observed_at_ms=observed,
    )


def assert_inside_life(job: Job, running_ms: int | None, arrived: datetime) -> None:
    """The job's charged interval lies in [submission, arrival], and its charge is what that interval
    costs, never more than the whole life would (exact ``Decimal``s)."""
    if job.started_at is not None:
        assert SUBMITTED <= job.started_at <= arrived
    if job.completed_at is not None:
        assert SUBMITTED <= job.completed_at <= arrived
    if running_ms is None:
        return
    assert job.started_at is not None and job.completed_at is not None
    assert running_ms == epoch_ms(job.completed_at) - epoch_ms(job.started_at) >= 0
    rate = job_rate(job)
    charge = settle_charge(running_ms, rate, None, BALANCE)
    assert charge.credits == running_cost(running_ms, rate)
    assert charge.credits <= running_cost(epoch_ms(arrived) - T0, rate)


@pytest.mark.parametrize("make_job", [single_job, array_child], ids=["single", "array-child"])
@settings(max_examples=200, deadline=None)
@given(
    final=st.sampled_from(["SUCCEEDED", "FAILED"]),
    running_start=st.none() | offsets,
    running_arrival=arrivals,
    start=st.none() | offsets,
    stop=st.none() | offsets,
    observed=st.none() | offsets,
    arrival=arrivals,
    order=st.booleans(),
)
def test_every_charge_lies_inside_the_jobs_life(
    make_job, final, running_start, running_arrival, start, stop, observed, arrival, order
) -> None:
    # Given a job, maybe a RUNNING event first (its start anywhere), then the final event (its times
    # anywhere or missing), delivered in either order
    arrived = SUBMITTED + timedelta(milliseconds=max(arrival, running_arrival))
    events = [(state(final, 1, *(None if t is None else T0 + t for t in (start, stop, observed))), arrived)]
    if running_start is not None:
        running = state("RUNNING", 0, T0 + running_start, None, None)
        events.insert(0 if order else 1, (running, SUBMITTED + timedelta(milliseconds=running_arrival)))
    job = make_job()
    running_ms = None

    # When they are applied
    for event, at in events:
        transition = apply_batch_event(job, event, "Exited with code 1", arrived_at=at)
        if transition is None:
            continue
        job = transition.after
        running_ms = transition.running_ms if transition.settles else running_ms
        # Then at every step the job's times lie inside its life so far
        assert_inside_life(job, transition.running_ms, at)

    assert job.is_final
    assert_inside_life(job, running_ms, arrived)


def test_the_reported_case_charges_the_minimum_not_years() -> None:
    # A SUCCEEDED whose stop is before its start, both long before the submission.
    event = state("SUCCEEDED", 1, T0 - 2 * YEAR_MS, T0 - 2 * YEAR_MS - 5_000, T0 + 40_000)
    arrived = SUBMITTED + timedelta(seconds=41)

    transition = apply_batch_event(single_job(), event, arrived_at=arrived)

    assert transition is not None
    # the stop before the start gives way to the event's time, the start to the submission
    assert transition.after.started_at == SUBMITTED
    assert transition.after.completed_at == SUBMITTED + timedelta(seconds=40)
    assert transition.running_ms == 40_000
    # Basic1x8 at 60 credits/hour: the 60-second minimum, not 9,998 credits
    assert settle_charge(transition.running_ms, Decimal(60), None, BALANCE).credits == Decimal("1.0000")
    causes = [(c.field, c.cause) for c in transition.corrections]
    assert causes == [("stoppedAt", Cause.STOP_BEFORE_START), ("startedAt", Cause.BEFORE_SUBMISSION)]


@pytest.mark.parametrize(
    ("started", "stopped", "expected", "cause"),
    [
        (-10_000, 5_000, (0, 5_000), Cause.BEFORE_SUBMISSION),
        (1_000, 90_000, (1_000, 60_000), Cause.AFTER_ARRIVAL),
        (70_000, 80_000, (60_000, 60_000), Cause.AFTER_ARRIVAL),
        (None, None, (None, None), None),
        (2_000, None, (2_000, 60_000), Cause.MISSING),
    ],
)
def test_each_kind_of_impossible_time_is_clamped_and_reported(started, stopped, expected, cause) -> None:
    window = Window.from_ms(T0, T0 + 60_000)

    times = final_attempt_times(
        window, None if started is None else T0 + started, None if stopped is None else T0 + stopped
    )

    got = tuple(None if t is None else t - T0 for t in (times.started_ms, times.stopped_ms))
    assert got == expected
    assert (times.corrections[0].cause if times.corrections else None) == cause


@given(start=offsets, now=arrivals)
def test_the_meters_running_charge_and_caps_count_only_time_inside_the_life(start, now) -> None:
    at = SUBMITTED + timedelta(milliseconds=now)
    job = replace(
        single_job(),
        status=JobStatus.RUNNING,
        started_at=ms_to_datetime(T0 + start),
        time_constraint=3600,
        credit_constraint=Decimal("5"),
    )

    reading = read_meter(job, at)

    assert 0 <= reading.running_ms <= now
    assert reading.spent <= running_cost(now, job_rate(job))
    # a cap is reached only by time the job really had
    assert (reading.cap_reached is not None) == (
        reading.spent >= Decimal(5) or reading.running_ms >= 3_600_000
    )


def through_handler(envelope: dict[str, Any], job: Job, arrived: datetime):
    detail = BatchJobDetail.model_validate(envelope["detail"])
    return apply_batch_event(job, to_state(detail, epoch_ms(arrived)), "Stopped", arrived_at=arrived)


@settings(max_examples=150, deadline=None)
@given(stored_start=st.none() | offsets, crash=offsets, outage=arrivals)
def test_a_crashed_stacks_recovery_charges_inside_the_life_and_never_the_outage(
    stored_start, crash, outage
) -> None:
    crashed = SUBMITTED + timedelta(milliseconds=crash)
    restarted = max(crashed, SUBMITTED) + timedelta(milliseconds=outage)
    started_at = None if stored_start is None else ms_to_datetime(T0 + stored_start)
    job = replace(single_job(), status=JobStatus.RUNNING, started_at=started_at)
    published: list[dict[str, Any]] = []

    recover_unfinished_jobs(_Table([job]), local_settings(), published.append, crashed)
    transition = through_handler(published[0], job, restarted)

    assert transition is not None
    assert_inside_life(transition.after, transition.running_ms, restarted)
    if transition.running_ms is not None:
        # never charged through the outage: it ends at the crash, or at a start the crash record missed
        latest = max(crashed, min(max(started_at or SUBMITTED, SUBMITTED), restarted))
        assert transition.after.completed_at is not None and transition.after.completed_at <= latest


@settings(max_examples=100, deadline=None)
@given(child_start=st.none() | offsets, crash=offsets, outage=arrivals)
def test_a_crashed_stacks_array_children_are_charged_inside_their_life(child_start, crash, outage) -> None:
    crashed = SUBMITTED + timedelta(milliseconds=crash)
    restarted = max(crashed, SUBMITTED) + timedelta(milliseconds=outage)
    started_ms = None if child_start is None else T0 + child_start
    emitted = [_array_event("X", "PENDING"), _array_event("X:1", "RUNNING", index=1, started_ms=started_ms)]
    published: list[dict[str, Any]] = []

    settle_array(emitted, crashed, published.append, None, ("Stopped while it ran", "Stopped before it ran"))

    parent = replace(single_job(), job_id="job-array", type=JobType.ARRAY, array_size=3)
    children = [e for e in published if "index" in (e["detail"].get("arrayProperties") or {})]
    assert len(children) == 3
    for envelope in children:
        child = child_template(parent, envelope["detail"]["arrayProperties"]["index"])
        transition = through_handler(envelope, child, restarted)
        assert transition is not None
        assert_inside_life(transition.after, transition.running_ms, restarted)
