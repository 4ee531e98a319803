"""The supervisor's half of a job in an environment's own image: the job side runs in the job container.

``worker.job_side`` describes the exchange folder both containers mount. Here: fill it (the job side's
modules, the input, ``args.json``, then ``ready``), relay the job's console (``console``) to this
process's stdout as it grows, so the job's one log stream (the supervisor's) carries the user's output
as it is printed, and read the outcome once the launcher wrote ``exit.json``.

The job container may also end without writing it (its image has no ``python3``: exit 127; the kernel
killed the launcher; the image failed to start): the supervisor sees it stopped through the ECS task
metadata endpoint (``ECS_CONTAINER_METADATA_URI_V4``/``task``: the job container's ``KnownStatus`` and
``ExitCode``; AWS Batch on ECS sets the variable in every container) and ends the job with that.

A SIGTERM (AWS Batch's TerminateJob, a timeout) reaches both containers: the job container's launcher
passes it to the user's code, and the supervisor dies of it recording nothing, as
``worker.supervisor`` does (the service's reason stands).
"""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, BinaryIO

from worker import job_side
from worker.fork_server import job_side_root
from worker.runner import JobError, JobInput
from worker.settings import JOB_UID
from worker.supervisor import JobRun, _end_as_terminated, _ended_without_outcome, _report

#: The supervisor's variable naming the exchange folder (``functions.domain.images.EXCHANGE_VARIABLE``).
EXCHANGE_VARIABLE = "REMOTE_BATCH_EXCHANGE_DIR"
#: The Python the environment names (``functions.logic.batch_submission``): the image's must be it.
IMAGE_PYTHON_VARIABLE = "REMOTE_BATCH_IMAGE_PYTHON"
#: The job container's name in the job definition (``functions.domain.images.JOB_CONTAINER``).
JOB_CONTAINER = "job"
#: ECS's task metadata endpoint (version 4), set in each container of an ECS task.
METADATA_VARIABLE = "ECS_CONTAINER_METADATA_URI_V4"
#: How often the console is read and the job container's state checked (seconds).
POLL_SECONDS = 0.2
#: How often ECS's metadata is asked (seconds): it is a local HTTP call, but it need not be hot.
METADATA_EVERY_SECONDS = 2.0
#: What a shell answers for a command it cannot find: the image has no ``python3``.
EXIT_NOT_FOUND = 127

ContainerState = Callable[[], "int | None"]
"""The job container's exit code once it stopped, None while it runs (or when it cannot be known)."""


def output_dir(exchange: Path) -> Path:
    """``$REMOTE_BATCH_OUTPUT_DIR`` of an image job: in the exchange folder, so both containers see it."""
    return exchange / "outputs"


def work_dir(exchange: Path) -> Path:
    """The working folder an image job's code starts in (``exchange/work``, made here, writable by
    the job container's user): the supervisor puts the parents' ``inputs/`` in it first."""
    return _shared(exchange / job_side.WORK_FOLDER)


def share_tree(folder: Path) -> None:
    """Make what the supervisor wrote under ``folder`` (the parents' inputs) the job container's to
    change, whichever user its image runs as: folders 0777, files 0666, links left as they are."""
    for path in [folder, *folder.rglob("*")]:
        if path.is_symlink():
            continue
        path.chmod(0o777 if path.is_dir() else 0o666)


def _shared(folder: Path) -> Path:
    """Make ``folder`` writable by the job container's user, whichever the image runs as (the
    supervisor runs as root in its own image): 0777, as the console file is 0666. The exchange is this
    job's own task volume, shared with no other job and no host folder; ``lib/`` stays root's (0755,
    read only unless the image runs as root), and the supervisor reads what the job container writes
    there (``console``, ``exit.json``, ``job/outcome/``) following no link (``job_side.open_regular``)."""
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o777)
    return folder


def prepare(exchange: Path, job: JobInput, *, memory_gib: int | None, environ: Mapping[str, str]) -> None:
    """Fill the exchange folder for the job container and write ``ready`` last."""
    job_side_root(exchange / "lib")
    job_folder = _shared(exchange / job_side.JOB_FOLDER)
    job_side.write_input(job_folder, job)
    outputs = _shared(output_dir(exchange))
    console = exchange / job_side.CONSOLE_FILE
    console.touch()
    console.chmod(0o666)
    _shared(exchange)
    variables = {
        k: v
        for k, v in environ.items()
        if k.startswith(("REMOTE_BATCH_", "AWS_BATCH_")) and k not in (EXCHANGE_VARIABLE, JOB_UID)
    }
    variables["REMOTE_BATCH_OUTPUT_DIR"] = str(outputs)
    args = {
        "outputDir": str(outputs),
        "memoryGib": memory_gib,
        "environment": variables,
        "python": environ.get(IMAGE_PYTHON_VARIABLE) or None,
    }
    (exchange / job_side.ARGS_FILE).write_text(json.dumps(args), encoding="utf-8")
    (exchange / job_side.READY_FILE).write_text("", encoding="utf-8")


def metadata_state(environ: Mapping[str, str]) -> ContainerState:
    """The job container's state from ECS's task metadata (``KnownStatus`` ``STOPPED`` and its
    ``ExitCode``); always None where there is no endpoint (tests, the local stack)."""
    endpoint = environ.get(METADATA_VARIABLE)
    if not endpoint:
        return lambda: None
    last = [0.0]

    def state() -> int | None:
        now = time.monotonic()
        if now - last[0] < METADATA_EVERY_SECONDS:
            return None
        last[0] = now
        try:
            with urllib.request.urlopen(f"{endpoint}/task", timeout=2) as response:  # noqa: S310 - ECS's local endpoint
                task: dict[str, Any] = json.loads(response.read())
        except (OSError, ValueError):
            return None
        for container in task.get("Containers", []):
            if container.get("Name") == JOB_CONTAINER and container.get("KnownStatus") == "STOPPED":
                code = container.get("ExitCode")
                return int(code) if isinstance(code, int) else 1
        return None

    return state


def relay(console: BinaryIO, sink: BinaryIO) -> int:
    """Copy what the console gained since last read to ``sink``; the bytes copied."""
    copied = 0
    while chunk := console.read(64 * 1024):
        sink.write(chunk)
        copied += len(chunk)
    if copied:
        sink.flush()
    return copied


def run_in_job_container(
    job: JobInput,
    *,
    exchange: Path,
    memory_gib: int | None,
    environ: Mapping[str, str],
    container_state: ContainerState | None = None,
    sink: BinaryIO | None = None,
) -> JobRun:
    """Run ``job`` in the job container and return what it recorded.

    Parameters
    ----------
    job : JobInput
        The parsed input.
    exchange : Path
        The shared folder (``$REMOTE_BATCH_EXCHANGE_DIR``).
    memory_gib : int or None
        The machine class's memory, for the memory sentences.
    environ : Mapping[str, str]
        The job's environment (its ``REMOTE_BATCH_*`` and ``AWS_BATCH_*`` variables reach the job).
    container_state : ContainerState, optional
        The job container's exit code once stopped (default: ECS's task metadata).
    sink : BinaryIO, optional
        Where the job's console goes (default: this process's stdout).

    Returns
    -------
    JobRun
        The job side's outcome; when the job container ended without one, an error saying how.
    """
    state = container_state or metadata_state(environ)
    out = sink or sys.stdout.buffer
    prepare(exchange, job, memory_gib=memory_gib, environ=environ)
    stopped: int | None = None
    with _dying_of_termination(), job_side.open_regular(exchange / job_side.CONSOLE_FILE) as console:
        while True:
            relay(console, out)
            returncode = job_side.read_exit(exchange)
            if returncode is not None:
                break
            stopped = state()
            if stopped is not None:
                break
            time.sleep(POLL_SECONDS)
        relay(console, out)
    job_folder = exchange / job_side.JOB_FOLDER
    recorded = job_side.read_outcome(job_folder)
    if recorded is not None:
        return JobRun(recorded.messages, recorded.error, recorded.result, recorded.exit_code)
    if returncode is None:
        return _stopped_container(stopped if stopped is not None else 1)
    return _ended_without_outcome(returncode, memory_gib, oom_killed=False)


def _stopped_container(exit_code: int) -> JobRun:
    """The outcome of a job container that stopped before its launcher wrote ``exit.json``."""
    if exit_code == EXIT_NOT_FOUND:
        reason = "The image has no python3"
        message = f"{reason}: an environment's image needs python3 (3.9 or later) on its PATH."
    else:
        reason = f"The job's container exited with code {exit_code}"
        message = f"{reason} before the job ended (the image's python3 must be 3.9 or later)."
    error = JobError(type="EnvironmentError", message=message, traceback="", reason=reason)
    _report(error.as_message())
    return JobRun([error.as_message()], error, None, exit_code or 1)


@contextmanager
def _dying_of_termination() -> Iterator[None]:
    """While the job container runs, a SIGTERM, SIGINT or SIGHUP ends the supervisor by that signal,
    recording nothing (the job container received its own from ECS)."""

    def die(signum: int, _frame: FrameType | None) -> None:
        _end_as_terminated(signum)

    previous = {}
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        with contextlib.suppress(ValueError, OSError):  # not the main thread: nothing to handle
            previous[signum] = signal.signal(signum, die)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def exchange_of(environ: Mapping[str, str]) -> Path | None:
    """The exchange folder when this is an image job's supervisor, else None."""
    value = environ.get(EXCHANGE_VARIABLE)
    return Path(value) if value else None
