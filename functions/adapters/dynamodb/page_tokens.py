"""``nextToken``: a DynamoDB ``LastEvaluatedKey`` handed to the caller and taken back.

A token is the key's string attributes as JSON, URL-safe base64. Taking one back checks that it is
one this API could have issued: valid base64 (``b64decode`` silently drops characters outside the
alphabet, so they are refused first), a JSON object with exactly the key's attributes, every value a
string that encodes as UTF-8 (a lone surrogate cannot reach DynamoDB), and the attributes the route
binds (the caller's account) equal to the caller's. Anything else is a 400 on ``nextToken``.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping

from functions.domain.errors import ValidationFailed
from functions.domain.text import URLSAFE_BASE64_PATTERN, full_match


def encode_token(key: Mapping[str, str]) -> str:
    """The token of a (deserialized) key whose attributes are all strings."""
    return base64.urlsafe_b64encode(json.dumps(dict(key), sort_keys=True).encode()).decode()


def decode_token(
    token: str,
    attributes: frozenset[str],
    bound: Mapping[str, str] | None = None,
    *,
    for_account: bool = True,
) -> dict[str, str]:
    """The key ``encode_token`` made ``token`` from.

    Parameters
    ----------
    attributes : frozenset[str]
        The key's attribute names, exactly.
    bound : Mapping[str, str] | None
        Attributes that must hold these values (e.g. ``{"accountId": <the caller's>}``).
    for_account : bool
        Whether the message says "for this account" (tokens of per-account lists).

    Raises
    ------
    ValidationFailed
        On ``nextToken``, for any token this API did not issue (for this caller).
    """
    try:
        if not full_match(URLSAFE_BASE64_PATTERN, token):
            raise ValueError(token)
        key = json.loads(base64.urlsafe_b64decode(token.encode()))
        valid = (
            isinstance(key, dict)
            and set(key) == attributes
            and all(isinstance(value, str) and _is_utf8(value) for value in key.values())
            and all(key[name] == value for name, value in (bound or {}).items())
        )
    except (ValueError, binascii.Error):
        valid = False
    if not valid:
        whose = " for this account" if for_account else ""
        raise ValidationFailed(f"nextToken is not one this API issued{whose}.", field="nextToken")
    return {name: str(value) for name, value in key.items()}


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
