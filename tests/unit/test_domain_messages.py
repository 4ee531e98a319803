"""What a status notification says (docs/architecture.md "Notifications"); SMS within 140 characters."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from functions.domain.jobs import Job, JobType, PayloadKind
from functions.domain.machine_classes import GeoZone
from functions.domain.messages import SMS_LIMIT, compose_message, format_elapsed
from functions.domain.notifications import AUTOMATIC_RULES, DueNotification
from functions.domain.status import JobStatus

SUBMITTED_AT = datetime(2026, 11, 29, 17, 20, tzinfo=UTC)
JOB_ID = "job-01JDXYZ0000000000000000000"


def make_job(**overrides) -> Job:
    fields = {
        "job_id": JOB_ID,
        "account_id": "alice",
        "name": "factor",
        "type": JobType.SINGLE,
        "payload_kind": PayloadKind.CODE,
        "machine_class": "Basic1x8",
        "geo_zone": GeoZone.EUROPEAN_UNION,
        "credit_constraint": None,
        "time_constraint": None,
        "notifications": AUTOMATIC_RULES,
        "submitted_at": SUBMITTED_AT,
    }
    return Job(**(fields | overrides))


def due(event: str, status: JobStatus, method: str = "Email", occurrence: int = 3) -> DueNotification:
    return DueNotification(f"{event}#{occurrence}/{method}", event, method, status, occurrence)


def terminated_job(reason: str | None = "Memory limit of 8 GiB exceeded", **overrides) -> Job:
    fields = {
        "status": JobStatus.TERMINATED,
        "status_reason": reason,
        "credits_spent": Decimal("1.0167"),
        "started_at": SUBMITTED_AT + timedelta(seconds=30),
        "completed_at": SUBMITTED_AT + timedelta(hours=1, minutes=2, seconds=3),
    }
    return make_job(**(fields | overrides))


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (42, "42s"),
        (59.99, "59s"),
        (60, "1m 0s"),
        (61, "1m 1s"),
        (3599, "59m 59s"),
        (3600, "1h 0m 0s"),
        (3723, "1h 2m 3s"),
        (90061, "25h 1m 1s"),
        (-5, "0s"),
    ],
)
def test_format_elapsed(seconds, text):
    assert format_elapsed(seconds) == text


def test_email_for_a_terminated_job_says_everything():
    job = terminated_job()
    now = SUBMITTED_AT + timedelta(days=3)  # the final job's elapsed stops at completedAt

    subject, body = compose_message(job, due("JobCompleted", JobStatus.TERMINATED), now)

    assert "factor" in subject
    assert "Terminated" in subject
    for text in (
        "factor",
        JOB_ID,
        "JobCompleted",
        "Terminated",
        "Memory limit of 8 GiB exceeded",
        "1.0167",
        "1h 2m 3s",
        "Basic1x8",
        "EuropeanUnion",
    ):
        assert text in body


def test_unnamed_job_is_called_by_its_id():
    job = terminated_job(name=None)

    subject, body = compose_message(job, due("JobCompleted", JobStatus.TERMINATED), SUBMITTED_AT)

    assert JOB_ID in subject
    assert f"Job: {JOB_ID}" in body


def test_running_job_elapsed_runs_to_now():
    job = make_job(status=JobStatus.RUNNING, started_at=SUBMITTED_AT + timedelta(seconds=5))

    _, body = compose_message(
        job, due("JobStarted", JobStatus.RUNNING, occurrence=2), SUBMITTED_AT + timedelta(seconds=42)
    )

    assert "Elapsed since submission: 42s" in body
    assert "JobStarted" in body
    assert "Credits spent: 0.0000" in body


def test_reason_is_only_told_for_the_status_it_belongs_to():
    # A JobStarting notification sent after the job already ended must not carry the end's reason.
    job = terminated_job(reason="Aborted by user")

    _, email = compose_message(job, due("JobStarting", JobStatus.STARTING, occurrence=1), SUBMITTED_AT)
    _, sms = compose_message(job, due("JobStarting", JobStatus.STARTING, "SMS", 1), SUBMITTED_AT)

    assert "Aborted by user" not in email
    assert "Aborted by user" not in sms


def test_sms_for_a_terminated_job():
    job = terminated_job()

    subject, body = compose_message(job, due("JobCompleted", JobStatus.TERMINATED, "SMS"), SUBMITTED_AT)

    assert len(body) <= SMS_LIMIT == 140
    for text in (
        "factor",
        "JobCompleted",
        "Terminated",
        "Memory limit of 8 GiB exceeded",
        "1.0167",
        "1h 2m 3s",
    ):
        assert text in body
    assert "factor" in subject


def test_sms_with_a_1000_character_reason_stays_within_140_and_keeps_the_credits():
    job = terminated_job(reason="x" * 1000)

    _, body = compose_message(job, due("JobCompleted", JobStatus.TERMINATED, "SMS"), SUBMITTED_AT)

    assert len(body) <= 140
    assert "factor" in body
    # docs/architecture.md: messages say the credits spent; a long reason must not push them out.
    assert "1.0167" in body


@given(
    name=st.none() | st.text(min_size=1, max_size=128),
    reason=st.none() | st.text(max_size=1000),
    credits=st.integers(min_value=0, max_value=10**12).map(lambda n: Decimal(n).scaleb(-4)),
    status=st.sampled_from(list(JobStatus)),
)
def test_sms_never_exceeds_140_characters(name, reason, credits, status):
    job = make_job(name=name, status=status, status_reason=reason, credits_spent=credits)

    _, body = compose_message(job, due("JobStatusChanged", status, "SMS"), SUBMITTED_AT + timedelta(days=400))

    assert len(body) <= 140


WARNING = "A process of the job was killed for using too much memory (Memory limit of 8 GiB exceeded)"


@pytest.mark.parametrize("method", ["Email", "SMS"])
def test_the_completion_of_a_job_that_succeeded_with_a_warning_says_so(method):
    job = terminated_job(reason=None, status=JobStatus.SUCCEEDED, warnings=(WARNING,))

    _, body = compose_message(job, due("JobCompleted", JobStatus.SUCCEEDED, method), SUBMITTED_AT)

    assert "Succeeded" in body
    assert "killed for using too much memory" in body
    if method == "Email":
        assert f"Warning: {WARNING}" in body.splitlines()
    assert len(body) <= SMS_LIMIT or method == "Email"


@pytest.mark.parametrize(
    "reason", ["Host EC2 (instance i-1) terminated.", "Job cancelled. .", "ValueError: bad value.."]
)
def test_no_notification_ends_a_reason_with_two_stops(reason):
    job = terminated_job(reason=reason)

    for method in ("Email", "SMS"):
        _, body = compose_message(job, due("JobCompleted", JobStatus.TERMINATED, method), SUBMITTED_AT)
        assert ".." not in body
        assert ". ." not in body


def test_an_arrays_completion_says_how_many_children_succeeded():
    from functions.domain.messages import children_line

    job = make_job(
        type=JobType.ARRAY,
        array_size=1000,
        status=JobStatus.TERMINATED,
        child_status_counts={"Succeeded": 997, "Terminated": 3, "Queued": 0},
    )
    assert children_line(job) == "Children: 997 of 1000 succeeded"
    running = make_job(
        type=JobType.ARRAY, array_size=10, child_status_counts={"Succeeded": 4, "Terminated": 1, "Running": 5}
    )
    assert children_line(running) == "Children: 5 of 10 finished, 4 succeeded"
    assert children_line(make_job()) is None
