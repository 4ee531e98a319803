"""AWS Batch array jobs in the local executor: the parent's bookkeeping and the rules taken from AWS.

An array job (SubmitJob with ``arrayProperties.size`` N, 2 ≤ N ≤ 10,000) is a parent with its own
Batch job id ``X`` and N children ``X:0`` … ``X:N-1`` that run like single jobs: each queues for the
host's vCPUs, runs the worker with the submission's environment plus ``AWS_BATCH_JOB_ARRAY_INDEX``
(and ``AWS_BATCH_JOB_ARRAY_SIZE``), and sends its own ``Batch Job State Change`` events carrying the
parent's ``jobName`` and ``arrayProperties: {"index": i}``. The parent runs nothing: it enters only
SUBMITTED, PENDING, SUCCEEDED or FAILED, goes to PENDING when its children become RUNNABLE, and ends
SUCCEEDED when every child succeeded, else FAILED; its events and DescribeJobs carry
``arrayProperties: {"size": N, "statusSummary": {status: count}}``. TerminateJob of the parent ends
every child that is not final (queued ones fail without running, running ones are killed).

Sources: AWS Batch user guide, "Array jobs" (sizes 2 to 10,000; ids ``<parent>:<index>``; the parent's
statuses and its PENDING rule; the timeout applies to each child), "AWS Batch job environment
variables" (``AWS_BATCH_JOB_ARRAY_INDEX``, ``AWS_BATCH_JOB_ARRAY_SIZE``); AWS Batch API reference,
``ArrayPropertiesDetail`` (``index`` for children; ``size`` and ``statusSummary`` for parents) and
``TerminateJob``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from botocore.exceptions import ClientError

from functions.domain.errors import DependencyFailed

MIN_ARRAY_SIZE = 2
MAX_ARRAY_SIZE = 10_000
ARRAY_INDEX_VARIABLE = "AWS_BATCH_JOB_ARRAY_INDEX"
ARRAY_SIZE_VARIABLE = "AWS_BATCH_JOB_ARRAY_SIZE"
# Every status a child can be in, in lifecycle order: the keys of a parent's ``statusSummary``.
CHILD_STATUSES = ("SUBMITTED", "PENDING", "RUNNABLE", "STARTING", "RUNNING", "SUCCEEDED", "FAILED")
FINAL = frozenset({"SUCCEEDED", "FAILED"})

ChildT = TypeVar("ChildT")


def check_array_size(size: int) -> None:
    """Refuse an array size AWS Batch refuses (below 2 or above 10,000).

    Raises
    ------
    DependencyFailed
        As the boto3 gateway raises it for AWS Batch's ``ClientException`` (which is its
        ``__cause__``, with AWS's message).
    """
    if MIN_ARRAY_SIZE <= size <= MAX_ARRAY_SIZE:
        return
    message = f"Array job size must be between {MIN_ARRAY_SIZE} and {MAX_ARRAY_SIZE}; got {size}"
    error = ClientError({"Error": {"Code": "ClientException", "Message": message}}, "SubmitJob")
    raise DependencyFailed("AWS Batch refused to accept the job; nothing was charged. Try again.") from error


def child_id(parent_id: str, index: int) -> str:
    """An array child's Batch job id: ``<parent id>:<index>``."""
    return f"{parent_id}:{index}"


def split_child_id(batch_job_id: str) -> tuple[str, int] | None:
    """``(parent id, index)`` of an array child's id, or None for any other id."""
    parent, sep, index = batch_job_id.rpartition(":")
    if not sep or not parent or not index.isdigit():
        return None
    return parent, int(index)


def child_environment(environment: Mapping[str, str], index: int, size: int) -> dict[str, str]:
    """A child's container environment: the submission's plus its index and the array's size."""
    return {**environment, ARRAY_INDEX_VARIABLE: str(index), ARRAY_SIZE_VARIABLE: str(size)}


@dataclass(eq=False)
class ArrayParent(Generic[ChildT]):
    """An array job's parent inside the executor (guarded by the executor's lock).

    Attributes
    ----------
    job_id : str
        The parent's Batch job id.
    size : int
        How many children it has.
    created_at_ms : int
        When it was submitted (ms since the epoch); its children share it.
    status : str
        SUBMITTED, PENDING, SUCCEEDED or FAILED.
    counts : dict[str, int]
        How many children are in each status (``CHILD_STATUSES``).
    termination_reason : str | None
        The reason of a TerminateJob of the parent (its FAILED event's ``statusReason``).
    stopped_at_ms : int | None
        When its last child stopped (ms), once final.
    children : list[ChildT]
        The executor's jobs of its children, in index order.
    context : Any
        What the executor keeps with it (its zone's gateway and the submission).
    credentials : dict[str, str] | None
        The AWS credentials its children share (one job role for the whole array, as on AWS), once
        issued; ``credentials_lock`` is held while they are issued, ``credentials_revoked`` set once
        they are revoked.
    """

    job_id: str
    size: int
    created_at_ms: int
    status: str = "SUBMITTED"
    counts: dict[str, int] = field(default_factory=dict)
    termination_reason: str | None = None
    stopped_at_ms: int | None = None
    children: list[ChildT] = field(default_factory=list)
    context: Any = None
    credentials: dict[str, str] | None = None
    credentials_lock: threading.Lock = field(default_factory=threading.Lock)
    credentials_revoked: bool = False

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = dict.fromkeys(CHILD_STATUSES, 0)
            self.counts["SUBMITTED"] = self.size

    def child_moved(self, before: str, after: str, stopped_at_ms: int | None = None) -> None:
        """Count one child leaving ``before`` for ``after``; a final child's ``stopped_at_ms`` (when
        given) moves the parent's own ``stopped_at_ms`` (its last child's stop) forward."""
        if stopped_at_ms is not None and after in FINAL:
            self.stopped_at_ms = max(self.stopped_at_ms or 0, stopped_at_ms)
        if before == after:
            return
        self.counts[before] -= 1
        self.counts[after] = self.counts.get(after, 0) + 1

    @property
    def final_children(self) -> int:
        """Children that succeeded or failed."""
        return self.counts["SUCCEEDED"] + self.counts["FAILED"]

    @property
    def all_final(self) -> bool:
        """Every child succeeded or failed."""
        return self.final_children == self.size

    def outcome(self) -> str:
        """The parent's final status once ``all_final``: SUCCEEDED if every child did, else FAILED."""
        return "SUCCEEDED" if self.counts["SUCCEEDED"] == self.size else "FAILED"

    def status_summary(self) -> dict[str, int]:
        """``statusSummary``: how many children are in each status, every status named."""
        return {status: self.counts.get(status, 0) for status in CHILD_STATUSES}

    def array_properties(self) -> dict[str, Any]:
        """The parent's ``arrayProperties``: ``{"size": N, "statusSummary": {...}}``."""
        return {"size": self.size, "statusSummary": self.status_summary()}

    def next_status(self) -> str | None:
        """The status the parent moves to now, if any: PENDING once a child is past SUBMITTED and
        PENDING (AWS: "updated to PENDING when any child job is updated to RUNNABLE"; a child failed
        before it was announced counts too), the outcome once every child is final."""
        if self.status in FINAL:
            return None
        if self.all_final:
            return self.outcome()
        if self.status == "SUBMITTED" and self.counts["SUBMITTED"] + self.counts["PENDING"] < self.size:
            return "PENDING"
        return None


def job_summary(detail: Mapping[str, Any] | None, batch_job_id: str, status: str) -> dict[str, Any]:
    """ListJobs' ``JobSummary`` of a job from its last ``JobDetail`` (None: it sent no event yet).

    Fields (AWS Batch API reference, ``JobSummary``): ``jobArn``, ``jobId``, ``jobName``,
    ``createdAt``, ``status``, ``statusReason``, ``startedAt``, ``stoppedAt``, ``container``
    (``exitCode``, ``reason``) and ``arrayProperties`` (``index`` of a child), those it has.
    """
    summary: dict[str, Any] = {"jobId": batch_job_id, "status": status}
    if detail is None:
        split = split_child_id(batch_job_id)
        if split is not None:
            summary["arrayProperties"] = {"index": split[1]}
        return summary
    for key in (
        "jobArn",
        "jobName",
        "createdAt",
        "statusReason",
        "startedAt",
        "stoppedAt",
        "arrayProperties",
    ):
        if key in detail:
            summary[key] = detail[key]
    container = detail.get("container")
    if isinstance(container, Mapping):
        summary["container"] = {k: container[k] for k in ("exitCode", "reason") if k in container}
    summary["status"] = status
    return summary
