"""A child job's inputs from its parents (``worker.inputs``), in-process on moto's S3: the parent's
matching outputs and its result are in the working directory under ``inputs/<parent>/`` before the
child's code starts, and a parent whose outputs are gone fails the child before any user code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from tests.integration.test_worker import BUCKET, Job, s3  # noqa: F401 - the fixture
from worker.entrypoint import main

PARENT = "job-01JAAAAAAAAAAAAAAAAAAAAAAB"


def _parent(s3: Any) -> None:  # noqa: F811 - the fixture's client
    """A parent that saved a model and a note and returned ``{"accuracy": 0.9}``."""
    job = Job(s3)
    job.job_id, job.output_prefix = PARENT, f"outputs/{PARENT}/"
    job.input_key = f"inputs/{PARENT}/input.json"
    job.env.update(
        REMOTE_BATCH_JOB_ID=PARENT,
        REMOTE_BATCH_INPUT_KEY=job.input_key,
        REMOTE_BATCH_OUTPUT_PREFIX=job.output_prefix,
    )
    code = (
        "import os, pathlib\n"
        "out = pathlib.Path(os.environ['REMOTE_BATCH_OUTPUT_DIR'])\n"
        "(out / 'model').mkdir()\n"
        "(out / 'model' / 'weights.txt').write_text('w=3')\n"
        "(out / 'notes.txt').write_text('not wanted')\n"
        "{'accuracy': 0.9}"
    )
    job.put_input({"kind": "code", "code": code})
    assert main(job.env, s3) == 0


def test_a_child_starts_with_its_parents_matching_outputs_and_result(
    s3: Any,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _parent(s3)
    monkeypatch.chdir(tmp_path)
    child = Job(s3).put_input(
        {
            "kind": "code",
            "code": (
                "import json, pickle\n"
                f"weights = open('inputs/{PARENT}/model/weights.txt').read()\n"
                f"result = json.load(open('inputs/{PARENT}/result.json'))['result']\n"
                f"same = pickle.load(open('inputs/{PARENT}/result.pickle', 'rb'))\n"
                "[weights, result, same]"
            ),
            "inputsFrom": [{"jobId": PARENT, "files": ["model/*"], "prefix": f"outputs/{PARENT}/"}],
        }
    )
    assert main(child.env, s3) == 0
    assert child.result_document()["result"] == ["w=3", {"accuracy": 0.9}, {"accuracy": 0.9}]
    # Only the outputs matching the patterns were fetched
    fetched = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert fetched == [
        f"inputs/{PARENT}/model/weights.txt",
        f"inputs/{PARENT}/result.json",
        f"inputs/{PARENT}/result.pickle",
    ]
    assert cloudpickle.loads((tmp_path / "inputs" / PARENT / "result.pickle").read_bytes()) == {
        "accuracy": 0.9
    }


def test_a_child_whose_parents_input_document_is_forged_is_refused_before_its_code(
    s3: Any,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    child = Job(s3).put_input(
        {
            "kind": "code",
            "code": "open('ran', 'w')",
            "inputsFrom": [{"jobId": PARENT, "files": [], "prefix": "inputs/uploads/someone/"}],
        }
    )
    assert main(child.env, s3) == 2
    assert not (tmp_path / "ran").exists()
    error = json.loads(child.output("outcome.json"))["error"]
    assert "inputsFrom" in error["reason"]
