"""The job model and how a ``Batch Job State Change`` moves it.

Times are timezone-aware UTC ``datetime``s; the domain never reads a clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import StrEnum

from functions.domain.batch_reasons import (
    INFRASTRUCTURE_FAMILIES,
    MAX_REASON,
    ReasonFamily,
    exit_code_sentence,
    family_of,
    family_sentence,
    memory_sentence,
    normalize_reason,
    raw_batch_reason,
)
from functions.domain.charged_time import (
    TimeCorrection,
    Window,
    epoch_ms,
    final_attempt_times,
    running_start,
)
from functions.domain.credits import ZERO, credits_text
from functions.domain.dependencies import Dependency, DependencyMode, InputsFrom
from functions.domain.environments import JobEnvironment
from functions.domain.machine_classes import GeoZone, MachineClass, machine_class
from functions.domain.notifications import NotificationRule
from functions.domain.prerequisites import Prerequisite
from functions.domain.queue_limits import describe_queue_limit
from functions.domain.status import (
    BATCH_TO_JOB_STATUS,
    JobStatus,
    event_position,
    statuses_between,
)

RETENTION = timedelta(days=14)
RECORD_TTL = timedelta(days=400)
MAX_STATUS_REASON = MAX_REASON

ABORTED_BY_USER = "Aborted by user"
OUT_OF_CREDITS = "Account out of credits"


def credit_constraint_reason(credit_constraint: Decimal) -> str:
    """``CreditConstraint of 0.05 credits reached`` (the cap as the user wrote it, no trailing zeros)."""
    return f"CreditConstraint of {credits_text(credit_constraint)} credits reached"


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


class DispatchState(StrEnum):
    """Where a job stands between ``POST /jobs`` and AWS Batch.

    ``Waiting``: a prerequisite does not hold yet (its environment builds; ``waiting_for``): it holds
    no quota and is counted nowhere until released into ``Held`` (``functions.logic.waits``).
    ``Held``: over its account's quota, waiting (counted as queued). ``Admitted``: holds its quota,
    waiting for the dispatcher. ``Dispatching``: a dispatcher claimed it and is calling SubmitJob.
    ``Dispatched``: AWS Batch took it (``batch_job_id`` set).
    """

    WAITING = "Waiting"
    HELD = "Held"
    ADMITTED = "Admitted"
    DISPATCHING = "Dispatching"
    DISPATCHED = "Dispatched"


@dataclass(frozen=True, slots=True)
class QueuedSpan:
    """A span of an array (``functions.domain.arrays.Span``) the quota admitted that AWS Batch has not
    taken yet: its children's units are in use from its admission. ``state`` is ``Admitted`` (waiting
    for the dispatcher) or ``Dispatching`` (a dispatcher claimed it at ``claimed_at`` and is calling
    SubmitJob); once AWS Batch named it, its id joins the parent's ``array_spans`` and it leaves the
    queue."""

    offset: int
    count: int
    state: DispatchState
    claimed_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class WithdrawnSpan:
    """Children of an array that never reached AWS Batch and ended ``Terminated`` with ``reason``, free
    (an abort, a cap, or a span AWS Batch refused): global indices ``offset`` .. ``offset + count - 1``.
    They have no records of their own: ``arrays.child_template`` shows them from this."""

    offset: int
    count: int
    reason: str


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
    batch_reason : str | None
        What AWS Batch said about the end, verbatim (its reasons joined by `` | ``), for support;
        ``status_reason`` is the plain sentence made of it.
    warnings : tuple[str, ...]
        Sentences about a job that ended well but not cleanly (a process killed for memory while
        the job still succeeded).
    termination_requested_at, termination_attempts :
        When the service last asked AWS Batch to terminate the job (None when no request is in
        flight) and how many times it asked: TerminateJob is sent once per job, again only after a
        failed call, at most ``MAX_TERMINATE_ATTEMPTS`` times.
    record_expires_at : datetime | None
        The record's DynamoDB TTL: from then on the job is gone for every route and event, even
        while DynamoDB has not deleted it yet (it deletes expired items days late).
    parent_job_id, array_index, array_size :
        An ``ArrayChild``'s parent, its global index (0-based) and the array's size; an ``Array``
        parent has ``array_size`` only.
    child_status_counts : dict[str, int] | None
        An ``Array`` parent's children per status; every child not yet seen counts as ``Queued``,
        so the counts always add up to ``array_size``.
    credits_settled : Decimal
        An ``Array`` parent's sum of its children's settled charges (``credits_spent`` adds what its
        running children have spent so far, and equals it once the array is final).
    array_spans : tuple[str, ...]
        An ``Array`` parent's AWS Batch job ids, one per span (``functions.domain.arrays``), in
        offset order.
    compute : str | None
        The dedicated compute the job was submitted to; its running time is the compute's, so the
        job itself is charged 0 (``job_rate``).
    dispatch_state : DispatchState | None
        Where a job submitted through the quota and the dispatcher is (``functions.logic.quotas``,
        ``functions.logic.dispatch``); None for a job that never took part (an array's child).
    dispatch_claimed_at : datetime | None
        When a dispatcher last claimed the job for SubmitJob (``Dispatching``): the meter's backstop
        recovers a claim older than ``dispatch_rules.CLAIM_TIMEOUT`` (its dispatcher died).
    array_admitted : int
        An ``Array`` parent submitted through the dispatcher: how many children (from index 0) are in
        spans so far, which is the next span's offset (``functions.logic.array_admission``). The parent
        is ``Held`` while it is below ``array_size``.
    array_queue : tuple[QueuedSpan, ...]
        Such a parent's spans admitted but not yet taken by AWS Batch, by offset.
    array_withdrawn : tuple[WithdrawnSpan, ...]
        Such a parent's children that never reached AWS Batch and ended Terminated, free.
    waiting_for : tuple[Prerequisite, ...]
        While ``dispatch_state`` is ``Waiting``: what the job waits for, in order
        (``functions.domain.prerequisites``); empty once released.
    depends_on : tuple[Dependency, ...]
        The job's parents and the condition each must meet (``functions.domain.dependencies``), as
        submitted.
    inputs_from : tuple[InputsFrom, ...]
        The parents whose outputs the job starts with, and which of them (patterns).
    has_dependents : bool
        Some job was submitted depending on this one and registered by a wait item (records from
        before ``dependents``): its ending Queries its waiters (``functions.logic.waits``).
    dependents : tuple[str, ...]
        The ids of the jobs submitted depending on this one while it was not final (appended before
        each child is written, at most ``dependencies.MAX_DEPENDENTS``): its ending settles each.
    item_dependents : tuple[str, ...]
        An ``Array``'s children arrays submitted with ``mode`` ``perItem`` on it (appended like
        ``dependents``): each of its items' ends releases or ends the same item of each
        (``functions.logic.item_dependencies``).
    array_released : tuple[int, ...]
        A ``perItem`` child array: the items released so far, in release order (each once its parent's
        item succeeded); its first ``array_admitted`` are in spans of one, each at its own index.
    array_ended_items : frozenset[int]
        Such an array's items ended because their parent's item did not succeed (each also in
        ``array_withdrawn``).
    array_containers : int | None
        An ``Array`` whose containers take many items (``parallelism``): how many containers (AWS
        Batch array children, 1..``array_size``) run its items (``worker.item_loop``); its spans, its
        admission and its quota count containers (``array_children``). None: one item per container.
    array_containers_settled : frozenset[int]
        An array whose containers take many items: the containers (global array-child indexes)
        whose end was settled (``functions.logic.container_events``), each once.
    settled_parents : frozenset[str]
        While the job waits: the parents whose final status it has taken account of (each counted
        once, ``functions.logic.waits.parent_settled``); it is judged against all of them once this
        holds every parent.
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
    batch_reason: str | None = None
    warnings: tuple[str, ...] = ()
    termination_requested_at: datetime | None = None
    termination_attempts: int = 0
    record_expires_at: datetime | None = None
    credits_settled: Decimal = ZERO
    array_spans: tuple[str, ...] = ()
    # The dedicated compute the job runs on (``functions.domain.computes``): its queue, no charge.
    compute: str | None = None
    submitted_by: str | None = None
    # The Python (major.minor) the job runs on (``functions.domain.runtime``); None on a record written
    # before jobs chose one (it ran the default).
    python_version: str | None = None
    # The environment it runs in (``functions.domain.environments``); None: the worker image's packages.
    environment: JobEnvironment | None = None
    dispatch_state: DispatchState | None = None
    dispatch_claimed_at: datetime | None = None
    array_admitted: int = 0
    array_queue: tuple[QueuedSpan, ...] = ()
    array_withdrawn: tuple[WithdrawnSpan, ...] = ()
    waiting_for: tuple[Prerequisite, ...] = ()
    depends_on: tuple[Dependency, ...] = ()
    inputs_from: tuple[InputsFrom, ...] = ()
    has_dependents: bool = False
    dependents: tuple[str, ...] = ()
    settled_parents: frozenset[str] = frozenset()
    item_dependents: tuple[str, ...] = ()
    array_released: tuple[int, ...] = ()
    array_ended_items: frozenset[int] = frozenset()
    array_containers: int | None = None
    array_containers_settled: frozenset[int] = frozenset()

    @property
    def per_item_parent(self) -> str | None:
        """The array whose items release this array's items one by one (``dependsOn`` ``perItem``)."""
        return next((d.job_id for d in self.depends_on if d.mode is DependencyMode.PER_ITEM), None)

    @property
    def array_children(self) -> int:
        """An ``Array``'s AWS Batch array children: its containers (``array_containers``) when they
        take many items, else its items (``array_size``); 0 for a job that is no array. What its
        spans, admission and quota count."""
        return self.array_containers or self.array_size or 0

    @property
    def is_waiting(self) -> bool:
        """True while the job waits for a prerequisite (``DispatchState.WAITING``), before any quota."""
        return self.dispatch_state is DispatchState.WAITING and not self.is_final

    @property
    def holds_quota(self) -> bool:
        """True while the job holds its quota units (admitted, whether sent to AWS Batch yet or not).
        Never for a job on a dedicated compute: it runs on the compute's reservation."""
        return self.compute is None and self.dispatch_state in (
            DispatchState.ADMITTED,
            DispatchState.DISPATCHING,
            DispatchState.DISPATCHED,
        )

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

    def is_gone(self, now: datetime) -> bool:
        """True from the record's TTL on (``record_expires_at``, else ``submittedAt`` + 400 days): the
        job no longer exists for any route, listing or event, deleted by DynamoDB yet or not."""
        return record_is_gone(self.record_expires_at or self.submitted_at + RECORD_TTL, now)


def record_is_gone(expires_at: datetime, now: datetime) -> bool:
    """True when a record whose TTL is ``expires_at`` must be treated as deleted at ``now``
    (DynamoDB TTL deletes an expired item within days, not at once: readers filter)."""
    return now >= expires_at


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
    """Kinds of ledger entries (docs/http-api.md ``/account/usage``)."""

    CHARGE = "charge"
    GRANT = "grant"
    REFUND = "refund"
    # A dedicated compute's running time (``functions.domain.computes``).
    COMPUTE = "compute"


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
    # The dedicated compute a ``compute`` entry charges (or a job ran on), else None.
    compute: str | None = None


def job_rate(job: Job) -> Decimal:
    """What an hour of the job's Running time costs (credits): its machine class's price, or 0 on a
    dedicated compute, whose own running time is charged instead (``functions.domain.computes``)."""
    return ZERO if job.compute is not None else machine_class(job.machine_class).credits_per_hour


def charge_entry_id(job_id: str) -> str:
    """The deterministic ledger id of a job's charge."""
    return f"charge#{job_id}"


@dataclass(frozen=True, slots=True)
class BatchJobState:
    """What the service reads from one ``Batch Job State Change`` event's ``detail``.

    Field names follow the AWS Batch ``JobDetail`` (DescribeJobs) shape the event carries;
    times are milliseconds since the epoch as Batch sends them. ``array_index`` and ``array_size``
    are ``arrayProperties.index`` (an array child's, whose ``batch_job_id`` is ``<array id>:<index>``)
    and ``arrayProperties.size`` (an array job's own events, which also carry ``statusSummary``);
    both None for a job that is no array (AWS Batch API reference, ``ArrayPropertiesDetail``).
    ``account_id`` is the ``remote-batch:accountId`` tag the submit gave the Batch job (``tags``), a
    hint that lets the final event read the job and its account in one request; None without it.
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
    container_reasons: tuple[str, ...] = ()
    observed_at_ms: int | None = None
    array_index: int | None = None
    array_size: int | None = None
    account_id: str | None = None

    @property
    def reasons(self) -> tuple[str, ...]:
        """Every reason the event gives, most specific first: ``container.reason``, the last
        attempt's ``container.reason`` and ``statusReason`` (``container_reasons``), then the job's
        ``statusReason``."""
        given = [*self.container_reasons, self.status_reason or ""]
        return tuple(r for r in given if r and r.strip())

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
    """Milliseconds since the epoch (as AWS Batch sends them) to an aware UTC datetime (exact:
    ``charged_time.epoch_ms`` gives ``ms`` back)."""
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


@dataclass(frozen=True, slots=True)
class Transition:
    """The result of applying an event: the job after it and what changed.

    ``entered`` lists the statuses newly entered (oldest first); ``settles`` is True when the job
    becomes final with this event, so the caller must settle its charge in the same write;
    ``running_ms`` is the final attempt's chargeable Running time (None: nothing to charge);
    ``corrections`` are the event's times that could not be true and were clamped into the job's
    life (``functions.domain.charged_time``), for the caller to log.
    """

    before: Job
    after: Job
    entered: tuple[JobStatus, ...]
    running_ms: int | None = None
    corrections: tuple[TimeCorrection, ...] = ()

    @property
    def settles(self) -> bool:
        """True when this transition makes the job final."""
        return self.after.is_final and not self.before.is_final


MAX_TERMINATE_ATTEMPTS = 5


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


def _reasons(batch_reason: str | Sequence[str] | None) -> tuple[str, ...]:
    if batch_reason is None:
        return ()
    if isinstance(batch_reason, str):
        return (batch_reason,) if batch_reason.strip() else ()
    return tuple(r for r in batch_reason if r and r.strip())


def describe_failure(
    job: Job,
    machine: MachineClass,
    batch_reason: str | Sequence[str] | None,
    exit_code: int | None,
    error_summary: str | None,
) -> str:
    """The ``statusReason`` of a job that ended Terminated: a plain sentence, never ending in ``.``.

    Precedence: the service's own reason (abort, caps) > a queue time limit's cancel (no capacity,
    ``functions/domain/queue_limits.py``) > the worker's error summary (the
    exception's last line) > what AWS Batch said, by family (out of memory, timeout, the machine
    lost, the container not started; see ``batch_reasons``) > a reason of Batch's the service does
    not know, as it is > the exit code (137 killed, 139 segmentation fault, 128 + n a signal, else
    ``Exited with code N``) > ``Terminated by AWS Batch``.

    Parameters
    ----------
    batch_reason : str | Sequence[str] | None
        Batch's reasons, most specific first (``BatchJobState.reasons``), or one of them.
    """
    if job.termination_reason:
        return normalize_reason(job.termination_reason) or job.termination_reason
    reasons = _reasons(batch_reason)
    for reason in reasons:
        queue_limit = describe_queue_limit(reason, machine.name, job.geo_zone.value)
        if queue_limit:
            return queue_limit
    if error_summary and normalize_reason(error_summary):
        return normalize_reason(error_summary) or error_summary
    return _batch_sentence(job, machine, reasons, exit_code)


def _batch_sentence(job: Job, machine: MachineClass, reasons: tuple[str, ...], exit_code: int | None) -> str:
    """What AWS Batch's reasons and the exit code say, as ``describe_failure`` orders them."""
    family = family_of(reasons)
    if family is ReasonFamily.TIMEOUT:
        return timeout_cause(job, machine) or "The job ran longer than its AWS Batch time limit"
    if family is not None and family is not ReasonFamily.CONTAINER_EXITED:
        sentence = family_sentence(family, reasons, machine.memory_gib)
        if sentence is not None:
            return sentence
    # A reason the service does not know says more than an exit code; "Essential container in task
    # exited" says less.
    unknown = [r for r in reasons if family_of((r,)) is None]
    if unknown:
        return normalize_reason(unknown[0]) or "Terminated by AWS Batch"
    if exit_code not in (None, 0):
        return exit_code_sentence(exit_code)
    return normalize_reason(reasons[0] if reasons else None) or "Terminated by AWS Batch"


def is_infrastructure_loss(
    job: Job, batch_reason: str | Sequence[str] | None, error_summary: str | None
) -> bool:
    """True when the final attempt was lost to infrastructure (the machine went away, the service's
    container could not start): such an attempt is free (docs/architecture.md "Credits"). The service's own
    termination and an error of the user's code are never infrastructure."""
    if job.termination_reason or (error_summary and error_summary.strip()):
        return False
    return family_of(_reasons(batch_reason)) in INFRASTRUCTURE_FAMILIES


def success_warnings(machine: MachineClass, batch_reason: str | Sequence[str] | None) -> tuple[str, ...]:
    """Warnings of a job that SUCCEEDED although Batch reports trouble: a process killed for memory
    (the job's main process survived it)."""
    if family_of(_reasons(batch_reason)) is ReasonFamily.OUT_OF_MEMORY:
        limit = memory_sentence(machine.memory_gib)
        return (
            f"A process of the job was killed for using too much memory ({limit}); the job still succeeded",
        )
    return ()


def _ms(moment: datetime | None) -> int | None:
    return epoch_ms(moment) if moment is not None else None


def apply_batch_event(
    job: Job,
    state: BatchJobState,
    final_reason: str | None = None,
    *,
    arrived_at: datetime,
    warnings: tuple[str, ...] = (),
    charged: bool = True,
) -> Transition | None:
    """Apply one Batch event to a job, forward only.

    Parameters
    ----------
    job : Job
        The job as stored.
    state : BatchJobState
        The event's detail.
    final_reason : str | None
        For a FAILED event, the ``statusReason`` to record (see ``describe_failure``).
    arrived_at : datetime
        When the event arrived (the handler's clock): with the job's submission, the window its
        times are clamped into (``charged_time.final_attempt_times``, ``charged_time.running_start``).
    warnings : tuple[str, ...]
        For a SUCCEEDED event, its warnings (see ``success_warnings``).
    charged : bool
        False when the final attempt was lost to infrastructure (``is_infrastructure_loss``):
        the transition then has no running time to charge.

    Returns
    -------
    Transition | None
        None when the event changes nothing: the job is final, the event is older than what was
        applied (by attempt count, then status), or a duplicate. A final transition's
        ``running_ms`` is the final attempt's Running time (``completedAt - startedAt``, inside
        ``[submittedAt, arrived_at]``, never negative), or None when it never ran or is not charged.
    """
    if job.is_final or state.position <= job.event_position:
        return None
    target = BATCH_TO_JOB_STATUS[state.status]
    running_ms: int | None = None
    batch_reason = job.batch_reason
    job_warnings = job.warnings
    window = Window.of(job.submitted_at, arrived_at)
    if target.is_final:
        known = _ms(job.started_at) if job.status == JobStatus.RUNNING else None
        times = final_attempt_times(
            window,
            state.started_at_ms,
            state.stopped_at_ms,
            known_start_ms=known,
            observed_ms=state.observed_at_ms,
        )
        ever_ran = times.started_ms is not None
        started_at = ms_to_datetime(times.started_ms) if times.started_ms is not None else job.started_at
        completed_at = ms_to_datetime(times.stopped_ms) if times.stopped_ms is not None else None
        reason = normalize_reason(final_reason) if target == JobStatus.TERMINATED else None
        if charged:
            running_ms = times.running_ms
        batch_reason = raw_batch_reason(state.reasons)
        job_warnings = tuple(warnings) if target == JobStatus.SUCCEEDED else ()
    else:
        times = running_start(window, state.started_at_ms)
        ever_ran = times.started_ms is not None
        started_at = ms_to_datetime(times.started_ms) if times.started_ms is not None else job.started_at
        reason = normalize_reason(state.status_reason)
        completed_at = None
    entered = statuses_between(job.status, target, ever_ran=ever_ran)
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
        batch_reason=batch_reason,
        warnings=job_warnings,
    )
    return Transition(
        before=job, after=after, entered=tuple(entered), running_ms=running_ms, corrections=times.corrections
    )
