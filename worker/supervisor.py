"""The supervisor's half of running a job: start the job side in the job's Python and read its outcome.

``worker.job_side`` says how the two processes split the work. Here: the job side's folder (its own
copy of the standard-library-only modules and of cloudpickle's package, nothing else of this Python's
site-packages), its input, its process (the job's interpreter, isolated: ``-I``, so no
``PYTHONPATH``, user site or working directory on its path; ``-S`` too when ``REMOTE_BATCH_JOB_SITE``
names the site folders it gets instead of the interpreter's own), the signals forwarded to it, and
what the job ended with when it died before writing its outcome (a signal, the memory limit, the
user's ``os._exit``); and, when the supervisor is root in the worker image, the job side's own user
(``worker.job_user``: its uid and group, no other group, its ``HOME``), with its folder arranged so
it reads its modules and input and writes only its outcome.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from worker import fork_server, job_side
from worker.encoding import EncodedOutputs, EncodedResult, encode_outcome, encode_result
from worker.job_user import JobUser, share_read_only
from worker.runner import (
    EXIT_USER_ERROR,
    JobError,
    JobInput,
    Outcome,
    exit_code_of,
    killed_by_signal,
    memory_reason,
    oom_kill_count,
    parent_death_signal_hook,
)
from worker.settings import JOB_UID

#: The interpreter the job side runs in (the job's ``pythonVersion``); this one when unset.
JOB_PYTHON_VARIABLE = "REMOTE_BATCH_JOB_PYTHON"
#: What the supervisor keeps out of the job side's environment: its own import path and settings.
_SERVICE_ONLY_VARIABLES = ("PYTHONPATH", "PYTHONHOME", JOB_PYTHON_VARIABLE, JOB_UID)
#: The signals passed on to the job side (AWS Batch's terminate is SIGTERM, then SIGKILL).
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


@dataclass(frozen=True)
class JobRun:
    """A finished job side: its outputs' parts (``encoded(notes)``) and the job's exit code."""

    messages: list[str]
    error: JobError | None
    outputs: EncodedResult | None
    exit_code: int

    @classmethod
    def from_outcome(cls, outcome: Outcome) -> JobRun:
        """An outcome of the runner in this process, encoded as the job side would have."""
        return cls(outcome.messages, outcome.error, encode_result(outcome.result), outcome.exit_code)

    def encoded(self, notes: list[str]) -> EncodedOutputs:
        """The outputs with ``notes`` after the runner's messages (e.g. files not uploaded)."""
        if self.outputs is None:
            return encode_outcome(Outcome(messages=self.messages, error=self.error), notes)
        return self.outputs.with_messages([*self.messages, *notes], self.error)


def job_side_command(
    python: str, root: Path, folder: Path, output_dir: Path, memory_gib: int | None, *, own_site: bool
) -> list[str]:
    """The argv of the job side: ``python -I [-S] -c BOOTSTRAP ROOT FOLDER OUTPUT_DIR [MEMORY]``."""
    flags = ["-I"] if own_site else ["-I", "-S"]
    memory = "" if memory_gib is None else str(memory_gib)
    return [python, *flags, "-c", job_side.BOOTSTRAP, str(root), str(folder), str(output_dir), memory]


def job_side_environment(
    environ: Mapping[str, str], output_dir: Path, user: JobUser | None = None
) -> dict[str, str]:
    """The job side's environment: the job's, without the supervisor's own settings; ``HOME`` the
    home of the job side's own ``user`` when it has one."""
    env = {k: v for k, v in environ.items() if k not in _SERVICE_ONLY_VARIABLES}
    env["REMOTE_BATCH_OUTPUT_DIR"] = str(output_dir)
    if user is not None:
        env["HOME"] = user.home
    return env


def prepare_job_folder(folder: Path, user: JobUser) -> None:
    """Arrange the job side's ``folder`` (its modules and input written) for a job side running as
    ``user``: the folder, ``lib/`` and ``input/`` root's and read only (folders 0755, files 0644),
    ``outcome/`` the user's alone (0700), the one place it writes (``worker.job_user``)."""
    share_read_only(folder)
    user.own_folder(folder / job_side.OUTCOME_DIR)


def run_in_job_python(
    job: JobInput,
    *,
    output_dir: Path,
    memory_gib: int | None,
    environ: Mapping[str, str],
    user: JobUser | None = None,
    work_dir: Path | None = None,
) -> JobRun:
    """Run ``job`` in the job side and return what it recorded.

    The job side is a process forked from this process's zygote when the fork server is enabled
    (``worker.fork_server.enable``; a zygote that is gone before the job starts is replaced by a fresh
    interpreter for this job), else a fresh interpreter; either way its own process, limits, working
    folder and environment, and the same outcome.

    Parameters
    ----------
    job : JobInput
        The parsed input (the supervisor checked it; the job side reads it again from its files).
    output_dir : Path
        ``$REMOTE_BATCH_OUTPUT_DIR`` of the job.
    memory_gib : int or None
        The machine class's memory, for the memory sentences.
    environ : Mapping[str, str]
        The job's environment; ``REMOTE_BATCH_JOB_PYTHON`` names the interpreter (this one when
        unset), ``REMOTE_BATCH_JOB_SITE`` the site folders it gets instead of its own.
    user : JobUser or None
        The job side's own user (``worker.job_user.job_user``; ``output_dir`` must be its); None:
        the supervisor's.
    work_dir : Path or None
        The folder the job's code starts in; this process's working folder when None.

    Returns
    -------
    JobRun
        The job side's outcome; when it died without one (a signal, the kernel's memory killer, the
        user's ``os._exit``), an error saying so with the process's exit code.

    Raises
    ------
    OSError
        The job's interpreter could not be started.
    """
    python = environ.get(JOB_PYTHON_VARIABLE) or sys.executable
    env = job_side_environment(environ, output_dir, user)
    cwd = work_dir if work_dir is not None else Path.cwd()
    server = fork_server.server_for(python, env, user)
    with tempfile.TemporaryDirectory(prefix="remote-batch-job-side-", ignore_cleanup_errors=True) as tmp:
        folder = Path(tmp)
        job_side.write_input(folder, job)
        if user is not None:
            prepare_job_folder(folder, user)
        oom_kills_before = oom_kill_count()
        for stream in (sys.stdout, sys.stderr):  # the supervisor's lines stay in order with the job's
            with contextlib.suppress(ValueError, OSError):
                stream.flush()
        returncode: int | None = None
        received: list[int] = []
        if server is not None:
            try:
                returncode = _run_forked(
                    server,
                    folder,
                    output_dir=output_dir,
                    memory_gib=memory_gib,
                    env=env,
                    cwd=cwd,
                    received=received,
                )
            except fork_server.ForkServerGone:
                returncode = None
        if returncode is None:
            returncode = _run_fresh(
                python,
                folder,
                output_dir=output_dir,
                memory_gib=memory_gib,
                environ=environ,
                env=env,
                cwd=cwd,
                user=user,
                received=received,
            )
        if received:
            _end_as_terminated(received[0])
        recorded = job_side.read_outcome(folder)
    if recorded is not None:
        return JobRun(recorded.messages, recorded.error, recorded.result, recorded.exit_code)
    oom_killed = (oom_kill_count() or 0) > (oom_kills_before or 0)
    return _ended_without_outcome(returncode, memory_gib, oom_killed=oom_killed)


def _run_forked(
    server: fork_server.ForkServer,
    folder: Path,
    *,
    output_dir: Path,
    memory_gib: int | None,
    env: Mapping[str, str],
    cwd: Path,
    received: list[int],
) -> int:
    """The job side of ``folder`` forked from ``server``; its return code. The signals this process
    gets meanwhile are forwarded and appended to ``received``. Raises ``ForkServerGone``."""
    with contextlib.ExitStack() as stack:

        def on_started(send_signal: Callable[[int], None]) -> None:
            stack.enter_context(_forwarding_signals(send_signal, received))

        return server.run(
            folder, output_dir=output_dir, memory_gib=memory_gib, environ=env, cwd=cwd, on_started=on_started
        )


def _run_fresh(
    python: str,
    folder: Path,
    *,
    output_dir: Path,
    memory_gib: int | None,
    environ: Mapping[str, str],
    env: Mapping[str, str],
    cwd: Path,
    user: JobUser | None,
    received: list[int],
) -> int:
    """The job side of ``folder`` in a fresh interpreter ``python``; its return code (the signals as
    ``_run_forked``). Raises ``OSError`` when it cannot be started."""
    root = fork_server.job_side_root(folder / "lib")
    if user is not None:
        share_read_only(folder / "lib")
    argv = job_side_command(
        python, root, folder, output_dir, memory_gib, own_site=not environ.get(job_side.SITE_VARIABLE)
    )
    # It dies with the supervisor (SIGKILL, Linux), as a command the runner starts dies with it;
    # as its own user, the uid and groups are set before that hook runs (it survives them).
    process = subprocess.Popen(  # noqa: S603 - the job's interpreter on the job side's bootstrap
        argv,
        env=dict(env),
        cwd=str(cwd),
        preexec_fn=parent_death_signal_hook(),  # noqa: PLW1509 - prctl only, between fork and exec
        **(user.process_options() if user is not None else {}),
    )
    with _forwarding_signals(process.send_signal, received):
        return process.wait()


def _ended_without_outcome(returncode: int, memory_gib: int | None, *, oom_killed: bool) -> JobRun:
    """The outcome of a job side that ended before recording one."""
    if returncode == 0:
        note = "The job's Python exited before its result was recorded (os._exit(0)): no result"
        return JobRun([note], None, None, 0)
    exit_code = exit_code_of(returncode)
    if oom_killed:
        reason = memory_reason(memory_gib)
        error = JobError(type="MemoryError", message=reason, traceback="", reason=reason)
    elif returncode < 0:
        error = killed_by_signal("Killed", "The job's Python", -returncode)
    else:
        error = JobError(
            type="SystemExit",
            message=f"The job's Python exited with code {returncode} before its outcome was recorded.",
            traceback="",
            reason=f"Exited with code {returncode}",
        )
    _report(error.as_message())
    return JobRun([error.as_message()], error, None, exit_code or EXIT_USER_ERROR)


def _report(text: str) -> None:
    with contextlib.suppress(ValueError, OSError):
        print(text, file=sys.stderr, flush=True)


def _end_as_terminated(signum: int) -> None:
    """End the supervisor by ``signum``, recording nothing: the job was ended from outside (AWS Batch's
    TerminateJob, a cap, the local stack stopping send SIGTERM), so the reason the service gave it
    stands, as when the worker ran the job in its own process and died of the signal."""
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # reached only if the signal is blocked


@contextmanager
def _forwarding_signals(send_signal: Callable[[int], None], received: list[int]) -> Iterator[list[int]]:
    """While the job side runs, a SIGTERM, SIGINT or SIGHUP to the supervisor goes to it through
    ``send_signal`` (the user's code may clean up); each is appended to ``received`` (yielded), in
    order (it stays empty when the job side ended by itself)."""

    def forward(signum: int, _frame: FrameType | None) -> None:
        received.append(signum)
        with contextlib.suppress(OSError):
            send_signal(signum)

    previous = {}
    for signum in _FORWARDED:
        with contextlib.suppress(ValueError, OSError):  # not the main thread: nothing to forward
            previous[signum] = signal.signal(signum, forward)
    try:
        yield received
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
