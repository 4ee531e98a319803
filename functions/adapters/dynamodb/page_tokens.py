"""``nextToken``: a DynamoDB ``LastEvaluatedKey`` handed to the caller and taken back.

A token is the key's string attributes, written by the service's one page-token codec
(``functions.domain.page_tokens``: JSON, URL-safe base64, characters outside the alphabet refused).
Taking one back also checks what a DynamoDB key needs: every value a string that encodes as UTF-8
(a lone surrogate cannot reach DynamoDB), and the attributes the route binds (the caller's account)
equal to the caller's. Anything else is a 400 on ``nextToken``.
"""

from __future__ import annotations

from collections.abc import Mapping

from functions.domain.page_tokens import decode_page_token, encode_page_token, token_refused


def encode_token(key: Mapping[str, str]) -> str:
    """The token of a (deserialized) key whose attributes are all strings."""
    return encode_page_token(key)


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
    scope = "account" if for_account else ""
    key = decode_page_token(token, attributes, issued_for=bound, scope=scope)
    if not all(isinstance(value, str) and _is_utf8(value) for value in key.values()):
        raise token_refused(scope)
    return {name: str(value) for name, value in key.items()}


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
