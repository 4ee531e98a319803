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
import json
import linecache
import os
import re
import signal
import subprocess
import sys
import traceback
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import CodeType, TracebackType
from typing import Any, TextIO

import cloudpickle

from worker.errors import InvalidJobInput

#: Filename of the user's code in tracebacks and warnings.
CODE_FILENAME = "<job>"
#: ``__name__`` of the namespace the user's code runs in (not ``__main__``: no script semantics).
CODE_MODULE = "__remote_batch__"
#: Environment variable naming the directory whose files become the job's outputs.
OUTPUT_DIR_VARIABLE = "REMOTE_BATCH_OUTPUT_DIR"

EXIT_SUCCESS = 0
EXIT_USER_ERROR = 1
EXIT_COMMAND_NOT_EXECUTABLE = 126
EXIT_COMMAND_NOT_FOUND = 127

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


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


JobInput = CodeInput | CommandInput | PickleInput


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
    """

    type: str
    message: str
    traceback: str

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
    match kind:
        case "code":
            source = document.get("code")
            if not isinstance(source, str):
                raise InvalidJobInput("'code' must be a string of Python source")
            return CodeInput(source=source, array_item=array_item)
        case "command":
            argv = document.get("command")
            if not (isinstance(argv, list) and argv and all(isinstance(arg, str) for arg in argv)):
                raise InvalidJobInput("'command' must be a non-empty list of strings")
            return CommandInput(argv=tuple(argv), array_item=array_item)
        case "pickle":
            text = document.get("pickle")
            if not isinstance(text, str):
                raise InvalidJobInput("'pickle' must be a base64 string")
            try:
                payload = base64.b64decode(text, validate=True)
            except binascii.Error as exc:
                raise InvalidJobInput(f"'pickle' is not valid base64 ({exc})") from exc
            return PickleInput(payload=payload, array_item=array_item)
        case _:
            raise InvalidJobInput(f"unknown input kind {kind!r}: expected 'code', 'command' or 'pickle'")


def _uploaded_input(kind: Any, payload: bytes | None, array_item: ArrayItem | None) -> JobInput:
    if payload is None:
        raise InvalidJobInput("the input names a 'payloadKey' but its object was not read")
    match kind:
        case "code":
            try:
                return CodeInput(source=payload.decode("utf-8"), array_item=array_item)
            except UnicodeDecodeError as exc:
                raise InvalidJobInput(f"the uploaded code is not UTF-8 ({exc})") from exc
        case "pickle":
            return PickleInput(payload=payload, array_item=array_item)
        case _:
            raise InvalidJobInput(f"an uploaded input must be of kind 'code' or 'pickle', not {kind!r}")


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
    """
    match job:
        case CodeInput():
            with _output_dir_in_environ(output_dir):
                return run_code(job.source, array_item=job.array_item, memory_gib=memory_gib)
        case PickleInput():
            with _output_dir_in_environ(output_dir):
                return run_pickle(job.payload, array_item=job.array_item, memory_gib=memory_gib)
        case CommandInput():
            return run_command(job.argv, output_dir=output_dir)


def run_code(source: str, *, array_item: ArrayItem | None = None, memory_gib: int | None = None) -> Outcome:
    """Run Python source like a notebook cell: the value of a final expression statement is the result.

    Everything before the last top-level statement is executed; if that statement is an expression
    it is evaluated and its value is the result, otherwise it is executed too and the result is None.
    The code runs in fresh globals ``{"__name__": "__remote_batch__", "__builtins__": builtins}``
    (plus ``item`` for an array child), with filename ``<job>`` in tracebacks.

    Parameters
    ----------
    source : str
        The Python source.
    array_item : ArrayItem or None
        Bound to the global name ``item`` before the code runs.
    memory_gib : int or None
        The machine class's memory in GiB, for the message of a ``MemoryError``.

    Returns
    -------
    Outcome
        Exit code 0, or 1 if the code raised (a ``SyntaxError`` included), or the ``SystemExit`` code.
    """
    messages: list[str] = []
    # Register the source so tracebacks and warnings can quote the user's lines.
    linecache.cache[CODE_FILENAME] = (len(source), None, source.splitlines(keepends=True), CODE_FILENAME)
    try:
        body, last_expression = _compile_cell(source)
    except (SyntaxError, ValueError) as exc:  # ValueError: null bytes in the source
        return _failed(exc, None, messages, memory_gib)
    namespace: dict[str, Any] = {"__name__": CODE_MODULE, "__builtins__": builtins}
    if array_item is not None:
        namespace["item"] = array_item.value

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

    Unpickling is part of the user's code: a payload that fails to load (e.g. it references a module
    the image lacks) is a failure of the job (exit code 1), not of the worker.

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

    def call() -> Any:
        fn, args, kwargs = cloudpickle.loads(payload)
        if array_item is not None:
            args = (array_item.value, *args)
        return fn(*args, **kwargs)

    return _run_user_call(call, messages, memory_gib)


def run_command(argv: tuple[str, ...] | list[str], *, output_dir: Path) -> Outcome:
    """Run ``argv`` without a shell, its stdout and stderr going to the worker's.

    The child gets the worker's environment plus ``REMOTE_BATCH_OUTPUT_DIR``, stays in the worker's
    process group, and (on Linux) is sent SIGKILL if the worker dies, so a killed job leaves no orphan.

    Parameters
    ----------
    argv : sequence of str
        The program and its arguments; the program is looked up on ``PATH``.
    output_dir : Path
        Exported as ``REMOTE_BATCH_OUTPUT_DIR``.

    Returns
    -------
    Outcome
        Result None; exit code the command's own (128 + N when killed by signal N), 127 when the
        program is not found, 126 when it cannot be executed.
    """
    env = {**os.environ, OUTPUT_DIR_VARIABLE: str(output_dir)}
    _flush_standard_streams()  # keep the worker's own lines in order with the child's
    try:
        # Running the user's argv is the point (S603); preexec_fn is safe: the worker has no threads.
        completed = subprocess.run(  # noqa: S603
            list(argv), env=env, check=False, preexec_fn=_parent_death_signal_hook()
        )
    except FileNotFoundError as exc:
        return _command_not_run(exc, f"command not found: {argv[0]}", EXIT_COMMAND_NOT_FOUND)
    except OSError as exc:
        return _command_not_run(
            exc, f"command cannot be executed: {argv[0]} ({exc.strerror})", EXIT_COMMAND_NOT_EXECUTABLE
        )
    except KeyboardInterrupt as exc:  # subprocess.run has already killed and reaped the child
        return _failed(exc, None, [], None)
    if completed.returncode == 0:
        return Outcome()
    exit_code = completed.returncode if completed.returncode > 0 else 128 - completed.returncode
    error = JobError(
        type="CalledProcessError",
        message=str(subprocess.CalledProcessError(completed.returncode, list(argv))),
        traceback="",
    )
    _report(error.as_message())
    return Outcome(messages=[error.as_message()], error=error, exit_code=exit_code)


def _command_not_run(exc: OSError, message: str, exit_code: int) -> Outcome:
    error = JobError(type=type(exc).__name__, message=message, traceback="")
    _report(error.as_message())
    return Outcome(messages=[error.as_message()], error=error, exit_code=exit_code)


def _parent_death_signal_hook() -> Callable[[], None] | None:
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


def _run_user_call(call: Callable[[], Any], messages: list[str], memory_gib: int | None) -> Outcome:
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
    return _failed(raised, raised.__traceback__, messages, memory_gib)


def _exited(exc: SystemExit, messages: list[str]) -> Outcome:
    code = exc.code
    if code is None or code == 0:
        return Outcome(messages=messages)
    exit_code = int(code) if isinstance(code, int) else EXIT_USER_ERROR
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
    text = "".join(traceback.format_exception(type(exc), exc, user_tb))
    message = str(exc)
    if isinstance(exc, MemoryError) and memory_gib is not None:
        message = f"Memory limit of {memory_gib} GiB exceeded"
    error = JobError(type=type(exc).__name__, message=message, traceback=text)
    if user_tb is not None:
        traceback.clear_frames(user_tb)  # drop the user's locals now (a MemoryError left them big)
    _report(text.rstrip("\n"))
    if message != str(exc):
        _report(error.as_message())
    messages.extend([error.as_message(), text])
    return Outcome(messages=messages, error=error, exit_code=exit_code)


def _user_frames(tb: TracebackType | None) -> TracebackType | None:
    """Skip the worker's own frames at the top of a traceback."""
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return tb


@contextmanager
def _capturing_warnings(messages: list[str]) -> Iterator[None]:
    """Append each warning shown to ``messages`` and still show it on stderr."""
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
            messages.append(f"{filename}:{lineno}: {category.__name__}: {message}")
            show(message, category, filename, lineno, file, line)

        warnings.showwarning = show_and_record
        yield


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
        os.write(2, (text + "\n").encode("utf-8", "replace"))
