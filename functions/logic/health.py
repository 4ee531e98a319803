"""Health signals of the service itself (what the operator's alarms watch), not of any one job."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from aws_lambda_powertools import Logger

from functions.domain.jobs import Job
from functions.domain.machine_classes import machine_class
from functions.logic.batch_submission import batch_timeout
from functions.ports import Services

logger = Logger(child=True)

# Past its Batch timeout a job's attempt is ended by Batch within seconds; the event then takes up to a
# minute, the meter's reconciliation of a quiet job up to 10 minutes more. A job still Starting or
# Running this long after its timeout is stuck: Batch, EventBridge or this service lost it.
STUCK_MARGIN = timedelta(minutes=15)


def stuck_jobs(jobs: Iterable[Job], now: datetime) -> list[Job]:
    """The jobs among ``jobs`` (Starting or Running) whose Batch attempt should have ended by ``now``:
    ``startedAt + attemptDurationSeconds + STUCK_MARGIN`` is past. Jobs without a Batch timeout (no
    ``timeConstraint`` nor ``creditConstraint``) or not started yet are never stuck by this rule.

    The timeout is the one ``submit_job`` gave Batch (``batch_timeout``: AWS Batch counts
    ``attemptDurationSeconds`` from the attempt's ``startedAt``, Batch user guide, "Job timeouts").
    """
    stuck: list[Job] = []
    for job in jobs:
        if job.is_final or job.started_at is None:
            continue
        timeout = batch_timeout(machine_class(job.machine_class), job.credit_constraint, job.time_constraint)
        if timeout is not None and job.started_at + timedelta(seconds=timeout) + STUCK_MARGIN < now:
            stuck.append(job)
    return stuck


def count_stuck_jobs(services: Services, now: datetime, metered: Iterable[Job] | None = None) -> int:
    """Count the stuck Starting/Running jobs (``stuck_jobs``), log each, and report the number as the
    ``StuckJobs`` event (0 included, so the alarm on it always has data). Returns the number.

    ``metered`` are the Starting/Running jobs the caller already read (the meter tick's, so the index
    is queried once per tick); None reads them from the ``metered`` index.
    """
    stuck = stuck_jobs(services.store.list_metered_jobs() if metered is None else metered, now)
    for job in stuck:
        logger.warning("job stuck past its batch timeout", job_id=job.job_id, started_at=str(job.started_at))
    services.events.count("StuckJobs", len(stuck))
    return len(stuck)
