"""Which notifications a job owes at a moment: its status notifications plus the progress ones the
meter sends (API.md "Notifications"; DESIGN.md's keys).

Each owed notification has a key ``{event}#{occurrence}/{method}`` (``HoursElapsed:2#3/SMS``,
``JobCreditsUsed:20000#1/Email``, ``Hourly#5/Email``): a job stores the keys it sent, so every
occurrence goes out once per method, however often the meter or the events ask.

- ``Hourly`` / ``Daily``: while Running, occurrence k is due k hours / days after ``startedAt``.
- ``{"HoursElapsed": n}``: while not final, occurrence k is due k × n hours after ``submittedAt``.
- ``{"JobCreditsUsed": n}``: occurrence k is due once ``creditsSpent`` ≥ k × n (one message per
  multiple, even when one tick crosses several), at any status.
- ``TimeConstraintNear``: once, while Running, from 80% of ``timeConstraint`` on.

Each progress event sends at most ``MAX_OCCURRENCES`` messages per method over a job's life.
A notification whose publish failed stays owed (the job's ``retryNotifications``) even once the
condition that made it due has passed (a TimeConstraintNear of a job that has since ended).
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from decimal import Decimal

from functions.domain.jobs import Job
from functions.domain.notifications import DueNotification, EventSpec, due_status_notifications
from functions.domain.status import JobStatus
from functions.domain.text import is_ascii_digits

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
TIME_CONSTRAINT_NEAR_FRACTION = Decimal("0.8")
# A job gets at most this many messages of one progress event per method (over 41 days of Hourly);
# a tiny JobCreditsUsed step on a large job would otherwise mean millions of messages.
MAX_OCCURRENCES = 1000


def _occurrences(spec: EventSpec, job: Job, now: datetime) -> int:
    running = job.status == JobStatus.RUNNING and job.started_at is not None
    if spec.name == "Hourly" and running and job.started_at is not None:
        return int((now - job.started_at) / HOUR)
    if spec.name == "Daily" and running and job.started_at is not None:
        return int((now - job.started_at) / DAY)
    if spec.name == "TimeConstraintNear" and running and job.started_at and job.time_constraint:
        threshold = float(TIME_CONSTRAINT_NEAR_FRACTION) * job.time_constraint
        return 1 if (now - job.started_at).total_seconds() >= threshold else 0
    if spec.name == "HoursElapsed" and spec.parameter is not None and not job.is_final:
        hours = Decimal(str((now - job.submitted_at).total_seconds())) / 3600
        return math.floor(hours / spec.parameter)
    if spec.name == "JobCreditsUsed" and spec.parameter is not None:
        return math.floor(job.credits_spent / spec.parameter)
    return 0


def event_label(spec: EventSpec) -> str:
    """``HoursElapsed:2`` for a parameterized event, else its name: the key's event part."""
    if spec.parameter is None:
        return spec.name
    value = spec.parameter
    number = int(value) if value == value.to_integral_value() else value.normalize()
    return f"{spec.name}:{number}"


def due_progress_notifications(job: Job, now: datetime) -> list[DueNotification]:
    """The progress notifications (Hourly, Daily, HoursElapsed, JobCreditsUsed, TimeConstraintNear)
    ``job`` owes at ``now``, one per occurrence per method."""
    due: list[DueNotification] = []
    seen: set[str] = set()
    for rule in job.notifications:
        for spec in rule.events:
            if spec.name not in ("Hourly", "Daily", "TimeConstraintNear", "HoursElapsed", "JobCreditsUsed"):
                continue
            count = min(max(_occurrences(spec, job, now), 0), MAX_OCCURRENCES)
            label = event_label(spec)
            for occurrence in range(1, count + 1):
                for method in rule.methods:
                    key = f"{label}#{occurrence}/{method}"
                    if key not in seen:
                        seen.add(key)
                        due.append(DueNotification(key, label, method, job.status, occurrence))
    return due


def due_notifications(job: Job, now: datetime) -> list[DueNotification]:
    """Everything ``job`` owes at ``now`` and has not sent: status notifications, then progress ones."""
    owed = due_status_notifications(job.notifications, job.status_history)
    owed += due_progress_notifications(job, now)
    keys = {d.key for d in owed}
    owed += [
        d for key in sorted(job.retry_notifications) if key not in keys and (d := retry_from_key(key, job))
    ]
    return [d for d in owed if d.key not in job.sent_notifications]


def retry_from_key(key: str, job: Job) -> DueNotification | None:
    """The owed notification a failed key stands for (``JobStarted#2/SMS``), or None if malformed."""
    label, _, rest = key.partition("#")
    occurrence, _, method = rest.partition("/")
    if not label or not method or not is_ascii_digits(occurrence):
        return None
    return DueNotification(key, label, method, job.status, int(occurrence))
