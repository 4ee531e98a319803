"""The job side: the process that runs the user's code, in the job's own Python.

The worker is two processes (``worker.supervisor`` starts this one):

- the *supervisor*, in the service's Python (``/opt/remote-batch/venv`` in the image; the local stack's
  own interpreter): it reads the job's input from S3, stores its outputs and outcome, and is the only
  one that imports boto3;
- the *job side*, in the interpreter of the job's ``pythonVersion`` (the image's ``python3.X`` with
  the image's packages; locally the interpreter found for that version): it imports the standard
  library, this module's siblings ``worker.errors``, ``worker.runner`` and ``worker.encoding``, and
  cloudpickle, all copied into a folder of their own (:data:`MODULES`, ``cloudpickle/``), never the
  service's site-packages. Once imported they are hidden from the user's code (out of ``sys.modules``,
  the folder off ``sys.path``: ``runner.hide_job_side_modules``), which sees exactly its environment's
  packages (its own ``cloudpickle``; no ``worker``); the job side's cloudpickle is named
  ``cloudpickle`` again only while it pickles or unpickles (``runner.job_side_pickler``). It runs the
  code, command or pickled call and encodes the result (numpy, pandas and PIL are used only when the
  job's interpreter has them).

They talk through files in the job's folder: the supervisor writes ``input/input.json`` (and
``input/payload``: the code or pickle of an upload), the job side writes ``outcome/`` (the encoded
result parts, then ``outcome/outcome.json`` last: its presence means the others are complete). The
user's output goes straight to the job log (the job side inherits the supervisor's stdout and stderr).

``python -I -c BOOTSTRAP ROOT FOLDER OUTPUT_DIR [MEMORY_GIB]`` (:func:`main`); exit code the job's.

**In an environment's own image** the job side runs in another container of the same AWS Batch job
(``functions.adapters.batch_definitions``): the supervisor's container and the job container share a
volume (:data:`EXCHANGE_PATH`). The supervisor fills it (``lib/``: these modules and cloudpickle;
``job/input/``; ``args.json``: the output folder, memory, the job's ``REMOTE_BATCH_*`` variables and
the Python the environment names), then writes ``ready``. The job container's ``python3`` (the image's,
>= 3.9: this module and its siblings keep to 3.9's syntax and library) waits for it, then runs
:func:`container_main`: the same job side as a child process with its console in ``console`` (the
supervisor relays that file to its own log stream, so the job keeps one log), the signals forwarded to
it, and ``exit.json`` (its return code) written when it ends.

This module runs on Python 3.9 to 3.13: no ``match``, no ``X | Y`` outside annotations
(``tests/unit/test_job_side_python39.py`` checks it).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from worker.encoding import EncodedResult, encode_result
from worker.runner import (
    CodeInput,
    JobError,
    JobInput,
    Outcome,
    PickleInput,
    parse_job_input,
    run_job,
)

#: The files of the ``worker`` package the job side imports (copied with cloudpickle's package).
MODULES = ("__init__.py", "errors.py", "runner.py", "encoding.py", "job_side.py", "zygote.py")
INPUT_DIR = "input"
INPUT_DOCUMENT = "input.json"
INPUT_PAYLOAD = "payload"
OUTCOME_DIR = "outcome"
OUTCOME_DOCUMENT = "outcome.json"
RESULT_JSON = "result.json"
RESULT_PICKLE = "result.pickle"
PREVIEW_PNG = "preview.png"
# The job container's side of an image job (the names match ``functions.domain.images``).
#: Where the shared volume is mounted in both containers.
EXCHANGE_PATH = "/remote-batch/exchange"
#: Files of that folder: the supervisor's ``ready`` mark, ``args.json``, the job's folder (``job/``:
#: input and outcome), the working folder its code starts in (``work/``: the parents' ``inputs/``),
#: the job's console, and the launcher's ``exit.json``.
READY_FILE = "ready"
ARGS_FILE = "args.json"
JOB_FOLDER = "job"
WORK_FOLDER = "work"
CONSOLE_FILE = "console"
EXIT_FILE = "exit.json"
#: The signals the launcher passes on to the job side (AWS Batch's terminate is SIGTERM to every
#: container of the job, then SIGKILL).
_FORWARDED_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")
#: Variable naming site folders (``os.pathsep``-separated) the job side adds to its path when its
#: interpreter was started without its own site-packages (``-S``).
SITE_VARIABLE = "REMOTE_BATCH_JOB_SITE"
#: The ``python -c`` program that starts the job side: the copied modules first on the path, then the
#: site folders of ``SITE_VARIABLE``; once the job side is imported, its modules and folder are hidden
#: (``runner.hide_job_side_modules``: the user's code sees only its environment's packages), then
#: :func:`main`.
BOOTSTRAP = (
    "import os, sys\n"
    "sys.path.insert(0, sys.argv[1])\n"
    f"for folder in filter(None, os.environ.pop({SITE_VARIABLE!r}, '').split(os.pathsep)):\n"
    "    import site; site.addsitedir(folder)\n"
    "from worker.job_side import main\n"
    "from worker.runner import hide_job_side_modules\n"
    "hide_job_side_modules(sys.argv[1])\n"
    "main(sys.argv[2:])\n"
)


def write_input(folder: Path, job: JobInput) -> None:
    """Write ``job`` into ``folder/input/`` as :func:`read_input` reads it (the supervisor's side)."""
    target = folder / INPUT_DIR
    target.mkdir(parents=True, exist_ok=True)
    document: dict[str, Any]
    if isinstance(job, CodeInput):
        document = {"kind": "code", "payloadKey": INPUT_PAYLOAD}
        (target / INPUT_PAYLOAD).write_bytes(job.source.encode("utf-8", "surrogatepass"))
    elif isinstance(job, PickleInput):
        document = {"kind": "pickle", "payloadKey": INPUT_PAYLOAD}
        (target / INPUT_PAYLOAD).write_bytes(job.payload)
    else:
        document = {"kind": "command", "command": list(job.argv)}
    if job.array_item is not None:
        document.update(arrayItem=job.array_item.value, arrayIndex=job.array_item.index)
    (target / INPUT_DOCUMENT).write_text(json.dumps(document), encoding="utf-8")


def read_input(folder: Path) -> JobInput:
    """The job :func:`write_input` wrote. Raises ``InvalidJobInput`` when it is damaged."""
    source = folder / INPUT_DIR
    raw = (source / INPUT_DOCUMENT).read_bytes()
    payload_file = source / INPUT_PAYLOAD
    return parse_job_input(raw, payload_file.read_bytes() if payload_file.exists() else None)


@dataclass(frozen=True)
class JobSideOutcome:
    """What the job side recorded: the runner's messages and error, the encoded result, the exit code."""

    messages: list[str]
    error: JobError | None
    result: EncodedResult
    exit_code: int


def write_outcome(folder: Path, outcome: Outcome) -> None:
    """Encode ``outcome``'s result and write it into ``folder/outcome/``, ``outcome.json`` last."""
    encoded = encode_result(outcome.result)
    target = folder / OUTCOME_DIR
    target.mkdir(parents=True, exist_ok=True)
    (target / RESULT_JSON).write_bytes(encoded.result_json)
    if encoded.result_pickle is not None:
        (target / RESULT_PICKLE).write_bytes(encoded.result_pickle)
    if encoded.preview_png is not None:
        (target / PREVIEW_PNG).write_bytes(encoded.preview_png)
    error = outcome.error
    document = {
        "messages": outcome.messages,
        "error": None if error is None else {**error.__dict__},
        "encodingMessages": encoded.messages,
        "previewKind": encoded.preview_kind,
        "resultRepr": encoded.result_repr,
        "exitCode": outcome.exit_code,
    }
    # ASCII: a message may quote text with lone surrogates (escaped, read back as they were).
    body = json.dumps(document, ensure_ascii=True).encode("ascii")
    partial = target / (OUTCOME_DOCUMENT + ".partial")
    partial.write_bytes(body)
    partial.replace(target / OUTCOME_DOCUMENT)


def open_regular(path: Path) -> BinaryIO:
    """``path`` opened for reading if it is a regular file, following no link and waiting on no
    pipe: the job's user owns the folders the supervisor reads this way (its outcome, an image job's
    exchange) and the supervisor may be root (``worker.job_user``).

    Raises ``FileNotFoundError`` when it is missing, ``OSError`` when it is a link or no regular file.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    file = open(os.open(path, flags), "rb")  # noqa: SIM115 - returned open
    if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
        file.close()
        raise OSError(errno.EINVAL, "not a regular file", str(path))
    return file


def read_regular(path: Path) -> bytes:
    """The bytes of ``path``, opened by :func:`open_regular` (which says what it raises)."""
    with open_regular(path) as file:
        return file.read()


def _read_if_present(path: Path) -> bytes | None:
    try:
        return read_regular(path)
    except FileNotFoundError:
        return None


def read_outcome(folder: Path) -> JobSideOutcome | None:
    """What :func:`write_outcome` wrote, or None when the job side ended before writing it.

    Raises ``ValueError`` (or ``OSError``) when the files are damaged (or are links, pipes...).
    """
    source = folder / OUTCOME_DIR
    try:
        document = json.loads(read_regular(source / OUTCOME_DOCUMENT))
    except FileNotFoundError:
        return None
    error = document["error"]
    return JobSideOutcome(
        messages=[str(message) for message in document["messages"]],
        error=None if error is None else JobError(**error),
        result=EncodedResult(
            result_json=read_regular(source / RESULT_JSON),
            result_pickle=_read_if_present(source / RESULT_PICKLE),
            preview_png=_read_if_present(source / PREVIEW_PNG),
            preview_kind=document["previewKind"],
            result_repr=str(document["resultRepr"]),
            messages=[str(message) for message in document["encodingMessages"]],
        ),
        exit_code=int(document["exitCode"]),
    )


def main(argv: list[str]) -> None:
    """Run the job of ``argv[0]`` (its folder), with ``argv[1]`` as ``$REMOTE_BATCH_OUTPUT_DIR`` and
    ``argv[2]`` (optional) the machine class's memory in GiB; record the outcome; exit with the job's
    exit code (``os._exit``: a thread the user's code left running must not keep the job alive)."""
    for stream in (sys.stdout, sys.stderr):  # each printed line reaches the log as it is printed
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            reconfigure(line_buffering=True)
    folder, output_dir = Path(argv[0]), Path(argv[1])
    memory_gib = int(argv[2]) if len(argv) > 2 and argv[2] else None
    outcome = run_job(read_input(folder), output_dir=output_dir, memory_gib=memory_gib)
    write_outcome(folder, outcome)
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(ValueError, OSError):
            stream.flush()
    os._exit(outcome.exit_code & 0xFF)


def container_main(exchange: str) -> None:
    """The job container's program (after ``ready``): run the job side of ``exchange/job`` in this
    interpreter (the image's python3, with the image's own site-packages) as a child process whose
    console goes to ``exchange/console``; forward SIGTERM, SIGINT and SIGHUP to it; write
    ``exchange/exit.json`` (``{"returncode": N}``, negative for a signal) when it ends; exit with its
    code. The job side starts in ``exchange/work`` (the image's working directory when the supervisor
    made none). A Python other than the environment's (``args.json`` ``python``) records an outcome
    saying so instead (a pickled call only loads in the version that made it)."""
    import signal
    import subprocess

    folder = Path(exchange)
    args = json.loads((folder / ARGS_FILE).read_text(encoding="utf-8"))
    job_folder = folder / JOB_FOLDER
    expected = str(args.get("python") or "")
    running = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if expected and expected != running:
        reason = f"The image's python3 is Python {running}, not the environment's {expected}"
        message = (
            f"{reason}: build the image on Python {expected}, "
            f"or create the environment with python {running}."
        )
        error = JobError(type="EnvironmentError", message=message, traceback="", reason=reason)
        write_outcome(job_folder, Outcome(messages=[message], error=error, exit_code=2))
        _write_exit(folder, 2)
        os._exit(2)
    environ = dict(os.environ)
    environ.update({str(k): str(v) for k, v in dict(args.get("environment") or {}).items()})
    memory = "" if args.get("memoryGib") is None else str(args["memoryGib"])
    argv = [
        sys.executable,
        "-I",
        "-c",
        BOOTSTRAP,
        str(folder / "lib"),
        str(job_folder),
        str(args["outputDir"]),
    ]
    with open(folder / CONSOLE_FILE, "ab", buffering=0) as console:
        work = folder / WORK_FOLDER
        process = subprocess.Popen(  # noqa: S603
            [*argv, memory],
            env=environ,
            stdout=console,
            stderr=console,
            cwd=str(work) if work.is_dir() else None,
        )

        def forward(signum: int, _frame: Any) -> None:
            with contextlib.suppress(OSError):
                process.send_signal(signum)

        for name in _FORWARDED_SIGNALS:
            signal.signal(getattr(signal, name), forward)
        returncode = process.wait()
    _write_exit(folder, returncode)
    os._exit(returncode & 0xFF if returncode >= 0 else 128 - returncode)


def _write_exit(folder: Path, returncode: int) -> None:
    partial = folder / (EXIT_FILE + ".partial")
    partial.write_text(json.dumps({"returncode": returncode}), encoding="utf-8")
    partial.replace(folder / EXIT_FILE)


def read_exit(exchange: Path) -> int | None:
    """The job side's return code :func:`container_main` wrote, or None while it has not."""
    try:
        return int(json.loads(read_regular(exchange / EXIT_FILE).decode("utf-8"))["returncode"])
    except FileNotFoundError:
        return None
