"""The interfaces the service logic needs. Adapters implement them with boto3; the local stack
implements the ones that differ from AWS (the Batch gateway) and tests implement fakes.

Every method documents the errors it raises; none returns a DynamoDB item or a boto3 response.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Protocol

from functions.domain.computes import Compute
from functions.domain.credits import Charge
from functions.domain.environments import Environment, EnvironmentSpec
from functions.domain.errors import UnreadableRecord
from functions.domain.fleet import AuditEntry, ClassAvailability
from functions.domain.images import ImagePolicy, ImageReference
from functions.domain.jobs import (
    Account,
    BatchJobState,
    Job,
    LedgerEntry,
    NotificationRecord,
    QueuedSpan,
    Transition,
)
from functions.domain.machine_classes import GeoZone, MachineClass
from functions.domain.prerequisites import Prerequisite
from functions.domain.presumed import PresumedTransition
from functions.domain.quotas import Demand, HeldJob, QuotaKey, QuotaLimits, Usage
from functions.domain.roles import AccountMembers, Member
from functions.domain.runtime import PythonRuntime
from functions.domain.status import JobStatus

Clock = Callable[[], datetime]
"""Returns the current time as an aware UTC datetime."""


class JobRepository(Protocol):
    """Jobs, accounts and the ledger (one DynamoDB store, so money moves in one transaction).

    A job past its record TTL is gone: no read returns it, and every update of a job that is gone
    (deleted or expired) raises ``RecordMissing`` instead of creating anything. Reads of a stored
    item that is not a whole job raise ``UnreadableRecord`` (listings skip and report it).
    """

    def create_job(self, job: Job) -> None:
        """Write a new job. Raises ``ConditionFailed`` when ``job_id`` exists."""

    def delete_job(self, job_id: str) -> None:
        """Remove a job that never reached AWS Batch (compensation of a failed submit)."""

    def get_job(self, job_id: str) -> Job | None:
        """The job, or None (also past its TTL). Raises ``UnreadableRecord`` for a partial item."""

    def list_jobs(
        self, account_id: str, status: JobStatus | None, limit: int, next_token: str | None
    ) -> tuple[list[Job], str | None]:
        """An account's top-level jobs, newest first, and the token of the next page (or None).

        A page may hold fewer than ``limit`` jobs (even none) while the token is set: expired jobs
        and other statuses are filtered out after the index is read.

        Raises ``ValidationFailed`` (``field="nextToken"``) for a token this store did not issue.
        """

    def list_token_after(self, job: Job) -> str:
        """The ``list_jobs`` token of the page that starts after ``job`` (one of the account's
        top-level jobs): a page cut short by its size goes on from there."""

    def set_batch_job_id(self, job_id: str, batch_job_id: str) -> None:
        """Record the AWS Batch job id returned by SubmitJob (no-op if an event recorded it first)."""

    def save_transition(self, transition: Transition, now: datetime) -> None:
        """Store a non-final transition. Raises ``ConditionFailed`` when the stored job moved since
        ``transition.before`` was read (a concurrent or replayed event)."""

    def save_presumed_transition(
        self, presumed: PresumedTransition, now: datetime
    ) -> tuple[Job | None, Job | None]:
        """Store an event's transition without reading the job, only if ``presumed.holds_for`` the
        stored job: returns (the job written, None), else (None, the job as stored). Raises
        ``RecordMissing`` when the job is gone, ``UnreadableRecord`` for an item that is not a job."""

    def get_job_and_account(self, job_id: str, account_id: str) -> tuple[Job | None, Account | None]:
        """The job and the account in one strongly consistent read (each None when absent; the job
        also when past its TTL). Raises ``UnreadableRecord`` for a job item that is not a job."""

    def settle(
        self,
        transition: Transition,
        charge: Charge,
        entry: LedgerEntry | None,
        now: datetime,
        claims: frozenset[str] = frozenset(),
    ) -> bool:
        """Store a final transition with its charge in one transaction: the job update (with the
        notification keys ``claims`` added to the job's claimed ones), the ledger
        entry (deterministic id, written only if absent), the balance change and the job's quota
        given back. Returns False when that release proved nothing of the account was queued (no
        held job waits for it), True when held jobs may wait.

        Raises ``ConditionFailed`` when the job moved since read, the entry exists, or the balance
        changed below the charge (the caller re-reads and retries).
        """

    def set_termination_reason(self, job_id: str, reason: str) -> Job | None:
        """Record why the service is terminating a job, unless it is final or already has one.

        Returns the job after the write, or None when nothing was written.
        """

    def claim_termination(self, job_id: str, now: datetime) -> bool:
        """Record that TerminateJob is being sent for the job; True only for the writer that did
        (none in flight, not final, attempts left)."""

    def release_termination(self, job_id: str) -> None:
        """Forget a TerminateJob request that failed, so it may be sent again later."""

    def claim_notification(self, job_id: str, key: str, while_open: bool = False) -> bool:
        """Add ``key`` to the job's sent set; True only for the writer that added it (and, with
        ``while_open``, only while the job is not final)."""

    def release_notification(self, job_id: str, key: str, failure: str) -> None:
        """Remove ``key`` after a transient publish failure, so a retry can claim it again; the key
        stays owed, ``failure`` (``notification_schedule.failure_record``) is added to the job's
        publish failures and the job is listed for the meter's retries."""

    def take_sms_allowance(self, account_id: str, hour: str, limit: int) -> bool:
        """Count one SMS for the account in the clock hour ``hour``; False once ``limit`` were."""

    def list_notification_retries(self) -> Iterable[str]:
        """Ids of jobs with a notification whose publish failed (a sparse index)."""

    def request_notification_retry(self, job_id: str) -> None:
        """List a job for the meter's next tick: it owes more than one delivery sends."""

    def clear_notification_retry(self, job_id: str) -> None:
        """Unlist a job once none of its notifications is left to send again."""

    def append_notification_record(self, job_id: str, record: NotificationRecord) -> None:
        """Add a line to the job's ``notificationLog`` (the newest few hundred are kept)."""

    def list_metered_jobs(
        self, on_unreadable: Callable[[UnreadableRecord], None] | None = None
    ) -> Iterable[Job]:
        """Jobs that are Starting or Running (a sparse index: cost grows with running jobs only);
        unreadable items are skipped and passed to ``on_unreadable``."""

    def mark_data_deleted(self, job_id: str, now: datetime) -> None:
        """Record that a final job's inputs, outputs and log were deleted at ``now``."""

    def list_stale_jobs(
        self, last_event_before: datetime, on_unreadable: Callable[[UnreadableRecord], None] | None = None
    ) -> Iterable[Job]:
        """Jobs not final whose last event is older than ``last_event_before`` (events may be lost);
        unreadable items are skipped and passed to ``on_unreadable``."""

    def mark_reconciled(self, job_id: str, now: datetime) -> None:
        """Record that the meter checked a non-final job with Batch at ``now``."""

    def list_unfinished_jobs_on(self, account_id: str, compute: str) -> Iterable[Job]:
        """The account's top-level jobs (single jobs and array parents) submitted to dedicated
        compute ``compute`` that are not final (held, queued, starting or running)."""

    def update_contacts(self, account: Account) -> Account:
        """Store the account's contacts (None removes); ``ConditionFailed`` for an unknown account."""

    def grant_credits(self, entry: LedgerEntry) -> Account:
        """Add a ``grant`` entry and its credits in one transaction; ``ConditionFailed`` on a race."""

    def raise_credits_spent(self, job_id: str, credits: Decimal) -> bool:
        """Set ``creditsSpent`` to ``credits`` if the job is Running and it would not lower it."""

    def get_account(self, account_id: str) -> Account | None:
        """The account, or None."""

    def create_account(self, account: Account, now: datetime) -> Account:
        """Create the account if absent (with a ``grant`` entry for a positive starting balance);
        returns what is stored."""

    def list_ledger(self, account_id: str, start: datetime | None, end: datetime | None) -> list[LedgerEntry]:
        """An account's ledger entries in ``[start, end)``, newest first."""

    def get_ledger_entry(self, account_id: str, entry_id: str) -> LedgerEntry | None:
        """One ledger entry by its deterministic id, read strongly consistent, or None."""

    def list_ledger_page(
        self,
        account_id: str,
        start: datetime | None,
        end: datetime | None,
        limit: int,
        next_token: str | None,
    ) -> tuple[list[LedgerEntry], str | None]:
        """At most ``limit`` of an account's entries in ``[start, end)``, newest first, from
        ``next_token`` (None: the newest), and the token of the next page (None: no more). A page may
        hold fewer while its token is set. Raises ``ValidationFailed`` (``field="nextToken"``) for a
        token this store did not issue for this account."""

    # -- members (``functions.domain.roles``) -----------------------------------------------------
    def get_members(self, account_id: str, user_id: str | None = None) -> AccountMembers:
        """The account's members read strongly consistent (with ``user_id``: only that user's entry,
        the one read of a request's authorization)."""

    def save_members(self, account_id: str, members: Mapping[str, Member], expected_version: int) -> None:
        """Replace the member map while its version is ``expected_version``; ``ConditionFailed``
        when another change came first or the account is gone."""

    # -- array jobs (``functions.domain.arrays``) --------------------------------------------------
    def set_array_spans(self, job_id: str, batch_job_ids: Sequence[str]) -> None:
        """Record an array's Batch job ids (one per span, in offset order) and the first as its
        ``batchJobId``. ``RecordMissing`` when the job is gone."""

    def save_child_event(
        self,
        transition: Transition,
        *,
        created: bool,
        charge: Charge | None,
        entry: LedgerEntry | None,
        settled_at_most: Decimal | None,
        now: datetime,
    ) -> None:
        """Store an array child's transition and move its parent's ``childStatusCounts`` (and, when
        it settles, the parent's ``creditsSettled``/``creditsSpent``, the ledger entry, the balance
        and, for a child holding quota, its units given back) in ONE transaction.

        Parameters
        ----------
        created : bool
            The child's first event: the child is written only if absent (else updated only from
            the event position it was read at), so a replayed event changes nothing.
        charge, entry :
            The settled charge and its ledger entry (None: nothing to charge).
        settled_at_most : Decimal | None
            With an array ``creditConstraint``: the parent's ``creditsSettled`` must be at most this
            (the cap less this charge), so concurrent settlements never add up past the cap.

        Raises ``ConditionFailed`` on any lost race (re-read, retry); ``RecordMissing`` when the
        parent is gone.
        """

    def save_container_items(
        self,
        parent_id: str,
        items: Sequence[Job],
        *,
        container: int | None,
        credits: Decimal,
        entry: LedgerEntry | None,
        release: Job | None,
        settled_at_most: Decimal | None,
        now: datetime,
    ) -> None:
        """Store final item records of an array whose containers take many items (each put only
        if absent) and move the parent's ``childStatusCounts`` from ``Queued`` by them, in ONE
        transaction (at most ``MAX_CONTAINER_ITEMS`` items). With ``container`` (its global
        array-child index; the container's first write) the same transaction adds it to the
        parent's ``arrayContainersSettled`` (only if absent: a container is settled once), adds
        ``credits`` to its ``creditsSettled``, writes the container's ledger entry and balance
        change (``entry``) and gives back ``release``'s quota units (the container, a template
        child holding them).

        Raises ``ConditionFailed`` when any condition failed (an item already stored, the
        container already settled: a replay; the balance or cap moved: a race), ``RecordMissing``
        when the parent is gone, ``ValueError`` for more items than a transaction takes.
        """

    def start_array(
        self, job_id: str, started_at: datetime, now: datetime, *, keep_reason: bool = False
    ) -> bool:
        """Move a Queued array parent to Running (history Starting, Running); True for the writer
        that did. ``keep_reason`` keeps its ``statusReason`` (children still held for quota)."""

    # -- an array's spans through the quota and the dispatcher (``functions.logic.array_admission``) --
    def admit_span(self, account_id: str, held: HeldJob, size: int, count: int, limits: QuotaLimits) -> bool:
        """Admit the next ``count`` children of the held array ``held`` (``size`` children) as one span:
        the parent records it ``Admitted`` in its queue and its units move from queued to in use within
        ``limits``, in one conditional transaction; False (nothing written) when a limit or the parent
        moved."""

    def admit_item(self, account_id: str, held: HeldJob, parent: Job, limits: QuotaLimits) -> bool:
        """Admit the next released item of the held ``perItem`` array ``parent`` (as read) as a span of
        one at its own index, its units from queued to in use within ``limits``, in one conditional
        transaction; False (nothing written) when a limit or the array moved."""

    def release_item(self, child: Job, index: int, reason: str) -> bool:
        """Release item ``index`` of the held ``perItem`` array ``child`` (once), its units counted as
        queued on its ``held#`` item, ``statusReason`` ``reason``; False when it was released or ended
        before, or the array no longer takes releases."""

    def end_items(self, child: Job, indices: Sequence[int], now: datetime) -> bool:
        """End items ``indices`` of the held ``perItem`` array ``child`` (as read) ``Terminated``, free;
        False (nothing written) when the array moved since it was read."""

    def claim_span(self, parent_id: str, offset: int, now: datetime) -> Job | None:
        """A span ``Admitted`` → ``Dispatching`` while the array is not ending; the parent, or None."""

    def release_span(self, parent_id: str, offset: int) -> bool:
        """A span's claim given back (``Dispatching`` → ``Admitted``); False when it was not claimed."""

    def record_span(self, parent_id: str, offset: int, batch_job_id: str) -> Job | None:
        """A claimed span's Batch id appended to ``arraySpans``, the span out of the queue; the parent,
        or None when the span was not claimed."""

    def withdraw_spans(self, parent: Job, spans: Sequence[QueuedSpan], reason: str, now: datetime) -> bool:
        """End the held remainder and ``spans`` of ``parent`` (as read) ``Terminated``, free, their units
        given back, in one transaction; False when the parent moved since it was read."""

    def finish_array(self, parent: Job, now: datetime) -> bool:
        """Store an array parent's final status (``parent`` as ``arrays.array_outcome`` made it),
        its ``creditsSpent`` set to its ``creditsSettled``; only when the stored parent is not final
        and its ``creditsSettled`` is still ``parent.credits_settled``. True for the writer that did."""

    def get_jobs(self, job_ids: Sequence[str]) -> list[Job]:
        """The live jobs among ``job_ids`` (strongly consistent reads), in no particular order."""

    # -- quotas and the dispatcher (``functions.domain.quotas``, ``functions.logic.dispatch``) -----------
    def get_quota_limits(self, account_id: str) -> QuotaLimits:
        """The account's limits: its overrides over the defaults."""

    def get_account_and_quota_limits(self, account_id: str) -> tuple[Account | None, QuotaLimits | None]:
        """The account (None when absent) and its limits (None without quotas), in one read."""

    def put_quota_limits(self, account_id: str, limits: QuotaLimits) -> None:
        """Store the account's overrides."""

    def get_quota_usage(self, account_id: str) -> Usage:
        """Units in use and queued per family and zone, and vCPUs in all (strongly consistent)."""

    def list_held_jobs(
        self, account_id: str, key: QuotaKey | None = None, *, limit: int = 200, after: str | None = None
    ) -> list[HeldJob]:
        """Jobs waiting for quota (one bounded read of at most ``limit``, 1..1000): with ``key``, that
        family and zone's oldest first, after the job id ``after`` when given (fewer than ``limit``:
        none is left); without, the first of every key, by key. Each with its last waiting reason."""

    def hold_job(self, job: Job) -> None:
        """Create a job held for quota (``dispatchState`` ``Held``), counted as queued, in one write.
        Raises ``ConditionFailed`` when the id exists."""

    def create_admitted_job(self, job: Job, limits: QuotaLimits) -> bool:
        """Create a job admitted at once, its units counted in use, in one conditional write: only
        while nothing of its family and zone is queued and it fits ``limits``. False (nothing written)
        otherwise; ``ConditionFailed`` when the id exists."""

    def admit_job(self, account_id: str, held: HeldJob, limits: QuotaLimits) -> bool:
        """Move a held job's units to in use, only within ``limits`` (a conditional transaction); False
        when a limit would be exceeded or the job is no longer held."""

    def set_waiting_reason(self, job_id: str, reason: str) -> None:
        """Set a held job's ``statusReason`` (no-op once it is no longer held), also as the reason its
        held record carries (``HeldJob.reason``)."""

    def claim_dispatch(self, job_id: str, now: datetime) -> Job | None:
        """``Admitted`` → ``Dispatching`` (claimed at ``now``) while not final; the job, or None for the
        writers that lost."""

    def release_dispatch(self, job_id: str, reason: str | None = None) -> bool:
        """``Dispatching`` → ``Admitted`` (SubmitJob failed for now, a dead dispatcher's claim whose
        job AWS Batch does not have, or its class out of service: ``reason`` then becomes its
        ``statusReason``); False when the job was no longer ``Dispatching``."""

    def record_dispatch(self, job_id: str, batch_job_id: str, *, clear_reason: bool = False) -> Job | None:
        """Record SubmitJob's Batch job id and ``Dispatched`` (``clear_reason``: and remove the
        ``statusReason`` a parked job waited with); the job after the write, or None."""

    # -- jobs waiting for prerequisites (``functions.logic.waits``) ---------------------------------
    def create_waiting_job(self, job: Job) -> None:
        """Create a job ``Waiting`` for ``job.waiting_for`` (holding no quota) and one wait item per
        prerequisite that is no parent (a parent lists its children itself). Raises
        ``ConditionFailed`` when the id exists (nothing written)."""

    def list_waiters(self, prerequisite: Prerequisite) -> Iterable[str]:
        """The ids of the jobs with a wait item for ``prerequisite`` (some may no longer wait)."""

    def delete_waits(self, job_id: str, prerequisites: Sequence[Prerequisite]) -> None:
        """Delete the job's wait items for ``prerequisites``."""

    def release_waiting_job(self, released: Job) -> bool:
        """Store the release of a ``Waiting`` job as ``released`` has it (``Held``, counted as queued;
        ``Admitted`` on a dedicated compute), only while it still waits: False, nothing written, when
        another writer released or ended it first."""

    def set_wait_reason(self, job_id: str, reason: str, *, settled: frozenset[str] = frozenset()) -> None:
        """Set a waiting job's ``statusReason`` and add ``settled`` to its ``settled_parents`` (no-op
        once it no longer waits)."""

    def mark_has_dependents(
        self, parent_id: str, account_id: str, child_id: str, *, per_item: bool = False
    ) -> Job | None:
        """Append ``child_id`` to the ``dependents`` (``per_item``: ``itemDependents``) of job
        ``parent_id`` of ``account_id`` unless it is
        final, or holds ``MAX_DEPENDENTS`` ids, or holds it already; the job as it stands either way,
        None when the account has no such live job."""

    def parent_settled(self, child_id: str, parent_id: str) -> Job | None:
        """Count parent ``parent_id``'s settlement on the waiting job ``child_id`` (once: its
        ``settled_parents``); the job either way, None when it is gone or no longer waits."""

    def list_waiting_job_ids(self, machine_class: str, geo_zone: GeoZone) -> tuple[list[str], list[str]]:
        """(single jobs still ``Queued``, unfinished arrays) of ``machine_class`` in ``geo_zone``: their
        ids, from the sparse ``unfinished`` index (cost grows with the jobs in flight)."""


@dataclass(frozen=True, slots=True)
class StoredObject:
    """An object in a zone's bucket: key relative to the bucket, size in bytes."""

    key: str
    size: int


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    """An object's metadata: key, size in bytes, Content-Type as stored."""

    key: str
    size: int
    content_type: str


class BlobStore(Protocol):
    """A geo zone's S3 bucket (``inputs/``, ``outputs/``, each expiring after 14 days)."""

    def put(self, key: str, data: bytes, content_type: str) -> None:
        """Store ``data`` at ``key``. Raises ``DependencyFailed`` on an S3 error."""

    def get(self, key: str, max_bytes: int | None = None) -> bytes | None:
        """The object's bytes, or None when absent. Raises ``PayloadTooLarge`` over ``max_bytes``."""

    def size(self, key: str) -> int | None:
        """The object's size in bytes, or None when absent."""

    def describe(self, key: str) -> ObjectInfo | None:
        """The object's size and Content-Type, or None when absent."""

    def list(self, prefix: str) -> list[StoredObject]:
        """Objects under ``prefix``."""

    def list_page(
        self, prefix: str, start_after: str | None, max_keys: int
    ) -> tuple[Sequence[StoredObject], bool]:
        """At most ``max_keys`` (1..1000) objects under ``prefix`` whose keys come after ``start_after``
        (a whole key; None: from the first), in key order (UTF-8 bytes), and whether more follow."""

    def delete_prefix(self, prefix: str) -> int:
        """Delete every object under ``prefix``; returns how many."""

    def copy(self, copies: Sequence[tuple[str, str]]) -> tuple[str, ...]:
        """Copy each ``(source, target)`` key within the bucket (each object up to 5 GiB; a target is
        overwritten); returns the sources that do not exist, in order. Raises ``DependencyFailed``."""

    def presigned_get(self, key: str, expires_seconds: int) -> str:
        """A presigned GET URL for ``key``, valid ``expires_seconds``."""

    def presigned_put(self, key: str, expires_seconds: int, content_length: int, content_type: str) -> str:
        """A presigned PUT URL for ``key`` that takes exactly ``content_length`` bytes of
        ``content_type``, valid ``expires_seconds``."""


@dataclass(frozen=True, slots=True)
class BatchSubmission:
    """What the service asks AWS Batch to run (SubmitJob's parameters, in the service's terms).

    ``memory_mib`` and ``vcpus``/``gpus`` become ``containerOverrides.resourceRequirements``;
    ``timeout_seconds`` becomes ``timeout.attemptDurationSeconds`` (AWS minimum 60 s, per child of
    an array job). ``array_size`` (2..10,000) makes it an AWS Batch array job
    (``arrayProperties.size``) whose children are ``<batch job id>:<index>``. ``share_identifier``
    (``shareIdentifier``) is the account's share on a shared queue, which has a fair-share scheduling
    policy; None on a dedicated compute's queue, which has none (``functions.domain.fair_share``).
    ``image`` (a job in an image environment): the job runs with the definition registered for that
    image on ``job_definition``'s class (``JobDefinitions``), a multi-container job whose supervisor
    container takes ``environment``; the resources are the definition's.
    """

    job_name: str
    job_queue: str
    job_definition: str
    vcpus: int
    memory_mib: int
    gpus: int
    environment: Mapping[str, str]
    timeout_seconds: int | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    array_size: int | None = None
    share_identifier: str | None = None
    image: ImageJob | None = None


class BatchGateway(Protocol):
    """AWS Batch in one geo zone's region, or the local executor that stands in for it."""

    def submit_job(self, submission: BatchSubmission) -> str:
        """Submit; returns the Batch job id. Raises ``DependencyFailed`` when Batch refuses."""

    def terminate_job(self, batch_job_id: str, reason: str) -> None:
        """Terminate a job in any non-final Batch status; ``reason`` becomes its statusReason."""

    def describe_jobs(self, batch_job_ids: Sequence[str], observed_at_ms: int) -> list[BatchJobState]:
        """The current state of up to 100 jobs (DescribeJobs); ids Batch no longer knows are absent.

        ``observed_at_ms`` stands in for a final job's missing ``stoppedAt``.
        """

    def find_job_by_name(self, job_queue: str, job_name: str) -> str | None:
        """The Batch job id of the job named ``job_name`` in ``job_queue`` (ListJobs with a ``JOB_NAME``
        filter: jobs in any status, while Batch keeps them), the oldest when several; None when Batch
        has none. Raises ``DependencyFailed`` when Batch fails or cannot be reached."""


@dataclass(frozen=True, slots=True)
class LogEvent:
    """One line of a job's console log."""

    timestamp: datetime
    message: str


class LogReader(Protocol):
    """A geo zone's CloudWatch Logs group of job console output."""

    def events(self, log_stream_name: str, since: datetime | None) -> Iterator[LogEvent]:
        """The stream's events from ``since`` on, oldest first, read lazily page by page as they are
        consumed (nothing if the stream does not exist). Raises ``DependencyFailed`` while iterating."""

    def delete(self, log_stream_name: str) -> None:
        """Delete the stream (no-op when it does not exist)."""


@dataclass(frozen=True, slots=True)
class OutgoingNotification:
    """A message to one person by one method.

    ``to`` is the address (email, E.164 phone or webhook URL) and is masked wherever it is logged;
    ``secret`` is the account's webhook signing secret (Webhook only; never logged or shown);
    ``delivery_id`` is the same for every attempt to send this notification (a webhook's
    ``webhook-id``: ``functions.domain.webhook_signing.delivery_id``).
    """

    job_id: str
    account_id: str
    event: str
    method: str
    to: str
    subject: str
    message: str
    at: datetime
    secret: str | None = field(default=None, repr=False)
    delivery_id: str = ""


class EmailSubscriptions(Protocol):
    """Each account's email topic (one per account and address) and its email subscription."""

    def subscribe(self, account_id: str, email: str) -> str:
        """Create the account's topic for ``email`` (idempotent) and subscribe the address; returns the
        subscription ARN (pending until the owner confirms). Raises ``DependencyFailed``."""

    def remove(self, account_id: str, email: str) -> None:
        """Delete the account's topic for ``email`` and its subscription, pending or confirmed
        (nothing to do when it is gone). Raises ``DependencyFailed``."""

    def status(self, account_id: str, email: str) -> str:
        """``pending`` or ``confirmed`` (``pending`` also when SNS no longer knows the topic)."""


class HostResolver(Protocol):
    """DNS: the addresses a host name (or a numeric spelling of one) resolves to."""

    def resolve(self, host: str, port: int) -> list[str]:
        """Every address ``host`` resolves to; [] when it does not resolve."""


class Notifier(Protocol):
    """SNS: Email through the account's own topic, SMS straight to the phone; webhooks by HTTPS."""

    def send(self, notification: OutgoingNotification) -> None:
        """Publish. Raises ``DeliveryRefused`` when it is refused for good, ``DependencyFailed`` when
        the failure may pass."""


@dataclass(frozen=True, slots=True)
class BatchRoute:
    """The job queue and job definition a (zone, machine class) runs on."""

    job_queue: str
    job_definition: str


@dataclass(frozen=True, slots=True)
class JobQueueInfo:
    """An AWS Batch job queue as DescribeJobQueues tells it: ``state`` ``ENABLED``/``DISABLED``,
    ``status`` (``VALID``, ``UPDATING``...), its compute environments' ARNs in order."""

    name: str
    arn: str
    state: str
    status: str
    compute_environments: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ComputeEnvironmentInfo:
    """An AWS Batch compute environment as DescribeComputeEnvironments tells it; ``max_vcpus``
    is its ``computeResources.maxvCpus`` (None for an unmanaged one)."""

    name: str
    arn: str
    state: str
    status: str
    max_vcpus: int | None


class FleetControl(Protocol):
    """The operator's switches of one geo zone's AWS Batch (or the local executor's stand-ins).

    Every method raises ``DependencyFailed`` when Batch refuses, throttles or cannot be reached.
    """

    def describe_job_queues(self, job_queues: Sequence[str]) -> list[JobQueueInfo]:
        """The queues named (names or ARNs, at most 100); queues Batch does not know are absent."""

    def set_job_queue_state(self, job_queue: str, state: str) -> None:
        """UpdateJobQueue ``state`` (``ENABLED``/``DISABLED``); setting the state it has is a no-op."""

    def describe_compute_environments(self, environments: Sequence[str]) -> list[ComputeEnvironmentInfo]:
        """The compute environments named (names or ARNs, at most 100); unknown ones are absent."""

    def set_max_vcpus(self, environment: str, max_vcpus: int) -> None:
        """UpdateComputeEnvironment ``computeResources.maxvCpus``."""


@dataclass(frozen=True, slots=True)
class ClassLoad:
    """Jobs of one (machine class, geo zone) that are not final: ``queued`` (Queued) and
    ``running`` (Starting or Running)."""

    queued: int = 0
    running: int = 0


class OperationsStore(Protocol):
    """The operators' state (which classes are out of service) and their audit log (DynamoDB)."""

    def class_states(self, max_age_seconds: float) -> Mapping[tuple[str, GeoZone], ClassAvailability]:
        """Every stored (class, zone) state, read at most ``max_age_seconds`` ago by this store
        (one Query, then served from memory); a missing pair is in service."""

    def get_class_state(self, machine_class: str, geo_zone: GeoZone) -> ClassAvailability:
        """The stored state, strongly consistent (version 0, in service, when none is stored)."""

    def save_class_state(self, state: ClassAvailability, audit: AuditEntry) -> None:
        """Store ``state`` and its audit entry in one transaction, only if the stored version is
        ``state.version - 1``. Raises ``ConditionFailed`` when another change came first."""

    def save_quota_limits(self, account_id: str, limits: QuotaLimits, audit: AuditEntry) -> None:
        """Store an account's quota ``limits`` and their audit entry in one transaction, only if the
        stored version is ``limits.version - 1``. Raises ``ConditionFailed`` when another change came
        first."""

    def record(self, audit: AuditEntry) -> None:
        """Add an audit entry (of a change made outside DynamoDB, e.g. in AWS Batch)."""

    def list_audit(self, limit: int, next_token: str | None) -> tuple[list[AuditEntry], str | None]:
        """Audit entries newest first, at most ``limit``, and the next page's token (or None).
        Raises ``ValidationFailed`` (``field="nextToken"``) for a token it did not issue."""

    def grant_credits(self, entry: LedgerEntry, audit: AuditEntry) -> bool:
        """The grant's ledger entry, the balance change and the audit entry in one transaction.
        False (nothing written) when the ledger entry exists already: the grant was made before.
        Raises ``ConditionFailed`` when the balance changed since read (re-read, retry)."""

    def count_unfinished(self) -> Mapping[tuple[str, GeoZone], ClassLoad]:
        """Jobs that are not final per (class, zone), array parents left out (their children count)."""


@dataclass(frozen=True, slots=True)
class ZoneServices:
    """What the service uses in one geo zone's region (``fleet``: the operator's switches of its
    AWS Batch; None where it has none, e.g. in tests that do not need them)."""

    blobs: BlobStore
    batch: BatchGateway
    logs: LogReader
    routes: Mapping[str, BatchRoute]
    bucket: str
    region: str
    fleet: FleetControl | None = None
    # Dedicated computes' environments and queues (None: this deployment has none in the zone).
    computes: ComputeEnvironments | None = None


class DispatchQueue(Protocol):
    """Where admitted jobs wait for the dispatcher (an SQS queue with a DLQ deployed; a local queue
    in the local stack; ``InlineDispatch`` where there is no queue). Delivery is at least once: the
    dispatcher's claim makes a repeat harmless."""

    @property
    def inline(self) -> bool:
        """True when a message is handled within the call that sends it (``InlineDispatch``): the
        sender then reads what the dispatcher wrote; False for a queue in between."""

    def send(self, job_ids: Sequence[str]) -> Sequence[Job | None] | None:
        """Enqueue each job id (a span's: ``<parent>#<offset>``). Returns None when they wait on a
        queue; inline, each single job as the dispatcher left it (None for a span, or one it wrote
        nothing of). Raises ``DependencyFailed`` when the queue refuses."""

    def request_admission(self, account_ids: Sequence[str]) -> None:
        """Ask the dispatcher to admit what each account's held jobs may take now (its quota's usage
        changed). The request is read after the caller's writes, so the admission sees them. Raises
        ``DependencyFailed`` when the queue refuses."""


SendJobs = Callable[["Services", Sequence[str]], Sequence[Job | None]]
"""The dispatcher's handling of job messages with given services: each job as it left it."""
AdmitAccounts = Callable[["Services", Sequence[str]], None]
"""The dispatcher's handling of admission requests with given services."""


@dataclass(frozen=True, slots=True)
class InlineDispatch:
    """The ``DispatchQueue`` where there is none (tests, a deployment without a dispatch queue): each
    message is handled within the call that sends it, by the dispatcher's own handling, with the
    services that hold this queue. Built by ``functions.bootstrap.inline_dispatch`` (``send_jobs``:
    each job's only SubmitJob; ``admit_accounts``: each account's admission), so the logic that
    ends or holds jobs reaches the dispatcher through this port and never imports it.

    A ``Services`` binds it to itself when made (``Services.__post_init__``; ``dataclasses.replace``
    makes new services, and the copy's queue then runs with the copy).
    """

    send_jobs: SendJobs
    admit_accounts: AdmitAccounts
    services: Services | None = field(default=None, compare=False, repr=False)

    @property
    def inline(self) -> bool:
        """Always True: messages are handled in the sending call."""
        return True

    def send(self, job_ids: Sequence[str]) -> Sequence[Job | None]:
        """Send each job to AWS Batch now (``send_jobs``); each as the dispatcher left it. Raises what
        the dispatcher raises."""
        return self.send_jobs(self._bound(), job_ids)

    def request_admission(self, account_ids: Sequence[str]) -> None:
        """Admit each account's held jobs now (``admit_accounts``). Raises what the admission raises."""
        self.admit_accounts(self._bound(), account_ids)

    def _bound(self) -> Services:
        if self.services is None:
            raise RuntimeError("an InlineDispatch runs only as the dispatch of a Services")
        return self.services


class EventCounter(Protocol):
    """Counts what the service did, as operators watch it (CloudWatch metrics on AWS).

    Events: ``JobsSubmitted``, ``JobsAborted``, ``CreditsCharged`` (an amount: the credits a settlement
    took), ``NotificationsSent``, ``NotificationsFailed`` (refused or given up), ``StuckJobs``.
    """

    def count(self, name: str, value: float = 1, *, amount: bool = False) -> None:
        """Add ``value`` to event ``name`` (``amount``: a quantity such as credits, not a count)."""


@dataclass(frozen=True, slots=True)
class Services:
    """Everything a handler needs, built once per Lambda cold start (or by the local stack / tests)."""

    store: JobRepository
    notifier: Notifier
    subscriptions: EmailSubscriptions
    zones: Mapping[GeoZone, ZoneServices]
    clock: Clock
    events: EventCounter
    # Where admitted jobs and admission requests go for the dispatcher (``DispatchQueue``).
    dispatch: DispatchQueue
    idempotency_table: str | None = None
    allowed_zones: Sequence[GeoZone] = ()
    allow_http_webhooks: bool = False
    # SMS per account and clock hour; the rest are recorded skipped in the job's notificationLog.
    sms_per_account_per_hour: int = 30
    # Resolves webhook hosts (their addresses must be public); None refuses every webhook URL.
    resolver: HostResolver | None = None
    # The Python versions jobs run on and the default (``functions.domain.runtime``).
    python: PythonRuntime = field(default_factory=PythonRuntime)
    # Most children per AWS Batch array job (``functions.domain.arrays.plan_spans``; AWS allows 10,000).
    array_span_size: int = 10_000
    # The operators' class states and audit log; None: every class is in service, no admin fleet routes.
    operations: OperationsStore | None = None
    # Dedicated computes (None: the deployment has none) and the prefix of their AWS Batch names.
    compute_store: ComputeRepository | None = None
    compute_prefix: str = ""
    # How long one minute of a compute's ``idleStopMinutes`` lasts: a minute, but on a local stack
    # given ``REMOTE_BATCH_IDLE_STOP_MINUTE_SECONDS`` (its end-to-end tests).
    idle_stop_minute: timedelta = timedelta(minutes=1)
    # Environments (None: the deployment has none) and what builds them (None: nothing builds,
    # an environment is refused); index URLs may be http where packages come from a local mirror.
    environment_store: EnvironmentRepository | None = None
    environment_builder: EnvironmentBuilder | None = None
    allow_http_indexes: bool = False
    # Resolves environments' own images to digests (None: jobs here run no images of their own, as on
    # the local stack, which has no container runtime).
    images: ImageRegistry | None = None

    def __post_init__(self) -> None:
        if isinstance(self.dispatch, InlineDispatch) and self.dispatch.services is not self:
            # An inline dispatch runs with the services that hold it: these, not those it was copied from.
            object.__setattr__(
                self, "dispatch", InlineDispatch(self.dispatch.send_jobs, self.dispatch.admit_accounts, self)
            )


# -- dedicated compute (``functions.domain.computes``) -------------------------------------------------
class ComputeRepository(Protocol):
    """Dedicated computes and the quota they hold (DynamoDB; the ledger and balances are the job
    store's tables, so a compute's charge moves money in one transaction with its record).

    Every write is conditional on the ``version`` the caller read; a lost race raises
    ``ConditionFailed`` (re-read, retry). Nothing here returns a DynamoDB item.
    """

    def create_compute(self, compute: Compute, reservation: Demand, limits: QuotaLimits) -> None:
        """Write a new compute and reserve its quota (``functions.domain.quotas``: only while the
        account's jobs and computes leave room for it within ``limits``), in one transaction.
        Raises ``ConditionFailed`` when the account has a compute of that name or the reservation does
        not fit (nothing written)."""

    def get_compute(self, account_id: str, name: str) -> Compute | None:
        """The compute (strongly consistent), or None."""

    def list_computes(self, account_id: str) -> list[Compute]:
        """The account's computes, by name."""

    def list_all_computes(self) -> Iterable[Compute]:
        """Every account's computes (the meter's tick; a sparse index)."""

    def save_compute(self, before: Compute, after: Compute, release: Demand | None = None) -> Compute:
        """Store ``after`` if the stored version is ``before.version`` (giving ``release``, the
        reservation of a compute that fails, back in the same transaction); returns it with the new
        version."""

    def settle_compute(
        self, before: Compute, after: Compute, entry: LedgerEntry, release: Demand | None = None
    ) -> Compute:
        """Store ``after``, put the ``compute`` ledger entry (only if absent), move the balance from
        ``entry.balance_after + entry.credits`` to ``entry.balance_after`` and give ``release`` back,
        in one transaction."""

    def remove_compute(self, before: Compute, release: Demand | None) -> None:
        """Delete a compute at ``before.version`` and give ``release`` (its reservation, None when it
        gave it back already) back, in one transaction."""

    def touch_compute(self, account_id: str, name: str, at: datetime) -> None:
        """Raise ``last_activity_at`` to ``at`` (never lower it); nothing when the compute is gone."""


@dataclass(frozen=True, slots=True)
class EnvironmentState:
    """A compute environment as ``DescribeComputeEnvironments`` shows it: ``status`` (``CREATING``,
    ``UPDATING``, ``DELETING``, ``DELETED``, ``VALID``, ``INVALID``), ``state`` (``ENABLED`` or
    ``DISABLED``), its vCPU bounds, and ``reason`` (its ``statusReason``)."""

    status: str
    state: str
    min_vcpus: int
    max_vcpus: int
    desired_vcpus: int
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class QueueState:
    """A job queue as ``DescribeJobQueues`` shows it: ``status`` (``CREATING``, ``UPDATING``,
    ``DELETING``, ``DELETED``, ``VALID``, ``INVALID``), ``state`` (``ENABLED``/``DISABLED``), ``reason``."""

    status: str
    state: str
    reason: str | None = None


class ComputeEnvironments(Protocol):
    """AWS Batch compute environments and job queues of dedicated computes in one geo zone's region
    (or the local executor's emulation). Every call is asynchronous on AWS: the ``describe_*`` calls
    say when it is done. Each raises ``DependencyFailed`` when Batch refuses."""

    def create_environment(self, name: str, machine: MachineClass) -> None:
        """CreateComputeEnvironment (managed EC2, the class's instance types, 0 vCPUs); none if it exists."""

    def describe_environment(self, name: str) -> EnvironmentState | None:
        """The environment, or None when it does not exist (or is DELETED)."""

    def set_capacity(self, name: str, vcpus: int) -> None:
        """UpdateComputeEnvironment: ``minvCpus = maxvCpus = desiredvCpus = vcpus``."""

    def disable_environment(self, name: str) -> None:
        """UpdateComputeEnvironment ``state=DISABLED`` (AWS deletes only a disabled environment)."""

    def delete_environment(self, name: str) -> None:
        """DeleteComputeEnvironment (its queue must be deleted first)."""

    def create_queue(self, name: str, environment: str) -> None:
        """CreateJobQueue on ``environment`` alone (it must be VALID); none if it exists."""

    def describe_queue(self, name: str) -> QueueState | None:
        """The queue, or None when it does not exist (or is DELETED)."""

    def disable_queue(self, name: str) -> None:
        """UpdateJobQueue ``state=DISABLED`` (AWS deletes only a disabled queue)."""

    def delete_queue(self, name: str) -> None:
        """DeleteJobQueue."""


# -- environments (``functions.domain.environments``) --------------------------------------------------
class EnvironmentRepository(Protocol):
    """The accounts' environments and how many of each account's are Building.

    Every write is conditional on the ``version`` the caller read; a lost race raises
    ``ConditionFailed`` (re-read, retry). Nothing here returns a DynamoDB item.
    """

    def create_environment(
        self, environment: Environment, max_building: int, replacing: Environment | None = None
    ) -> None:
        """Write a new, Building environment (with ``replacing``: over that stored record, at its
        version), counted among the account's builds only while fewer than ``max_building`` are, in
        one transaction. Raises ``ConditionFailed`` when the name is taken (the record changed) or the
        count is full (nothing written)."""

    def get_environment(self, account_id: str, name: str) -> Environment | None:
        """The environment (strongly consistent), or None."""

    def get_unnamed_environment(self, account_id: str, digest: str) -> Environment | None:
        """The account's unnamed environment (asked for inline by a job) of spec hash ``digest``, or None."""

    def list_environments(
        self, account_id: str, limit: int, next_token: str | None
    ) -> tuple[list[Environment], str | None]:
        """A page of at most ``limit`` of the account's named environments by name, and the next page's
        token (None on the last). Raises ``ValidationFailed`` (``nextToken``) for a token it did not
        issue for this account."""

    def save_environment(self, before: Environment, after: Environment) -> Environment:
        """Store ``after`` if the stored version is ``before.version`` (uncounting a build that ended);
        returns it with the new version."""

    def delete_environment(self, before: Environment, now: datetime, *, build_started: bool = True) -> None:
        """Delete the environment at ``before.version``; one Building stays counted among the
        account's builds, as retired, until its build reports (``retire_build``), unless its build
        never started (``build_started`` False: uncounted at once)."""

    def retire_build(self, account_id: str, log_stream_name: str) -> bool:
        """Uncount the build (named by its log stream) of an environment deleted while Building, once;
        False when there is no such retired build."""

    def retired_builds(self, account_id: str, before: datetime) -> list[str]:
        """The log stream names of the account's retired builds still counted, retired before ``before``."""


@dataclass(frozen=True, slots=True)
class BuildRequest:
    """One environment's build, as the builder takes it.

    ``log_stream_name`` is where the build's output goes (the home zone's log group); the outcome is
    reported with ``account_id``, ``name`` and ``spec_hash`` (``functions.logic.environments.record_build``),
    so a report for an environment deleted and asked again with another spec is ignored.
    """

    account_id: str
    name: str | None
    spec: EnvironmentSpec
    spec_hash: str
    log_stream_name: str


class EnvironmentBuilder(Protocol):
    """Resolves an environment's requirements to a lock and installs it once per build hash
    (``functions.domain.environments.build_hash``): locally a thread of the stack writing under its
    home (``remote_batch_local.environments``); in the cloud an AWS Batch job on the build zone's
    build queue (``functions.adapters.batch_builder``). A deployment without one answers
    ``PUT /environments/{name}`` with 501 ``NotSupported``."""

    #: The geo zone whose log group holds build logs (and whose bucket, deployed, the builds).
    zone: GeoZone

    def start_build(self, request: BuildRequest) -> None:
        """Begin the build and return; its outcome is reported later. A build of a hash already built
        (or building) reuses it. Raises ``DependencyFailed`` when the build could not be started."""

    def site_packages(self, build_hash: str) -> str | None:
        """Where a Ready build's packages are (a directory path the job side puts first on its
        ``sys.path``), or None when this builder has no such build."""


# -- environments' own images (``functions.domain.images``) ---------------------------------------------
class ImageRegistry(Protocol):
    """Resolves an image reference's tag to the digest jobs run it by (ECR's ``DescribeImages`` for
    ECR repositories, the registry's HTTP API for public ones), under the deployment's ``policy``."""

    #: Where this deployment's jobs may take images from.
    policy: ImagePolicy

    def resolve(self, image: ImageReference) -> str:
        """The image's digest (``sha256:<64 hex>``): its own when the reference carries one, else its
        tag's. Raises ``ImageNotFound`` (the message names the repository or tag that is missing),
        ``DependencyFailed`` when the registry fails or cannot be reached (nothing is written)."""


@dataclass(frozen=True, slots=True)
class ImageJob:
    """The job definition a job in an image environment runs with: ``image`` pinned by digest, pulled
    with ``repository_credentials`` (a secret ARN) when given, on the machine class and Python of
    ``base_definition`` (the service's own definition, whose worker image runs the supervisor)."""

    image: str
    base_definition: str
    repository_credentials: str | None = None


class JobDefinitions(Protocol):
    """A zone's AWS Batch job definitions of image environments: one per (image digest, machine class),
    registered on first use and cached (``functions.adapters.batch_definitions``); the Batch gateway
    asks it when it submits a ``BatchSubmission`` with an ``image``."""

    def definition_for(self, job: ImageJob) -> str:
        """The ARN of the definition for ``job``, registering it if none is cached. Raises
        ``DependencyFailed`` (``BatchRefused`` when AWS Batch refuses the definition)."""
