"""A STARTING or RUNNING event written without reading the job gives the job ``apply_batch_event`` gives."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from functions.domain.jobs import BatchJobState, JobType, apply_batch_event
from functions.domain.presumed import presume_transition
from functions.domain.status import JobStatus
from tests.builders import build_job

SUBMITTED_AT = datetime(2026, 11, 29, 17, 20, tzinfo=UTC)
T0 = int(SUBMITTED_AT.timestamp() * 1000)
# When the events arrive: late enough for every time these tests send to be inside the job's life.
ARRIVED = SUBMITTED_AT + timedelta(days=30)
JOB_ID = "job-01JDXYZ0000000000000000000"
BATCH_ID = "3f1c9a52-0d2e-4f3b-9a77-6b1d1b0e2c11"


def state(status: str, **fields) -> BatchJobState:
    values = {
        "batch_job_id": BATCH_ID,
        "job_name": JOB_ID,
        "status": status,
        "status_reason": None,
        "created_at_ms": T0,
        "started_at_ms": None,
        "stopped_at_ms": None,
        "exit_code": None,
        "log_stream_name": None,
        "attempt_count": 0,
    }
    return BatchJobState(**(values | fields))


@given(
    status=st.sampled_from(["STARTING", "RUNNING"]),
    attempts=st.integers(0, 3),
    started=st.none() | st.integers(T0, T0 + 10**7),
    exit_code=st.none() | st.integers(0, 255),
    reason=st.none() | st.sampled_from(["", "  ", "Waiting for 2 vCPUs", "x" * 2000]),
    log=st.none() | st.just("remote-batch/default/abc"),
    known_batch_id=st.booleans(),
    known_start=st.booleans(),
    history=st.sampled_from([(JobStatus.QUEUED,), (JobStatus.QUEUED, JobStatus.STARTING)]),
)
def test_the_presumed_transition_is_the_one_applied_to_the_job_as_read(
    status, attempts, started, exit_code, reason, log, known_batch_id, known_start, history
) -> None:
    event = state(
        status,
        attempt_count=attempts,
        started_at_ms=started,
        exit_code=exit_code,
        status_reason=reason,
        log_stream_name=log,
    )
    presumed = presume_transition(event, ARRIVED)
    assert presumed is not None
    job = build_job(
        job_id=JOB_ID,
        account_id="alice",
        name="factor",
        submitted_at=SUBMITTED_AT,
        status=presumed.presumed,
        status_history=history,
        event_position=presumed.before,
        batch_job_id=BATCH_ID if known_batch_id else None,
        started_at=SUBMITTED_AT if known_start else None,
        log_stream_name="older/stream",
        exit_code=None,
    )
    assert presumed.holds_for(job)

    transition = apply_batch_event(job, event, arrived_at=ARRIVED)

    assert transition is not None
    assert presumed.apply(job) == transition.after


def test_starting_presumes_queued_and_running_presumes_starting() -> None:
    starting, running = (
        presume_transition(state("STARTING"), ARRIVED),
        presume_transition(state("RUNNING", started_at_ms=T0), ARRIVED),
    )

    assert starting is not None and running is not None
    assert (starting.presumed, starting.before, starting.target, starting.entered) == (
        JobStatus.QUEUED,
        -1,  # no event yet: the rule leaves out a first attempt's PENDING and RUNNABLE
        JobStatus.STARTING,
        (JobStatus.STARTING,),
    )
    assert (running.presumed, running.before, running.target, running.entered) == (
        JobStatus.STARTING,
        3,  # its STARTING
        JobStatus.RUNNING,
        (JobStatus.RUNNING,),
    )
    retried = presume_transition(state("STARTING", attempt_count=1), ARRIVED)
    assert retried is not None
    assert retried.before == 12  # the retry's RUNNABLE


def test_other_events_and_arrays_are_not_presumed() -> None:
    for status in ("SUBMITTED", "PENDING", "RUNNABLE", "SUCCEEDED", "FAILED"):
        assert presume_transition(state(status), ARRIVED) is None
    assert presume_transition(state("RUNNING", array_index=2), ARRIVED) is None
    assert presume_transition(state("RUNNING", array_size=3), ARRIVED) is None


def test_a_job_elsewhere_does_not_hold_the_presumption() -> None:
    presumed = presume_transition(state("RUNNING", attempt_count=1), ARRIVED)
    assert presumed is not None
    job = build_job(
        job_id=JOB_ID,
        account_id="alice",
        submitted_at=SUBMITTED_AT,
        status=JobStatus.STARTING,
        event_position=13,
        batch_job_id=BATCH_ID,
    )
    assert presumed.holds_for(job)

    assert not presumed.holds_for(replace(job, status=JobStatus.QUEUED))  # STARTING was lost
    assert not presumed.holds_for(replace(job, event_position=14))  # this event (or a later one) applied
    assert not presumed.holds_for(replace(job, event_position=12))  # its STARTING not applied
    assert not presumed.holds_for(replace(job, batch_job_id="another-batch-job"))
    assert not presumed.holds_for(replace(job, type=JobType.ARRAY))
    assert not presumed.holds_for(replace(job, job_id="job-other"))
