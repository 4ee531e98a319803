"""What the meter reads off a running job and when it must stop it (DESIGN.md "Credits").

Order of enforcement: the job's ``creditConstraint``, then its ``timeConstraint``, then the account's
balance less what all its running jobs have spent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from functions.domain.credits import spent_so_far
from functions.domain.jobs import Job, credit_constraint_reason, time_constraint_reason
from functions.domain.machine_classes import machine_class
from functions.domain.status import JobStatus


@dataclass(frozen=True, slots=True)
class MeterReading:
    """One job at one tick.

    Attributes
    ----------
    job : Job
        The job as read.
    running_ms : int
        Running time so far in milliseconds (0 while Starting).
    spent : Decimal
        Credits spent so far (no 60-second minimum; capped by ``creditConstraint``), never below
        what the job already shows.
    cap_reached : str | None
        The ``statusReason`` of the cap the job reached, if any.
    """

    job: Job
    running_ms: int
    spent: Decimal
    cap_reached: str | None


def read_meter(job: Job, now: datetime) -> MeterReading:
    """Read one Starting or Running job at ``now``."""
    if job.status != JobStatus.RUNNING or job.started_at is None:
        return MeterReading(job, 0, job.credits_spent, None)
    running_ms = max(0, int((now - job.started_at).total_seconds() * 1000))
    rate = machine_class(job.machine_class).credits_per_hour
    spent = max(spent_so_far(running_ms, rate, job.credit_constraint), job.credits_spent)
    cap = None
    if job.credit_constraint is not None and spent >= job.credit_constraint:
        cap = credit_constraint_reason(job.credit_constraint)
    elif job.time_constraint is not None and running_ms >= job.time_constraint * 1000:
        cap = time_constraint_reason(job.time_constraint)
    return MeterReading(job, running_ms, spent, cap)


def balance_exhausted(balance: Decimal, readings: Iterable[MeterReading]) -> bool:
    """True when the account's balance, less what its running jobs have spent, is 0 or less."""
    return balance - sum((r.spent for r in readings), Decimal(0)) <= 0
