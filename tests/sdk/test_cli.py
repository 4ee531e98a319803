"""The CLI's output conventions against a fake server: every read command's ``--json`` is the API's
JSON (camelCase, as docs/http-api.md names it), tables show what a person needs to tell rows apart, and bad
option values are refused naming the value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer
from typer.testing import CliRunner

import remote_batch as rb
from remote_batch.cli import app
from tests.sdk.conftest import job

MACHINE_CLASS = {
    "name": "Basic1x8",
    "vcpus": 1,
    "memoryGiB": 8,
    "gpus": 0,
    "gpuType": None,
    "creditsPerHour": 60.0,
}


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
