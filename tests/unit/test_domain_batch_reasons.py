"""AWS Batch's reasons as plain sentences, which attempts are free, and how a final event's times
resolve (issue 9, items 1 to 3). Pure domain: no AWS."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from functions.domain.batch_reasons import (
    ReasonFamily,
    as_sentence,
    classify,
    exit_code_sentence,
    normalize_reason,
    raw_batch_reason,
)
from functions.domain.jobs import (
    BatchJobState,
    Job,
    apply_batch_event,
    describe_failure,
    is_infrastructure_loss,
    ms_to_datetime,
    success_warnings,
)
from functions.domain.machine_classes import MACHINE_CLASSES
from functions.domain.status import JobStatus
from tests.builders import build_job

SUBMITTED_AT = datetime(2026, 11, 29, 17, 20, tzinfo=UTC)
T0 = int(SUBMITTED_AT.timestamp() * 1000)
# When the events arrive: late enough for every time these tests send to be inside the job's life.
ARRIVED = SUBMITTED_AT + timedelta(days=30)
BASIC = MACHINE_CLASSES["Basic1x8"]
MEMORY = MACHINE_CLASSES["Memory8x64"]

OOM = "OutOfMemoryError: Container killed due to memory usage"
THROTTLED_START = (
    "CannotStartContainerError: Error response from daemon: failed to initialize logging driver: "
    "failed to create Cloudwatch log stream: ThrottlingException: Rate exceeded"
)
PULL = "CannotPullContainerError: pull image manifest has been retried 5 time(s): not found"
RESOURCE = "ResourceInitializationError: unable to pull secrets or registry auth: execution resource"
INSPECT = "CannotInspectContainerError: Could not transition to inspecting; timed out after waiting 30s"
HOST = "Host EC2 (instance i-0fedcba9876543210) terminated."
SPOT = "Your Spot Task was interrupted."
TIMEOUT = "Job attempt duration exceeded timeout"
ESSENTIAL = "Essential container in task exited"


def make_job(**overrides) -> Job:
    fields: dict[str, Any] = {
        "account_id": "alice",
        "name": "factor",
        "submitted_at": SUBMITTED_AT,
        "batch_job_id": None,
    }
    return build_job(**(fields | overrides))


def state(status: str, attempts: int = 1, **fields) -> BatchJobState:
    values = {
        "batch_job_id": "b-1",
        "job_name": "job-01JDXYZ0000000000000000000",
        "status": status,
        "status_reason": None,
        "created_at_ms": T0,
        "started_at_ms": None,
        "stopped_at_ms": None,
        "exit_code": None,
        "log_stream_name": None,
        "attempt_count": attempts,
    }
    return BatchJobState(**(values | fields))


def running_job(started_ms: int) -> Job:
    job = make_job()
    transition = apply_batch_event(job, state("RUNNING", 0, started_at_ms=started_ms), arrived_at=ARRIVED)
    assert transition is not None
    return transition.after


# -- sentences ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Host EC2 (instance i-1) terminated.", "Host EC2 (instance i-1) terminated"),
        ("Waiting for capacity..", "Waiting for capacity"),
        ("Waiting for capacity. .", "Waiting for capacity"),
        ("  two\n lines \t here . ", "two lines here"),
        ("...", None),
        ("", None),
        (None, None),
    ],
)
def test_normalize_reason_flattens_and_drops_trailing_dots(raw, expected):
    assert normalize_reason(raw) == expected


@given(st.text(max_size=300).filter(lambda t: normalize_reason(t) is not None))
def test_a_reason_made_a_sentence_never_ends_in_two_stops(text):
    sentence = as_sentence(text)

    assert not sentence.endswith("..")
    assert not sentence.endswith(". .")
    assert sentence.endswith((".", "!", "?", "…"))
    assert not (normalize_reason(text) or "").endswith(".")


@pytest.mark.parametrize(
    ("reason", "family"),
    [
        (OOM, ReasonFamily.OUT_OF_MEMORY),
        (THROTTLED_START, ReasonFamily.CANNOT_START_CONTAINER),
        (PULL, ReasonFamily.CANNOT_PULL_CONTAINER),
        (RESOURCE, ReasonFamily.RESOURCE_INITIALIZATION),
        (INSPECT, ReasonFamily.CANNOT_INSPECT_CONTAINER),
        ("CannotCreateContainerError: API error (500)", ReasonFamily.CANNOT_CREATE_CONTAINER),
        (HOST, ReasonFamily.HOST_TERMINATED),
        (SPOT, ReasonFamily.SPOT_INTERRUPTED),
        (TIMEOUT, ReasonFamily.TIMEOUT),
        ("Task failed to start", ReasonFamily.TASK_FAILED_TO_START),
        (ESSENTIAL, ReasonFamily.CONTAINER_EXITED),
        ("Something new AWS says", None),
    ],
)
def test_classify_knows_the_aws_batch_families(reason, family):
    assert classify(reason) is family


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (1, "Exited with code 1"),
        (2, "Exited with code 2"),
        (137, "Killed by signal SIGKILL (stopped from outside, often for using too much memory)"),
        (139, "Killed by signal SIGSEGV (segmentation fault)"),
        (134, "Killed by signal SIGABRT (aborted)"),
        (143, "Killed by signal SIGTERM (asked to stop)"),
        (138, "Killed by signal SIGUSR1"),
        (255, "Exited with code 255"),
    ],
)
def test_exit_code_sentences(code, expected):
    assert exit_code_sentence(code) == expected


# -- describe_failure: every place Batch puts a reason ----------------------------------------------


@pytest.mark.parametrize(
    ("machine", "reasons", "exit_code", "expected"),
    [
        # The inputs.
        (BASIC, (OOM, ESSENTIAL), 1, "Memory limit of 8 GiB exceeded"),
        (MEMORY, (OOM,), 137, "Memory limit of 64 GiB exceeded"),
        (
            BASIC,
            (THROTTLED_START,),
            None,
            "AWS Batch could not start the job's container (an AWS rate limit); "
            "its running time was not charged",
        ),
        (
            BASIC,
            (ESSENTIAL, HOST),
            None,
            "AWS took away the machine running the job (EC2 instance i-0fedcba9876543210): the machine "
            "was shut down; its running time was not charged",
        ),
        (
            BASIC,
            (SPOT,),
            143,
            "AWS took away the machine running the job: a Spot reclaim; its running time was not charged",
        ),
        (
            BASIC,
            (PULL,),
            None,
            "The job's container image could not be downloaded; its running time was not charged",
        ),
        (
            BASIC,
            (RESOURCE,),
            None,
            "AWS Batch could not prepare the job's resources (network, log or secret "
            "set-up); its running time was not charged",
        ),
        (BASIC, (TIMEOUT,), None, "The job ran longer than its AWS Batch time limit"),
        # Exit codes without a reason that says more.
        (BASIC, (ESSENTIAL,), 137, exit_code_sentence(137)),
        (BASIC, (), 137, exit_code_sentence(137)),
        (BASIC, (ESSENTIAL,), 139, "Killed by signal SIGSEGV (segmentation fault)"),
        (BASIC, (ESSENTIAL,), 3, "Exited with code 3"),
    ],
)
def test_describe_failure_maps_each_family_to_a_plain_sentence(machine, reasons, exit_code, expected):
    reason = describe_failure(make_job(), machine, reasons, exit_code, None)

    assert reason == expected
    assert not reason.endswith(".")


@pytest.mark.parametrize("where", ["container", "attempt_container", "attempt_status", "job_status"])
def test_the_reason_is_found_wherever_batch_puts_it(where):
    # BatchJobState.reasons: container.reason, attempts[-1].container.reason and .statusReason
    # (container_reasons, most specific first), then the job's statusReason.
    fields: dict[str, Any] = {"exit_code": 1}
    if where == "job_status":
        fields["status_reason"] = OOM
    else:
        fields["container_reasons"] = (OOM,)
        fields["status_reason"] = ESSENTIAL
    failed = state("FAILED", started_at_ms=T0, stopped_at_ms=T0 + 5_000, **fields)

    assert describe_failure(make_job(), BASIC, failed.reasons, failed.exit_code, None) == (
        "Memory limit of 8 GiB exceeded"
    )


def test_raw_batch_reason_keeps_every_distinct_text_on_one_line():
    assert raw_batch_reason((OOM, f" {ESSENTIAL}\n", OOM)) == f"{OOM} | {ESSENTIAL}"
    assert raw_batch_reason(()) is None


@pytest.mark.parametrize(
    ("reasons", "summary", "termination", "lost"),
    [
        ((HOST,), None, None, True),
        ((SPOT,), None, None, True),
        ((THROTTLED_START,), None, None, True),
        ((PULL,), None, None, True),
        ((RESOURCE,), None, None, True),
        ((INSPECT,), None, None, True),
        ((OOM,), None, None, False),
        ((TIMEOUT,), None, None, False),
        ((ESSENTIAL,), None, None, False),
        ((), None, None, False),
        # The user's code failed first, or the service itself stopped the job: not infrastructure.
        ((HOST,), "ValueError: boom", None, False),
        ((HOST,), None, "Aborted by user", False),
    ],
)
def test_which_final_attempts_are_lost_to_infrastructure(reasons, summary, termination, lost):
    job = make_job(termination_reason=termination)

    assert is_infrastructure_loss(job, reasons, summary) is lost


def test_a_job_that_succeeded_while_a_process_was_killed_for_memory_has_a_warning():
    (warning,) = success_warnings(BASIC, (OOM,))

    assert "Memory limit of 8 GiB exceeded" in warning
    assert success_warnings(BASIC, (ESSENTIAL,)) == ()
    assert success_warnings(BASIC, ()) == ()


def test_a_succeeded_event_with_oom_stays_succeeded_with_the_warning_and_raw_reason():
    job = running_job(T0)
    event = state(
        "SUCCEEDED",
        started_at_ms=T0,
        stopped_at_ms=T0 + 90_000,
        exit_code=0,
        container_reasons=(OOM,),
        status_reason=ESSENTIAL,
    )

    transition = apply_batch_event(
        job, event, warnings=success_warnings(BASIC, event.reasons), arrived_at=ARRIVED
    )

    assert transition is not None
    assert transition.after.status is JobStatus.SUCCEEDED
    assert transition.after.status_reason is None
    assert transition.after.warnings == success_warnings(BASIC, (OOM,))
    assert transition.after.batch_reason == f"{OOM} | {ESSENTIAL}"
    assert transition.running_ms == 90_000


# -- times -------------------------------------------------------------------------------------------


def test_a_stop_before_the_start_gives_no_negative_duration_and_no_completion_before_start():
    job = running_job(T0 + 60_000)
    backwards = state(
        "SUCCEEDED",
        started_at_ms=T0 + 60_000,
        stopped_at_ms=T0 + 10_000,
        exit_code=0,
        observed_at_ms=T0 + 10_000,
    )

    transition = apply_batch_event(job, backwards, arrived_at=ARRIVED)

    assert transition is not None
    assert transition.after.completed_at == transition.after.started_at == ms_to_datetime(T0 + 60_000)
    assert transition.running_ms == 0


def test_a_stop_before_the_start_takes_the_events_time_when_that_is_later():
    job = running_job(T0)
    backwards = state(
        "SUCCEEDED", started_at_ms=T0, stopped_at_ms=T0 - 5_000, exit_code=0, observed_at_ms=T0 + 120_000
    )

    transition = apply_batch_event(job, backwards, arrived_at=ARRIVED)

    assert transition is not None
    assert transition.after.completed_at == ms_to_datetime(T0 + 120_000)
    assert transition.running_ms == 120_000


def test_a_final_event_without_started_at_uses_the_start_the_job_knows():
    job = running_job(T0)
    failed = state("FAILED", stopped_at_ms=T0 + 603_000, exit_code=1, status_reason=ESSENTIAL)

    transition = apply_batch_event(job, failed, "Exited with code 1", arrived_at=ARRIVED)

    assert transition is not None
    assert transition.after.started_at == ms_to_datetime(T0)
    assert transition.after.completed_at == ms_to_datetime(T0 + 603_000)
    assert transition.running_ms == 603_000


def test_a_final_event_without_any_time_uses_the_known_start_and_the_events_time():
    job = running_job(T0)
    failed = state("FAILED", exit_code=1, observed_at_ms=T0 + 600_000)

    transition = apply_batch_event(job, failed, "Exited with code 1", arrived_at=ARRIVED)

    assert transition is not None
    assert transition.running_ms == 600_000


def test_a_start_from_an_earlier_attempt_is_not_reused_after_a_retry():
    job = running_job(T0)
    retried = apply_batch_event(job, state("RUNNABLE", 1, status_reason=HOST), arrived_at=ARRIVED)
    assert retried is not None
    failed = state("FAILED", 1, observed_at_ms=T0 + 900_000, status_reason="Job cancelled")

    transition = apply_batch_event(retried.after, failed, "Job cancelled", arrived_at=ARRIVED)

    assert transition is not None
    assert transition.running_ms is None  # the final attempt never ran: nothing to charge


def test_an_attempt_lost_to_infrastructure_has_no_running_time_to_charge():
    job = running_job(T0)
    lost = state("FAILED", started_at_ms=T0, stopped_at_ms=T0 + 1_200_000, status_reason=HOST)

    transition = apply_batch_event(
        job, lost, describe_failure(job, BASIC, lost.reasons, None, None), charged=False, arrived_at=ARRIVED
    )

    assert transition is not None
    assert transition.running_ms is None
    assert transition.after.completed_at is not None and transition.after.started_at is not None
    assert transition.after.completed_at - transition.after.started_at == timedelta(seconds=1200)
    assert transition.after.credits_spent == Decimal("0.0000")


@given(
    start=st.none() | st.integers(min_value=0, max_value=10**7),
    stop=st.none() | st.integers(min_value=0, max_value=10**7),
    observed=st.none() | st.integers(min_value=0, max_value=10**7),
    known=st.none() | st.integers(min_value=0, max_value=10**7),
    status=st.sampled_from(["SUCCEEDED", "FAILED"]),
)
def test_final_times_never_run_backwards(start, stop, observed, known, status):
    job = running_job(T0 + known) if known is not None else make_job()
    final = state(
        status,
        started_at_ms=None if start is None else T0 + start,
        stopped_at_ms=None if stop is None else T0 + stop,
        observed_at_ms=None if observed is None else T0 + observed,
    )

    transition = apply_batch_event(
        job, final, "Terminated" if status == "FAILED" else None, arrived_at=ARRIVED
    )

    assert transition is not None
    after = transition.after
    if after.started_at is not None and after.completed_at is not None:
        assert after.completed_at >= after.started_at
    assert transition.running_ms is None or transition.running_ms >= 0
    if start is not None or known is not None:
        assert transition.running_ms is not None


def test_a_final_start_after_its_stop_gives_way_to_the_start_the_running_event_gave():
    job = running_job(T0)
    odd = state("SUCCEEDED", started_at_ms=T0 + 60_000, stopped_at_ms=T0 + 20_000, exit_code=0)

    transition = apply_batch_event(job, odd, arrived_at=ARRIVED)

    assert transition is not None
    assert transition.after.started_at == ms_to_datetime(T0)
    assert transition.after.completed_at == ms_to_datetime(T0 + 20_000)
    assert transition.running_ms == 20_000


@pytest.mark.parametrize(
    ("reasons", "exit_code", "expected"),
    [
        (("Local stack stopped while the job ran",), 143, "Local stack stopped while the job ran"),
        (("Terminated by the user.", ESSENTIAL), 143, "Terminated by the user"),
        ((ESSENTIAL,), 143, "Killed by signal SIGTERM (asked to stop)"),
        ((ESSENTIAL,), None, ESSENTIAL),
    ],
)
def test_a_reason_the_service_does_not_know_says_more_than_an_exit_code(reasons, exit_code, expected):
    assert describe_failure(make_job(), BASIC, reasons, exit_code, None) == expected


@pytest.mark.parametrize(
    ("what", "error_type"), [("The job's Python", "Killed"), ("Command 'a.out'", "CalledProcessError")]
)
def test_a_death_by_sigsegv_reads_the_same_from_the_worker_and_from_the_exit_code(what, error_type):
    # Given the worker's outcome of a process killed by SIGSEGV (the job side, or a command), and a
    # container that exited 139 with no outcome (the local executor and AWS Batch report that)
    import json

    from functions.domain.outcomes import error_summary
    from worker.encoding import messages_document
    from worker.runner import exit_code_of, killed_by_signal

    document = json.loads(messages_document([], killed_by_signal(error_type, what, 11)))

    # Then both say it in the one sentence, and the exit code is 128 + 11 either way
    expected = "Killed by signal SIGSEGV (segmentation fault)"
    assert error_summary(document["error"]) == expected
    assert exit_code_sentence(exit_code_of(-11)) == expected
    assert document["error"]["message"] == f"{what} was killed by signal SIGSEGV (11)."


def test_an_earlier_workers_signal_reason_is_kept_and_a_bad_signal_field_ignored():
    from functions.domain.outcomes import error_summary

    earlier = {"type": "Killed", "message": "m", "traceback": "", "reason": "Killed by signal SIGSEGV (11)"}
    assert error_summary(earlier) == "Killed by signal SIGSEGV (11)"
    assert error_summary({**earlier, "signal": "11"}) == "Killed by signal SIGSEGV (11)"
    assert error_summary({**earlier, "signal": 999}) == "Killed by signal SIGSEGV (11)"
