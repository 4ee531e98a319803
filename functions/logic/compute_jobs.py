"""Jobs on a dedicated compute end when its capacity goes: a compute's jobs run only while it is
billed (``functions.domain.computes``: Starting or Running).

Two paths, both through the service's one way of ending a job (``endings.terminate``: the reason
is recorded on the job once, AWS Batch's TerminateJob is sent once, a job not yet in AWS Batch ends
free; the FAILED event then settles it, charged 0 as every job on a compute is):

- ``end_jobs_on_compute``: at the stop, restart or delete of a billed compute, every job on it
  that is not final (held, queued, starting, running) is terminated with ``Dedicated compute lab
  stopped`` (Azure ML's compute instance stop ends what runs on it).
- ``end_stray_jobs``: each meter tick, a job Starting or Running on a compute that is not billed
  (the stop's TerminateJob failed, a job submitted as the stop raced it, a failed compute) is
  terminated, so none runs for more than a tick on unbilled capacity.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from aws_lambda_powertools import Logger

from functions.domain.computes import Compute, ComputeRequest, jobs_end_reason, stray_job_reason
from functions.domain.errors import DependencyFailed, NotFound
from functions.domain.jobs import Job
from functions.logic.endings import terminate
from functions.ports import Services

logger = Logger(child=True)


def _end(services: Services, job: Job, reason: str, now: datetime) -> bool:
    """Terminate one job; True when it was asked. A failure is logged: the meter's
    ``end_stray_jobs`` ends the job on a later tick once it runs."""
    try:
        terminate(services, job, reason, now)
    except (DependencyFailed, NotFound):
        logger.exception("job on a stopped compute not terminated yet", job_id=job.job_id)
        return False
    return True


def end_jobs_on_compute(
    services: Services, compute_before: Compute, request: ComputeRequest, why: str | None, now: datetime
) -> int:
    """Terminate every job on the compute that ``request`` stops, restarts or deletes
    (``compute_before``: the ``Compute`` as it was before the request; ``why``: the meter's reason,
    None for a user's request). Returns how many were asked to end.

    Never raises for one job: a job that cannot be ended now (no AWS Batch id yet, AWS Batch
    refused) is logged and left to ``end_stray_jobs``.
    """
    reason = jobs_end_reason(compute_before.name, request, why)
    try:
        jobs = list(services.store.list_unfinished_jobs_on(compute_before.account_id, compute_before.name))
    except DependencyFailed:
        logger.exception("jobs on a stopped compute not listed", compute=compute_before.name)
        return 0
    ended = sum(_end(services, job, reason, now) for job in jobs)
    if jobs:
        logger.info("jobs on a stopped compute ended", compute=compute_before.name, jobs=ended, reason=reason)
    return ended


def end_stray_jobs(services: Services, jobs: Iterable[Job], now: datetime) -> int:
    """Terminate each of ``jobs`` (the meter's Starting and Running jobs) that runs on a compute
    that is not billed (``domain.computes.stray_job_reason``). One read of each compute named.
    Returns how many were asked to end."""
    store = services.compute_store
    if store is None:
        return 0
    reasons: dict[tuple[str, str], str | None] = {}
    ended = 0
    for job in jobs:
        if job.compute is None or job.is_final:
            continue
        key = (job.account_id, job.compute)
        if key not in reasons:
            try:
                reasons[key] = stray_job_reason(store.get_compute(*key), job.compute)
            except DependencyFailed:
                logger.exception("compute of a running job unreadable", compute=job.compute)
                reasons[key] = None
        reason = reasons[key]
        if reason is not None and job.termination_requested_at is None and _end(services, job, reason, now):
            ended += 1
    return ended
