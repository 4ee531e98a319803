"""Webhook secrets and delivery ids, after the Standard Webhooks specification (standardwebhooks.com).

A secret is ``whsec_`` + the base64 (standard alphabet, RFC 4648 section 4) of 32 random bytes: the
key HMAC-SHA256 signs with is those bytes. Secrets made before this release are ``whsec_`` + 43
characters of base64url without padding (``secrets.token_urlsafe``): their key is what that text
decodes to in the base64url alphabet, and ``standard_secret`` gives the same key in the standard
form, for a receiver whose library decodes the standard alphabet only.

Each delivery carries ``webhook-id``: the same for every attempt to send one notification (urllib3's
retries within a send, the meter's later retries), so a receiver that answered slowly and got the
message again can tell it already has it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib

SECRET_PREFIX = "whsec_"  # noqa: S105 - the format's prefix, not a secret
SECRET_BYTES = 32


def new_secret(key: bytes) -> str:
    """The secret shown to the account for the random ``key`` (``SECRET_BYTES`` bytes)."""
    return SECRET_PREFIX + base64.b64encode(key).decode("ascii")


def signing_key(secret: str) -> bytes:
    """The HMAC key of ``secret``: its base64 (standard alphabet) decoded, or for a secret of the
    earlier base64url form, that decoded.

    Raises
    ------
    ValueError
        The secret is neither (it was not made by this service).
    """
    text = secret.removeprefix(SECRET_PREFIX)
    padded = text + "=" * (-len(text) % 4)
    for alphabet in (b"+/", b"-_"):
        try:
            key = base64.b64decode(padded, altchars=alphabet, validate=True)
        except binascii.Error:
            continue
        if key:
            return key
    raise ValueError("not a webhook secret of this service")


def standard_secret(secret: str) -> str:
    """``secret`` in the standard form (``whsec_`` + base64): the same key, for any Standard Webhooks
    library. A secret already in that form is returned as it is."""
    return new_secret(signing_key(secret))


def delivery_id(job_id: str, notification_key: str) -> str:
    """``webhook-id`` of the notification ``notification_key`` of job ``job_id`` (its exactly-once key,
    ``functions.domain.notifications.DueNotification.key``): ``msg_`` + 32 hex digits, the same for
    every attempt."""
    digest = hashlib.sha256(f"{job_id}\n{notification_key}".encode()).hexdigest()
    return f"msg_{digest[:32]}"
