"""Chaining from the SDK and the CLI (``depends_on``, ``inputs_from``, a ``Job`` as an argument, ``submit
--after/--inputs-from``) against a fake server."""

from __future__ import annotations

import base64
import json
import os
import pickle
from pathlib import Path

import cloudpickle
import pytest
from pytest_httpserver import HTTPServer
from typer.testing import CliRunner

import remote_batch as rb
from remote_batch.cli import app
from remote_batch.sdk import DEPENDENCY_CONDITIONS, DEPENDENCY_MODES
from tests.sdk.conftest import Recorder, job, ok

TRAIN = "job-01JAAAAAAAAAAAAAAAAAAAAAAA"


def add(model: dict[str, int], x: int) -> int:
    return model["w"] * x


def test_depends_on_and_inputs_from_become_the_body_fields(httpserver: HTTPServer, api: rb.Client) -> None:
    recorder = Recorder(ok(job(), 202))
    httpserver.expect_request("/jobs", method="POST").respond_with_handler(recorder)
    train = rb.Job(api, {"jobId": TRAIN})
    rb.submit("1", depends_on=[train, ("job-x", "Completed")], inputs_from=(train, "model/*"))
    body = json.loads(recorder.requests[0]["body"])
    assert body["dependsOn"] == [{"jobId": TRAIN}, {"jobId": "job-x", "condition": "Completed"}]
    assert body["inputsFrom"] == [{"jobId": TRAIN, "files": ["model/*"]}]


def test_a_job_argument_means_its_result_loaded_from_inputs_in_the_job(
    httpserver: HTTPServer, api: rb.Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    recorder = Recorder(ok(job(), 202))
    httpserver.expect_request("/jobs", method="POST").respond_with_handler(recorder)
    train = rb.Job(api, {"jobId": TRAIN})
    rb.submit(add, train, 5)
    body = json.loads(recorder.requests[0]["body"])
    # The child depends on the parent and takes its result (and none of its files)
    assert body["dependsOn"] == [{"jobId": TRAIN}]
    assert body["inputsFrom"] == [{"jobId": TRAIN, "files": ["result.pickle"]}]
    # In the job's container, the pickled call loads the parent's result in the argument's place
    fn, args, kwargs = cloudpickle.loads(base64.b64decode(body["pickle"]))
    (tmp_path / "inputs" / TRAIN).mkdir(parents=True)
    (tmp_path / "inputs" / TRAIN / "result.pickle").write_bytes(pickle.dumps({"w": 3}))
    monkeypatch.chdir(tmp_path)
    assert fn(*args, **kwargs) == 15


def test_job_parents_are_its_depends_on(api: rb.Client) -> None:
    child = rb.Job(api, {"jobId": "job-c", "dependsOn": [{"jobId": TRAIN, "condition": "Succeeded"}]})
    assert [p.id for p in child.parents] == [TRAIN]


def test_children_waiting_are_the_jobs_the_server_lists_read_again_while_the_job_runs(
    httpserver: HTTPServer, api: rb.Client
) -> None:
    # Given a running parent the server says two jobs wait for
    httpserver.expect_request(f"/jobs/{TRAIN}", method="GET").respond_with_json(
        job(jobId=TRAIN, status="Running", childrenWaiting=["job-c", "job-d"])
    )
    parent = rb.Job(api, {"jobId": TRAIN, "status": "Running"})
    # Then they are its children_waiting, each a Job
    assert [c.id for c in parent.children_waiting] == ["job-c", "job-d"]
    # And a final job has none, without asking the server
    assert rb.Job(api, {"jobId": "job-f", "status": "Succeeded"}).children_waiting == []


def test_cli_status_shows_what_a_job_waits_for_and_the_jobs_that_wait_for_it(
    httpserver: HTTPServer, api: rb.Client
) -> None:
    httpserver.expect_request("/jobs/job-b", method="GET").respond_with_json(
        job(
            jobId="job-b",
            status="Queued",
            waitingFor=[f"job|{TRAIN}"],
            childrenWaiting=["job-c"],
            dependsOn=[{"jobId": TRAIN, "condition": "Succeeded"}],
        )
    )
    done = CliRunner().invoke(app, ["status", "job-b"], env={**os.environ, "COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    rows = [line.split() for line in done.output.splitlines()]
    assert ["waitingFor", f"job|{TRAIN}"] in rows
    assert ["childrenWaiting", "job-c"] in rows


def test_cli_submit_after_and_inputs_from(httpserver: HTTPServer, api: rb.Client) -> None:
    recorder = Recorder(ok(job(), 202))
    httpserver.expect_request("/jobs", method="POST").respond_with_handler(recorder)
    result = CliRunner().invoke(
        app,
        ["submit", "--code", "1", "--after", f"{TRAIN}:Terminated", "--after", "job-b",
         "--inputs-from", "job-b:model/*", "--inputs-from", "job-b:*.json"],
        env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    body = json.loads(recorder.requests[0]["body"])
    assert body["dependsOn"] == [
        {"jobId": TRAIN, "condition": "Terminated"},
        {"jobId": "job-b", "condition": "Succeeded"},
    ]
    assert body["inputsFrom"] == [{"jobId": "job-b", "files": ["model/*", "*.json"]}]


def test_map_depends_on_an_array_per_item(httpserver: HTTPServer, api: rb.Client) -> None:
    # Given an array job
    recorder = Recorder(ok(job(), 202))
    httpserver.expect_request("/jobs", method="POST").respond_with_handler(recorder)
    first = rb.Job(api, {"jobId": TRAIN, "type": "Array"})
    # When another array is mapped on it per item
    rb.map("item", [1, 2], depends_on=(first, "Succeeded", "perItem"))
    # Then the entry carries the mode
    body = json.loads(recorder.requests[0]["body"])
    assert body["dependsOn"] == [{"jobId": TRAIN, "condition": "Succeeded", "mode": "perItem"}]
    assert body["arrayItems"] == [1, 2]
    with pytest.raises(TypeError, match=r"\(job, condition, mode\)"):
        rb.map("item", [1], depends_on=(first, "Succeeded", "perItem", "x"))
    with pytest.raises(ValueError, match="'eachItem' is not a dependency mode: give whole, perItem"):
        rb.map("item", [1], depends_on=(first, "Succeeded", "eachItem"))


def test_cli_after_takes_a_condition_and_a_mode(httpserver: HTTPServer, api: rb.Client) -> None:
    recorder = Recorder(ok(job(), 202))
    httpserver.expect_request("/jobs", method="POST").respond_with_handler(recorder)
    env = {**os.environ, "COLUMNS": "200"}
    # When --after names a condition and a mode
    result = CliRunner().invoke(
        app, ["submit", "--code", "1", "--after", f"{TRAIN}:Succeeded:perItem"], env=env
    )
    # Then the entry carries both (the service answers 400 on dependsOn[0].mode for a job no array)
    assert result.exit_code == 0, result.output
    body = json.loads(recorder.requests[0]["body"])
    assert body["dependsOn"] == [{"jobId": TRAIN, "condition": "Succeeded", "mode": "perItem"}]
    # And a mode without its condition is refused before any request
    refused = CliRunner().invoke(app, ["submit", "--code", "1", "--after", f"{TRAIN}::perItem"], env=env)
    assert refused.exit_code == 2
    assert "JOB[:CONDITION[:MODE]]" in refused.output
    assert len(recorder.requests) == 1


def test_the_sdks_conditions_are_the_contracts() -> None:
    # Given the served contract (docs/openapi.json, generated from the service's models)
    contract = json.loads((Path(__file__).resolve().parents[2] / "docs" / "openapi.json").read_text())
    condition = contract["components"]["schemas"]["DependsOnBody"]["properties"]["condition"]
    # Then the SDK checks the very same conditions, and modes
    assert sorted(DEPENDENCY_CONDITIONS) == sorted(condition["enum"])
    mode = contract["components"]["schemas"]["DependsOnBody"]["properties"]["mode"]
    assert sorted(DEPENDENCY_MODES) == sorted(mode["enum"])


def test_an_unknown_condition_is_refused_by_the_sdk_before_any_request(
    httpserver: HTTPServer, api: rb.Client
) -> None:
    with pytest.raises(ValueError, match="'Bogus' is not a dependency condition: give Succeeded"):
        rb.submit("1", depends_on=[(TRAIN, "Bogus")])
    assert httpserver.log == []


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--after", f"{TRAIN}:Bogus"], f"Invalid value for '--after': '{TRAIN}:Bogus': 'Bogus' is not a "
                                         "dependency condition"),
        (["--after", f"{TRAIN}:succeeded"], "'succeeded' is not a dependency condition"),
        (["--after", ":Succeeded"], "Invalid value for '--after': ':Succeeded': give a job id first"),
        (["--inputs-from", ":model/*"], "Invalid value for '--inputs-from': ':model/*': give a job id first"),
        (["--inputs-from", " :model/*"], "' :model/*': give a job id first"),
    ],
)  # fmt: skip
def test_cli_refuses_a_bad_after_or_inputs_from_naming_it_before_any_request(
    httpserver: HTTPServer, api: rb.Client, args: list[str], named: str
) -> None:
    done = CliRunner().invoke(app, ["submit", "--code", "1", *args], env={**os.environ, "COLUMNS": "400"})
    assert done.exit_code == 2, done.output
    assert named in " ".join(done.output.replace("│", " ").split())
    assert httpserver.log == []


def test_cli_status_shows_the_parents_whose_outputs_a_job_takes(
    httpserver: HTTPServer, api: rb.Client
) -> None:
    # Given a job taking two globs of one parent's outputs and every output of another
    httpserver.expect_request("/jobs/job-b", method="GET").respond_with_json(
        job(
            jobId="job-b",
            dependsOn=[
                {"jobId": TRAIN, "condition": "Succeeded"},
                {"jobId": "job-x", "condition": "Completed"},
            ],
            inputsFrom=[{"jobId": TRAIN, "files": ["model/*", "*.json"]}, {"jobId": "job-x", "files": []}],
        )
    )
    done = CliRunner().invoke(app, ["status", "job-b"], env={**os.environ, "COLUMNS": "200"})
    # Then status lists each, with its globs
    assert done.exit_code == 0, done.output
    rows = [line.rstrip().split(maxsplit=1) for line in done.output.splitlines()]
    assert ["inputsFrom", f"{TRAIN} (model/*, *.json)"] in rows
    assert ["inputsFrom", "job-x (every output)"] in rows
    assert ["dependsOn", "job-x (Completed)"] in rows


def test_a_parent_not_read_yet_says_so_without_a_request(httpserver: HTTPServer, api: rb.Client) -> None:
    # Given a job whose parent is known by its id only
    child = rb.Job(api, job(jobId="job-c", dependsOn=[{"jobId": TRAIN, "condition": "Succeeded"}]))
    (parent,) = child.parents
    # When it is shown (repr, the Jupyter card), Then it says it was not read, and nothing is asked
    assert repr(parent) == f"<Job {TRAIN} (not read)>"
    card = parent._repr_html_()
    assert ">not read</span>" in card and TRAIN in card and "None" not in card
    assert httpserver.log == []
    # And once read it shows the job
    httpserver.expect_request(f"/jobs/{TRAIN}").respond_with_json(job(jobId=TRAIN, name="train"))
    parent.refresh()
    assert repr(parent) == f"<Job {TRAIN} 'train' Succeeded Basic1x8 credits=1.0>"
