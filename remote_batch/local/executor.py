"""A stand-in for AWS Batch compute: runs each job's worker in a subprocess on this host.

``LocalBatchExecutor.gateway(region, log_group)`` gives one ``BatchGateway`` per geo zone; all share
the host's vCPUs. A job goes PENDING → RUNNABLE → (FIFO, when enough vCPUs are free) STARTING →
RUNNING → SUCCEEDED | FAILED, and each transition is published once, in order, as a real-shaped
``Batch Job State Change`` event (AWS sends none for SUBMITTED). The worker runs with the machine
class's limits, cut to the host's: CPU affinity, an address-space limit, the Batch timeout
(``attemptDurationSeconds``, counted from RUNNING). Its stdout and stderr (one pipe, so lines keep
the order they were written in) are read in 64 KiB chunks and go line by line to the zone's
CloudWatch Logs group, in the awslogs driver's stream ``{job definition name}/default/{job id}``,
flushed before the final event is published; at most ``LOG_BUFFER_BYTES`` wait between the pipe and
the store (beyond, the job's writes wait on its pipe). The job's ``stoppedAt`` is when its process
ended, whatever shipping still takes. Past its machine class's log volume (console bytes) or output
volume (bytes of files in its working directory, measured every second) the job is terminated with
``Log limit of 1 GiB exceeded`` / ``Output limit of 10 GiB exceeded``.

Each job runs in its own working directory (``remote-batch-job-*`` in the system temp dir, also its
``TMPDIR``), removed once its final event is published; ``worker`` imports through ``PYTHONPATH``.
Each job runs in a sandbox (``remote_batch.local.sandbox``): with bubblewrap, a box that sees its
folder, the interpreter and the worker's code, in its own PID namespace; when the worker ends, or the
job is killed, the kernel kills every process of that namespace, whatever they did to escape. The
memory of a job is capped below the host's free memory, with headroom for the stack. A
``ProcessRegistry`` records each running job's processes and folder for the next start after a crash.

Threads: one scheduler (announces, starts queued jobs, enforces timeouts and kill deadlines), and per
running job a runner that forks the worker and waits for it (it must outlive the worker:
``PR_SET_PDEATHSIG`` fires when the forking *thread* ends), a console reader and a log shipper.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import errno
import logging
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Protocol

import psutil
from botocore.exceptions import BotoCoreError, ClientError

from functions.adapters.batch_detail import BatchJobDetail, to_state
from functions.domain.errors import DependencyFailed
from functions.domain.jobs import BatchJobState
from functions.domain.log_lines import AWSLOGS_PART_BYTES
from functions.domain.machine_classes import GIB, machine_class_of, volume_limit_text
from functions.ports import BatchSubmission
from remote_batch.local.batch_arrays import (
    ArrayParent,
    check_array_size,
    child_environment,
    child_id,
    job_summary,
)
from remote_batch.local.events import (
    BatchAttempt,
    batch_job_state_change,
    log_stream_name,
    task_arn,
)
from remote_batch.local.sandbox import (
    JOB_DIR_PREFIX,
    JOB_MARKER_VARIABLE,
    ProcessRegistry,
    Sandbox,
    SandboxKind,
    detect_sandbox,
    kill_marked_processes,
    namespace_init,
    namespace_members,
    pid_namespace,
    sandbox_path,
)

logger = logging.getLogger("remote_batch.local.executor")

MIB = 1024 * 1024
REPO_ROOT = Path(__file__).resolve().parents[2]

# AWS Batch's statusReason texts for these endings.
REASON_CONTAINER_EXITED = "Essential container in task exited"
REASON_TIMEOUT = "Job attempt duration exceeded timeout"
SHUTDOWN_REASON = "Local stack stopped while the job ran"
SHUTDOWN_UNSTARTED_REASON = "Local stack stopped before the job ran"
# The statusReason of a job whose handling raised an unexpected error (followed by the error).
REASON_EXECUTOR_ERROR = "Local Batch executor error"

# AWS Batch's smallest attemptDurationSeconds (SubmitJob API reference, JobTimeout).
AWS_MIN_TIMEOUT_SECONDS = 60
# Seconds between SIGTERM and SIGKILL when a running job is terminated or times out.
KILL_GRACE_SECONDS = 2.0

# Log shipping: flush at least this often (s) or when a batch is full. PutLogEvents takes at most
# 10,000 events and 1,048,576 bytes per call counting 26 bytes per event, and 256 KiB per event
# (CloudWatch Logs API reference, PutLogEvents).
LOG_FLUSH_SECONDS = 0.2
LOG_BATCH_EVENTS = 10_000
LOG_BATCH_BYTES = 1_048_576
# The most console output held per job between its pipe and the log store (bytes, events' costs), and
# the size of one read from the pipe: the job's writes wait on its pipe beyond that.
LOG_BUFFER_BYTES = 4 * MIB
LOG_READ_BYTES = 64 * 1024
LOG_EVENT_OVERHEAD_BYTES = 26
# A longer line is shipped as several events of this many bytes, as Docker's awslogs driver does.
LOG_LINE_MAX_BYTES = AWSLOGS_PART_BYTES
LOG_PUT_ATTEMPTS = 3
# How long to wait for the pipes to close after the worker exits (a daemonized grandchild may hold them).
READER_JOIN_SECONDS = 2.0
# The longest the scheduler sleeps at once: far-off deadlines are re-checked rather than waited for
# (Condition.wait overflows beyond threading.TIMEOUT_MAX), and a scheduler error is retried after 1 s.
MAX_WAIT_SECONDS = 3600.0
SCHEDULER_RETRY_SECONDS = 1.0
# Memory kept for the local stack itself: a job's address space is capped at the host's available
# memory at start less this share of its total (at least MEMORY_HEADROOM_MIN_MIB).
MEMORY_HEADROOM_FRACTION = 0.125
MEMORY_HEADROOM_MIN_MIB = 1024
MEMORY_FLOOR_MIB = 256
# The file (in the job's directory) the worker appends the details of its own errors to, named by this
# variable: they go to this process's log for the operator, never to the job's log.
OPERATOR_LOG_VARIABLE = "REMOTE_BATCH_OPERATOR_LOG"
OPERATOR_LOG_NAME = "worker-operator.log"
OPERATOR_LOG_MAX_BYTES = 64 * 1024

# How often (s) the files in a running job's working directory are measured against its output limit.
OUTPUT_CHECK_SECONDS = 1.0
# The limits of a job whose resources match no machine class (the Basic classes').
DEFAULT_LOG_LIMIT_BYTES = GIB
DEFAULT_OUTPUT_LIMIT_BYTES = 10 * GIB

QUEUED_STATUSES = frozenset({"SUBMITTED", "PENDING", "RUNNABLE"})
FINAL_STATUSES = frozenset({"SUCCEEDED", "FAILED"})

_PR_SET_PDEATHSIG = 1
# Resolved once here: the forked child must not build ctypes objects before exec.
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl


class CredentialIssuer(Protocol):
    """Gives each job AWS credentials of its own (``remote_batch.local.iam.JobCredentials``)."""

    def issue(self, batch_job_id: str, submission: BatchSubmission) -> dict[str, str]:
        """The variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``) of the job's credentials."""

    def revoke(self, batch_job_id: str) -> None:
        """Delete the job's credentials (once its processes are gone)."""


class EventPublisher(Protocol):
    """Where the executor sends its events (``EventBus``)."""

    def publish(self, envelope: dict[str, Any]) -> None:
        """Record and queue one envelope for delivery."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _gib(mib: int) -> str:
    gib = mib / 1024
    return str(int(gib)) if gib >= 1 else f"{gib:.1f}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def host_note(
    submission: BatchSubmission, host_vcpus: int, host_memory_mib: int, memory_basis: str | None = None
) -> str | None:
    """The sentence saying a machine class is bigger than this host, or None when it fits.

    Example: ``Machine class needs 8 vCPUs and 64 GiB; this host runs it with 2 vCPUs and 23 GiB``.
    A GPU class always gets one: the local stack has no GPU and runs it on the CPU (``Machine class
    needs 8 vCPUs, 64 GiB and 1 GPU; this host runs it on CPU only, with 8 vCPUs and 64 GiB``).
    ``memory_basis`` (e.g. ``the host's free memory less 3.0 GiB kept for the local stack``) is added
    in parentheses when the memory was cut down.
    """
    if submission.vcpus <= host_vcpus and submission.memory_mib <= host_memory_mib and not submission.gpus:
        return None
    vcpus = min(submission.vcpus, host_vcpus)
    memory = min(submission.memory_mib, host_memory_mib)
    needs = [_plural(submission.vcpus, "vCPU"), f"{_gib(submission.memory_mib)} GiB"]
    gets = [_plural(vcpus, "vCPU"), f"{_gib(memory)} GiB"]
    basis = f" ({memory_basis})" if memory_basis and memory < submission.memory_mib else ""
    if submission.gpus:
        needs.append(_plural(submission.gpus, "GPU"))
        return f"Machine class needs {_join(needs)}; this host runs it on CPU only, with {_join(gets)}{basis}"
    return f"Machine class needs {_join(needs)}; this host runs it with {_join(gets)}{basis}"


def job_memory_ceiling_mib(memory: Any = None) -> tuple[int, str]:
    """The most memory (MiB) one job may have on this host, and the sentence saying why.

    The host's available memory now less a headroom for the local stack (an eighth of the total, at
    least ``MEMORY_HEADROOM_MIN_MIB``), never below ``MEMORY_FLOOR_MIB``. ``memory`` is a
    ``psutil.virtual_memory()`` result (default: read now). Example on a 24 GiB host with 17 GiB
    available: ``(14336, "the host's free memory less 3.0 GiB kept for the local stack")``.
    """
    memory = memory if memory is not None else psutil.virtual_memory()
    total = int(memory.total) // MIB
    headroom = max(MEMORY_HEADROOM_MIN_MIB, int(total * MEMORY_HEADROOM_FRACTION))
    ceiling = max(MEMORY_FLOOR_MIB, min(total, int(memory.available) // MIB - headroom))
    return ceiling, f"the host's free memory less {headroom / 1024:.1f} GiB kept for the local stack"


def _join(parts: Sequence[str]) -> str:
    return " and ".join(parts) if len(parts) <= 2 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def _exit_code(returncode: int) -> int:
    """A container's exit code: a signal N shows as 128 + N, as Docker reports it."""
    return 128 - returncode if returncode < 0 else returncode


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _signal_job(job: _Job, signum: int) -> None:
    """Signal a running job's processes.

    SIGKILL: the sandbox's process group and its namespace init (the kernel then kills every process
    of the namespace). Other signals (SIGTERM) go to every process of the job's PID namespace but its
    init, as ``killpg`` would to a process group; without a namespace, to the process group.
    """
    if job.process is None:
        return
    if signum == signal.SIGKILL or job.namespace is None:
        _signal_group(job.process.pid, signum)
    if job.init is not None and signum == signal.SIGKILL:
        with contextlib.suppress(psutil.Error):
            job.init.kill()
    if job.namespace is not None and signum != signal.SIGKILL:
        init_pid = job.init.pid if job.init is not None else None
        for member in namespace_members(job.namespace):
            if member.pid != init_pid:
                with contextlib.suppress(psutil.Error):
                    member.send_signal(signum)


def _clamp_wait(seconds: float | None) -> float:
    """A ``Condition.wait`` timeout: at most ``MAX_WAIT_SECONDS`` (None, "no deadline", too)."""
    return MAX_WAIT_SECONDS if seconds is None else max(0.0, min(seconds, MAX_WAIT_SECONDS))


def _log_operator_report(job: _Job) -> None:
    """Log what the worker wrote to its operator file (its own errors' details), at most
    ``OPERATOR_LOG_MAX_BYTES`` of it, to this process's log."""
    if job.workdir is None:
        return
    try:
        with open(job.workdir / OPERATOR_LOG_NAME, "rb") as report:
            text = report.read(OPERATOR_LOG_MAX_BYTES).decode("utf-8", "replace")
    except FileNotFoundError:
        return
    except OSError as exc:
        logger.warning("worker report unreadable batch_job_id=%s error=%s", job.job_id, exc)
        return
    if text.strip():
        logger.warning("worker reported its own error batch_job_id=%s\n%s", job.job_id, text.rstrip())


def _limit_worker(cpus: frozenset[int], memory_bytes: int, parent_pid: int) -> Callable[[], None]:
    """The ``preexec_fn`` of a worker: die with the executor, pin CPUs, cap the address space."""

    def apply() -> None:
        # Runs in the forked child before exec: only async-signal-safe work, no locks, no logging.
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the executor died before prctl took effect
            os._exit(137)
        os.sched_setaffinity(0, cpus)
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    return apply


class _LogShipper:
    """Ships a job's console lines in PutLogEvents batches on its own thread, holding at most
    ``LOG_BUFFER_BYTES`` of them: ``append`` waits while the buffer is full (so a job that prints
    faster than the store takes waits on its pipe, as a container waits on its log driver).

    Lines are timestamped (ms, never decreasing) when appended; a batch (at most
    ``LOG_BATCH_EVENTS`` events and ``LOG_BATCH_BYTES``, PutLogEvents' bounds) is sent when full,
    ``LOG_FLUSH_SECONDS`` after its first line, or on ``close``.
    """

    def __init__(self, client: Any, group: str, stream: str, job_id: str) -> None:
        self._client = client
        self._group = group
        self._stream = stream
        self._job_id = job_id
        self._cond = threading.Condition()
        self._buffer: deque[tuple[int, str, float, int]] = deque()
        self._buffered_bytes = 0
        self._last_ms = 0
        self._closing = False
        self._closed = False
        self._dropped = 0
        self.shipped = 0
        self._thread = threading.Thread(target=self._run, name=f"logs-{job_id[:8]}", daemon=True)
        self._thread.start()

    def append(self, message: str, *, continues_line: bool = False) -> None:
        """Queue one line (without its newline), timestamped now; a part that ``continues_line``
        (the rest of a line over ``LOG_LINE_MAX_BYTES``) takes the previous part's timestamp.

        Waits while ``LOG_BUFFER_BYTES`` are buffered; after ``close`` the line is dropped (counted).
        """
        cost = len(message.encode("utf-8")) + LOG_EVENT_OVERHEAD_BYTES
        with self._cond:
            self._cond.wait_for(lambda: self._closed or self._buffered_bytes < LOG_BUFFER_BYTES)
            if self._closed:
                self._dropped += 1
                return
            if not continues_line:
                self._last_ms = max(self._last_ms, _now_ms())
            self._buffer.append((self._last_ms, message, time.monotonic(), cost))
            self._buffered_bytes += cost
            if len(self._buffer) == 1 or self._buffered_bytes >= LOG_BATCH_BYTES:
                self._cond.notify_all()

    def close(self) -> None:
        """Send what is buffered and stop; returns after the last PutLogEvents call."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        with self._cond:
            if self._dropped:
                logger.error("log lines dropped after close job_id=%s lines=%d", self._job_id, self._dropped)

    def _full_locked(self) -> bool:
        return len(self._buffer) >= LOG_BATCH_EVENTS or self._buffered_bytes >= LOG_BATCH_BYTES

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._buffer or self._closing)
                if not self._buffer:
                    self._closed = True  # from now on, a late line is dropped rather than left unsent
                    self._cond.notify_all()
                    return
                due = self._buffer[0][2] + LOG_FLUSH_SECONDS
                while not self._full_locked() and not self._closing:
                    remaining = due - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                batch = self._take_batch_locked()
                self._cond.notify_all()  # room in the buffer: a waiting reader goes on
            try:
                self._put(batch)
            except Exception:  # the thread must live on: a reader may be waiting for buffer room
                logger.exception("log lines dropped job_id=%s lines=%d", self._job_id, len(batch))
            self.shipped += len(batch)

    def _take_batch_locked(self) -> list[dict[str, Any]]:
        batch: list[dict[str, Any]] = []
        size = 0
        while self._buffer and len(batch) < LOG_BATCH_EVENTS:
            timestamp, message, _, cost = self._buffer[0]
            if len(message.encode("utf-8")) > LOG_LINE_MAX_BYTES:
                message = message.encode("utf-8")[:LOG_LINE_MAX_BYTES].decode("utf-8", "ignore")
            if batch and size + cost > LOG_BATCH_BYTES:
                break
            self._buffer.popleft()
            self._buffered_bytes -= cost
            batch.append({"timestamp": timestamp, "message": message})
            size += cost
        return batch

    def _put(self, batch: list[dict[str, Any]]) -> None:
        for attempt in range(1, LOG_PUT_ATTEMPTS + 1):
            try:
                response = self._client.put_log_events(
                    logGroupName=self._group, logStreamName=self._stream, logEvents=batch
                )
            except (ClientError, BotoCoreError) as exc:
                logger.warning(
                    "log put failed job_id=%s attempt=%d lines=%d error=%s",
                    self._job_id,
                    attempt,
                    len(batch),
                    exc,
                )
                continue
            if response.get("rejectedLogEventsInfo"):
                logger.warning(
                    "log events rejected job_id=%s info=%s", self._job_id, response["rejectedLogEventsInfo"]
                )
            return
        logger.error("log lines dropped job_id=%s lines=%d", self._job_id, len(batch))


def _line_parts(body: bytes) -> list[bytes]:
    """``body`` cut into parts of at most ``LOG_LINE_MAX_BYTES`` at UTF-8 character boundaries."""
    parts = []
    while len(body) > LOG_LINE_MAX_BYTES:
        boundary = _utf8_boundary(body[:LOG_LINE_MAX_BYTES]) or LOG_LINE_MAX_BYTES
        parts.append(body[:boundary])
        body = body[boundary:]
    parts.append(body)
    return parts


def _read_lines(
    stream: IO[bytes],
    shipper: _LogShipper,
    limit_bytes: int | None = None,
    on_limit: Callable[[], None] | None = None,
) -> None:
    """Forward a pipe to ``shipper`` line by line until EOF (empty lines are skipped, as awslogs does).

    The pipe is read in chunks of at most ``LOG_READ_BYTES``; what is held at once is one chunk, one
    unfinished line part (under ``LOG_LINE_MAX_BYTES``) and the shipper's bounded buffer. A line over
    ``LOG_LINE_MAX_BYTES`` goes as several events the way Docker's awslogs driver ships it on AWS
    Batch: parts of ``LOG_LINE_MAX_BYTES`` cut at a UTF-8 character boundary, all with the line's
    timestamp (``functions.domain.log_lines``, whose reader joins them back).

    After ``limit_bytes`` bytes (when given), ``on_limit`` is called once and the rest of the pipe is
    read and dropped, so the job never waits on a pipe no one reads while it is being ended.
    """
    read = getattr(stream, "read1", stream.read)
    with stream:
        carry = b""
        continuing = False
        total = 0
        while chunk := read(LOG_READ_BYTES):
            if limit_bytes is not None and total >= limit_bytes:
                continue  # over the limit: drained and dropped
            total += len(chunk)
            if limit_bytes is not None and total >= limit_bytes:
                chunk = chunk[: len(chunk) - (total - limit_bytes)]
                if on_limit is not None:
                    on_limit()
            lines = (carry + chunk).split(b"\n")
            carry = lines.pop()
            for line in lines:
                for part in _line_parts(line.removesuffix(b"\r")):
                    if part:
                        shipper.append(part.decode("utf-8", "replace"), continues_line=continuing)
                        continuing = True
                continuing = False
            while len(carry) >= LOG_LINE_MAX_BYTES:
                boundary = _utf8_boundary(carry[:LOG_LINE_MAX_BYTES]) or LOG_LINE_MAX_BYTES
                shipper.append(carry[:boundary].decode("utf-8", "replace"), continues_line=continuing)
                continuing = True
                carry = carry[boundary:]
        if carry:
            shipper.append(carry.decode("utf-8", "replace"), continues_line=continuing)


def _join_reader(reader: threading.Thread, shipper: _LogShipper) -> None:
    """Wait for a console reader to reach EOF and hand its last lines over, as long as the log is
    still being shipped (a slow store); give up after ``READER_JOIN_SECONDS`` without progress
    (a process that escaped the job's kill holds the pipe open)."""
    shipped = -1
    while reader.is_alive() and shipper.shipped != shipped:
        shipped = shipper.shipped
        reader.join(READER_JOIN_SECONDS)


def _tree_bytes(root: Path) -> int:
    """Bytes of the regular files under ``root`` (``st_size``, what an upload would read), not
    following links; files and folders that vanish while it walks are skipped."""
    total = 0
    pending = [root]
    while pending:
        folder = pending.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(Path(entry.path))
                        elif entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_size
                    except OSError:
                        continue
        except OSError:
            continue
    return total


def _utf8_boundary(data: bytes) -> int:
    """The length of the longest prefix of ``data`` that does not end inside a UTF-8 character."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # ASCII or a lead byte: the last character starts here
            width = 1 if byte < 0x80 else 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if width <= back else len(data) - back
    return len(data)


class _QueueView:
    """The runnable queue as the next job joining it sees it, kept up to date as jobs join (so
    announcing the N children of an array costs O(N), not O(N²)).

    Jobs start in FIFO order when enough vCPUs are free: the ones already queued start first if they
    fit. ``free`` is what is left of the free vCPUs after the queued jobs that fit; ``blocked`` counts
    the queued jobs from the first that does not fit on.
    """

    def __init__(self, free: int, runnable: Iterable[_Job]) -> None:
        self.free = free
        self.blocked = 0
        for ahead in runnable:
            self.joined(ahead.vcpus)

    def joined(self, vcpus: int) -> None:
        """Count a job of ``vcpus`` joining the end of the queue."""
        if self.blocked or vcpus > self.free:
            self.blocked += 1
        else:
            self.free -= vcpus

    def waiting_reason(self, vcpus: int, host_vcpus: int) -> str | None:
        """Why a job of ``vcpus`` joining the queue now will not start at once, or None when it will.

        Example: ``Waiting for 1 vCPU: 2 of 2 in use by other jobs, 1 job queued ahead``.
        """
        if not self.blocked and vcpus <= self.free:
            return None
        in_use = host_vcpus - self.free
        reason = f"Waiting for {_plural(vcpus, 'vCPU')}: {in_use} of {host_vcpus} in use by other jobs"
        if self.blocked:
            reason += f", {_plural(self.blocked, 'job')} queued ahead"
        return reason

    def announce_with(self, announce: Callable[[_Job, _QueueView], None]) -> Callable[[_Job], None]:
        """``announce`` bound to this view."""
        return lambda job: announce(job, self)


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
    log_limit_bytes: int | None = None
    output_limit_bytes: int | None = None
    attempts: list[BatchAttempt] = field(default_factory=list)
    last_detail: dict[str, Any] | None = None
    # An array child's parent and index (None for a single job).
    array: ArrayParent[_Job] | None = None
    index: int | None = None

    @property
    def log_stream(self) -> str:
        return log_stream_name(self.submission.job_definition, self.job_id)

    @property
    def task(self) -> str:
        return task_arn(self.gateway.region, self.gateway.account, self.job_id)


class LocalBatchGateway:
    """``BatchGateway`` of one geo zone, backed by the shared ``LocalBatchExecutor``.

    Attributes
    ----------
    region : str
        The zone's region (events' ARNs, the worker's ``AWS_REGION``).
    log_group : str
        The zone's CloudWatch Logs group of job console output.
    account : str
        The AWS account id in ARNs.
    """

    def __init__(self, executor: LocalBatchExecutor, region: str, log_group: str, logs: Any) -> None:
        self._executor = executor
        self.region = region
        self.log_group = log_group
        self.account = executor.account
        self.logs = logs
        self._group_lock = threading.Lock()
        self._group_ready = False

    def submit_job(self, submission: BatchSubmission) -> str:
        """Queue a job; returns its Batch job id (a UUID) at once. Its events follow asynchronously.

        Raises
        ------
        DependencyFailed
            When the executor has been shut down.
        """
        return self._executor.submit(self, submission)

    def terminate_job(self, batch_job_id: str, reason: str) -> None:
        """Terminate a job: a queued one fails at once, a running one is signalled (SIGTERM, then
        SIGKILL after 2 s); ``reason`` becomes its ``statusReason``. No-op for final or unknown ids."""
        self._executor.terminate_job(batch_job_id, reason)

    def describe_jobs(self, batch_job_ids: Sequence[str], observed_at_ms: int) -> list[BatchJobState]:
        """DescribeJobs: the state of each id this executor knows (unknown ids are absent)."""
        return [
            to_state(BatchJobDetail.model_validate(d), observed_at_ms)
            for d in self._executor.describe(batch_job_ids)
        ]

    def list_jobs(self, array_job_id: str, job_status: str | None = None) -> list[dict[str, Any]]:
        """ListJobs of an array job's children (``LocalBatchExecutor.list_jobs``)."""
        return self._executor.list_jobs(array_job_id, job_status)

    def open_log_stream(self, stream: str) -> bool:
        """Create the zone's log group (once) and ``stream``; False when CloudWatch Logs refused."""
        try:
            with self._group_lock:
                if not self._group_ready:
                    self._create(self.logs.create_log_group, logGroupName=self.log_group)
                    self._group_ready = True
            self._create(self.logs.create_log_stream, logGroupName=self.log_group, logStreamName=stream)
        except (ClientError, BotoCoreError) as exc:
            logger.warning("log stream not created group=%s stream=%s error=%s", self.log_group, stream, exc)
            return False
        return True

    @staticmethod
    def _create(call: Callable[..., Any], **kwargs: str) -> None:
        try:
            call(**kwargs)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceAlreadyExistsException":
                raise


class LocalBatchExecutor:
    """AWS Batch compute on this host: a FIFO queue over the host's vCPUs, one subprocess per job.

    Parameters
    ----------
    bus : EventPublisher
        Receives every ``Batch Job State Change`` envelope, once, in order per job.
    logs_client : Callable[[str], Any]
        Builds a boto3 CloudWatch Logs client for a region (called once per ``gateway``).
    worker_environment : Mapping[str, str]
        The worker's base environment (AWS endpoint and credentials). The executor adds the
        submission's environment, ``AWS_REGION``/``AWS_DEFAULT_REGION`` of the zone,
        ``AWS_BATCH_JOB_ID``, ``AWS_BATCH_JOB_ATTEMPT``, ``AWS_BATCH_JQ_NAME``, the BLAS/OpenMP
        thread counts (the allotted vCPUs), ``PYTHONPATH`` (``import_root`` first), ``TMPDIR``/``TEMP``/
        ``TMP`` (inside the job's directory), ``REMOTE_BATCH_OPERATOR_LOG`` (a file in it whose content,
        the worker's own errors, is logged here after the job, never in the job's log) and, when
        absent, this process's ``PATH``.
    vcpus : int | None
        Host capacity in vCPUs shared by all jobs; default: the CPUs this process may run on.
    memory_mib : int | None
        The ceiling of a job's address-space limit in MiB; default: the host's available memory at
        start less a headroom for the stack (``job_memory_ceiling_mib``), said in the ``statusReason``
        of a job whose class it cuts down.
    account : str
        The 12-digit AWS account id in ARNs.
    python : str | None
        The interpreter for the default worker command; default ``sys.executable``.
    worker_command : Sequence[str] | None
        The job container's command; default ``[python, "-u", "-m", "worker"]``.
    import_root : Path | None
        The directory put first on the worker's ``PYTHONPATH``; default the repository root (so
        ``worker`` imports). The worker's working directory is its own temporary directory.
    min_timeout_seconds : int
        Timeouts below this are raised to it, as AWS Batch's minimum ``attemptDurationSeconds`` (60 s).
    kill_grace_seconds : float
        Seconds between SIGTERM and SIGKILL when a running job is terminated or times out.
    sandbox : Sandbox | None
        How each job is isolated (``remote_batch.local.sandbox``); default: the strongest that works
        here (``detect_sandbox``). Its warning, if any, is logged now and ends each job's statusReason.
    registry : ProcessRegistry | None
        Where each running job's folder and processes are recorded, for the next start after a crash;
        default: none kept.
    credentials : CredentialIssuer | None
        Issues each job its own AWS credentials before it starts (they replace any in
        ``worker_environment``) and revokes them after it ended; default: the job runs with
        ``worker_environment``'s.
    log_limit_bytes : int | None
        Caps every job's console output (bytes) below its machine class's ``log_limit_bytes``; past
        it the job is terminated with ``Log limit of <size> exceeded``. None: the class's limit.
    output_limit_bytes : int | None
        Caps the bytes of files every job keeps in its working directory (outputs, temporary files)
        below its class's ``output_limit_bytes``; past it: ``Output limit of <size> exceeded``.
    """

    def __init__(
        self,
        bus: EventPublisher,
        logs_client: Callable[[str], Any],
        worker_environment: Mapping[str, str],
        *,
        vcpus: int | None = None,
        memory_mib: int | None = None,
        account: str = "000000000000",
        python: str | None = None,
        worker_command: Sequence[str] | None = None,
        import_root: Path | None = None,
        min_timeout_seconds: int = AWS_MIN_TIMEOUT_SECONDS,
        kill_grace_seconds: float = KILL_GRACE_SECONDS,
        sandbox: Sandbox | None = None,
        registry: ProcessRegistry | None = None,
        credentials: CredentialIssuer | None = None,
        log_limit_bytes: int | None = None,
        output_limit_bytes: int | None = None,
    ) -> None:
        cpu_ids = sorted(os.sched_getaffinity(0))
        self.vcpus = max(1, vcpus if vcpus is not None else len(cpu_ids))
        self._memory_basis: str | None = None
        if memory_mib is None:
            memory_mib, self._memory_basis = job_memory_ceiling_mib()
        self.memory_mib = memory_mib
        self.sandbox = sandbox if sandbox is not None else detect_sandbox()
        if self.sandbox.warning:
            logger.warning("JOBS ARE NOT SANDBOXED: %s", self.sandbox.warning)
        self._registry = registry
        self._credentials = credentials
        self.account = account
        python = python or sys.executable
        self._command = list(worker_command) if worker_command is not None else [python, "-u", "-m", "worker"]
        self._import_root = import_root or REPO_ROOT
        self._worker_environment = dict(worker_environment)
        self._min_timeout_seconds = min_timeout_seconds
        self._kill_grace_seconds = kill_grace_seconds
        self._log_limit_cap = log_limit_bytes
        self._output_limit_cap = output_limit_bytes
        self._bus = bus
        self._logs_client = logs_client
        # vCPU slot i runs on CPU id _cpu_of_slot[i]; more slots than CPUs share them round-robin.
        self._cpu_of_slot = [cpu_ids[i % len(cpu_ids)] for i in range(self.vcpus)]
        self._free_slots = set(range(self.vcpus))
        self._cond = threading.Condition()
        self._jobs: dict[str, _Job] = {}
        self._arrays: dict[str, ArrayParent[_Job]] = {}
        # Jobs whose worker was spawned and has not exited (the scheduler's deadlines are theirs).
        self._live: set[_Job] = set()
        self._submitted: deque[_Job] = deque()
        self._runnable: deque[_Job] = deque()
        self._gateways: dict[tuple[str, str], LocalBatchGateway] = {}
        self._closed = False
        self._stopped = False
        self._scheduler = threading.Thread(target=self._schedule, name="batch-scheduler", daemon=True)
        self._scheduler.start()
        logger.info(
            "executor started vcpus=%d memory_mib=%d sandbox=%s",
            self.vcpus,
            self.memory_mib,
            self.sandbox.kind,
        )

    # -- public API ------------------------------------------------------------------------------

    def gateway(self, region: str, log_group: str) -> LocalBatchGateway:
        """The ``BatchGateway`` of one geo zone (the same object for the same arguments)."""
        with self._cond:
            existing = self._gateways.get((region, log_group))
        if existing is not None:
            return existing
        created = LocalBatchGateway(self, region, log_group, self._logs_client(region))
        with self._cond:
            return self._gateways.setdefault((region, log_group), created)

    def submit(self, gateway: LocalBatchGateway, submission: BatchSubmission) -> str:
        """Queue ``submission`` in ``gateway``'s zone; returns the Batch job id (use the gateway).

        Raises
        ------
        DependencyFailed
            When the executor has been shut down.
        """
        if submission.array_size is not None:
            return self._submit_array(gateway, submission, submission.array_size)
        job_id = str(uuid.uuid4())
        job = self._new_job(job_id, gateway, submission, _now_ms())
        with self._cond:
            if self._closed:
                raise DependencyFailed("The local Batch executor is stopped; restart the local stack.")
            self._jobs[job_id] = job
            self._submitted.append(job)
            self._cond.notify_all()
        logger.info(
            "job submitted batch_job_id=%s job_name=%s vcpus=%d", job_id, submission.job_name, job.vcpus
        )
        return job_id

    def _submit_array(self, gateway: LocalBatchGateway, submission: BatchSubmission, size: int) -> str:
        """Queue an array job of ``size`` children; returns the parent's Batch job id.

        Raises ``DependencyFailed`` (cause: AWS Batch's ``ClientException``) for a size AWS Batch
        refuses, and when the executor has been shut down.
        """
        check_array_size(size)
        parent_id = str(uuid.uuid4())
        created_at_ms = _now_ms()
        parent: ArrayParent[_Job] = ArrayParent(parent_id, size, created_at_ms, context=(gateway, submission))
        template = self._new_job(parent_id, gateway, submission, created_at_ms)
        parent.children = [
            dataclasses.replace(
                template, job_id=child_id(parent_id, index), array=parent, index=index, attempts=[]
            )
            for index in range(size)
        ]
        with self._cond:
            if self._closed:
                raise DependencyFailed("The local Batch executor is stopped; restart the local stack.")
            self._arrays[parent_id] = parent
            for child in parent.children:
                self._jobs[child.job_id] = child
            self._submitted.extend(parent.children)
            self._cond.notify_all()
        logger.info(
            "array job submitted batch_job_id=%s job_name=%s size=%d vcpus=%d",
            parent_id,
            submission.job_name,
            size,
            template.vcpus,
        )
        return parent_id

    def _new_job(
        self, job_id: str, gateway: LocalBatchGateway, submission: BatchSubmission, created_at_ms: int
    ) -> _Job:
        """A job (or an array's child) as it is queued: its resources cut to this host's, its note,
        its timeout raised to the minimum, its volume limits."""
        timeout = submission.timeout_seconds
        job = _Job(
            job_id=job_id,
            gateway=gateway,
            submission=submission,
            created_at_ms=created_at_ms,
            vcpus=max(1, min(submission.vcpus, self.vcpus)),
            memory_mib=min(submission.memory_mib, self.memory_mib),
            note=". ".join(
                filter(
                    None,
                    (
                        host_note(submission, self.vcpus, self.memory_mib, self._memory_basis),
                        self.sandbox.warning,
                    ),
                )
            )
            or None,
            timeout_seconds=None if timeout is None else max(self._min_timeout_seconds, timeout),
        )
        job.log_limit_bytes, job.output_limit_bytes = self._volume_limits(submission)
        return job

    def _volume_limits(self, submission: BatchSubmission) -> tuple[int, int]:
        """The job's log and output limits (bytes): its machine class's, cut to this executor's caps."""
        machine = machine_class_of(submission.vcpus, submission.memory_mib, submission.gpus)
        log_limit = machine.log_limit_bytes if machine else DEFAULT_LOG_LIMIT_BYTES
        output_limit = machine.output_limit_bytes if machine else DEFAULT_OUTPUT_LIMIT_BYTES
        if self._log_limit_cap is not None:
            log_limit = min(log_limit, self._log_limit_cap)
        if self._output_limit_cap is not None:
            output_limit = min(output_limit, self._output_limit_cap)
        return log_limit, output_limit

    def terminate_job(self, batch_job_id: str, reason: str) -> None:
        """Terminate a job in any non-final status; no-op for a final or unknown id.

        A queued job fails at once with ``reason`` and no ``startedAt``. A running job's process
        group gets SIGTERM, then SIGKILL after ``kill_grace_seconds``; it fails with ``reason`` once
        it is gone (``stoppedAt`` = when it died). Returns without waiting for that.
        """
        with self._cond:
            parent = self._arrays.get(batch_job_id)
            if parent is not None:
                self._terminate_array_locked(parent, reason)
            else:
                job = self._jobs.get(batch_job_id)
                if job is None or job.status in FINAL_STATUSES:
                    logger.info("terminate ignored batch_job_id=%s", batch_job_id)
                    return
                self._terminate_locked(job, reason)
                parent = job.array
        if parent is not None:
            self._revoke_array_credentials(parent)

    def _terminate_array_locked(self, parent: ArrayParent[_Job], reason: str) -> None:
        """TerminateJob of an array parent: every child not final is terminated with ``reason``
        (queued ones fail at once, running ones are signalled); the parent fails with ``reason``
        once they all are final."""
        if parent.status in FINAL_STATUSES:
            logger.info("terminate ignored batch_job_id=%s", parent.job_id)
            return
        parent.termination_reason = parent.termination_reason or reason
        waiting = [child for child in parent.children if child.status in QUEUED_STATUSES]
        for queue in (self._submitted, self._runnable):
            if waiting and queue:
                doomed = set(waiting)
                kept = [job for job in queue if job not in doomed]
                queue.clear()
                queue.extend(kept)
        for child in parent.children:
            if child.status not in FINAL_STATUSES:
                self._terminate_locked(child, reason)
        logger.info("array job terminating batch_job_id=%s reason=%s", parent.job_id, reason)

    def describe(self, batch_job_ids: Sequence[str]) -> list[dict[str, Any]]:
        """DescribeJobs: the ``JobDetail`` of each known id in the order given: a job's (or array
        child's) as its last event carried it, an array parent's as of now (its ``statusSummary``
        counts the children's statuses now)."""
        found: list[dict[str, Any]] = []
        with self._cond:
            for batch_job_id in batch_job_ids:
                parent = self._arrays.get(batch_job_id)
                if parent is not None:
                    found.append(self._parent_envelope_locked(parent)["detail"])
                    continue
                job = self._jobs.get(batch_job_id)
                if job is not None and job.last_detail is not None:
                    found.append(dict(job.last_detail))
        return found

    def list_jobs(self, array_job_id: str, job_status: str | None = None) -> list[dict[str, Any]]:
        """ListJobs with ``arrayJobId``: the ``JobSummary`` of each child in ``job_status`` (AWS: only
        RUNNING ones when no status is given), in index order; [] for an id that is no array job."""
        wanted = job_status or "RUNNING"
        with self._cond:
            parent = self._arrays.get(array_job_id)
            children = [] if parent is None else [c for c in parent.children if c.status == wanted]
            return [job_summary(child.last_detail, child.job_id, child.status) for child in children]

    def status_of(self, batch_job_id: str) -> str | None:
        """The job's (or array parent's) current Batch status (``SUBMITTED`` … ``FAILED``), or None
        for an unknown id."""
        with self._cond:
            parent = self._arrays.get(batch_job_id)
            if parent is not None:
                return parent.status
            job = self._jobs.get(batch_job_id)
            return None if job is None else job.status

    def shutdown(
        self,
        reason: str = SHUTDOWN_REASON,
        timeout: float = 10.0,
        unstarted_reason: str = SHUTDOWN_UNSTARTED_REASON,
    ) -> None:
        """Terminate every job that is not final (as ``terminate_job`` does, so their FAILED events
        reach the bus), wait for the workers to die, kill what they left and join the threads.

        Parameters
        ----------
        reason : str
            The ``statusReason`` of the running jobs it ends.
        timeout : float
            Seconds to wait for the workers; any still alive after it are killed outright.
        unstarted_reason : str
            The ``statusReason`` of the jobs it ends before they ran (queued or STARTING).
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            self._closed = True
            for job in list(self._jobs.values()):
                if job.status not in FINAL_STATUSES:
                    self._terminate_locked(job, reason if job.started_at_ms is not None else unstarted_reason)
            runners = [job.runner for job in self._jobs.values() if job.runner is not None]
        for runner in runners:
            runner.join(max(0.0, deadline - time.monotonic()))
        with self._cond:
            killed = False
            for job in self._jobs.values():
                if job.process is not None and not job.exited:
                    logger.warning(
                        "worker killed at shutdown batch_job_id=%s pid=%d", job.job_id, job.process.pid
                    )
                    _signal_job(job, signal.SIGKILL)
                    killed = True
            started = frozenset(job.job_id for job in self._jobs.values() if job.process is not None)
        kill_marked_processes(started)
        if killed:  # let their runners publish the final events and remove the job directories
            for runner in runners:
                runner.join(max(0.0, deadline - time.monotonic()) + READER_JOIN_SECONDS)
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            arrays = list(self._arrays.values())
        for parent in arrays:
            self._revoke_array_credentials(parent)
        self._scheduler.join(max(0.1, deadline - time.monotonic()))
        logger.info("executor stopped")

    # -- events ----------------------------------------------------------------------------------

    def _publish_locked(self, job: _Job, status: str, reason: str | None = None, **extra: Any) -> None:
        parent = job.array
        if parent is not None:
            parent.child_moved(job.status, status, extra.get("stopped_at_ms"))
        job.status = status
        sub = job.submission
        environment = sub.environment
        if parent is not None and job.index is not None:
            environment = child_environment(sub.environment, job.index, parent.size)
        envelope = batch_job_state_change(
            region=job.gateway.region,
            account=self.account,
            job_id=job.job_id,
            job_name=sub.job_name,
            job_queue=sub.job_queue,
            job_definition=sub.job_definition,
            status=status,
            status_reason=reason,
            created_at_ms=job.created_at_ms,
            started_at_ms=job.started_at_ms,
            vcpus=sub.vcpus,
            memory_mib=sub.memory_mib,
            gpus=sub.gpus,
            environment=environment,
            command=self._command,
            attempts=job.attempts,
            array_properties=None if job.index is None else {"index": job.index},
            timeout_seconds=job.timeout_seconds,
            tags=sub.tags,
            time=datetime.now(UTC),
            **extra,
        )
        job.last_detail = envelope["detail"]
        self._bus.publish(envelope)
        log = logger.info if parent is None else logger.debug  # an array's children: its own lines
        log("job %s batch_job_id=%s job_name=%s", status.lower(), job.job_id, sub.job_name)
        if parent is not None:
            self._advance_parent_locked(parent)

    def _advance_parent_locked(self, parent: ArrayParent[_Job]) -> None:
        """Publish the parent's event when its children moved it (PENDING, or its outcome)."""
        status = parent.next_status()
        if status is None:
            return
        parent.status = status
        self._bus.publish(self._parent_envelope_locked(parent))
        logger.info("array job %s batch_job_id=%s", status.lower(), parent.job_id)

    def _parent_envelope_locked(self, parent: ArrayParent[_Job]) -> dict[str, Any]:
        """The parent's event as of now: its status, ``arrayProperties`` (size, ``statusSummary``),
        the submission's queue, definition, resources, environment and tags; no timeout (AWS: "the
        parent array job does not have a timeout"), no attempts; ``stoppedAt`` (its last child's
        stop) and the reason of a TerminateJob once final."""
        gateway, sub = parent.context
        final = parent.status in FINAL_STATUSES
        return batch_job_state_change(
            region=gateway.region,
            account=self.account,
            job_id=parent.job_id,
            job_name=sub.job_name,
            job_queue=sub.job_queue,
            job_definition=sub.job_definition,
            status=parent.status,
            status_reason=parent.termination_reason if final and parent.status == "FAILED" else None,
            created_at_ms=parent.created_at_ms,
            stopped_at_ms=(parent.stopped_at_ms or _now_ms()) if final else None,
            vcpus=sub.vcpus,
            memory_mib=sub.memory_mib,
            gpus=sub.gpus,
            environment=sub.environment,
            command=self._command,
            array_properties=parent.array_properties(),
            tags=sub.tags,
            time=datetime.now(UTC),
        )

    def _fail_unstarted_locked(self, job: _Job, reason: str) -> None:
        self._release_locked(job)
        self._publish_locked(job, "FAILED", reason, stopped_at_ms=_now_ms())

    # -- scheduling ------------------------------------------------------------------------------

    def _schedule(self) -> None:
        """The scheduler thread. An error in one job's handling fails that job (see ``_guard_locked``);
        any other error is logged and the loop goes on: it must never stop scheduling."""
        with self._cond:
            while not self._stopped:
                wait: float | None
                try:
                    view: _QueueView | None = None
                    while self._submitted:
                        view = view or _QueueView(len(self._free_slots), self._runnable)
                        self._guard_locked(
                            self._submitted.popleft(), view.announce_with(self._announce_locked)
                        )
                    while self._runnable and self._runnable[0].vcpus <= len(self._free_slots):
                        self._guard_locked(self._runnable.popleft(), self._start_locked)
                    wait = self._enforce_deadlines_locked()
                except Exception:
                    logger.exception("scheduler error")
                    wait = SCHEDULER_RETRY_SECONDS
                self._cond.wait(_clamp_wait(wait))

    def _guard_locked(self, job: _Job, action: Callable[[_Job], None]) -> None:
        """Run ``action(job)``; when it raises, log the error and fail the job (or, if its worker
        runs, terminate it) rather than let the error reach the scheduler loop."""
        try:
            action(job)
        except Exception as exc:
            logger.exception("job handling failed batch_job_id=%s", job.job_id)
            self._abandon_locked(job, f"{REASON_EXECUTOR_ERROR}: {type(exc).__name__}: {exc}")

    def _abandon_locked(self, job: _Job, reason: str) -> None:
        """End a job whose handling failed: terminate a spawned worker (its runner publishes the
        final event); fail any other job that is not final, even if that event cannot be published."""
        for queue in (self._submitted, self._runnable):
            if job in queue:
                queue.remove(job)
        if job.status in FINAL_STATUSES:
            return
        if job.process is not None:
            self._terminate_locked(job, reason)
            return
        job.termination_reason = job.termination_reason or reason  # a runner about to spawn sees it
        try:
            self._fail_unstarted_locked(job, reason)
        except Exception:
            logger.exception("job failed without its event batch_job_id=%s", job.job_id)
            job.status = "FAILED"
            self._release_locked(job)

    def _announce_locked(self, job: _Job, view: _QueueView) -> None:
        """Publish PENDING and RUNNABLE (saying why it waits, when it must) and queue the job."""
        self._publish_locked(job, "PENDING", job.note)
        waiting = view.waiting_reason(job.vcpus, self.vcpus)
        reason = ". ".join(r for r in (job.note, waiting) if r) or None
        self._publish_locked(job, "RUNNABLE", reason)
        self._runnable.append(job)
        view.joined(job.vcpus)

    def _start_locked(self, job: _Job) -> None:
        job.slots = tuple(sorted(self._free_slots)[: job.vcpus])
        self._free_slots.difference_update(job.slots)
        self._publish_locked(job, "STARTING", job.note, task=job.task)
        job.runner = threading.Thread(
            target=self._run, args=(job,), name=f"batch-job-{job.job_id[:8]}", daemon=True
        )
        job.runner.start()

    def _release_locked(self, job: _Job) -> None:
        self._free_slots.update(job.slots)
        job.slots = ()
        self._cond.notify_all()

    def _enforce_deadlines_locked(self) -> float | None:
        """Time out and kill what is due; returns seconds until the next deadline (None: none)."""
        now = time.monotonic()
        next_due: float | None = None
        for job in list(self._live):
            if job.process is None or job.exited:
                self._live.discard(job)
                continue
            try:
                due = self._enforce_job_deadlines_locked(job, now)
            except Exception as exc:
                logger.exception("deadline handling failed batch_job_id=%s", job.job_id)
                self._abandon_locked(job, f"{REASON_EXECUTOR_ERROR}: {type(exc).__name__}: {exc}")
                due = now + SCHEDULER_RETRY_SECONDS
            if due is not None:
                next_due = due if next_due is None else min(next_due, due)
        return None if next_due is None else max(0.0, next_due - now)

    def _enforce_job_deadlines_locked(self, job: _Job, now: float) -> float | None:
        """Time out or kill one running job if due; returns its next deadline (monotonic) or None."""
        next_due: float | None = None
        if job.timeout_at is not None and job.termination_reason is None:
            if job.timeout_at <= now:
                logger.info("job timed out batch_job_id=%s seconds=%s", job.job_id, job.timeout_seconds)
                self._terminate_locked(job, REASON_TIMEOUT)
            else:
                next_due = job.timeout_at
        if job.kill_at is not None and job.process is not None:
            if job.kill_at <= now:
                logger.info("worker killed batch_job_id=%s pid=%d", job.job_id, job.process.pid)
                _signal_job(job, signal.SIGKILL)
                job.kill_at = None
            else:
                next_due = job.kill_at if next_due is None else min(next_due, job.kill_at)
        return next_due

    def _terminate_locked(self, job: _Job, reason: str) -> None:
        if job.status in QUEUED_STATUSES:
            for queue in (self._submitted, self._runnable):
                if job in queue:
                    queue.remove(job)
            self._fail_unstarted_locked(job, reason)
        elif job.termination_reason is None and not job.exited:
            # STARTING without a process: the runner sees the reason before it spawns.
            job.termination_reason = reason
            if job.process is not None:
                _signal_job(job, signal.SIGTERM)
                job.kill_at = time.monotonic() + self._kill_grace_seconds
            logger.info("job terminating batch_job_id=%s reason=%s", job.job_id, reason)
            self._cond.notify_all()

    # -- running ---------------------------------------------------------------------------------

    def _environment(self, job: _Job, workdir: Path) -> dict[str, str]:
        env = dict(self._worker_environment)
        env.update(job.submission.environment)
        if job.array is not None and job.index is not None:
            env.update(child_environment({}, job.index, job.array.size))
        threads = str(job.vcpus)
        tmp = str(workdir / "tmp")
        pythonpath = [str(self._import_root), *filter(None, [env.get("PYTHONPATH")])]
        env.update(
            {
                "AWS_REGION": job.gateway.region,
                "AWS_DEFAULT_REGION": job.gateway.region,
                JOB_MARKER_VARIABLE: job.job_id,
                "AWS_BATCH_JOB_ATTEMPT": "1",
                "AWS_BATCH_JQ_NAME": job.submission.job_queue.rsplit("/", 1)[-1],
                "OPENBLAS_NUM_THREADS": threads,
                "OMP_NUM_THREADS": threads,
                "MKL_NUM_THREADS": threads,
                "PYTHONPATH": os.pathsep.join(pythonpath),
                "TMPDIR": tmp,
                "TEMP": tmp,
                "TMP": tmp,
                OPERATOR_LOG_VARIABLE: str(workdir / OPERATOR_LOG_NAME),
            }
        )
        env.setdefault("PATH", os.environ.get("PATH", os.defpath))
        if self.sandbox.kind is SandboxKind.BUBBLEWRAP:
            env["PATH"] = sandbox_path(env["PATH"])
        return env

    def _spawn_locked(self, job: _Job, credentials: Mapping[str, str]) -> subprocess.Popen[bytes]:
        cpus = frozenset(self._cpu_of_slot[slot] for slot in job.slots)
        memory_bytes = job.memory_mib * MIB
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        if hard != resource.RLIM_INFINITY:
            memory_bytes = min(memory_bytes, hard)
        job.workdir = workdir = Path(tempfile.mkdtemp(prefix=JOB_DIR_PREFIX))
        (workdir / "tmp").mkdir()
        env = self._environment(job, workdir)
        env.update(credentials)
        # Inside a sandbox a missing program is only found missing after the sandbox started: look first.
        if shutil.which(self._command[0], path=env["PATH"]) is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), self._command[0])
        if self._registry is not None:  # before any process exists: a crash from here on is cleaned up
            self._registry.record(job.job_id, workdir)
        return subprocess.Popen(  # noqa: S603 - the command is the executor's own worker command
            self.sandbox.command(self._command, workdir, self._read_only_paths()),
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            # One pipe for both streams: the log keeps the order the program wrote its lines in
            # (two pipes read by two threads would interleave them at random).
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            preexec_fn=_limit_worker(cpus, memory_bytes, os.getpid()),  # noqa: PLW1509
        )

    def _read_only_paths(self) -> list[Path]:
        """What a sandboxed job sees read-only besides the system directories: the interpreter's
        installation and virtualenv, the worker command's own installation, the worker package."""
        paths = [Path(sys.base_prefix), Path(sys.prefix), self._import_root / "worker"]
        program = Path(self._command[0])
        if program.is_absolute() and not str(program).startswith(("/usr/", "/bin/", "/sbin/")):
            paths.append(program.parent.parent)
        return paths

    def _watch_namespace(self, job: _Job, process: subprocess.Popen[bytes]) -> None:
        """Find the init of the job's PID namespace and record it with the sandbox's pid."""
        init = namespace_init(process.pid) if self.sandbox.kind is not SandboxKind.NONE else None
        with self._cond:
            if init is not None:
                job.init = init
                job.namespace = pid_namespace(init.pid)
        if self._registry is not None and job.workdir is not None:
            known: list[psutil.Process] = []
            with contextlib.suppress(psutil.Error):  # the sandbox may have exited already
                known.append(psutil.Process(process.pid))
            try:
                self._registry.record(job.job_id, job.workdir, [*known, *([init] if init else [])])
            except OSError as exc:  # the job runs on; only a crash's cleanup would miss it
                logger.warning("job processes not recorded batch_job_id=%s error=%s", job.job_id, exc)

    def _over_limit(self, job: _Job, what: str, limit_bytes: int | None) -> None:
        """Terminate ``job``: its ``what`` (``Log``, ``Output``) volume passed ``limit_bytes``."""
        reason = f"{what} limit of {volume_limit_text(limit_bytes or 0)} exceeded"
        logger.info("job over its limit batch_job_id=%s reason=%s", job.job_id, reason)
        with self._cond:
            if job.status not in FINAL_STATUSES:
                self._terminate_locked(job, reason)

    def _watch_outputs(self, job: _Job) -> None:
        """While the job runs, measure the files in its working directory every
        ``OUTPUT_CHECK_SECONDS``; past ``output_limit_bytes``, terminate it."""
        limit = job.output_limit_bytes
        workdir = job.workdir
        if limit is None or workdir is None:
            return
        while True:
            with self._cond:
                if job.exited or self._stopped:
                    return
                self._cond.wait(OUTPUT_CHECK_SECONDS)
                if job.exited:
                    return
            if _tree_bytes(workdir) > limit:
                self._over_limit(job, "Output", limit)
                return

    def _run(self, job: _Job) -> None:
        """A running job's thread: run it (``_run_job``), then remove its working directory.

        An unexpected error is logged and ends the job: its processes are killed and it fails.
        """
        try:
            self._run_job(job)
        except Exception as exc:
            logger.exception("job runner failed batch_job_id=%s", job.job_id)
            self._abort_run(job, f"{REASON_EXECUTOR_ERROR}: {type(exc).__name__}: {exc}")
        finally:
            if job.workdir is not None:
                shutil.rmtree(job.workdir, ignore_errors=True)
            if self._registry is not None:
                self._registry.forget(job.job_id)
            if job.array is not None:
                self._revoke_array_credentials(job.array)
            elif self._credentials is not None:
                self._credentials.revoke(job.job_id)

    def _revoke_array_credentials(self, parent: ArrayParent[_Job]) -> None:
        """Revoke the credentials an array's children shared, once the array is final (every child's
        worker is gone then); only the first caller does."""
        with self._cond:
            if parent.status not in FINAL_STATUSES or parent.credentials_revoked:
                return
            parent.credentials_revoked = True
            issued = parent.credentials is not None
        if issued and self._credentials is not None:
            self._credentials.revoke(parent.job_id)

    def _abort_run(self, job: _Job, reason: str) -> None:
        """After a runner error: kill the worker and what it left, then fail the job if not final."""
        with self._cond:
            process = job.process
        if process is not None:
            _signal_job(job, signal.SIGKILL)
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                process.wait(READER_JOIN_SECONDS)
            kill_marked_processes(frozenset({job.job_id}))
        with self._cond:
            job.exited = True
            job.kill_at = None
            self._abandon_locked(job, reason)
            if job.status not in FINAL_STATUSES:  # started: _abandon_locked left it to this runner
                self._release_locked(job)
                try:
                    self._publish_locked(job, "FAILED", reason, stopped_at_ms=_now_ms(), task=job.task)
                except Exception:
                    logger.exception("job failed without its event batch_job_id=%s", job.job_id)
                    job.status = "FAILED"

    def _issue_credentials(self, job: _Job) -> dict[str, str] | None:
        """The job's own AWS credentials ({} without an issuer); None when they could not be made
        (the job then failed without starting)."""
        if self._credentials is None:
            return {}
        try:
            if job.array is None:
                return self._credentials.issue(job.job_id, job.submission)
            parent = job.array
            with parent.credentials_lock:  # one set for the whole array, as one job role on AWS
                if parent.credentials is None:
                    parent.credentials = self._credentials.issue(parent.job_id, job.submission)
                return dict(parent.credentials)
        except (ClientError, BotoCoreError) as exc:
            logger.error("job credentials not issued batch_job_id=%s error=%s", job.job_id, exc)
            with self._cond:
                self._fail_unstarted_locked(job, f"CannotStartContainerError: no credentials: {exc}")
            return None

    def _start_watchers(
        self, job: _Job, process: subprocess.Popen[bytes], shipper: _LogShipper
    ) -> list[threading.Thread]:
        """Start the console reader (which ships the log, up to the job's log limit) and the output
        watcher of a job that just started; returns the readers, to join once the job exited."""
        log_limit = job.log_limit_bytes
        readers = [
            threading.Thread(
                target=_read_lines,
                args=(pipe, shipper, log_limit, lambda: self._over_limit(job, "Log", log_limit)),
                name=f"{name}-{job.job_id[:8]}",
                daemon=True,
            )
            for name, pipe in (("console", process.stdout),)
            if pipe is not None
        ]
        for reader in readers:
            reader.start()
        watcher = threading.Thread(
            target=self._watch_outputs, args=(job,), name=f"files-{job.job_id[:8]}", daemon=True
        )
        watcher.start()
        return readers

    def _run_job(self, job: _Job) -> None:
        """Spawn the worker, ship its console, wait for it, kill what it left, publish the final event."""
        stream = job.log_stream
        logs_ready = job.gateway.open_log_stream(stream)
        credentials = self._issue_credentials(job)
        if credentials is None:
            return
        with self._cond:
            if job.termination_reason is not None:
                self._fail_unstarted_locked(job, job.termination_reason)
                return
            try:
                process = self._spawn_locked(job, credentials)
            except (OSError, subprocess.SubprocessError) as exc:
                logger.error("worker not started batch_job_id=%s error=%s", job.job_id, exc)
                self._fail_unstarted_locked(job, f"CannotStartContainerError: {exc}")
                return
            job.process = process
            self._live.add(job)
            job.started_at_ms = _now_ms()
            if job.timeout_seconds is not None:
                job.timeout_at = time.monotonic() + job.timeout_seconds
            self._publish_locked(job, "RUNNING", job.note, log_stream=stream, task=job.task)
            self._cond.notify_all()
        self._watch_namespace(job, process)

        shipper = _LogShipper(job.gateway.logs, job.gateway.log_group, stream, job.job_id)
        readers = self._start_watchers(job, process, shipper)
        returncode = process.wait()
        # The job's own end: its billed Running time stops here, whatever shipping its log still takes.
        stopped_at_ms = _now_ms()
        with self._cond:
            job.exited = True
            job.kill_at = None
            self._cond.notify_all()  # the output watcher stops
        # The container stops with its essential process: nothing it started survives it. In a PID
        # namespace the kernel killed them all with its init; then kill what is left of the process
        # group and what left it (found by the job id in its environment): without a namespace, the
        # job's escaped processes; with one, a sandbox's inner bwrap orphaned before it could arrange
        # to die with its parent (seen once under load: it would have slept on, holding the namespace).
        _signal_job(job, signal.SIGKILL)
        kill_marked_processes(frozenset({job.job_id}))
        for reader in readers:
            _join_reader(reader, shipper)
        shipper.close()  # the whole log is readable before the final status is
        if not logs_ready:
            logger.warning("job log incomplete batch_job_id=%s", job.job_id)
        _log_operator_report(job)

        exit_code = _exit_code(returncode)
        with self._cond:
            if job.termination_reason is not None:
                status, reason = "FAILED", job.termination_reason
            else:
                status = "SUCCEEDED" if returncode == 0 else "FAILED"
                reason = REASON_CONTAINER_EXITED
            job.attempts.append(
                BatchAttempt(
                    exit_code=exit_code,
                    log_stream_name=stream,
                    task_arn=job.task,
                    started_at_ms=job.started_at_ms or stopped_at_ms,
                    stopped_at_ms=stopped_at_ms,
                    status_reason=reason,
                )
            )
            self._release_locked(job)
            self._publish_locked(
                job,
                status,
                reason,
                stopped_at_ms=stopped_at_ms,
                exit_code=exit_code,
                log_stream=stream,
                task=job.task,
            )
        logger.info("worker exited batch_job_id=%s exit_code=%d", job.job_id, exit_code)
