"""The copies a child job starts from (``inputsFrom``, issue 25): which of its parents' objects are
copied, where to, and how much a child may take.

A job's role may read only ``inputs/*`` and write ``outputs/*`` of its zone's bucket (the cloud's role
is one per zone: ``functions.domain.job_policy``), so a child cannot read its parents' outputs. When the
child is released (``functions.logic.waits.settle``), the releasing Lambda copies, within the bucket,
each parent's matching objects under the child's own input prefix, and the worker reads them there.

Layout ``remote-batch.inputs/1``, under ``inputs/<child>/from/<parent>/`` (:func:`copy_prefix`), each
object under the key it has below ``outputs/<parent>/``:

- ``files/<name>``: a parent's output file whose name matches one of the child's patterns (all when it
  gives none); an array parent's children's ``<index>/files/<name>``, whose name is ``<index>/<name>``;
- ``outcome.json``, ``result.json``, ``result.pickle``: the parent's result (``worker.layout``; an
  array's ``result.json`` is the service's document of its children's results), each when it exists;
- ``manifest.json``, written after that parent's copies: ``{"format": "remote-batch.inputs/1",
  "objects": [<key below the prefix>, ...]}``, what was copied (the worker reads it instead of
  listing: the job role may list nothing).

The bytes are copied, never opened. A child takes at most ``MAX_INPUT_OBJECTS`` objects and
``MAX_INPUT_BYTES`` bytes from all its parents together (each object at most ``MAX_OBJECT_BYTES``,
what one CopyObject copies); past either it ends ``Terminated``, free, with :func:`over_limit_reason`.
This module reads no clock and calls nothing.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from functions.domain.dependencies import InputsFrom
from functions.domain.job_policy import INPUTS_PREFIX, OUTPUTS_PREFIX

#: The ``format`` of a parent's manifest.
MANIFEST_FORMAT = "remote-batch.inputs/1"
#: The manifest's name under a parent's copy prefix.
MANIFEST_OBJECT = "manifest.json"
#: The folder, under the child's input prefix, that holds its parents' copies.
COPIES_FOLDER = "from"
#: A parent's result objects (``worker.layout``), copied whenever they exist.
RESULT_OBJECTS = ("outcome.json", "result.json", "result.pickle")
#: The most objects a child copies from all its parents (the patterns select them).
MAX_INPUT_OBJECTS = 1000
#: The most bytes a child copies from all its parents (5 GiB).
MAX_INPUT_BYTES = 5 * 1024**3
#: The largest object one CopyObject copies (Amazon S3: 5 GiB); the service copies no larger one.
MAX_OBJECT_BYTES = 5 * 1024**3

_CHILD_FILE = re.compile(r"^(\d+)/files/(.+)$")


def output_prefix(parent_id: str) -> str:
    """Where a parent's outputs live: ``outputs/<parent>/``."""
    return f"{OUTPUTS_PREFIX}{parent_id}/"


def copy_prefix(child_id: str, parent_id: str) -> str:
    """Where a child's copies of ``parent_id``'s objects live: ``inputs/<child>/from/<parent>/``."""
    return f"{INPUTS_PREFIX}{child_id}/{COPIES_FOLDER}/{parent_id}/"


def output_name(relative: str) -> str | None:
    """The output name of a key below a parent's prefix (``files/a/b`` → ``a/b``; an array child's
    ``3/files/a`` → ``3/a``), None for an object that is no output file."""
    if relative.startswith("files/"):
        return relative.removeprefix("files/") or None
    match = _CHILD_FILE.match(relative)
    return f"{match.group(1)}/{match.group(2)}" if match else None


def wanted(relative: str, patterns: Sequence[str]) -> bool:
    """Whether the object at ``relative`` (below a parent's prefix) is copied for a child taking the
    outputs matching ``patterns`` (``fnmatch``, case-sensitive; none: every output): a matching output
    file, or one of the parent's result objects."""
    if relative in RESULT_OBJECTS:
        return True
    name = output_name(relative)
    if name is None:
        return False
    return not patterns or any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


@dataclass(frozen=True, slots=True)
class Copy:
    """One object to copy: its key and size (bytes) under the parent's outputs, its key for the child."""

    source: str
    target: str
    size: int


@dataclass(frozen=True, slots=True)
class ParentCopies:
    """What one parent gives its child: the copies, and its manifest's key and body."""

    parent_id: str
    copies: tuple[Copy, ...]
    manifest_key: str
    manifest: bytes


def parent_copies(child_id: str, entry: InputsFrom, objects: Iterable[tuple[str, int]]) -> ParentCopies:
    """The copies of ``entry``'s parent's ``objects`` (``(key, size)``, keys under its
    ``output_prefix``) that ``child_id`` takes (:func:`wanted`), in key order, and its manifest."""
    source_prefix, target_prefix = output_prefix(entry.job_id), copy_prefix(child_id, entry.job_id)
    copies = []
    for key, size in sorted(objects):
        relative = key.removeprefix(source_prefix)
        if key.startswith(source_prefix) and wanted(relative, entry.files):
            copies.append(Copy(key, target_prefix + relative, size))
    document = {"format": MANIFEST_FORMAT, "objects": [c.target.removeprefix(target_prefix) for c in copies]}
    return ParentCopies(
        entry.job_id, tuple(copies), target_prefix + MANIFEST_OBJECT, json.dumps(document).encode()
    )


def over_limit_reason(copies: Sequence[ParentCopies]) -> str | None:
    """Why a child cannot take all of ``copies`` (its ``statusReason`` as it ends), or None when it
    can: over ``MAX_INPUT_OBJECTS`` objects, over ``MAX_INPUT_BYTES`` bytes, or one object over
    ``MAX_OBJECT_BYTES``."""
    every = [c for parent in copies for c in parent.copies]
    if len(every) > MAX_INPUT_OBJECTS:
        return (
            f"The inputs from this job's dependencies are more than {MAX_INPUT_OBJECTS} objects "
            f"(the most a job copies); narrow inputsFrom's files patterns"
        )
    large = next(((p, c) for p in copies for c in p.copies if c.size > MAX_OBJECT_BYTES), None)
    if large is not None:
        parent, copy = large
        return (
            f"Dependency {parent.parent_id} has an output of {copy.size} bytes, over the "
            f"{MAX_OBJECT_BYTES} bytes (5 GiB) one input copy may be"
        )
    total = sum(c.size for c in every)
    if total > MAX_INPUT_BYTES:
        return (
            f"The inputs from this job's dependencies are {total} bytes, over the {MAX_INPUT_BYTES} bytes "
            "(5 GiB) a job copies; narrow inputsFrom's files patterns"
        )
    return None
