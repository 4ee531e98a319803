"""Array jobs' events: a child's ``Batch Job State Change`` moves the child and its parent's roll-up.

AWS Batch sends one event stream per child (``jobId`` ``<span id>:<index>``, ``arrayProperties.index``)
and one for each span's array job (``arrayProperties.size``, ``statusSummary``), at least once and in
any order (``functions.domain.arrays``). A child's record is written at its first event, in the same
``TransactWriteItems`` as its parent's ``childStatusCounts`` (and, when it ends, its charge and the
parent's ``creditsSettled``), conditional on the child's event position: a replayed or late child
event changes nothing. The span's own events never decide anything. The parent becomes Running when
a child starts, and final once every child is: ``finish_array`` settles that, idempotently, after
every child event (and the meter's reconciliation), so a crash between the two is healed by the next
(``functions.logic.array_results``).
"""

from __future__ import annotations

import random
import time
from dataclasses import replace
from datetime import datetime
from decimal import Decimal

from aws_lambda_powertools import Logger

from functions.domain.arrays import (
    child_job_id,
    child_template,
    locate_array_event,
    remaining_cap,
)
from functions.domain.credits import Charge
from functions.domain.errors import ConditionFailed, DependencyFailed, RecordMissing
from functions.domain.jobs import (
    BatchJobState,
    DispatchState,
    Job,
    LedgerEntry,
    Transition,
    apply_batch_event,
    credit_constraint_reason,
    is_credit_constraint_reason,
)
from functions.domain.status import JobStatus
from functions.logic import item_dependencies, waits
from functions.logic.array_results import finish_array
from functions.logic.dispatch_requests import request_admission
from functions.logic.endings import terminate
from functions.logic.job_outcomes import (
    discard_outputs,
    final_charge,
    final_outcome,
    log_corrections,
)
from functions.ports import Services

logger = Logger(child=True)

MAX_WRITE_ATTEMPTS = 25


def _child_charge(
    services: Services, parent: Job, transition: Transition, now: datetime
) -> tuple[Charge, LedgerEntry | None, Decimal | None]:
    """A settling child's charge (per-second, 60 s minimum, final attempt only: as a job), cut to
    what the array's ``creditConstraint`` leaves and to the balance; its ledger entry; and the most
    the parent's ``creditsSettled`` may be for this charge to stay within the cap."""
    charge, entry = final_charge(
        services, transition, remaining_cap(parent.credit_constraint, parent.credits_settled), now
    )
    most = None
    if parent.credit_constraint is not None and charge.credits > 0:
        most = parent.credit_constraint - charge.credits
    return charge, entry, most


def apply_array_event(services: Services, parent: Job, state: BatchJobState, now: datetime) -> Job:
    """Apply one event of an array's Batch job: to its child and the parent's roll-up.

    Parameters
    ----------
    parent : Job
        The ``Array`` job the event's ``jobName`` names.
    state : BatchJobState
        The event's detail.

    Returns
    -------
    Job
        The child after the event, or the parent for an event of a span's array job itself.

    Raises
    ------
    DependencyFailed
        DynamoDB, S3 or SNS failed, or the write kept losing races (EventBridge retries the event).
    """
    located = locate_array_event(state.batch_job_id, state.job_name, state.array_index, state.array_size)
    if located is None or located.index is None:
        # The span's array job: its status follows its children's, which decide the parent.
        logger.info("array job event noted", job_id=parent.job_id, batch_status=state.status)
        return _finish(services, parent, now)
    index = located.index
    if not 0 <= index < (parent.array_size or 0):
        logger.warning("event for a child outside its array ignored", job_id=parent.job_id, index=index)
        return parent
    child_id = child_job_id(parent.job_id, index)
    child: Job | None = None
    for _ in range(MAX_WRITE_ATTEMPTS):
        stored = services.store.get_job(child_id)
        child = stored or child_template(parent, index)
        if child.batch_job_id and child.batch_job_id != state.batch_job_id:
            logger.warning(
                "event for another batch job ignored", job_id=child_id, batch_job_id=state.batch_job_id
            )
            return child
        reason, warnings, charged = final_outcome(services, child, state)
        transition = apply_batch_event(
            child, state, reason, arrived_at=now, warnings=warnings, charged=charged
        )
        if transition is None:
            break
        log_corrections(transition)
        charge: Charge | None = None
        entry: LedgerEntry | None = None
        most: Decimal | None = None
        if transition.settles:
            current = services.store.get_job(parent.job_id)
            if current is None:
                raise RecordMissing(f"Job {parent.job_id} no longer exists.")
            charge, entry, most = _child_charge(services, current, transition, now)
        try:
            services.store.save_child_event(
                transition, created=stored is None, charge=charge, entry=entry, settled_at_most=most, now=now
            )
        except RecordMissing:
            # The array was deleted or expired meanwhile: a late event is neither applied nor charged.
            logger.warning("event for a gone array ignored", job_id=parent.job_id, child=index)
            return child
        except ConditionFailed:
            logger.debug("child event lost a race; re-reading", job_id=child_id)
            time.sleep(random.uniform(0, 0.02))  # noqa: S311 - jitter, not cryptography
            continue
        child = transition.after
        if charge is not None:
            services.events.count("CreditsCharged", float(charge.credits), amount=True)
            child = replace(child, credits_spent=charge.credits)
        logger.info(
            "array child status", job_id=child_id, status=child.status.value, batch_status=state.status
        )
        if transition.settles:
            _after_child_end(services, parent, child)
        break
    else:
        raise DependencyFailed(f"job {child_id} kept changing; the event will be retried")
    assert child is not None
    _advance_parent(services, parent, child, now)
    return child


def _after_child_end(services: Services, parent: Job, child: Job) -> None:
    """After a child's settlement: discard the outputs of one stopped at its array's cap; when it gave
    its units back (in that settlement), have the account's held jobs, the array's next span among
    them, admitted into them (``dispatch_requests.request_admission``; a failure is left to the next ending or
    the meter's backstop)."""
    if is_credit_constraint_reason(child.status_reason):
        discard_outputs(services, child)
    if not child.holds_quota:
        return
    try:
        request_admission(services, parent.account_id)
    except DependencyFailed:
        logger.exception("admission after a child's end deferred", job_id=parent.job_id)


def _advance_parent(services: Services, parent: Job, child: Job, now: datetime) -> None:
    """After a child's event: settle the same item of the arrays depending on this one per item (a
    final child: ``item_dependencies.item_ended``), stop the array at its cap, start it when a child
    started, end it when every child is final (each an idempotent conditional write, safe to repeat
    on a replay)."""
    fresh = services.store.get_job(parent.job_id) or parent
    if child.is_final and child.array_index is not None and fresh.item_dependents:
        # The same item of each array depending on this one per item goes, or ends (once).
        for ended in item_dependencies.item_ended(services, fresh, child.array_index, child.status, now):
            waits.settle_dependents(services, ended, now)
    stop_at_cap(services, fresh, now)
    if fresh.status == JobStatus.QUEUED and (
        child.started_at is not None or child.status in (JobStatus.STARTING, JobStatus.RUNNING)
    ):
        # An array with children still held keeps its quota reason while it runs.
        held = fresh.dispatch_state == DispatchState.HELD
        services.store.start_array(fresh.job_id, child.started_at or now, now, keep_reason=held)
        fresh = services.store.get_job(parent.job_id) or fresh
    _finish(services, fresh, now)


def _finish(services: Services, parent: Job, now: datetime) -> Job:
    """Settle the array once every child is final (``array_results.finish_array``), then the jobs
    waiting for it (``waits.settle_dependents``: again on a replay, which heals a cut-short one)."""
    finished = finish_array(services, parent, now)
    waits.settle_dependents(services, finished, now)
    return finished


def stop_at_cap(services: Services, parent: Job, now: datetime) -> None:
    """Terminate an array whose settled children's charges reached its ``creditConstraint`` (its
    other children would run for nothing: no charge is left under the cap). The meter does the same
    for running children's spend; this stops it without waiting for its tick."""
    cap = parent.credit_constraint
    if cap is None or parent.is_final or parent.credits_settled < cap or parent.termination_requested_at:
        return
    try:
        terminate(services, parent, credit_constraint_reason(cap), now)
    except DependencyFailed:
        # The meter's next tick sends it again (the claim was released).
        logger.exception("array at its cap not terminated yet", job_id=parent.job_id)
