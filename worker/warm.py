"""``python -m worker.warm``: the worker started before its job is known (the local stack's warm pool).

The local stack's executor (``remote_batch_local.executor.warm``) starts this in a job's sandbox ahead
of need. It imports everything a job needs (``worker.entrypoint``: boto3, cloudpickle, the runner)
and loads the S3 service model by building a throw-away client, then blocks reading its assignment
from stdin: one JSON object, then end of file::

    {"environ": {"AWS_BATCH_JOB_ID": "...", ...}, "cpus": [0], "memoryBytes": 2147483648}

It then becomes the job's container: it pins itself to ``cpus`` (``sched_setaffinity``), caps its
address space at ``memoryBytes`` (``RLIMIT_AS``, soft and hard, so neither it nor anything it starts
can raise it), replaces its whole environment with ``environ`` (the job's id, credentials, region,
array index...), in ``os.environ`` and in what ``/proc/<pid>/environ`` shows (``show_environment``),
points stdin at ``/dev/null`` and runs ``worker.entrypoint.main`` exactly as
``python -m worker`` does, with a boto3 default session that shares the loaded models (the job's own
credentials and region come from ``environ``; a session built before them would keep the wrong ones).
It runs one job and exits with its exit code: a warm worker is never reused. The job side is warm too:
before the assignment the worker starts the zygote of the stack's default Python (``worker.fork_server``:
its ``REMOTE_BATCH_JOB_PYTHON`` and site are in the warm worker's environment), which imports the job
side while the worker waits and forks the job's process when it comes; a job of another Python version
(named by the assignment's environment) gets a zygote started for it, so one pool serves every version.

End of file without an assignment (the pool let it go) exits 0 without output. An assignment that
cannot be read is a worker error: exit code 2, one line on stderr. Nothing before the assignment
writes to stdout or stderr: they are the job's log.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import boto3
import botocore.session
from botocore.awsrequest import AWSPreparedRequest, AWSResponse
from botocore.compat import HTTPHeaders

from worker import fork_server
from worker.entrypoint import EXIT_WORKER_ERROR, main
from worker.supervisor import JOB_PYTHON_VARIABLE, job_side_environment

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

#: The largest assignment read (bytes); a job's environment is a few KiB.
MAX_ASSIGNMENT_BYTES = 1024 * 1024
#: The placeholder keys and bucket of the throw-away client (its requests never leave the process).
_WARM_KEY = "warm-worker-not-a-key"
_WARM_BUCKET = "warm-worker-preload"


class _EmptyBody:
    """The raw body of a response made here: empty."""

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield b""

    def read(self, *_: Any) -> bytes:
        return b""


def _answer_here(request: AWSPreparedRequest, **_: Any) -> AWSResponse:
    """A ``before-send`` handler: an empty 200 answer, so that nothing leaves the process."""
    return AWSResponse(request.url, 200, HTTPHeaders(), _EmptyBody())


def preload() -> Any | None:
    """Load what the job's S3 client and its first requests read: build a client in a private botocore
    session (the service model, endpoint rules, partitions) and send it a PUT and a GET, answered in
    the process (``before-send``), so the rules engine, signing, checksums and parsing are imported
    and warmed. Returns that session's data loader, or None when it could not (the job then builds
    its client from scratch, as ``python -m worker`` does)."""
    try:
        session = botocore.session.get_session()
        client = cast(
            "S3Client",
            session.create_client(
                "s3",
                region_name=os.environ.get("AWS_REGION") or "us-east-1",
                endpoint_url=os.environ.get("AWS_ENDPOINT_URL") or None,
                aws_access_key_id=_WARM_KEY,
                aws_secret_access_key=_WARM_KEY,
            ),
        )
        # botocore uses a before-send handler's return value as the response (its stubs say None).
        client.meta.events.register("before-send.s3", cast(Callable[..., None], _answer_here))
        client.put_object(Bucket=_WARM_BUCKET, Key="preload", Body=b"{}", ContentType="application/json")
        client.get_object(Bucket=_WARM_BUCKET, Key="preload")["Body"].read()
        return session.get_component("data_loader")
    except Exception:
        return None


def read_assignment(stream: Any) -> dict[str, Any] | None:
    """The assignment read from ``stream`` (binary, to end of file), or None at an empty end of file.

    Raises
    ------
    ValueError
        It is not a JSON object with ``environ`` (strings to strings), ``cpus`` (a non-empty list of
        CPU ids) and ``memoryBytes`` (a positive int), or it exceeds ``MAX_ASSIGNMENT_BYTES``.
    """
    data = stream.read(MAX_ASSIGNMENT_BYTES + 1)
    if not data:
        return None
    if len(data) > MAX_ASSIGNMENT_BYTES:
        raise ValueError(f"the assignment exceeds {MAX_ASSIGNMENT_BYTES} bytes")
    assignment = json.loads(data)
    environ, cpus, memory = (assignment.get(k) for k in ("environ", "cpus", "memoryBytes"))
    if not (
        isinstance(environ, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in environ.items())
        and isinstance(cpus, list)
        and cpus
        and all(isinstance(c, int) and c >= 0 for c in cpus)
        and isinstance(memory, int)
        and memory > 0
    ):
        raise ValueError("the assignment must have environ, cpus and memoryBytes")
    return dict(assignment)


def become_job(assignment: dict[str, Any], loader: Any | None) -> None:
    """Take on the job's limits, environment and stdin, and a default boto3 session for it (sharing
    ``loader``, the preloaded models, when given)."""
    os.sched_setaffinity(0, assignment["cpus"])
    memory = assignment["memoryBytes"]
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    os.environ.clear()
    os.environ.update(assignment["environ"])
    time.tzset()  # TZ may differ from the one this process started with
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    show_environment(assignment["environ"])
    session = botocore.session.get_session()  # reads the job's environment from now on
    if loader is not None:
        session.register_component("data_loader", loader)
    boto3.setup_default_session(botocore_session=session)


def environment_block(environ: dict[str, str]) -> bytes:
    """``environ`` as the kernel keeps a process's initial environment: ``NAME=value`` strings, each
    ending with a NUL byte."""
    return b"".join(os.fsencode(k) + b"=" + os.fsencode(v) + b"\0" for k, v in environ.items())


def show_environment(environ: dict[str, str]) -> bool:
    """Write ``environ`` over this process's initial environment block, NUL-padded, so that
    ``/proc/<pid>/environ`` (what ``ps e``, psutil and the executor's marker search read) shows the
    job's variables, as if the process had been started with them (the technique of setproctitle).

    The block's bounds are ``env_start``/``env_end`` of ``/proc/self/stat`` (fields 50-51, Linux >=
    3.5, ``proc(5)``); the executor started this process with room to spare (a padding variable).
    Call only once ``os.environ`` no longer holds the old strings (libc's ``environ`` then points to
    copies). Returns False, changing nothing, when the block is unknown or ``environ`` does not fit.
    """
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        start, end = int(fields[47]), int(fields[48])  # fields 50 and 51, counted from 1 before "("
    except (OSError, IndexError, ValueError):
        return False
    block = environment_block(environ)
    if not 0 < start < end or len(block) > end - start:
        return False
    ctypes.memmove(start, block, len(block))
    ctypes.memset(start + len(block), 0, end - start - len(block))
    return True


def _report(sentence: str) -> None:
    with contextlib.suppress(OSError):
        os.write(2, f"remote-batch worker: {sentence}\n".encode("utf-8", "replace"))


def run() -> int:
    """Preload, wait for the assignment, run the job; returns its exit code (0 when dismissed)."""
    loader = preload()
    # The zygote of the stack's default Python (its variables are in this process's environment):
    # it imports while the worker waits; a job of another Python gets a zygote of its own.
    with contextlib.suppress(OSError):
        environ = dict(os.environ)
        env = job_side_environment(environ, Path.cwd())
        fork_server.prestart(environ.get(JOB_PYTHON_VARIABLE), env)
    try:
        assignment = read_assignment(sys.stdin.buffer)
    except (OSError, ValueError) as exc:
        _report(f"the job's assignment could not be read ({exc})")
        return EXIT_WORKER_ERROR
    if assignment is None:
        return 0
    try:
        become_job(assignment, loader)
    except (OSError, ValueError) as exc:
        _report(f"the job's limits could not be applied ({exc})")
        return EXIT_WORKER_ERROR
    for stream in (sys.stdout, sys.stderr):  # as ``python -m worker``: each line as it is printed
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)
    try:
        return main()
    finally:
        fork_server.shut_down()


if __name__ == "__main__":
    exit_code = run()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(ValueError, OSError):
            stream.flush()
    # As ``python -m worker``: a thread the user's code left running must not keep the job alive.
    os._exit(exit_code & 0xFF)
