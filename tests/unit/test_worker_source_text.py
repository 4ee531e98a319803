"""Code saved on another platform runs as ``python file.py`` runs it (issue 22, item 2).

The oracle is CPython itself: ``compile()`` of a file's *bytes* reads them as the interpreter reads a
source file (a UTF-8 byte-order mark, a PEP 263 coding declaration, ``\\r\\n`` and ``\\r`` line
endings). The worker gets the same program either as the ``code`` string (the file's bytes decoded
as UTF-8, byte-order mark kept, as a JSON producer sends them) or as the uploaded bytes themselves;
it must accept exactly what CPython accepts, with the same result.
"""

from __future__ import annotations

import codecs
import json
from pathlib import Path
from typing import Any

import pytest

from worker.errors import InvalidJobInput
from worker.runner import parse_job_input, run_code, run_job, source_lines

# Each program leaves its answer in ``result`` and ends with the expression ``result``.
PROGRAMS = {
    "arithmetic": "result = 6 * 7\nresult\n",
    "block": "total = 0\nfor i in range(4):\n    total += i\nresult = total\nresult\n",
    "string literal over lines": "result = '''a\nb'''\nresult\n",
    "non-ASCII text": "name = 'café ☕'\nresult = len(name)\nresult\n",
}


def _crlf(data: bytes) -> bytes:
    return data.replace(b"\n", b"\r\n")


def _cr(data: bytes) -> bytes:
    return data.replace(b"\n", b"\r")


def _form_feed(data: bytes) -> bytes:
    return b"\x0c" + data.replace(b"\n", b"\n\x0c")  # a form feed at the start of every line


#: How other platforms and editors save the same file.
SAVED_AS = {
    "LF": lambda data: data,
    "CRLF (Windows)": _crlf,
    "CR (classic Mac OS)": _cr,
    "UTF-8 BOM": lambda data: codecs.BOM_UTF8 + data,
    "UTF-8 BOM and CRLF (Notepad)": lambda data: codecs.BOM_UTF8 + _crlf(data),
    "form feeds": _form_feed,
    "latin-1 with a coding declaration": lambda data: (
        b"# -*- coding: latin-1 -*-\n" + data.decode("utf-8").encode("latin-1", "replace")
    ),
    "two BOMs": lambda data: codecs.BOM_UTF8 * 2 + data,
    "UTF-16 with BOM (PowerShell 5 redirect)": lambda data: data.decode("utf-8").encode("utf-16"),
    "no-break space": lambda data: data.replace(b"= ", "=\u00a0".encode()),
}


def _cpython(data: bytes) -> tuple[bool, Any]:
    """(accepted, result) of the bytes as CPython reads a source file."""
    namespace: dict[str, Any] = {}
    try:
        code = compile(data, "<file>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False, None
    exec(code, namespace)
    return True, namespace["result"]


def _uploaded(data: bytes, output_dir: Path) -> tuple[bool, Any]:
    """(accepted, result) of the bytes sent as an upload (``payloadKey``)."""
    raw = json.dumps({"kind": "code", "payloadKey": "inputs/upload"}).encode()
    try:
        job = parse_job_input(raw, data)
    except InvalidJobInput:
        return False, None
    outcome = run_job(job, output_dir=output_dir)
    return outcome.error is None, outcome.result


def _inline(data: bytes, output_dir: Path) -> tuple[bool, Any] | None:
    """(accepted, result) of the file's text sent as ``code``; None when it is not UTF-8 text."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    job = parse_job_input(json.dumps({"kind": "code", "code": text}).encode())
    outcome = run_job(job, output_dir=output_dir)
    return outcome.error is None, outcome.result


@pytest.mark.parametrize("program", PROGRAMS.values(), ids=list(PROGRAMS))
@pytest.mark.parametrize("saved_as", SAVED_AS.values(), ids=list(SAVED_AS))
def test_code_is_accepted_exactly_as_cpython_accepts_the_file(program, saved_as, tmp_path):
    data = saved_as(program.encode("utf-8"))
    expected = _cpython(data)

    assert _uploaded(data, tmp_path) == expected
    inline = _inline(data, tmp_path)
    if inline is not None:
        assert inline == expected


def test_the_reported_bom_input_answers_42(tmp_path):
    job = parse_job_input(json.dumps({"kind": "code", "code": "\ufeff6 * 7"}).encode())
    outcome = run_job(job, output_dir=tmp_path)

    assert outcome.error is None
    assert outcome.result == 42


@pytest.mark.parametrize(
    "separator", ["\x0c", "\x1c", "\x85", "\u2028"], ids=["form feed", "FS", "NEL", "LINE SEPARATOR"]
)
def test_a_traceback_quotes_the_line_python_counts(separator):
    # The character sits in a comment on line 1: Python counts it as part of that line.
    outcome = run_code(f"x = 1  # a{separator}b\r\ny = x / 0\r\n")

    assert outcome.error is not None
    assert 'File "<job>", line 2' in outcome.error.traceback
    assert "y = x / 0" in outcome.error.traceback


@pytest.mark.parametrize(
    ("text", "lines"),
    [("", []), ("a", ["a"]), ("a\n", ["a\n"]), ("a\x0cb\nc", ["a\x0cb\n", "c"]), ("\n\n", ["\n", "\n"])],
)
def test_source_lines_split_at_newlines_only(text, lines):
    assert source_lines(text) == lines
    assert "".join(source_lines(text)) == text
