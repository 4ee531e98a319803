"""The fork server of the job side: one pre-imported process in the job's Python that forks each job.

``worker.fork_server`` (the supervisor's half) starts it once per container or warm worker, in the
job's interpreter, as the job side's own user when the supervisor switches (``worker.job_user``)::

    python -I [-S] -c BOOTSTRAP ROOT SOCKET_FD

It imports what the job side imports (``worker.job_side`` and its siblings, cloudpickle: the
standard library's modules they need are loaded once, here) and then waits on its end of a
``SOCK_SEQPACKET`` socket pair. It never runs user code: every job is a child forked from it, so no
global, module attribute, import or environment variable a job sets is seen by the next one (each
child starts from the zygote's untouched state), and the ``random`` module reseeds in each child
(CPython does so after every ``fork``). The interpreter's hash seed is the zygote's for all of them.

Requests (one JSON object a packet, UTF-8) and answers:

- ``{"op": "run", "folder", "outputDir", "memory", "environ", "cwd", "cpus", "rlimitAs"}`` with
  three file descriptors (``SCM_RIGHTS``): the job's stdin, stdout and stderr. The zygote forks a
  child and answers ``{"started": PID}``, then ``{"returncode": N}`` when it ended (negative: killed
  by signal ``-N``, as ``subprocess`` says it), once every process it left behind is killed too.
  A request it cannot take answers ``{"refused": "sentence"}``.
- ``{"op": "signal", "signum": N}`` while a job runs: sent on to the child (the supervisor forwards
  AWS Batch's SIGTERM that way); ignored when no job runs.
- End of file (the supervisor is gone): the running job and what it left are killed, the zygote exits.

The child, before the job side's ``main`` (``worker.job_side``) runs the job exactly as a fresh job
side would: its own session (so its own process group), ``PR_SET_PDEATHSIG`` (it dies with the
zygote, which dies with the supervisor), the request's CPU ids (``sched_setaffinity``) and address
space limits (``RLIMIT_AS``, soft and hard: it cannot raise the hard one), the three descriptors as 0,
1 and 2, the request's working folder and its environment only (``os.environ`` replaced, ``time.tzset``), the
zygote's signal handlers, socket and descriptors gone, the job side's modules hidden
(``runner.hide_job_side_modules``) and ``sys.argv`` what a fresh job side's is.

What a job leaves running dies with it: the zygote is a child subreaper (``PR_SET_CHILD_SUBREAPER``,
Linux >= 3.4, ``prctl(2)``), so every process the job started, whatever it did to escape (``setsid``, a
double fork, ignoring SIGTERM), is re-parented to the zygote when its parent dies; when the job's child
ends, the zygote kills all its children (``SIGKILL``), reaps them and repeats until it has none, then
answers. One job at a time: the supervisor sends the next request after the answer.

This module runs on Python 3.9 to 3.13 (``tests/unit/test_job_side_python39.py``): ``socket.send_fds``
and ``recv_fds`` are 3.9's.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import selectors
import signal
import socket
import sys
import time
from typing import Any

from worker import job_side
from worker.runner import hide_job_side_modules

#: The ``python -c`` program of the zygote (argv: ROOT SOCKET_FD): as ``job_side.BOOTSTRAP``, the
#: copied modules first on the path, then the site folders of ``job_side.SITE_VARIABLE``; then :func:`serve`.
BOOTSTRAP = (
    "import os, sys\n"
    "sys.path.insert(0, sys.argv[1])\n"
    f"for folder in filter(None, os.environ.pop({job_side.SITE_VARIABLE!r}, '').split(os.pathsep)):\n"
    "    import site; site.addsitedir(folder)\n"
    "from worker.zygote import serve\n"
    "serve(sys.argv[1], int(sys.argv[2]))\n"
)
#: The largest request or answer (bytes): a job's environment is a few KiB.
MAX_MESSAGE_BYTES = 1024 * 1024
#: From <linux/prctl.h>.
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
#: The exit code of a child whose set-up failed before the job side ran (a line on its stderr says why).
EXIT_SETUP_FAILED = 2


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def serve(root: str, fd: int) -> None:
    """The zygote's loop on socket ``fd`` (see the module docstring); ``root`` is the folder the job
    side's modules were imported from. Exits (``os._exit(0)``) at the socket's end of file."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    channel = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=fd)
    wake_read, wake_write = os.pipe()
    for end in (wake_read, wake_write):
        os.set_blocking(end, False)
    signal.signal(signal.SIGCHLD, lambda _signum, _frame: None)
    signal.set_wakeup_fd(wake_write)
    while True:
        message, fds = _receive(channel)
        if message is None:
            _kill_children()
            os._exit(0)
        if message.get("op") != "run":
            _close_all(fds)
            continue  # a signal for a job that ended already
        if len(fds) != 3:
            _close_all(fds)
            _send(channel, {"refused": "a run request carries the job's stdin, stdout and stderr"})
            continue
        try:
            pid = os.fork()
        except OSError as exc:
            _close_all(fds)
            _send(channel, {"refused": f"the job's process could not be forked ({exc})"})
            continue
        if pid == 0:
            _child(root, message, fds, [channel.fileno(), wake_read, wake_write])
        _close_all(fds)
        _send(channel, {"started": pid})
        returncode = _wait_for(channel, pid, wake_read)
        _kill_children()
        _send(channel, {"returncode": returncode})


def _receive(channel: socket.socket) -> Any:
    """The next packet as ``(message, fds)``; ``(None, [])`` at end of file."""
    while True:
        try:
            data, fds, _flags, _address = socket.recv_fds(channel, MAX_MESSAGE_BYTES, 3)
        except InterruptedError:
            continue
        except OSError:
            return None, []
        if not data:
            _close_all(fds)
            return None, []
        try:
            message = json.loads(data.decode("utf-8"))
        except ValueError:
            _close_all(fds)
            continue
        return (message if isinstance(message, dict) else {}), list(fds)


def _send(channel: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        channel.send(json.dumps(message).encode("utf-8"))


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


def _wait_for(channel: socket.socket, pid: int, wake_read: int) -> int:
    """Wait for child ``pid`` to end, passing on the signals the supervisor sends; its return code
    (negative: the signal that killed it). At the socket's end of file the child is killed."""
    selector = selectors.DefaultSelector()
    selector.register(channel, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    try:
        while True:
            ended = _reap(pid)
            if ended is not None:
                return ended
            for key, _events in selector.select():
                if key.fd == wake_read:
                    with contextlib.suppress(OSError):
                        while os.read(wake_read, 512):
                            pass
                    continue
                message, fds = _receive(channel)
                _close_all(fds)
                if message is None:
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                    selector.unregister(channel)
                elif message.get("op") == "signal" and isinstance(message.get("signum"), int):
                    with contextlib.suppress(OSError):
                        os.kill(pid, message["signum"])
    finally:
        selector.close()


def _reap(pid: int) -> int | None:
    """``pid``'s return code if it ended (reaped now), else None."""
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return -signal.SIGKILL
    if done == 0:
        return None
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def _children() -> list[int]:
    """The zygote's live children (``/proc/<pid>/task/<tid>/children``, Linux >= 3.5; else ``/proc``'s
    parent ids)."""
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children", encoding="ascii") as file:
            return [int(pid) for pid in file.read().split()]
    except OSError:
        pass
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me:
            found.append(int(name))
    return found


def _kill_children() -> None:
    """Kill every child of the zygote (the job's leftovers, re-parented here) and reap them, until none
    is left: a killed process's own children come here in turn."""
    while True:
        children = _children()
        for pid in children:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        try:
            pid, _status = os.waitpid(-1, 0 if children else os.WNOHANG)
        except ChildProcessError:
            return
        except InterruptedError:
            continue
        if pid == 0 and not children:
            time.sleep(0.001)  # a child being re-parented is not listed yet


def _child(root: str, message: dict[str, Any], fds: list[int], zygote_fds: list[int]) -> None:
    """The forked child: become the job's process (the module docstring lists what), then run the job
    side's ``main``, which exits. Never returns."""
    try:
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setsid()
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() == 1:
            os._exit(EXIT_SETUP_FAILED)  # the zygote died before the hook was set
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        _close_all([fd for fd in (*fds, *zygote_fds) if fd > 2])
        cpus = message.get("cpus")
        if cpus:
            os.sched_setaffinity(0, [int(cpu) for cpu in cpus])
        limits = message.get("rlimitAs")
        if limits is not None:
            resource.setrlimit(resource.RLIMIT_AS, (int(limits[0]), int(limits[1])))
        os.chdir(str(message["cwd"]))
        os.environ.clear()
        os.environ.update({str(k): str(v) for k, v in dict(message["environ"]).items()})
        os.environ.pop(job_side.SITE_VARIABLE, None)  # the zygote's start read it, as BOOTSTRAP does
        time.tzset()
        folder, output_dir, memory_gib = (str(message[k]) for k in ("folder", "outputDir", "memory"))
        sys.argv = ["-c", root, folder, output_dir, memory_gib]
        hide_job_side_modules(root)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            text = f"remote-batch worker: the job's process could not be set up ({exc})\n"
            os.write(2, text.encode("utf-8", "replace"))
        os._exit(EXIT_SETUP_FAILED)
    try:
        job_side.main([folder, output_dir, memory_gib])
    except BaseException:
        with contextlib.suppress(BaseException):
            import traceback

            traceback.print_exc()
    os._exit(EXIT_SETUP_FAILED)
