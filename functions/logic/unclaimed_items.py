"""The items of an array whose containers take many items that no container claimed.

Such an array's items get a record only when a container that ran them ended
(``container_events.settle_container_end``). Once every container is settled (ended, or withdrawn
before AWS Batch had it: an abort, the array's cap, a span AWS Batch refused, all recorded in
``Job.array_containers_settled``), an item with no record was claimed by none and never will be:
``end_unclaimed`` ends it ``Terminated``, free, with the array's termination reason, else
``NO_CONTAINER_LEFT``, so that ``array_results.finish_array`` completes.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from aws_lambda_powertools import Logger

from functions.domain.arrays import child_job_id, child_template
from functions.domain.credits import ZERO
from functions.domain.errors import ConditionFailed, DependencyFailed, RecordMissing
from functions.domain.item_reports import MAX_CONTAINER_ITEMS
from functions.domain.jobs import Job
from functions.domain.status import JobStatus
from functions.ports import Services

logger = Logger(child=True)

#: Why an item no container claimed ends once every container of its array ended.
NO_CONTAINER_LEFT = "Every container of the array ended before one claimed this item"
MAX_WRITE_ATTEMPTS = 5


def end_unclaimed(services: Services, parent: Job, now: datetime) -> bool:
    """Once every container of ``parent`` (its ``array_containers``) is settled, end the items none
    of them claimed (no record: still counted ``Queued``) ``Terminated``, free, with the array's
    ``termination_reason`` (an abort, its cap) or ``NO_CONTAINER_LEFT``.

    Each record is put only if absent, with the parent's counts moved by it, in transactions of up
    to ``MAX_CONTAINER_ITEMS`` (``JobRepository.save_container_items``, no container, no charge): a
    replay changes nothing; a transaction that lost a race (an item stored meanwhile) is read again.
    Nothing ends while a container may still claim an item. DynamoDB requests: one batched read per
    100 items, one transaction per 90 unclaimed ones.

    Returns True when it wrote any.

    Raises ``DependencyFailed`` (DynamoDB failed, or the items kept changing).
    """
    containers = parent.array_containers
    if containers is None or parent.is_final or len(parent.array_containers_settled) < containers:
        return False
    if (parent.child_status_counts or {}).get(JobStatus.QUEUED.value, 0) == 0:
        return False
    size = parent.array_size or 0
    reason = parent.termination_reason or NO_CONTAINER_LEFT
    wrote = False
    for _ in range(MAX_WRITE_ATTEMPTS):
        ids = [child_job_id(parent.job_id, i) for i in range(size)]
        stored = {c.array_index for c in services.store.get_jobs(ids)}
        unclaimed = [_ended(parent, index, reason, now) for index in range(size) if index not in stored]
        try:
            for first in range(0, len(unclaimed), MAX_CONTAINER_ITEMS):
                services.store.save_container_items(
                    parent.job_id,
                    unclaimed[first : first + MAX_CONTAINER_ITEMS],
                    container=None,
                    credits=ZERO,
                    entry=None,
                    release=None,
                    settled_at_most=None,
                    now=now,
                )
                wrote = True
        except RecordMissing:
            return wrote
        except ConditionFailed:
            continue  # another writer stored some of them: read again
        logger.info("unclaimed items ended", job_id=parent.job_id, items=len(unclaimed), reason=reason)
        return wrote or bool(unclaimed)
    raise DependencyFailed(f"items of job {parent.job_id} kept changing; retried")


def _ended(parent: Job, index: int, reason: str, now: datetime) -> Job:
    """The record of item ``index`` that no container claimed: ``Terminated`` with ``reason``, free."""
    return replace(
        child_template(parent, index),
        status=JobStatus.TERMINATED,
        status_reason=reason,
        status_history=(JobStatus.QUEUED, JobStatus.TERMINATED),
        completed_at=now,
    )
