"""Ending a job the service stops: the one module that ends jobs, whatever their stage.

- ``terminate``: why the service ends a job (an abort, a cap, the balance, a compute's stop) is
  recorded on the job once, then by stage: one AWS Batch has (or an array's spans) gets TerminateJob
  once (the FAILED event then settles it, ``functions.logic.job_events``); one AWS Batch never had ends
  here (``end_undispatched``); one whose SubmitJob is in flight is terminated by its dispatcher once
  AWS Batch named it.
- ``end_undispatched``: a job AWS Batch never ran (held, admitted, or refused) ends ``Terminated``,
  free, its quota given back in the settling transaction.
- ``withdraw_unsent``: an array's children AWS Batch does not have (the held remainder, the spans
  admitted but not claimed) end ``Terminated``, free, in one transaction.
- ``end_waiting``: a job waiting for its prerequisites (``functions.logic.waits``), one of which can
  no longer hold, ends ``Terminated``, free, by one of the two above, only while it still waits.

Each then asks, through the dispatch port, for the account's held jobs to be admitted into the units
given back (``dispatch_requests.request_admission``), unless its caller is an admission pass.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from aws_lambda_powertools import Logger

from functions.domain.arrays import unsent_runs
from functions.domain.errors import ConditionFailed, DependencyFailed, RecordMissing
from functions.domain.jobs import DispatchState, Job, JobType, Transition
from functions.domain.machine_classes import GeoZone
from functions.domain.status import JobStatus, statuses_between
from functions.logic.array_results import finish_array
from functions.logic.dispatch_requests import request_admission
from functions.logic.job_outcomes import final_charge
from functions.logic.notifying import deliver_due_notifications
from functions.logic.unclaimed_items import end_unclaimed
from functions.ports import Services

logger = Logger(child=True)

#: Re-reads of a job whose ending lost a race (it changed between the read and the write).
MAX_END_ATTEMPTS = 10
#: Re-reads of a parent whose withdrawal lost a race (a span claimed or admitted meanwhile).
MAX_WITHDRAW_ATTEMPTS = 10


def terminate(services: Services, job: Job, reason: str, now: datetime | None = None) -> Job:
    """Record ``reason`` as why the service ends ``job`` and ask Batch to terminate it, once.

    The reason is kept whatever reason the later FAILED event carries. TerminateJob is sent by the
    one caller that records the request on the job (``claim_termination``, a conditional write):
    an abort, the meter's ticks and a retried request never send it twice. When the call fails the
    request is released, so a later tick may send it again (at most ``MAX_TERMINATE_ATTEMPTS``).
    Final jobs are returned as they are.

    Returns
    -------
    Job
        The job as stored; ``termination_requested_at`` is ``now`` when this call sent TerminateJob.

    Raises
    ------
    RecordMissing
        The job no longer exists.
    DependencyFailed
        The job has no Batch id yet, or Batch refused (the request is released for a retry).
    """
    if job.is_final:
        return job
    now = now or services.clock()
    updated = (
        services.store.set_termination_reason(job.job_id, reason) or services.store.get_job(job.job_id) or job
    )
    if updated.is_final:
        return updated
    if updated.type == JobType.ARRAY:
        return _terminate_array(services, updated, reason, now)
    batch_job_id = updated.batch_job_id
    if batch_job_id is None and updated.dispatch_state is not None:
        return _end_before_batch(services, updated, reason, now)
    if batch_job_id is None:
        raise DependencyFailed(f"job {job.job_id} has no AWS Batch id yet; try again in a moment")
    if not services.store.claim_termination(job.job_id, now):
        logger.debug("termination already requested", job_id=job.job_id)
        return updated
    why = updated.termination_reason or reason
    try:
        services.zones[GeoZone(updated.geo_zone)].batch.terminate_job(batch_job_id, why)
    except Exception:
        services.store.release_termination(job.job_id)
        raise
    logger.info("job terminating", job_id=job.job_id, reason=why)
    return replace(
        updated, termination_requested_at=now, termination_attempts=updated.termination_attempts + 1
    )


def _end_before_batch(services: Services, job: Job, reason: str, now: datetime) -> Job:
    """Terminate a job AWS Batch has no id for yet: one held or admitted ends here, free (nothing to
    terminate in AWS Batch); for one whose SubmitJob is in flight (``Dispatching``) the reason is
    recorded and the dispatcher terminates it once AWS Batch named it (``dispatch.dispatch_job``)."""
    if job.dispatch_state == DispatchState.DISPATCHING:
        logger.info("termination left to the dispatcher", job_id=job.job_id)
        return job
    return end_undispatched(services, job, job.termination_reason or reason, now)


def _terminate_array(services: Services, parent: Job, reason: str, now: datetime) -> Job:
    """TerminateJob for each of an array's spans (AWS Batch cascades it to the span's children that
    are not final), once: the claim is the parent's, as for a single job. The children's FAILED
    events then end the parent (``array_results.finish_array``), with the parent's reason. An array
    admitted span by span first ends what never reached AWS Batch (``withdraw_unsent``:
    its held children and unclaimed spans, free); a span in flight is terminated by its dispatcher."""
    if parent.dispatch_state is not None:
        parent = withdraw_unsent(services, parent, parent.termination_reason or reason, now)
        if parent.is_final or not parent.array_spans:
            return parent
    if not parent.array_spans:
        raise DependencyFailed(f"job {parent.job_id} has no AWS Batch id yet; try again in a moment")
    if not services.store.claim_termination(parent.job_id, now):
        logger.debug("termination already requested", job_id=parent.job_id)
        return parent
    why = parent.termination_reason or reason
    batch = services.zones[GeoZone(parent.geo_zone)].batch
    try:
        for span_job_id in parent.array_spans:
            batch.terminate_job(span_job_id, why)
    except Exception:
        services.store.release_termination(parent.job_id)
        raise
    logger.info("array terminating", job_id=parent.job_id, spans=len(parent.array_spans), reason=why)
    return replace(parent, termination_requested_at=now, termination_attempts=parent.termination_attempts + 1)


def end_waiting(services: Services, job: Job, reason: str, now: datetime) -> Job:
    """End a job that waits for its prerequisites (``functions.logic.waits``: one can no longer hold)
    ``Terminated`` with ``reason``, free, with no ledger entry, its notifications sent: a single job by
    ``end_undispatched``, an array's children by ``withdraw_unsent`` (its reason recorded first, so the
    array ends with it rather than a count of its children). Only while it still waits: one released
    (or ended) by another writer meanwhile is returned as stored, unchanged.

    Raises ``DependencyFailed`` (DynamoDB kept failing or the job kept changing).
    """
    if job.type == JobType.ARRAY:
        if not job.is_waiting:
            return job
        recorded = services.store.set_termination_reason(job.job_id, reason) or job
        return withdraw_unsent(services, recorded, reason, now, admit_next=False, only_waiting=True)
    return end_undispatched(services, job, reason, now, admit_next=False, only_waiting=True)


def end_undispatched(
    services: Services,
    job: Job,
    reason: str,
    now: datetime,
    *,
    admit_next: bool = True,
    only_waiting: bool = False,
) -> Job:
    """End a job that AWS Batch never ran (held, admitted, or refused): ``Terminated`` with ``reason``,
    nothing charged, its quota given back in the same transaction (``JobRepository.settle``), then the
    account's next held jobs admitted and the job's notifications sent.

    With ``admit_next`` False the account's held jobs are not asked to be admitted (the caller is an
    admission pass, which goes on by itself). With ``only_waiting`` only a job still waiting for its
    prerequisites is ended (``end_waiting``): one released meanwhile is returned as stored.

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
        if current.is_final or (only_waiting and not current.is_waiting):
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


def withdraw_unsent(
    services: Services,
    parent: Job,
    reason: str,
    now: datetime,
    *,
    claimed_offset: int | None = None,
    admit_next: bool = True,
    only_waiting: bool = False,
) -> Job:
    """End every child of ``parent`` that AWS Batch does not have and no dispatcher is submitting
    (the held remainder, the ``Admitted`` spans; with ``claimed_offset``, that span too, whose claim
    is the caller's) ``Terminated`` with ``reason``, free, in one transaction
    (``JobRepository.withdraw_spans``), then have the account's held jobs admitted into the units
    given back (not with ``admit_next`` False: the caller is an admission pass, which goes on by
    itself) and settle the parent if every child is final now (``array_results.finish_array``). With
    ``only_waiting``, only while the parent still waits for its prerequisites (``end_waiting``).

    Returns the parent as stored after.

    Raises
    ------
    DependencyFailed
        DynamoDB failed, or the parent kept changing.
    """
    store = services.store
    current: Job | None = parent
    for _ in range(MAX_WITHDRAW_ATTEMPTS):
        if current is None or current.is_final:
            return current or parent
        if only_waiting and not current.is_waiting:
            return current
        spans = [
            s for s in current.array_queue if s.state == DispatchState.ADMITTED or s.offset == claimed_offset
        ]
        remaining = sum(count for _, count in unsent_runs(current))
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
    # Containers that take many items: once none is left to run, the items none claimed end.
    if end_unclaimed(services, fresh, now):
        fresh = store.get_job(parent.job_id) or fresh
    return finish_array(services, fresh, now)
