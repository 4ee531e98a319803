"""Run a job's input (Python code, a command, or a pickled call) and describe what happened.

Nothing here talks to S3: ``run_job`` takes a parsed input and returns an ``Outcome``. The user's
output goes straight to this process's stdout/stderr (the job log) while it runs; warnings are both
shown there and collected; any ``BaseException`` the user's code raises (``SystemExit`` and
``KeyboardInterrupt`` included) becomes part of the ``Outcome`` instead of ending the worker.
"""

from __future__ import annotations

import ast
import base64
import binascii
import builtins
import contextlib
import ctypes
import importlib.util
import json
import linecache
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, ModuleType, TracebackType
from typing import Any, TextIO, Union

import cloudpickle

from worker.errors import InvalidJobInput

#: Filename of the user's code in tracebacks and warnings.
CODE_FILENAME = "<job>"
#: ``__name__`` of the namespace the user's code runs in (not ``__main__``: no script semantics).
CODE_MODULE = "__remote_batch__"
#: Environment variable naming the directory whose files become the job's outputs.
OUTPUT_DIR_VARIABLE = "REMOTE_BATCH_OUTPUT_DIR"
#: An array child's command: the path of a file holding its item as JSON, and its (global) index.
ITEM_FILE_VARIABLE = "REMOTE_BATCH_ITEM_FILE"
ARRAY_INDEX_VARIABLE = "AWS_BATCH_JOB_ARRAY_INDEX"

EXIT_SUCCESS = 0
EXIT_USER_ERROR = 1
EXIT_COMMAND_NOT_EXECUTABLE = 126
EXIT_COMMAND_NOT_FOUND = 127

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>

#: At most this many warnings, and this many characters of them, are kept in ``messages`` (all are
#: shown in the log); a last message says how many more there were.
MAX_RECORDED_WARNINGS = 100
MAX_RECORDED_WARNING_CHARS = 100_000
#: The last bytes of a command's output kept to tell why it failed (e.g. a final ``MemoryError`` line).
COMMAND_TAIL_BYTES = 64 * 1024
#: How long a command's output is still relayed after it exits, while something it started keeps the
#: pipe open, in seconds.
COMMAND_DRAIN_SECONDS = 2.0
#: Where the kernel counts the processes it killed for exceeding the container's memory: cgroup v2
#: ``memory.events`` and cgroup v1 ``memory.oom_control`` (``oom_kill N``, Linux >= 4.13). Inside a
#: container the cgroup namespace makes ``/sys/fs/cgroup`` the container's own.
CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_SELF_CGROUP = Path("/proc/self/cgroup")

# The last line a program prints when it runs out of memory: Python (numpy's _ArrayMemoryError too).
_PYTHON_MEMORY_ERROR = re.compile(rb"^(?:[\w.]+\.)?_?(?:Array)?MemoryError\b")
# What other runtimes print when an allocation fails (C++, Java, Node.js, Go, R, Rust, glibc's ENOMEM).
_NATIVE_MEMORY_ERROR = re.compile(
    rb"std::bad_alloc|java\.lang\.OutOfMemoryError|JavaScript heap out of memory|runtime: out of memory"
    rb"|cannot allocate vector of size|memory allocation of \d+ bytes failed|Cannot allocate memory"
)


@dataclass(frozen=True)
class ArrayItem:
    """The element of ``arrayItems`` an array job's child works on.

    Attributes
    ----------
    value : Any
        The JSON value (bound to ``item`` for code, first positional argument for a pickled call).
    index : int
        Its position in ``arrayItems``, from 0.
    """

    value: Any
    index: int


@dataclass(frozen=True)
class CodeInput:
    """Python source run like a notebook cell."""

    source: str
    array_item: ArrayItem | None = None


@dataclass(frozen=True)
class CommandInput:
    """An argv run without a shell."""

    argv: tuple[str, ...]
    array_item: ArrayItem | None = None


@dataclass(frozen=True)
class PickleInput:
    """A cloudpickle payload of ``(fn, args, kwargs)``, still pickled (unpickling runs user code)."""

    payload: bytes
    array_item: ArrayItem | None = None


#: The top-level packages of the job side's own modules (``worker.job_side`` and what it imports, its
#: copy of cloudpickle): hidden from the user's code, which imports only its environment's packages.
JOB_SIDE_PACKAGES = ("worker", "cloudpickle")
#: The job side's own modules while hidden (:func:`hide_job_side_modules`), by name; empty in the
#: supervisor's process, where ``worker`` and cloudpickle are the service's and stay importable.
_HIDDEN_MODULES: dict[str, ModuleType] = {}


def _of_packages(name: str, packages: tuple[str, ...]) -> bool:
    return name.partition(".")[0] in packages


def hide_job_side_modules(folder: str) -> None:
    """Take the job side's own modules out of ``sys.modules`` and ``folder`` (where they were imported
    from) off ``sys.path``, before the user's code runs: its ``import cloudpickle`` then finds its
    environment's (or fails), and ``import worker`` fails. The job side's code keeps its references."""
    for name in list(sys.modules):
        if _of_packages(name, JOB_SIDE_PACKAGES):
            _HIDDEN_MODULES[name] = sys.modules.pop(name)
    sys.path[:] = [entry for entry in sys.path if entry != folder]


@contextmanager
def job_side_pickler() -> Iterator[None]:
    """While the job side pickles or unpickles: ``sys.modules`` names its own cloudpickle under
    ``cloudpickle`` (a pickle refers to ``cloudpickle.cloudpickle`` functions by module name, e.g. a
    lambda's ``_make_function``; pickling checks the name leads back to the same function), and the
    user's cloudpickle modules, if imported, are set aside; afterwards they are as they were. A no-op
    unless :func:`hide_job_side_modules` ran."""
    own = {name: module for name, module in _HIDDEN_MODULES.items() if _of_packages(name, ("cloudpickle",))}
    if not own:
        yield
        return
    users = {
        name: sys.modules.pop(name) for name in list(sys.modules) if _of_packages(name, ("cloudpickle",))
    }
    sys.modules.update(own)
    try:
        yield
    finally:
        for name in [name for name in sys.modules if _of_packages(name, ("cloudpickle",))]:
            _HIDDEN_MODULES[name] = sys.modules.pop(name)  # a submodule imported meanwhile is the job side's
        sys.modules.update(users)


# Union, not |: this module runs on an image's python3 >= 3.9 too (worker.job_side).
JobInput = Union[CodeInput, CommandInput, PickleInput]  # noqa: UP007


@dataclass(frozen=True)
class JobError:
    """Why the user's code failed, as ``messages.json`` reports it.

    Attributes
    ----------
    type : str
        The exception's class name (``ZeroDivisionError``), or ``CalledProcessError`` for a command.
    message : str
        ``str()`` of the exception (``division by zero``).
    traceback : str
        The formatted traceback, starting at the user's first frame; empty for a command.
    reason : str or None
        A sentence for the job's ``statusReason`` that replaces ``"type: message"`` (e.g. ``Memory
        limit of 8 GiB exceeded``, ``Exited with code 5``), or None to use ``"type: message"``.
    signal : int or None
        The signal that killed the process, for a death by signal; the service words its
        ``statusReason`` (``Killed by signal SIGSEGV (segmentation fault)``), as for a container that
        exits 128 + N, so the sentence has one home (``functions.domain.batch_reasons``).
    """

    type: str
    message: str
    traceback: str
    reason: str | None = None
    signal: int | None = None

    def as_message(self) -> str:
        """Return ``"Type: message"`` (just ``"Type"`` when the message is empty)."""
        return f"{self.type}: {self.message}" if self.message else self.type


@dataclass
class Outcome:
    """What running a job produced.

    Attributes
    ----------
    result : Any
        The value of the code's last expression, or the function's return value; None for a command
        or a failure.
    messages : list of str
        Each warning as ``"<file>:<line>: Category: text"``, then, for a failure, ``"Type: message"``
        and the traceback text.
    error : JobError or None
        The failure, or None on success.
    exit_code : int
        The worker's exit code: 0, 1 when the code raised, the ``SystemExit`` code, or the command's.
    """

    result: Any = None
    messages: list[str] = field(default_factory=list)
    error: JobError | None = None
    exit_code: int = EXIT_SUCCESS


def payload_key(raw: bytes) -> str | None:
    """The ``payloadKey`` of an input object: the key of an uploaded object holding the payload
    itself (Python source, or pickle bytes), or None when the payload is inline or the input is bad
    (``parse_job_input`` says why)."""
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    key = document.get("payloadKey") if isinstance(document, dict) else None
    return key if isinstance(key, str) and key else None


def parse_job_input(raw: bytes, payload: bytes | None = None) -> JobInput:
    """Parse the input object (JSON, UTF-8) into a typed input.

    Parameters
    ----------
    raw : bytes
        The input object's body: ``{"kind": "code" | "command" | "pickle", ...}``, optionally with
        ``"arrayItem"`` and ``"arrayIndex"``. Instead of the ``code`` or ``pickle`` field it may
        have ``"payloadKey"`` (an upload, see ``payload_key``); ``payload`` is then that object's bytes.
    payload : bytes or None
        The uploaded payload (UTF-8 source for code, raw cloudpickle bytes for pickle).

    Returns
    -------
    CodeInput or CommandInput or PickleInput

    Raises
    ------
    InvalidJobInput
        Not UTF-8 JSON, not an object, an unknown ``kind``, or a field of the wrong type.
    """
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidJobInput(f"the input is not UTF-8 JSON ({exc})") from exc
    if not isinstance(document, dict):
        raise InvalidJobInput("the input must be a JSON object")
    array_item = _parse_array_item(document)
    kind = document.get("kind")
    if "payloadKey" in document:
        return _uploaded_input(kind, payload, array_item)
    # if/elif, not match: the job side runs on an image's python3 >= 3.9 (worker.job_side).
    if kind == "code":
        source = document.get("code")
        if not isinstance(source, str):
            raise InvalidJobInput("'code' must be a string of Python source")
        return CodeInput(source=source_text(source), array_item=array_item)
    if kind == "command":
        argv = document.get("command")
        if not (isinstance(argv, list) and argv and all(isinstance(arg, str) for arg in argv)):
            raise InvalidJobInput("'command' must be a non-empty list of strings")
        for index, arg in enumerate(argv):
            _check_argument(index, arg)
        return CommandInput(argv=tuple(argv), array_item=array_item)
    if kind == "pickle":
        text = document.get("pickle")
        if not isinstance(text, str):
            raise InvalidJobInput("'pickle' must be a base64 string")
        try:
            payload = base64.b64decode(text, validate=True)
        except binascii.Error as exc:
            raise InvalidJobInput(f"'pickle' is not valid base64 ({exc})") from exc
        return PickleInput(payload=payload, array_item=array_item)
    raise InvalidJobInput(f"unknown input kind {kind!r}: expected 'code', 'command' or 'pickle'")


def _uploaded_input(kind: Any, payload: bytes | None, array_item: ArrayItem | None) -> JobInput:
    if payload is None:
        raise InvalidJobInput("the input names a 'payloadKey' but its object was not read")
    if kind == "code":
        try:
            return CodeInput(source=source_text(payload), array_item=array_item)
        except (SyntaxError, UnicodeDecodeError) as exc:
            raise InvalidJobInput(f"the uploaded code cannot be read as Python source ({exc})") from exc
    if kind == "pickle":
        return PickleInput(payload=payload, array_item=array_item)
    raise InvalidJobInput(f"an uploaded input must be of kind 'code' or 'pickle', not {kind!r}")


def _check_argument(index: int, arg: str) -> None:
    """Refuse an argument no process can receive (execve takes NUL-terminated bytes)."""
    if "\x00" in arg:
        raise InvalidJobInput(f"command[{index}] contains a NUL character, which no program can receive")
    try:
        os.fsencode(arg)
    except UnicodeError:
        raise InvalidJobInput(
            f"command[{index}] contains a lone surrogate, which no program can receive"
        ) from None


def _parse_array_item(document: dict[str, Any]) -> ArrayItem | None:
    if "arrayItem" not in document:
        return None
    index = document.get("arrayIndex")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0:
        raise InvalidJobInput("'arrayIndex' must be an integer >= 0 when 'arrayItem' is given")
    return ArrayItem(value=document["arrayItem"], index=index)


def run_job(job: JobInput, *, output_dir: Path, memory_gib: int | None = None) -> Outcome:
    """Run any kind of input.

    Parameters
    ----------
    job : CodeInput or CommandInput or PickleInput
        What to run.
    output_dir : Path
        An empty directory; its path is in ``$REMOTE_BATCH_OUTPUT_DIR`` while the job runs, and the
        files left in it become the job's outputs.
    memory_gib : int or None
        The machine class's memory in GiB, named in the message of a ``MemoryError``.

    Returns
    -------
    Outcome
        When the kernel killed a process of the job for exceeding the container's memory while the
        job still ended otherwise (e.g. a subprocess of the code), a message says so.
    """
    oom_kills_before = oom_kill_count()
    if isinstance(job, CodeInput):
        with _output_dir_in_environ(output_dir):
            outcome = run_code(job.source, array_item=job.array_item, memory_gib=memory_gib)
    elif isinstance(job, PickleInput):
        with _output_dir_in_environ(output_dir):
            outcome = run_pickle(job.payload, array_item=job.array_item, memory_gib=memory_gib)
    else:
        with _item_environment(job.array_item) as item_env:
            outcome = run_command(job.argv, output_dir=output_dir, memory_gib=memory_gib, extra_env=item_env)
    oom_kills = _increase(oom_kills_before, oom_kill_count())
    if oom_kills and (outcome.error is None or outcome.error.type != "MemoryError"):
        note = (
            f"{_count(oom_kills, 'process')} of this job killed for exceeding the memory limit"
            f"{f' of {memory_gib} GiB' if memory_gib else ''}"
        )
        _report(note)
        outcome.messages.append(note)
    return outcome


def memory_reason(memory_gib: int | None) -> str:
    """The sentence of a job that ran out of memory: ``Memory limit of 8 GiB exceeded`` (the service's
    ``statusReason`` text for the same case in AWS Batch), or ``Out of memory`` when the limit is unknown."""
    return f"Memory limit of {memory_gib} GiB exceeded" if memory_gib is not None else "Out of memory"


def source_text(source: str | bytes) -> str:
    """Python source as ``python file.py`` reads it, whatever platform saved it.

    Bytes are decoded as CPython decodes a source file (``importlib.util.decode_source``: a UTF-8
    byte-order mark or a PEP 263 coding declaration, else UTF-8). A string is text already decoded
    (a JSON ``code`` field): one leading byte-order mark, which a file read by CPython never keeps
    but ``compile()`` of a string refuses, is dropped. Either way ``\\r\\n`` and a lone ``\\r`` become
    ``\\n``, as CPython's tokenizer reads them (inside string literals too), so the lines quoted in
    tracebacks are the lines Python counts. Anything else CPython refuses in a file (a second
    byte-order mark, a no-break space outside a string, UTF-16) stays a ``SyntaxError`` of the code.

    Parameters
    ----------
    source : str or bytes
        The code as the job's input holds it (``code``) or as uploaded (``payloadKey``).

    Returns
    -------
    str
        The source text with ``\\n`` line endings only.

    Raises
    ------
    SyntaxError
        Bytes with a coding declaration CPython does not know, or not UTF-8 without one.
    UnicodeDecodeError
        Bytes not in the encoding their declaration names.
    """
    if isinstance(source, bytes):
        return importlib.util.decode_source(source)
    return _unix_newlines(source.removeprefix("\ufeff"))


def _unix_newlines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def source_lines(text: str) -> list[str]:
    """The lines of source text as CPython numbers them: split at ``\\n`` only, each keeping it.

    ``str.splitlines`` also splits at form feeds, ``\\x1c``-``\\x1e``, ``\\x85`` and U+2028/U+2029,
    which Python source may hold on a line (a form feed in indentation, any of them in a string or a
    comment); tracebacks would then quote the wrong lines.
    """
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def run_code(source: str, *, array_item: ArrayItem | None = None, memory_gib: int | None = None) -> Outcome:
    """Run Python source like a notebook cell: the value of a final expression statement is the result.

    Everything before the last top-level statement is executed; if that statement is an expression
    it is evaluated and its value is the result, otherwise it is executed too and the result is None.
    The code runs in fresh globals ``{"__name__": "__remote_batch__", "__builtins__": builtins}``
    (plus ``item`` and ``arrayIndex`` for an array child), with filename ``<job>`` in tracebacks.

    Parameters
    ----------
    source : str
        The Python source (``source_text`` of the input); ``\\r\\n`` and ``\\r`` line endings are read
        as ``\\n``.
    array_item : ArrayItem or None
        Bound to the global names ``item`` (the value) and ``arrayIndex`` (its index in the array)
        before the code runs.
    memory_gib : int or None
        The machine class's memory in GiB, for the message of a ``MemoryError``.

    Returns
    -------
    Outcome
        Exit code 0, or 1 if the code raised (a ``SyntaxError`` included), or the ``SystemExit`` code.
    """
    messages: list[str] = []
    source = _unix_newlines(source)
    # Register the source so tracebacks and warnings can quote the user's lines.
    linecache.cache[CODE_FILENAME] = (len(source), None, source_lines(source), CODE_FILENAME)
    try:
        body, last_expression = _compile_cell(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as exc:
        # ValueError: NUL bytes or lone surrogates in the source; RecursionError: nested too deeply.
        return _failed(exc, None, messages, memory_gib)
    namespace: dict[str, Any] = {"__name__": CODE_MODULE, "__builtins__": builtins}
    if array_item is not None:
        namespace["item"] = array_item.value
        namespace["arrayIndex"] = array_item.index

    def cell() -> Any:
        exec(body, namespace)
        return None if last_expression is None else eval(last_expression, namespace)

    return _run_user_call(cell, messages, memory_gib)


def _compile_cell(source: str) -> tuple[CodeType, CodeType | None]:
    module = ast.parse(source, filename=CODE_FILENAME, mode="exec")
    last_expression: CodeType | None = None
    if module.body and isinstance(module.body[-1], ast.Expr):
        final = module.body.pop()
        assert isinstance(final, ast.Expr)
        # dont_inherit: the worker's own __future__ imports must not change the user's code.
        last_expression = compile(ast.Expression(body=final.value), CODE_FILENAME, "eval", dont_inherit=True)
    return compile(module, CODE_FILENAME, "exec", dont_inherit=True), last_expression


def run_pickle(
    payload: bytes, *, array_item: ArrayItem | None = None, memory_gib: int | None = None
) -> Outcome:
    """Unpickle ``(fn, args, kwargs)`` with cloudpickle and call ``fn(*args, **kwargs)``.

    Unpickling is part of the user's code: a payload that fails to load (garbage, a module the image
    lacks, a pickle made with another Python or cloudpickle version) is a failure of the job (exit
    code 1), not of the worker, reported in one line (``the job's pickle cannot be loaded: ...``)
    without the loader's own frames.

    Parameters
    ----------
    payload : bytes
        ``cloudpickle.dumps((fn, args, kwargs))``.
    array_item : ArrayItem or None
        Passed as the first positional argument, before ``args``.
    memory_gib : int or None
        The machine class's memory in GiB, for the message of a ``MemoryError``.

    Returns
    -------
    Outcome
        The function's return value as the result, or the failure.
    """
    messages: list[str] = []
    loaded = _run_user_call(lambda: _load_call(payload), messages, memory_gib, loading=True)
    if loaded.error is not None:
        return loaded
    fn, args, kwargs = loaded.result
    if array_item is not None:
        args = (array_item.value, *args)
    return _run_user_call(lambda: fn(*args, **kwargs), messages, memory_gib)


class PickleNotLoaded(Exception):
    """The job's pickle payload does not load into ``(function, args, kwargs)``."""


def _load_call(payload: bytes) -> tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]:
    with job_side_pickler():
        loaded = cloudpickle.loads(payload)
    if not (isinstance(loaded, tuple) and len(loaded) == 3):
        raise PickleNotLoaded(f"it holds {type(loaded).__name__}, not a (function, args, kwargs) tuple")
    fn, args, kwargs = loaded
    if not callable(fn) or not isinstance(args, (tuple, list)) or not isinstance(kwargs, dict):
        raise PickleNotLoaded("it must hold (function, args tuple, kwargs dict)")
    return fn, tuple(args), kwargs


def run_command(
    argv: tuple[str, ...] | list[str],
    *,
    output_dir: Path,
    memory_gib: int | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> Outcome:
    """Run ``argv`` without a shell; its stdout and stderr are relayed to the worker's stdout.

    The child gets the worker's environment plus ``REMOTE_BATCH_OUTPUT_DIR``, stays in the worker's
    process group, and (on Linux) is sent SIGKILL if the worker dies, so a killed job leaves no orphan.
    Its two streams share one pipe (the log keeps the order they were written in), which the worker
    copies to its own stdout as it comes, keeping the last ``COMMAND_TAIL_BYTES`` to tell why the
    command failed.

    Parameters
    ----------
    argv : sequence of str
        The program and its arguments; the program is looked up on ``PATH``.
    output_dir : Path
        Exported as ``REMOTE_BATCH_OUTPUT_DIR``.
    memory_gib : int or None
        The machine class's memory in GiB, for the reason of a command that ran out of memory.
    extra_env : Mapping[str, str] or None
        More variables for the command (an array child's ``REMOTE_BATCH_ITEM_FILE`` and
        ``AWS_BATCH_JOB_ARRAY_INDEX``).

    Returns
    -------
    Outcome
        Result None. Exit code the command's own (128 + N when killed by signal N), 127 when the
        program is not found, 126 when it cannot be executed. A command that ran out of memory (its
        output ends with a ``MemoryError`` or another runtime's allocation failure, or the kernel
        killed it for the container's memory limit) fails with reason ``Memory limit of N GiB
        exceeded``, as code does; one killed by a signal names the signal.
    """
    env = {**os.environ, **(extra_env or {}), OUTPUT_DIR_VARIABLE: str(output_dir)}
    program = argv[0]
    _flush_standard_streams()  # keep the worker's own lines in order with the child's
    oom_kills_before = oom_kill_count()
    try:
        # Running the user's argv is the point (S603); preexec_fn is safe: the worker has no threads.
        process = subprocess.Popen(  # noqa: S603
            list(argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=parent_death_signal_hook(),  # noqa: PLW1509
        )
    except FileNotFoundError as exc:
        return _command_not_run(exc, f"command not found: {program}", EXIT_COMMAND_NOT_FOUND)
    except OSError as exc:
        return _command_not_run(
            exc, f"command cannot be executed: {program} ({exc.strerror})", EXIT_COMMAND_NOT_EXECUTABLE
        )
    except (ValueError, subprocess.SubprocessError) as exc:  # e.g. an argument the OS cannot take
        return _command_not_run(
            exc,
            f"command cannot be executed: {program} ({describe_exception(exc)})",
            EXIT_COMMAND_NOT_EXECUTABLE,
        )
    try:
        tail = _relay_output(process)
        returncode = process.wait()
    except KeyboardInterrupt as exc:
        process.kill()
        process.wait()
        return _failed(exc, None, [], None)
    if returncode == 0:
        return Outcome()
    exit_code = exit_code_of(returncode)
    oom_killed = bool(_increase(oom_kills_before, oom_kill_count()))
    if oom_killed or ran_out_of_memory(tail):
        reason = memory_reason(memory_gib)
        error = JobError(type="MemoryError", message=reason, traceback="", reason=reason)
    elif returncode < 0:
        error = killed_by_signal("CalledProcessError", f"Command {program!r}", -returncode)
    else:
        error = JobError(
            type="CalledProcessError",
            message=f"Command {program!r} returned non-zero exit status {returncode}.",
            traceback="",
            reason=f"Exited with code {returncode}",
        )
    _report(error.as_message())
    return Outcome(messages=[error.as_message()], error=error, exit_code=exit_code)


def ran_out_of_memory(output_tail: bytes) -> bool:
    """Whether a failed program's last output says it ran out of memory.

    Parameters
    ----------
    output_tail : bytes
        The end of what the program wrote (stdout and stderr together).

    Returns
    -------
    bool
        True when its last non-empty line is a Python ``MemoryError`` (numpy's ``_ArrayMemoryError``
        included), or one of its last 20 lines holds another runtime's allocation failure
        (``std::bad_alloc``, ``java.lang.OutOfMemoryError``, ``JavaScript heap out of memory``,
        ``runtime: out of memory``, R's ``cannot allocate vector of size``, Rust's ``memory
        allocation of N bytes failed``, ``Cannot allocate memory`` = strerror(ENOMEM)).
    """
    lines = [line.strip() for line in output_tail.splitlines() if line.strip()][-20:]
    if not lines:
        return False
    return bool(_PYTHON_MEMORY_ERROR.match(lines[-1])) or any(_NATIVE_MEMORY_ERROR.search(x) for x in lines)


def exit_code_of(returncode: int) -> int:
    """A process's exit code as a container reports it: ``subprocess``'s ``-N`` for a death by
    signal N is 128 + N (the shell's and Docker's convention, which AWS Batch passes on)."""
    return 128 - returncode if returncode < 0 else returncode


def killed_by_signal(error_type: str, what: str, number: int) -> JobError:
    """The failure of ``what`` (``"Command 'x'"``, ``"The job's Python"``) killed by signal
    ``number``: the message names the signal for the log; the ``statusReason`` is the service's
    (``JobError.signal``)."""
    try:
        name = f"{signal.Signals(number).name} ({number})"
    except ValueError:
        name = str(number)
    return JobError(
        type=error_type, message=f"{what} was killed by signal {name}.", traceback="", signal=number
    )


def _relay_output(process: subprocess.Popen[bytes]) -> bytes:
    """Copy the child's pipe to fd 1 until it closes (or ``COMMAND_DRAIN_SECONDS`` after the child
    exits, if a process it started keeps it open); returns the last ``COMMAND_TAIL_BYTES``."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    tail = bytearray()
    writable = True
    exited_at: float | None = None
    with process.stdout, selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while True:
            if selector.select(timeout=0.2):
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                writable = writable and _write_all(1, chunk)
                tail += chunk
                del tail[:-COMMAND_TAIL_BYTES]
            if process.poll() is not None:
                exited_at = exited_at or time.monotonic()
                if time.monotonic() - exited_at > COMMAND_DRAIN_SECONDS:
                    break
    return bytes(tail)


def _write_all(fd: int, data: bytes) -> bool:
    """Write all of ``data``; False when the descriptor is gone (the output is then dropped)."""
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except InterruptedError:
            continue
        except OSError:
            return False
        view = view[written:]
    return True


def oom_kill_count() -> int | None:
    """How many processes the kernel has killed in this process's memory cgroup for exceeding its limit.

    Returns
    -------
    int or None
        The ``oom_kill`` counter of cgroup v2 ``memory.events`` or cgroup v1 ``memory.oom_control``
        (the container's own, or this process's cgroup on a host); None where neither is readable.
    """
    candidates = [CGROUP_ROOT / "memory.events", CGROUP_ROOT / "memory" / "memory.oom_control"]
    try:
        for line in PROC_SELF_CGROUP.read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if controllers == "":
                candidates.insert(0, CGROUP_ROOT / path.lstrip("/") / "memory.events")
            elif "memory" in controllers.split(","):
                candidates.insert(0, CGROUP_ROOT / "memory" / path.lstrip("/") / "memory.oom_control")
    except (OSError, ValueError):
        pass
    for candidate in candidates:
        try:
            text = candidate.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
    return None


def _increase(before: int | None, after: int | None) -> int:
    return after - before if before is not None and after is not None and after > before else 0


def _count(number: int, word: str) -> str:
    return f"1 {word}" if number == 1 else f"{number} {word}es"


def _command_not_run(exc: BaseException, message: str, exit_code: int) -> Outcome:
    error = JobError(
        type=type(exc).__name__, message=message, traceback="", reason=message[:1].upper() + message[1:]
    )
    _report(error.as_message())
    return Outcome(messages=[error.as_message()], error=error, exit_code=exit_code)


def parent_death_signal_hook() -> Callable[[], None] | None:
    """Return a ``preexec_fn`` that makes the child get SIGKILL when the worker dies (Linux only)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    parent_pid = os.getpid()
    kill = int(signal.SIGKILL)

    def die_with_parent() -> None:
        # Runs in the child between fork and exec: no imports, no allocation-heavy work.
        prctl(_PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if os.getppid() != parent_pid:  # the worker died before prctl took effect
            os.kill(os.getpid(), kill)

    return die_with_parent


def _run_user_call(
    call: Callable[[], Any], messages: list[str], memory_gib: int | None, *, loading: bool = False
) -> Outcome:
    stdout, stderr = sys.stdout, sys.stderr
    raised: BaseException | None = None
    result: Any = None
    try:
        with _capturing_warnings(messages):
            result = call()
    except BaseException as exc:  # the user's code may raise anything; bookkeeping must go on
        raised = exc
    finally:
        sys.stdout, sys.stderr = stdout, stderr  # the code may have redirected or replaced them
        _flush_standard_streams()
    if raised is None:
        return Outcome(result=result, messages=messages)
    if isinstance(raised, SystemExit):
        return _exited(raised, messages)
    if loading:
        return _not_loaded(raised, messages, memory_gib)
    return _failed(raised, raised.__traceback__, messages, memory_gib)


def _not_loaded(exc: BaseException, messages: list[str], memory_gib: int | None) -> Outcome:
    """The failure of a pickle that does not load: one line, and only frames of the user's own code
    (a ``__setstate__`` shipped by value), never the loader's (cloudpickle, pickle, importlib)."""
    if isinstance(exc, MemoryError):
        return _failed(exc, None, messages, memory_gib)
    detail = describe_exception(exc, with_type=not isinstance(exc, PickleNotLoaded))
    versions = (
        f"Python {sys.version_info.major}.{sys.version_info.minor}, cloudpickle {cloudpickle.__version__}"
    )
    hint = "" if isinstance(exc, ImportError) else f"; the job runs {versions}"
    message = f"the job's pickle cannot be loaded ({detail}{hint})"
    frames = _format_user_frames(exc.__traceback__)
    error = JobError(
        type=type(exc).__name__, message=message, traceback=frames, reason=message[:1].upper() + message[1:]
    )
    if frames:
        _report(frames.rstrip("\n"))
    _report(error.as_message())
    messages.append(error.as_message())
    if frames:
        messages.append(frames)
    return Outcome(messages=messages, error=error, exit_code=EXIT_USER_ERROR)


_LOADER_DIRECTORIES = tuple(
    str(Path(path).resolve().parent) + os.sep
    for path in (cloudpickle.__file__, traceback.__file__)  # cloudpickle's package, the standard library
    if path
)


def _format_user_frames(tb: TracebackType | None) -> str:
    """The traceback of ``tb`` without the worker's, cloudpickle's and the standard library's frames;
    empty when no frame is left."""
    summary = [
        frame
        for frame in traceback.extract_tb(tb)
        if frame.filename != __file__
        and not frame.filename.startswith("<frozen ")
        and not str(Path(frame.filename).resolve()).startswith(_LOADER_DIRECTORIES)
    ]
    if not summary:
        return ""
    return "Traceback (most recent call last):\n" + "".join(
        traceback.StackSummary.from_list(summary).format()
    )


def _exited(exc: SystemExit, messages: list[str]) -> Outcome:
    code = exc.code
    if code is None or code == 0:
        return Outcome(messages=messages)
    # The process exit status keeps the low 8 bits (-1 → 255); a non-zero code that keeps none (256,
    # 10**5000) must not read as success.
    exit_code = (int(code) & 0xFF or EXIT_USER_ERROR) if isinstance(code, int) else EXIT_USER_ERROR
    return _failed(exc, exc.__traceback__, messages, None, exit_code=exit_code)


def _failed(
    exc: BaseException,
    tb: TracebackType | None,
    messages: list[str],
    memory_gib: int | None,
    *,
    exit_code: int = EXIT_USER_ERROR,
) -> Outcome:
    user_tb = _user_frames(tb)
    message = describe_exception(exc, with_type=False, limit=None)
    try:
        text = "".join(traceback.format_exception(type(exc), exc, user_tb))
    except BaseException:  # a broken exception object (e.g. its __cause__ or notes raise)
        text = describe_exception(exc) + "\n"
    reason = None
    if isinstance(exc, MemoryError) and memory_gib is not None:
        message = reason = memory_reason(memory_gib)
    error = JobError(type=type(exc).__name__, message=message, traceback=text, reason=reason)
    if user_tb is not None:
        traceback.clear_frames(user_tb)  # drop the user's locals now (a MemoryError left them big)
    _report(text.rstrip("\n"))
    if reason is not None:
        _report(error.as_message())
    messages.extend([error.as_message(), text])
    return Outcome(messages=messages, error=error, exit_code=exit_code)


def describe_exception(exc: BaseException, *, with_type: bool = True, limit: int | None = 500) -> str:
    """``"Type: message"`` (or just the message) of an exception, even when its ``__str__`` raises.

    Parameters
    ----------
    exc : BaseException
        Any exception, the user's included.
    with_type : bool
        Prefix the class name.
    limit : int or None
        Cut the text to this many characters (``…`` last) and fold it to one line; None keeps it whole.

    Returns
    -------
    str
        E.g. ``ZeroDivisionError: division by zero``; ``<exception str() failed>`` stands for a
        message that cannot be computed.
    """
    try:
        text = str(exc)
    except BaseException:
        text = "<exception str() failed>"
    if limit is not None:
        text = " ".join(text.split())
        if len(text) > limit:
            text = text[: limit - 1] + "…"
    if not with_type:
        return text
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _user_frames(tb: TracebackType | None) -> TracebackType | None:
    """Skip the worker's own frames at the top of a traceback."""
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return tb


@contextmanager
def _capturing_warnings(messages: list[str]) -> Iterator[None]:
    """Append each warning shown to ``messages`` (at most ``MAX_RECORDED_WARNINGS`` of them, in
    ``MAX_RECORDED_WARNING_CHARS`` characters, then one line counting the rest) and still show it on
    stderr."""
    kept = [0, 0]  # warnings kept, their characters
    dropped = [0]
    with warnings.catch_warnings():
        # Like __main__ gets by default: DeprecationWarnings the user's own code triggers are shown.
        warnings.filterwarnings("default", category=DeprecationWarning, module=re.escape(CODE_MODULE))
        show = warnings.showwarning

        def show_and_record(  # noqa: PLR0917 (the signature of warnings.showwarning)
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: TextIO | None = None,
            line: str | None = None,
        ) -> None:
            text = f"{filename}:{lineno}: {category.__name__}: {message}"
            if kept[0] < MAX_RECORDED_WARNINGS and kept[1] + len(text) <= MAX_RECORDED_WARNING_CHARS:
                messages.append(text)
                kept[0] += 1
                kept[1] += len(text)
            else:
                dropped[0] += 1
            show(message, category, filename, lineno, file, line)

        warnings.showwarning = show_and_record
        try:
            yield
        finally:
            if dropped[0]:
                messages.append(f"{dropped[0]} more warnings not kept here (the job log shows them all)")


@contextmanager
def _item_environment(array_item: ArrayItem | None) -> Iterator[dict[str, str]]:
    """An array child's command environment: its item as JSON in a file of its own (removed
    afterwards; not in the output directory) named by ``REMOTE_BATCH_ITEM_FILE``, and its index in
    the whole array as ``AWS_BATCH_JOB_ARRAY_INDEX`` (AWS Batch's own names the index in the span
    only). Nothing for a job that is no array child."""
    if array_item is None:
        yield {}
        return
    # mkdtemp and rmtree, not TemporaryDirectory(ignore_cleanup_errors=...): that is Python 3.10's.
    tmp = tempfile.mkdtemp(prefix="remote-batch-item-")
    try:
        path = Path(tmp, "item.json")
        path.write_text(json.dumps(array_item.value, ensure_ascii=False), encoding="utf-8")
        yield {ITEM_FILE_VARIABLE: str(path), ARRAY_INDEX_VARIABLE: str(array_item.index)}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextmanager
def _output_dir_in_environ(output_dir: Path) -> Iterator[None]:
    previous = os.environ.get(OUTPUT_DIR_VARIABLE)
    os.environ[OUTPUT_DIR_VARIABLE] = str(output_dir)
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(OUTPUT_DIR_VARIABLE, None)
        else:
            os.environ[OUTPUT_DIR_VARIABLE] = previous


def _flush_standard_streams() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(ValueError, OSError, AttributeError):  # closed or replaced by the user
            stream.flush()


def _report(text: str) -> None:
    """Write a line to stderr (the job log), even if the user's code closed ``sys.stderr``."""
    try:
        print(text, file=sys.stderr, flush=True)
    except (ValueError, OSError, AttributeError):
        # The code closed the stream, or even fd 2: the line is lost, the job goes on.
        _write_all(2, (text + "\n").encode("utf-8", "replace"))
