"""What the meter reads off a running job and when it must stop it (docs/architecture.md "Credits").

Order of enforcement: the job's ``creditConstraint``, then its ``timeConstraint``, then the account's
balance less what all its running jobs have spent.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from functions.domain.arrays import array_spent
from functions.domain.charged_time import running_ms_at
from functions.domain.credits import spent_so_far
from functions.domain.jobs import Job, JobType, credit_constraint_reason, job_rate, time_constraint_reason
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
    """Read one Starting or Running job at ``now``: its Running time is from its start, clamped into
    ``[submittedAt, now]`` (``charged_time.running_ms_at``), to ``now``.

    An ``Array`` parent reads as what it shows (``read_array_meter`` sums its children); an
    ``ArrayChild``'s ``creditConstraint`` is its array's, enforced on the array's sum, so a child
    reaches only its own ``timeConstraint``.
    """
    if job.type == JobType.ARRAY or job.status != JobStatus.RUNNING or job.started_at is None:
        return MeterReading(job, 0, job.credits_spent, None)
    # A start that cannot be true (before the submission, after now) is clamped into the job's life.
    running_ms = running_ms_at(job.started_at, job.submitted_at, now)
    rate = job_rate(job)
    own_cap = None if job.type == JobType.ARRAY_CHILD else job.credit_constraint
    spent = max(spent_so_far(running_ms, rate, own_cap), job.credits_spent)
    cap = None
    if own_cap is not None and spent >= own_cap:
        cap = credit_constraint_reason(own_cap)
    elif job.time_constraint is not None and running_ms >= job.time_constraint * 1000:
        cap = time_constraint_reason(job.time_constraint)
    return MeterReading(job, running_ms, spent, cap)


def read_array_meter(parent: Job, children: Iterable[MeterReading]) -> MeterReading:
    """An array at one tick, from its running children's readings: ``spent`` is its settled
    children's charges plus what the running ones have spent (``arrays.array_spent``, capped by the
    array's ``creditConstraint``, never below what it shows); ``cap_reached`` once that is the cap.
    Finished children are in ``credits_settled``: the reading costs nothing per finished child."""
    running = [r.spent for r in children if r.job.status == JobStatus.RUNNING]
    spent = max(array_spent(parent.credits_settled, running, parent.credit_constraint), parent.credits_spent)
    cap = None
    if parent.credit_constraint is not None and spent >= parent.credit_constraint:
        cap = credit_constraint_reason(parent.credit_constraint)
    return MeterReading(parent, 0, spent, cap)


def balance_exhausted(balance: Decimal, readings: Iterable[MeterReading]) -> bool:
    """True when the account's balance, less what its running jobs have spent, is 0 or less (an
    array parent's reading is left out: its children's are in ``readings``, and what they settled
    has left the balance already)."""
    spent = sum((r.spent for r in readings if r.job.type != JobType.ARRAY), Decimal(0))
    return balance - spent <= 0
