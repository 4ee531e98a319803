"""Page tokens: the ``nextToken`` of every paged route (pure: no I/O).

A token is the base64url of a JSON object naming where the next page starts, and what it was issued
for (an account, a job). It is opaque to clients; one that this API did not issue, was issued for
another account or job, or was changed, is a 400 on ``nextToken``, never a page from elsewhere.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from typing import Any

from functions.domain.errors import ValidationFailed
from functions.domain.text import URLSAFE_BASE64_PATTERN, full_match


def encode_page_token(position: Mapping[str, Any]) -> str:
    """The token of ``position`` (a JSON object: strings, numbers)."""
    return base64.urlsafe_b64encode(json.dumps(dict(position), sort_keys=True).encode()).decode()


def decode_page_token(
    token: str, keys: frozenset[str], *, issued_for: Mapping[str, str] | None = None, scope: str = ""
) -> dict[str, Any]:
    """The position ``encode_page_token`` wrote into ``token``.

    Parameters
    ----------
    token : str
        The client's ``nextToken``.
    keys : frozenset[str]
        The keys the position has, exactly.
    issued_for : Mapping[str, str] | None
        Keys of the position that must hold these values (``{"jobId": ...}``): a token issued for
        another account or job is refused.
    scope : str
        Said in the refusal: ``"account"`` gives "… issued for this account".

    Raises
    ------
    ValidationFailed
        ``field="nextToken"``: not base64url of a JSON object with exactly ``keys`` (characters outside
        the alphabet are refused, not dropped as ``b64decode`` would), or issued for another.
    """
    try:
        if not full_match(URLSAFE_BASE64_PATTERN, token):
            raise ValueError(token)
        position = json.loads(base64.urlsafe_b64decode(token.encode()))
        valid = isinstance(position, dict) and set(position) == keys
    except (ValueError, binascii.Error, RecursionError):
        valid = False
    if valid and issued_for:
        valid = all(position.get(name) == value for name, value in issued_for.items())
    if not valid:
        raise token_refused(scope)
    return dict(position)


def token_refused(scope: str = "") -> ValidationFailed:
    """The 400 on ``nextToken`` for a token this API did not issue (for this ``scope``: "account",
    "job"), also for a position whose values a caller checks further."""
    where = f" for this {scope}" if scope else ""
    return ValidationFailed(f"nextToken is not one this API issued{where}.", field="nextToken")
