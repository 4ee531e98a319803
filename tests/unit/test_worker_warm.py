"""``worker.warm``: the assignment a warm worker reads, and what it does with it."""

from __future__ import annotations

import io
import json
import os
import resource

import boto3
import pytest

from worker import warm


def _assignment(**overrides: object) -> io.BytesIO:
    document = {"environ": {"AWS_BATCH_JOB_ID": "j-1"}, "cpus": [0], "memoryBytes": 2**31, **overrides}
    return io.BytesIO(json.dumps(document).encode())


def test_an_assignment_is_read_whole():
    assert warm.read_assignment(_assignment()) == {
        "environ": {"AWS_BATCH_JOB_ID": "j-1"},
        "cpus": [0],
        "memoryBytes": 2**31,
    }


def test_end_of_file_without_an_assignment_means_dismissed():
    assert warm.read_assignment(io.BytesIO(b"")) is None


@pytest.mark.parametrize(
    "overrides",
    [
        {"environ": {"A": 1}},
        {"environ": ["A=1"]},
        {"cpus": []},
        {"cpus": [-1]},
        {"cpus": "0"},
        {"memoryBytes": 0},
        {"memoryBytes": "1"},
    ],
)
def test_a_malformed_assignment_is_refused(overrides):
    with pytest.raises(ValueError, match="environ, cpus and memoryBytes"):
        warm.read_assignment(_assignment(**overrides))


def test_an_oversized_assignment_is_refused():
    huge = {"environ": {"X": "x" * warm.MAX_ASSIGNMENT_BYTES}, "cpus": [0], "memoryBytes": 1}
    with pytest.raises(ValueError, match="exceeds"):
        warm.read_assignment(io.BytesIO(json.dumps(huge).encode()))


def test_preload_loads_the_s3_model_without_a_request(monkeypatch):
    # Given no endpoint that could answer (a request would fail or hang)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    loader = warm.preload()
    assert loader is not None
    # Then the loader it returns already holds the S3 model (its instance cache)
    assert any("s3" in str(key) for key in loader._cache)


def test_becoming_the_job_takes_its_environment_and_a_session_of_its_own(monkeypatch):
    # Given the environment a warm worker started with (a copy: the test's own stays as it is)
    monkeypatch.setattr(os, "environ", os.environ.copy())
    monkeypatch.setattr(os, "sched_setaffinity", lambda pid, cpus: calls.append(("cpus", sorted(cpus))))
    monkeypatch.setattr(resource, "setrlimit", lambda which, limits: calls.append(("as", limits)))
    monkeypatch.setattr(os, "dup2", lambda fd, to: calls.append(("dup2", to)))
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    # (not over this process's own environment block: libc's environ still points into it, so every
    # later subprocess of the test run would inherit the job's strings; the warm-worker integration
    # tests check /proc/<pid>/environ in a worker of their own)
    calls: list[tuple[str, object]] = []

    def show(shown: dict[str, str]) -> bool:
        calls.append(("shown", dict(shown)))
        return True

    monkeypatch.setattr(warm, "show_environment", show)
    os.environ["WARM_ONLY"] = "1"

    # When it becomes a job
    environ = {
        "AWS_BATCH_JOB_ID": "j-1",
        "AWS_ACCESS_KEY_ID": "AKIAJOB",
        "AWS_SECRET_ACCESS_KEY": "s",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }
    warm.become_job({"environ": environ, "cpus": [1], "memoryBytes": 2**30}, warm.preload())

    # Then it has the job's limits, exactly the job's environment, stdin from /dev/null, and a default
    # session that reads the job's credentials and region
    assert calls == [("cpus", [1]), ("as", (2**30, 2**30)), ("dup2", 0), ("shown", environ)]
    assert dict(os.environ) == environ
    session = boto3.DEFAULT_SESSION
    assert session is not None
    assert session.region_name == "eu-west-1"
    credentials = session.get_credentials()
    assert credentials is not None
    assert credentials.access_key == "AKIAJOB"


def test_the_environment_block_is_what_proc_environ_holds():
    assert warm.environment_block({"A": "1", "B": "x=y"}) == b"A=1\0B=x=y\0"
