"""The supervisor's half of the fork server: a zygote in the job's Python that forks each job side.

``worker.zygote`` is the job side's half and says what a forked job gets. Here: starting the zygote
(``python -I [-S] -c zygote.BOOTSTRAP ROOT FD``, in the job's interpreter, as the job side's own user
when the supervisor switches: ``worker.job_user``, with its own copy of the job side's modules in a
folder of its own, read only to that user), asking it to run one job folder (``ForkServer.run``: the
job's stdin, stdout and stderr handed over with the request, so its output goes where the
supervisor's goes at that moment: the job log, an array item's part of the console), forwarding the
supervisor's SIGTERM, SIGINT and SIGHUP to the job, and reading its return code.

A zygote serves the jobs whose interpreter start would be the same: the same Python, the same site
folders (``REMOTE_BATCH_JOB_SITE``), the same user and the same variables that shape an interpreter's
start (:data:`STARTUP_PREFIXES`, :data:`STARTUP_NAMES`; ``-I`` ignores ``PYTHON*``). Another job runs
in a zygote started for it.

Who uses one: a process calls :func:`enable` once, and from then on ``worker.supervisor.run_in_job_python``
runs each job through the process's zygote for that job (:func:`server_for`: kept, or started when
the job's Python differs from the last one's). The local stack's warm worker (``worker.warm``) enables
it and starts the zygote for the stack's default Python before its job is known (:func:`prestart`);
a container running many array items enables it before its first item. ``python -m worker`` running
one job starts the job side the usual way (a zygote would only add a fork to its one start), and so
does an environment's own image (the job side runs in the job container, ``worker.job_container``).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cloudpickle

from worker import job_side, zygote
from worker.job_user import JobUser, share_read_only
from worker.runner import parent_death_signal_hook

#: Variables that shape an interpreter's start (with ``-I``: not ``PYTHON*``); a job whose values
#: differ from the zygote's runs in another zygote.
STARTUP_PREFIXES = ("LD_", "LC_", "MALLOC_", "GLIBC_")
STARTUP_NAMES = frozenset({"LANG", "LANGUAGE"})


class ForkServerGone(Exception):
    """The zygote ended (or refused the request) before it started the job: nothing of the job ran."""


def startup_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables of ``environ`` that shape the job's interpreter's start."""
    return {k: v for k, v in environ.items() if k.startswith(STARTUP_PREFIXES) or k in STARTUP_NAMES}


@dataclass(frozen=True)
class ZygoteKey:
    """What a zygote's interpreter start depends on: the Python, the site folders, the user, the
    start-up variables."""

    python: str
    site: str
    user: JobUser | None
    startup: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, python: str, environ: Mapping[str, str], user: JobUser | None) -> ZygoteKey:
        """The key of a job run by ``python`` with ``environ`` (the job side's) as ``user``."""
        site = environ.get(job_side.SITE_VARIABLE) or ""
        return cls(python, site, user, tuple(sorted(startup_variables(environ).items())))


@dataclass(eq=False)
class ForkServer:
    """A running zygote: its key, process, socket and module folder (:meth:`start` makes one)."""

    key: ZygoteKey
    process: subprocess.Popen[bytes]
    channel: socket.socket
    folder: Path
    closed: bool = field(default=False)

    @classmethod
    def start(cls, python: str, environ: Mapping[str, str], user: JobUser | None = None) -> ForkServer:
        """Start a zygote in ``python`` (``-S`` when ``environ`` names site folders), with ``environ``
        (the job side's environment: ``supervisor.job_side_environment``) for its interpreter's start,
        as ``user`` when given. It returns at once: the zygote imports while the caller goes on.

        Raises ``OSError`` when the interpreter cannot be started.
        """
        folder = Path(tempfile.mkdtemp(prefix="remote-batch-zygote-"))
        try:
            root = job_side_root(folder / "lib")
            if user is not None:
                share_read_only(folder)
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            flags = ["-I", "-S"] if environ.get(job_side.SITE_VARIABLE) else ["-I"]
            try:
                process = subprocess.Popen(  # noqa: S603 - the job's interpreter on the zygote's bootstrap
                    [python, *flags, "-c", zygote.BOOTSTRAP, str(root), str(theirs.fileno())],
                    env=dict(environ),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    pass_fds=[theirs.fileno()],
                    cwd=str(folder),
                    # It dies with the supervisor (SIGKILL, Linux), its jobs with it.
                    preexec_fn=parent_death_signal_hook(),  # noqa: PLW1509 - prctl only
                    **(user.process_options() if user is not None else {}),
                )
            finally:
                theirs.close()
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return cls(ZygoteKey.of(python, environ, user), process, ours, folder)

    def serves(self, key: ZygoteKey) -> bool:
        """Whether this zygote is alive and runs the jobs of ``key``."""
        return not self.closed and self.key == key and self.process.poll() is None

    def run(
        self,
        folder: Path,
        *,
        output_dir: Path,
        memory_gib: int | None,
        environ: Mapping[str, str],
        cwd: Path,
        on_started: Callable[[Callable[[int], None]], Any],
    ) -> int:
        """Run the job side on the job ``folder`` (its input written, ``worker.job_side``) in a process
        forked from the zygote, with this process's stdin, stdout and stderr, CPU ids and address space
        limit (soft and hard), ``environ`` as its whole environment and ``cwd`` its working folder.

        ``on_started(send_signal)`` is called once the job's process runs; ``send_signal(signum)``
        passes a signal on to it. Returns the job's return code (negative: killed by that signal;
        ``-9`` when the zygote itself died during the job).

        Raises
        ------
        ForkServerGone
            The zygote is gone or refused the request: the job did not start (run it another way).
        """
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        request = {
            "op": "run",
            "folder": str(folder),
            "outputDir": str(output_dir),
            "memory": "" if memory_gib is None else str(memory_gib),
            "environ": dict(environ),
            "cwd": str(cwd),
            "cpus": sorted(os.sched_getaffinity(0)),
            "rlimitAs": None
            if soft == resource.RLIM_INFINITY and hard == resource.RLIM_INFINITY
            else [soft, hard],
        }
        try:
            socket.send_fds(self.channel, [json.dumps(request).encode("utf-8")], [0, 1, 2])
        except OSError as exc:
            self.close()
            raise ForkServerGone(f"the zygote is gone ({exc})") from exc
        answer = self._receive()
        if answer is None or "started" not in answer:
            self.close()
            raise ForkServerGone(str((answer or {}).get("refused") or "the zygote is gone"))

        def send_signal(signum: int) -> None:
            with contextlib.suppress(OSError):
                self.channel.send(json.dumps({"op": "signal", "signum": signum}).encode("utf-8"))

        on_started(send_signal)
        answer = self._receive()
        if answer is None or not isinstance(answer.get("returncode"), int):
            self.close()
            return -9
        return int(answer["returncode"])

    def _receive(self) -> dict[str, Any] | None:
        """The zygote's next answer; None at end of file or when it is not JSON."""
        try:
            data = self.channel.recv(zygote.MAX_MESSAGE_BYTES)
        except OSError:
            return None
        if not data:
            return None
        try:
            answer = json.loads(data.decode("utf-8"))
        except ValueError:
            return None
        return answer if isinstance(answer, dict) else None

    def close(self) -> None:
        """End the zygote (end of file on its socket, then SIGKILL if it lingers) and remove its folder."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(OSError):
            self.channel.close()
        try:
            self.process.wait(1.0)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def job_side_root(target: Path) -> Path:
    """Fill ``target`` with what the job side imports: ``worker/`` (``job_side.MODULES`` only) and a
    copy of cloudpickle's package. Returns ``target``."""
    package = target / "worker"
    package.mkdir(parents=True, exist_ok=True)
    here = Path(__file__).resolve().parent
    for name in job_side.MODULES:
        shutil.copyfile(here / name, package / name)
    shutil.copytree(
        Path(cloudpickle.__file__).resolve().parent,
        target / "cloudpickle",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
        dirs_exist_ok=True,
    )
    return target


@dataclass
class _ProcessServer:
    """The process's fork server: whether it is on, and the zygote it keeps."""

    enabled: bool = False
    server: ForkServer | None = None


_PROCESS = _ProcessServer()


def enable() -> None:
    """Run this process's jobs through a zygote from now on (see the module docstring)."""
    _PROCESS.enabled = True


def enabled() -> bool:
    """Whether :func:`enable` was called (and :func:`shut_down` not since)."""
    return _PROCESS.enabled


def server_for(python: str, environ: Mapping[str, str], user: JobUser | None) -> ForkServer | None:
    """The process's zygote for a job run by ``python`` with ``environ`` (the job side's environment)
    as ``user``: the one kept when it serves that job, else a new one (the old one ended); None when
    the fork server is not enabled or the zygote could not be started (the job then starts its own
    interpreter)."""
    if not _PROCESS.enabled:
        return None
    key = ZygoteKey.of(python, environ, user)
    kept = _PROCESS.server
    if kept is not None and kept.serves(key):
        return kept
    if kept is not None:
        kept.close()
        _PROCESS.server = None
    try:
        _PROCESS.server = ForkServer.start(python, environ, user)
    except OSError:
        return None
    return _PROCESS.server


def prestart(python: str | None, environ: Mapping[str, str], user: JobUser | None = None) -> None:
    """Enable the fork server and start the zygote for ``python`` (this interpreter when None) with
    ``environ``, before a job needs it."""
    enable()
    server_for(python or sys.executable, environ, user)


def shut_down() -> None:
    """End the process's zygote (its folder removed) and run later jobs the usual way."""
    _PROCESS.enabled = False
    if _PROCESS.server is not None:
        _PROCESS.server.close()
        _PROCESS.server = None
