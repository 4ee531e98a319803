"""Job-controlled text never reaches the terminal raw, and a closed pipe ends a command quietly
(issue 22, items 5 and 6).

Every command that prints text a job or another user controls is run against a fake server whose
every such field holds escape sequences; its whole output (stdout and stderr) must hold no control
character but the newlines and tabs of the layout, and must show the sequence escaped.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from typer.testing import CliRunner

from remote_batch import cli, cli_environments
from remote_batch.cli import app
from remote_batch.terminal import EXIT_BROKEN_PIPE, json_text, size_text, visible
from tests.sdk.conftest import TOKEN, error, job

#: What a hostile job puts in its text: retitle the window, clear the screen, an 8-bit CSI, a
#: right-to-left override, and rich markup.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x9b6n\u202e[red]x[/red]"
SHOWN = "\\x1b]0;pwned\\x07\\x1b[2J\\x9b6n\\u202e[red]x[/red]"
#: Control characters a terminal acts on (newline and tab are the layout's own).
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")

JOB_ID = "job-01TEST"
HOSTILE_JOB = job(
    name=HOSTILE,
    statusReason=HOSTILE,
    status="Terminated",
    machineClass=HOSTILE,
    environment={"name": HOSTILE, "hash": HOSTILE, "python": HOSTILE},
)
ARRAY = job(
    type="Array", arraySize=1, childStatusCounts={"Terminated": 1}, status="Terminated", statusReason=HOSTILE
)
CHILD = job(
    jobId=f"{JOB_ID}:0",
    arrayIndex=0,
    parentJobId=JOB_ID,
    type="ArrayChild",
    name=HOSTILE,
    statusReason=HOSTILE,
)
RESULT = {
    "jobId": JOB_ID,
    "result": None,
    "resultRepr": HOSTILE,
    "messages": [HOSTILE, f"Traceback (most recent call last):\n  {HOSTILE}\nValueError: {HOSTILE}"],
}
LOG = {
    "jobId": JOB_ID,
    "events": [{"timestamp": "2026-11-29T17:20:01.000Z", "message": HOSTILE}],
    "nextToken": None,
}

HOSTILE_ENVIRONMENT = {
    "name": HOSTILE,
    "python": HOSTILE,
    "requirements": [HOSTILE],
    "indexUrl": HOSTILE,
    "extraIndexUrls": [HOSTILE],
    "image": None,
    "status": "Failed",
    "statusReason": HOSTILE,
    "hash": HOSTILE,
    "packages": [{"name": HOSTILE, "version": HOSTILE}],
    "sizeBytes": 0,
    "createdAt": "2026-12-01T10:00:00Z",
    "readyAt": None,
}
BUILD_LOG = {"name": "ml", "events": LOG["events"], "nextToken": None}

#: Each command that prints job text: its arguments, and the answers of the routes it reads.
COMMANDS: dict[str, tuple[list[str], dict[tuple[str, str], Any]]] = {
    "status": (["status", JOB_ID], {("GET", f"/jobs/{JOB_ID}"): HOSTILE_JOB}),
    "status --json": (["status", JOB_ID, "--json"], {("GET", f"/jobs/{JOB_ID}"): HOSTILE_JOB}),
    "status of a job taking a parent's outputs": (
        ["status", JOB_ID],
        {("GET", f"/jobs/{JOB_ID}"): job(inputsFrom=[{"jobId": "job-p", "files": [HOSTILE]}])},
    ),
    "jobs": (["jobs"], {("GET", "/jobs"): {"jobs": [HOSTILE_JOB], "nextToken": None}}),
    "jobs --json": (["jobs", "--json"], {("GET", "/jobs"): {"jobs": [HOSTILE_JOB], "nextToken": None}}),
    "children": (
        ["children", JOB_ID],
        {("GET", f"/jobs/{JOB_ID}"): ARRAY, ("GET", f"/jobs/{JOB_ID}/children"): {"jobs": [CHILD]}},
    ),
    "wait": (["wait", JOB_ID], {("GET", f"/jobs/{JOB_ID}"): HOSTILE_JOB}),
    "abort": (
        ["abort", JOB_ID],
        {("GET", f"/jobs/{JOB_ID}"): job(status="Running"), ("POST", f"/jobs/{JOB_ID}/abort"): HOSTILE_JOB},
    ),
    "result (Terminated)": (
        ["result", JOB_ID],
        {("GET", f"/jobs/{JOB_ID}"): HOSTILE_JOB, ("GET", f"/jobs/{JOB_ID}/result"): RESULT},
    ),
    "result --json": (
        ["result", JOB_ID, "--json"],
        {
            ("GET", f"/jobs/{JOB_ID}"): job(),
            ("GET", f"/jobs/{JOB_ID}/result"): {**RESULT, "result": HOSTILE},
        },
    ),
    "outputs": (
        ["outputs", JOB_ID],
        {
            ("GET", f"/jobs/{JOB_ID}"): job(),
            ("GET", f"/jobs/{JOB_ID}/outputs"): {"files": [{"name": HOSTILE, "size": 1, "url": "http://x"}]},
        },
    ),
    "logs on a terminal": (
        ["logs", JOB_ID],
        {("GET", f"/jobs/{JOB_ID}"): job(), ("GET", f"/jobs/{JOB_ID}/log"): LOG},
    ),
    "logs --format csv on a terminal": (
        ["logs", JOB_ID, "--format", "csv"],
        {("GET", f"/jobs/{JOB_ID}"): job(), ("GET", f"/jobs/{JOB_ID}/log"): LOG},
    ),
    "logs --json on a terminal": (
        ["logs", JOB_ID, "--json"],
        {("GET", f"/jobs/{JOB_ID}"): job(), ("GET", f"/jobs/{JOB_ID}/log"): LOG},
    ),
    "env list": (
        ["env", "list"],
        {
            ("GET", "/environments"): {
                "environments": [{**HOSTILE_ENVIRONMENT, "hash": HOSTILE, "name": HOSTILE}]
            }
        },
    ),
    "env show": (["env", "show", "ml"], {("GET", "/environments/ml"): {**HOSTILE_ENVIRONMENT, "name": "ml"}}),
    "env log on a terminal": (
        ["env", "log", "ml"],
        {
            ("GET", "/environments/ml"): {**HOSTILE_ENVIRONMENT, "name": "ml"},
            ("GET", "/environments/ml/log"): BUILD_LOG,
        },
    ),
    "account": (
        ["account"],
        {
            ("GET", "/account"): {
                "accountId": HOSTILE,
                "creditBalance": 1,
                "email": HOSTILE,
                "roles": [HOSTILE],
            }
        },
    ),
    "members list": (
        ["members", "list"],
        {
            ("GET", "/account/members"): {
                "accountId": "a",
                "members": [{"userId": HOSTILE, "role": HOSTILE, "updatedBy": HOSTILE, "updatedAt": None}],
            }
        },
    ),
    "usage": (
        ["usage"],
        {
            ("GET", "/account/usage"): {
                "entries": [
                    {
                        "at": "2026-11-29T17:20:00Z",
                        "kind": HOSTILE,
                        "credits": 1,
                        "jobId": HOSTILE,
                        "balanceAfter": 1,
                    }
                ],
                "totalCharged": 1,
            },
            ("GET", f"/jobs/{HOSTILE}"): {"machineClass": HOSTILE},
        },
    ),
}


def _answer(httpserver: HTTPServer, routes: dict[tuple[str, str], Any]) -> None:
    for (method, path), body in routes.items():
        httpserver.expect_request(path, method=method).respond_with_json(body)


@pytest.mark.parametrize(("args", "routes"), COMMANDS.values(), ids=list(COMMANDS))
def test_no_command_prints_a_jobs_control_characters_raw(httpserver, api, monkeypatch, args, routes):
    _answer(httpserver, routes)
    monkeypatch.setattr(cli, "stdout_is_terminal", lambda: True)
    monkeypatch.setattr(cli_environments, "stdout_is_terminal", lambda: True)

    done = CliRunner().invoke(app, args, terminal_width=400)

    output = done.stdout + done.stderr
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    assert RAW_CONTROL.search(output) is None, repr(output)
    assert "pwned" in output


def test_an_api_error_message_is_printed_escaped(httpserver, api):
    httpserver.expect_request(f"/jobs/{JOB_ID}").respond_with_response(error(404, "NotFound", HOSTILE))

    done = CliRunner().invoke(app, ["status", JOB_ID])

    assert done.exit_code == 1
    assert done.stderr.strip() == f"Error: NotFound: {SHOWN}"


@pytest.mark.parametrize(
    ("raw", "terminal", "as_written"), [(False, False, True), (True, True, True), (False, True, False)]
)
def test_logs_prints_the_jobs_bytes_only_to_a_pipe_or_with_raw(
    httpserver, api, monkeypatch, raw, terminal, as_written
):
    _answer(httpserver, {("GET", f"/jobs/{JOB_ID}"): job(), ("GET", f"/jobs/{JOB_ID}/log"): LOG})
    monkeypatch.setattr(cli, "stdout_is_terminal", lambda: terminal)

    done = CliRunner().invoke(app, ["logs", JOB_ID, *(["--raw"] if raw else [])])

    assert done.exit_code == 0, done.output
    assert done.stdout == (HOSTILE if as_written else SHOWN) + "\n"


def test_json_output_stays_the_same_json_document():
    value = {"reason": HOSTILE, "surrogate": "\ud800", "plain": "café ☕ 日本"}
    text = json_text(value, indent=2)

    assert json.loads(text) == value
    assert RAW_CONTROL.search(text) is None
    assert "café ☕ 日本" in text  # what is no control character stays readable


@pytest.mark.parametrize(
    ("size", "shown"),
    [
        (None, "-"),
        (0, "0 bytes"),
        (1, "1 byte"),
        (1023, "1023 bytes"),
        (1024, "1.0 KiB"),
        (50_000, "48.8 KiB"),
        (1024 * 1024 - 40, "1.0 MiB"),  # 1023.96 KiB would show as 1024.0 KiB: the next unit instead
        (int(3.3 * 2**20), "3.3 MiB"),
        (10 * 2**30, "10.0 GiB"),
        (3 * 2**50, "3072.0 TiB"),  # past the last unit it stays in it
    ],
)
def test_a_size_is_shown_in_the_unit_that_reads_best(size, shown):
    assert size_text(size) == shown


@pytest.mark.parametrize("code", [*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, 0x202E, 0x2066, 0xD800])
def test_visible_escapes_every_control_character_and_keeps_layout_only_when_asked(code):
    char = chr(code)
    shown = visible(f"a{char}b")

    assert RAW_CONTROL.search(shown) is None
    assert "\n" not in shown and "\t" not in shown
    assert shown == "a" + (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}") + "b"
    kept = visible(f"a{char}b", multiline=True)
    assert kept == (f"a{char}b" if char in "\n\t" else shown)


# -- a closed pipe -------------------------------------------------------------------------------

#: Commands whose output a reader may stop reading early (``| head -1``), with their routes.
PIPED = {name: COMMANDS[name] for name in ("status", "jobs --json", "outputs", "logs on a terminal", "usage")}


@pytest.mark.parametrize(("args", "routes"), PIPED.values(), ids=list(PIPED))
def test_a_command_into_a_closed_pipe_ends_quietly(httpserver: HTTPServer, args, routes, tmp_path: Path):
    # Given the reader of stdout already gone (what `| head -1` leaves once it has its line)
    _answer(httpserver, routes)
    env = {
        **os.environ,
        "REMOTE_BATCH_ENDPOINT": httpserver.url_for("").rstrip("/"),
        "REMOTE_BATCH_TOKEN": TOKEN,
        "REMOTE_BATCH_CONFIG_DIR": str(tmp_path),
    }
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "remote_batch", *args],
            stdout=write_end,
            stderr=subprocess.PIPE,
            env=env,
            timeout=60,
            check=False,
        )
    finally:
        os.close(write_end)

    assert done.stderr == b""
    assert done.returncode == EXIT_BROKEN_PIPE
