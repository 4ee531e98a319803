"""Time formats: docs/http-api.md's ISO 8601 UTC with ``Z``, and the sortable form the store keeps."""

from __future__ import annotations

from datetime import UTC, datetime

from functions.domain.errors import ValidationFailed


def to_api_time(value: datetime | None) -> str | None:
    """``2026-11-29T17:20:00Z`` (seconds precision), or None."""
    if value is None:
        return None
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def to_sortable(value: datetime) -> str:
    """``2026-11-29T17:20:00.123Z``: fixed width, so strings sort as times (DynamoDB sort keys)."""
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def from_sortable(text: str) -> datetime:
    """Inverse of ``to_sortable`` (also accepts ``to_api_time``'s form)."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(UTC)


def parse_query_time(text: str, field: str) -> datetime:
    """Parse an ISO 8601 time from a query string; naive times are taken as UTC.

    Raises
    ------
    ValidationFailed
        Naming ``field`` when ``text`` is not an ISO 8601 time, or is one whose offset puts it outside
        the years 1 to 9999 in UTC.
    """
    # Printable ASCII only (spaces around are dropped): str.strip() would let a trailing newline
    # through, and full-width digits are not a time.
    try:
        if not text.isascii() or not text.isprintable():
            raise ValueError(text)
        text = text.strip(" ")
        # A "+" in a query string arrives as a space ("...T17:20:00 01:00"): it is the offset's sign.
        # RFC 3339 allows a lower-case t and z.
        value = datetime.fromisoformat(text.upper().replace("Z", "+00:00").replace(" ", "+"))
    except ValueError:
        raise ValidationFailed(
            f"{field} must be an ISO 8601 time like 2026-11-29T17:20:00Z, got {text!r}.", field=field
        ) from None
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:01+13:42 is before year 1 in UTC (found by schemathesis)
        raise ValidationFailed(
            f"{field} is out of range: in UTC it must fall in the years 1 to 9999, got {text!r}.", field=field
        ) from None
