"""Webhook notifications: an HTTPS POST of a JSON body, signed with HMAC-SHA256.

Each account that sets a ``webhookUrl`` gets a secret (shown once, in the ``PUT /account/contacts``
answer). Every POST carries ``X-RemoteBatch-Timestamp`` (seconds since the epoch) and
``X-RemoteBatch-Signature: sha256=<hex>``, the HMAC-SHA256 of ``"{timestamp}.{body}"`` under that
secret, so the receiver can check origin and freshness (the scheme Stripe and GitHub webhooks use).
Retries with exponential backoff come from urllib3's ``Retry`` (urllib3 ships with botocore).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

import urllib3
from urllib3.exceptions import HTTPError
from urllib3.util.retry import Retry

from functions.domain.errors import DependencyFailed
from functions.ports import OutgoingNotification

SIGNATURE_HEADER = "X-RemoteBatch-Signature"
TIMESTAMP_HEADER = "X-RemoteBatch-Timestamp"
# 2 retries, 0.5 s then 1 s apart (urllib3's backoff), on connection errors and these statuses; a
# send that still fails is retried by the meter's next tick, so a Lambda never waits long on it.
RETRY = Retry(
    total=2,
    backoff_factor=0.5,
    status_forcelist=(408, 429, 500, 502, 503, 504),
    allowed_methods=frozenset({"POST"}),
    raise_on_status=False,
)
TIMEOUT = urllib3.Timeout(connect=2.0, read=3.0)


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """``sha256=<hex>``: HMAC-SHA256 of ``"{timestamp}.{body}"`` under ``secret``."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def webhook_body(notification: OutgoingNotification) -> bytes:
    """The JSON document POSTed for a notification (no secrets, no user code)."""
    document: dict[str, Any] = {
        "jobId": notification.job_id,
        "accountId": notification.account_id,
        "event": notification.event,
        "subject": notification.subject,
        "message": notification.message,
        "at": notification.at.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    return json.dumps(document, separators=(",", ":")).encode()


class WebhookSender:
    """POSTs signed webhook notifications (one connection pool per Lambda container)."""

    def __init__(self, pool: urllib3.PoolManager | None = None) -> None:
        self._http = pool or urllib3.PoolManager(retries=RETRY, timeout=TIMEOUT)

    def send(self, notification: OutgoingNotification, secret: str) -> None:
        """POST the notification to ``notification.to``.

        Raises
        ------
        DependencyFailed
            When the endpoint did not answer 2xx after the retries.
        """
        body = webhook_body(notification)
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "remote-batch-webhook/1",
            TIMESTAMP_HEADER: str(timestamp),
            SIGNATURE_HEADER: sign(secret, timestamp, body),
        }
        try:
            response = self._http.request("POST", notification.to, body=body, headers=headers, redirect=False)
        except HTTPError as exc:
            raise DependencyFailed("the webhook endpoint did not answer") from exc
        if not 200 <= response.status < 300:
            raise DependencyFailed(f"the webhook endpoint answered HTTP {response.status}")
