"""The meter: every tick, refresh ``creditsSpent`` of Running jobs.

It reads only the sparse ``metered`` index (Starting/Running jobs), so its cost grows with the
number of running jobs, not with the jobs ever submitted. Cap enforcement (CreditConstraint,
TimeConstraint, balance) and periodic notifications build on this tick.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from aws_lambda_powertools import Logger

from functions.domain.credits import spent_so_far
from functions.domain.machine_classes import machine_class
from functions.domain.status import JobStatus
from functions.ports import Services

logger = Logger(child=True)


@dataclass(frozen=True, slots=True)
class MeterReport:
    """What one tick did: jobs looked at, and ``creditsSpent`` values raised."""

    metered: int
    updated: int


def meter_tick(services: Services, now: datetime) -> MeterReport:
    """Refresh ``creditsSpent`` of every Running job to its cost so far (never lowering it).

    Parameters
    ----------
    services : Services
        Ports.
    now : datetime
        The tick's time; a job's running time is ``now - startedAt``.
    """
    metered = updated = 0
    for job in services.store.list_metered_jobs():
        metered += 1
        if job.status != JobStatus.RUNNING or job.started_at is None:
            continue
        running_ms = int((now - job.started_at).total_seconds() * 1000)
        spent = spent_so_far(
            running_ms, machine_class(job.machine_class).credits_per_hour, job.credit_constraint
        )
        if spent > job.credits_spent and services.store.raise_credits_spent(job.job_id, spent):
            updated += 1
    logger.info("meter tick", metered=metered, updated=updated)
    return MeterReport(metered=metered, updated=updated)
