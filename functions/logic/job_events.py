"""Applying ``Batch Job State Change`` events: forward-only status, timestamps, and the final charge.

EventBridge delivers at least once, in no guaranteed order; AWS Batch may also retry an attempt.
Every write is conditional on the event position it was computed from, so duplicates and late
events change nothing, and the final transition, its ledger entry and the balance change are one
transaction: a job is charged once, whatever the delivery does.
"""

from __future__ import annotations

import random
import time
from datetime import datetime

from aws_lambda_powertools import Logger

from functions.domain.arrays import parse_span_job_name
from functions.domain.credits import settle_charge
from functions.domain.errors import (
    ConditionFailed,
    DependencyFailed,
    RecordMissing,
    UnreadableRecord,
)
from functions.domain.jobs import (
    BatchJobState,
    Job,
    JobType,
    LedgerEntry,
    LedgerKind,
    Transition,
    apply_batch_event,
    charge_entry_id,
    is_credit_constraint_reason,
)
from functions.domain.machine_classes import machine_class
from functions.domain.status import is_known_batch_status
from functions.logic.array_events import apply_array_event
from functions.logic.job_outcomes import discard_outputs, final_outcome
from functions.logic.notifying import deliver_due_notifications
from functions.ports import Services

logger = Logger(child=True)

MAX_WRITE_ATTEMPTS = 25


def _settle(services: Services, transition: Transition, now: datetime) -> None:
    job = transition.after
    account = services.store.get_account(job.account_id)
    if account is None:
        raise DependencyFailed(f"account {job.account_id} of job {job.job_id} is missing")
    # The final attempt's Running time as the domain resolved it (the event's times, else what the
    # job knew; never negative); None when it never ran or was lost to infrastructure (free).
    running_ms = transition.running_ms
    if running_ms is not None and job.time_constraint is not None:
        # Time past the job's timeConstraint is the enforcement's latency (a meter tick, the Batch
        # timeout's 60 s minimum), not the user's: it is not billed.
        running_ms = min(running_ms, job.time_constraint * 1000)
    rate = machine_class(job.machine_class).credits_per_hour
    charge = settle_charge(running_ms, rate, job.credit_constraint, account.credit_balance)
    entry = None
    # A charge the balance could not cover still gets its entry (credits 0, the rest unbilled), so
    # every running cost is explained in the ledger.
    if charge.credits > 0 or charge.unbilled > 0:
        at = job.completed_at or now
        entry = LedgerEntry(
            entry_id=charge_entry_id(job.job_id),
            account_id=job.account_id,
            at=at,
            kind=LedgerKind.CHARGE,
            credits=charge.credits,
            balance_after=account.credit_balance - charge.credits,
            job_id=job.job_id,
            unbilled=charge.unbilled,
        )
    services.store.settle(transition, charge, entry, now)
    services.events.count("CreditsCharged", float(charge.credits), amount=True)
    logger.info(
        "job settled",
        job_id=job.job_id,
        status=job.status.value,
        credits=str(charge.credits),
        unbilled=str(charge.unbilled),
    )


def _event_job(services: Services, job_id: str, state: BatchJobState) -> Job | None:
    """The job an event names, or None (logged) when it is unknown, gone or unreadable: a late event
    for those is neither applied nor charged."""
    try:
        job = services.store.get_job(job_id)
    except UnreadableRecord as exc:
        logger.error("event for an unreadable job item ignored", job_name=state.job_name, problem=exc.message)
        return None
    if job is None:
        # Unknown, deleted, or past its record TTL.
        logger.warning(
            "event for unknown job ignored", job_name=state.job_name, batch_job_id=state.batch_job_id
        )
    return job


def apply_job_state_change(services: Services, state: BatchJobState, now: datetime) -> Job | None:
    """Apply one event to its job, settle it if final, then send what the job owes.

    Parameters
    ----------
    services : Services
        Ports.
    state : BatchJobState
        The event's detail; ``job_name`` is the service's job id (an array's: its parent's id, with
        ``_<offset>`` for spans after the first; ``functions.logic.array_events`` applies those).
    now : datetime
        The handler's clock (recorded as ``lastEventAt`` only; status times come from the event).

    Returns
    -------
    Job | None
        The job after the event, or None when the event is not for one of this service's jobs.

    Raises
    ------
    DependencyFailed
        When DynamoDB/SNS fail, or the write kept losing races (the event is retried by EventBridge).
    """
    if not is_known_batch_status(state.status):
        logger.warning("unknown batch status ignored", status=state.status, batch_job_id=state.batch_job_id)
        return None
    # An array's spans are named <parent> or <parent>_<offset> (``arrays.span_job_name``).
    span = parse_span_job_name(state.job_name)
    job_id = span[0] if span is not None else state.job_name
    for _ in range(MAX_WRITE_ATTEMPTS):
        job = _event_job(services, job_id, state)
        if job is None:
            return None
        if job.type == JobType.ARRAY:
            return apply_array_event(services, job, state, now)
        if job_id != state.job_name or (job.batch_job_id and job.batch_job_id != state.batch_job_id):
            logger.warning(
                "event for another batch job ignored", job_id=job.job_id, batch_job_id=state.batch_job_id
            )
            return job
        final_reason, warnings, charged = final_outcome(services, job, state)
        transition = apply_batch_event(job, state, final_reason, warnings=warnings, charged=charged)
        if transition is None:
            break
        try:
            if transition.settles:
                _settle(services, transition, now)
            else:
                services.store.save_transition(transition, now)
        except ConditionFailed:
            # Another event or a settlement of the same account won; back off with jitter, re-read.
            logger.debug("transition lost a race; re-reading", job_id=job.job_id)
            time.sleep(random.uniform(0, 0.02))  # noqa: S311 - jitter, not cryptography
            continue
        job = transition.after
        logger.info("job status", job_id=job.job_id, status=job.status.value, batch_status=state.status)
        if transition.settles and is_credit_constraint_reason(job.status_reason):
            discard_outputs(services, job)
        break
    else:
        raise DependencyFailed(f"job {state.job_name} kept changing; the event will be retried")
    try:
        fresh = services.store.get_job(job.job_id) or job
        # A failed publish stays owed and is sent again by the meter: the event itself succeeded.
        deliver_due_notifications(services, fresh, now, raise_on_failure=False)
    except (RecordMissing, UnreadableRecord):
        logger.warning("job gone before its notifications were sent", job_id=job.job_id)
        return job
    return fresh
