"""Array spans through the dispatcher: each admitted span of an array goes to AWS Batch once, as an
array job of the span's size (a plain job for a span of one), and the meter's backstop for spans.

A message naming ``<parent>#<offset>`` (``dispatch.dispatch_job`` hands it here) is claimed before
SubmitJob (``Admitted`` → ``Dispatching`` on the span's entry), paced and retried as a single job's
SubmitJob (``functions.logic.dispatch_rules``), submitted (``batch_submission.span_submission``) and
recorded (its Batch id appended to ``arraySpans``). A dispatcher that dies between its claim and the
record leaves the span ``Dispatching``: the meter's backstop (``nudge_array``) looks it up in AWS
Batch by name after ``dispatch_rules.CLAIM_TIMEOUT`` before anything else, so no span is submitted
twice. A span AWS Batch refuses for good ends with the array's children not yet submitted
(``refuse``: ``endings.withdraw_unsent``), nothing charged. How spans are admitted through the quota:
``functions.logic.array_admission``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from aws_lambda_powertools import Logger

from functions.domain.arrays import span_ids
from functions.domain.errors import BatchRefused, DependencyFailed
from functions.domain.jobs import ABORTED_BY_USER, DispatchState, Job, QueuedSpan
from functions.logic import dispatch_rules as rules
from functions.logic import waits
from functions.logic.batch_submission import span_submission
from functions.logic.dispatch_requests import enqueue, request_admission
from functions.logic.dispatch_rules import DispatchOutcome, Pacer
from functions.logic.endings import withdraw_unsent
from functions.logic.fleet import out_of_service_reason
from functions.logic.quotas import admit_and_enqueue
from functions.ports import Services

logger = Logger(child=True)


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
    store = services.store
    claim = _claim_span(services, parent_id, offset)
    if not isinstance(claim, tuple):
        return claim
    claimed, span = claim
    batch = services.zones[claimed.geo_zone].batch
    submission = span_submission(services, claimed, span)
    batch_job_id: str | None = None
    for attempt in range(rules.SUBMIT_ATTEMPTS):
        if pacer is not None:
            pacer.wait()
        try:
            batch_job_id = batch.submit_job(submission)
            break
        except BatchRefused as exc:
            # A class disabled since the states were read: its queue refuses (DISABLED); the span waits.
            if _span_parked(services, claimed, offset, fresh=True):
                return DispatchOutcome.PARKED
            logger.warning("batch refused an array span", job_id=parent_id, offset=offset, error=exc.message)
            refuse(services, parent_id, offset, rules.REFUSED_REASON)
            return DispatchOutcome.ENDED
        except DependencyFailed:
            logger.info("batch busy; backing off", job_id=parent_id, offset=offset, attempt=attempt + 1)
            if attempt + 1 < rules.SUBMIT_ATTEMPTS:
                sleep(rules.backoff_seconds(attempt))
    if batch_job_id is None:
        if receive_count >= rules.MAX_RECEIVES:
            reason = rules.NOT_ACCEPTED_REASON.format(attempts=receive_count * rules.SUBMIT_ATTEMPTS)
            refuse(services, parent_id, offset, reason)
            return DispatchOutcome.ENDED
        store.release_span(parent_id, offset)
        return DispatchOutcome.RETRY
    _record(services, parent_id, offset, batch_job_id)
    return DispatchOutcome.SUBMITTED


def _span_parked(services: Services, parent: Job, offset: int, *, fresh: bool) -> bool:
    """When the array's class is out of service (``fleet.out_of_service_reason``): give the span's
    claim back; it stays admitted, holding its quota, and is sent again when the class is enabled
    (``dispatch_requests.resume_parked``) or by the meter's backstop (``nudge_array``)."""
    if out_of_service_reason(services, parent, fresh=fresh) is None:
        return False
    services.store.release_span(parent.job_id, offset)
    logger.info("array span parked: class out of service", job_id=parent.job_id, offset=offset)
    return True


def _claim_span(services: Services, parent_id: str, offset: int) -> tuple[Job, QueuedSpan] | DispatchOutcome:
    """Claim the span for SubmitJob: (the parent after the claim, the span), or what ``dispatch_span``
    answers without a claim (another dispatcher has it, it was sent or withdrawn; an ending array's
    unsent children are withdrawn here; its class is out of service: the claim given back, parked)."""
    store = services.store
    parent = store.get_job(parent_id)
    span = next((s for s in parent.array_queue if s.offset == offset), None) if parent else None
    if parent is None or parent.is_final or span is None or span.state != DispatchState.ADMITTED:
        return DispatchOutcome.SKIPPED
    if parent.termination_reason:
        withdraw_unsent(services, parent, parent.termination_reason, services.clock())
        return DispatchOutcome.ENDED
    claimed = store.claim_span(parent_id, offset, services.clock())
    if claimed is None:
        fresh = store.get_job(parent_id)
        if fresh is not None and fresh.termination_reason and not fresh.is_final:
            withdraw_unsent(services, fresh, fresh.termination_reason, services.clock())
        return DispatchOutcome.SKIPPED
    if _span_parked(services, claimed, offset, fresh=False):
        return DispatchOutcome.PARKED
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
    now = services.clock()
    after = withdraw_unsent(services, parent, reason, now, claimed_offset=offset)
    # An array that ended here settles the jobs waiting for it now, not at the meter's backstop.
    waits.settle_dependents(services, after, now)
    return after


def nudge_array(services: Services, parent: Job, now: datetime) -> None:
    """The meter's backstop (and the local stack's resume after a crash) for an array not wholly in
    AWS Batch: withdraw what is left of one that is ending; recover each span claimed longer ago than
    ``rules.CLAIM_TIMEOUT`` (its dispatcher died: the span is looked up in AWS Batch by its name
    first, recorded if there, else its claim given back); enqueue every ``Admitted`` span again (the
    claim makes a repeat harmless); and admit what the account's quota lets go while children are held.

    Raises ``DependencyFailed`` (AWS Batch or DynamoDB failed; the next tick tries again).
    """
    if parent.is_final or parent.dispatch_state is None:
        return
    if parent.termination_reason:
        parent = withdraw_unsent(services, parent, parent.termination_reason, now)
    for span in parent.array_queue:
        if span.state != DispatchState.DISPATCHING:
            continue
        if span.claimed_at is not None and now - span.claimed_at < rules.CLAIM_TIMEOUT:
            continue
        submission = span_submission(services, parent, span)
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
        admit_and_enqueue(services, fresh.account_id) if fresh.dispatch_state == DispatchState.HELD else []
    )
    enqueue(services, [name for name in waiting if name not in admitted])


def resume_array(services: Services, parent: Job) -> list[str]:
    """After a crash of the local stack (``remote_batch_local.recovery``, rule 4): give back every span
    claim (its SubmitJob went to the executor that died with the stack), enqueue the ``Admitted`` spans
    again and ask for an admission while children are held. Returns the spans' dispatch names."""
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
    enqueue(services, names)
    if fresh.dispatch_state == DispatchState.HELD:
        request_admission(services, fresh.account_id)
    return names
