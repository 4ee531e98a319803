"""What an ended container of an array that takes many items ran: its reports and the item it held.

A container (``worker.item_loop``) writes one report per item under
``outputs/<parent>/containers/<batch job id>/<index>.json`` and claims items as
``outputs/<parent>/claims/<index>`` (its Batch id as the body). When the container ends, this reads
what it left: its reports (JSON only, never unpickled; each at most ``MAX_REPORT_BYTES``) and the
items it claimed without any container's report (it died running them), then settles them by the
domain's rules (``functions.domain.item_reports.settle_container``). S3 requests: one listing page per
1,000 of its reports and one GET each, one listing page per 1,000 of the array's claims and reports,
and one GET per claim without a valid report (at most one per running container, and one per
report refused).
"""

from __future__ import annotations

import re
from decimal import Decimal

from aws_lambda_powertools import Logger

from functions.domain.errors import PayloadTooLarge
from functions.domain.item_reports import MAX_REPORT_BYTES, ContainerSettlement, settle_container
from functions.ports import BlobStore

logger = Logger(child=True)

_REPORT = re.compile(r"(0|[1-9][0-9]{0,5})\.json")
_CLAIM = re.compile(r"0|[1-9][0-9]{0,5}")
#: A claim's body is the claimer's Batch job id (AWS Batch ids are under 100 characters).
MAX_CLAIM_BYTES = 256


def reports_prefix(parent_job_id: str, batch_job_id: str) -> str:
    """``outputs/<parent>/containers/<batch job id>/``: where a container's reports are."""
    return f"outputs/{parent_job_id}/containers/{batch_job_id}/"


def claims_prefix(parent_job_id: str) -> str:
    """``outputs/<parent>/claims/``: the array's claims, one object per claimed index."""
    return f"outputs/{parent_job_id}/claims/"


def read_container(
    blobs: BlobStore,
    parent_job_id: str,
    batch_job_id: str,
    *,
    array_size: int,
    started_ms: int,
    stopped_ms: int,
    charge: Decimal,
    end_reason: str,
) -> ContainerSettlement:
    """The items an ended container ran, with their outcomes and parts of ``charge``.

    Parameters
    ----------
    blobs : BlobStore
        The array's zone's bucket.
    parent_job_id, batch_job_id : str
        The array and the container's AWS Batch job id (from its event: trusted).
    array_size, started_ms, stopped_ms, charge, end_reason
        As ``settle_container`` takes them (the container's Batch-reported life in ms, its own
        charge, its ``statusReason``).

    Returns
    -------
    ContainerSettlement
        A report too big or not named ``<index>.json`` counts as rejected, as a malformed one does;
        an item this container claimed whose report was refused fails with ``end_reason`` (as a held
        one), so the caller passes a reason for a container that succeeded too.

    Raises
    ------
    DependencyFailed
        S3 failed (the event is delivered again; reading is idempotent).
    """
    prefix = reports_prefix(parent_job_id, batch_job_id)
    bodies: list[bytes] = []
    refused = 0
    for stored in blobs.list(prefix):
        if not _REPORT.fullmatch(stored.key.removeprefix(prefix)) or stored.size > MAX_REPORT_BYTES:
            refused += 1
            continue
        try:
            body = blobs.get(stored.key, MAX_REPORT_BYTES)
        except PayloadTooLarge:
            refused += 1
            continue
        if body is not None:
            bodies.append(body)
    life = {"array_size": array_size, "started_ms": started_ms, "stopped_ms": stopped_ms}
    valid = {
        i.index for i in settle_container(bodies, [], charge=charge, end_reason=end_reason, **life).items
    }
    held = held_items(blobs, parent_job_id, batch_job_id, valid)
    settled = settle_container(
        bodies,
        held,
        array_size=array_size,
        started_ms=started_ms,
        stopped_ms=stopped_ms,
        charge=charge,
        end_reason=end_reason,
    )
    if settled.rejected or refused:
        logger.warning(
            "container reports refused",
            job_id=parent_job_id,
            batch_job_id=batch_job_id,
            refused=settled.rejected + refused,
        )
    return ContainerSettlement(settled.items, settled.rejected + refused)


def held_items(blobs: BlobStore, parent_job_id: str, batch_job_id: str, valid: set[int]) -> list[int]:
    """The items ``batch_job_id`` claimed without a valid report of its own (``valid``: the indexes of
    its reports that ``settle_container`` took): the claims reported by no other container whose
    body names this one. An item whose report was refused is held too, so it is never lost. Raises
    ``DependencyFailed`` (S3 failed)."""
    claims = claims_prefix(parent_job_id)
    claimed = {
        int(name)
        for stored in blobs.list(claims)
        if _CLAIM.fullmatch(name := stored.key.removeprefix(claims))
    }
    containers = f"outputs/{parent_job_id}/containers/"
    own = reports_prefix(parent_job_id, batch_job_id)
    reported = set(valid)
    for stored in blobs.list(containers):
        match = _REPORT.fullmatch(stored.key.rsplit("/", 1)[-1])
        if match is not None and not stored.key.startswith(own):
            reported.add(int(match.group(1)))
    held: list[int] = []
    for index in sorted(claimed - reported):
        try:
            body = blobs.get(f"{claims}{index}", MAX_CLAIM_BYTES)
        except PayloadTooLarge:
            continue
        if body is not None and body == batch_job_id.encode():
            held.append(index)
    return held
