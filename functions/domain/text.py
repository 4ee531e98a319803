"""Rules for text that comes from outside: which characters a field may hold, checked the same way
everywhere.

Every pattern here is matched with ``fullmatch`` (``re.match`` plus ``$`` would accept a trailing
``\\n``: ``$`` also matches before a final newline) and spells digits ``[0-9]`` (``\\d`` and
``str.isdigit`` also take Arabic-Indic, full-width and other Unicode digits, which ``int()`` then
reads as numbers).
"""

from __future__ import annotations

import re
from typing import Any

from functions.domain.errors import ValidationFailed

ASCII_DIGITS = re.compile(r"[0-9]+")
# A decimal number as ASCII: optional sign, digits, optional fraction, optional exponent.
ASCII_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
# Visible ASCII (0x21..0x7e): keys, tokens and other identifiers a client chooses.
VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")

# A job id as ``functions.logic.submission.new_job_id`` makes it: job- and a ULID (Crockford base32).
JOB_ID_PATTERN = r"^job-[0-9A-HJKMNP-TV-Z]{26}$"
# An account id: a Cognito ``sub`` (a UUID) deployed, a name of letters, digits and ``._@-`` locally.
ACCOUNT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$"
# base64 (RFC 4648 section 4), padded.
BASE64_PATTERN = r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
# URL-safe base64 (RFC 4648 section 5), padded: the opaque nextToken this API hands out.
URLSAFE_BASE64_PATTERN = r"^(?:[A-Za-z0-9_-]{4})*(?:[A-Za-z0-9_-]{2}==|[A-Za-z0-9_-]{3}=)?$"
# E.164 (ITU-T): a plus, a country code not starting with 0, at most 15 digits in all.
E164_PATTERN = r"^\+[1-9][0-9]{1,14}$"
# An email address SNS can deliver to: ASCII local part (RFC 5322 atext and dots, at most 64) @ a
# domain of letters, digits and hyphens in two labels or more (internationalized domains in their
# xn-- form).
EMAIL_PATTERN = (
    r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}"
    r"@[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)+$"
)
# A 24-hour clock time, HH:MM (a schedule's daily start or stop).
CLOCK_PATTERN = r"^([01][0-9]|2[0-3]):[0-5][0-9]$"
# Any text without a NUL (a command's argument: exec cannot pass one).
NO_NUL_PATTERN = r"^[^\x00]*$"
# An https:// address as sent on the wire: visible ASCII only (hosts in their xn-- form).
URL_CHARS_PATTERN = r"^[\x21-\x7e]+$"

# A one-line label (a job name, a ledger reason): any script's letters, digits and symbols, but no
# control character (C0, DEL, C1), no U+2028/U+2029 line breaks and no bidirectional formatting
# character (they reorder what a reader sees in an email subject or a log line without being visible
# themselves, Unicode TR #9), and not only spaces. Written for both pydantic's regex engine and JSON
# Schema (ECMA-262), where ``^``/``$`` anchor the whole string.
_REFUSED_IN_LABEL = r"\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
LABEL_PATTERN = rf"^[^{_REFUSED_IN_LABEL}]*[^\s{_REFUSED_IN_LABEL}][^{_REFUSED_IN_LABEL}]*$"


def full_match(pattern: str, text: str) -> bool:
    """True when ``pattern`` (one of this module's ``^...$`` patterns) matches all of ``text``; a
    trailing newline never slips through (``$`` is not trusted: fullmatch decides)."""
    return re.fullmatch(pattern, text) is not None


def is_ascii_digits(text: str) -> bool:
    """True when ``text`` is one or more of ``0``..``9`` and nothing else (no sign, space, newline)."""
    return ASCII_DIGITS.fullmatch(text) is not None


def has_surrogate(text: str) -> bool:
    """True when ``text`` holds a lone surrogate (U+D800..U+DFFF): JSON's ``"\\ud800"`` escape makes
    one, but no UTF-8 encoder, process argument, DynamoDB item or email can carry it."""
    return any("\ud800" <= char <= "\udfff" for char in text)


def first_surrogate_path(value: Any, path: str = "") -> str | None:
    """JSON path (``command[1]``, ``notifications[0].events[0]``) of the first string, object key
    included, that holds a lone surrogate in a parsed JSON document; None when there is none.

    An object key's own path is reported when the key is the culprit. ``""`` means the document itself.
    """
    stack: list[tuple[Any, str]] = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            if has_surrogate(item):
                return where
        elif isinstance(item, dict):
            children: list[tuple[Any, str]] = []
            for key, child in item.items():
                child_path = f"{where}.{key}" if where else str(key)
                if isinstance(key, str) and has_surrogate(key):
                    return child_path
                children.append((child, child_path))
            stack.extend(reversed(children))
        elif isinstance(item, list):
            stack.extend(reversed([(child, f"{where}[{i}]") for i, child in enumerate(item)]))
    return None


# Linux execve(2): one argument or environment string is at most MAX_ARG_STRLEN = 32 pages
# (131,072 bytes with its terminating NUL); argv and the environment together must fit ARG_MAX
# (a quarter of the 8 MiB default stack: 2 MiB, pointers included). The worker's own environment
# takes a few KiB, so a command gets half of ARG_MAX.
MAX_ARG_BYTES = 128 * 1024 - 1
MAX_ARGV_BYTES = 1024 * 1024
_POINTER_BYTES = 8


def check_argv(argv: list[str], field: str = "command") -> None:
    """Refuse an argv that no process could be started with.

    Each argument is UTF-8 text without NUL (C strings end at the first NUL) and without lone
    surrogates (not encodable), at most ``MAX_ARG_BYTES`` bytes; the program (``argv[0]``) is not
    empty; all arguments with their NULs and pointers take at most ``MAX_ARGV_BYTES`` bytes.

    Raises
    ------
    ValidationFailed
        Naming the argument (``command[1]``), or ``command`` for the total.
    """
    if not argv:
        raise ValidationFailed(f"{field} needs at least one element: the program to run.", field=field)
    total = 0
    for index, arg in enumerate(argv):
        where = f"{field}[{index}]"
        if "\x00" in arg:
            raise ValidationFailed(
                f"{where} holds a NUL character (\\u0000), which no process argument can carry.", field=where
            )
        if has_surrogate(arg):
            raise ValidationFailed(
                f"{where} holds a lone surrogate (\\ud800..\\udfff), which is not text a process can get.",
                field=where,
            )
        size = len(arg.encode("utf-8"))
        if size > MAX_ARG_BYTES:
            raise ValidationFailed(
                f"{where} is {size} bytes in UTF-8; one argument is at most {MAX_ARG_BYTES} bytes "
                "(Linux MAX_ARG_STRLEN). Pass large data as an input file instead.",
                field=where,
            )
        total += size + 1 + _POINTER_BYTES
    if not argv[0]:
        raise ValidationFailed(
            f"{field}[0] is the program to run and must not be empty.", field=f"{field}[0]"
        )
    if total > MAX_ARGV_BYTES:
        raise ValidationFailed(
            f"{field} takes {total} bytes as process arguments; at most {MAX_ARGV_BYTES} bytes "
            "(Linux ARG_MAX, shared with the environment). Pass large data as an input file instead.",
            field=field,
        )
