"""The dispatcher: an admitted job goes to AWS Batch (SubmitJob) once, paced, and a job AWS Batch does not
take ends.

``POST /jobs`` writes the job and answers 202 without calling AWS Batch (``functions.logic.submission``);
the jobs the quota admits are put on the dispatch queue (``dispatch_requests.enqueue``: SQS with a DLQ
deployed, an in-process queue in the local stack), whose consumer calls ``dispatch_job`` for each.
SubmitJob is paced and retried as ``functions.logic.dispatch_rules`` rules, and a job AWS Batch refuses
for good (or that stays unaccepted after ``MAX_RECEIVES`` deliveries) ends ``Terminated`` with the
reason, free (``endings.end_undispatched``). A message naming an array's span goes to
``array_dispatch.dispatch_span``, which follows the same rules.

A job is claimed before SubmitJob (``Admitted`` → ``Dispatching``, a conditional write), so a message
delivered twice submits once, and a job aborted before its turn is never submitted. A dispatcher that
dies between its claim and the record of SubmitJob's answer leaves the job ``Dispatching``: the meter's
backstop finds it after ``CLAIM_TIMEOUT`` and ``recover_claim`` looks it up in AWS Batch by name (the
job's id, SubmitJob's ``jobName``) before anything else, so it is never submitted twice.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from datetime import datetime

from aws_lambda_powertools import Logger

from functions.domain.arrays import parse_span_dispatch_id
from functions.domain.errors import BatchRefused, DependencyFailed, RecordMissing
from functions.domain.jobs import ABORTED_BY_USER, DispatchState, Job
from functions.logic import dispatch_rules as rules
from functions.logic import waits
from functions.logic.array_dispatch import dispatch_span
from functions.logic.batch_submission import job_submission
from functions.logic.computes import note_job_submitted
from functions.logic.dispatch_requests import enqueue
from functions.logic.dispatch_rules import ClaimRecovery, DispatchOutcome, Pacer
from functions.logic.endings import end_undispatched, terminate
from functions.logic.fleet import out_of_service_reason
from functions.ports import Services

logger = Logger(child=True)


def dispatch_job(
    services: Services,
    job_id: str,
    *,
    receive_count: int = 1,
    pacer: Pacer | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> DispatchOutcome:
    """Send one admitted job to AWS Batch (SubmitJob), once.

    Parameters
    ----------
    job_id : str
        The job the message names, or a span of an array (``<parent>#<offset>``:
        ``array_dispatch.dispatch_span``).
    receive_count : int
        How many times the queue delivered this message (SQS ``ApproximateReceiveCount``): from
        ``MAX_RECEIVES`` on, a job AWS Batch still does not accept is ended instead of retried.
    pacer : Pacer | None
        Paces SubmitJob calls (None: unpaced).

    Returns
    -------
    DispatchOutcome
        ``RETRY`` asks the queue to deliver the message again later (the claim was given back).

    Raises
    ------
    DependencyFailed
        DynamoDB failed (the queue delivers the message again).
    """
    span = parse_span_dispatch_id(job_id)
    if span is not None:
        # A span of an array (``<parent>#<offset>``): the same claim, pacing and endings, on the span.
        return dispatch_span(services, *span, receive_count=receive_count, pacer=pacer, sleep=sleep)
    outcome, _ = _dispatch(services, job_id, receive_count=receive_count, pacer=pacer, sleep=sleep)
    return outcome


def send_now(services: Services, job_ids: Sequence[str]) -> list[Job | None]:
    """Send each job (or span) to AWS Batch now, within the caller's call: what the inline dispatch
    (``functions.bootstrap.inline_dispatch``, no queue) does with a message. Each job gets its only
    chance, as on a message's last delivery (a job AWS Batch does not take ends ``Terminated``).

    Returns each single job as the dispatcher's last write left it (None for a span, or when it wrote
    nothing that returned the job: skipped, or the claim given back).

    Raises ``DependencyFailed`` (DynamoDB failed).
    """
    written: list[Job | None] = []
    for job_id in job_ids:
        if parse_span_dispatch_id(job_id) is not None:
            dispatch_job(services, job_id, receive_count=rules.MAX_RECEIVES)
            written.append(None)
        else:
            written.append(_dispatch(services, job_id, receive_count=rules.MAX_RECEIVES)[1])
    return written


def _dispatch(
    services: Services,
    job_id: str,
    *,
    receive_count: int,
    pacer: Pacer | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[DispatchOutcome, Job | None]:
    """``dispatch_job`` of a single job, also returning the job as its last write left it (None when it
    wrote nothing that returned the job: skipped, or the claim given back for a retry)."""
    claimed, unclaimed = _claim(services, job_id)
    if claimed is None:
        return unclaimed, None
    zone_services = services.zones[claimed.geo_zone]
    submission = job_submission(services, claimed)
    batch_job_id: str | None = None
    for attempt in range(rules.SUBMIT_ATTEMPTS):
        if pacer is not None:
            pacer.wait()
        try:
            batch_job_id = zone_services.batch.submit_job(submission)
            break
        except BatchRefused as exc:
            # A class disabled since the states were read: its queue refuses (DISABLED); the job waits.
            if _parked(services, claimed, fresh=True):
                return DispatchOutcome.PARKED, None
            logger.warning("batch refused the job", job_id=job_id, error=exc.message)
            return DispatchOutcome.ENDED, _end(services, claimed, rules.REFUSED_REASON)
        except DependencyFailed:
            logger.info("batch busy; backing off", job_id=job_id, attempt=attempt + 1)
            if attempt + 1 < rules.SUBMIT_ATTEMPTS:
                sleep(rules.backoff_seconds(attempt))
    if batch_job_id is None:
        if receive_count >= rules.MAX_RECEIVES:
            reason = rules.NOT_ACCEPTED_REASON.format(attempts=receive_count * rules.SUBMIT_ATTEMPTS)
            return DispatchOutcome.ENDED, _end(services, claimed, reason)
        services.store.release_dispatch(job_id)
        return DispatchOutcome.RETRY, None
    recorded = services.store.record_dispatch(
        job_id, batch_job_id, clear_reason=bool(claimed.status_reason)
    ) or services.store.get_job(job_id)
    _after_submit(services, claimed, recorded, batch_job_id)
    return DispatchOutcome.SUBMITTED, recorded


def _claim(services: Services, job_id: str) -> tuple[Job | None, DispatchOutcome]:
    """Claim the job for SubmitJob: (the job, ``SUBMITTED`` to go on), or (None, ``SKIPPED``) when
    another writer has it or it is gone, or (None, ``PARKED``) when its class is out of service.
    No read first: the claim's condition (admitted, not final) is the whole check, and its answer is
    the job (a job gone, or past its TTL, is skipped as one not admitted)."""
    try:
        claimed = services.store.claim_dispatch(job_id, services.clock())
    except RecordMissing:
        return None, DispatchOutcome.SKIPPED
    if claimed is None:
        return None, DispatchOutcome.SKIPPED
    if _parked(services, claimed, fresh=False):
        return None, DispatchOutcome.PARKED
    return claimed, DispatchOutcome.SUBMITTED


def _parked(services: Services, claimed: Job, *, fresh: bool) -> bool:
    """When the claimed job's class is out of service (``out_of_service_reason``): give the claim back
    with the reason and say so; the job stays admitted, holding its quota, and is sent again when the
    class is enabled (``dispatch_requests.resume_parked``) or by the meter's backstop."""
    reason = out_of_service_reason(services, claimed, fresh=fresh)
    if reason is None:
        return False
    services.store.release_dispatch(claimed.job_id, reason=reason)
    logger.info(
        "job parked: class out of service", job_id=claimed.job_id, machine_class=claimed.machine_class
    )
    return True


def _after_submit(services: Services, claimed: Job, recorded: Job | None, batch_job_id: str) -> None:
    """What follows SubmitJob's answer once recorded: the count, a dedicated compute's activity, and the
    termination of a job aborted while SubmitJob was in flight (the abort recorded its reason), or
    ended meanwhile: an abort that read it admitted as this dispatcher claimed it ends it ``Terminated``
    in DynamoDB, free, and AWS Batch must not run it then (its events would be ignored: unbilled
    work). TerminateJob of a Batch job that is final already changes nothing."""
    services.events.count("JobsDispatched")
    logger.info("job dispatched", job_id=claimed.job_id, batch_job_id=batch_job_id)
    if claimed.compute is not None:
        note_job_submitted(services, claimed.account_id, claimed.compute, services.clock())
    if recorded is None:
        return
    if recorded.is_final:
        reason = recorded.status_reason or recorded.termination_reason or ABORTED_BY_USER
        logger.warning("job ended while its SubmitJob was in flight", job_id=claimed.job_id)
        services.zones[claimed.geo_zone].batch.terminate_job(batch_job_id, reason)
    elif recorded.termination_reason:
        terminate(services, recorded, recorded.termination_reason)


def recover_claim(services: Services, job: Job, now: datetime) -> ClaimRecovery:
    """The meter's backstop for a job left ``Dispatching`` by a dispatcher that died between its claim
    and the record of SubmitJob's answer (no Batch id on the job).

    A claim younger than ``CLAIM_TIMEOUT`` is left to its dispatcher. An older one: the job is looked
    up in AWS Batch by name first (ListJobs of its job queue with a ``JOB_NAME`` filter; SubmitJob's
    ``jobName`` is the job's id), so it is never submitted twice:

    - found: its Batch id is recorded (``Dispatched``), as the dispatcher would have; its events
      follow, or the reconciliation applies its state (a job aborted meanwhile is terminated now);
    - not found: the claim is given back (``Admitted``) and the job enqueued again, for the
      dispatcher to claim and submit; a job aborted meanwhile ends ``Terminated`` instead, free.

    Parameters
    ----------
    job : Job
        The job as the meter read it.
    now : datetime
        The meter's tick time.

    Raises
    ------
    DependencyFailed
        AWS Batch or DynamoDB failed (the next tick tries again; nothing was changed in Batch).
    """
    if job.dispatch_state != DispatchState.DISPATCHING or job.batch_job_id is not None or job.is_final:
        return ClaimRecovery.SKIPPED
    # A claim made before claims carried their time is as old as the job's last event at least.
    claimed_at = job.dispatch_claimed_at or job.last_event_at or job.submitted_at
    if now - claimed_at < rules.CLAIM_TIMEOUT:
        return ClaimRecovery.WAITING
    return _settle_stranded(services, job, now)


def _settle_stranded(services: Services, job: Job, now: datetime) -> ClaimRecovery:
    """``recover_claim`` past the bound: record what AWS Batch has under the job's name, else give the
    claim back and enqueue the job (or end it, aborted meanwhile)."""
    submission = job_submission(services, job)
    try:
        batch_job_id = services.zones[job.geo_zone].batch.find_job_by_name(
            submission.job_queue, submission.job_name
        )
    except BatchRefused:
        # AWS Batch does not know the queue (a dedicated compute deleted meanwhile): nothing is in it.
        batch_job_id = None
    if batch_job_id is not None:
        recorded = services.store.record_dispatch(job.job_id, batch_job_id)
        if recorded is None:
            return ClaimRecovery.SKIPPED
        logger.warning("stranded claim recorded", job_id=job.job_id, batch_job_id=batch_job_id)
        _after_submit(services, job, recorded, batch_job_id)
        return ClaimRecovery.RECORDED
    if job.termination_reason:
        _end(services, job, job.termination_reason, now)
        return ClaimRecovery.ENDED
    if not services.store.release_dispatch(job.job_id):
        return ClaimRecovery.SKIPPED
    logger.warning("stranded claim released", job_id=job.job_id)
    enqueue(services, [job.job_id])
    return ClaimRecovery.REQUEUED


def _end(services: Services, job: Job, reason: str, now: datetime | None = None) -> Job:
    """End a job AWS Batch never ran (``endings.end_undispatched``) and settle the children waiting
    for it at once (``waits.settle_dependents``: nothing for a job nobody depends on), rather than
    at the meter's backstop. Returns the job as stored after."""
    now = now or services.clock()
    ended = end_undispatched(services, job, reason, now)
    waits.settle_dependents(services, ended, now)
    return ended
