"""Array jobs through the quota and the dispatcher, span by span.

``POST /jobs`` with items writes the ``Array`` parent and answers 202 without calling AWS Batch
(``functions.logic.arrays.submit_array``). Its children are admitted through the account's quota a
**span** at a time, oldest first per account among arrays and single jobs alike (the parent's
``held#`` item sits in its family and zone's queue by its id, as a single job's does):

1. **Hold.** The parent is written ``Held`` (``quotas.hold``), every child counted queued; its
   ``statusReason`` is the quota reason while children remain held (``Waiting for quota: Basic vCPUs in
   UnitedStates (2 of 2 in use)``), as a single job's.
2. **Admit a span** (``admit_spans``, called by ``quotas.admit_waiting`` for a held array): the span
   takes as many children as fit in the free room (``domain.quotas.span_size_for``: room // one child's
   units, at most ``REMOTE_BATCH_ARRAY_SPAN_SIZE``, at least 1), and its units are added to usage in
   the same conditional transaction that records the span on the parent (``admit_span``). The next span
   waits for room; the parent stays ``Held`` until every child is in a span.
3. **Dispatch a span** (``dispatch_span``, from the dispatch queue: the message names
   ``<parent>#<offset>``): claimed before SubmitJob (``Admitted`` → ``Dispatching`` on the span's
   entry), paced and retried as a single job's SubmitJob (``dispatch.Pacer``, ``dispatch.backoff_seconds``),
   submitted as an AWS Batch array job of the span's size (a plain job for a span of one) named
   ``span_job_name`` and carrying ``REMOTE_BATCH_ARRAY_OFFSET``, then recorded (its Batch id appended to
   ``arraySpans``). A dispatcher that dies between its claim and the record leaves the span
   ``Dispatching``: the meter's backstop (``nudge_array``) looks it up in AWS Batch by name after
   ``dispatch.CLAIM_TIMEOUT`` before anything else, so no span is submitted twice.
4. **Children end.** Each child's end gives its units back in the transaction that settles it
   (``ArrayRecords.save_child_event``) and asks for an admission (``array_events``), so the next span
   goes as children end.

An abort (or a cap, or the balance) withdraws what never reached AWS Batch (``withdraw_unsent``): the
held remainder and the spans admitted but not claimed end ``Terminated``, free (the parent's counts
move, ``arrayWithdrawn`` names them, their units go back), in one transaction; the spans AWS Batch has
are terminated (``submission.terminate``) and a span whose SubmitJob is in flight is terminated by its
dispatcher once named. A span AWS Batch refuses for good ends likewise with the reason (``refuse``),
with every child not yet submitted: nothing half-written, nothing charged.

An array on a dedicated compute takes no quota: every span is queued ``Admitted`` at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger

from functions.domain.arrays import plan_spans, span_dispatch_id, span_job_name
from functions.domain.errors import BatchRefused, DependencyFailed
from functions.domain.jobs import ABORTED_BY_USER, DispatchState, Job, QueuedSpan
from functions.domain.machine_classes import machine_class
from functions.domain.quotas import AdmissionPlan, Demand, HeldJob, QuotaLimits
from functions.ports import BatchSubmission, Services

if TYPE_CHECKING:
    from functions.logic.dispatch import DispatchOutcome, Pacer

logger = Logger(child=True)

#: Environment variable of a span's container: the global index of the span's first item.
ARRAY_OFFSET_VARIABLE = "REMOTE_BATCH_ARRAY_OFFSET"
#: Re-reads of a parent whose withdrawal lost a race (a span claimed or admitted meanwhile).
MAX_WITHDRAW_ATTEMPTS = 10


class SpanAdmission(StrEnum):
    """What ``admit_spans`` did with one held array."""

    DONE = "done"  # every child is in a span now: the array left its key's queue
    GONE = "gone"  # the array is gone (deleted, past its record's TTL): the key goes on without it
    BLOCKED = "blocked"  # its next child does not fit: its key stops here (its reason refreshed)
    RACED = "raced"  # a write lost a race or the array moved: the admission re-reads


def queued_spans(parent: Job, span_size: int) -> tuple[QueuedSpan, ...]:
    """Every span of an array that takes no quota (on a dedicated compute), ``Admitted``, in order."""
    return tuple(
        QueuedSpan(span.offset, span.count, DispatchState.ADMITTED)
        for span in plan_spans(parent.array_size or 0, span_size)
    )


def span_ids(parent: Job) -> list[str]:
    """The dispatch queue's names of the parent's ``Admitted`` spans."""
    return [
        span_dispatch_id(parent.job_id, s.offset)
        for s in parent.array_queue
        if s.state == DispatchState.ADMITTED
    ]


def admit_spans(
    services: Services,
    account_id: str,
    held: HeldJob,
    *,
    plan: AdmissionPlan,
    limits: QuotaLimits,
    admitted: list[str],
    refresh_reason: Callable[[HeldJob], None],
) -> SpanAdmission:
    """Admit spans of the held array ``held`` (its key's oldest job in ``plan``'s order) while its next
    child fits, each sized to the room left (``AdmissionPlan.admit_span``) and written with one
    conditional transaction (``JobRepository.admit_span``); appends each span's dispatch name
    (``span_dispatch_id``) to ``admitted``. When the next child does not fit, ``refresh_reason`` gives
    the array its reason with the current numbers.

    Raises ``DependencyFailed`` (DynamoDB failed).
    """
    store = services.store
    parent = store.get_job(held.job_id)
    if parent is None:
        logger.warning("held array gone", job_id=held.job_id)
        return SpanAdmission.GONE
    if parent.is_final or parent.dispatch_state != DispatchState.HELD:
        return SpanAdmission.RACED
    size = parent.array_size or 0
    if size - parent.array_admitted != held.children:
        return SpanAdmission.RACED  # read before another writer's span
    current = held
    while True:
        count = plan.admit_span(current, services.array_span_size)
        if count == 0:
            refresh_reason(current)
            return SpanAdmission.BLOCKED
        if not store.admit_span(account_id, current, size, count, limits):
            return SpanAdmission.RACED
        offset = size - current.children
        admitted.append(span_dispatch_id(current.job_id, offset))
        logger.info("array span admitted", job_id=current.job_id, offset=offset, children=count)
        if count == current.children:
            return SpanAdmission.DONE
        child = current.child
        assert child is not None  # admit_span refuses a job that is no array
        demand = current.demand
        current = replace(
            current,
            demand=Demand(demand.key, demand.units - child.units * count, demand.vcpus - child.vcpus * count),
        )


def _span_submission(services: Services, parent: Job, span: QueuedSpan) -> BatchSubmission:
    """The span's SubmitJob: an array job of ``span.count`` children (a plain job for one), named
    ``span_job_name``, with ``REMOTE_BATCH_ARRAY_OFFSET``; a dedicated compute's job queue for an array
    on one."""
    from functions.logic.dispatch import compute_job_queue  # dispatch imports this module
    from functions.logic.submission import batch_submission  # submission imports the dispatcher

    return batch_submission(
        parent,
        machine_class(parent.machine_class),
        services.zones[parent.geo_zone],
        job_name=span_job_name(parent.job_id, span.offset),
        environment={ARRAY_OFFSET_VARIABLE: str(span.offset)},
        array_size=span.count if span.count >= 2 else None,
        job_queue=compute_job_queue(services, parent),
    )


def dispatch_span(
    services: Services,
    parent_id: str,
    offset: int,
    *,
    receive_count: int = 1,
    pacer: Pacer | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> DispatchOutcome:
    """Send one admitted span of an array to AWS Batch (SubmitJob), once: ``dispatch.dispatch_job`` for
    a message naming ``<parent>#<offset>``, with the same claim, pacing, backoff and endings.

    Returns what it did (``RETRY``: the claim was given back, deliver the message again).

    Raises
    ------
    DependencyFailed
        DynamoDB failed (the queue delivers the message again).
    """
    from functions.logic import dispatch  # dispatch imports this module

    store = services.store
    claim = _claim_span(services, parent_id, offset)
    if not isinstance(claim, tuple):
        return claim
    claimed, span = claim
    batch = services.zones[claimed.geo_zone].batch
    submission = _span_submission(services, claimed, span)
    batch_job_id: str | None = None
    for attempt in range(dispatch.SUBMIT_ATTEMPTS):
        if pacer is not None:
            pacer.wait()
        try:
            batch_job_id = batch.submit_job(submission)
            break
        except BatchRefused as exc:
            # A class disabled since the states were read: its queue refuses (DISABLED); the span waits.
            if _span_parked(services, claimed, offset, fresh=True):
                return dispatch.DispatchOutcome.PARKED
            logger.warning("batch refused an array span", job_id=parent_id, offset=offset, error=exc.message)
            refuse(services, parent_id, offset, dispatch.REFUSED_REASON)
            return dispatch.DispatchOutcome.ENDED
        except DependencyFailed:
            logger.info("batch busy; backing off", job_id=parent_id, offset=offset, attempt=attempt + 1)
            if attempt + 1 < dispatch.SUBMIT_ATTEMPTS:
                sleep(dispatch.backoff_seconds(attempt))
    if batch_job_id is None:
        if receive_count >= dispatch.MAX_RECEIVES:
            reason = dispatch.NOT_ACCEPTED_REASON.format(attempts=receive_count * dispatch.SUBMIT_ATTEMPTS)
            refuse(services, parent_id, offset, reason)
            return dispatch.DispatchOutcome.ENDED
        store.release_span(parent_id, offset)
        return dispatch.DispatchOutcome.RETRY
    _record(services, parent_id, offset, batch_job_id)
    return dispatch.DispatchOutcome.SUBMITTED


def _span_parked(services: Services, parent: Job, offset: int, *, fresh: bool) -> bool:
    """When the array's class is out of service (``dispatch.out_of_service_reason``): give the span's
    claim back; it stays admitted, holding its quota, and is sent again when the class is enabled
    (``dispatch.resume_parked``) or by the meter's backstop (``nudge_array``)."""
    from functions.logic import dispatch  # dispatch imports this module

    if dispatch.out_of_service_reason(services, parent, fresh=fresh) is None:
        return False
    services.store.release_span(parent.job_id, offset)
    logger.info("array span parked: class out of service", job_id=parent.job_id, offset=offset)
    return True


def _claim_span(services: Services, parent_id: str, offset: int) -> tuple[Job, QueuedSpan] | DispatchOutcome:
    """Claim the span for SubmitJob: (the parent after the claim, the span), or what ``dispatch_span``
    answers without a claim (another dispatcher has it, it was sent or withdrawn; an ending array's
    unsent children are withdrawn here; its class is out of service: the claim given back, parked)."""
    from functions.logic import dispatch  # dispatch imports this module

    store = services.store
    parent = store.get_job(parent_id)
    span = next((s for s in parent.array_queue if s.offset == offset), None) if parent else None
    if parent is None or parent.is_final or span is None or span.state != DispatchState.ADMITTED:
        return dispatch.DispatchOutcome.SKIPPED
    if parent.termination_reason:
        withdraw_unsent(services, parent, parent.termination_reason, services.clock())
        return dispatch.DispatchOutcome.ENDED
    claimed = store.claim_span(parent_id, offset, services.clock())
    if claimed is None:
        fresh = store.get_job(parent_id)
        if fresh is not None and fresh.termination_reason and not fresh.is_final:
            withdraw_unsent(services, fresh, fresh.termination_reason, services.clock())
        return dispatch.DispatchOutcome.SKIPPED
    if _span_parked(services, claimed, offset, fresh=False):
        return dispatch.DispatchOutcome.PARKED
    return claimed, span


def _record(services: Services, parent_id: str, offset: int, batch_job_id: str) -> None:
    """Record a span AWS Batch took; terminate it at once when its array is ending (aborted while its
    SubmitJob was in flight: the abort recorded the reason and left the span to this dispatcher)."""
    recorded = services.store.record_span(parent_id, offset, batch_job_id)
    services.events.count("JobsDispatched")
    logger.info("array span dispatched", job_id=parent_id, offset=offset, batch_job_id=batch_job_id)
    if recorded is None:
        logger.warning("span recorded by another writer", job_id=parent_id, offset=offset)
        return
    # An ending array (aborted while this SubmitJob was in flight), or one that ended meanwhile.
    if recorded.termination_reason or recorded.is_final:
        try:
            why = recorded.termination_reason or recorded.status_reason or ABORTED_BY_USER
            services.zones[recorded.geo_zone].batch.terminate_job(batch_job_id, why)
        except DependencyFailed:
            # The meter's reconciliation ends it: the array's reason is recorded.
            logger.exception("span of an ending array not terminated yet", job_id=parent_id, offset=offset)


def refuse(services: Services, parent_id: str, offset: int, reason: str) -> Job | None:
    """AWS Batch refused the span at ``offset`` for good (or never accepted it): it, the held remainder
    and the spans admitted but not claimed end ``Terminated`` with ``reason``, free
    (``withdraw_unsent``); the spans AWS Batch has run on. Returns the parent after, None when gone."""
    parent = services.store.get_job(parent_id)
    if parent is None:
        return None
    return withdraw_unsent(services, parent, reason, services.clock(), claimed_offset=offset)


def withdraw_unsent(
    services: Services,
    parent: Job,
    reason: str,
    now: datetime,
    *,
    claimed_offset: int | None = None,
    admit_next: bool = True,
) -> Job:
    """End every child of ``parent`` that AWS Batch does not have and no dispatcher is submitting
    (the held remainder, the ``Admitted`` spans; with ``claimed_offset``, that span too, whose claim
    is the caller's) ``Terminated`` with ``reason``, free, in one transaction
    (``JobRepository.withdraw_spans``), then have the account's held jobs admitted into the units
    given back (not with ``admit_next`` False: the caller is an admission pass, which goes on by
    itself) and settle the parent if every child is final now (``array_events.finish_array``).

    Returns the parent as stored after.

    Raises
    ------
    DependencyFailed
        DynamoDB failed, or the parent kept changing.
    """
    from functions.logic.array_events import finish_array  # array_events imports the dispatcher
    from functions.logic.dispatch import request_admission

    store = services.store
    current: Job | None = parent
    for _ in range(MAX_WITHDRAW_ATTEMPTS):
        if current is None or current.is_final:
            return current or parent
        spans = [
            s for s in current.array_queue if s.state == DispatchState.ADMITTED or s.offset == claimed_offset
        ]
        remaining = (current.array_size or 0) - current.array_admitted
        if not spans and remaining == 0:
            break
        if store.withdraw_spans(current, spans, reason, now):
            ended = remaining + sum(s.count for s in spans)
            logger.info("array children withdrawn", job_id=parent.job_id, children=ended, reason=reason)
            if current.compute is None and admit_next:
                try:
                    request_admission(services, current.account_id)
                except DependencyFailed:
                    logger.exception("admission after a withdrawal deferred", job_id=parent.job_id)
            break
        current = store.get_job(parent.job_id)
    else:
        raise DependencyFailed(f"job {parent.job_id} kept changing; try again")
    fresh = store.get_job(parent.job_id)
    if fresh is None:
        return parent
    return finish_array(services, fresh, now)


def nudge_array(services: Services, parent: Job, now: datetime) -> None:
    """The meter's backstop (and the local stack's resume after a crash) for an array not wholly in
    AWS Batch: withdraw what is left of one that is ending; recover each span claimed longer ago than
    ``dispatch.CLAIM_TIMEOUT`` (its dispatcher died: the span is looked up in AWS Batch by its name
    first, recorded if there, else its claim given back); enqueue every ``Admitted`` span again (the
    claim makes a repeat harmless); and admit what the account's quota lets go while children are held.

    Raises ``DependencyFailed`` (AWS Batch or DynamoDB failed; the next tick tries again).
    """
    from functions.logic import dispatch  # dispatch imports this module

    if parent.is_final or parent.dispatch_state is None:
        return
    if parent.termination_reason:
        parent = withdraw_unsent(services, parent, parent.termination_reason, now)
    for span in parent.array_queue:
        if span.state != DispatchState.DISPATCHING:
            continue
        if span.claimed_at is not None and now - span.claimed_at < dispatch.CLAIM_TIMEOUT:
            continue
        submission = _span_submission(services, parent, span)
        try:
            found = services.zones[parent.geo_zone].batch.find_job_by_name(
                submission.job_queue, submission.job_name
            )
        except BatchRefused:
            found = None  # the queue is gone (a dedicated compute deleted): nothing is in it
        if found is not None:
            logger.warning("stranded span recorded", job_id=parent.job_id, offset=span.offset)
            _record(services, parent.job_id, span.offset, found)
        elif services.store.release_span(parent.job_id, span.offset):
            logger.warning("stranded span released", job_id=parent.job_id, offset=span.offset)
    fresh = services.store.get_job(parent.job_id) or parent
    if fresh.is_final:
        return
    waiting = span_ids(fresh)
    # Admitted here, as a single job's backstop does: the request that should have admitted it was lost.
    admitted = (
        dispatch.admit_and_enqueue(services, fresh.account_id)
        if fresh.dispatch_state == DispatchState.HELD
        else []
    )
    dispatch.enqueue(services, [name for name in waiting if name not in admitted])


def resume_array(services: Services, parent: Job) -> list[str]:
    """After a crash of the local stack (``remote_batch_local.recovery``, rule 4): give back every span
    claim (its SubmitJob went to the executor that died with the stack), enqueue the ``Admitted`` spans
    again and ask for an admission while children are held. Returns the spans' dispatch names."""
    from functions.logic import dispatch  # dispatch imports this module

    for span in parent.array_queue:
        if span.state == DispatchState.DISPATCHING:
            services.store.release_span(parent.job_id, span.offset)
    fresh = services.store.get_job(parent.job_id) or parent
    if fresh.is_final:
        return []
    if fresh.termination_reason:
        withdraw_unsent(services, fresh, fresh.termination_reason, services.clock())
        return []
    names = span_ids(fresh)
    dispatch.enqueue(services, names)
    if fresh.dispatch_state == DispatchState.HELD:
        dispatch.request_admission(services, fresh.account_id)
    return names
