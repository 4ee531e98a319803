"""Identifiers the service makes (pure: the time is passed in)."""

from __future__ import annotations

import secrets

_CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"


def new_ulid(millis: int) -> str:
    """A ULID: 48 bits of milliseconds then 80 random bits, in 26 Crockford base32 characters (the
    ULID spec, https://github.com/ulid/spec), so ids sort by creation time and cannot be guessed.

    Written here rather than taken from a package because the Lambda asset ships only
    ``functions/`` and the runtime (boto3, the powertools layer); the format is a few lines.
    """
    value = (millis << 80) | int.from_bytes(secrets.token_bytes(10), "big")
    return "".join(_CROCKFORD[(value >> shift) & 31] for shift in range(125, -1, -5))
