"""Request headers that must come once (pure: no I/O).

HTTP lets a header repeat (RFC 9110 §5.3), and servers disagree on which copy counts: API Gateway's
``headers`` keeps the last one, a WSGI server's first lookup finds the first. For the headers whose
value decides who the caller is or which request a retry repeats, either choice can act on a value
the client did not mean, so a request that sends one of them twice is refused.
"""

from __future__ import annotations

from collections.abc import Iterable

from functions.domain.errors import ValidationFailed

#: Headers a request may send at most once (by name, case-insensitively).
SINGLE_VALUED_HEADERS = ("Authorization", "Idempotency-Key")


def check_single_valued(names: Iterable[str]) -> None:
    """Refuse a request whose header names (one item per header line, as sent) hold one of
    ``SINGLE_VALUED_HEADERS`` more than once.

    Raises
    ------
    ValidationFailed
        400 naming the header (``field="Authorization"``), whatever the copies say.
    """
    counts: dict[str, int] = {}
    for name in names:
        counts[name.lower()] = counts.get(name.lower(), 0) + 1
    for header in SINGLE_VALUED_HEADERS:
        sent = counts.get(header.lower(), 0)
        if sent > 1:
            raise ValidationFailed(f"The {header} header is sent {sent} times; send it once.", field=header)
