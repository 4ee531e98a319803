"""The job status machine and the AWS Batch status mapping (docs/architecture.md "Status machine").

AWS Batch → service: SUBMITTED, PENDING, RUNNABLE → Queued; STARTING → Starting; RUNNING → Running;
SUCCEEDED → Succeeded; FAILED → Terminated (the AWS Batch job-states documentation lists the Batch
statuses). EventBridge delivers at least once and in no guaranteed order, so an event is applied only
when it moves the job forward. "Forward" is ordered by (attempt count, Batch status rank): a retry
legitimately moves RUNNING back to RUNNABLE with a longer ``attempts`` list. Nothing leaves a final status.
"""

from __future__ import annotations

from enum import StrEnum


class JobStatus(StrEnum):
    """A job's status as the API shows it."""

    QUEUED = "Queued"
    STARTING = "Starting"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    TERMINATED = "Terminated"

    @property
    def is_final(self) -> bool:
        """True for Succeeded and Terminated: no later event moves a job out of them."""
        return self in FINAL_STATUSES

    @property
    def rank(self) -> int:
        """Position in Queued < Starting < Running < final."""
        return _STATUS_RANK[self]


FINAL_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.TERMINATED})
_STATUS_RANK = {
    JobStatus.QUEUED: 0,
    JobStatus.STARTING: 1,
    JobStatus.RUNNING: 2,
    JobStatus.SUCCEEDED: 3,
    JobStatus.TERMINATED: 3,
}

# AWS Batch job statuses, in the order a job attempt goes through them.
BATCH_STATUS_RANK: dict[str, int] = {
    "SUBMITTED": 0,
    "PENDING": 1,
    "RUNNABLE": 2,
    "STARTING": 3,
    "RUNNING": 4,
    "SUCCEEDED": 5,
    "FAILED": 5,
}

# The AWS Batch statuses that end a job (its charge is settled on them).
FINAL_BATCH_STATUSES = ("SUCCEEDED", "FAILED")

BATCH_TO_JOB_STATUS: dict[str, JobStatus] = {
    "SUBMITTED": JobStatus.QUEUED,
    "PENDING": JobStatus.QUEUED,
    "RUNNABLE": JobStatus.QUEUED,
    "STARTING": JobStatus.STARTING,
    "RUNNING": JobStatus.RUNNING,
    "SUCCEEDED": JobStatus.SUCCEEDED,
    "FAILED": JobStatus.TERMINATED,
}

# Statuses in the sparse "active" index the meter reads.
METERED_STATUSES = frozenset({JobStatus.STARTING, JobStatus.RUNNING})


def is_known_batch_status(batch_status: str) -> bool:
    """True when ``batch_status`` is one of the seven AWS Batch job statuses."""
    return batch_status in BATCH_STATUS_RANK


def event_position(attempt_count: int, batch_status: str) -> int:
    """A sortable position of a Batch event in its job's life: (attempt count, status rank) as one int.

    Raises
    ------
    KeyError
        For an unknown Batch status (callers check ``is_known_batch_status`` first).
    """
    return attempt_count * 10 + BATCH_STATUS_RANK[batch_status]


def statuses_between(current: JobStatus, target: JobStatus, ever_ran: bool) -> list[JobStatus]:
    """The statuses a job enters going from ``current`` to ``target``, in order, ``target`` last.

    A lost or reordered event must not lose a notification: a job seen Queued then Succeeded did pass
    Starting and Running, if it ran at all (``ever_ran``: the event carries ``startedAt``).
    A retry moving Running back to Queued enters Queued again.
    """
    if target.rank <= current.rank:
        return [target] if target != current else []
    passed: list[JobStatus] = []
    for status in (JobStatus.STARTING, JobStatus.RUNNING):
        if current.rank < status.rank < target.rank and ever_ran:
            passed.append(status)
    passed.append(target)
    return passed
