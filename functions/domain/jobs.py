"""The job model and how a ``Batch Job State Change`` moves it.

Times are timezone-aware UTC ``datetime``s; the domain never reads a clock.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum

from functions.domain.credits import ZERO
from functions.domain.machine_classes import GeoZone, MachineClass
from functions.domain.notifications import NotificationRule
from functions.domain.queue_limits import describe_queue_limit
from functions.domain.status import (
    BATCH_TO_JOB_STATUS,
    JobStatus,
    event_position,
    statuses_between,
)

RETENTION = timedelta(days=14)
RECORD_TTL = timedelta(days=400)
MAX_STATUS_REASON = 1000

ABORTED_BY_USER = "Aborted by user"
OUT_OF_CREDITS = "Account out of credits"


def credit_constraint_reason(credit_constraint: Decimal) -> str:
    """``CreditConstraint of 0.05 credits reached`` (the cap as the user wrote it, no trailing zeros)."""
    return f"CreditConstraint of {credit_constraint.normalize():f} credits reached"


def time_constraint_reason(time_constraint: int) -> str:
    """``TimeConstraint of 600 s reached``."""
    return f"TimeConstraint of {time_constraint} s reached"


def is_credit_constraint_reason(reason: str | None) -> bool:
    """True for the reason ``credit_constraint_reason`` gives: such a job's output is discarded."""
    return bool(reason) and str(reason).startswith("CreditConstraint of ")


class JobType(StrEnum):
    """``Single``, or an array job's parent (``Array``) or one of its children (``ArrayChild``)."""

    SINGLE = "Single"
    ARRAY = "Array"
    ARRAY_CHILD = "ArrayChild"


class PayloadKind(StrEnum):
    """What the job runs: Python source, an argv, or a cloudpickled call."""

    CODE = "code"
    COMMAND = "command"
    PICKLE = "pickle"


@dataclass(frozen=True, slots=True)
class NotificationRecord:
    """One line of a job's ``notificationLog``: what was sent, skipped or failed, when, how.

    ``to`` is masked (``d***@example.com``); ``detail`` is a sentence (``SMS skipped: no phone``).
    """

    at: datetime
    event: str
    method: str
    outcome: str
    to: str | None
    detail: str


@dataclass(frozen=True, slots=True)
class Job:
    """A job as the service keeps it.

    Attributes
    ----------
    job_id, account_id : str
        ``job-<ULID>``, and the owning account.
    status, status_reason :
        API status and the sentence for people.
    status_history : tuple[JobStatus, ...]
        Every status entered, in order, starting with the Queued of submission; drives status
        notifications (one occurrence per entry).
    event_position : int
        ``status.event_position`` of the last applied Batch event (-1 before any).
    termination_reason : str | None
        Set by the service (abort, meter) before it asks Batch to terminate; wins over the reason
        the later FAILED event carries.
    credits_spent : Decimal
        Credits charged so far (meter) or settled (final).
    started_at, completed_at : datetime | None
        From the Batch event's ``startedAt`` / ``stoppedAt`` (final attempt).
    time_constraint : int | None
        Seconds of Running time allowed.
    sent_notifications : frozenset[str]
        Keys of notifications already claimed (``DueNotification.key``): sent, skipped, or failed
        for good.
    retry_notifications : frozenset[str]
        Keys whose publish failed and will be tried again.
    publish_failures : frozenset[str]
        One ``"{key}|{n}|{retryAt}"`` per failed publish attempt n (``notification_schedule``
        reads them: attempts so far and when the next may go).
    """

    job_id: str
    account_id: str
    name: str | None
    type: JobType
    payload_kind: PayloadKind
    machine_class: str
    geo_zone: GeoZone
    credit_constraint: Decimal | None
    time_constraint: int | None
    notifications: tuple[NotificationRule, ...]
    submitted_at: datetime
    status: JobStatus = JobStatus.QUEUED
    status_reason: str | None = None
    status_history: tuple[JobStatus, ...] = (JobStatus.QUEUED,)
    event_position: int = -1
    termination_reason: str | None = None
    credits_spent: Decimal = ZERO
    exit_code: int | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    batch_job_id: str | None = None
    log_stream_name: str | None = None
    last_event_at: datetime | None = None
    parent_job_id: str | None = None
    array_index: int | None = None
    array_size: int | None = None
    child_status_counts: dict[str, int] | None = None
    sent_notifications: frozenset[str] = field(default_factory=frozenset)
    notification_log: tuple[NotificationRecord, ...] = ()
    retry_notifications: frozenset[str] = field(default_factory=frozenset)
    publish_failures: frozenset[str] = field(default_factory=frozenset)
    data_deleted_at: datetime | None = None

    @property
    def expires_at(self) -> datetime:
        """``submittedAt`` + 14 days: after it the job's data answers 410."""
        return self.submitted_at + RETENTION

    @property
    def is_final(self) -> bool:
        """True once Succeeded or Terminated."""
        return self.status.is_final

    def is_expired(self, now: datetime) -> bool:
        """True from ``expiresAt`` on, or once its owner deleted its data (``DELETE /jobs/{jobId}``)."""
        return now >= self.expires_at or self.data_deleted_at is not None


@dataclass(frozen=True, slots=True)
class Account:
    """A customer account. ``credit_balance`` is in credits, never negative; ``phone`` is E.164;
    ``email_subscription`` is the SNS subscription ARN that delivers the account's email."""

    account_id: str
    credit_balance: Decimal
    email: str | None = None
    phone: str | None = None
    roles: tuple[str, ...] = ("user",)
    created_at: datetime | None = None
    email_subscription: str | None = None
    webhook_url: str | None = None
    webhook_secret: str | None = field(default=None, repr=False)


class LedgerKind(StrEnum):
    """Kinds of ledger entries (API.md ``/account/usage``)."""

    CHARGE = "charge"
    GRANT = "grant"
    REFUND = "refund"


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One movement of credits.

    ``entry_id`` is deterministic (``charge#<jobId>`` for a job's charge), so a replay cannot
    write it twice. ``credits`` is positive; ``kind`` says which way it moved the balance.
    """

    entry_id: str
    account_id: str
    at: datetime
    kind: LedgerKind
    credits: Decimal
    balance_after: Decimal
    job_id: str | None = None
    unbilled: Decimal = ZERO
    reason: str | None = None


def charge_entry_id(job_id: str) -> str:
    """The deterministic ledger id of a job's charge."""
    return f"charge#{job_id}"


@dataclass(frozen=True, slots=True)
class BatchJobState:
    """What the service reads from one ``Batch Job State Change`` event's ``detail``.

    Field names follow the AWS Batch ``JobDetail`` (DescribeJobs) shape the event carries;
    times are milliseconds since the epoch as Batch sends them.
    """

    batch_job_id: str
    job_name: str
    status: str
    status_reason: str | None
    created_at_ms: int | None
    started_at_ms: int | None
    stopped_at_ms: int | None
    exit_code: int | None
    log_stream_name: str | None
    attempt_count: int

    @property
    def position(self) -> int:
        """Order of this event in the job's life, by (attempt count, status rank)."""
        return event_position(self.attempt_count, self.status)

    @property
    def running_ms(self) -> int | None:
        """Running time of the attempt this event describes, when it has both ends."""
        if self.started_at_ms is None or self.stopped_at_ms is None:
            return None
        return max(0, self.stopped_at_ms - self.started_at_ms)


def ms_to_datetime(ms: int) -> datetime:
    """Milliseconds since the epoch (as AWS Batch sends them) to an aware UTC datetime."""
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


@dataclass(frozen=True, slots=True)
class Transition:
    """The result of applying an event: the job after it and what changed.

    ``entered`` lists the statuses newly entered (oldest first); ``settles`` is True when the job
    becomes final with this event, so the caller must settle its charge in the same write.
    """

    before: Job
    after: Job
    entered: tuple[JobStatus, ...]

    @property
    def settles(self) -> bool:
        """True when this transition makes the job final."""
        return self.after.is_final and not self.before.is_final


_OOM = re.compile(r"OutOfMemory|out of memory|memory usage", re.IGNORECASE)
_TIMEOUT = re.compile(r"attempt duration exceeded timeout", re.IGNORECASE)


def credit_cap_seconds(credit_constraint: Decimal, machine: MachineClass) -> int:
    """Seconds of Running time ``credit_constraint`` credits buy on ``machine`` (rounded up)."""
    return int(credit_constraint * 3600 / machine.credits_per_hour) + 1


def timeout_cause(job: Job, machine: MachineClass) -> str | None:
    """Which of the job's caps a Batch attempt timeout stands for, as its ``statusReason``.

    The submit sets ``attemptDurationSeconds`` from the smaller of ``timeConstraint`` and the
    ``creditConstraint``'s running time (plus a margin); whichever is smaller is what was reached.
    """
    credit_seconds = (
        credit_cap_seconds(job.credit_constraint, machine) if job.credit_constraint is not None else None
    )
    if job.time_constraint is not None and (credit_seconds is None or job.time_constraint <= credit_seconds):
        return time_constraint_reason(job.time_constraint)
    if job.credit_constraint is not None:
        return credit_constraint_reason(job.credit_constraint)
    return None


def describe_failure(
    job: Job,
    machine: MachineClass,
    batch_reason: str | None,
    exit_code: int | None,
    error_summary: str | None,
) -> str:
    """The ``statusReason`` of a job that ended Terminated.

    Precedence: the service's own reason (abort, caps) > a queue time limit's cancel (no capacity,
    ``functions/domain/queue_limits.py``) > the worker's error summary (the exception's last line)
    > what AWS Batch said, made readable (out of memory, timeout) > the exit code.
    """
    service_reason = job.termination_reason or describe_queue_limit(
        batch_reason, machine.name, job.geo_zone.value
    )
    if service_reason:
        return service_reason
    if error_summary:
        return error_summary[:MAX_STATUS_REASON]
    if batch_reason and _OOM.search(batch_reason):
        return f"Memory limit of {machine.memory_gib} GiB exceeded"
    if batch_reason and _TIMEOUT.search(batch_reason):
        cap = timeout_cause(job, machine)
        if cap is not None:
            return cap
    if exit_code not in (None, 0) and (not batch_reason or "Essential container" in batch_reason):
        return f"Exited with code {exit_code}"
    return (batch_reason or "Terminated by AWS Batch")[:MAX_STATUS_REASON]


def apply_batch_event(job: Job, state: BatchJobState, final_reason: str | None = None) -> Transition | None:
    """Apply one Batch event to a job, forward only.

    Parameters
    ----------
    job : Job
        The job as stored.
    state : BatchJobState
        The event's detail.
    final_reason : str | None
        For a FAILED event, the ``statusReason`` to record (see ``describe_failure``).

    Returns
    -------
    Transition | None
        None when the event changes nothing: the job is final, the event is older than what was
        applied (by attempt count, then status), or a duplicate.
    """
    if job.is_final or state.position <= job.event_position:
        return None
    target = BATCH_TO_JOB_STATUS[state.status]
    entered = statuses_between(job.status, target, ever_ran=state.started_at_ms is not None)
    started_at = ms_to_datetime(state.started_at_ms) if state.started_at_ms is not None else job.started_at
    if target.is_final:
        reason = final_reason if target == JobStatus.TERMINATED else None
        completed_at = ms_to_datetime(state.stopped_at_ms) if state.stopped_at_ms is not None else None
    else:
        reason = state.status_reason[:MAX_STATUS_REASON] if state.status_reason else None
        completed_at = None
    after = replace(
        job,
        status=target,
        status_reason=reason,
        status_history=job.status_history + tuple(entered),
        event_position=state.position,
        started_at=started_at,
        completed_at=completed_at,
        exit_code=state.exit_code if state.exit_code is not None else job.exit_code,
        batch_job_id=job.batch_job_id or state.batch_job_id,
        log_stream_name=state.log_stream_name or job.log_stream_name,
    )
    return Transition(before=job, after=after, entered=tuple(entered))
