"""A job as the executor keeps it: the record every part reads and writes under the state's lock."""

from __future__ import annotations

import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil

from functions.ports import BatchSubmission
from remote_batch_local.batch_arrays import ArrayParent
from remote_batch_local.events import BatchAttempt, log_stream_name, task_arn


class JobZone(Protocol):
    """What a job needs of the geo zone it was submitted in (``LocalBatchGateway`` is one)."""

    region: str
    account: str
    log_group: str
    # The zone's CloudWatch Logs client (``PutLogEvents``).
    logs: Any

    def open_log_stream(self, stream: str) -> bool:
        """Create the zone's log group (once) and ``stream``; False when CloudWatch Logs refused."""


@dataclass(eq=False)
class BatchJob:
    """One job (or array child) inside the executor, from SubmitJob to its final event.

    Every field is guarded by the executor's lock (``ExecutorState.cond``); jobs compare by identity.

    Attributes
    ----------
    job_id : str
        The Batch job id (a UUID; ``<parent id>:<index>`` for an array child).
    gateway : JobZone
        The zone it was submitted in (region and account of its ARNs, its log group).
    submission : BatchSubmission
        What SubmitJob was given.
    created_at_ms : int
        When it was submitted (ms since the epoch, ``createdAt``).
    vcpus, memory_mib : int
        Its resources cut to this host (vCPUs; MiB of address space).
    note : str | None
        The sentence its ``statusReason`` starts with when the host cut its machine class down or the
        sandbox is weak (``memory.host_note``), else None.
    timeout_seconds : int | None
        Its ``attemptDurationSeconds``, raised to the executor's minimum; None: no timeout.
    status : str
        Its Batch status: SUBMITTED, PENDING, RUNNABLE, STARTING, RUNNING, SUCCEEDED or FAILED.
    slots : tuple[int, ...]
        The vCPU slots it holds while STARTING or RUNNING (``ExecutorSettings.cpu_of_slot``).
    environment : str | None
        The compute environment whose ``maxvCpus`` it counts against while it holds slots (None: none).
    share_vcpus : int
        The shared pool's vCPUs it counts in its share's usage while it holds them (0: none).
    process : subprocess.Popen[bytes] | None
        Its worker's sandbox process once spawned.
    init, namespace : psutil.Process | None, str | None
        The init of its PID namespace (seen from here) and the namespace, once known.
    exited : bool
        Whether its worker exited (the runner then publishes its final event).
    started_at_ms : int | None
        When it went RUNNING (ms since the epoch).
    timeout_at, kill_at : float | None
        Monotonic deadlines: of its timeout, and of the SIGKILL after a SIGTERM.
    termination_reason : str | None
        Why it is being ended (TerminateJob, a timeout, a limit); its FAILED event's ``statusReason``.
    runner : threading.Thread | None
        The thread that runs it from STARTING on (``runner.JobRunner``).
    workdir : Path | None
        Its working directory, once made.
    warm_token : str | None
        The token of the warm worker that runs it (that process's ``AWS_BATCH_JOB_ID`` before it).
    last_log_line : str | None
        A line the executor adds to its log after its own (why the executor ended it), if any.
    log_limit_bytes, output_limit_bytes : int | None
        Its console and output volume limits (bytes).
    attempts : list[BatchAttempt]
        Its attempts so far, oldest first (the events' ``attempts``).
    attempt_number : int
        The attempt it runs as (``AWS_BATCH_JOB_ATTEMPT``): 1, or more for a job retried after the
        local stack stopped under it (``recovery_accepted``).
    last_detail : dict[str, Any] | None
        The ``detail`` of the last event it sent (what DescribeJobs answers).
    array, index : ArrayParent[BatchJob] | None, int | None
        An array child's parent and index (None for a single job).
    """

    job_id: str
    gateway: JobZone
    submission: BatchSubmission
    created_at_ms: int
    vcpus: int
    memory_mib: int
    note: str | None
    timeout_seconds: int | None
    status: str = "SUBMITTED"
    slots: tuple[int, ...] = ()
    environment: str | None = None
    share_vcpus: int = 0
    process: subprocess.Popen[bytes] | None = None
    init: psutil.Process | None = None
    namespace: str | None = None
    exited: bool = False
    started_at_ms: int | None = None
    timeout_at: float | None = None
    kill_at: float | None = None
    termination_reason: str | None = None
    runner: threading.Thread | None = None
    workdir: Path | None = None
    warm_token: str | None = None
    last_log_line: str | None = None
    log_limit_bytes: int | None = None
    output_limit_bytes: int | None = None
    attempts: list[BatchAttempt] = field(default_factory=list)
    attempt_number: int = 1
    last_detail: dict[str, Any] | None = None
    array: ArrayParent[BatchJob] | None = None
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
        """Its awslogs stream, ``{job definition name}/default/{job id}``."""
        return log_stream_name(self.submission.job_definition, self.job_id)

    @property
    def task(self) -> str:
        """The ARN of its (emulated) ECS task."""
        return task_arn(self.gateway.region, self.gateway.account, self.job_id)
