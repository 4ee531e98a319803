"""Array jobs for their owner: submit one, page its children (``functions.domain.arrays``).

Submit stores the items once (``inputs/<parent>/items.jsonl`` and its fixed-width offsets index, which
a child reads with two ranged GETs) and writes the ``Array`` parent (every child Queued) held for its
account's quota, without calling AWS Batch. Its children are admitted span by span into the quota's
free room and each span is submitted by the dispatcher (``functions.logic.array_admission``): an array
job of ``arrayProperties.size`` = the span's items, or a plain job for a span of one item, whose
container environment carries its global offset (``REMOTE_BATCH_ARRAY_OFFSET``). Children's records
are written by their first event (``functions.logic.array_events``), not here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime

from aws_lambda_powertools import Logger

from functions.domain.arrays import (
    ITEMS_INDEX,
    ITEMS_OBJECT,
    MAX_INLINE_ITEMS,
    child_job_id,
    child_template,
    encode_items,
    queued_spans,
    span_ids,
)
from functions.domain.dependencies import (
    MAX_PER_ITEM_SIZE,
    DependencyMode,
    check_per_item_parent,
    per_item_waiting_reason,
)
from functions.domain.errors import DependencyFailed, ValidationFailed
from functions.domain.jobs import DispatchState, Job, JobType
from functions.domain.quotas import Demand, QuotaLimits
from functions.domain.status import JobStatus
from functions.logic import item_dependencies, quotas, waits
from functions.logic.batch_submission import input_key
from functions.logic.dispatch_requests import enqueue, request_admission
from functions.logic.submission import (
    JobRequest,
    PreparedSubmission,
    get_owned_job,
    new_job,
    prepare_submission,
    submit_job,
    with_inline_environment,
)
from functions.logic.uploads import uploaded_items
from functions.ports import Services

logger = Logger(child=True)

#: Most containers an array's items run on (``parallelism``): AWS Batch's largest array job.
MAX_PARALLELISM = 10_000

#: Children read per ``GET /jobs/{jobId}/children`` request at most (10 consistent BatchGetItem calls).
MAX_CHILDREN_SCANNED = 1_000


def submit(services: Services, account_id: str, request: JobRequest, now: datetime) -> Job:
    """``POST /jobs``: an array job when the request has items (``submit_array``), else a single
    job (``submission.submit_job``). Raises what those raise, and ``ValidationFailed``
    (``field="parallelism"``) for ``parallelism`` without items."""
    if request.is_array:
        return submit_array(services, account_id, request, now)
    if request.parallelism is not None:
        raise ValidationFailed(
            "parallelism is an array job's: give arrayItems or arrayItemsKey with it.", field="parallelism"
        )
    return submit_job(services, account_id, request, now)


def submit_array(services: Services, account_id: str, request: JobRequest, now: datetime) -> Job:
    """``POST /jobs`` with ``arrayItems`` (1..10,000 inline) or ``arrayItemsKey`` (an uploaded JSON
    Lines object of up to 100,000 items).

    Stores the items and writes the parent held for its account's quota, every child Queued, without
    calling AWS Batch: its children are admitted span by span into the quota's free room and the
    dispatcher submits each span (``functions.logic.array_admission``). An array on a dedicated compute
    takes no quota: all its spans are queued for the dispatcher at once.

    Returns
    -------
    Job
        The ``Array`` parent, Queued, every child counted Queued; held with ``statusReason``
        ``Waiting for quota: ...`` when no child fits yet; waiting whole for its environment's build
        (``Building environment ml ...``, ``functions.logic.waits``) while it builds. Without a
        dispatch queue (the admission and SubmitJob then run in this call), as stored after them.

    Raises
    ------
    ValidationFailed
        As ``prepare_submission``; no items or too many inline (``field="arrayItems"``); a bad
        ``arrayItemsKey`` (``uploads.uploaded_items``: the message names the first bad line).
    QuotaExceeded
        One child alone needs more than the account's quota for its family and zone (or its total);
        nothing is written.
    InsufficientCredits
        The account's balance is not positive.
    DependencyFailed
        S3 or DynamoDB failed; nothing is left behind.
    """
    prepared = prepare_submission(services, account_id, request)
    items, items_key = request.array_items, request.array_items_key
    if items_key is not None:
        items = uploaded_items(services, account_id, items_key, prepared.zone)
    inline_ok = items_key is not None or (items is not None and 1 <= len(items) <= MAX_INLINE_ITEMS)
    if items is None or not inline_ok:
        count = 0 if items is None else len(items)
        raise ValidationFailed(
            f"arrayItems takes 1..{MAX_INLINE_ITEMS} items, not {count}; upload more as JSON Lines "
            "and give arrayItemsKey.",
            field="arrayItems",
        )
    size = len(items)
    zone = prepared.zone
    if prepared.per_item_size is not None:
        _check_per_item(request, prepared, size)
    containers = _containers(request, prepared, size)
    quota = None
    if prepared.compute is None:
        # One child's demand: an array is admitted a span at a time, so only a child that could never
        # fit is refused.
        quota = quotas.check_submit(services, account_id, prepared.machine, zone)
    prepared = with_inline_environment(services, account_id, prepared, now)
    parent = replace(
        new_job(account_id, request, prepared, now, array_size=size), array_containers=containers
    )
    zone_services = services.zones[zone]
    inputs = f"inputs/{parent.job_id}/"
    items_data, index_data = encode_items(items)
    document = {
        **prepared.document,
        "arrayItemsKey": inputs + ITEMS_OBJECT,
        "arrayIndexKey": inputs + ITEMS_INDEX,
        "arraySize": size,
    }
    try:
        zone_services.blobs.put(inputs + ITEMS_OBJECT, items_data, "application/jsonl")
        zone_services.blobs.put(inputs + ITEMS_INDEX, index_data, "application/octet-stream")
        zone_services.blobs.put(input_key(parent.job_id), json.dumps(document).encode(), "application/json")
        parent = _store_array(services, parent, prepared, quota, now)
    except Exception:
        zone_services.blobs.delete_prefix(inputs)
        raise
    services.events.count("JobsSubmitted")
    logger.info("array accepted", job_id=parent.job_id, size=size, compute=parent.compute)
    _go_on(services, parent, prepared, quota, now)
    if not services.dispatch.inline:
        return parent
    # Without a queue the admission and SubmitJob ran here: read what they wrote.
    return services.store.get_job(parent.job_id) or parent


def _store_array(
    services: Services,
    parent: Job,
    prepared: PreparedSubmission,
    quota: tuple[Demand, QuotaLimits] | None,
    now: datetime,
) -> Job:
    """Write the new array ``parent``: held with nothing counted (depending on another per item),
    waiting (its environment builds), admitted whole (on a dedicated compute: ``quota`` None) or held
    for quota (``quotas.hold``). Returns it as written."""
    size = parent.array_size or 0
    if prepared.per_item_size is not None:
        # Held with nothing counted: its items are released one by one (``item_dependencies``).
        held = replace(
            parent,
            dispatch_state=DispatchState.HELD,
            status_reason=per_item_waiting_reason(parent.per_item_parent or "", 0, size),
        )
        services.store.create_job(held)
        return held
    if prepared.waiting_for:
        # Its environment builds: the whole array waits, holding nothing, until it is released
        # into the quota's admission (``waits``) or ends.
        return waits.submit_waiting(services, parent, prepared.waiting_reason or "Waiting", now)
    if quota is None:
        spans = queued_spans(parent, services.array_span_size)
        admitted = replace(
            parent,
            dispatch_state=DispatchState.ADMITTED,
            array_admitted=parent.array_children,
            array_queue=spans,
        )
        services.store.create_job(admitted)
        return admitted
    held, _ = quotas.hold(services, parent, *quota)
    return held


def _go_on(
    services: Services,
    parent: Job,
    prepared: PreparedSubmission,
    quota: tuple[Demand, QuotaLimits] | None,
    now: datetime,
) -> None:
    """After the array's write: settle the items of one depending per item whose parent items ended
    already, send a compute's spans, or ask for the account's admission when there is room."""
    try:
        if prepared.per_item_size is not None:
            # Items whose parent items ended before the mark (and all of a final parent) settle now.
            for ended in item_dependencies.reconcile(services, parent, now):
                waits.settle_dependents(services, ended, now)
        # A waiting array goes on when its prerequisites' reports (or its own submit) release it.
        elif quota is None and not prepared.waiting_for:
            enqueue(services, span_ids(parent))
        elif (
            quota is not None
            and not prepared.waiting_for
            and quotas.room_after_hold(services, parent.account_id, *quota)
        ):
            request_admission(services, parent.account_id)
    except DependencyFailed:
        # Stored and held (or queued): the account's next release or submit, or the meter's backstop
        # (``array_dispatch.nudge_array``), goes on with it.
        logger.exception("array admission deferred", job_id=parent.job_id)


def _containers(request: JobRequest, prepared: PreparedSubmission, size: int) -> int | None:
    """The containers an array of ``size`` items runs on: ``parallelism``, never more than its items;
    None without it (a container per item).

    Raises ``ValidationFailed`` (``field="parallelism"``): not in 1..``MAX_PARALLELISM``, or given
    to an array depending on another per item (each of its items goes alone as its parent's ends).
    """
    if request.parallelism is None:
        return None
    if not 1 <= request.parallelism <= MAX_PARALLELISM:
        raise ValidationFailed(
            f"parallelism takes 1..{MAX_PARALLELISM} containers, not {request.parallelism}.",
            field="parallelism",
        )
    if prepared.per_item_size is not None:
        raise ValidationFailed(
            "parallelism cannot be given to an array that depends on another per item.", field="parallelism"
        )
    return min(request.parallelism, size)


def _check_per_item(request: JobRequest, prepared: PreparedSubmission, size: int) -> None:
    """An array depending on another per item: of its parent's size, at most ``MAX_PER_ITEM_SIZE``
    items (each runs as its own span, whose Batch id the array keeps), through the quota (not on a
    dedicated compute) and with its environment ready. Raises ``ValidationFailed``
    (``dependsOn[i].mode``)."""
    index = next(i for i, d in enumerate(request.depends_on) if d.mode is DependencyMode.PER_ITEM)
    dependency = request.depends_on[index]
    field = f"dependsOn[{index}].mode"
    check_per_item_parent(index, dependency.job_id, prepared.per_item_size, size)
    if size > MAX_PER_ITEM_SIZE:
        raise ValidationFailed(
            f"An array depending per item has at most {MAX_PER_ITEM_SIZE} items, not {size}.", field=field
        )
    if prepared.compute is not None:
        raise ValidationFailed("mode perItem is not available on a dedicated compute.", field=field)
    if prepared.waiting_for:
        raise ValidationFailed(
            "mode perItem needs the array's environment Ready; submit once its build is done.", field=field
        )


@dataclass(frozen=True, slots=True)
class ChildrenPage:
    """A page of an array's children in index order, and the token of the next page (or None)."""

    jobs: list[Job]
    next_token: str | None


def _decode_index_token(token: str, size: int) -> int:
    if not (token.isascii() and token.isdigit()) or not 0 < int(token) < size:
        raise ValidationFailed("nextToken is not one this API issued for this job.", field="nextToken")
    return int(token)


def list_children(
    services: Services,
    account_id: str,
    job_id: str,
    *,
    status: JobStatus | None,
    limit: int,
    next_token: str | None,
) -> ChildrenPage:
    """``GET /jobs/{jobId}/children``: the array's children in ``arrayIndex`` order, a child that
    had no event yet shown Queued. With ``status``, only those; a page then reads at most
    ``MAX_CHILDREN_SCANNED`` children, so it may be short (even empty) while its token is set.

    Raises ``NotFound`` (not this account's job), ``ValidationFailed`` (a token not from here).
    A job that is no array has no children.
    """
    parent = get_owned_job(services, account_id, job_id)
    size = parent.array_size or 0
    if parent.type != JobType.ARRAY:
        return ChildrenPage([], None)
    start = _decode_index_token(next_token, size) if next_token else 0
    jobs: list[Job] = []
    position = start
    while position < size and len(jobs) < limit and position - start < MAX_CHILDREN_SCANNED:
        chunk = range(position, min(size, position + min(100, limit - len(jobs) if status is None else 100)))
        stored = {c.array_index: c for c in services.store.get_jobs([child_job_id(job_id, i) for i in chunk])}
        for index in chunk:
            child = stored.get(index) or child_template(parent, index)
            position = index + 1
            if status is None or child.status == status:
                jobs.append(child)
                if len(jobs) == limit:
                    break
    return ChildrenPage(jobs, str(position) if position < size else None)
