"""The SDK's JSON: credits and other fractional numbers as exact ``Decimal`` both ways.

The service writes credits with at most 4 decimal places; a float would round them, so bodies are
read with ``parse_float=Decimal`` and a ``Decimal`` is written back as a JSON number with the same
digits.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import requests


def to_json_number(value: Any) -> Any:
    """``json.dumps``'s ``default``: a ``Decimal`` as a JSON number with the same digits (credits have
    at most 4 decimal places, which a float's shortest repr keeps exactly).

    Raises ``TypeError`` for any other type, as ``json.dumps`` does without a ``default``."""
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def decode_bytes(raw: bytes) -> Any:
    """JSON text with fractional numbers as ``Decimal`` (credits stay exact); empty bytes are None.

    Raises ``ValueError`` (``json.JSONDecodeError``) for text that is not JSON."""
    return json.loads(raw or b"null", parse_float=Decimal)


def decode(response: requests.Response) -> Any:
    """The response's JSON body, fractional numbers as ``Decimal`` (``decode_bytes``)."""
    return decode_bytes(response.content)
