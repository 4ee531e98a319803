"""A child job's inputs from its parents (``inputsFrom``), in-process on moto's S3: the copy the
releasing Lambda makes (``functions.logic.parent_inputs.copy_inputs``: the patterns over output names,
an array parent's children's files, the result objects, the limits, a replay, outputs gone meanwhile)
and the worker (``worker.inputs``), which finds the copies under its own input folder and puts them in
the working directory under ``inputs/<parent>/`` before the child's code starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

from functions.adapters.s3 import S3BlobStore
from functions.domain import parent_inputs as layout
from functions.domain.dependencies import InputsFrom, data_gone_reason
from functions.logic import parent_inputs
from functions.logic.parent_inputs import copy_inputs
from tests.integration.test_worker import BUCKET, Job, s3  # noqa: F401 - the fixture
from worker.entrypoint import main

PARENT = "job-01JAAAAAAAAAAAAAAAAAAAAAAB"
ARRAY = "job-01JAAAAAAAAAAAAAAAAAAAAAAC"


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


def _keys(s3: Any, prefix: str) -> list[str]:  # noqa: F811
    listing = s3.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
    return sorted(o["Key"].removeprefix(prefix) for o in listing.get("Contents", []))


def _put(s3: Any, objects: dict[str, bytes]) -> None:  # noqa: F811
    for key, body in objects.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)


def test_a_child_starts_with_its_parents_matching_outputs_and_result(
    s3: Any,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a parent that ran, and its child taking model/* from it, released (the copy made)
    _parent(s3)
    monkeypatch.chdir(tmp_path)
    code = (
        "import json, pickle\n"
        f"weights = open('inputs/{PARENT}/model/weights.txt').read()\n"
        f"result = json.load(open('inputs/{PARENT}/result.json'))['result']\n"
        f"same = pickle.load(open('inputs/{PARENT}/result.pickle', 'rb'))\n"
        "[weights, result, same]"
    )
    child = Job(s3).put_input(
        {"kind": "code", "code": code, "inputsFrom": [{"jobId": PARENT, "files": ["model/*"]}]}
    )
    assert copy_inputs(S3BlobStore(s3, BUCKET), child.job_id, [InputsFrom(PARENT, ("model/*",))]) is None
    # Then the copies lie under the child's own inputs: the matching file, the outcome, the manifest
    copies = f"inputs/{child.job_id}/from/{PARENT}/"
    assert _keys(s3, copies) == ["files/model/weights.txt", "manifest.json", "outcome.json"]

    # When the child runs
    assert main(child.env, s3) == 0

    # Then its code read the parent's file and result from its working directory
    assert child.result_document()["result"] == ["w=3", {"accuracy": 0.9}, {"accuracy": 0.9}]
    fetched = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert fetched == [
        f"inputs/{PARENT}/model/weights.txt",
        f"inputs/{PARENT}/result.json",
        f"inputs/{PARENT}/result.pickle",
    ]
    assert cloudpickle.loads((tmp_path / "inputs" / PARENT / "result.pickle").read_bytes()) == {
        "accuracy": 0.9
    }


def test_an_array_parents_children_files_and_result_document_are_copied_and_land_by_index(
    s3: Any,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given an array parent: two children's files and outcomes, and the array's result document
    _put(
        s3,
        {
            f"outputs/{ARRAY}/0/files/part.csv": b"a",
            f"outputs/{ARRAY}/1/files/part.csv": b"b",
            f"outputs/{ARRAY}/1/files/log.txt": b"not wanted",
            f"outputs/{ARRAY}/0/outcome.json": b"{}",
            f"outputs/{ARRAY}/result.json": json.dumps({"result": [1, 2]}).encode(),
            f"outputs/{ARRAY}/preview.png": b"\x89PNG",
        },
    )
    monkeypatch.chdir(tmp_path)
    child = Job(s3).put_input(
        {"kind": "code", "code": "1", "inputsFrom": [{"jobId": ARRAY, "files": ["*/part.csv"]}]}
    )

    # When its child taking */part.csv is released
    assert copy_inputs(S3BlobStore(s3, BUCKET), child.job_id, [InputsFrom(ARRAY, ("*/part.csv",))]) is None

    # Then the matching children's files and the array's result are copied, nothing else
    assert _keys(s3, f"inputs/{child.job_id}/from/{ARRAY}/") == [
        "0/files/part.csv",
        "1/files/part.csv",
        "manifest.json",
        "result.json",
    ]
    # And the child finds them under inputs/<array>/<index>/
    assert main(child.env, s3) == 0
    folder = tmp_path / "inputs" / ARRAY
    assert sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) == [
        "0/part.csv",
        "1/part.csv",
        "result.json",
    ]
    assert (folder / "1" / "part.csv").read_bytes() == b"b"


def test_a_replayed_release_copies_the_same_again(s3: Any) -> None:  # noqa: F811
    # Given a parent's outputs and a child released once
    _put(s3, {f"outputs/{PARENT}/files/a.txt": b"1", f"outputs/{PARENT}/outcome.json": b"{}"})
    blobs = S3BlobStore(s3, BUCKET)
    child = "job-01JAAAAAAAAAAAAAAAAAAAAAAD"
    assert copy_inputs(blobs, child, [InputsFrom(PARENT)]) is None
    prefix = f"inputs/{child}/from/{PARENT}/"
    first = {k: s3.get_object(Bucket=BUCKET, Key=prefix + k)["Body"].read() for k in _keys(s3, prefix)}

    # When the release is replayed (a duplicated event, the backstop after a crash)
    assert copy_inputs(blobs, child, [InputsFrom(PARENT)]) is None

    # Then the same objects hold the same bytes
    again = {k: s3.get_object(Bucket=BUCKET, Key=prefix + k)["Body"].read() for k in _keys(s3, prefix)}
    assert again == first
    assert json.loads(first["manifest.json"]) == {
        "format": "remote-batch.inputs/1",
        "objects": ["files/a.txt", "outcome.json"],
    }


def test_a_child_over_the_object_limit_copies_nothing_and_is_told_the_limit(
    s3: Any,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a limit of 3 objects and two parents with 2 matching objects each
    monkeypatch.setattr(layout, "MAX_INPUT_OBJECTS", 3)
    monkeypatch.setattr(parent_inputs, "MAX_INPUT_OBJECTS", 3)
    _put(s3, {f"outputs/{p}/files/{n}": b"x" for p in (PARENT, ARRAY) for n in ("a", "b")})
    child = "job-01JAAAAAAAAAAAAAAAAAAAAAAE"

    # When the child is released
    reason = copy_inputs(S3BlobStore(s3, BUCKET), child, [InputsFrom(PARENT), InputsFrom(ARRAY)])

    # Then it is refused with the limit named, and nothing was copied
    assert reason == (
        "The inputs from this job's dependencies are more than 3 objects (the most a job copies); "
        "narrow inputsFrom's files patterns"
    )
    assert _keys(s3, f"inputs/{child}/") == []


def test_a_parents_outputs_deleted_between_listing_and_copy_end_the_child_saying_so(
    s3: Any,  # noqa: F811
) -> None:
    # Given a parent whose only output is deleted right after the child's listing saw it
    _put(s3, {f"outputs/{PARENT}/files/a.txt": b"1"})
    blobs = S3BlobStore(s3, BUCKET)

    class Deleting(S3BlobStore):
        def list_page(self, prefix: str, start_after: str | None, max_keys: int) -> Any:
            page = blobs.list_page(prefix, start_after, max_keys)
            s3.delete_object(Bucket=BUCKET, Key=f"outputs/{PARENT}/files/a.txt")
            return page

    # When the child is released
    reason = copy_inputs(Deleting(s3, BUCKET), "job-01JAAAAAAAAAAAAAAAAAAAAAAF", [InputsFrom(PARENT)])

    # Then it ends saying the parent's outputs are gone, and no manifest claims a copy
    assert reason == data_gone_reason(PARENT)
    assert _keys(s3, "inputs/job-01JAAAAAAAAAAAAAAAAAAAAAAF/") == []


def test_a_child_whose_input_document_names_another_prefix_reads_only_its_own_copies(
    s3: Any,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a parent's outputs and a child whose document points at them directly (no copy made)
    _parent(s3)
    monkeypatch.chdir(tmp_path)
    child = Job(s3).put_input(
        {
            "kind": "code",
            "code": "open('ran', 'w')",
            "inputsFrom": [{"jobId": PARENT, "files": [], "prefix": f"outputs/{PARENT}/"}],
        }
    )

    # When it runs
    assert main(child.env, s3) == 2

    # Then it looked only under its own inputs, found no copy, and its code never ran
    assert not (tmp_path / "ran").exists()
    error = json.loads(child.output("outcome.json"))["error"]
    assert error["reason"] == "The job's input is missing"
    assert not (tmp_path / "inputs" / PARENT / "model").exists()


def test_a_child_whose_input_document_names_no_job_id_is_refused_before_its_code(
    s3: Any,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    child = Job(s3).put_input(
        {"kind": "code", "code": "open('ran', 'w')", "inputsFrom": [{"jobId": "../uploads/someone"}]}
    )
    assert main(child.env, s3) == 2
    assert not (tmp_path / "ran").exists()
    error = json.loads(child.output("outcome.json"))["error"]
    assert "inputsFrom" in error["reason"]
