"""A job's state inside the executor."""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from functions.ports import BatchSubmission
from remote_batch_local.batch_arrays import ArrayParent
from remote_batch_local.events import (
    BatchAttempt,
    log_stream_name,
    task_arn,
)

if TYPE_CHECKING:
    from remote_batch_local.executor.gateway import LocalBatchGateway


@dataclass(eq=False)
class _Job:
    """A job's state inside the executor (guarded by the executor's lock)."""

    job_id: str
    gateway: LocalBatchGateway
    submission: BatchSubmission
    created_at_ms: int
    vcpus: int
    memory_mib: int
    note: str | None
    timeout_seconds: int | None
    status: str = "SUBMITTED"
    slots: tuple[int, ...] = ()
    # The compute environment whose maxvCpus it counts against while it holds slots (None: none).
    environment: str | None = None
    process: subprocess.Popen[bytes] | None = None
    # The init of the job's PID namespace (seen from here) and the namespace, once known.
    init: psutil.Process | None = None
    namespace: str | None = None
    exited: bool = False
    started_at_ms: int | None = None
    timeout_at: float | None = None
    termination_reason: str | None = None
    kill_at: float | None = None
    runner: threading.Thread | None = None
    workdir: Path | None = None
    # The token of the warm worker that runs the job (its AWS_BATCH_JOB_ID before the job), if any.
    warm_token: str | None = None
    # A line the executor adds to the job's log after the job's own (why it ended the job), if any.
    last_log_line: str | None = None
    log_limit_bytes: int | None = None
    output_limit_bytes: int | None = None
    attempts: list[BatchAttempt] = field(default_factory=list)
    last_detail: dict[str, Any] | None = None
    # The shared pool's vCPUs the job counts in its share's usage while it holds them (0: none).
    share_vcpus: int = 0
    # An array child's parent and index (None for a single job).
    array: ArrayParent[_Job] | None = None
    index: int | None = None

    @property
    def markers(self) -> frozenset[str]:
        """The ``AWS_BATCH_JOB_ID`` values the job's processes may carry: its id, and the token of
        the warm worker it runs in (what that process was started with)."""
        return frozenset({self.job_id} | ({self.warm_token} if self.warm_token else set()))

    @property
    def share_key(self) -> tuple[str, str | None]:
        """The job's share of its queue (fair share is per job queue in AWS Batch)."""
        return (self.submission.job_queue, self.submission.share_identifier)

    @property
    def log_stream(self) -> str:
        return log_stream_name(self.submission.job_definition, self.job_id)

    @property
    def task(self) -> str:
        return task_arn(self.gateway.region, self.gateway.account, self.job_id)
