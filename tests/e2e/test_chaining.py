"""Job chaining on the local stack (issue 25): the seed's chain, a training job that saves a model
file, a prediction job that depends on it and loads the file from ``inputs/``, and a report job that
depends on both and receives their results; and a failed parent ending its child free."""

from __future__ import annotations

import time
from decimal import Decimal

import pytest

import remote_batch as rb
from remote_batch import connection
from tests.e2e.conftest import LocalStackProcess

TRAIN = """
import json, os, pathlib, time
time.sleep(2)  # still running when its children are submitted, however fast the machine
out = pathlib.Path(os.environ["REMOTE_BATCH_OUTPUT_DIR"])
(out / "model").mkdir()
(out / "model" / "weights.json").write_text(json.dumps({"w": 3, "b": 1}))
(out / "notes.txt").write_text("training notes")
{"trained_on": 4}
"""


def predict(train_id: str, xs: list[int]) -> list[int]:
    import json
    import os

    # Only the files asked for (model/*) came, with the parent's result (no assert here: pytest
    # rewrites a test module's asserts with its own helpers, which the job's container lacks)
    if os.path.exists(f"inputs/{train_id}/notes.txt"):
        raise RuntimeError("an output that matches no pattern was fetched")
    with open(f"inputs/{train_id}/model/weights.json") as stream:
        model = json.load(stream)
    return [model["w"] * x + model["b"] for x in xs]


def report(trained: dict[str, int], predictions: list[int]) -> str:
    return f"trained on {trained['trained_on']}, predicted {predictions}"


@pytest.fixture
def dev_sdk(stack: LocalStackProcess, monkeypatch: pytest.MonkeyPatch) -> rb.Client:
    monkeypatch.setenv("REMOTE_BATCH_ENDPOINT", stack.endpoint)
    monkeypatch.setenv("REMOTE_BATCH_TOKEN", stack.tokens["dev"])
    monkeypatch.setattr(connection, "_default", None)
    return connection.default_client()


def test_the_seeds_chain_train_predict_report(dev_sdk: rb.Client) -> None:
    started = time.monotonic()
    train = rb.submit(TRAIN, name="train")
    predict_job = rb.submit(predict, train.id, [1, 2, 3], depends_on=train, inputs_from=(train, "model/*"))
    # The report receives both results in its arguments' places
    report_job = rb.submit(report, train, predict_job)
    assert predict_job.status_reason is not None and predict_job.status_reason.startswith(
        f"Waiting for {train.id}"
    )
    assert [p.id for p in report_job.parents] == [train.id, predict_job.id]
    # The prediction (it cannot end before the training did) lists the report as waiting for it
    assert [c.id for c in predict_job.children_waiting] == [report_job.id]

    report_job.wait(timeout=180, progress=False)
    for job in (train, predict_job):
        job.refresh()
        assert job.status == "Succeeded", (job.id, job.status_reason, job.log)
    assert report_job.result(timeout=10) == "trained on 4, predicted [4, 7, 10]"
    assert predict_job.result(timeout=10) == [4, 7, 10]
    elapsed = time.monotonic() - started
    for job in (train, predict_job, report_job):
        job.refresh()
        assert job.status == "Succeeded"
        assert job.credits_spent > Decimal("0")
        print(job.name or job.id, job.status, job.data["startedAt"], job.data["completedAt"])
    print(f"chain of three in {elapsed:.1f} s")
    # Each started after its parents completed
    assert predict_job.data["startedAt"] >= train.data["completedAt"]
    assert report_job.data["startedAt"] >= predict_job.data["completedAt"]


def test_a_failed_parent_ends_its_child_free_and_runs_its_cleanup(dev_sdk: rb.Client) -> None:
    failing = rb.submit("1 / 0")
    child = rb.submit("'never'", depends_on=failing, notifications="None")
    cleanup = rb.submit("'cleaned'", depends_on=(failing, "Terminated"), notifications="None")
    assert cleanup.result(timeout=120) == "cleaned"
    child.wait(timeout=30, progress=False)
    assert child.status == "Terminated"
    assert child.status_reason == f"Dependency {failing.id} ended Terminated; this job needed Succeeded"
    assert child.credits_spent == Decimal("0")
