"""A job process's limits (CPU affinity, address space, death with its runner) and signals to it."""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
from collections.abc import Callable

import psutil

from remote_batch_local.executor.job import BatchJob
from remote_batch_local.sandbox import namespace_members

_PR_SET_PDEATHSIG = 1
# Resolved once here: the forked child must not build ctypes objects before exec.
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def signal_job(job: BatchJob, signum: int) -> None:
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


def limit_worker(cpus: frozenset[int], memory_bytes: int, parent_pid: int) -> Callable[[], None]:
    """The ``preexec_fn`` of a worker: die with the executor, pin CPUs, cap the address space."""

    def apply() -> None:
        # Runs in the forked child before exec: only async-signal-safe work, no locks, no logging.
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent_pid:  # the executor died before prctl took effect
            os._exit(137)
        os.sched_setaffinity(0, cpus)
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    return apply
