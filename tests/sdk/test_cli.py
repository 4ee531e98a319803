"""The CLI's output conventions against a fake server: every read command's ``--json`` is the API's
JSON (camelCase, as docs/http-api.md names it), tables show what a person needs to tell rows apart, and bad
option values are refused naming the value."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from typer.testing import CliRunner

import remote_batch as rb
from remote_batch.cli import app
from tests.sdk.conftest import Recorder, job, ok

MACHINE_CLASS = {
    "name": "Basic1x8",
    "vcpus": 1,
    "memoryGiB": 8,
    "gpus": 0,
    "gpuType": None,
    "creditsPerHour": 60.0,
}

ENVIRONMENT = {
    "name": "ml",
    "python": "3.12",
    "status": "Ready",
    "sizeBytes": 1,
    "createdAt": "2026-12-01T10:00:00Z",
}
MEMBER = {"userId": "u", "role": "owner", "updatedBy": None, "updatedAt": None}


def test_machine_classes_json_is_the_apis_document(httpserver: HTTPServer, api: rb.Client) -> None:
    httpserver.expect_request("/machine-classes").respond_with_json({"machineClasses": [MACHINE_CLASS]})
    done = CliRunner().invoke(app, ["machine-classes", "--json"])
    assert done.exit_code == 0, done.output
    # a list, as jobs --json and children --json print theirs, of the API's objects (camelCase)
    assert json.loads(done.stdout) == [MACHINE_CLASS]


def test_estimate_json_is_the_apis_document(httpserver: HTTPServer, api: rb.Client) -> None:
    answer = {"machineClass": "Basic1x8", "seconds": 30, "credits": 1.0, "creditsPerHour": 60.0,
              "minimumSeconds": 60}  # fmt: skip
    httpserver.expect_request("/estimate", method="POST").respond_with_json(answer)
    done = CliRunner().invoke(app, ["estimate", "--seconds", "30", "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout) == answer


def test_jobs_limit_below_one_is_refused_naming_the_option(httpserver: HTTPServer, api: rb.Client) -> None:
    done = CliRunner().invoke(app, ["jobs", "--limit", "0"])
    assert done.exit_code == 2
    assert "Invalid value for '--limit'" in done.output
    assert "greater than or equal to 1" in done.output
    assert httpserver.log == []


def test_logs_json_prints_one_object_per_line(httpserver: HTTPServer, api: rb.Client) -> None:
    httpserver.expect_request("/jobs/job-01TEST").respond_with_json(job())
    events = [{"timestamp": "2026-11-29T17:20:01.000Z", "message": "hello"}]
    httpserver.expect_request("/jobs/job-01TEST/log").respond_with_json(
        {"jobId": "job-01TEST", "events": events, "nextToken": None}
    )
    done = CliRunner().invoke(app, ["logs", "job-01TEST", "--json"])
    assert done.exit_code == 0, done.output
    assert [json.loads(line) for line in done.stdout.splitlines()] == [
        {"timestamp": "2026-11-29T17:20:01.000Z", "message": "hello"}
    ]


def test_logs_json_with_csv_format_is_refused(httpserver: HTTPServer, api: rb.Client) -> None:
    done = CliRunner().invoke(
        app, ["logs", "job-01TEST", "--json", "--format", "csv"], env={"COLUMNS": "200"}
    )
    assert done.exit_code == 2
    assert "--format csv" in done.output


def test_children_table_shows_each_index_and_whole_ids(httpserver: HTTPServer, api: rb.Client) -> None:
    parent = "job-01ARRAYPARENTWITHALONGID0"
    httpserver.expect_request(f"/jobs/{parent}").respond_with_json(
        job(jobId=parent, type="Array", arraySize=12, childStatusCounts={"Succeeded": 12})
    )
    children = [
        job(jobId=f"{parent}:{i}", parentJobId=parent, arrayIndex=i, type="ArrayChild") for i in (0, 11)
    ]
    httpserver.expect_request(f"/jobs/{parent}/children").respond_with_json(
        {"jobs": children, "nextToken": None}
    )
    done = CliRunner().invoke(app, ["children", parent], terminal_width=200)
    assert done.exit_code == 0, done.output
    rows = [line.split() for line in done.stdout.splitlines() if parent in line]
    assert [(row[0], row[1]) for row in rows] == [("0", f"{parent}:0"), ("11", f"{parent}:11")]


def test_account_shows_unset_contacts_as_such(httpserver: HTTPServer, api: rb.Client) -> None:
    httpserver.expect_request("/account").respond_with_json(
        {"accountId": "acct-1", "creditBalance": 10.5, "email": None, "phone": None, "roles": ["user"]}
    )
    done = CliRunner().invoke(app, ["account"])
    assert done.exit_code == 0, done.output
    lines = {
        line.split()[0]: line.split(None, 1)[1].strip() for line in done.stdout.splitlines() if line.strip()
    }
    assert lines["email"] == "(not set)"
    assert lines["phone"] == "(not set)"
    assert lines["roles"] == "user"
    assert "None" not in done.stdout


def test_result_of_a_terminated_array_prints_what_its_children_produced(
    httpserver: HTTPServer, api: rb.Client, tmp_path: Path
) -> None:
    ended = job(type="Array", status="Terminated", statusReason="1 of 3 children failed", arraySize=3)
    httpserver.expect_request("/jobs/job-01TEST").respond_with_json(ended)
    document = {
        "jobId": "job-01TEST",
        "result": [1, None, 9],
        "errors": [{"index": 1, "message": "ZeroDivisionError: division by zero"}],
        "messages": [],
    }
    httpserver.expect_request("/jobs/job-01TEST/result", query_string="format=json").respond_with_json(
        document
    )
    done = CliRunner().invoke(app, ["result", "job-01TEST"])
    assert done.exit_code == 2
    assert "1 of 3 children failed" in done.stderr
    assert json.loads(done.stdout) == {"result": [1, None, 9], "errors": document["errors"]}


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["admin", "grant", "alice", "abc", "--reason", "x"], "CREDITS must be a number of credits"),
        (["admin", "grant", "alice", "NaN", "--reason", "x"], "CREDITS must be a finite number"),
        (["admin", "create-account", "bob", "--credits", "1e"], "--credits must be a number of credits"),
        (["submit", "--code", "1", "--credit-constraint", "ten"], "--credit-constraint must be a number"),
        (["submit", "--code", "1", "--notifications", "[{"], "--notifications is not valid JSON"),
    ],
)
def test_a_bad_number_or_json_option_is_refused_naming_it_before_any_request(
    httpserver: HTTPServer, api: rb.Client, args: list[str], named: str
) -> None:
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 2, done.output
    assert named in " ".join(done.output.split())  # rich wraps the message in a box
    assert httpserver.log == []


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["submit", "--", ""], "the command's program is empty ('')"),
        (["submit", "--code", " \n"], "--code ' \\n' is empty"),
        (["submit", "", "--wait"], "the command's program is empty ('')"),
        (["submit", "/tmp"], "'/tmp' is a directory"),
        (["submit", "--", "/tmp", "x"], "'/tmp' is a directory"),
        (["submit", "/no/such/job.py"], "'/no/such/job.py' cannot be read: No such file or directory"),
    ],
)
def test_an_empty_command_or_a_directory_is_refused_before_any_request(
    httpserver: HTTPServer, api: rb.Client, args: list[str], named: str
) -> None:
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 2, done.output
    assert named in " ".join(done.output.split())
    assert httpserver.log == []


@pytest.mark.parametrize(
    "args",
    [
        ["job.py", "--wait", "-m", "Basic2x8", "--json"],  # options after the file
        ["--wait", "job.py", "-m", "Basic2x8", "--json"],  # around it
        ["-wmBasic2x8", "--json", "job.py"],  # clustered short options, the value attached, before it
    ],
)
def test_submit_runs_a_py_file_as_code_with_its_options_before_or_after_it(
    httpserver: HTTPServer, api: rb.Client, args: list[str]
) -> None:
    # Given a file of code
    Path("job.py").write_text("6 * 7\n")
    recorder = Recorder(ok(job(status="Queued"), 202))
    httpserver.expect_request("/jobs", method="POST").respond_with_handler(recorder)
    httpserver.expect_request("/jobs/job-01TEST", method="GET").respond_with_json(
        job(machineClass="Basic2x8")
    )

    # When it is submitted with --wait, -m and --json wherever they are
    done = CliRunner().invoke(app, ["submit", *args])

    # Then it runs as code, on the class asked, is waited for (its final status read), printed as JSON
    assert done.exit_code == 0, done.output
    body = json.loads(recorder.requests[0]["body"])
    assert body["code"] == "6 * 7\n" and "command" not in body
    assert body["machineClass"] == "Basic2x8"
    assert [r.path for r, _ in httpserver.log] == ["/jobs", "/jobs/job-01TEST"]
    assert json.loads(done.stdout[done.stdout.index("{") :])["machineClass"] == "Basic2x8"


@pytest.mark.parametrize(
    ("args", "command", "name"),
    [
        (["--", "prog", "--flag", "-m", "x"], ["prog", "--flag", "-m", "x"], None),
        (["--name", "n", "--", "prog", "--", "--wait"], ["prog", "--", "--wait"], "n"),
        (["--name", "--", "--", "job.py"], ["job.py"], "--"),  # an option's value is no end of options
        (["-n", "--", "--", "job.py", "-w"], ["job.py", "-w"], "--"),
    ],
)
def test_submit_after_a_double_dash_sends_every_word_as_the_commands(
    httpserver: HTTPServer, api: rb.Client, args: list[str], command: list[str], name: str | None
) -> None:
    # Given a job.py here too (after --, a .py word is a program like any other)
    Path("job.py").write_text("6 * 7\n")
    recorder = Recorder(ok(job(status="Queued"), 202))
    httpserver.expect_request("/jobs", method="POST").respond_with_handler(recorder)

    done = CliRunner().invoke(app, ["submit", *args])

    # Then the words after the -- are the command's argv, options among them included, and not waited for
    assert done.exit_code == 0, done.output
    body = json.loads(recorder.requests[0]["body"])
    assert body["command"] == command and "code" not in body
    assert body.get("name") == name
    assert [r.path for r, _ in httpserver.log] == ["/jobs"]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["prog"], "'prog' is not one FILE.py: a .py file runs as code; to run a command put it after --"),
        (["prog", "arg"], "'prog arg' is not one FILE.py"),
        (["job.py", "other.py"], "'job.py other.py' is not one FILE.py"),
        (["job.py", "--", "prog"], "give exactly one of --code CODE, FILE.py, or -- CMD ARGS..."),
        (["--code", "1", "job.py"], "give exactly one of --code CODE, FILE.py, or -- CMD ARGS..."),
        (["--"], "give exactly one of --code CODE, FILE.py, or -- CMD ARGS..."),
        (["job.py", "--bogus"], "No such option: --bogus"),
    ],
)
def test_submit_refuses_words_that_are_no_file_of_code_outside_a_double_dash(
    httpserver: HTTPServer, api: rb.Client, args: list[str], named: str
) -> None:
    Path("job.py").write_text("1\n")
    done = CliRunner().invoke(app, ["submit", *args], env={"COLUMNS": "400"})
    assert done.exit_code == 2, done.output
    assert named in " ".join(done.output.replace("│", " ").split())
    assert httpserver.log == []


@pytest.mark.parametrize(
    ("args", "routes"),
    [
        (["jobs", "--json"], {"/jobs": {"jobs": [job()], "nextToken": None}}),
        (["env", "list", "--json"], {"/environments": {"environments": [ENVIRONMENT], "nextToken": None}}),
        (["members", "list", "--json"], {"/account/members": {"accountId": "a", "members": [MEMBER]}}),
    ],
)
def test_every_list_commands_json_is_a_list_of_the_apis_objects(
    httpserver: HTTPServer, api: rb.Client, args: list[str], routes: dict[str, Any]
) -> None:
    for path, answer in routes.items():
        httpserver.expect_request(path).respond_with_json(answer)
    done = CliRunner().invoke(app, args)
    assert done.exit_code == 0, done.output
    # The objects of the page's one list, not the page (no nextToken, no wrapper)
    (listed,) = [value for value in next(iter(routes.values())).values() if isinstance(value, list)]
    assert json.loads(done.stdout) == listed
    help_text = " ".join(CliRunner().invoke(app, [*args[:-1], "--help"]).output.replace("│", " ").split())
    assert "Print a JSON list of the API's objects (every page)" in help_text


def test_a_result_past_pythons_digit_limit_is_shown_whole(httpserver: HTTPServer, api: rb.Client) -> None:
    # Given a job whose result is an int of 5,001 digits (Python converts at most 4,300 by default)
    import base64
    import sys

    import cloudpickle
    from werkzeug import Response

    digits = "1" + "0" * 5000
    httpserver.expect_request("/jobs/job-01TEST").respond_with_json(job())
    pickled = base64.b64encode(cloudpickle.dumps(10**5000)).decode()
    httpserver.expect_request("/jobs/job-01TEST/result", query_string="format=pickle").respond_with_json(
        {"jobId": "job-01TEST", "pickle": pickled}
    )
    httpserver.expect_request("/jobs/job-01TEST/result", query_string="format=json").respond_with_response(
        Response(f'{{"jobId": "job-01TEST", "result": {digits}}}', content_type="application/json")
    )
    limit = sys.get_int_max_str_digits()

    # When it is shown, as Python's repr and as JSON, Then all its digits are printed
    shown = CliRunner().invoke(app, ["result", "job-01TEST"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "".join(shown.stdout.split()) == digits
    as_json = CliRunner().invoke(app, ["result", "job-01TEST", "--json"])
    assert as_json.exit_code == 0, as_json.output
    assert '"result": ' + digits in as_json.stdout
    # and the process's own limit is back
    assert sys.get_int_max_str_digits() == limit


def test_a_result_too_large_to_convert_says_so() -> None:
    from remote_batch.terminal import SHOWN_INT_DIGITS, result_repr

    shown = result_repr([10**SHOWN_INT_DIGITS])

    assert shown.startswith("<the list result is not shown: Exceeds the limit (100000 digits)")
