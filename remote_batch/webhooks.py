"""Checking a webhook notification on the receiving side (Standard Webhooks, standardwebhooks.com).

Every POST the service sends carries ``webhook-id`` (the same on every attempt to deliver one
notification: a receiver keeps the ids it handled and ignores a repeat), ``webhook-timestamp`` and
``webhook-signature``. ``verify`` checks them with the ``standardwebhooks`` package against the
account's secret (``webhookSecret``, shown once by ``PUT /account/contacts``)::

    from remote_batch import webhooks

    def handle(request):                      # any web framework
        try:
            event = webhooks.verify(request.body, request.headers, SECRET)
        except webhooks.WebhookVerificationError:
            return 400
        if seen(request.headers["webhook-id"]):
            return 200                        # a retry of what was handled already
        ...

A secret made before Standard Webhooks (``whsec_`` + base64url) works here as it is; for another
Standard Webhooks library, ``standard_secret`` gives the same key in the standard form.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from standardwebhooks import Webhook, WebhookVerificationError

__all__ = ["WebhookVerificationError", "standard_secret", "verify"]

_PREFIX = "whsec_"


def _key(secret: str) -> bytes:
    text = secret.strip().removeprefix(_PREFIX)
    padded = text + "=" * (-len(text) % 4)
    for alphabet in (b"+/", b"-_"):
        try:
            key = base64.b64decode(padded, altchars=alphabet, validate=True)
        except binascii.Error:
            continue
        if key:
            return key
    raise WebhookVerificationError("the secret is not a remote-batch webhook secret (whsec_...)")


def standard_secret(secret: str) -> str:
    """``secret`` as ``whsec_`` + base64 (standard alphabet): the same key, for any Standard Webhooks
    library (a secret already in that form comes back as it is).

    Raises
    ------
    WebhookVerificationError
        ``secret`` is not a remote-batch webhook secret.
    """
    return _PREFIX + base64.b64encode(_key(secret)).decode("ascii")


def verify(payload: bytes | str, headers: Mapping[str, str], secret: str) -> dict[str, Any]:
    """Check a webhook POST and return its JSON body.

    Parameters
    ----------
    payload : bytes | str
        The request body exactly as received (before any JSON parsing).
    headers : Mapping[str, str]
        The request headers (any case).
    secret : str
        The account's ``webhookSecret``.

    Returns
    -------
    dict
        The notification: ``jobId``, ``accountId``, ``event``, ``subject``, ``message``, ``at``.

    Raises
    ------
    WebhookVerificationError
        A header is missing, the timestamp is more than 5 minutes from now (a replay), or the
        signature does not match (another sender, or a changed body).
    """
    document = Webhook(_key(secret)).verify(payload, dict(headers))
    if not isinstance(document, dict):
        raise WebhookVerificationError("the body is not a remote-batch notification")
    return document
