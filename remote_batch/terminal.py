"""Text a job controls, made safe to show on a terminal.

A job's name, status reason, messages, output names, result and log, and an account's or member's
names, are written by whoever ran the job. Printed raw, an escape sequence in them would drive the
user's terminal (retitle the window, clear the screen, rewrite earlier lines, on some terminals
answer back into the shell). So the CLI shows every such text through ``visible``: each control
character escaped the way Python's ``repr`` writes it (``\\x1b``, ``\\u202e``). Only ``logs`` prints
the job's console raw, and only to a pipe or with ``--raw``.

Piped into a reader that stops early (``| head -1``), a command ends quietly (``end_on_broken_pipe``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from collections.abc import Iterator
from typing import Any, NoReturn

from rich.console import Console
from rich.markup import escape

#: The exit status of a command whose reader went away (``| head``): 128 + SIGPIPE, what a shell
#: reports for coreutils' commands in the same place.
EXIT_BROKEN_PIPE = 128 + 13

#: Characters that act on a terminal instead of printing, beyond the C0 controls: DEL and the C1
#: controls (``\x9b`` is CSI on terminals that read 8-bit controls), lone surrogates (no text at
#: all), the line and paragraph separators, and the bidirectional formatting characters that reorder
#: what is shown (CVE-2021-42574, "Trojan Source").
_BEYOND_C0 = "\x7f-\x9f\ud800-\udfff\u2028\u2029\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\x00-\x1f{_BEYOND_C0}]")
#: The same, but keeping newlines and tabs (a traceback's layout).
_CONTROL_BUT_LAYOUT = re.compile(f"[\x00-\x08\x0b-\x1f{_BEYOND_C0}]")
#: What ``json.dumps`` leaves unescaped of them (it escapes every C0 control in a string itself).
_JSON_UNSAFE = re.compile(f"[{_BEYOND_C0}]")


#: Most digits of an integer the CLI converts to show a result: past Python's own limit (4,300,
#: ``sys.get_int_max_str_digits``, a guard against the quadratic time of converting untrusted
#: text), up to what converts in milliseconds.
SHOWN_INT_DIGITS = 100_000


@contextlib.contextmanager
def int_digits_shown() -> Iterator[None]:
    """Within the block, integers of up to ``SHOWN_INT_DIGITS`` digits convert to and from text (a
    result's ``repr``, its JSON); Python's limit is restored after."""
    previous = sys.get_int_max_str_digits()
    if previous and previous < SHOWN_INT_DIGITS:
        sys.set_int_max_str_digits(SHOWN_INT_DIGITS)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(previous)


def result_repr(value: Any) -> str:
    """``repr`` of a job's result, its integers whole up to ``SHOWN_INT_DIGITS`` digits; a result
    that cannot be written out (a larger integer) is one line saying why, not a crash."""
    with int_digits_shown():
        try:
            return repr(value)
        except ValueError as exc:
            return f"<the {type(value).__name__} result is not shown: {exc}>"


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(value: Any, *, multiline: bool = False) -> str:
    """``str(value)`` with every control character escaped as ``\\xNN`` or ``\\uNNNN``.

    Parameters
    ----------
    value : Any
        Text (or anything, shown as ``str``) that a job or another user may control.
    multiline : bool
        Keep newlines and tabs (a traceback, several messages); otherwise they are escaped too, so
        one value stays on one line.

    Returns
    -------
    str
        Text that prints as itself on any terminal: no escape sequence, no reordering.
    """
    pattern = _CONTROL_BUT_LAYOUT if multiline else _CONTROL
    return pattern.sub(_escaped, str(value))


def cell(value: Any, *, multiline: bool = False) -> str:
    """``visible`` text for a rich renderable that reads markup (a table cell, a progress line):
    ``[`` and ``]`` escaped too, so ``[red]`` in a job's text is shown, not applied."""
    return escape(visible(value, multiline=multiline))


#: The units ``size_text`` steps through, each 1024 of the one before.
_SIZE_UNITS = ("KiB", "MiB", "GiB", "TiB")


def size_text(size: float | None) -> str:
    """``size`` bytes as a person reads it: ``812 bytes``, ``48.8 KiB``, ``3.3 MiB``, ``5.0 GiB``
    (binary units, the largest that keeps the value under 1024 as shown, one decimal); ``-`` for
    None (not known yet)."""
    if size is None:
        return "-"
    if size < 1024:
        return "1 byte" if size == 1 else f"{size:.0f} bytes"
    value = float(size)
    for unit in _SIZE_UNITS:
        value /= 1024
        if round(value, 1) < 1024 or unit == _SIZE_UNITS[-1]:
            break
    return f"{value:.1f} {unit}"


def json_text(value: Any, **dumps: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, **dumps)`` with the characters ``visible`` escapes
    written as JSON ``\\uNNNN`` escapes (C0 controls are escaped by ``json`` already): still the same
    JSON document, safe on a terminal."""
    text = json.dumps(value, ensure_ascii=False, **dumps)
    return _JSON_UNSAFE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def end_on_broken_pipe() -> NoReturn:
    """End quietly because stdout's reader closed it: Python's documented recipe (the ``signal``
    module's "Note on SIGPIPE"): point stdout at devnull, so the interpreter's last flush cannot fail
    with an "Exception ignored" line on stderr, and exit ``EXIT_BROKEN_PIPE``."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    raise SystemExit(EXIT_BROKEN_PIPE)


class PipeConsole(Console):
    """A rich console that ends the command as ``end_on_broken_pipe`` does when its reader is gone
    (rich's own exits 1)."""

    def on_broken_pipe(self) -> None:
        """Called by rich on a ``BrokenPipeError`` while writing."""
        self.quiet = True
        end_on_broken_pipe()
