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
    Transition,
    apply_batch_event,
    is_credit_constraint_reason,
)
from functions.domain.status import is_known_batch_status
from functions.logic.array_events import apply_array_event
from functions.logic.dispatch import admit_after_end
from functions.logic.job_outcomes import discard_outputs, final_charge, final_outcome
from functions.logic.notifying import deliver_due_notifications
from functions.ports import Services

logger = Logger(child=True)

MAX_WRITE_ATTEMPTS = 25


def _settle(services: Services, transition: Transition, now: datetime) -> None:
    job = transition.after
    charge, entry = final_charge(services, transition, job.credit_constraint, now)
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
        # pragma: no mutate start (a log line or the retry jitter: README "Testing")
        logger.error("event for an unreadable job item ignored", job_name=state.job_name, problem=exc.message)
        # pragma: no mutate end
        return None
    if job is None:
        # Unknown, deleted, or past its record TTL.
        # pragma: no mutate start (a log line or the retry jitter: README "Testing")
        logger.warning(
            "event for unknown job ignored", job_name=state.job_name, batch_job_id=state.batch_job_id
        )
        # pragma: no mutate end
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
        # pragma: no mutate start (a log line or the retry jitter: README "Testing")
        logger.warning("unknown batch status ignored", status=state.status, batch_job_id=state.batch_job_id)
        # pragma: no mutate end
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
            # pragma: no mutate start (a log line or the retry jitter: README "Testing")
            logger.warning(
                "event for another batch job ignored", job_id=job.job_id, batch_job_id=state.batch_job_id
            )
            # pragma: no mutate end
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
            # pragma: no mutate start (a log line or the retry jitter: README "Testing")
            logger.debug("transition lost a race; re-reading", job_id=job.job_id)
            time.sleep(random.uniform(0, 0.02))  # noqa: S311 - jitter, not cryptography
            # pragma: no mutate end
            continue
        job = transition.after
        # pragma: no mutate start (a log line or the retry jitter: README "Testing")
        logger.info("job status", job_id=job.job_id, status=job.status.value, batch_status=state.status)
        # pragma: no mutate end
        if transition.settles and is_credit_constraint_reason(job.status_reason):
            discard_outputs(services, job)
        break
    else:
        raise DependencyFailed(f"job {state.job_name} kept changing; the event will be retried")
    # A final job gave its quota back as it settled: the account's held jobs may go (a replayed final
    # event runs this again, which heals an admission a failure cut short).
    admit_after_end(services, job)
    try:
        fresh = services.store.get_job(job.job_id) or job
        # A failed publish stays owed and is sent again by the meter: the event itself succeeded.
        deliver_due_notifications(services, fresh, now, raise_on_failure=False)
    except (RecordMissing, UnreadableRecord):
        # pragma: no mutate start (a log line or the retry jitter: README "Testing")
        logger.warning("job gone before its notifications were sent", job_id=job.job_id)
        # pragma: no mutate end
        return job
    return fresh
