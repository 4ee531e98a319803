"""Warm workers: sandboxed worker processes started ahead of need, each waiting for one job.

A job's worker spends most of its short life starting: a fresh interpreter imports boto3, cloudpickle
and the runner and builds an S3 client (about 0.4 s of a 0.8 s ``2 + 2`` round trip, 1-2 s a child of
an array under load), then the job side starts the job's own interpreter (docs/local-stack.md "Warm
workers" has the figures). The pool starts both before a job needs them.

Why a box per worker, and a fork server inside it: a job's box is made as its process starts.
bubblewrap binds the job's own folder and nothing else of the stack's, makes a PID namespace whose init
takes every process of the job down with it, and starts a new session. A fork server outside the box
would hand out processes that are in no box; one shared by several boxes would put jobs in one
namespace, able to see and signal each other and each other's folders. So each warm worker is what a
job's process is today, started early: its own sandbox (``Sandbox.command``) over a fresh working
directory, its own session (so its own process group), dying with the executor (``PR_SET_PDEATHSIG``),
running ``python -u -m worker.warm``, which imports the worker, loads the S3 models and starts, inside
its box, the fork server of the job side (``worker.fork_server``: a zygote in the stack's default job
Python that has imported the job side and forks the job's process when the job comes, so the job's
interpreter start is paid before the job), then blocks reading its assignment on
stdin. When a job starts, ``WarmPool.take_locked`` takes an idle warm worker, writes the job's
environment (its ``AWS_BATCH_JOB_ID``, array index, credentials, region...), CPU ids and address space
limit to that pipe and closes it; the worker applies the limits to itself, replaces its environment
(also what ``/proc/<pid>/environ`` shows, written over the room its start left for it: process searches by
``AWS_BATCH_JOB_ID`` find it), and runs the job as ``python -m worker`` would (``worker.warm``), its
job side forked from the zygote with the worker's limits and the job's environment. The
job's working directory is the one the worker's box was made over. A warm worker runs one job and exits:
it is never reused, so nothing of one job reaches the next (the zygote never runs user code either).

What a job gets is unchanged: its own process, process group and PID namespace (terminate, timeout
and shutdown kill it through them as before), its limits (set by the worker before any of the job's
code runs; ``RLIMIT_AS`` soft and hard, so the job cannot raise it), its folder, its environment. Its
console is the warm worker's stdout pipe, read from the assignment on (nothing is written before).

The pool's size: at most ``warm_workers`` (default ``WARM_WORKERS``, 2) idle workers and never more than
the host's vCPUs; within that, one per free vCPU, or per queued job when more are queued: an idle host
keeps one per vCPU up to that bound, a busy host with an empty queue starts none. An idle warm worker
holds about 50 MiB (RSS; an interpreter with boto3 loaded) and no CPU; while warming up it caps its
address space at the executor's job memory ceiling. A worker is only taken by a job whose interpreter
start-up variables (``PYTHON*``, ``LD_*``, ``LC_*``, ``LANG``, ``HOME``, ``AWS_DATA_PATH``...) equal the
ones it started with: a job whose environment changes how Python starts runs in a fresh process, as does
every job of a custom ``worker_command`` (the pool runs only for the default worker). A warm worker that
dies before its job (or cannot be written to) is dropped and the job starts the usual way; after
``WARM_FAILURES_TO_DISABLE`` such deaths in a row the pool stops, with a warning.

Crash recovery: each warm worker is recorded in a registry of its own, the ``warm`` subfolder of the
executor's ``ProcessRegistry`` (which cleans it with its own), under its token (``warm-…``, also its
``AWS_BATCH_JOB_ID`` until a job takes it) with its folder and processes, so the next start after a
crash kills it and removes the folder; when a job takes it, the record moves to the job's id.
A stop kills the idle ones and removes their folders and records.

Threads: one ``warm-pool`` thread starts every warm worker and lives until the executor stops (it
must: ``PR_SET_PDEATHSIG`` fires when the forking thread ends).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import psutil

from remote_batch_local.executor.constants import MIB, logger
from remote_batch_local.executor.job import BatchJob
from remote_batch_local.executor.launch import Launcher, new_workdir
from remote_batch_local.executor.settings import ExecutorSettings
from remote_batch_local.executor.state import ExecutorState
from remote_batch_local.sandbox import (
    JOB_MARKER_VARIABLE,
    ProcessRegistry,
    SandboxKind,
    kill_marked_processes,
    namespace_init,
)

#: Idle warm workers kept at most (each holds an interpreter with boto3 loaded, about 50 MiB RSS).
WARM_WORKERS = 2
#: The module a warm worker runs (``python -u -m worker.warm``).
WARM_MODULE = "worker.warm"
#: The prefix of a warm worker's token (its registry record and, until a job takes it, its job id).
WARM_ID_PREFIX = "warm-"
#: A padding variable in a warm worker's environment: room for its job's environment, which the worker
#: writes over its initial one so that ``/proc/<pid>/environ`` shows the job's (``worker.warm``).
WARM_ROOM_VARIABLE = "REMOTE_BATCH_WARM_ROOM"
WARM_ROOM_BYTES = 32 * 1024
#: The subfolder of the executor's ``ProcessRegistry`` holding the idle warm workers' records.
WARM_RECORDS = "warm"
#: How often (s) the pool thread looks for idle warm workers that died, and waits after a failure.
WARM_CHECK_SECONDS = 1.0
WARM_RETRY_SECONDS = 5.0
#: The longest a starting job waits for a warm worker the pool is starting (its ``Popen``), in seconds.
WARM_SPAWN_WAIT_SECONDS = 0.5
#: Warm workers dying before their job, in a row, after which the pool stops.
WARM_FAILURES_TO_DISABLE = 3
#: Bytes of a dead warm worker's output kept for the executor's log.
WARM_OUTPUT_BYTES = 4096
#: Environment variables read while an interpreter starts or the worker's modules load (``AWS_DATA_PATH``:
#: where botocore's preloaded models came from): a job whose values differ runs in a fresh process.
STARTUP_PREFIXES = ("PYTHON", "LD_", "LC_", "MALLOC_", "GLIBC_")
STARTUP_NAMES = frozenset({"HOME", "LANG", "LANGUAGE", "TZ", "AWS_DATA_PATH"})


def startup_variables(env: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``env`` that shape an interpreter's start (``STARTUP_PREFIXES``/``NAMES``)."""
    return {k: v for k, v in env.items() if k.startswith(STARTUP_PREFIXES) or k in STARTUP_NAMES}


@dataclass(eq=False)
class _WarmWorker:
    """An idle warm worker: its token, sandbox process, folder, start-up variables, namespace init."""

    token: str
    process: subprocess.Popen[bytes]
    workdir: Path
    startup: dict[str, str]
    # The bytes of the environment block it started with: the most the job's may take (``worker.warm``).
    block_size: int
    init: psutil.Process | None = None


class WarmPool:
    """Starts warm workers ahead of need and hands each to one job (see the module docstring).

    Parameters
    ----------
    state, settings : ExecutorState, ExecutorSettings
        The executor's (the pool's lists are guarded by ``state.cond``).
    launcher : Launcher
        Builds a box's environment and starts its process.
    size : int
        The most idle warm workers kept; 0, or a custom worker command (``settings.python`` None),
        keeps no pool.
    """

    def __init__(
        self, state: ExecutorState, settings: ExecutorSettings, launcher: Launcher, size: int
    ) -> None:
        self._state = state
        self._settings = settings
        self._launcher = launcher
        self._idle: list[_WarmWorker] = []
        self._closing = False
        self._failures = 0
        self._spawning = False
        self._thread: threading.Thread | None = None
        registry = settings.registry
        self._registry = ProcessRegistry(registry.directory / WARM_RECORDS) if registry is not None else None
        python = settings.python
        self._max = max(0, size) if python is not None else 0
        self._command = [python, "-u", "-m", WARM_MODULE] if python is not None else None

    @property
    def size(self) -> int:
        """The most idle warm workers it keeps now (0 once disabled)."""
        return self._max

    def start(self) -> None:
        """Start the pool thread, if the pool keeps any worker."""
        if self._max:
            self._thread = threading.Thread(target=self._loop, name="warm-pool", daemon=True)
            self._thread.start()

    def _target_locked(self) -> int:
        """How many idle warm workers to keep now: one for each job that may start next (a free vCPU
        may take a job that comes now; a queued job takes a vCPU now or when one frees), at most
        the pool's size and never more than the host's vCPUs (no more jobs run at once)."""
        state = self._state
        if self._closing or state.closed:
            return 0
        queued = len(state.runnable) + len(state.submitted)
        return min(self._max, self._settings.vcpus, max(len(state.free_slots), queued))

    def _loop(self) -> None:
        """The pool thread: start warm workers while fewer are idle than the target, drop dead ones;
        at the stop, let the idle ones go. Never raises: an error is logged and retried later."""
        while True:
            try:
                if not self._round():
                    break
            except Exception:
                logger.exception("warm pool error")
                with self._state.cond:
                    self._spawning = False
                    self._state.cond.notify_all()
                    self._state.cond.wait(WARM_RETRY_SECONDS)
        with self._state.cond:
            idle, self._idle = self._idle, []
        for worker in idle:
            self._dismiss(worker)
        logger.info("warm pool stopped")

    def _round(self) -> bool:
        """Wait until a warm worker is wanted, then start one; False once the pool is stopping."""
        with self._state.cond:
            while True:
                self._drop_dead_locked()
                if self._closing:
                    return False
                if len(self._idle) < self._target_locked():
                    break
                self._state.cond.wait(WARM_CHECK_SECONDS)
            self._spawning = True  # a job starting now waits the moments this takes
        try:
            worker: _WarmWorker | None = self._start_worker()
        except Exception as exc:
            logger.warning("warm worker not started error=%s", exc)
            worker = None
        with self._state.cond:
            self._spawning = False
            self._state.cond.notify_all()
            if worker is None:
                self._failed_locked()
                self._state.cond.wait(WARM_RETRY_SECONDS)
                return True
            self._idle.append(worker)
        # Its namespace's init, for its record (a job that took it meanwhile records it itself).
        init = (
            namespace_init(worker.process.pid)
            if self._settings.sandbox.kind is not SandboxKind.NONE
            else None
        )
        with self._state.cond:
            worker.init = init
            if worker in self._idle and self._registry is not None:
                known = [p for p in (_process(worker.process.pid), init) if p is not None]
                try:
                    self._registry.record(worker.token, worker.workdir, known)
                except OSError as exc:
                    logger.warning("warm worker processes not recorded token=%s error=%s", worker.token, exc)
        return True

    def await_spawning_locked(self) -> None:
        """While the pool is starting a warm worker (``Popen``: moments, not its warm-up), wait for it,
        at most ``WARM_SPAWN_WAIT_SECONDS``: a job starting now takes it rather than start cold."""
        deadline = time.monotonic() + WARM_SPAWN_WAIT_SECONDS
        while self._spawning and not self._idle and not self._closing:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            self._state.cond.wait(remaining)

    def _start_worker(self) -> _WarmWorker:
        """Start one warm worker in its box over a fresh folder, recorded (folder first) in the registry."""
        assert self._command is not None
        token = f"{WARM_ID_PREFIX}{uuid.uuid4()}"
        workdir = new_workdir()
        env = dict(self._settings.worker_environment)
        # The default Python's interpreter and site: the warm worker starts its zygote (worker.warm).
        pythons = self._settings.pythons
        default = pythons.default()
        if default is not None:
            env.update(pythons.by_version[default].environment())
        env[JOB_MARKER_VARIABLE] = token
        env = self._launcher.box_environment(env, workdir)
        env[WARM_ROOM_VARIABLE] = "." * WARM_ROOM_BYTES
        if self._registry is not None:
            self._registry.record(token, workdir)
        ceiling = self._settings.memory_mib * MIB
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        if hard != resource.RLIM_INFINITY:
            ceiling = min(ceiling, hard)
        cpus = frozenset(self._settings.cpu_of_slot)
        try:
            process = self._launcher.popen_in_box(
                self._command, workdir, env, stdin=subprocess.PIPE, cpus=cpus, memory_bytes=ceiling
            )
        except BaseException:
            _remove_folder(workdir)
            if self._registry is not None:
                self._registry.forget(token)
            raise
        logger.debug("warm worker started token=%s pid=%d", token, process.pid)
        return _WarmWorker(token, process, workdir, startup_variables(env), _block_size(env))

    def _drop_dead_locked(self) -> None:
        """Remove idle warm workers whose process ended (logging what they printed)."""
        for worker in [w for w in self._idle if w.process.poll() is not None]:
            self._idle.remove(worker)
            logger.warning(
                "warm worker died before its job token=%s exit_status=%s output=%r",
                worker.token,
                worker.process.returncode,
                _leftover_output(worker.process),
            )
            self._dismiss(worker)
            self._failed_locked()

    def _failed_locked(self) -> None:
        self._failures += 1
        if self._failures >= WARM_FAILURES_TO_DISABLE and self._max:
            logger.warning(
                "warm workers disabled after %d failures in a row: jobs start a fresh worker each",
                self._failures,
            )
            self._max = 0

    def _dismiss(self, worker: _WarmWorker) -> None:
        """Kill an idle warm worker (its box and namespace), then remove its folder and its record."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(worker.process.pid, signal.SIGKILL)
        if worker.init is not None:
            with contextlib.suppress(psutil.Error):
                worker.init.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.process.wait(WARM_CHECK_SECONDS)
        kill_marked_processes(frozenset({worker.token}))
        for pipe in (worker.process.stdin, worker.process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        _remove_folder(worker.workdir)
        if self._registry is not None:
            self._registry.forget(worker.token)

    def stop(self, timeout: float) -> None:
        """Stop the pool thread: the idle warm workers are killed and their folders removed."""
        with self._state.cond:
            self._closing = True
            self._state.cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)

    def take_locked(self, job: BatchJob, credentials: Mapping[str, str]) -> subprocess.Popen[bytes] | None:
        """Write ``job``'s assignment to the first live idle warm worker whose start-up variables
        match its environment; returns that worker's process, or None when none could take it."""
        cpus, memory_bytes = self._launcher.job_limits(job)
        jobs_registry = self._settings.registry
        for worker in list(self._idle):
            if worker.process.poll() is not None:
                continue  # the pool thread drops it
            env = self._launcher.environment(job, worker.workdir)
            env.update(credentials)
            if startup_variables(env) != worker.startup or _block_size(env) > worker.block_size:
                continue
            self._idle.remove(worker)
            self._state.cond.notify_all()  # the pool starts a replacement
            if jobs_registry is not None and self._registry is not None:
                # The job's record first: a crash between the two leaves both, never neither.
                known = [p for p in (_process(worker.process.pid), worker.init) if p is not None]
                jobs_registry.record(job.job_id, worker.workdir, known)
                self._registry.forget(worker.token)
            assignment = {"environ": env, "cpus": sorted(cpus), "memoryBytes": memory_bytes}
            try:
                assert worker.process.stdin is not None
                worker.process.stdin.write(json.dumps(assignment).encode())
                worker.process.stdin.close()
            except (OSError, ValueError) as exc:
                logger.warning(
                    "warm worker lost token=%s batch_job_id=%s error=%s", worker.token, job.job_id, exc
                )
                self._dismiss(worker)  # it is dead or dying: no wait to speak of
                if jobs_registry is not None:
                    jobs_registry.forget(job.job_id)
                continue
            self._failures = 0
            job.workdir = worker.workdir
            job.warm_token = worker.token
            logger.debug("job in a warm worker batch_job_id=%s token=%s", job.job_id, worker.token)
            return worker.process
        return None


def _block_size(env: Mapping[str, str]) -> int:
    """Bytes of ``env`` as a process's initial environment block (``NAME=value`` and a NUL each)."""
    return sum(len(os.fsencode(k)) + len(os.fsencode(v)) + 2 for k, v in env.items())


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _leftover_output(process: subprocess.Popen[bytes]) -> bytes:
    """Up to ``WARM_OUTPUT_BYTES`` of what an ended process left in its stdout pipe (no waiting)."""
    if process.stdout is None:
        return b""
    try:
        os.set_blocking(process.stdout.fileno(), False)
        return process.stdout.read(WARM_OUTPUT_BYTES) or b""
    except (OSError, ValueError):
        return b""


def _remove_folder(workdir: Path) -> None:
    shutil.rmtree(workdir, ignore_errors=True)
