"""The dispatcher: admitted jobs go to AWS Batch at a bounded rate, and jobs that never reach it end.

``POST /jobs`` writes the job and answers 202 without calling AWS Batch (``functions.logic.submission``);
the jobs the quota admits are put on the dispatch queue (SQS with a DLQ deployed, an in-process queue
in the local stack), whose consumer calls ``dispatch_job`` for each. SubmitJob is paced (``Pacer``)
below AWS Batch's ~50 requests per second per account (AWS Batch service quotas, "SubmitJob"),
throttling is retried with exponential backoff and jitter, and a job AWS Batch refuses for good (or
that stays unaccepted after ``MAX_RECEIVES`` deliveries) ends ``Terminated`` with the reason, free.

A job is claimed before SubmitJob (``Admitted`` → ``Dispatching``, a conditional write), so a message
delivered twice submits once, and a job aborted before its turn is never submitted.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from enum import StrEnum

from aws_lambda_powertools import Logger

from functions.domain.computes import resource_name
from functions.domain.errors import BatchRefused, ConditionFailed, DependencyFailed, RecordMissing
from functions.domain.jobs import DispatchState, Job, Transition
from functions.domain.machine_classes import machine_class
from functions.domain.quotas import QuotaLimits
from functions.domain.status import JobStatus, statuses_between
from functions.logic import quotas
from functions.logic.computes import note_job_submitted
from functions.logic.job_outcomes import final_charge
from functions.logic.notifying import deliver_due_notifications
from functions.ports import Services

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
MAX_END_ATTEMPTS = 10


class DispatchOutcome(StrEnum):
    """What ``dispatch_job`` did with one message."""

    SUBMITTED = "submitted"
    SKIPPED = "skipped"  # not admitted, claimed by another dispatcher, sent already, ended or gone
    ENDED = "ended"  # refused for good or never accepted: Terminated with the reason
    RETRY = "retry"  # AWS Batch busy or unreachable: deliver the message again later


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
        The job the message names.
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
    from functions.logic.submission import batch_submission, terminate  # submission imports this module

    job = services.store.get_job(job_id)
    if job is None or job.is_final or job.dispatch_state != DispatchState.ADMITTED:
        return DispatchOutcome.SKIPPED
    claimed = services.store.claim_dispatch(job_id)
    if claimed is None:
        return DispatchOutcome.SKIPPED
    zone_services = services.zones[claimed.geo_zone]
    # A job on a dedicated compute goes to that compute's own job queue (``domain.computes``).
    job_queue = (
        resource_name(services.compute_prefix, claimed.account_id, claimed.compute)
        if claimed.compute is not None
        else None
    )
    submission = batch_submission(
        claimed,
        machine_class(claimed.machine_class),
        zone_services,
        job_name=claimed.job_id,
        job_queue=job_queue,
    )
    batch_job_id: str | None = None
    for attempt in range(SUBMIT_ATTEMPTS):
        if pacer is not None:
            pacer.wait()
        try:
            batch_job_id = zone_services.batch.submit_job(submission)
            break
        except BatchRefused as exc:
            logger.warning("batch refused the job", job_id=job_id, error=exc.message)
            end_undispatched(services, claimed, REFUSED_REASON, services.clock())
            return DispatchOutcome.ENDED
        except DependencyFailed:
            logger.info("batch busy; backing off", job_id=job_id, attempt=attempt + 1)
            if attempt + 1 < SUBMIT_ATTEMPTS:
                sleep(backoff_seconds(attempt))
    if batch_job_id is None:
        if receive_count >= MAX_RECEIVES:
            reason = NOT_ACCEPTED_REASON.format(attempts=receive_count * SUBMIT_ATTEMPTS)
            end_undispatched(services, claimed, reason, services.clock())
            return DispatchOutcome.ENDED
        services.store.release_dispatch(job_id)
        return DispatchOutcome.RETRY
    recorded = services.store.record_dispatch(job_id, batch_job_id) or services.store.get_job(job_id)
    services.events.count("JobsDispatched")
    logger.info("job dispatched", job_id=job_id, batch_job_id=batch_job_id)
    if claimed.compute is not None:
        note_job_submitted(services, claimed.account_id, claimed.compute, services.clock())
    if recorded is not None and not recorded.is_final and recorded.termination_reason:
        # Aborted while SubmitJob was in flight: the abort recorded its reason; terminate it now.
        terminate(services, recorded, recorded.termination_reason)
    return DispatchOutcome.SUBMITTED


def end_undispatched(services: Services, job: Job, reason: str, now: datetime) -> Job:
    """End a job that AWS Batch never ran (held, admitted, or refused): ``Terminated`` with ``reason``,
    nothing charged, its quota given back in the same transaction (``JobRepository.settle``), then the
    account's next held jobs admitted and the job's notifications sent.

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
        if current.holds_quota or current.dispatch_state == DispatchState.HELD:
            request_admission(services, current.account_id)
        deliver_due_notifications(services, after, now, raise_on_failure=False)
        return services.store.get_job(current.job_id) or after
    raise DependencyFailed(f"job {job.job_id} kept changing; try again")
