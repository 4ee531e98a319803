"""Array jobs' events: a child's ``Batch Job State Change`` moves the child and its parent's roll-up.

AWS Batch sends one event stream per child (``jobId`` ``<span id>:<index>``, ``arrayProperties.index``)
and one for each span's array job (``arrayProperties.size``, ``statusSummary``), at least once and in
any order (``functions.domain.arrays``). A child's record is written at its first event, in the same
``TransactWriteItems`` as its parent's ``childStatusCounts`` (and, when it ends, its charge and the
parent's ``creditsSettled``), conditional on the child's event position: a replayed or late child
event changes nothing. The span's own events never decide anything. The parent becomes Running when
a child starts, and final once every child is: ``finish_array`` settles that, idempotently, after
every child event (and the meter's reconciliation), so a crash between the two is healed by the next.
"""

from __future__ import annotations

import json
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from aws_lambda_powertools import Logger

from functions.domain.arrays import (
    all_final,
    array_outcome,
    child_job_id,
    child_template,
    locate_array_event,
    remaining_cap,
    result_document,
)
from functions.domain.credits import Charge
from functions.domain.errors import ConditionFailed, DependencyFailed, PayloadTooLarge, RecordMissing
from functions.domain.jobs import (
    BatchJobState,
    DispatchState,
    Job,
    JobType,
    LedgerEntry,
    Transition,
    apply_batch_event,
    credit_constraint_reason,
    is_credit_constraint_reason,
)
from functions.domain.outcomes import OutcomeUnreadable
from functions.domain.status import JobStatus, statuses_between
from functions.logic.job_outcomes import (
    discard_outputs,
    final_charge,
    final_outcome,
    log_corrections,
    output_key,
    read_outcome,
)
from functions.logic.notifying import deliver_due_notifications
from functions.logic.submission import terminate
from functions.ports import Services

logger = Logger(child=True)

MAX_WRITE_ATTEMPTS = 25
#: Children's outcomes read at once while the parent's result is assembled.
RESULT_READERS = 16
#: A child's result document bigger than this is not inlined in the array's result (null, and its
#: repr says where to find it): the array's document must stay one readable object. The worker
#: inlines a result in ``outcome.json`` up to the same size (``worker.layout``).
MAX_CHILD_RESULT_BYTES = 1024 * 1024
RESULT_DOCUMENT = "result.json"


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
        return finish_array(services, parent, now)
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
    them, admitted into them (``dispatch.request_admission``; a failure is left to the next ending or
    the meter's backstop)."""
    from functions.logic.dispatch import request_admission  # dispatch imports submission, as this does

    if is_credit_constraint_reason(child.status_reason):
        discard_outputs(services, child)
    if not child.holds_quota:
        return
    try:
        request_admission(services, parent.account_id)
    except DependencyFailed:
        logger.exception("admission after a child's end deferred", job_id=parent.job_id)


def _advance_parent(services: Services, parent: Job, child: Job, now: datetime) -> None:
    """After a child's event: stop the array at its cap, start it when a child started, end it when
    every child is final (each an idempotent conditional write, safe to repeat on a replay)."""
    fresh = services.store.get_job(parent.job_id) or parent
    _stop_at_cap(services, fresh, now)
    if fresh.status == JobStatus.QUEUED and (
        child.started_at is not None or child.status in (JobStatus.STARTING, JobStatus.RUNNING)
    ):
        # An array with children still held keeps its quota reason while it runs.
        held = fresh.dispatch_state == DispatchState.HELD
        services.store.start_array(fresh.job_id, child.started_at or now, now, keep_reason=held)
        fresh = services.store.get_job(parent.job_id) or fresh
    finish_array(services, fresh, now)


def _stop_at_cap(services: Services, parent: Job, now: datetime) -> None:
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


def finish_array(services: Services, parent: Job, now: datetime) -> Job:
    """Settle the parent once every child is final (no-op before that, or when it is final): its
    status (``arrays.array_outcome``), its result document, ``creditsSpent`` = the children's sum,
    then what it owes in notifications (one ``JobCompleted`` for the array).

    Safe to call any number of times, concurrently: the final write is conditional on the parent not
    being final and on the ``creditsSettled`` it was computed with.
    """
    counts = parent.child_status_counts or {}
    size = parent.array_size or 0
    if parent.type != JobType.ARRAY or parent.is_final or not all_final(counts, size):
        deliver_due_notifications(services, parent, now, raise_on_failure=False)
        return parent
    children = _children(services, parent)
    terminated = [c for c in children if c.status == JobStatus.TERMINATED]
    first = (terminated[0].array_index or 0, terminated[0].status_reason) if terminated else None
    outcome = array_outcome(size, counts, first, parent.termination_reason)
    if outcome is None:
        return parent
    if not (outcome.reason and is_credit_constraint_reason(outcome.reason)):
        _store_result(services, parent, children)
    ran = [c for c in children if c.started_at is not None]
    ended = [c.completed_at for c in children if c.completed_at is not None]
    after = replace(
        parent,
        status=outcome.status,
        status_reason=outcome.reason,
        status_history=parent.status_history
        + tuple(statuses_between(parent.status, outcome.status, ever_ran=bool(ran))),
        started_at=parent.started_at or (min(c.started_at for c in ran if c.started_at) if ran else None),
        completed_at=max(ended) if ended else now,
    )
    if services.store.finish_array(after, now):
        logger.info(
            "array finished",
            job_id=parent.job_id,
            status=outcome.status.value,
            credits=str(parent.credits_settled),
            terminated=len(terminated),
        )
    fresh = services.store.get_job(parent.job_id) or after
    deliver_due_notifications(services, fresh, now, raise_on_failure=False)
    return fresh


def _child_result(services: Services, child: Job) -> tuple[Any, str]:
    """(result, repr) of a Succeeded child from its ``outcome.json`` (or, in the previous layout, its
    ``result.json``): JSON only, never unpickled. A result the worker put in an object of its own is
    over ``MAX_CHILD_RESULT_BYTES`` (``worker.layout``): not read, its repr says where it is."""
    blobs = services.zones[child.geo_zone].blobs
    too_large = (
        None,
        f"<result of index {child.array_index} too large to inline: GET /jobs/{child.job_id}/result>",
    )
    try:
        outcome = read_outcome(blobs, child.job_id)
        if outcome is not None:
            return (
                too_large
                if outcome.result_object is not None
                else (outcome.result, outcome.result_repr or "None")
            )
        raw = blobs.get(output_key(child.job_id, RESULT_DOCUMENT), MAX_CHILD_RESULT_BYTES)
    except (OutcomeUnreadable, PayloadTooLarge):
        return too_large
    try:
        document = json.loads(raw) if raw is not None else None
    except ValueError:
        document = None
    if not isinstance(document, dict):
        return None, "None"
    return document.get("result"), str(document.get("resultRepr") or "None")


def store_array_result(services: Services, parent: Job) -> None:
    """Assemble an array's ``result.json`` again from its children (when its first write was lost)."""
    _store_result(services, parent, _children(services, parent))


def _children(services: Services, parent: Job) -> list[Job]:
    """The parent's children in index order: their records, and for the children withdrawn before AWS
    Batch had them (no records: ``Job.array_withdrawn``) their Terminated ``child_template``."""
    size = parent.array_size or 0
    stored = {
        c.array_index: c
        for c in services.store.get_jobs([child_job_id(parent.job_id, i) for i in range(size)])
    }
    for withdrawn in parent.array_withdrawn:
        for index in range(withdrawn.offset, withdrawn.offset + withdrawn.count):
            stored.setdefault(index, child_template(parent, index))
    return [stored[i] for i in sorted(i for i in stored if i is not None)]


def _store_result(services: Services, parent: Job, children: list[Job]) -> None:
    """Assemble the array's ``result.json`` once: every child's result in index order (a child that
    did not succeed: null, and its reason in ``errors``)."""
    succeeded = [c for c in children if c.status == JobStatus.SUCCEEDED]
    with ThreadPoolExecutor(max_workers=RESULT_READERS) as pool:
        read = dict(
            zip(
                (c.array_index for c in succeeded),
                pool.map(lambda c: _child_result(services, c), succeeded),
                strict=True,
            )
        )
    results: list[Any] = []
    reprs: list[str] = []
    errors: list[tuple[int, str]] = []
    for child in children:
        index = child.array_index or 0
        if index in read:
            result, text = read[index]
        else:
            result, text = None, "None"
            errors.append((index, child.status_reason or f"Child {index} ended {child.status.value}"))
        results.append(result)
        reprs.append(text)
    body = result_document(results, reprs, errors)
    services.zones[parent.geo_zone].blobs.put(
        output_key(parent.job_id, RESULT_DOCUMENT), body, "application/json"
    )
