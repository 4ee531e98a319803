"""A child job's inputs from its parents (``inputsFrom`` of ``POST /jobs``): before the user's code
starts, each parent's matching outputs and its result land in the working directory under
``inputs/<parent id>/``.

The input document lists them (``{"inputsFrom": [{"jobId", "files", "prefix"}]}``: the parent's id,
fnmatch patterns over its output names (empty: all) and its output prefix, ``outputs/<id>/``, in this
job's bucket). Layout read (``worker.layout``): ``<prefix>files/<name>`` per output (an array's children
under ``<prefix><index>/files/<name>``, which land as ``<index>/<name>``), ``outcome.json`` with the
result inline or naming ``result.json`` / ``result.pickle``. Everything is read within the zone's
bucket, with the job's own credentials (which may read these parents' outputs and nothing more).
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import json
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from worker.errors import InputNotFound, InvalidJobInput
from worker.storage import JobStorage

#: The folder, under the working directory, that holds the parents' files.
INPUTS_FOLDER = "inputs"
_JOB_ID = re.compile(r"^job-[0-9A-HJKMNP-TV-Z]{26}$")
_CHILD_FILE = re.compile(r"^(\d+)/files/(.+)$")


@dataclass(frozen=True)
class InputSource:
    """One parent the job takes inputs from: its id, its output prefix and the patterns."""

    job_id: str
    prefix: str
    files: tuple[str, ...] = ()

    def wants(self, name: str) -> bool:
        """Whether output ``name`` matches one of the patterns (every name without patterns)."""
        return not self.files or any(fnmatch.fnmatchcase(name, pattern) for pattern in self.files)


def input_sources(document: Any) -> list[InputSource]:
    """The ``inputsFrom`` of an input document, checked. Raises ``InvalidJobInput``."""
    entries = document.get("inputsFrom") if isinstance(document, dict) else None
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise InvalidJobInput("'inputsFrom' must be a list")
    sources = []
    for entry in entries:
        job_id = entry.get("jobId") if isinstance(entry, dict) else None
        prefix = entry.get("prefix") if isinstance(entry, dict) else None
        files = entry.get("files", []) if isinstance(entry, dict) else None
        if not (isinstance(job_id, str) and _JOB_ID.match(job_id)):
            raise InvalidJobInput("'inputsFrom' names a job id that is not one")
        if not (isinstance(prefix, str) and prefix == f"outputs/{job_id}/"):
            raise InvalidJobInput(f"'inputsFrom' gives no output prefix for {job_id}")
        if not (isinstance(files, list) and all(isinstance(f, str) for f in files)):
            raise InvalidJobInput("'inputsFrom' files must be a list of patterns")
        sources.append(InputSource(job_id, prefix, tuple(files)))
    return sources


def fetch_inputs(storage: JobStorage, sources: list[InputSource], workdir: Path) -> list[Path]:
    """Download each parent's matching outputs and its result under ``workdir/inputs/<id>/``.

    Returns the files written. Raises ``InputNotFound`` (a parent's outputs are gone: expired or
    deleted) or ``StorageError``.
    """
    written: list[Path] = []
    for source in sources:
        folder = workdir / INPUTS_FOLDER / source.job_id
        folder.mkdir(parents=True, exist_ok=True)
        for key in storage.list_keys(source.prefix):
            name = _output_name(key[len(source.prefix) :])
            if name is None or not source.wants(name):
                continue
            path = _inside(folder, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            storage.download(key, path)
            written.append(path)
        # Last: an output file named result.json or result.pickle does not hide the result.
        written += _result(storage, source, folder)
    return written


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


def _result(storage: JobStorage, source: InputSource, folder: Path) -> list[Path]:
    """The parent's ``result.json`` (``{"result", "resultRepr"}``) and ``result.pickle``, written from
    its ``outcome.json`` (inline) or copied from the objects it names; nothing when it has no result."""
    try:
        outcome = json.loads(storage.read(source.prefix + "outcome.json"))
    except InputNotFound:
        outcome = None
    except ValueError as exc:
        raise InvalidJobInput(f"{source.job_id}'s outcome is not JSON") from exc
    if not isinstance(outcome, dict):
        # An array (its result document is the service's) or the layout before outcome.json.
        return _copy_if_present(storage, source, folder, ("result.json", "result.pickle"))
    written: list[Path] = []
    if "result" in outcome:
        path = folder / "result.json"
        document = {"result": outcome["result"], "resultRepr": outcome.get("resultRepr")}
        path.write_text(json.dumps(document), encoding="utf-8")
        written.append(path)
    elif outcome.get("resultObject"):
        written += _copy_if_present(storage, source, folder, ("result.json",))
    if isinstance(outcome.get("pickle"), str):
        path = folder / "result.pickle"
        try:
            path.write_bytes(base64.b64decode(outcome["pickle"], validate=True))
        except binascii.Error as exc:
            raise InvalidJobInput(f"{source.job_id}'s result pickle is not base64") from exc
        written.append(path)
    elif outcome.get("pickleObject"):
        written += _copy_if_present(storage, source, folder, ("result.pickle",))
    return written


def _copy_if_present(
    storage: JobStorage, source: InputSource, folder: Path, names: tuple[str, ...]
) -> list[Path]:
    written = []
    for name in names:
        try:
            storage.download(source.prefix + name, folder / name)
        except InputNotFound:
            continue
        written.append(folder / name)
    return written
