"""An array's end: once every child is final its parent is settled (``finish_array``) and its
``result.json`` assembled from the children's results (JSON only, never unpickled).

``finish_array`` is idempotent and safe to run concurrently (its write is conditional on the parent not
being final and on the ``creditsSettled`` it was computed with), so every path that may end an array's
last child calls it: a child's event (``array_events``), a withdrawal of the children AWS Batch never
had (``endings.withdraw_unsent``) and the meter's reconciliation.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime
from typing import Any

from aws_lambda_powertools import Logger

from functions.domain.arrays import all_final, array_outcome, child_job_id, child_template, result_document
from functions.domain.errors import PayloadTooLarge
from functions.domain.jobs import Job, JobType, is_credit_constraint_reason
from functions.domain.outcomes import OutcomeUnreadable
from functions.domain.status import JobStatus, statuses_between
from functions.logic.job_outcomes import output_key, read_outcome
from functions.logic.notifying import deliver_due_notifications
from functions.ports import Services

logger = Logger(child=True)

#: Children's outcomes read at once while the parent's result is assembled.
RESULT_READERS = 16
#: A child's result document bigger than this is not inlined in the array's result (null, and its
#: repr says where to find it): the array's document must stay one readable object. The worker
#: inlines a result in ``outcome.json`` up to the same size (``worker.layout``).
MAX_CHILD_RESULT_BYTES = 1024 * 1024
RESULT_DOCUMENT = "result.json"


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
    # An array whose containers take many items withdraws containers: its items all have records.
    withdrawn_items = () if parent.array_containers is not None else parent.array_withdrawn
    for withdrawn in withdrawn_items:
        for index in range(withdrawn.offset, withdrawn.offset + withdrawn.count):
            stored.setdefault(index, child_template(parent, index))
    for index in parent.array_ended_items:
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
