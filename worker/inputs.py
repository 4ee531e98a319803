"""A child job's inputs from its parents (``inputsFrom`` of ``POST /jobs``): before the user's code
starts, each parent's matching outputs and its result land in the working directory under
``inputs/<parent id>/``.

The input document lists the parents (``{"inputsFrom": [{"jobId", "files"}]}``). The job's role reads
no other job's outputs: the service copied what the child takes (the ``files`` patterns applied) when
it released the child, within the zone's bucket, under the child's own input folder (layout
``remote-batch.inputs/1``, ``functions.domain.parent_inputs``): ``inputs/<child>/from/<parent>/`` holds
each copied object under its key below the parent's output prefix (``worker.layout``:
``files/<name>``; an array's children's ``<index>/files/<name>``, which land as ``<index>/<name>``;
``outcome.json`` with the result inline or naming ``result.json`` / ``result.pickle``) and
``manifest.json``, the list of them (the job role may list nothing). Everything is read with the job's
own credentials.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from worker.errors import InvalidJobInput
from worker.storage import JobStorage

#: The folder, under the working directory, that holds the parents' files.
INPUTS_FOLDER = "inputs"
#: The folder, under the job's input folder (``inputs/<jobId>/``), of its parents' copies.
COPIES_FOLDER = "from"
#: The list of one parent's copies, under its copy prefix.
MANIFEST_OBJECT = "manifest.json"
MANIFEST_FORMAT = "remote-batch.inputs/1"
_JOB_ID = re.compile(r"^job-[0-9A-HJKMNP-TV-Z]{26}$")
_CHILD_FILE = re.compile(r"^(\d+)/files/(.+)$")


@dataclass(frozen=True)
class InputSource:
    """One parent the job takes inputs from: its id and where the service copied them
    (``inputs/<child>/from/<parent>/``)."""

    job_id: str
    prefix: str


def input_sources(document: Any, input_key: str) -> list[InputSource]:
    """The ``inputsFrom`` of the input document stored at ``input_key`` (``inputs/<jobId>/input.json``),
    checked, each with its copy prefix in that folder. A ``prefix`` an older document gives (the
    parent's outputs) is not read. Raises ``InvalidJobInput``."""
    entries = document.get("inputsFrom") if isinstance(document, dict) else None
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise InvalidJobInput("'inputsFrom' must be a list")
    folder = input_key.rpartition("/")[0]
    sources = []
    for entry in entries:
        job_id = entry.get("jobId") if isinstance(entry, dict) else None
        if not (isinstance(job_id, str) and _JOB_ID.match(job_id)):
            raise InvalidJobInput("'inputsFrom' names a job id that is not one")
        sources.append(InputSource(job_id, f"{folder}/{COPIES_FOLDER}/{job_id}/"))
    return sources


def fetch_inputs(storage: JobStorage, sources: list[InputSource], workdir: Path) -> list[Path]:
    """Download each parent's copied outputs and its result under ``workdir/inputs/<id>/``.

    Returns the files written. Raises ``InputNotFound`` (a copy or its manifest is missing: the
    service did not copy it, or it expired), ``InvalidJobInput`` (a malformed manifest) or
    ``StorageError``.
    """
    written: list[Path] = []
    for source in sources:
        folder = workdir / INPUTS_FOLDER / source.job_id
        folder.mkdir(parents=True, exist_ok=True)
        copied = _manifest(storage, source)
        for relative in sorted(copied):
            name = _output_name(relative)
            if name is None:
                continue
            path = _inside(folder, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            storage.download(source.prefix + relative, path)
            written.append(path)
        # Last: an output file named result.json or result.pickle does not hide the result.
        written += _result(storage, source, folder, copied)
    return written


def _manifest(storage: JobStorage, source: InputSource) -> frozenset[str]:
    """The keys (below ``source.prefix``) the manifest lists. Raises ``InputNotFound``,
    ``InvalidJobInput``."""
    try:
        document = json.loads(storage.read(source.prefix + MANIFEST_OBJECT))
    except ValueError as exc:
        raise InvalidJobInput(
            f"the copy of {source.job_id}'s outputs has a manifest that is not JSON"
        ) from exc
    objects = document.get("objects") if isinstance(document, dict) else None
    if (
        not isinstance(document, dict)
        or document.get("format") != MANIFEST_FORMAT
        or not isinstance(objects, list)
        or not all(isinstance(o, str) for o in objects)
    ):
        raise InvalidJobInput(
            f"the copy of {source.job_id}'s outputs has a manifest not of {MANIFEST_FORMAT}"
        )
    return frozenset(objects)


def _output_name(relative: str) -> str | None:
    """The output name of a key under a parent's prefix (``files/a/b`` → ``a/b``; an array child's
    ``3/files/a`` → ``3/a``), None for an object that is no output file."""
    if relative.startswith("files/"):
        return relative.removeprefix("files/")
    match = _CHILD_FILE.match(relative)
    return f"{match.group(1)}/{match.group(2)}" if match else None


def _inside(folder: Path, name: str) -> Path:
    """``folder/name``, refusing a name that would leave ``folder`` (S3 keys may hold ``..``)."""
    parts = PurePosixPath(name).parts
    if not parts or ".." in parts or PurePosixPath(name).is_absolute():
        raise InvalidJobInput(f"a parent's output name is not a relative path: {name!r}")
    return folder.joinpath(*parts)


def _result(storage: JobStorage, source: InputSource, folder: Path, copied: frozenset[str]) -> list[Path]:
    """The parent's ``result.json`` (``{"result", "resultRepr"}``) and ``result.pickle``, written from
    its ``outcome.json`` (inline) or copied from the objects it names; nothing when it has no result."""
    outcome: Any = None
    if "outcome.json" in copied:
        try:
            outcome = json.loads(storage.read(source.prefix + "outcome.json"))
        except ValueError as exc:
            raise InvalidJobInput(f"{source.job_id}'s outcome is not JSON") from exc
    if not isinstance(outcome, dict):
        # An array (its result document is the service's) or the layout before outcome.json.
        return _download_copied(storage, source, folder, copied, ("result.json", "result.pickle"))
    written: list[Path] = []
    if "result" in outcome:
        path = folder / "result.json"
        document = {"result": outcome["result"], "resultRepr": outcome.get("resultRepr")}
        path.write_text(json.dumps(document), encoding="utf-8")
        written.append(path)
    elif outcome.get("resultObject"):
        written += _download_copied(storage, source, folder, copied, ("result.json",))
    if isinstance(outcome.get("pickle"), str):
        path = folder / "result.pickle"
        try:
            path.write_bytes(base64.b64decode(outcome["pickle"], validate=True))
        except binascii.Error as exc:
            raise InvalidJobInput(f"{source.job_id}'s result pickle is not base64") from exc
        written.append(path)
    elif outcome.get("pickleObject"):
        written += _download_copied(storage, source, folder, copied, ("result.pickle",))
    return written


def _download_copied(
    storage: JobStorage, source: InputSource, folder: Path, copied: frozenset[str], names: tuple[str, ...]
) -> list[Path]:
    written = []
    for name in names:
        if name in copied:
            storage.download(source.prefix + name, folder / name)
            written.append(folder / name)
    return written
