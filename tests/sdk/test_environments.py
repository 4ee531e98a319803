"""``rb.Environment``, ``rb.environments``, ``environment=`` on submit and map, and ``remote-batch env``
against a fake server (docs/http-api.md, "Environments")."""

from __future__ import annotations

import importlib
import io
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer
from typer.testing import CliRunner
from werkzeug import Request, Response

import remote_batch as rb
from remote_batch import cli_environments, interpreter
from remote_batch.cli import app
from remote_batch.progress import watch_build
from tests.sdk.conftest import Recorder, error, job, ok

environments_module = importlib.import_module("remote_batch.environments")

HASH = "3f9c" + "0" * 60
ENV: dict[str, Any] = {
    "name": "ml",
    "python": "3.12",
    "requirements": ["six==1.16.0"],
    "indexUrl": None,
    "extraIndexUrls": [],
    "image": None,
    "status": "Ready",
    "statusReason": None,
    "hash": HASH,
    "packages": [{"name": "six", "version": "1.16.0"}],
    "sizeBytes": 987654,
    "createdAt": "2026-12-01T10:00:00Z",
    "readyAt": "2026-12-01T10:00:41Z",
    "failedAt": None,
}
BUILDING = {**ENV, "status": "Building", "hash": None, "packages": [], "sizeBytes": 0, "readyAt": None}
FAILED_REASON = "Environment ml failed: No solution found when resolving dependencies: six==9 is unavailable"
FAILED = {**BUILDING, "status": "Failed", "statusReason": FAILED_REASON, "failedAt": "2026-12-01T10:00:09Z"}


def environment(**changes: Any) -> dict[str, Any]:
    return {**ENV, **changes}


def summary(**changes: Any) -> dict[str, Any]:
    """An ``EnvironmentSummary`` of ``GET /environments``: an environment without its lists."""
    omitted = ("requirements", "indexUrl", "extraIndexUrls", "packages")
    return {key: value for key, value in environment(**changes).items() if key not in omitted}


def body(recorder: Recorder, index: int = -1) -> Any:
    return json.loads(recorder.requests[index]["body"])


@pytest.fixture(autouse=True)
def _no_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    """Waiting polls at once (the fake build moves one step a read, not with time)."""
    monkeypatch.setattr(environments_module, "POLL_FIRST_SECONDS", 0.0)
    monkeypatch.setattr(cli_environments, "FOLLOW_SECONDS", 0.0)


class FakeBuild:
    """A build on the fake server: each read of the environment moves it one step, and the log holds
    two more lines a step (two of them in the same millisecond), paged two lines a page."""

    STAMPS = (
        "2026-12-01T10:00:01.000Z",
        "2026-12-01T10:00:02.000Z",
        "2026-12-01T10:00:02.500Z",
        "2026-12-01T10:00:02.500Z",
        "2026-12-01T10:00:03.000Z",
        "2026-12-01T10:00:04.000Z",
    )

    def __init__(self, final: dict[str, Any], steps: int = 3) -> None:
        self.final = final
        self.steps = steps
        self.reads = 0
        self.log_requests: list[dict[str, str]] = []
        self.lines = [f"line {n}" for n in range(len(self.STAMPS))]

    def environment(self, request: Request) -> Response:
        self.reads += 1
        return ok(self.final if self.reads >= self.steps else BUILDING)

    def log(self, request: Request) -> Response:
        self.log_requests.append(dict(request.args))
        written = len(self.lines) if self.reads >= self.steps else 2 * self.reads
        events = [
            {"timestamp": stamp, "message": message}
            for stamp, message in zip(self.STAMPS[:written], self.lines[:written], strict=True)
        ]
        since = request.args.get("since")
        if since is not None:
            moment = datetime.fromisoformat(since.replace("Z", "+00:00"))
            events = [
                e for e in events if datetime.fromisoformat(e["timestamp"].replace("Z", "+00:00")) >= moment
            ]
        start = int(request.args.get("nextToken") or 0)
        page = events[start : start + 2]
        more = start + 2 < len(events)
        return ok({"name": "ml", "events": page, "nextToken": str(start + 2) if more else None})

    def serve(self, httpserver: HTTPServer) -> None:
        httpserver.expect_request("/environments/ml", method="GET").respond_with_handler(self.environment)
        httpserver.expect_request("/environments/ml/log").respond_with_handler(self.log)


# -- the SDK -----------------------------------------------------------------------------------------
def test_create_puts_the_spec_with_this_interpreters_python_by_default(httpserver, api):
    recorder = Recorder(ok(BUILDING, 201), ok(BUILDING, 200))
    httpserver.expect_request("/environments/ml", method="PUT").respond_with_handler(recorder)

    created = rb.Environment("ml", requirements=["six==1.16.0"]).create()
    again = rb.Environment("ml", requirements=["six==1.16.0"]).create()

    assert body(recorder, 0) == {
        "python": interpreter.python_version(),
        "requirements": ["six==1.16.0"],
        "indexUrl": None,
        "extraIndexUrls": [],
        "image": None,
    }
    assert created.created is True and created.data == BUILDING
    assert again.created is False  # 200: the same spec, found
    assert created.python == "3.12"  # the service's answer is what the object shows


def test_create_sends_every_field_of_the_spec(httpserver, api):
    recorder = Recorder(ok(BUILDING, 201))
    httpserver.expect_request("/environments/gpu", method="PUT").respond_with_handler(recorder)

    rb.Environment(
        "gpu",
        python="3.13",
        requirements=("torch==2.5.1",),
        index_url="https://mirror.example/simple",
        extra_index_urls=["https://download.example/whl"],
        image="python:3.13-slim",
    ).create()

    assert body(recorder) == {
        "python": "3.13",
        "requirements": ["torch==2.5.1"],
        "indexUrl": "https://mirror.example/simple",
        "extraIndexUrls": ["https://download.example/whl"],
        "image": "python:3.13-slim",
    }


def test_a_409_names_the_environment_and_what_differs(httpserver, api):
    httpserver.expect_request("/environments/ml", method="PUT").respond_with_response(
        error(409, "Conflict", "Environment ml exists with another spec.")
    )
    httpserver.expect_request("/environments/ml", method="GET").respond_with_json(ENV)

    with pytest.raises(rb.Conflict) as caught:
        rb.Environment("ml", python="3.12", requirements=["six==1.17.0"]).create()

    message = caught.value.message
    assert message.startswith("Environment ml exists with another spec (")
    assert "requirements ['six==1.16.0'] there, ['six==1.17.0'] here" in message
    assert "python" not in message.split("(", 1)[1].split(")")[0]  # the same python is not a difference
    assert "delete it first" in message
    assert caught.value.status == 409 and caught.value.field == "name"


def test_a_bad_field_is_the_services_validation_error_naming_it(httpserver, api):
    httpserver.expect_request("/environments/ml", method="PUT").respond_with_response(
        error(400, "ValidationError", "Environments here run Python 3.11, 3.12, 3.13, not '3.10'.", "python")
    )

    with pytest.raises(rb.ValidationError) as caught:
        rb.Environment("ml", python="3.10").create()  # a version, not one the service runs

    assert caught.value.field == "python" and "'3.10'" in caught.value.message


def test_a_deployment_without_builds_answers_not_supported(httpserver, api):
    httpserver.expect_request("/environments/ml", method="PUT").respond_with_response(
        error(501, "NotSupported", "This deployment does not build environments yet.")
    )

    with pytest.raises(rb.NotSupported):
        rb.Environment("ml").create()


def test_attributes_read_again_while_building_and_not_once_ready(httpserver, api):
    recorder = Recorder(ok(BUILDING), ok(ENV))
    httpserver.expect_request("/environments/ml", method="GET").respond_with_handler(recorder)

    env = rb.environment("ml")
    assert env.data is not None and env.data["status"] == "Building"
    assert env.status == "Ready"  # Building: read again
    assert recorder.count == 2
    assert env.hash == HASH
    assert env.packages == [rb.Package("six", "1.16.0")]
    assert env.size_bytes == 987654
    assert env.status_reason is None
    assert env.created_at == datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    assert env.ready_at == datetime(2026, 12, 1, 10, 0, 41, tzinfo=UTC)
    assert env.failed_at is None
    assert recorder.count == 2  # Ready: nothing changes any more, nothing read again
    assert env.refresh() is env and recorder.count == 3


def test_wait_follows_the_build_log_as_it_comes_then_returns_when_ready(httpserver, api, capsys):
    build = FakeBuild(ENV)
    build.serve(httpserver)

    env = rb.Environment("ml", python="3.12", requirements=["six==1.16.0"])
    assert env.wait(progress=True) is env

    printed = capsys.readouterr().err.splitlines()
    log_lines = [line for line in printed if line.startswith("line ")]
    assert log_lines == [f"line {n}" for n in range(6)]  # each once, in order, across pages and polls
    statuses = [line for line in printed if line.startswith("environment ml")]
    assert len(statuses) == 2  # a line a change of status, off a terminal
    assert statuses[0].startswith("environment ml Building") and "(Python 3.12, 1 requirement)" in statuses[0]
    assert statuses[1].startswith("environment ml Ready") and "1 package, 0.9 MiB" in statuses[1]
    assert printed[-1] == statuses[1]
    assert build.log_requests[0] == {}  # from the start, then since the last line seen
    assert {"since": "2026-12-01T10:00:02.500000Z"} in build.log_requests


class Terminal(io.StringIO):
    """A stream that says it is a terminal (as stderr is in a shell)."""

    def isatty(self) -> bool:
        return True


def test_on_a_terminal_the_build_log_and_the_reason_are_shown_escaped():
    hostile = "\x1b]0;pwned\x07\x1b[2J\u202e[red]x[/red]"
    env = rb.Environment("ml", python="3.12")
    env.data = {**FAILED, "statusReason": hostile}
    stream = Terminal()

    with watch_build(env, enabled=True, stream=stream) as display:
        display.echo(hostile)
        display.show(env)

    shown = stream.getvalue()  # rich's own cursor and colour sequences, and the text escaped
    assert "\x1b]0;pwned" not in shown and "\x1b[2J" not in shown and "\u202e" not in shown
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\u202e[red]x[/red]" in shown  # the log line, markup shown too
    assert "Failed 0 s (Python 3.12, 0 requirements): \\x1b]0;pwned" in shown  # the reason


def test_wait_raises_on_failed_with_the_first_error_line(httpserver, api, capsys):
    FakeBuild(FAILED).serve(httpserver)

    with pytest.raises(rb.EnvironmentFailed) as caught:
        rb.Environment("ml").wait(progress=False)

    assert caught.value.reason == FAILED_REASON
    assert str(caught.value) == FAILED_REASON
    assert caught.value.environment.status == "Failed"
    assert caught.value.environment.failed_at == datetime(2026, 12, 1, 10, 0, 9, tzinfo=UTC)
    assert caught.value.environment.ready_at is None
    assert capsys.readouterr().err == ""  # progress=False: silent


def test_wait_gives_up_after_its_timeout(httpserver, api):
    httpserver.expect_request("/environments/ml", method="GET").respond_with_json(BUILDING)

    with pytest.raises(TimeoutError, match="Environment ml is still Building after 0 s"):
        rb.Environment("ml").wait(timeout=0, progress=False)


def test_log_joins_every_page(httpserver, api):
    build = FakeBuild(ENV, steps=0)
    build.serve(httpserver)

    assert rb.Environment("ml").log() == "".join(f"line {n}\n" for n in range(6))
    assert [r.get("nextToken") for r in build.log_requests] == [None, "2", "4"]


def test_delete_answers_the_environment_as_it_was(httpserver, api):
    recorder = Recorder(ok(ENV))
    httpserver.expect_request("/environments/ml", method="DELETE").respond_with_handler(recorder)

    deleted = rb.Environment("ml").delete()

    assert recorder.count == 1 and deleted.data == ENV and deleted.requirements == ("six==1.16.0",)


def test_delete_while_building_answers_the_last_view_and_reads_nothing_again(httpserver, api):
    # Given an environment still Building, which the service forgets once deleted
    deletes = Recorder(ok(BUILDING))
    httpserver.expect_request("/environments/ml", method="DELETE").respond_with_handler(deletes)
    reads = Recorder(error(404, "NotFound", "No environment ml in this account."))
    httpserver.expect_request("/environments/ml", method="GET").respond_with_handler(reads)

    # When it is deleted
    deleted = rb.Environment("ml", python="3.12").delete()

    # Then its attributes are the view the delete answered, and none of them asks the service again
    assert deleted.deleted is True and deleted.data == BUILDING
    assert deleted.status == "Building" and deleted.hash is None and deleted.packages == []
    assert deleted.requirements == ("six==1.16.0",) and deleted.size_bytes == 0
    assert repr(deleted) == "<Environment 'ml' Python 3.12, 1 requirement, deleted (Building)>"
    assert deletes.count == 1 and reads.count == 0
    with pytest.raises(rb.NotFound):  # asked for explicitly, the service says it is gone
        deleted.refresh()


def test_create_after_delete_follows_the_new_environment_again(httpserver, api):
    httpserver.expect_request("/environments/ml", method="DELETE").respond_with_json(ENV)
    httpserver.expect_request("/environments/ml", method="PUT").respond_with_json(BUILDING, status=201)
    reads = Recorder(ok(ENV))
    httpserver.expect_request("/environments/ml", method="GET").respond_with_handler(reads)

    env = rb.Environment("ml", python="3.12", requirements=["six==1.16.0"])
    env.delete()
    env.create()

    assert env.deleted is False and env.created is True
    assert env.status == "Ready" and reads.count == 1  # Building: read again, as before any delete


def test_environments_reads_every_page_and_each_ones_lists_when_asked(httpserver, api):
    recorder = Recorder(
        ok({"environments": [summary(name="a")], "nextToken": "t1"}),
        ok({"environments": [summary(name="b", python="3.13")], "nextToken": None}),
    )
    httpserver.expect_request("/environments").respond_with_handler(recorder)
    whole = Recorder(ok(environment(name="a", requirements=["six==1.16.0", "attrs"])))
    httpserver.expect_request("/environments/a").respond_with_handler(whole)

    found = rb.environments()

    assert [(e.name, e.python, e.data and e.data["status"]) for e in found] == [
        ("a", "3.12", "Ready"),
        ("b", "3.13", "Ready"),
    ]
    assert [r["args"] for r in recorder.requests] == [{"limit": "100"}, {"limit": "100", "nextToken": "t1"}]
    assert repr(found[0]) == "<Environment 'a' Python 3.12, Ready>"
    assert found[0].status == "Ready" and found[0].hash == HASH and whole.count == 0  # in the summary
    assert found[0].requirements == ("six==1.16.0", "attrs")  # not in it: read once
    assert found[0].packages == [rb.Package("six", "1.16.0")] and found[0].index_url is None
    assert whole.count == 1


def test_a_name_is_one_path_segment_of_each_request(httpserver, api):
    name = "Ml.v2_x-1"  # every kind of character a name holds
    uris: list[str] = []

    def answer(request: Request) -> Response:
        uris.append(str(request.environ.get("REQUEST_URI")))
        return ok({**ENV, "name": name})

    httpserver.expect_request(f"/environments/{name}").respond_with_handler(answer)
    httpserver.expect_request(f"/environments/{name}/log").respond_with_json(
        {"events": [], "nextToken": None}
    )

    found = rb.environment(name)
    found.refresh().delete()
    assert found.log() == ""

    assert uris == [f"/environments/{name}"] * 3
    with pytest.raises(ValueError, match=r"environment name 'a/b' is not a name"):
        rb.environment("a/b")  # refused before any request (tests/sdk/test_environments_input.py)


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"requirements": "six==1.16.0"}, "requirements is a list"),
        ({"extra_index_urls": "https://x"}, "extra_"),
    ],
)
def test_one_string_where_a_list_belongs_is_refused(kwargs, says):
    with pytest.raises(TypeError, match=says):
        rb.Environment("ml", **kwargs)


# -- environment= on submit and map ---------------------------------------------------------------------
@pytest.fixture
def jobs_recorder(httpserver: HTTPServer) -> Recorder:
    recorder = Recorder(ok(job(status="Queued"), 202))
    httpserver.expect_request("/jobs", method="POST").respond_with_handler(recorder)
    return recorder


def test_submit_with_an_environments_name(api, jobs_recorder):
    rb.submit("import six", environment="ml")

    assert body(jobs_recorder)["environment"] == "ml"


def test_submit_with_requirements_sends_an_inline_spec_on_this_python(api, jobs_recorder):
    rb.submit("import six", environment=["six==1.16.0"])
    rb.submit("import six", environment=("six==1.16.0",), python_version="3.13")

    assert body(jobs_recorder, 0)["environment"] == {
        "python": interpreter.python_version(),
        "requirements": ["six==1.16.0"],
    }
    assert body(jobs_recorder, 1)["environment"] == {"python": "3.13", "requirements": ["six==1.16.0"]}
    assert body(jobs_recorder, 1)["pythonVersion"] == "3.13"


def test_submit_with_an_environment_object_creates_it_first(httpserver, api, jobs_recorder):
    put = Recorder(ok(BUILDING, 201))
    httpserver.expect_request("/environments/ml", method="PUT").respond_with_handler(put)
    env = rb.Environment("ml", python="3.12", requirements=["six==1.16.0"])

    rb.submit("import six", environment=env)
    rb.submit("import six", environment=env)

    assert put.count == 1  # created once: the second submit knows it exists
    assert body(put)["requirements"] == ["six==1.16.0"]
    assert [body(jobs_recorder, i)["environment"] for i in (0, 1)] == ["ml", "ml"]


def test_map_takes_an_environment_too(api, jobs_recorder):
    rb.map("item * 2", [1, 2], environment=["numpy==2.1.3"])

    sent = body(jobs_recorder)
    assert sent["arrayItems"] == [1, 2]
    assert sent["environment"] == {"python": interpreter.python_version(), "requirements": ["numpy==2.1.3"]}


@pytest.mark.parametrize("bad", [3, ["six", 3], {"python": "3.12"}])
def test_an_environment_of_another_type_is_refused_before_any_request(httpserver, api, bad):
    with pytest.raises(TypeError, match=r"environment is a name, an rb\.Environment or a list"):
        rb.submit("1", environment=bad)
    assert httpserver.log == []


def test_a_jobs_environment_shows_name_hash_and_python(httpserver, api):
    inside = {"name": "ml", "hash": HASH, "python": "3.12"}
    httpserver.expect_request("/jobs/job-01TEST").respond_with_json(job(environment=inside))
    httpserver.expect_request("/jobs/job-02TEST").respond_with_json(job(jobId="job-02TEST", environment=None))

    assert rb.job("job-01TEST").environment == rb.JobEnvironment("ml", HASH, "3.12")
    assert rb.job("job-02TEST").environment is None


# -- the CLI -----------------------------------------------------------------------------------------
WIDE = {"COLUMNS": "400"}


def flat(output: str) -> str:
    """A usage error's text out of click's box, its lines joined."""
    return " ".join(output.replace("│", " ").split())


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_env_create_reads_a_requirements_file_as_pip_does(httpserver, api, tmp_path):
    write(tmp_path / "base.txt", "six==1.16.0\n")
    requirements = write(
        tmp_path / "requirements.txt",
        "# model\n--index-url https://mirror.example/simple\n-r base.txt\n"
        "scikit-learn==1.9.1 \\\n  ; python_version >= '3.9'\n",
    )
    recorder = Recorder(ok(BUILDING, 201))
    httpserver.expect_request("/environments/ml", method="PUT").respond_with_handler(recorder)

    done = CliRunner().invoke(
        app,
        ["env", "create", "ml", "--python", "3.12", "-r", str(requirements), "--extra-index-url",
         "https://a.example/simple", "--extra-index-url", "https://b.example/simple"],
    )  # fmt: skip

    assert done.exit_code == 0, done.output
    assert body(recorder) == {
        "python": "3.12",
        "requirements": ["six==1.16.0", 'scikit-learn==1.9.1; python_version >= "3.9"'],
        "indexUrl": "https://mirror.example/simple",
        "extraIndexUrls": ["https://a.example/simple", "https://b.example/simple"],
        "image": None,
    }
    assert "created environment ml Building: Python 3.12, 1 requirement" in done.stderr
    assert done.stdout.startswith("environment ml Building")


def test_env_create_takes_requirement_arguments_and_its_index_url_wins(httpserver, api, tmp_path):
    requirements = write(tmp_path / "r.txt", "-i https://file.example/simple\nattrs\n")
    recorder = Recorder(ok(BUILDING, 200))
    httpserver.expect_request("/environments/ml", method="PUT").respond_with_handler(recorder)

    done = CliRunner().invoke(
        app, ["env", "create", "ml", "six==1.16.0", "-r", str(requirements), "-i", "https://cli.example/simple",
              "--image", "python:3.12-slim", "--python", "3.12"],
    )  # fmt: skip

    assert done.exit_code == 0, done.output
    sent = body(recorder)
    assert sent["requirements"] == ["attrs", "six==1.16.0"]  # the files', then the arguments
    assert sent["indexUrl"] == "https://cli.example/simple"
    assert sent["image"] == "python:3.12-slim"
    assert "found (same spec)" in done.stderr


def test_env_create_wait_follows_the_build_and_exits_0_when_ready(httpserver, api):
    httpserver.expect_request("/environments/ml", method="PUT").respond_with_json(BUILDING, status=201)
    FakeBuild(ENV).serve(httpserver)

    done = CliRunner().invoke(app, ["env", "create", "ml", "six==1.16.0", "--python", "3.12", "--wait"])

    assert done.exit_code == 0, done.output
    assert [line for line in done.stderr.splitlines() if line.startswith("line ")] == [
        f"line {n}" for n in range(6)
    ]
    assert done.stdout.strip() == "environment ml Ready: Python 3.12, 1 requirement, 1 package, 0.9 MiB"


def test_env_create_wait_exits_2_with_the_reason_when_the_build_fails(httpserver, api):
    httpserver.expect_request("/environments/ml", method="PUT").respond_with_json(BUILDING, status=201)
    FakeBuild(FAILED).serve(httpserver)

    done = CliRunner().invoke(app, ["env", "create", "ml", "six==9", "--wait", "--json"])

    assert done.exit_code == 2, done.output
    assert json.loads(done.stdout)["statusReason"] == FAILED_REASON


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("six\nnot a requirement\n", "requirements.txt, line 2: 'not a requirement' is not a requirement"),
        ("-e ./mine\n", "requirements.txt, line 1: an editable (-e) requirement"),
        ("-r missing.txt\n", "missing.txt: no such file"),
    ],
)
def test_env_create_refuses_a_bad_requirements_file_naming_file_and_line(
    httpserver, api, tmp_path, text, says
):
    requirements = write(tmp_path / "requirements.txt", text)

    done = CliRunner().invoke(app, ["env", "create", "ml", "-r", str(requirements)], env=WIDE)

    assert done.exit_code == 2, done.output
    assert says in flat(done.output)
    assert httpserver.log == []


def test_env_create_of_a_missing_file_names_it(httpserver, api, tmp_path):
    done = CliRunner().invoke(app, ["env", "create", "ml", "-r", str(tmp_path / "nope.txt")], env=WIDE)

    assert done.exit_code == 2
    assert f"{tmp_path / 'nope.txt'}: no such file" in flat(done.output)
    assert httpserver.log == []


def test_a_requirement_the_service_refuses_is_reported_with_its_file_and_line(httpserver, api, tmp_path):
    requirements = write(tmp_path / "requirements.txt", "six\n\n# x\nnumpy==2.1.3\n")
    httpserver.expect_request("/environments/ml", method="PUT").respond_with_response(
        error(400, "ValidationError", "requirements[1] is over 1000 characters.", "requirements[1]")
    )

    done = CliRunner().invoke(app, ["env", "create", "ml", "-r", str(requirements)], terminal_width=400)

    assert done.exit_code == 1
    assert done.stderr.strip() == (
        f"Error: ValidationError: {requirements}, line 4: requirements[1] is over 1000 characters. "
        "(field: requirements[1])"
    )


def test_a_requirement_argument_the_service_refuses_is_named(httpserver, api):
    httpserver.expect_request("/environments/ml", method="PUT").respond_with_response(
        error(400, "ValidationError", "requirements[0] 'x y' is not a requirement: ...", "requirements[0]")
    )

    done = CliRunner().invoke(app, ["env", "create", "ml", "x y"], terminal_width=400)

    assert done.exit_code == 1
    assert "argument 1 ('x y'): requirements[0]" in done.stderr


def test_env_create_on_a_taken_name_says_the_spec_differs(httpserver, api):
    httpserver.expect_request("/environments/ml", method="PUT").respond_with_response(
        error(409, "Conflict", "Environment ml exists with another spec.")
    )
    httpserver.expect_request("/environments/ml", method="GET").respond_with_json(ENV)

    done = CliRunner().invoke(
        app, ["env", "create", "ml", "six==1.17.0", "--python", "3.12"], terminal_width=400
    )

    assert done.exit_code == 1
    assert done.stderr.startswith("Error: Conflict: Environment ml exists with another spec (requirements")


def test_env_list_table_and_json(httpserver, api):
    listing = {"environments": [summary(), summary(**{**FAILED, "name": "broken"})], "nextToken": None}
    httpserver.expect_request("/environments").respond_with_json(listing)

    table = CliRunner().invoke(app, ["env", "list"], terminal_width=200)
    as_json = CliRunner().invoke(app, ["env", "list", "--json"])

    assert table.exit_code == 0, table.output
    rows = {line.split()[0]: line.split() for line in table.stdout.splitlines() if line.strip()}
    assert rows["ml"][1:6] == ["3.12", "Ready", HASH[:12], "0.9", "MiB"]
    assert rows["broken"][1:4] == ["3.12", "Failed", "-"] and "Environment ml failed" in table.stdout
    assert [r.path for r, _ in httpserver.log] == ["/environments", "/environments"]  # no read a row
    assert json.loads(as_json.stdout) == listing["environments"]


def test_env_show_lists_the_spec_and_the_resolved_packages(httpserver, api):
    httpserver.expect_request("/environments/ml").respond_with_json(ENV)

    done = CliRunner().invoke(app, ["env", "show", "ml"], terminal_width=200)
    as_json = CliRunner().invoke(app, ["env", "show", "ml", "--json"])

    assert done.exit_code == 0, done.output
    assert "six==1.16.0" in done.stdout and HASH in done.stdout and "987654" in done.stdout
    assert json.loads(as_json.stdout) == ENV


def test_env_log_follows_until_the_build_is_over(httpserver, api):
    FakeBuild(ENV).serve(httpserver)

    once = CliRunner().invoke(app, ["env", "log", "ml"])
    followed = CliRunner().invoke(app, ["env", "log", "ml", "--follow"])

    assert once.stdout == "line 0\nline 1\n"  # what the first step wrote
    assert followed.stdout == "".join(f"line {n}\n" for n in range(6))


def test_env_delete(httpserver, api):
    recorder = Recorder(ok(ENV))
    httpserver.expect_request("/environments/ml", method="DELETE").respond_with_handler(recorder)

    done = CliRunner().invoke(app, ["env", "delete", "ml"])

    assert done.exit_code == 0 and recorder.count == 1
    assert done.stdout.strip() == "deleted environment ml"


def test_submit_env_sends_the_environments_name(api, jobs_recorder):
    done = CliRunner().invoke(app, ["submit", "--env", "ml", "--code", "import six"])

    assert done.exit_code == 0, done.output
    assert body(jobs_recorder)["environment"] == "ml"


def test_submit_with_requirements_sends_an_inline_spec(api, jobs_recorder, tmp_path):
    requirements = write(tmp_path / "requirements.txt", "# pinned\nsix==1.16.0\n")

    done = CliRunner().invoke(app, ["submit", "-r", str(requirements), "--with", "attrs>=24", "--code", "1"])
    on_313 = CliRunner().invoke(app, ["submit", "-R", "six", "--python", "3.13", "--", "python", "-V"])

    assert done.exit_code == 0, done.output
    assert body(jobs_recorder, 0)["environment"] == {
        "python": interpreter.python_version(),
        "requirements": ["six==1.16.0", "attrs>=24"],  # the files', then --with's
    }
    assert "pythonVersion" not in body(jobs_recorder, 0)  # the job takes its environment's
    assert on_313.exit_code == 0, on_313.output
    assert body(jobs_recorder, 1)["environment"] == {"python": "3.13", "requirements": ["six"]}
    assert body(jobs_recorder, 1)["pythonVersion"] == "3.13"


def test_an_environment_from_a_requirements_file(httpserver, api, tmp_path):
    requirements = write(tmp_path / "requirements.txt", "--extra-index-url https://x.example/simple\nsix\n")
    recorder = Recorder(ok(BUILDING, 201))
    httpserver.expect_request("/environments/ml", method="PUT").respond_with_handler(recorder)

    env = rb.Environment.from_requirements_file("ml", requirements, python="3.13", image="python:3.13-slim")
    assert repr(env) == "<Environment 'ml' Python 3.13, 1 requirement, not created>"
    env.create()

    assert body(recorder) == {
        "python": "3.13",
        "requirements": ["six"],
        "indexUrl": None,
        "extraIndexUrls": ["https://x.example/simple"],
        "image": "python:3.13-slim",
    }
    with pytest.raises(rb.RequirementsFileError, match="no such file"):
        rb.Environment.from_requirements_file("ml", tmp_path / "nope.txt")


@pytest.mark.parametrize(
    ("args", "field", "message"),
    [
        (["--python", "3.10"], "python", "Environments here run Python 3.11, 3.12, 3.13, not '3.10'."),
        (
            ["-i", "ftp://mirror.example"],
            "indexUrl",
            "indexUrl must be an https URL with a host, not 'ftp://x'.",
        ),
        (["--image", "Not An Image"], "image", "image 'Not An Image' is not an image reference such as ..."),
    ],
)
def test_a_value_the_service_refuses_is_named_with_its_field(httpserver, api, args, field, message):
    httpserver.expect_request("/environments/ml", method="PUT").respond_with_response(
        error(400, "ValidationError", message, field)
    )

    done = CliRunner().invoke(app, ["env", "create", "ml", *args], env=WIDE)

    assert done.exit_code == 1
    assert done.stderr.strip() == f"Error: ValidationError: {message} (field: {field})"


def test_status_shows_the_jobs_environment(httpserver, api):
    inside = {"name": "ml", "hash": HASH, "python": "3.12"}
    httpserver.expect_request("/jobs/job-01TEST").respond_with_json(
        job(environment=inside, pythonVersion="3.12")
    )

    done = CliRunner().invoke(app, ["status", "job-01TEST"], terminal_width=200)

    assert done.exit_code == 0, done.output
    rows = {
        line.split()[0]: line.split(None, 1)[1].strip() for line in done.stdout.splitlines() if line.strip()
    }
    assert rows["environment"] == f"ml (Python 3.12, build {HASH})"
    assert rows["pythonVersion"] == "3.12"
