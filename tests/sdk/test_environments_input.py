"""Bad input to environments, refused on the client before any request: names that are no environment
name, Pythons that are no ``3.N``, empty index URLs and bad requirements files, in the SDK
(``ValueError`` naming the value) and the CLI (a usage error naming the option and the value, exit 2),
against a fake server that must see nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import remote_batch as rb
from remote_batch.cli import app
from remote_batch.environments import NAME_PATTERN, PYTHON_PATTERN

REPOSITORY = Path(__file__).resolve().parents[2]
WIDE = {"COLUMNS": "400"}
NOT_NAMES = ["a/b", "..", ".", "", "x", "1ml", "-ml", "ml env", "ml\n", "ml?x", "a" * 65, "m\u00e9l"]
NOT_PYTHONS = ["", " ", "3", "3.", "3.x", "py3.12", " 3.12", "3.12\n", "3.12.1", "2.7", "4.0", "3.123"]


def flat(output: str) -> str:
    """A usage error's text out of click's box, its lines joined."""
    return " ".join(output.replace("│", " ").split())


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# -- the rules are the contract's ------------------------------------------------------------------------
def test_the_sdks_patterns_are_the_contracts():
    # Given the served contract (docs/openapi.json, generated from the service's models)
    contract = json.loads((REPOSITORY / "docs" / "openapi.json").read_text())
    parameters = contract["paths"]["/environments/{name}"]["put"]["parameters"]
    name = next(p for p in parameters if p["name"] == "name")["schema"]
    python = contract["components"]["schemas"]["SubmitJobBody"]["properties"]["pythonVersion"]["anyOf"][0]

    # Then the SDK checks the very same patterns
    assert name["pattern"] == NAME_PATTERN
    assert python["pattern"] == PYTHON_PATTERN


@pytest.mark.parametrize("name", ["ml", "A1", "a" * 64, "Ml.v2_x-1"])
def test_names_at_the_edges_of_the_pattern_are_taken(name):
    assert rb.Environment(name, python="3.12").name == name


# -- the SDK -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NOT_NAMES)
def test_a_name_that_is_no_name_is_refused_naming_it_before_any_request(httpserver, api, name):
    # When each way of naming an environment is given it
    for attempt in (
        lambda: rb.Environment(name, python="3.12"),
        lambda: rb.environment(name),
        lambda: rb.submit("1", environment=name),
    ):
        with pytest.raises(ValueError, match="is not a name: 2 to 64 letters") as caught:
            attempt()
        # Then the error names it, and nothing was sent
        assert repr(name[:80]) in str(caught.value)
    assert httpserver.log == []


@pytest.mark.parametrize("python", NOT_PYTHONS)
def test_a_python_that_is_no_version_is_refused_naming_it_before_any_request(httpserver, api, python):
    with pytest.raises(
        ValueError,
        match=re.escape(f"python {python!r} is not a Python version jobs can run on: give major.minor, 3.N"),
    ):
        rb.Environment("ml", python=python)
    with pytest.raises(
        ValueError,
        match=re.escape(f"python {python!r} is not a Python version jobs can run on: give major.minor, 3.N"),
    ):
        rb.submit("1", environment=["six"], python_version=python)
    assert httpserver.log == []


def test_a_name_that_is_not_a_string_is_a_type_error():
    with pytest.raises(TypeError, match="an environment name is a string, not int"):
        rb.Environment(3)  # type: ignore[arg-type]


# -- the CLI -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["a/b", "..", "ml env"])
@pytest.mark.parametrize(
    "command",
    [
        ["env", "create", "{}"],
        ["env", "show", "{}"],
        ["env", "log", "{}"],
        ["env", "delete", "{}"],
        ["submit", "--env", "{}", "--code", "1"],
    ],
)
def test_the_cli_refuses_a_name_that_is_no_name_as_a_usage_error(httpserver, api, command, name):
    done = CliRunner().invoke(app, [name if word == "{}" else word for word in command], env=WIDE)

    assert done.exit_code == 2, done.output
    what = "'--env'" if "--env" in command else "'name'"
    assert f"Invalid value for {what}: environment name {name!r} is not a name" in flat(done.output)
    assert httpserver.log == []


@pytest.mark.parametrize("python", ["", "3", "3.x", "py3.12"])
@pytest.mark.parametrize("command", [["env", "create", "ml"], ["submit", "--code", "1"]])
def test_the_cli_refuses_a_python_that_is_no_version_naming_option_and_value(
    httpserver, api, command, python
):
    done = CliRunner().invoke(app, [*command, "--python", python], env=WIDE)

    assert done.exit_code == 2, done.output
    says = f"Invalid value for '--python': {python!r} is not a Python version jobs can run on: give major"
    assert says in flat(done.output)
    assert httpserver.log == []


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["-i", ""], "'--index-url' / '-i'"),
        (["--index-url", " "], "'--index-url' / '-i'"),
        (["--extra-index-url", "https://a.example/simple", "--extra-index-url", ""], "'--extra-index-url'"),
    ],
)
def test_the_cli_refuses_an_empty_index_url_naming_the_option(httpserver, api, args, option):
    done = CliRunner().invoke(app, ["env", "create", "ml", "six", *args], env=WIDE)

    assert done.exit_code == 2, done.output
    assert f"Invalid value for {option}: " in flat(done.output) and "is empty" in flat(done.output)
    assert httpserver.log == []


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            "six\nnot a requirement\n",
            "line 2: 'not a requirement' is not a requirement (PEP 508): Expected semicolon (after name with "
            "no version specifier) or end",
        ),
        (
            "-c missing.txt\nsix\n",
            "line 1: a constraints file (-c missing.txt) is not taken by environments: put its pins in the "
            "requirements instead",
        ),
    ],
)
@pytest.mark.parametrize("command", [["env", "create", "ml"], ["submit", "--code", "1"]])
def test_a_bad_requirements_file_is_one_line_naming_file_and_line_exit_2(
    httpserver, api, tmp_path, command, text, says
):
    # Given a requirements file with a line the service could not take
    requirements = write(tmp_path / "requirements.txt", text)

    # When a command reads it
    done = CliRunner().invoke(app, [*command, "-r", str(requirements)], env={"COLUMNS": "60"})

    # Then one line names the file and the line, whatever the terminal's width, and nothing is sent
    assert done.exit_code == 2, done.output
    assert done.stderr == f"Error: {requirements}, {says}\n"
    assert done.stdout == ""
    assert httpserver.log == []


def test_a_missing_requirements_file_and_a_missing_include_name_the_file(httpserver, api, tmp_path):
    including = write(tmp_path / "requirements.txt", "six\n-r nowhere.txt\n")

    missing = CliRunner().invoke(app, ["env", "create", "ml", "-r", str(tmp_path / "nope.txt")])
    included = CliRunner().invoke(app, ["env", "create", "ml", "-r", str(including)])

    assert missing.exit_code == 2 and missing.stderr == f"Error: {tmp_path / 'nope.txt'}: no such file\n"
    assert included.exit_code == 2
    assert included.stderr == f"Error: -r {including}: {tmp_path / 'nowhere.txt'}: no such file\n"
    assert httpserver.log == []


def test_submit_refuses_env_and_inline_requirements_together(httpserver, api):
    done = CliRunner().invoke(app, ["submit", "--env", "ml", "--with", "six", "--code", "1"], env=WIDE)

    assert done.exit_code == 2, done.output
    assert (
        "Invalid value for '--env': 'ml' names an environment: give --env NAME or inline requirements "
        "(--with, -r), not both"
    ) in flat(done.output)
    assert httpserver.log == []


def test_submit_refuses_an_empty_requirement(httpserver, api):
    done = CliRunner().invoke(app, ["submit", "--with", "six", "--with", "", "--code", "1"], env=WIDE)

    assert done.exit_code == 2, done.output
    assert "Invalid value for '--with': '' is empty: give a requirement (PEP 508)" in flat(done.output)
    assert httpserver.log == []


def test_submit_refuses_a_requirements_files_index_urls_rather_than_drop_them(httpserver, api, tmp_path):
    requirements = write(tmp_path / "r.txt", "--extra-index-url https://x.example/simple\nsix\n")

    done = CliRunner().invoke(app, ["submit", "-r", str(requirements), "--code", "1"])

    assert done.exit_code == 2, done.output
    assert done.stderr.startswith(
        "Error: submit's inline requirements take no index URLs (the files name https://x.example/simple): "
    )
    assert "remote-batch env create NAME -r FILE" in done.stderr
    assert httpserver.log == []
