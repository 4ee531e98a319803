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
