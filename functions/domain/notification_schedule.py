"""Which notifications a job owes at a moment: its status notifications plus the progress ones the
meter sends (docs/http-api.md "Notifications"; docs/architecture.md's keys), and when a failed publish may be
tried again.

Each owed notification has a key ``{event}#{occurrence}/{method}`` (``HoursElapsed:2#3/SMS``,
``JobCreditsUsed:20000#1/Email``, ``Hourly#5/Email``): a job stores the keys it sent, so every
occurrence goes out once per method, however often the meter or the events ask.

Thresholds of the progress events (occurrence k):

- ``Hourly`` / ``Daily``: k hours / days after ``startedAt``, while Running;
- ``{"HoursElapsed": n}``: k × n hours after ``submittedAt``;
- ``{"JobCreditsUsed": n}``: ``creditsSpent`` ≥ k × n;
- ``TimeConstraintNear``: once, while Running, from 80% of ``timeConstraint`` on.

Progress notifications never flood: at one moment a progress event owes at most ONE message per
method, for the highest threshold reached; it says how many thresholds it covers (all those reached
since the last message, e.g. 12 for ``{"JobCreditsUsed": 0.0001}`` crossed 12 times in one meter
tick). None is owed once the job is final (its JobCompleted says the rest), and a progress message
whose publish failed is dropped when a later one supersedes it or the job ends. Each progress event
sends at most ``MAX_MESSAGES`` messages per method over a job's life.

Failed publishes: one refused for good is never retried; a transient failure is tried again after
1, 2, 4, then 8 minutes (``RETRY_BACKOFF`` doubling), ``MAX_PUBLISH_ATTEMPTS`` attempts in all, then
it is recorded failed for good.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from functions.domain.jobs import Job
from functions.domain.notifications import (
    STATUS_EVENTS,
    DueNotification,
    EventSpec,
    due_status_notifications,
)
from functions.domain.status import JobStatus
from functions.domain.text import is_ascii_digits
from functions.domain.timefmt import from_sortable, to_sortable

HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
TIME_CONSTRAINT_NEAR_FRACTION = Decimal("0.8")
PROGRESS_EVENTS = ("Hourly", "Daily", "TimeConstraintNear", "HoursElapsed", "JobCreditsUsed")
# A job gets at most this many messages of one progress event per method (41 days of Hourly).
MAX_MESSAGES = 1000
# Transient publish failures: attempts in all, and the wait after the first failure (doubling).
MAX_PUBLISH_ATTEMPTS = 5
RETRY_BACKOFF = timedelta(minutes=1)


@dataclass(frozen=True, slots=True)
class PublishAttempts:
    """Failed publish attempts of one key so far, and the earliest time of the next attempt."""

    failures: int
    retry_at: datetime


def _occurrences(spec: EventSpec, job: Job, now: datetime) -> int:
    """How many thresholds of ``spec`` the job has reached at ``now`` (0 once final)."""
    if job.is_final:
        return 0
    started = job.started_at if job.status == JobStatus.RUNNING else None
    count = 0
    if spec.name in ("Hourly", "Daily") and started is not None:
        count = int((now - started) / (HOUR if spec.name == "Hourly" else DAY))
    elif spec.name == "TimeConstraintNear" and started is not None and job.time_constraint:
        threshold = float(TIME_CONSTRAINT_NEAR_FRACTION) * job.time_constraint
        count = 1 if (now - started).total_seconds() >= threshold else 0
    elif spec.name == "HoursElapsed" and spec.parameter is not None:
        hours = Decimal(str((now - job.submitted_at).total_seconds())) / 3600
        count = math.floor(hours / spec.parameter)
    elif spec.name == "JobCreditsUsed" and spec.parameter is not None:
        count = math.floor(job.credits_spent / spec.parameter)
    return count


def event_label(spec: EventSpec) -> str:
    """``HoursElapsed:2`` for a parameterized event, else its name: the key's event part."""
    if spec.parameter is None:
        return spec.name
    value = spec.parameter
    number = int(value) if value == value.to_integral_value() else value.normalize()
    return f"{spec.name}:{number}"


def parse_key(key: str) -> tuple[str, int, str] | None:
    """``JobCreditsUsed:0.5#12/SMS`` → ``("JobCreditsUsed:0.5", 12, "SMS")``; None if malformed."""
    label, _, rest = key.partition("#")
    occurrence, _, method = rest.partition("/")
    if not label or not method or not is_ascii_digits(occurrence):
        return None
    return label, int(occurrence), method


def is_progress(label: str) -> bool:
    """True for the event part of a progress key (``Hourly``, ``HoursElapsed:2``, …)."""
    return label.partition(":")[0] in PROGRESS_EVENTS


def _claimed(job: Job, label: str, method: str) -> list[int]:
    """Occurrences of ``label`` by ``method`` already claimed (sent, skipped or failed for good)."""
    found = []
    for key in job.sent_notifications:
        parsed = parse_key(key)
        if parsed and parsed[0] == label and parsed[2] == method:
            found.append(parsed[1])
    return found


def due_progress_notifications(job: Job, now: datetime) -> list[DueNotification]:
    """The progress notifications ``job`` owes at ``now``: per progress event and method at most one,
    for the highest threshold reached, covering every threshold since the last one claimed."""
    due: list[DueNotification] = []
    seen: set[str] = set()
    for rule in job.notifications:
        for spec in rule.events:
            if spec.name not in PROGRESS_EVENTS:
                continue
            count = max(_occurrences(spec, job, now), 0)
            label = event_label(spec)
            for method in rule.methods:
                claimed = _claimed(job, label, method)
                last = max(claimed, default=0)
                key = f"{label}#{count}/{method}"
                if count <= last or len(claimed) >= MAX_MESSAGES or key in seen:
                    continue
                seen.add(key)
                due.append(DueNotification(key, label, method, job.status, count, covers=count - last))
    return due


def publish_attempts(job: Job) -> dict[str, PublishAttempts]:
    """Each key's failed attempts so far, from the job's ``publish_failures`` records."""
    attempts: dict[str, PublishAttempts] = {}
    for record in job.publish_failures:
        key, _, rest = record.partition("|")
        count, _, retry_at = rest.partition("|")
        if not count.isdigit() or not retry_at:
            continue
        known = attempts.get(key)
        if known is None or int(count) > known.failures:
            attempts[key] = PublishAttempts(int(count), from_sortable(retry_at))
    return attempts


def failure_record(key: str, failures: int, retry_at: datetime) -> str:
    """The ``publish_failures`` element for a key's ``failures``-th failed attempt."""
    return f"{key}|{failures}|{to_sortable(retry_at)}"


def next_attempt_at(failures: int, now: datetime) -> datetime | None:
    """When a key that has failed ``failures`` times (transiently) may be tried again: ``now`` plus
    1, 2, 4, 8 minutes; None once ``MAX_PUBLISH_ATTEMPTS`` attempts have failed (failed for good)."""
    if failures >= MAX_PUBLISH_ATTEMPTS:
        return None
    # A float power: int ** int is typed Any (a negative exponent gives a float); the doublings are exact.
    return now + RETRY_BACKOFF * (2.0 ** (failures - 1))


def due_notifications(job: Job, now: datetime) -> list[DueNotification]:
    """Everything ``job`` owes at ``now`` and has not sent: status notifications, then progress ones,
    then failed ones whose wait (``next_attempt_at``) is over. Progress retries that a newer message
    supersedes, or whose job is final, are not owed (``abandoned_retries``)."""
    owed = due_status_notifications(job.notifications, job.status_history)
    owed += due_progress_notifications(job, now)
    keys = {d.key for d in owed}
    abandoned = {d.key for d in abandoned_retries(job, now)}
    owed += [
        d
        for key in sorted(job.retry_notifications)
        if key not in keys and key not in abandoned and (d := retry_from_key(key, job))
    ]
    waiting = {key for key, a in publish_attempts(job).items() if a.retry_at > now}
    return [d for d in owed if d.key not in job.sent_notifications and d.key not in waiting]


def abandoned_retries(job: Job, now: datetime) -> list[DueNotification]:
    """Failed progress messages not to send again: the job is final (its amounts would be stale), or
    a message for a higher threshold of the same event and method is owed now."""
    newer = {(d.event, d.method): d.occurrence for d in due_progress_notifications(job, now)}
    dropped = []
    for key in sorted(job.retry_notifications):
        parsed = parse_key(key)
        if parsed is None or not is_progress(parsed[0]) or key in job.sent_notifications:
            continue
        label, occurrence, method = parsed
        if job.is_final or newer.get((label, method), 0) > occurrence:
            due = retry_from_key(key, job)
            if due is not None:
                dropped.append(due)
    return dropped


def retry_from_key(key: str, job: Job) -> DueNotification | None:
    """The owed notification a failed key stands for (``JobStarted#2/SMS``), or None if malformed.

    A status key keeps the status it was owed for (the status entered at that occurrence)."""
    parsed = parse_key(key)
    if parsed is None:
        return None
    label, occurrence, method = parsed
    status = job.status
    if label in STATUS_EVENTS and 0 <= occurrence < len(job.status_history):
        status = job.status_history[occurrence]
    return DueNotification(key, label, method, status, occurrence)
