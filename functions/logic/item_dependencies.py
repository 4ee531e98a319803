"""``dependsOn`` ``mode`` ``perItem`` (issue 25, AWS Batch's ``N_TO_N``): between two arrays of one
size, child item i goes once parent item i succeeded, each pair on its own.

The child array is written ``Held`` with nothing counted (no ``held#`` item, no units): it takes no
quota until items are released. Its parent lists it in ``itemDependents`` (the mark at submit), so
each parent item's end, found in ``array_events``, settles item i of each child (``item_ended``): one
read of the child and one conditional write, whatever the array's size:

- parent item i ``Succeeded``: i is appended to the child's ``arrayReleased`` and one child's units
  are added to its ``held#`` item and counted queued (``JobRepository.release_item``, conditional on i
  being neither released nor ended, so a replayed, duplicated or reversed event releases it once),
  then the account's admission is asked for: the admission takes the released items in release order,
  each a span of one at its own index (``array_admission``; a one-item span runs as a plain job);
- parent item i ``Terminated``: child item i ends ``Terminated``, free, never having held anything
  (``JobRepository.end_items``: ``arrayEndedItems``, the counts ``Queued`` → ``Terminated``), its reason
  ``Dependency job-X:i ended Terminated; this item needed Succeeded``
  (``domain.dependencies.item_unmet_reason``, shown by ``arrays.withdrawn_reason``).

``reconcile`` brings a child up to date with its parent as stored: after the child's write at its
submit (parent items that ended before its mark), at the parent array's end (its withdrawn items, which
have no events of their own, and any event a crash cut short: ``waits.settle_dependents``) and at the
meter's backstop. It reads the parent and, only when some of its items are final, their records (one
BatchGetItem per 100 items not settled on the child yet). Either the event's read of the parent, after
the item's final write, sees the mark, or the child's reconcile, after its own write, sees the item.

An item ended so ends the same item of the arrays that depend on its array per item, down the chain.
Each function returns the arrays that ended here (their last items ended): the caller settles their
own dependents (``waits.settle_dependents``, which imports this module).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from aws_lambda_powertools import Logger

from functions.domain.arrays import child_job_id, withdrawn_reason
from functions.domain.dependencies import gone_reason, per_item_waiting_reason
from functions.domain.errors import DependencyFailed, RecordMissing
from functions.domain.jobs import DispatchState, Job
from functions.domain.status import JobStatus
from functions.logic.array_results import finish_array
from functions.logic.dispatch_requests import request_admission
from functions.logic.endings import withdraw_unsent
from functions.ports import Services

logger = Logger(child=True)

MAX_WRITE_ATTEMPTS = 25
#: Most keys of one BatchGetItem.
READ_BATCH = 100


def takes_items(job: Job) -> bool:
    """True while the ``perItem`` array ``job`` takes releases and endings of items (``Held``)."""
    return job.per_item_parent is not None and job.dispatch_state is DispatchState.HELD and not job.is_final


def item_ended(services: Services, parent: Job, index: int, status: JobStatus, now: datetime) -> list[Job]:
    """Parent array ``parent``'s item ``index`` ended ``status`` (final): settle item ``index`` of each
    array listed in its ``itemDependents``. One child's failure is logged and the others go on (the
    parent's end or the meter's backstop reconciles it). Returns the child arrays that ended here."""
    ended: list[Job] = []
    for child_id in parent.item_dependents:
        try:
            child = services.store.get_job(child_id)
            if child is None or child.per_item_parent != parent.job_id:
                continue
            ended += _settle(services, child, {index: status}, now)
        except (DependencyFailed, RecordMissing):
            logger.exception("child item not settled", job_id=parent.job_id, child_id=child_id, index=index)
    return ended


def parent_ended(services: Services, parent: Job, now: datetime) -> list[Job]:
    """The array ``parent`` is final: reconcile each array of its ``itemDependents`` (its items never
    released end now). Returns the child arrays that ended here."""
    ended: list[Job] = []
    for child_id in parent.item_dependents:
        try:
            child = services.store.get_job(child_id)
            if child is not None and child.per_item_parent == parent.job_id:
                ended += reconcile(services, child, now, parent=parent)
        except (DependencyFailed, RecordMissing):
            logger.exception("child array not reconciled", job_id=parent.job_id, child_id=child_id)
    return ended


def reconcile(services: Services, child: Job, now: datetime, *, parent: Job | None = None) -> list[Job]:
    """Settle every item of the ``perItem`` array ``child`` whose parent item is final and that is
    neither released nor ended yet (see the module's docstring); ``parent`` as read, else read here. A
    parent gone (deleted, expired) ends the child's unsent items with ``gone_reason``. Returns
    ``[child]`` when it ended here, else ``[]``. Raises ``DependencyFailed``."""
    parent_id = child.per_item_parent
    if parent_id is None or not takes_items(child):
        return []
    if parent is None:
        parent = services.store.get_job(parent_id)
    if parent is None:
        withdrawn = withdraw_unsent(services, child, gone_reason(parent_id), now)
        return [withdrawn] if withdrawn.is_final else []
    settled = set(child.array_released) | child.array_ended_items
    missing = [i for i in range(child.array_size or 0) if i not in settled]
    statuses: dict[int, JobStatus] = {}
    for index in missing:
        if withdrawn_reason(parent, index) is not None:
            statuses[index] = JobStatus.TERMINATED
    counts = parent.child_status_counts or {}
    if any(counts.get(s.value, 0) for s in (JobStatus.SUCCEEDED, JobStatus.TERMINATED)):
        to_read = [i for i in missing if i not in statuses]
        for start in range(0, len(to_read), READ_BATCH):
            ids = [child_job_id(parent_id, i) for i in to_read[start : start + READ_BATCH]]
            for item in services.store.get_jobs(ids):
                if item.is_final and item.array_index is not None:
                    statuses[item.array_index] = item.status
    if parent.is_final:
        # Every item of a final array is final: one with no record never ran.
        for index in missing:
            statuses.setdefault(index, JobStatus.TERMINATED)
    return _settle(services, child, statuses, now)


def _settle(services: Services, child: Job, statuses: dict[int, JobStatus], now: datetime) -> list[Job]:
    """Release the items of ``child`` whose parent items succeeded and end those whose parent items
    did not (``statuses``: index → the parent item's final status), each once; ask for an admission
    after a release; finish the array when this ended its last items. Returns ``[child]`` (as stored
    after) when it ended here."""
    store = services.store
    settled = set(child.array_released) | child.array_ended_items
    succeeded = sorted(i for i, s in statuses.items() if s is JobStatus.SUCCEEDED and i not in settled)
    failed = sorted(i for i, s in statuses.items() if s is not JobStatus.SUCCEEDED and i not in settled)
    released = 0
    for index in succeeded:
        reason = per_item_waiting_reason(
            child.per_item_parent or "", len(child.array_released) + released + 1, child.array_size or 0
        )
        if store.release_item(child, index, reason):
            released += 1
    if released:
        logger.info("array items released", job_id=child.job_id, items=released)
        try:
            request_admission(services, child.account_id)
        except DependencyFailed:
            logger.exception("admission after an item's release deferred", job_id=child.job_id)
    if not failed:
        return []
    return _end_items(services, child, failed, now)


def _end_items(services: Services, child: Job, indices: Iterable[int], now: datetime) -> list[Job]:
    """End items ``indices`` of the array ``child`` (as read; those not settled meanwhile), re-reading
    it when a concurrent write moved it; finish it when nothing of it is left."""
    store = services.store
    child_id = child.job_id
    wanted = set(indices)
    current: Job | None = child
    for _ in range(MAX_WRITE_ATTEMPTS):
        if current is None or not takes_items(current):
            return []
        todo = sorted(wanted - set(current.array_released) - current.array_ended_items)
        if not todo:
            return []
        if store.end_items(current, todo, now):
            logger.info("array items ended by their dependency", job_id=child_id, items=len(todo))
            break
        current = store.get_job(child_id)
    else:
        raise DependencyFailed(f"job {child_id} kept changing; its items are settled later")
    fresh = store.get_job(child_id)
    if fresh is None:
        return []
    ended: list[Job] = []
    # Its own perItem children's items end with these, down the chain.
    for grandchild_id in fresh.item_dependents:
        grandchild = store.get_job(grandchild_id)
        if grandchild is not None and grandchild.per_item_parent == child_id:
            ended += _settle(services, grandchild, dict.fromkeys(todo, JobStatus.TERMINATED), now)
    finished = finish_array(services, fresh, now)
    return [finished, *ended] if finished.is_final else ended
