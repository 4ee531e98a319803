"""The dispatcher: admitted jobs go to AWS Batch at a bounded rate, and jobs that never reach it end.

``POST /jobs`` writes the job and answers 202 without calling AWS Batch (``functions.logic.submission``);
the jobs the quota admits are put on the dispatch queue (SQS with a DLQ deployed, an in-process queue
in the local stack), whose consumer calls ``dispatch_job`` for each. SubmitJob is paced (``Pacer``)
below AWS Batch's ~50 requests per second per account (AWS Batch service quotas, "SubmitJob"),
throttling is retried with exponential backoff and jitter, and a job AWS Batch refuses for good (or
that stays unaccepted after ``MAX_RECEIVES`` deliveries) ends ``Terminated`` with the reason, free.

A job is claimed before SubmitJob (``Admitted`` → ``Dispatching``, a conditional write), so a message
delivered twice submits once, and a job aborted before its turn is never submitted. A dispatcher that
dies between its claim and the record of SubmitJob's answer leaves the job ``Dispatching``: the meter's
backstop finds it after ``CLAIM_TIMEOUT`` and ``recover_claim`` looks it up in AWS Batch by name (the
job's id, SubmitJob's ``jobName``) before anything else, so it is never submitted twice.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from enum import StrEnum

from aws_lambda_powertools import Logger

from functions.domain.arrays import parse_span_dispatch_id
from functions.domain.computes import resource_name
from functions.domain.errors import BatchRefused, ConditionFailed, DependencyFailed, RecordMissing
from functions.domain.jobs import ABORTED_BY_USER, DispatchState, Job, Transition
from functions.domain.machine_classes import GeoZone, machine_class
from functions.domain.quotas import QuotaLimits
from functions.domain.status import JobStatus, statuses_between
from functions.logic import quotas
from functions.logic.computes import note_job_submitted
from functions.logic.fleet import CLASS_STATE_MAX_AGE_SECONDS
from functions.logic.job_outcomes import final_charge
from functions.logic.notifying import deliver_due_notifications
from functions.ports import BatchSubmission, Services

logger = Logger(child=True)

# SubmitJob attempts within one delivery (throttling, 5xx), with exponential backoff and full jitter
# from BACKOFF_BASE_SECONDS up to BACKOFF_CAP_SECONDS (AWS Architecture Blog, "Exponential Backoff
# And Jitter").
SUBMIT_ATTEMPTS = 4
BACKOFF_BASE_SECONDS = 0.1
BACKOFF_CAP_SECONDS = 2.0
# Deliveries of one job's message after which a job AWS Batch still does not accept is ended
# (the queue's DLQ takes a message only when ending it failed too: its redrive count is higher).
MAX_RECEIVES = 8
NOT_ACCEPTED_REASON = "AWS Batch did not accept the job after {attempts} attempts; nothing was charged"
REFUSED_REASON = "AWS Batch refused the job; nothing was charged"
# An admitted job whose (class, zone) an operator took out of service waits, admitted, until the class
# is enabled again (``resume_parked``); issue 15: "queued jobs stay queued".
OUT_OF_SERVICE_REASON = "Waiting: {machine_class} is out of service in {zone}: {reason}"
MAX_END_ATTEMPTS = 10
# How long a claim (``Dispatching``) may stand before the meter's backstop takes it for a dead
# dispatcher's (``recover_claim``). The dispatcher Lambda runs at most 60 s (infra/constants.py,
# ``LAMBDA_TIMEOUT_SECONDS["dispatcher"]``; Lambda stops an invocation at its timeout) and records
# SubmitJob's answer within ``SUBMIT_ATTEMPTS`` calls and backoffs of at most ``BACKOFF_CAP_SECONDS``
# of it; the local stack's dispatcher works the same way. 15 minutes is fifteen of those lifetimes: no
# live dispatcher still holds a claim that old, and a job it submitted is long listed by AWS Batch
# (tests/unit/test_dispatch_claims.py keeps the bound above ten Lambda timeouts).
CLAIM_TIMEOUT = timedelta(minutes=15)


class DispatchOutcome(StrEnum):
    """What ``dispatch_job`` did with one message."""

    SUBMITTED = "submitted"
    SKIPPED = "skipped"  # not admitted, claimed by another dispatcher, sent already, ended or gone
    ENDED = "ended"  # refused for good or never accepted: Terminated with the reason
    RETRY = "retry"  # AWS Batch busy or unreachable: deliver the message again later
    PARKED = "parked"  # its class is out of service in its zone: left admitted until it is enabled


class ClaimRecovery(StrEnum):
    """What ``recover_claim`` did with a job left ``Dispatching``."""

    WAITING = "waiting"  # claimed less than CLAIM_TIMEOUT ago: its dispatcher may still be at work
    RECORDED = "recorded"  # AWS Batch has it: its Batch id recorded (``Dispatched``)
    REQUEUED = "requeued"  # AWS Batch has none: the claim given back, the job enqueued again
    ENDED = "ended"  # AWS Batch has none and it was aborted meanwhile: Terminated, free
    SKIPPED = "skipped"  # not a standing claim (any more): sent, released or ended by another writer


class Pacer:
    """Spaces calls at most ``rate`` per second (one slot every ``1/rate`` s), across threads.

    Each dispatcher instance paces itself at the configured rate divided by the most instances that run
    at once (the event source mapping's maximum concurrency), so all of them together stay below it.
    ``clock`` and ``sleep`` (monotonic seconds) are injectable for tests.
    """

    def __init__(
        self,
        rate: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self._interval = 1.0 / rate
        self._clock = clock
        self._sleep = sleep
        self._next = 0.0
        self._lock = threading.Lock()

    def wait(self) -> None:
        """Block until this caller's slot (each call takes the next free one)."""
        with self._lock:
            now = self._clock()
            slot = max(now, self._next)
            self._next = slot + self._interval
        if slot > now:
            self._sleep(slot - now)


def backoff_seconds(attempt: int) -> float:
    """Full-jitter backoff before retry ``attempt`` (0-based): uniform in [0, min(cap, base·2^attempt)]."""
    return random.uniform(0, min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2**attempt))  # noqa: S311


def enqueue(services: Services, job_ids: Sequence[str]) -> None:
    """Hand admitted jobs to the dispatcher: the queue, or (no queue configured) ``dispatch_job`` at
    once, each job's only chance (a job AWS Batch does not take ends ``Terminated``)."""
    if not job_ids:
        return
    if services.dispatch is not None:
        services.dispatch.send(job_ids)
        return
    for job_id in job_ids:
        dispatch_job(services, job_id, receive_count=MAX_RECEIVES)


def enqueue_one(services: Services, job: Job) -> Job:
    """``enqueue`` one admitted job as written by its submit; returns it as the submit answers it: as
    written when it waits on the queue, else (no queue: sent here) as the dispatcher left it.

    Raises ``DependencyFailed`` when the queue refuses (the job stays admitted: the meter's backstop
    enqueues it again).
    """
    if services.dispatch is not None:
        services.dispatch.send([job.job_id])
        return job
    _, after = _dispatch(services, job.job_id, receive_count=MAX_RECEIVES)
    return after or services.store.get_job(job.job_id) or job


def admit_and_enqueue(services: Services, account_id: str, limits: QuotaLimits | None = None) -> list[str]:
    """Admit what the account's quota lets go now (``quotas.admit_waiting``; ``limits`` when read
    already) and enqueue it."""
    admitted = quotas.admit_waiting(services, account_id, limits)
    enqueue(services, admitted)
    return admitted


def request_admission(services: Services, account_id: str) -> None:
    """Have what the account's held jobs may take now admitted: by the dispatcher (an admission
    request on its queue), or here when no queue is configured (``admit_and_enqueue``).

    The dispatcher runs admissions one account message at a time per instance (and once per account
    per delivered batch: every request in a batch was sent before the batch was read), so a burst of
    submits or endings costs one scan of the held jobs per batch, not one per request racing the
    others for the same jobs. No request is lost: each is sent after its sender's write (a hold or a
    release), so the scan it causes sees that write; a message lost with the local stack's memory is
    made good by the meter's backstop (``metering._nudge_undispatched``).

    Raises ``DependencyFailed`` when the queue refuses (the caller's write stands; the next request
    of the account or the backstop admits).
    """
    if services.dispatch is not None:
        services.dispatch.request_admission([account_id])
        return
    admit_and_enqueue(services, account_id)


def admit_after_end(services: Services, job: Job) -> None:
    """After ``job`` (as stored) is final: when it took part in the quota (not one on a dedicated
    compute), have its account's held jobs admitted into what it gave back (``request_admission``)."""
    if job.is_final and job.dispatch_state is not None and job.compute is None:
        request_admission(services, job.account_id)


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
        ``array_admission.dispatch_span``).
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
        from functions.logic.array_admission import dispatch_span  # it imports this module

        return dispatch_span(services, *span, receive_count=receive_count, pacer=pacer, sleep=sleep)
    outcome, _ = _dispatch(services, job_id, receive_count=receive_count, pacer=pacer, sleep=sleep)
    return outcome


def _dispatch(
    services: Services,
    job_id: str,
    *,
    receive_count: int,
    pacer: Pacer | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[DispatchOutcome, Job | None]:
    """``dispatch_job``, also returning the job as its last write left it (None when it wrote nothing
    that returned the job: skipped, or the claim given back for a retry)."""
    claimed, unclaimed = _claim(services, job_id)
    if claimed is None:
        return unclaimed, None
    zone_services = services.zones[claimed.geo_zone]
    submission = _submission(services, claimed)
    batch_job_id: str | None = None
    for attempt in range(SUBMIT_ATTEMPTS):
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
            ended = end_undispatched(services, claimed, REFUSED_REASON, services.clock())
            return DispatchOutcome.ENDED, ended
        except DependencyFailed:
            logger.info("batch busy; backing off", job_id=job_id, attempt=attempt + 1)
            if attempt + 1 < SUBMIT_ATTEMPTS:
                sleep(backoff_seconds(attempt))
    if batch_job_id is None:
        if receive_count >= MAX_RECEIVES:
            reason = NOT_ACCEPTED_REASON.format(attempts=receive_count * SUBMIT_ATTEMPTS)
            ended = end_undispatched(services, claimed, reason, services.clock())
            return DispatchOutcome.ENDED, ended
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


def out_of_service_reason(services: Services, job: Job, *, fresh: bool) -> str | None:
    """The ``statusReason`` a job (or an array's span) waits with while an operator has its (class,
    zone) out of service (``OUT_OF_SERVICE_REASON``), or None when the class takes jobs. A job on a
    dedicated compute goes to the compute's own queue: never out of service. ``fresh`` reads the
    state strongly consistent (after AWS Batch refused the job), else from the store's short-lived
    cache (``CLASS_STATE_MAX_AGE_SECONDS``)."""
    if job.compute is not None or services.operations is None:
        return None
    key = (job.machine_class, job.geo_zone)
    state = (
        services.operations.get_class_state(*key)
        if fresh
        else services.operations.class_states(CLASS_STATE_MAX_AGE_SECONDS).get(key)
    )
    if state is None or not state.disabled:
        return None
    return OUT_OF_SERVICE_REASON.format(
        machine_class=job.machine_class, zone=job.geo_zone.value, reason=state.reason or "no reason given"
    )


def _parked(services: Services, claimed: Job, *, fresh: bool) -> bool:
    """When the claimed job's class is out of service (``out_of_service_reason``): give the claim back
    with the reason and say so; the job stays admitted, holding its quota, and is sent again when the
    class is enabled (``resume_parked``) or by the meter's backstop."""
    reason = out_of_service_reason(services, claimed, fresh=fresh)
    if reason is None:
        return False
    services.store.release_dispatch(claimed.job_id, reason=reason)
    logger.info(
        "job parked: class out of service", job_id=claimed.job_id, machine_class=claimed.machine_class
    )
    return True


def resume_parked(services: Services, class_name: str, zone: GeoZone) -> int:
    """After ``class_name`` is back in service in ``zone``: send what waits for it to the dispatcher
    again: its queued single jobs, and the admitted spans of its unfinished arrays (the dispatcher's
    claim skips any that are not admitted). Returns how many messages were sent.

    Raises ``DependencyFailed`` when DynamoDB or the queue fails (the meter's backstop sends them later).
    """
    from functions.logic.array_admission import span_ids  # it imports this module

    singles, arrays = services.store.list_waiting_job_ids(class_name, zone)
    messages = list(singles)
    for parent_id in arrays:
        parent = services.store.get_job(parent_id)
        if parent is not None and not parent.is_final:
            messages += span_ids(parent)
    enqueue(services, messages)
    if messages:
        logger.info(
            "parked jobs resumed", machine_class=class_name, geo_zone=zone.value, messages=len(messages)
        )
    return len(messages)


def _submission(services: Services, job: Job) -> BatchSubmission:
    """The job's SubmitJob (``jobName`` its id); a job on a dedicated compute goes to that compute's own
    job queue (``domain.computes``)."""
    from functions.logic.submission import batch_submission  # submission imports this module

    return batch_submission(
        job,
        machine_class(job.machine_class),
        services.zones[job.geo_zone],
        job_name=job.job_id,
        job_queue=compute_job_queue(services, job),
    )


def compute_job_queue(services: Services, job: Job) -> str | None:
    """The job queue of the dedicated compute ``job`` (or an array) runs on (``domain.computes``), or
    None for the class's shared queue."""
    if job.compute is None:
        return None
    return resource_name(services.compute_prefix, job.account_id, job.compute)


def _after_submit(services: Services, claimed: Job, recorded: Job | None, batch_job_id: str) -> None:
    """What follows SubmitJob's answer once recorded: the count, a dedicated compute's activity, and the
    termination of a job aborted while SubmitJob was in flight (the abort recorded its reason), or
    ended meanwhile: an abort that read it admitted as this dispatcher claimed it ends it ``Terminated``
    in DynamoDB, free, and AWS Batch must not run it then (its events would be ignored: unbilled
    work). TerminateJob of a Batch job that is final already changes nothing."""
    from functions.logic.submission import terminate  # submission imports this module

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
    if now - claimed_at < CLAIM_TIMEOUT:
        return ClaimRecovery.WAITING
    return _settle_stranded(services, job, now)


def _settle_stranded(services: Services, job: Job, now: datetime) -> ClaimRecovery:
    """``recover_claim`` past the bound: record what AWS Batch has under the job's name, else give the
    claim back and enqueue the job (or end it, aborted meanwhile)."""
    submission = _submission(services, job)
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
        end_undispatched(services, job, job.termination_reason, now)
        return ClaimRecovery.ENDED
    if not services.store.release_dispatch(job.job_id):
        return ClaimRecovery.SKIPPED
    logger.warning("stranded claim released", job_id=job.job_id)
    enqueue(services, [job.job_id])
    return ClaimRecovery.REQUEUED


def end_undispatched(
    services: Services, job: Job, reason: str, now: datetime, *, admit_next: bool = True
) -> Job:
    """End a job that AWS Batch never ran (held, admitted, or refused): ``Terminated`` with ``reason``,
    nothing charged, its quota given back in the same transaction (``JobRepository.settle``), then the
    account's next held jobs admitted and the job's notifications sent.

    With ``admit_next`` False the account's held jobs are not asked to be admitted (the caller is an
    admission pass, which goes on by itself).

    Returns the job as stored after (as it was when it turned out final already).

    Raises
    ------
    RecordMissing
        The job is gone.
    DependencyFailed
        DynamoDB kept failing or the job kept changing.
    """
    current = job
    for _ in range(MAX_END_ATTEMPTS):
        if current.is_final:
            return current
        after = replace(
            current,
            status=JobStatus.TERMINATED,
            status_reason=current.termination_reason or reason,
            status_history=current.status_history
            + tuple(statuses_between(current.status, JobStatus.TERMINATED, ever_ran=False)),
            completed_at=now,
        )
        transition = Transition(before=current, after=after, entered=(JobStatus.TERMINATED,), running_ms=None)
        charge, entry = final_charge(services, transition, current.credit_constraint, now)
        try:
            services.store.settle(transition, charge, entry, now)
        except RecordMissing:
            raise
        except ConditionFailed:
            fresh = services.store.get_job(current.job_id)
            if fresh is None:
                raise RecordMissing(f"Job {current.job_id} no longer exists.") from None
            current = fresh
            continue
        logger.info("job ended before aws batch ran it", job_id=job.job_id, reason=after.status_reason)
        if admit_next and (current.holds_quota or current.dispatch_state == DispatchState.HELD):
            request_admission(services, current.account_id)
        deliver_due_notifications(services, after, now, raise_on_failure=False)
        return services.store.get_job(current.job_id) or after
    raise DependencyFailed(f"job {job.job_id} kept changing; try again")
