"""Applying ``Batch Job State Change`` events: forward-only status, timestamps, and the final charge.

EventBridge delivers at least once, in no guaranteed order; AWS Batch may also retry an attempt.
Every write is conditional on the event position it was computed from, so duplicates and late
events change nothing, and the final transition, its ledger entry and the balance change are one
transaction: a job is charged once, whatever the delivery does.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, replace
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
    Account,
    BatchJobState,
    Job,
    JobType,
    Transition,
    apply_batch_event,
    is_credit_constraint_reason,
)
from functions.domain.presumed import presume_transition
from functions.domain.status import FINAL_BATCH_STATUSES, is_known_batch_status
from functions.logic import waits
from functions.logic.array_events import apply_array_event
from functions.logic.container_events import apply_container_event
from functions.logic.dispatch_requests import admit_after_end
from functions.logic.job_outcomes import discard_outputs, final_charge, final_outcome, log_corrections
from functions.logic.notifying import deliver_due_notifications, status_claims
from functions.ports import Services

logger = Logger(child=True)

MAX_WRITE_ATTEMPTS = 25


@dataclass(frozen=True, slots=True)
class _Settled:
    """A job as written (a settled one: its final charge in ``credits_spent``, ``claims`` not yet in
    its ``sent_notifications``), the account read for the charge, and the notification keys claimed
    in the settlement's own write (None and none for a transition that is not final)."""

    job: Job
    account: Account | None
    claims: frozenset[str]
    # False when the settlement's release proved no held job of the account waits for its units.
    held_may_wait: bool = True


def _settle(services: Services, transition: Transition, now: datetime, account: Account | None) -> _Settled:
    """Settle a final transition, claiming in the same write the status notifications it makes due.
    ``account`` is the job's account as read with the job (strongly consistent); None reads it."""
    job = transition.after
    if account is None:
        account = services.store.get_account(job.account_id)
    if account is None:
        raise DependencyFailed(f"account {job.account_id} of job {job.job_id} is missing")
    charge, entry = final_charge(services, transition, job.credit_constraint, now, account)
    written = replace(job, credits_spent=charge.credits, last_event_at=now)
    claims = status_claims(written, now)
    held_may_wait = services.store.settle(transition, charge, entry, now, claims)
    services.events.count("CreditsCharged", float(charge.credits), amount=True)
    logger.info(
        "job settled",
        job_id=job.job_id,
        status=job.status.value,
        credits=str(charge.credits),
        unbilled=str(charge.unbilled),
    )
    return _Settled(written, account, claims, held_may_wait)


def _event_job(services: Services, job_id: str, state: BatchJobState) -> tuple[Job | None, Account | None]:
    """The job an event names, or None (logged) when it is unknown, gone or unreadable: a late event
    for those is neither applied nor charged. A final event that names its account (the Batch job's
    ``remote-batch:accountId`` tag) reads the job and the account (for the charge and the
    notifications' contacts) in one request; the account is None otherwise."""
    account: Account | None = None
    try:
        if state.account_id and state.status in FINAL_BATCH_STATUSES:
            job, account = services.store.get_job_and_account(job_id, state.account_id)
        else:
            job = services.store.get_job(job_id)
    except UnreadableRecord as exc:
        # pragma: no mutate start (a log line or the retry jitter: README "Testing")
        logger.error("event for an unreadable job item ignored", job_name=state.job_name, problem=exc.message)
        # pragma: no mutate end
        return None, None
    if job is not None and account is not None and account.account_id != job.account_id:
        account = None  # a tag that does not match the job's account is not trusted
    if job is None:
        # Unknown, deleted, or past its record TTL.
        # pragma: no mutate start (a log line or the retry jitter: README "Testing")
        logger.warning(
            "event for unknown job ignored", job_name=state.job_name, batch_job_id=state.batch_job_id
        )
        # pragma: no mutate end
    return job, account


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
    # STARTING and RUNNING are written without a read when the job is where they usually find it;
    # otherwise the failed write returns the job as it is, and the event is applied from that.
    known: Job | None = None
    written: Job | None = None
    presumed = presume_transition(state, now) if job_id == state.job_name else None
    if presumed is not None:
        try:
            written, known = services.store.save_presumed_transition(presumed, now)
        except (RecordMissing, UnreadableRecord):
            known = None  # gone or unreadable as far as the write could tell: read it and see
        if written is not None:
            return _after_write(services, state, written, now)
    # The presumed write, when tried, was the first of the attempts.
    attempts = MAX_WRITE_ATTEMPTS - 1 if presumed is not None else MAX_WRITE_ATTEMPTS
    job = _apply_from_read(services, state, job_id, known, now, attempts=attempts)
    if job is not None:
        # A final job (an array: once the array is) releases or ends the children waiting for it;
        # a final event delivered again does it again, which heals one a failure cut short.
        waits.settle_dependents(services, job, now)
    return job


def _apply_from_read(
    services: Services, state: BatchJobState, job_id: str, known: Job | None, now: datetime, *, attempts: int
) -> Job | None:
    """``apply_job_state_change`` from the job as stored (``known``, else read), re-read after a lost
    race, for at most ``attempts`` writes; each is conditional on the position it was computed from."""
    for _ in range(attempts):
        account: Account | None = None
        job: Job | None = known
        if job is None:
            job, account = _event_job(services, job_id, state)
        known = None  # a lost race reads the job (and the account) again
        if job is None:
            return None
        if job.type == JobType.ARRAY and job.array_containers is not None:
            return apply_container_event(services, job, state, now)
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
        transition = apply_batch_event(
            job, state, final_reason, arrived_at=now, warnings=warnings, charged=charged
        )
        if transition is None:
            break
        log_corrections(transition)
        try:
            settled = _write(services, transition, now, account)
        except ConditionFailed:
            # Another event or a settlement of the same account won; back off with jitter, re-read.
            # pragma: no mutate start (a log line or the retry jitter: README "Testing")
            logger.debug("transition lost a race; re-reading", job_id=job.job_id)
            time.sleep(random.uniform(0, 0.02))  # noqa: S311 - jitter, not cryptography
            # pragma: no mutate end
            continue
        # The write was conditional on the position read: the job is what was written (no re-read).
        if transition.settles and is_credit_constraint_reason(settled.job.status_reason):
            discard_outputs(services, settled.job)
        return _after_write(
            services,
            state,
            settled.job,
            now,
            account=settled.account,
            claimed=settled.claims,
            admit=settled.held_may_wait,
        )
    else:
        raise DependencyFailed(f"job {state.job_name} kept changing; the event will be retried")
    return _deliver(services, job, now)


def _write(services: Services, transition: Transition, now: datetime, account: Account | None) -> _Settled:
    """Store ``transition`` (a final one settled with its charge); returns the job as written, with
    the account and the claims of a settlement. Raises ``ConditionFailed`` when the job moved."""
    if transition.settles:
        return _settle(services, transition, now, account)
    services.store.save_transition(transition, now)
    return _Settled(replace(transition.after, last_event_at=now), None, frozenset())


def _after_write(
    services: Services,
    state: BatchJobState,
    job: Job,
    now: datetime,
    *,
    account: Account | None = None,
    claimed: frozenset[str] = frozenset(),
    admit: bool = True,
) -> Job:
    """Log the status an event wrote, then send what the job owes; returns the job."""
    # pragma: no mutate start (a log line or the retry jitter: README "Testing")
    logger.info("job status", job_id=job.job_id, status=job.status.value, batch_status=state.status)
    # pragma: no mutate end
    return _deliver(services, job, now, account=account, claimed=claimed, admit=admit)


def _deliver(
    services: Services,
    job: Job,
    now: datetime,
    *,
    account: Account | None = None,
    claimed: frozenset[str] = frozenset(),
    admit: bool = True,
) -> Job:
    """Send what ``job`` (as written or read) owes now, with the account already read and the keys
    already claimed when the caller has them; returns the job (those keys claimed). ``admit`` False:
    the settlement just written proved no held job waits for what it gave back."""
    # A final job gave its quota back as it settled: the account's held jobs may go (a replayed final
    # event runs this again, which heals an admission a failure cut short).
    if admit:
        admit_after_end(services, job)
    try:
        # A failed publish stays owed and is sent again by the meter: the event itself succeeded.
        # Claims are conditional, so a notification another writer claimed meanwhile is not resent.
        deliver_due_notifications(
            services, job, now, raise_on_failure=False, account=account, claimed=claimed
        )
    except (RecordMissing, UnreadableRecord):
        # pragma: no mutate start (a log line or the retry jitter: README "Testing")
        logger.warning("job gone before its notifications were sent", job_id=job.job_id)
        # pragma: no mutate end
    return replace(job, sent_notifications=job.sent_notifications | claimed) if claimed else job
