"""What a notification says: job name and id, event, status and reason, credits spent, elapsed time.

Never user code, never a secret. SMS bodies stay within 140 characters.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from functions.domain.batch_reasons import as_sentence, normalize_reason
from functions.domain.credits import credits_text
from functions.domain.jobs import Job, JobType
from functions.domain.notifications import DueNotification
from functions.domain.status import JobStatus

SMS_LIMIT = 140

_HEADLINES = {
    "JobStarting": "is starting",
    "JobStarted": "is running",
    "JobCompleted": "has completed",
    "JobSucceeded": "succeeded",
    "JobTerminated": "was terminated",
    "JobStatusChanged": "changed status",
    "Hourly": "is still running",
    "Daily": "is still running",
    "TimeConstraintNear": "has used 80% of its TimeConstraint",
    "HoursElapsed": "was submitted a while ago",
    "JobCreditsUsed": "has spent more credits",
}


def headline(due: DueNotification) -> str:
    """A short phrase for the event (``HoursElapsed:2`` #3 → ``was submitted 6 h ago``); a progress
    message that stands for several thresholds says how many (``… (12 thresholds since the last
    message)``)."""
    phrase = _phrase(due)
    if due.covers > 1:
        return f"{phrase} ({due.covers} thresholds since the last message)"
    return phrase


def _phrase(due: DueNotification) -> str:
    name, _, parameter = due.event.partition(":")
    if name == "HoursElapsed" and parameter:
        hours = Decimal(parameter) * due.occurrence
        return f"was submitted {hours.normalize():f} h ago"
    if name == "JobCreditsUsed" and parameter:
        return f"has spent {credits_text(Decimal(parameter) * due.occurrence)} credits"
    if name == "Hourly":
        return f"has run {due.occurrence} h"
    if name == "Daily":
        return f"has run {due.occurrence} d"
    return _HEADLINES.get(name, name)


def format_elapsed(seconds: float) -> str:
    """``3723`` → ``1h 2m 3s``; ``42`` → ``42s``."""
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m {secs}s"
    if minutes:
        return f"{minutes}m {secs}s"
    return f"{secs}s"


def children_succeeded(job: Job) -> int:
    """How many of an array's children succeeded (``childStatusCounts``)."""
    return (job.child_status_counts or {}).get(JobStatus.SUCCEEDED.value, 0)


def children_line(job: Job) -> str | None:
    """An array's line: ``Children: 997 of 1000 succeeded`` once it is final, else how many are
    final so far; None for a job that is no array."""
    if job.type != JobType.ARRAY or job.array_size is None:
        return None
    counts = job.child_status_counts or {}
    if job.is_final:
        return f"Children: {children_succeeded(job)} of {job.array_size} succeeded"
    done = counts.get(JobStatus.SUCCEEDED.value, 0) + counts.get(JobStatus.TERMINATED.value, 0)
    return f"Children: {done} of {job.array_size} finished, {children_succeeded(job)} succeeded"


def compose_message(job: Job, due: DueNotification, now: datetime) -> tuple[str, str]:
    """The (subject, body) of a notification.

    Elapsed time runs from ``submittedAt`` to ``completedAt`` for a final job, else to ``now``.
    For SMS the body is the subject line plus the credits, cut to 140 characters.
    """
    label = job.name or job.job_id
    end = job.completed_at if job.is_final and job.completed_at else now
    elapsed = format_elapsed((end - job.submitted_at).total_seconds())
    subject = f"remote-batch: job {label} {headline(due)} ({due.status.value})"
    lines = [
        f"Job: {label}",
        f"Job id: {job.job_id}",
        f"Event: {due.event}",
        f"Status: {due.status.value}",
    ]
    if due.covers > 1:
        lines.append(f"Thresholds reached since the last message: {due.covers}")
    reason_line = normalize_reason(job.status_reason)
    if reason_line and due.status == job.status:
        lines.append(f"Reason: {reason_line}")
    warnings = job.warnings if due.status == job.status else ()
    lines += [f"Warning: {w}" for w in warnings]
    children = children_line(job)
    if children:
        lines.append(children)
    lines += [
        f"Machine class: {job.machine_class} in {job.geo_zone.value}",
        f"Credits spent: {job.credits_spent}",
        f"Elapsed since submission: {elapsed}",
    ]
    if due.method == "SMS":
        times = f" x{due.covers}" if due.covers > 1 else ""
        head = f"remote-batch {label[:40]}: {due.event}{times} ({due.status.value})."
        succeeded = (
            f" {children_succeeded(job)}/{job.array_size} children ok." if job.type == JobType.ARRAY else ""
        )
        tail = f"{succeeded} {job.credits_spent} credits, {elapsed}."
        reason = ""
        note = normalize_reason(job.status_reason or (f"Warning: {warnings[0]}" if warnings else None))
        if note and due.status == job.status:
            note = as_sentence(note)
            # The reason is what gets shortened: credits and elapsed time always fit.
            room = SMS_LIMIT - len(head) - len(tail) - 1
            reason = " " + (note if len(note) <= room else note[: room - 1] + "…")
            reason = reason if room > 1 else ""
        return subject, (head + reason + tail)[:SMS_LIMIT]
    return subject, "\n".join(lines) + "\n"
