"""Copy a released child's inputs from its parents (``inputsFrom``) under its own input prefix, within
its zone's bucket, before it takes quota (``functions.logic.waits.settle``); the layout, the selection
and the limits are ``functions.domain.parent_inputs``'. The Lambda that releases the child (batch_events
on a parent's end, the meter's backstop, the api when the parents had ended by the submit) copies the
bytes with its own role (GetObject on ``outputs/*``, PutObject on ``inputs/*``): it never reads them.

A replay or a concurrent release copies the same objects again over the same keys (the parents are
final: their outputs no longer change) and writes the same manifests, so the copy is safe to repeat;
the release that follows is the one conditional write (``quotas.release_into_hold``).
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_lambda_powertools import Logger

from functions.domain.dependencies import InputsFrom, data_gone_reason
from functions.domain.jobs import Job
from functions.domain.parent_inputs import (
    MAX_INPUT_OBJECTS,
    ParentCopies,
    output_prefix,
    over_limit_reason,
    parent_copies,
    wanted,
)
from functions.ports import BlobStore, Services

logger = Logger(child=True)

#: Objects a ListObjectsV2 page returns (S3's most).
LIST_PAGE_SIZE = 1000


def copy_parent_inputs(services: Services, job: Job) -> str | None:
    """Copy what ``job`` takes from its parents (``inputs_from``) in its zone's bucket
    (``copy_inputs``). Returns None, or the reason it must end. Raises ``DependencyFailed``."""
    if not job.inputs_from:
        return None
    return copy_inputs(services.zones[job.geo_zone].blobs, job.job_id, job.inputs_from)


def copy_inputs(blobs: BlobStore, child_id: str, inputs_from: Sequence[InputsFrom]) -> str | None:
    """Copy what child ``child_id`` takes from each parent of ``inputs_from`` under
    ``inputs/<child>/from/<parent>/`` and write each parent's manifest after its copies.

    Returns None once every copy is made, or the reason the child must end instead (its
    ``statusReason``: over a limit of ``domain.parent_inputs``, or a parent's outputs gone between the
    listing and the copy); nothing is copied past a limit. Raises ``DependencyFailed`` (S3 failed:
    the child stays waiting and the next settle copies again).
    """
    planned: list[ParentCopies] = []
    for entry in inputs_from:
        taken = sum(len(p.copies) for p in planned)
        objects = _listed(blobs, output_prefix(entry.job_id), entry.files, MAX_INPUT_OBJECTS + 1 - taken)
        planned.append(parent_copies(child_id, entry, objects))
        refused = over_limit_reason(planned)
        if refused is not None:
            logger.info("inputs over a limit", job_id=child_id, parent_id=entry.job_id, reason=refused)
            return refused
    for parent in planned:
        if blobs.copy([(c.source, c.target) for c in parent.copies]):
            logger.info("a parent's outputs gone before their copy", job_id=child_id, parent=parent.parent_id)
            return data_gone_reason(parent.parent_id)
        blobs.put(parent.manifest_key, parent.manifest, "application/json")
    logger.info(
        "inputs copied",
        job_id=child_id,
        objects=sum(len(p.copies) for p in planned),
        bytes=sum(c.size for p in planned for c in p.copies),
    )
    return None


def _listed(blobs: BlobStore, prefix: str, patterns: tuple[str, ...], most: int) -> list[tuple[str, int]]:
    """The ``(key, size)`` of the objects under ``prefix`` a child copies (``domain.parent_inputs
    .wanted``), page by page, stopping once there are ``most`` (enough to know the limit is passed)."""
    found: list[tuple[str, int]] = []
    start: str | None = None
    while True:
        page, more = blobs.list_page(prefix, start, LIST_PAGE_SIZE)
        found += [(o.key, o.size) for o in page if wanted(o.key.removeprefix(prefix), patterns)]
        if not more or not page or len(found) >= most:
            return found
        start = page[-1].key
