"""What a job owes when (``due_notifications``): status events plus the progress events the meter sends
(Hourly, Daily, HoursElapsed, JobCreditsUsed, TimeConstraintNear), each key at most once, a progress
event at most once per method at a moment (covering every threshold reached), none once final; and
when a failed publish may be tried again."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from functions.domain.jobs import Job, JobType, PayloadKind
from functions.domain.machine_classes import GeoZone
from functions.domain.messages import compose_message
from functions.domain.notification_schedule import (
    MAX_MESSAGES,
    MAX_PUBLISH_ATTEMPTS,
    PublishAttempts,
    abandoned_retries,
    due_notifications,
    failure_record,
    next_attempt_at,
    publish_attempts,
)
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

    # Then one message per progress event and method, for the highest threshold, saying how many
    # thresholds it covers: Hourly 5, HoursElapsed:2 2, JobCreditsUsed:20000 2
    assert [(d.key, d.covers) for d in due] == [
        ("Hourly#5/Email", 5),
        ("Hourly#5/SMS", 5),
        ("HoursElapsed:2#2/Email", 2),
        ("HoursElapsed:2#2/SMS", 2),
        ("JobCreditsUsed:20000#2/Email", 2),
        ("JobCreditsUsed:20000#2/SMS", 2),
    ]
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
    assert [(d.key, d.covers) for d in due] == [("Daily#2/Email", 2)]


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


def test_no_progress_message_once_final():
    # The final settlement may cross a multiple after the last tick: JobCompleted reports the amount.
    job = finished(
        running_job([{"events": [{"JobCreditsUsed": 20000}]}], credits="20000"), timedelta(hours=2)
    )
    assert due_notifications(job, T0 + timedelta(hours=9)) == []


def test_hours_elapsed_fractional():
    job = running_job([{"events": [{"HoursElapsed": 0.5}], "methods": ["SMS"]}])

    due = due_notifications(job, T0 + timedelta(hours=5, minutes=10))

    assert [(d.key, d.event, d.covers) for d in due] == [("HoursElapsed:0.5#10/SMS", "HoursElapsed:0.5", 10)]


def test_hours_elapsed_counts_from_submission_not_start():
    job = replace(running_job({"events": [{"HoursElapsed": 2}]}), started_at=T0 + timedelta(hours=1))
    assert [d.key for d in due_notifications(job, T0 + timedelta(hours=2))] == ["HoursElapsed:2#1/Email"]


def test_job_credits_used_one_message_for_the_multiples_crossed_in_one_step():
    job = running_job(
        [{"events": [{"JobCreditsUsed": 20000}], "methods": ["Email", "SMS"]}], credits="19999.9999"
    )
    assert due_notifications(job, T0 + timedelta(hours=2)) == []
    job = sent(replace(job, credits_spent=Decimal("20000")), T0 + timedelta(hours=2))
    assert job.sent_notifications == {"JobCreditsUsed:20000#1/Email", "JobCreditsUsed:20000#1/SMS"}

    # one step from 20,000 to 85,000 crosses 40,000, 60,000 and 80,000
    due = due_notifications(replace(job, credits_spent=Decimal("85000")), T0 + timedelta(hours=3))

    assert [(d.key, d.covers) for d in due] == [
        ("JobCreditsUsed:20000#4/Email", 3),
        ("JobCreditsUsed:20000#4/SMS", 3),
    ]


def test_automatic():
    job = running_job("Automatic", credits="45000")
    now = T0 + timedelta(hours=5, minutes=10)
    assert [d.key for d in due_notifications(job, now)] == [
        "JobStarting#1/Email",
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
    assert [(d.key, d.covers) for d in due] == [("Hourly#5/Email", 5)]


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
    # one message per (event, method), however many rules ask for it
    assert Counter((d.event, d.method) for d in due) == {
        ("JobStarted", "Email"): 1,
        ("JobStatusChanged", "Email"): 2,
        ("Hourly", "Email"): 1,
        ("Hourly", "SMS"): 1,
        ("HoursElapsed:1", "Email"): 1,
        ("HoursElapsed:1", "SMS"): 1,
        ("JobCreditsUsed:100", "Email"): 1,
        ("JobCreditsUsed:100", "SMS"): 1,
        ("Daily", "Email"): 1,
    }
    assert {d.key: d.covers for d in due if d.event.startswith(("Hourly", "JobCredits", "Daily"))} == {
        "Hourly#58/Email": 58,
        "Hourly#58/SMS": 58,
        "JobCreditsUsed:100#5/Email": 5,
        "JobCreditsUsed:100#5/SMS": 5,
        "Daily#2/Email": 2,
    }


# -- issue 9 item 11: a tiny threshold does not flood ----------------------------------------------------
TINY = [{"events": [{"JobCreditsUsed": 0.0001}], "methods": ["Email"]}]


def test_tiny_job_credits_used_sends_at_most_one_message_per_tick_and_none_once_final():
    # Given an 8-second Basic job (1 credit/minute of Running, the 60 s minimum) with
    # {"JobCreditsUsed": 0.0001}: the meter ticks every minute while it runs
    job = running_job(TINY, credits="0.1333")  # 8 s of a 1-credit-per-minute class
    tick = T0 + timedelta(seconds=8)

    # When the meter ticks: one message, covering the 1,333 thresholds crossed
    due = due_notifications(job, tick)
    assert [(d.key, d.covers) for d in due] == [("JobCreditsUsed:0.0001#1333/Email", 1333)]
    job = sent(job, tick)

    # The same tick again owes nothing; the job ends (settled at the 60 s minimum: 1 credit)
    assert due_notifications(job, tick) == []
    done = replace(finished(job, timedelta(seconds=8)), credits_spent=Decimal(1))
    for minutes in (1, 2, 60, 600):
        assert due_notifications(done, tick + timedelta(minutes=minutes)) == []


def test_a_later_tick_covers_only_the_thresholds_since_the_last_message():
    job = sent(running_job(TINY, credits="0.0005"), T0 + timedelta(minutes=1))
    assert job.sent_notifications == {"JobCreditsUsed:0.0001#5/Email"}
    due = due_notifications(replace(job, credits_spent=Decimal("0.0012")), T0 + timedelta(minutes=2))
    assert [(d.key, d.covers) for d in due] == [("JobCreditsUsed:0.0001#12/Email", 7)]


def test_progress_messages_stop_at_max_messages_per_event_and_method():
    job = running_job(TINY, credits="1")
    claimed = frozenset(f"JobCreditsUsed:0.0001#{k}/Email" for k in range(1, MAX_MESSAGES + 1))
    assert due_notifications(replace(job, sent_notifications=claimed), T0 + timedelta(hours=1)) == []


def test_message_says_how_many_thresholds_it_covers():
    job = running_job(TINY, credits="0.0012")
    (due,) = due_notifications(job, T0 + timedelta(minutes=1))
    subject, body = compose_message(job, due, T0 + timedelta(minutes=1))
    assert subject == (
        "remote-batch: job sim has spent 0.0012 credits (12 thresholds since the last message) (Running)"
    )
    assert "Thresholds reached since the last message: 12\n" in body
    _, sms = compose_message(job, replace(due, method="SMS"), T0 + timedelta(minutes=1))
    assert sms == "remote-batch sim: JobCreditsUsed:0.0001 x12 (Running). 0.0012 credits, 1m 0s."


# -- failed publishes: bounded retries with backoff ------------------------------------------------------
def failed(job: Job, key: str, failures: int, now: datetime) -> Job:
    """``job`` after the ``failures``-th transient failure of ``key`` at ``now`` (released, owed)."""
    retry_at = next_attempt_at(failures, now)
    assert retry_at is not None
    return replace(
        job,
        sent_notifications=job.sent_notifications - {key},
        retry_notifications=job.retry_notifications | {key},
        publish_failures=job.publish_failures | {failure_record(key, failures, retry_at)},
    )


def test_transient_failures_wait_1_2_4_8_minutes_then_give_up():
    assert [next_attempt_at(n, T0) for n in range(1, MAX_PUBLISH_ATTEMPTS + 1)] == [
        T0 + timedelta(minutes=1),
        T0 + timedelta(minutes=2),
        T0 + timedelta(minutes=4),
        T0 + timedelta(minutes=8),
        None,
    ]
    assert MAX_PUBLISH_ATTEMPTS == 5


def test_a_failed_key_is_owed_again_only_after_its_wait():
    job = finished(running_job("JobCompleted"), timedelta(minutes=5))
    key = "JobCompleted#3/Email"
    job = failed(job, key, 2, T0)

    assert publish_attempts(job) == {key: PublishAttempts(2, T0 + timedelta(minutes=2))}
    assert due_notifications(job, T0 + timedelta(minutes=1, seconds=59)) == []
    (due,) = due_notifications(job, T0 + timedelta(minutes=2))
    assert (due.key, due.status) == (key, JobStatus.SUCCEEDED)


def test_a_failed_progress_message_is_dropped_when_superseded_or_final():
    job = sent(running_job(TINY, credits="0.0003"), T0)
    job = failed(job, "JobCreditsUsed:0.0001#3/Email", 1, T0)

    # A later tick owes a newer message covering it: the old one is abandoned, not sent twice
    later = replace(job, credits_spent=Decimal("0.0007"))
    assert [d.key for d in abandoned_retries(later, T0 + timedelta(minutes=1))] == [
        "JobCreditsUsed:0.0001#3/Email"
    ]
    assert [(d.key, d.covers) for d in due_notifications(later, T0 + timedelta(minutes=1))] == [
        ("JobCreditsUsed:0.0001#7/Email", 7)
    ]
    # Once the job is final, it is abandoned too and nothing is owed
    done = finished(job, timedelta(minutes=1))
    assert [d.key for d in abandoned_retries(done, T0 + timedelta(minutes=5))] == [
        "JobCreditsUsed:0.0001#3/Email"
    ]
    assert due_notifications(done, T0 + timedelta(minutes=5)) == []
