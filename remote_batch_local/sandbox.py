"""A box per local job, and a record of each job's processes that outlives the stack.

AWS Batch runs a job in a container: it sees its own filesystem, its own processes, and everything
it started dies with it. The local stack gets the same from Linux namespaces:

- ``bubblewrap`` (Debian package ``bubblewrap``, https://github.com/containers/bubblewrap): each job
  gets its own PID namespace (``--unshare-pid``; ``/proc`` shows only the job's processes), IPC and
  UTS namespaces, a new session, no capabilities (``--cap-drop ALL``), and a filesystem made of the
  host's system directories, the interpreter and the worker's code (read-only), its own working
  directory (read-write) and a private ``/tmp``. The stack's state directory (credentials, tokens,
  snapshots), the repository's other files and other jobs' folders are not in it. The network is
  shared: the worker reaches the moto server on 127.0.0.1.
- ``unshare --pid --fork --kill-child`` (util-linux) when bubblewrap is missing or does not work here:
  a PID namespace only, so every process still dies with the job, but the job sees the host's files.
- Neither: the job's process group and any process carrying its ``AWS_BATCH_JOB_ID`` are killed.

When the init process of a PID namespace dies, the kernel kills every process in it
(``pid_namespaces(7)``): a job cannot escape by ``setsid``, a double fork, a cleared environment or
ignoring SIGTERM. The namespace's init is killed when the sandbox's outer process dies
(``--die-with-parent``/``--kill-child``), which itself dies with the stack (``PR_SET_PDEATHSIG``).

``ProcessRegistry`` keeps, on disk, each running job's folder and its processes (pid and start time,
so a reused pid is never killed); the next start after a crash kills what is left and removes the folders.
"""

from __future__ import annotations

import contextlib
import enum
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import psutil

logger = logging.getLogger("remote_batch_local.sandbox")

# The variable that marks a job's processes (AWS Batch sets it in every job container).
JOB_MARKER_VARIABLE = "AWS_BATCH_JOB_ID"
# The prefix of a job's working directory (the only folders recovery ever removes).
JOB_DIR_PREFIX = "remote-batch-job-"
# Rounds of "find the job's leftover processes and kill them" (a round catches what forked during the last).
MARKED_KILL_ROUNDS = 5
# How long to wait for a trial sandbox at start, and for a job's namespace init to appear (s).
PROBE_SECONDS = 10.0
INIT_WAIT_SECONDS = 2.0
# The host directories every job sees read-only (those that exist here; merged-/usr symlinks stay links).
SYSTEM_DIRECTORIES = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")


class SandboxKind(enum.StrEnum):
    """How jobs are isolated, strongest first."""

    BUBBLEWRAP = "bubblewrap"
    UNSHARE = "unshare"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class Sandbox:
    """The isolation this host offers, and what to say when it is weaker than a box per job.

    Attributes
    ----------
    kind : SandboxKind
        ``bubblewrap`` (a box), ``unshare`` (a PID namespace only) or ``none``.
    warning : str | None
        None for ``bubblewrap``; otherwise the sentence logged at start and added to each job's
        ``statusReason``, e.g. ``Not sandboxed: bubblewrap unavailable (...); the job runs in its
        own PID namespace but can read every file of the local stack's user``.
    """

    kind: SandboxKind
    warning: str | None = None

    def command(self, command: Sequence[str], workdir: Path, read_only: Iterable[Path]) -> list[str]:
        """The argv that runs ``command`` in this sandbox, in ``workdir``.

        ``read_only`` are the paths the job needs besides the system directories (the interpreter's
        prefix, the virtualenv, the worker's package): each is mounted read-only at its own path and,
        when that is a symlink, at its target too. ``workdir`` is mounted read-write.
        """
        if self.kind is SandboxKind.NONE:
            return list(command)
        if self.kind is SandboxKind.UNSHARE:
            # ``sh`` is the namespace's init, the command its child: SIGTERM reaches the command (an
            # init ignores signals it has no handler for) and the exit status passes through.
            return ["unshare", "--pid", "--fork", "--kill-child", "sh", "-c", '"$@"; exit $?', "sh", *command]
        return [*bubblewrap_arguments(workdir, read_only), "--", *command]


def bubblewrap_arguments(workdir: Path, read_only: Iterable[Path]) -> list[str]:
    """bwrap's options for one job (see the module docstring); the command follows ``--``."""
    args = [
        "bwrap",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
        "--cap-drop",
        "ALL",
    ]
    for name in SYSTEM_DIRECTORIES:
        path = Path(name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            args += ["--ro-bind", name, name]
    args += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]  # noqa: S108 - a private tmpfs
    mounted: set[str] = set()
    for path in read_only:
        target = path.resolve()
        if not target.exists():
            continue
        for where in (str(target), str(path.absolute())):
            if where not in mounted:
                mounted.add(where)
                args += ["--ro-bind", str(target), where]
    args += ["--bind", str(workdir), str(workdir), "--chdir", str(workdir)]
    return args


def sandbox_path(path: str) -> str:
    """A job's ``PATH`` inside bubblewrap: this interpreter's virtualenv and installation first, then
    the entries of ``path`` under the system directories (others, e.g. ``~/.pyenv/shims``, are not
    in the box)."""
    first = [str(Path(sys.prefix) / "bin"), str(Path(sys.base_prefix) / "bin")]
    system = [p for p in path.split(os.pathsep) if p.startswith(tuple(f"{d}/" for d in SYSTEM_DIRECTORIES))]
    system += [p for p in os.defpath.split(os.pathsep) if p and p not in system]
    return os.pathsep.join(dict.fromkeys([*first, *system]))


def detect_sandbox() -> Sandbox:
    """Try a trial job in each kind of sandbox, strongest first; returns the first that works.

    Takes some 10 ms. The trial runs ``sys.executable`` in a throw-away folder, as a job would.
    """
    failure = "bwrap not found (Debian: apt-get install bubblewrap)"
    if shutil.which("bwrap"):
        with tempfile.TemporaryDirectory(prefix=JOB_DIR_PREFIX) as trial:
            command = Sandbox(SandboxKind.BUBBLEWRAP).command(
                [sys.executable, "-c", "import os; os.listdir('/proc')"],
                Path(trial),
                [Path(sys.prefix), Path(sys.base_prefix)],
            )
            failure = _trial(command) or ""
        if not failure:
            return Sandbox(SandboxKind.BUBBLEWRAP)
    unshare_failure = "unshare not found (Debian: util-linux)"
    if shutil.which("unshare"):
        unshare_failure = _trial(Sandbox(SandboxKind.UNSHARE).command(["true"], Path("/"), ())) or ""
        if not unshare_failure:
            return Sandbox(
                SandboxKind.UNSHARE,
                f"Not sandboxed: bubblewrap unavailable ({failure}); the job runs in its own PID "
                "namespace but can read every file of the local stack's user",
            )
    return Sandbox(
        SandboxKind.NONE,
        f"Not sandboxed: bubblewrap unavailable ({failure}) and no PID namespace ({unshare_failure}); "
        "the job can read every file of the local stack's user",
    )


def _trial(command: list[str]) -> str | None:
    """None when ``command`` exits 0 within ``PROBE_SECONDS``; else why not (its last stderr line)."""
    try:
        done = subprocess.run(  # noqa: S603 - our own fixed commands
            command, capture_output=True, timeout=PROBE_SECONDS, check=False, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    if done.returncode == 0:
        return None
    lines = done.stderr.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else f"exit status {done.returncode}"


def pid_namespace(pid: int) -> str | None:
    """The PID namespace of a process (``pid:[4026532…]``), or None when it is gone or unreadable."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None


def namespace_init(outer_pid: int, timeout: float = INIT_WAIT_SECONDS) -> psutil.Process | None:
    """The init of the PID namespace ``outer_pid`` (bwrap or unshare) created: its child in a
    namespace other than its own. None when none appears within ``timeout`` s (it exited, or no
    namespace was made)."""
    own = pid_namespace(outer_pid)
    deadline = time.monotonic() + timeout
    while True:
        try:
            children = psutil.Process(outer_pid).children()
        except psutil.NoSuchProcess:
            return None
        for child in children:
            namespace = pid_namespace(child.pid)
            if namespace is not None and namespace != own:
                return child
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.005)


def namespace_members(namespace: str) -> list[psutil.Process]:
    """Live processes in the PID namespace ``namespace`` (as ``pid_namespace`` names it)."""
    return [p for p in psutil.process_iter() if pid_namespace(p.pid) == namespace]


def _marked_processes(job_ids: frozenset[str]) -> list[psutil.Process]:
    """Live processes whose environment has ``AWS_BATCH_JOB_ID`` set to one of ``job_ids``."""
    found = []
    own_pid = os.getpid()
    for process in psutil.process_iter():
        if process.pid == own_pid:
            continue
        try:
            if process.environ().get(JOB_MARKER_VARIABLE) in job_ids:
                found.append(process)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
            continue
    return found


def kill_marked_processes(job_ids: frozenset[str]) -> list[int]:
    """SIGKILL every process still carrying one of ``job_ids`` as ``AWS_BATCH_JOB_ID``.

    The last resort where no PID namespace is available: catches processes a job moved to a new
    session or process group (``setsid``, daemons), not those that cleared their environment.
    Scans until a round finds nothing new (at most ``MARKED_KILL_ROUNDS``). Returns the pids signalled.
    """
    killed: list[int] = []
    if not job_ids:
        return killed
    for _ in range(MARKED_KILL_ROUNDS):
        fresh = [p for p in _marked_processes(job_ids) if p.pid not in killed]
        if not fresh:
            break
        for process in fresh:
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                process.kill()
                killed.append(process.pid)
    if killed:
        logger.info("leftover job processes killed pids=%s", killed)
    return killed


@dataclass(frozen=True, slots=True)
class Leftovers:
    """What ``ProcessRegistry.clean`` found: the jobs, the pids it killed, the folders it removed."""

    jobs: tuple[str, ...]
    killed: tuple[int, ...]
    removed: tuple[str, ...]


class ProcessRegistry:
    """Each running job's folder and processes, one JSON file per job in ``directory``.

    A file ``<job id>.json`` holds ``{"workdir": path, "processes": [[pid, start time], ...]}`` (start
    time as psutil's ``create_time``, seconds since the epoch). It is written before the job's first
    process starts and removed after its last one died and its folder was removed. Writes replace the
    file atomically (a crash leaves the old or the new record, never half of one).
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)

    def _path(self, job_id: str) -> Path:
        return self.directory / f"{job_id}.json"

    def record(self, job_id: str, workdir: Path, processes: Sequence[psutil.Process] = ()) -> None:
        """Write the job's record: its folder and the processes known so far."""
        entries = []
        for process in processes:
            with contextlib.suppress(psutil.Error):
                entries.append([process.pid, process.create_time()])
        body = json.dumps({"workdir": str(workdir), "processes": entries})
        path = self._path(job_id)
        partial = path.with_suffix(".tmp")
        with open(partial, "w", encoding="utf-8") as handle:
            handle.write(body)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, path)

    def forget(self, job_id: str) -> None:
        """Remove the job's record (its processes are dead and its folder removed)."""
        self._path(job_id).unlink(missing_ok=True)

    def clean(self) -> Leftovers:
        """Kill every recorded process still alive (same pid and start time), every process still
        marked with a recorded job's id, remove the recorded folders, then the records.

        For the next start after a crash, before any job runs. An unreadable record is removed. The
        registries in its subfolders (the warm pool's, ``warm/``) are cleaned first, in the same way.
        """
        jobs: list[str] = []
        killed: list[int] = []
        removed: list[str] = []
        for folder in sorted(p for p in self.directory.iterdir() if p.is_dir()):
            nested = ProcessRegistry(folder).clean()
            jobs += nested.jobs
            killed += nested.killed
            removed += nested.removed
        for path in sorted(self.directory.glob("*.json")):
            job_id = path.stem
            jobs.append(job_id)
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
                processes = [(int(pid), float(started)) for pid, started in record.get("processes", [])]
                workdir = Path(str(record["workdir"]))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                logger.warning("unreadable process record removed path=%s error=%s", path, exc)
                path.unlink(missing_ok=True)
                continue
            for pid, started in processes:
                with contextlib.suppress(psutil.Error):
                    process = psutil.Process(pid)
                    if abs(process.create_time() - started) < 0.01:
                        process.kill()
                        killed.append(pid)
            killed.extend(kill_marked_processes(frozenset({job_id})))
            if workdir.name.startswith(JOB_DIR_PREFIX) and workdir.exists():
                shutil.rmtree(workdir, ignore_errors=True)
                removed.append(str(workdir))
            path.unlink(missing_ok=True)
        for partial in self.directory.glob("*.tmp"):
            partial.unlink(missing_ok=True)
        if jobs:
            logger.warning(
                "leftovers of the last run cleaned jobs=%d killed_pids=%s removed_folders=%s",
                len(jobs),
                killed,
                removed,
            )
        return Leftovers(tuple(jobs), tuple(killed), tuple(removed))
