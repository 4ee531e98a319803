"""A job's process limit: how many tasks (processes and threads) its box may hold at once.

Why a watchdog, and not a kernel limit. A fork bomb in a job (``while True: os.fork()``) took a 2-core
host to a load average of 1,628 before this limit existed. The kernel's own limits do not fit here:

- ``RLIMIT_NPROC`` does not bind root (the local stack runs as root in CI and in containers) and counts
  every process of the user, not of one job (``getrlimit(2)``).
- The cgroup v2 ``pids`` controller (``pids.max``) is the right tool, but it needs a cgroup the stack
  may create and write (systemd's delegation); a developer's shell, a container and CI rarely give
  one (this project's build machines mount cgroup v1, with no ``pids`` hierarchy), and the stack must
  behave the same everywhere.

So the executor counts the jobs' tasks itself: every ``PROCESS_CHECK_SECONDS`` one thread reads
``/proc`` once for all running jobs, counting the threads (``/proc/<pid>/task``) of every process in
each job's PID namespace (each job has its own: ``remote_batch_local.sandbox``), and when a job's count
passes the limit it SIGKILLs the namespace's init: the kernel then kills every process of the namespace
at once (``pid_namespaces(7)``), however fast they fork. The job ends ``FAILED`` with ``Process limit of
1024 exceeded`` (the service shows it ``Terminated`` with that reason) and exit code 137, and the stack
logs ``job over its limit batch_job_id=... reason=Process limit of 1024 exceeded tasks=1032``; the job's
log ends with a line saying how many tasks it held. Without a PID namespace (no sandbox) the job's
process tree (the sandbox process and its descendants) is counted instead.

Threads count as pids.max counts them: each takes a pid from the host's ``kernel.pid_max`` (32,768 by
default), which a thread bomb exhausts as surely as a fork bomb.

While a bomb grows it stays on the job's vCPUs (CPU affinity, ``limits.limit_worker``; a job could
widen its own, which needs no privilege, but a bomb does not), and with the kernel's autogroup
scheduling (``kernel.sched_autogroup_enabled``, 1 on this project's build machines) the job's session
shares a CPU fairly with the stack's, however many processes it has: the stack's health check
answered within 82 ms throughout a 1,024-task bomb (2026-12-01, 2-core host, load average 190).
Killing the processes takes the kernel a while on a busy host (seconds for a thousand, each exiting
on the job's CPU); the job's ``stoppedAt`` is when the last one is gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Set

import psutil

from remote_batch_local.executor.constants import FINAL_STATUSES, logger
from remote_batch_local.executor.job import BatchJob
from remote_batch_local.executor.limits import signal_job
from remote_batch_local.executor.state import ExecutorState

# The most tasks (processes plus threads) one job may hold at once on the local stack.
#
# Why 1024: a job is a worker (the interpreter and its few threads) plus what the user's code starts;
# the heaviest usual case is a ``multiprocessing.Pool()`` of one process per host CPU, each with the
# BLAS/OpenMP threads the executor allots (``OMP_NUM_THREADS``, the job's vCPUs): 16 processes × (1 + 16
# threads) = 272 on a 16-core workstation, 32 × 17 = 544 on a 32-core one, both well inside. A fork bomb
# meets it within a second, far below the host's 32,768 pids, so even several bombing jobs at once
# leave pids and CPU for the stack.
#
# What AWS does: AWS Batch runs a job as an ECS task on Docker, and neither sets a pids limit by default:
# the Docker Engine API's ``HostConfig.Pids`` / ``--pids-limit`` default is 0, "unlimited"
# (Docker Engine API 1.57, schema ``Limit``: "Pids ... Set 0 for unlimited", default 0,
# https://docs.docker.com/reference/api/engine/version/v1.57/schemas/Limit/); there a bomb exhausts
# only its own instance's pids. Podman, which does set one, defaults to
# 2048 or 4096 (https://docs.podman.io/en/v4.4/markdown/options/pids-limit.html). The local stack
# shares one host among every job and the stack itself, so it sets a limit, lower than podman's.
PROCESS_LIMIT = 1024
# How often (s) a running job's tasks are counted; past half its limit, every PROCESS_CHECK_CLOSE_SECONDS.
# One count of all running jobs reads /proc once: about 3 ms on a host of 100 processes, ~1% of a CPU.
PROCESS_CHECK_SECONDS = 0.25
PROCESS_CHECK_CLOSE_SECONDS = 0.02


def process_limit_reason(limit: int) -> str:
    """The ``statusReason`` of a job ended for its process count: ``Process limit of 1024 exceeded``."""
    return f"Process limit of {limit} exceeded"


def _task_count(pid: int | str) -> int:
    """Threads of process ``pid`` (its ``/proc/<pid>/task`` entries); 0 when it is gone."""
    try:
        return len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return 0


def namespace_task_counts(namespaces: Set[str]) -> dict[str, int]:
    """The tasks (processes and their threads) alive in each PID namespace of ``namespaces`` (as
    ``remote_batch_local.sandbox.pid_namespace`` names them, ``pid:[4026532…]``); a namespace with
    none is absent.

    Reads ``/proc`` once for all of them; processes that end while it reads are not counted. A zombie
    counts as one task, as it holds a pid until reaped.
    """
    counts: dict[str, int] = {}
    if not namespaces:
        return counts
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                namespace = os.readlink(f"/proc/{entry.name}/ns/pid")
            except OSError:
                continue
            if namespace in namespaces:
                counts[namespace] = counts.get(namespace, 0) + max(1, _task_count(entry.name))
    return counts


def tree_task_count(pid: int) -> int:
    """The tasks of process ``pid`` and its descendants (0 when it is gone): the count of a job run
    without a PID namespace, whose processes that left the tree (a double fork) escape it."""
    try:
        root = psutil.Process(pid)
        processes = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    count = 0
    for process in processes:
        with contextlib.suppress(psutil.Error):
            count += max(1, _task_count(process.pid))
    return count


def _counted(job: BatchJob) -> bool:
    """Whether the watchdog counts ``job``'s tasks: its worker runs."""
    return job.process is not None and not job.exited


class ProcessLimitWatch:
    """The ``process-limit`` thread: while jobs run, count every running job's tasks in one read of
    ``/proc`` every ``PROCESS_CHECK_SECONDS`` (every ``PROCESS_CHECK_CLOSE_SECONDS`` while a job is
    past half the limit) and kill a job past ``limit`` at once.

    Parameters
    ----------
    state : ExecutorState
        The executor's (its ``live`` jobs are counted; ``stopped`` ends the thread).
    limit : int
        The most tasks a job may hold (``PROCESS_LIMIT``).
    """

    def __init__(self, state: ExecutorState, limit: int) -> None:
        self._state = state
        self._limit = limit
        self._thread = threading.Thread(target=self._watch, name="process-limit", daemon=True)

    def start(self) -> None:
        """Start the thread (it returns once the executor's state is ``stopped``)."""
        self._thread.start()

    def join(self, timeout: float) -> None:
        """Wait at most ``timeout`` seconds for the thread to return."""
        self._thread.join(timeout)

    def _watch(self) -> None:
        limit = self._limit
        state = self._state
        while True:
            with state.cond:
                state.cond.wait_for(lambda: state.stopped or any(_counted(job) for job in state.live))
                if state.stopped:
                    return
                jobs = [
                    (job, job.namespace, job.process.pid)
                    for job in state.live
                    if _counted(job) and job.process
                ]
            highest = 0
            try:
                counts = namespace_task_counts({ns for _, ns, _ in jobs if ns is not None})
                for job, namespace, pid in jobs:
                    count = counts.get(namespace, 0) if namespace is not None else tree_task_count(pid)
                    if count > limit:
                        self._over_limit(job, count)
                    else:
                        highest = max(highest, count)
            except Exception:  # the next round retries; this thread must not die (no limit without it)
                logger.exception("process count failed")
            time.sleep(PROCESS_CHECK_CLOSE_SECONDS if highest * 2 > limit else PROCESS_CHECK_SECONDS)

    def _over_limit(self, job: BatchJob, count: int) -> None:
        """Kill ``job`` now (no grace: a fork bomb would use it to grow): it holds ``count`` tasks,
        over its process limit. The runner then publishes it FAILED with the reason, exit code 137."""
        reason = process_limit_reason(self._limit)
        with self._state.cond:
            if job.exited or job.status in FINAL_STATUSES:
                return
            logger.info("job over its limit batch_job_id=%s reason=%s tasks=%d", job.job_id, reason, count)
            if job.termination_reason is None:
                job.termination_reason = reason
            job.last_log_line = f"{reason}: the job held {count} processes and threads; all were killed."
            signal_job(job, signal.SIGKILL)
            job.kill_at = None
            self._state.cond.notify_all()
