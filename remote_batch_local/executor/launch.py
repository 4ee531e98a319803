"""Job process launch: the worker's environment, its sandboxed command and limits, its PID namespace."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import psutil

from functions.domain.environments import ENVIRONMENT_HASH_VARIABLE
from remote_batch_local.batch_arrays import child_environment
from remote_batch_local.executor.constants import (
    MIB,
    OPERATOR_LOG_NAME,
    OPERATOR_LOG_VARIABLE,
    logger,
)
from remote_batch_local.executor.job import BatchJob
from remote_batch_local.executor.limits import limit_worker
from remote_batch_local.executor.settings import ExecutorSettings
from remote_batch_local.executor.state import ExecutorState
from remote_batch_local.sandbox import (
    JOB_DIR_PREFIX,
    JOB_MARKER_VARIABLE,
    SandboxKind,
    namespace_init,
    pid_namespace,
    sandbox_path,
)
from worker.job_side import SITE_VARIABLE

_HASH = re.compile(r"^[0-9a-f]{64}$")


def new_workdir() -> Path:
    """A fresh working directory for a job (``remote-batch-job-*`` in the system temp dir), with the
    ``tmp`` folder its ``TMPDIR`` names."""
    workdir = Path(tempfile.mkdtemp(prefix=JOB_DIR_PREFIX))
    (workdir / "tmp").mkdir()
    return workdir


class Launcher:
    """Starts a job's worker process in its sandbox, with its environment and limits (a fresh
    process; ``warm.WarmPool`` hands out processes started ahead)."""

    def __init__(self, state: ExecutorState, settings: ExecutorSettings) -> None:
        self._state = state
        self._settings = settings

    def environment(self, job: BatchJob, workdir: Path) -> dict[str, str]:
        """The worker's environment for ``job`` in ``workdir``: the base one, the submission's, the
        job side's site folder when the submission names an environment build, an array child's index
        and size, the zone's region, the Batch variables (``AWS_BATCH_JOB_ID``, ``AWS_BATCH_JOB_ATTEMPT``,
        ``AWS_BATCH_JQ_NAME``), the thread counts (its vCPUs) and the box's (``box_environment``)."""
        env = dict(self._settings.worker_environment)
        env.update(job.submission.environment)
        # The job definition's "image": the interpreter of its Python version runs the job side.
        python = self._settings.pythons.for_job_definition(job.submission.job_definition)
        if python is not None:
            env.update(python.environment())
        build = env.get(ENVIRONMENT_HASH_VARIABLE)
        builds = self._settings.environment_builds
        if build is not None and builds is not None and _HASH.fullmatch(build):
            # The environment's packages, and nothing of the interpreter's or the image's (``-S``).
            env[SITE_VARIABLE] = str(builds / build / "site")
        if job.array is not None and job.index is not None:
            env.update(child_environment({}, job.index, job.array.size))
        threads = str(job.vcpus)
        env.update(
            {
                "AWS_REGION": job.gateway.region,
                "AWS_DEFAULT_REGION": job.gateway.region,
                JOB_MARKER_VARIABLE: job.job_id,
                "AWS_BATCH_JOB_ATTEMPT": str(job.attempt_number),
                "AWS_BATCH_JQ_NAME": job.submission.job_queue.rsplit("/", 1)[-1],
                "OPENBLAS_NUM_THREADS": threads,
                "OMP_NUM_THREADS": threads,
                "MKL_NUM_THREADS": threads,
            }
        )
        return self.box_environment(env, workdir)

    def box_environment(self, env: dict[str, str], workdir: Path) -> dict[str, str]:
        """``env`` with what every process in a job's box gets: ``PYTHONPATH`` (the import root first),
        the temporary directory and operator log inside ``workdir``, and a ``PATH`` (the sandbox's)."""
        tmp = str(workdir / "tmp")
        pythonpath = [str(self._settings.import_root), *filter(None, [env.get("PYTHONPATH")])]
        env.update(
            {
                "PYTHONPATH": os.pathsep.join(pythonpath),
                "TMPDIR": tmp,
                "TEMP": tmp,
                "TMP": tmp,
                OPERATOR_LOG_VARIABLE: str(workdir / OPERATOR_LOG_NAME),
            }
        )
        env.setdefault("PATH", os.environ.get("PATH", os.defpath))
        if self._settings.sandbox.kind is SandboxKind.BUBBLEWRAP:
            env["PATH"] = sandbox_path(env["PATH"])
        return env

    def job_limits(self, job: BatchJob) -> tuple[frozenset[int], int]:
        """The CPU ids ``job`` is pinned to and its address-space limit in bytes (never above this
        process's own hard limit)."""
        cpus = frozenset(self._settings.cpu_of_slot[slot] for slot in job.slots)
        memory_bytes = job.memory_mib * MIB
        hard = resource.getrlimit(resource.RLIMIT_AS)[1]
        if hard != resource.RLIM_INFINITY:
            memory_bytes = min(memory_bytes, hard)
        return cpus, memory_bytes

    def spawn_locked(self, job: BatchJob, credentials: Mapping[str, str]) -> subprocess.Popen[bytes]:
        """Start ``job``'s worker in a fresh folder and sandbox, recorded in the registry first.

        Raises
        ------
        OSError, subprocess.SubprocessError
            The worker's program is missing or the sandbox could not be started.
        """
        cpus, memory_bytes = self.job_limits(job)
        command = list(self._settings.command)
        registry = self._settings.registry
        job.workdir = workdir = new_workdir()
        env = self.environment(job, workdir)
        env.update(credentials)
        # Inside a sandbox a missing program is only found missing after the sandbox started: look first.
        if shutil.which(command[0], path=env["PATH"]) is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command[0])
        if registry is not None:  # before any process exists: a crash from here on is cleaned up
            registry.record(job.job_id, workdir)
        return self.popen_in_box(
            command, workdir, env, stdin=subprocess.DEVNULL, cpus=cpus, memory_bytes=memory_bytes
        )

    def popen_in_box(
        self,
        command: list[str],
        workdir: Path,
        env: Mapping[str, str],
        *,
        stdin: int,
        cpus: frozenset[int],
        memory_bytes: int,
    ) -> subprocess.Popen[bytes]:
        """Start ``command`` in the sandbox, in ``workdir``, with ``env``: a new session (its own process
        group), stdout and stderr on one pipe, pinned to ``cpus``, its address space capped at
        ``memory_bytes``, dying with the calling thread (``limits.limit_worker``).

        Raises
        ------
        OSError, subprocess.SubprocessError
            The sandbox could not be started.
        """
        return subprocess.Popen(  # noqa: S603 - the command is the executor's own worker command
            self._settings.sandbox.command(command, workdir, self._read_only_paths()),
            cwd=workdir,
            env=env,
            stdin=stdin,
            stdout=subprocess.PIPE,
            # One pipe for both streams: the log keeps the order the program wrote its lines in
            # (two pipes read by two threads would interleave them at random).
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            preexec_fn=limit_worker(cpus, memory_bytes, os.getpid()),  # noqa: PLW1509
        )

    def _read_only_paths(self) -> list[Path]:
        """What a sandboxed job sees read-only besides the system directories: the interpreter's
        installation and virtualenv, the worker command's own installation, the worker package, every
        job Python's installation and the environment builds (a warm worker's box is made before its
        job is known)."""
        paths = [Path(sys.base_prefix), Path(sys.prefix), self._settings.import_root / "worker"]
        paths += self._settings.pythons.read_only_paths()
        if self._settings.environment_builds is not None:
            paths.append(self._settings.environment_builds)
        program = Path(self._settings.command[0])
        if program.is_absolute() and not str(program).startswith(("/usr/", "/bin/", "/sbin/")):
            paths.append(program.parent.parent)
        return paths

    def watch_namespace(self, job: BatchJob, process: subprocess.Popen[bytes]) -> None:
        """Find the init of the job's PID namespace and record it with the sandbox's pid (takes the
        state's lock itself)."""
        init = namespace_init(process.pid) if self._settings.sandbox.kind is not SandboxKind.NONE else None
        registry = self._settings.registry
        with self._state.cond:
            if init is not None:
                job.init = init
                job.namespace = pid_namespace(init.pid)
        if registry is not None and job.workdir is not None:
            known: list[psutil.Process] = []
            with contextlib.suppress(psutil.Error):  # the sandbox may have exited already
                known.append(psutil.Process(process.pid))
            try:
                registry.record(job.job_id, job.workdir, [*known, *([init] if init else [])])
            except OSError as exc:  # the job runs on; only a crash's cleanup would miss it
                logger.warning("job processes not recorded batch_job_id=%s error=%s", job.job_id, exc)
