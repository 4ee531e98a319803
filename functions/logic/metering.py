"""The meter: every tick (1 minute on AWS), for the jobs that are Starting or Running:

1. refresh ``creditsSpent`` (never lowering it);
2. enforce, in this order: the job's ``creditConstraint``, its ``timeConstraint``, then the
   account's balance less what its running jobs have spent (``Account out of credits`` for all of
   them); a terminated job keeps the reason the meter gave, whatever the later FAILED event says;
3. reconcile jobs whose last event is older than 10 minutes with Batch ``DescribeJobs`` (events
   can be lost), applying what it finds exactly as an event would be applied.

Running jobs come from a sparse index, so a tick's cost grows with running jobs, not with history.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from aws_lambda_powertools import Logger

from functions.domain.errors import DependencyFailed
from functions.domain.jobs import OUT_OF_CREDITS, BatchJobState, Job
from functions.domain.machine_classes import GeoZone
from functions.domain.metering import MeterReading, balance_exhausted, read_meter
from functions.domain.notification_schedule import due_notifications
from functions.logic.job_events import apply_job_state_change
from functions.logic.notifying import deliver_due_notifications
from functions.logic.submission import terminate
from functions.ports import Services

logger = Logger(child=True)

STALE_AFTER = timedelta(minutes=10)
UNSUBMITTED_REASON = "AWS Batch never confirmed the job's submission; nothing was charged"
UNKNOWN_TO_BATCH_REASON = "AWS Batch has no record of the job"
# A synthetic final state must order after every real event of the job (AWS Batch allows at most
# 10 attempts), so the forward-only rule lets it through.
SYNTHETIC_ATTEMPT_COUNT = 1000


@dataclass(frozen=True, slots=True)
class MeterReport:
    """What one tick did: jobs metered, ``creditsSpent`` raised, jobs terminated, jobs reconciled."""

    metered: int
    updated: int
    terminated: int = 0
    reconciled: int = 0


def _terminate(services: Services, reading: MeterReading, reason: str) -> bool:
    job = reading.job
    try:
        terminate(services, job, job.termination_reason or reason)
    except DependencyFailed:
        # Recorded reason stays; the next tick sends TerminateJob again (it is idempotent).
        logger.exception("termination not sent", job_id=job.job_id, reason=reason)
        return False
    return True


def meter_tick(services: Services, now: datetime) -> MeterReport:
    """One tick: refresh spend, enforce the caps and the balance, reconcile stale jobs.

    Parameters
    ----------
    services : Services
        Ports.
    now : datetime
        The tick's time; a job's running time is ``now - startedAt``.
    """
    # First what earlier deliveries failed to publish (this tick's failures wait for the next one).
    retry_failed_notifications(services, now)
    by_account: dict[str, list[MeterReading]] = defaultdict(list)
    for job in services.store.list_metered_jobs():
        by_account[job.account_id].append(read_meter(job, now))
    metered = sum(len(readings) for readings in by_account.values())
    updated = terminated = 0
    for account_id, readings in by_account.items():
        for reading in readings:
            if reading.spent > reading.job.credits_spent and services.store.raise_credits_spent(
                reading.job.job_id, reading.spent
            ):
                updated += 1
        stopping: set[str] = set()
        for reading in readings:
            reason = reading.cap_reached or reading.job.termination_reason
            if reason and _terminate(services, reading, reason):
                stopping.add(reading.job.job_id)
                terminated += 1
        account = services.store.get_account(account_id)
        if account is not None and balance_exhausted(account.credit_balance, readings):
            for reading in readings:
                if reading.job.job_id not in stopping and _terminate(services, reading, OUT_OF_CREDITS):
                    terminated += 1
    for readings in by_account.values():
        for reading in readings:
            notify_progress(services, reading, now)
    reconciled = reconcile_stale_jobs(services, now)
    logger.info("meter tick", metered=metered, updated=updated, terminated=terminated, reconciled=reconciled)
    return MeterReport(metered=metered, updated=updated, terminated=terminated, reconciled=reconciled)


def notify_progress(services: Services, reading: MeterReading, now: datetime) -> None:
    """Send what a metered job owes now (Hourly, Daily, HoursElapsed, JobCreditsUsed,
    TimeConstraintNear, and any status notification a failed publish left unsent). A failure is left
    for the next tick: its key was released."""
    job = replace(reading.job, credits_spent=max(reading.spent, reading.job.credits_spent))
    try:
        deliver_due_notifications(services, job, now, raise_on_failure=False)
    except DependencyFailed:
        logger.exception("notifications not delivered", job_id=job.job_id)


def retry_failed_notifications(services: Services, now: datetime) -> None:
    """Send again what failed to publish (for final jobs too: the meter is their only retry)."""
    for job_id in list(services.store.list_notification_retries()):
        job = services.store.get_job(job_id)
        if job is None:
            continue
        try:
            deliver_due_notifications(services, job, now, raise_on_failure=False)
        except DependencyFailed:
            logger.exception("notification retry failed", job_id=job_id)
            continue
        after = services.store.get_job(job_id)
        if after is not None and not due_notifications(after, now):
            # Conditional too: a publish that failed meanwhile keeps the job listed.
            services.store.clear_notification_retry(job_id)


def _synthetic_failure(job: Job, reason: str, now: datetime) -> BatchJobState:
    """A FAILED state for a job Batch cannot tell us about; it never ran as far as we can prove."""
    return BatchJobState(
        batch_job_id=job.batch_job_id or f"unsubmitted-{job.job_id}",
        job_name=job.job_id,
        status="FAILED",
        status_reason=reason,
        created_at_ms=int(job.submitted_at.timestamp() * 1000),
        started_at_ms=int(job.started_at.timestamp() * 1000) if job.started_at else None,
        stopped_at_ms=int(now.timestamp() * 1000),
        exit_code=None,
        log_stream_name=job.log_stream_name,
        attempt_count=SYNTHETIC_ATTEMPT_COUNT,
    )


def reconcile_stale_jobs(services: Services, now: datetime) -> int:
    """Ask Batch about non-final jobs with no event for 10 minutes; apply what it says.

    Returns how many jobs were checked. A job Batch does not know (never submitted, or past
    Batch's retention) is ended ``Terminated`` with a reason saying so.
    """
    stale = list(services.store.list_stale_jobs(now - STALE_AFTER))
    by_zone: dict[GeoZone, list[Job]] = defaultdict(list)
    for job in stale:
        by_zone[job.geo_zone].append(job)
    observed_ms = int(now.timestamp() * 1000)
    for zone, jobs in by_zone.items():
        zone_services = services.zones.get(zone)
        if zone_services is None:
            logger.error("jobs in a zone this deployment lacks", zone=zone.value, jobs=len(jobs))
            continue
        ids = [j.batch_job_id for j in jobs if j.batch_job_id]
        try:
            states = (
                {s.batch_job_id: s for s in zone_services.batch.describe_jobs(ids, observed_ms)}
                if ids
                else {}
            )
        except DependencyFailed:
            logger.exception("reconciliation skipped", zone=str(zone))
            continue
        for job in jobs:
            state = states.get(job.batch_job_id or "")
            if state is None:
                reason = UNKNOWN_TO_BATCH_REASON if job.batch_job_id else UNSUBMITTED_REASON
                state = _synthetic_failure(job, reason, now)
            try:
                applied = apply_job_state_change(services, state, now)
            except DependencyFailed:
                # A store or publish failure for one job must not stop the tick for the others:
                # what was not written is still stale next tick; a failed publish released its key.
                logger.exception("reconciliation incomplete", job_id=job.job_id)
                continue
            if applied is not None and not applied.is_final:
                services.store.mark_reconciled(job.job_id, now)
            logger.info("job reconciled", job_id=job.job_id, batch_status=state.status)
    return len(stale)
