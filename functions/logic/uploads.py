"""Inputs too large for a request body: uploaded straight to the zone's bucket with a presigned PUT.

``POST /jobs/uploads`` signs a PUT for one object under the caller's own prefix,
``inputs/uploads/<accountId>/upl-<ULID>``; ``POST /jobs`` then names it with ``inputKey``. What an
upload holds is told by its Content-Type (signed into the URL, so S3 stores exactly that type), which
keeps the route generic: a job input (Python source or a cloudpickle payload), or an array's items
(JSON Lines, ``arrayItemsKey``).

An upload lives under ``inputs/``, so the bucket's 14-day lifecycle removes it; several jobs may
use the same upload, and ``DELETE /jobs/{jobId}`` leaves it to that lifecycle.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from functions.domain.arrays import parse_items_jsonl
from functions.domain.errors import ValidationFailed
from functions.domain.ids import new_ulid
from functions.domain.job_policy import UPLOADS_PREFIX
from functions.domain.jobs import PayloadKind
from functions.domain.limits import PRESIGNED_SECONDS
from functions.domain.machine_classes import GeoZone, resolve_geo_zone
from functions.ports import ObjectInfo, Services

#: Content-Type of an upload → the job input it is (``POST /jobs`` ``inputKey``).
INPUT_CONTENT_TYPES: dict[str, PayloadKind] = {
    "text/x-python": PayloadKind.CODE,
    "application/x-python-pickle": PayloadKind.PICKLE,
}
#: Content-Types of an array's items (``POST /jobs`` ``arrayItemsKey``): JSON Lines, one item a line.
ITEMS_CONTENT_TYPES = ("application/jsonl", "application/x-ndjson")
#: The largest JSON Lines object an array reads (bytes): 100,000 items of up to ~2.5 KiB each. The
#: api Lambda parses it whole, once, at submit.
MAX_ITEMS_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Upload:
    """A signed upload: the object's key, the presigned PUT URL, when the URL expires, the headers
    the PUT must carry (they are signed), and its zone."""

    input_key: str
    upload_url: str
    expires_at: datetime
    headers: dict[str, str]
    geo_zone: GeoZone


def account_prefix(account_id: str) -> str:
    """Where ``account_id``'s uploads live in every zone's bucket."""
    return f"{UPLOADS_PREFIX}{account_id}/"


def _zone(services: Services, geo_zone: str) -> GeoZone:
    zone = resolve_geo_zone(geo_zone)
    if zone not in services.zones:
        available = ", ".join(z.value for z in services.zones)
        raise ValidationFailed(
            f"Geo zone {zone.value} is not available in this deployment; available: {available}.",
            field="geoZone",
        )
    return zone


def create_upload(
    services: Services, account_id: str, *, size: int, content_type: str, geo_zone: str, now: datetime
) -> Upload:
    """``POST /jobs/uploads``: sign a PUT of exactly ``size`` bytes of ``content_type``.

    The URL is SigV4 with ``Content-Length`` and ``Content-Type`` signed (S3 refuses another size
    or type) and valid ``PRESIGNED_SECONDS``. ``size`` (1..5 GiB) and ``content_type`` are
    validated by the route's model.

    Raises
    ------
    ValidationFailed
        ``geoZone`` unknown or not deployed.
    """
    zone = _zone(services, geo_zone)
    key = account_prefix(account_id) + "upl-" + new_ulid(round(now.timestamp() * 1000))
    url = services.zones[zone].blobs.presigned_put(key, PRESIGNED_SECONDS, size, content_type)
    return Upload(
        input_key=key,
        upload_url=url,
        expires_at=now + timedelta(seconds=PRESIGNED_SECONDS),
        headers={"Content-Type": content_type, "Content-Length": str(size)},
        geo_zone=zone,
    )


_UPLOAD_NAME = re.compile(r"upl-[0-9A-HJKMNP-TV-Z]{26}")


def _own_upload(account_id: str, key: str, field: str) -> None:
    prefix = account_prefix(account_id)
    if not (key.startswith(prefix) and _UPLOAD_NAME.fullmatch(key[len(prefix) :])):
        raise ValidationFailed(
            f"{field} must be an inputKey that POST /jobs/uploads gave this account.", field=field
        )


def uploaded_items(services: Services, account_id: str, key: str, zone: GeoZone) -> list[Any]:
    """The items of an array's ``arrayItemsKey``: one of the caller's uploads in the job's zone, a
    JSON Lines object (``ITEMS_CONTENT_TYPES``) of 1..100,000 items, every line checked.

    Raises
    ------
    ValidationFailed
        (``field="arrayItemsKey"``) not one of this account's uploads, nothing uploaded there in the
        zone, another Content-Type, over ``MAX_ITEMS_BYTES``, or a line that is not one JSON value
        (the message names the line, 1-based).
    """
    field = "arrayItemsKey"
    _own_upload(account_id, key, field)
    blobs = services.zones[zone].blobs
    info = blobs.describe(key)
    if info is None:
        raise ValidationFailed(
            f"Nothing is uploaded at arrayItemsKey in geo zone {zone.value}: PUT the items to its uploadUrl "
            "first, in the zone the job runs in (uploads expire after 14 days).",
            field=field,
        )
    content_type = info.content_type.split(";")[0].strip().lower()
    if content_type not in ITEMS_CONTENT_TYPES:
        raise ValidationFailed(
            f"The upload at arrayItemsKey is {content_type}, not JSON Lines "
            f"({', '.join(ITEMS_CONTENT_TYPES)}).",
            field=field,
        )
    if info.size > MAX_ITEMS_BYTES:
        raise ValidationFailed(
            f"The upload at arrayItemsKey is {info.size} bytes, over the {MAX_ITEMS_BYTES} an array reads.",
            field=field,
        )
    data = blobs.get(key, MAX_ITEMS_BYTES)
    if data is None:
        raise ValidationFailed("Nothing is uploaded at arrayItemsKey any more.", field=field)
    return parse_items_jsonl(data)


def uploaded_input(
    services: Services, account_id: str, key: str, zone: GeoZone
) -> tuple[PayloadKind, ObjectInfo]:
    """The job input an ``inputKey`` names: its kind (from its Content-Type) and the object.

    Raises
    ------
    ValidationFailed
        (``field="inputKey"``) not one of this account's uploads, no such object in the job's
        zone (not uploaded yet, another zone, or expired), or a Content-Type that is no job input.
    """
    _own_upload(account_id, key, "inputKey")
    info = services.zones[zone].blobs.describe(key)
    if info is None:
        raise ValidationFailed(
            f"Nothing is uploaded at inputKey in geo zone {zone.value}: PUT the input to its uploadUrl "
            "first, in the zone the job runs in (uploads expire after 14 days).",
            field="inputKey",
        )
    content_type = info.content_type.split(";")[0].strip().lower()
    if content_type not in INPUT_CONTENT_TYPES:
        raise ValidationFailed(
            f"The upload at inputKey is {content_type}, not a job input ({', '.join(INPUT_CONTENT_TYPES)}).",
            field="inputKey",
        )
    return INPUT_CONTENT_TYPES[content_type], info
