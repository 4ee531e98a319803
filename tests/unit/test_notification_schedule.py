"""What a job owes when (``due_notifications``): status events plus the progress events the meter sends
(Hourly, Daily, HoursElapsed, JobCreditsUsed, TimeConstraintNear), each key at most once."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from functions.domain.jobs import Job, JobType, PayloadKind
from functions.domain.machine_classes import GeoZone
from functions.domain.notification_schedule import due_notifications
from functions.domain.notifications import normalize_notifications
from functions.domain.status import JobStatus

T0 = datetime(2026, 11, 29, 17, 20, tzinfo=UTC)
RUNNING_HISTORY = (JobStatus.QUEUED, JobStatus.STARTING, JobStatus.RUNNING)
ISSUE_RULES = [
    {"events": ["Hourly", {"HoursElapsed": 2}, {"JobCreditsUsed": 20000}], "methods": ["Email", "SMS"]}
]


def running_job(spec: Any, *, credits: str = "0", time_constraint: int | None = None) -> Job:
    """A job submitted and started at T0, Running since."""
    return Job(
        job_id="job-01TEST",
        account_id="ana",
        name="sim",
        type=JobType.SINGLE,
        payload_kind=PayloadKind.CODE,
        machine_class="Memory192x1536",
        geo_zone=GeoZone.UNITED_STATES,
        credit_constraint=None,
        time_constraint=time_constraint,
        notifications=normalize_notifications(spec),
        submitted_at=T0,
        status=JobStatus.RUNNING,
        status_history=RUNNING_HISTORY,
        credits_spent=Decimal(credits),
        started_at=T0,
    )


def finished(job: Job, after: timedelta) -> Job:
    return replace(
        job,
        status=JobStatus.SUCCEEDED,
        status_history=(*job.status_history, JobStatus.SUCCEEDED),
        completed_at=T0 + after,
    )


def sent(job: Job, now: datetime) -> Job:
    """``job`` after it sent everything it owed at ``now``."""
    keys = {d.key for d in due_notifications(job, now)}
    return replace(job, sent_notifications=job.sent_notifications | keys)


def counts(job: Job, now: datetime) -> Counter[tuple[str, str]]:
    return Counter((d.event, d.method) for d in due_notifications(job, now))


def test_issue_scenario_5h10m_and_45000_credits():
    # Given a job Running for 5 h 10 min that has spent 45,000 credits
    job = running_job(ISSUE_RULES, credits="45000")
    now = T0 + timedelta(hours=5, minutes=10)

    # When asked what it owes
    due = due_notifications(job, now)

    # Then 5 Hourly, 2 HoursElapsed and 2 JobCreditsUsed per method, nothing else
    assert Counter((d.event, d.method) for d in due) == {
        ("Hourly", "Email"): 5,
        ("Hourly", "SMS"): 5,
        ("HoursElapsed:2", "Email"): 2,
        ("HoursElapsed:2", "SMS"): 2,
        ("JobCreditsUsed:20000", "Email"): 2,
        ("JobCreditsUsed:20000", "SMS"): 2,
    }
    keys = [d.key for d in due]
    assert len(keys) == len(set(keys)) == 18
    assert {"Hourly#5/SMS", "HoursElapsed:2#2/Email", "JobCreditsUsed:20000#2/SMS"} <= set(keys)
    assert all(d.status == JobStatus.RUNNING for d in due)
    # and once their keys are sent, nothing more at the same moment
    assert due_notifications(sent(job, now), now) == []


def test_progress_accrues_one_occurrence_at_a_time():
    job = running_job(ISSUE_RULES)
    assert due_notifications(job, T0 + timedelta(minutes=59, seconds=59)) == []
    job = sent(job, T0 + timedelta(hours=1))
    assert job.sent_notifications == {"Hourly#1/Email", "Hourly#1/SMS"}
    assert counts(job, T0 + timedelta(hours=2)) == {
        ("Hourly", "Email"): 1,
        ("Hourly", "SMS"): 1,
        ("HoursElapsed:2", "Email"): 1,
        ("HoursElapsed:2", "SMS"): 1,
    }


def test_daily_counts_whole_days_while_running():
    job = running_job("Daily")
    assert due_notifications(job, T0 + timedelta(hours=23, minutes=59)) == []
    due = due_notifications(job, T0 + timedelta(days=2, hours=3))
    assert [d.key for d in due] == ["Daily#1/Email", "Daily#2/Email"]


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [(0, []), (799, []), (800, ["TimeConstraintNear#1/Email"]), (999, ["TimeConstraintNear#1/Email"])],
)
def test_time_constraint_near_from_80_percent(seconds, expected):
    job = running_job("TimeConstraintNear", time_constraint=1000)
    assert [d.key for d in due_notifications(job, T0 + timedelta(seconds=seconds))] == expected


def test_time_constraint_near_fires_once():
    job = sent(running_job("TimeConstraintNear", time_constraint=1000), T0 + timedelta(seconds=800))
    assert job.sent_notifications == {"TimeConstraintNear#1/Email"}
    assert due_notifications(job, T0 + timedelta(seconds=990)) == []


def test_time_constraint_near_needs_a_time_constraint():
    assert due_notifications(running_job("TimeConstraintNear"), T0 + timedelta(days=3)) == []


def test_hourly_and_hours_elapsed_stop_once_final():
    job = sent(running_job(ISSUE_RULES), T0 + timedelta(hours=2, minutes=30))
    done = finished(job, timedelta(hours=2, minutes=40))

    assert due_notifications(done, T0 + timedelta(hours=9)) == []


def test_job_credits_used_still_owed_when_final():
    # The final settlement may cross a multiple after the last tick.
    job = finished(
        running_job([{"events": [{"JobCreditsUsed": 20000}]}], credits="20000"), timedelta(hours=2)
    )
    assert [d.key for d in due_notifications(job, T0 + timedelta(hours=9))] == [
        "JobCreditsUsed:20000#1/Email"
    ]


def test_hours_elapsed_fractional():
    job = running_job([{"events": [{"HoursElapsed": 0.5}], "methods": ["SMS"]}])

    due = due_notifications(job, T0 + timedelta(hours=5, minutes=10))

    assert [d.key for d in due] == [f"HoursElapsed:0.5#{k}/SMS" for k in range(1, 11)]
    assert {d.event for d in due} == {"HoursElapsed:0.5"}


def test_hours_elapsed_counts_from_submission_not_start():
    job = replace(running_job({"events": [{"HoursElapsed": 2}]}), started_at=T0 + timedelta(hours=1))
    assert [d.key for d in due_notifications(job, T0 + timedelta(hours=2))] == ["HoursElapsed:2#1/Email"]


def test_job_credits_used_one_per_multiple_crossed_in_one_step():
    job = running_job(
        [{"events": [{"JobCreditsUsed": 20000}], "methods": ["Email", "SMS"]}], credits="19999.9999"
    )
    assert due_notifications(job, T0 + timedelta(hours=2)) == []
    job = sent(replace(job, credits_spent=Decimal("20000")), T0 + timedelta(hours=2))
    assert job.sent_notifications == {"JobCreditsUsed:20000#1/Email", "JobCreditsUsed:20000#1/SMS"}

    # one step from 20,000 to 85,000 crosses 40,000, 60,000 and 80,000
    due = due_notifications(replace(job, credits_spent=Decimal("85000")), T0 + timedelta(hours=3))

    assert [d.key for d in due] == [
        f"JobCreditsUsed:20000#{k}/{m}" for k in (2, 3, 4) for m in ("Email", "SMS")
    ]


def test_automatic():
    job = running_job("Automatic", credits="45000")
    now = T0 + timedelta(hours=5, minutes=10)
    assert [d.key for d in due_notifications(job, now)] == [
        "JobStarting#1/Email",
        "JobCreditsUsed:20000#1/Email",
        "JobCreditsUsed:20000#2/Email",
    ]
    done = finished(sent(job, now), timedelta(hours=5, minutes=11))
    assert [d.key for d in due_notifications(done, now)] == ["JobCompleted#3/Email"]


def test_none_owes_nothing_ever():
    job = running_job("None", credits="1000000", time_constraint=10)
    for now in (T0, T0 + timedelta(hours=5, minutes=10), T0 + timedelta(days=30)):
        assert due_notifications(job, now) == []
        assert due_notifications(finished(job, timedelta(days=1)), now) == []


def test_single_event_name_is_email_only():
    due = due_notifications(running_job("Hourly"), T0 + timedelta(hours=5, minutes=10))
    assert [d.key for d in due] == [f"Hourly#{k}/Email" for k in range(1, 6)]


def test_list_of_rules_with_status_and_progress_events():
    spec = [
        {"events": ["JobStatusChanged", "Hourly"], "methods": ["SMS"]},
        {"events": [{"JobCreditsUsed": 20000}], "methods": ["Email"]},
    ]
    due = due_notifications(running_job(spec, credits="20000"), T0 + timedelta(hours=1))
    assert [d.key for d in due] == [
        "JobStatusChanged#1/SMS",
        "JobStatusChanged#2/SMS",
        "Hourly#1/SMS",
        "JobCreditsUsed:20000#1/Email",
    ]


def test_keys_unique_when_rules_overlap():
    spec = [
        {"events": ["Hourly", {"HoursElapsed": 1}, {"JobCreditsUsed": 100}], "methods": ["Email", "SMS"]},
        {"events": ["Hourly", {"HoursElapsed": 1.0}, {"JobCreditsUsed": 100}], "methods": ["SMS", "Email"]},
        {"events": ["Hourly", "JobStarted", "JobStatusChanged", "Daily"], "methods": ["Email"]},
    ]
    job = running_job(spec, credits="550", time_constraint=3600 * 24 * 3)
    due = due_notifications(job, T0 + timedelta(days=2, hours=10))

    keys = [d.key for d in due]
    assert len(keys) == len(set(keys))
    assert Counter((d.event, d.method) for d in due) == {
        ("JobStarted", "Email"): 1,
        ("JobStatusChanged", "Email"): 2,
        ("Hourly", "Email"): 58,
        ("Hourly", "SMS"): 58,
        ("HoursElapsed:1", "Email"): 58,
        ("HoursElapsed:1", "SMS"): 58,
        ("JobCreditsUsed:100", "Email"): 5,
        ("JobCreditsUsed:100", "SMS"): 5,
        ("Daily", "Email"): 2,
    }
