"""Webhook notifications: an HTTPS POST of a JSON body, signed after Standard Webhooks.

Each account that sets a ``webhookUrl`` gets a secret (shown once, in the ``PUT /account/contacts``
answer; its format: ``functions.domain.webhook_signing``). Every POST carries the Standard Webhooks
headers (standardwebhooks.com; signed with the ``standardwebhooks`` package):

- ``webhook-id``: the delivery's id, the same on every attempt to send that notification;
- ``webhook-timestamp``: seconds since the epoch, of this attempt;
- ``webhook-signature``: ``v1,<base64>``, HMAC-SHA256 of ``"{id}.{timestamp}.{body}"`` under the
  secret's key, which ``standardwebhooks.Webhook(secret).verify`` (or the SDK's
  ``remote_batch.webhooks.verify``) checks.

For one release it also carries the earlier headers, for receivers that check them:
``X-RemoteBatch-Timestamp`` and ``X-RemoteBatch-Signature: sha256=<hex>``, the HMAC-SHA256 of
``"{timestamp}.{body}"`` under the secret's text (deprecated: they go in the next release).
Retries with exponential backoff come from urllib3's ``Retry`` (urllib3 ships with botocore); a POST
the receiver may have got (no answer within the read timeout) is not re-sent at once (``RETRY``).
Delivery is at least once: a notification that got no answer is sent again by the schedule with
the same ``webhook-id``, which Standard Webhooks tells receivers to deduplicate by. Only public
addresses are posted to, checked at every delivery (``WebhookSender``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import urllib3
from standardwebhooks import Webhook
from urllib3.exceptions import HTTPError
from urllib3.util.retry import Retry

from functions.adapters.dns import SocketResolver
from functions.domain.errors import DeliveryRefused, DependencyFailed
from functions.domain.webhook_addresses import is_this_machine, non_public_reason
from functions.domain.webhook_signing import signing_key
from functions.ports import HostResolver, OutgoingNotification

ID_HEADER = "webhook-id"
STANDARD_TIMESTAMP_HEADER = "webhook-timestamp"
STANDARD_SIGNATURE_HEADER = "webhook-signature"
# The earlier headers, kept for one release (deprecated).
SIGNATURE_HEADER = "X-RemoteBatch-Signature"
TIMESTAMP_HEADER = "X-RemoteBatch-Timestamp"
# Retried at once: a connection that could not be made (nothing was sent), twice, and an answer of
# these statuses, twice, 0.5 s then 1 s apart (urllib3's backoff). Never re-sent at once: a POST whose
# answer did not come within the read timeout or whose connection broke after sending (``read=0``):
# the receiver may have it, and its next attempt is the schedule's (1, 2, 4, 8 minutes later, same
# ``webhook-id``). A receiver's ``Retry-After`` is not obeyed, so no answer can hold the sender longer
# than these waits.
RETRY = Retry(
    total=2,
    connect=2,
    read=0,
    status=2,
    other=0,
    backoff_factor=0.5,
    status_forcelist=(408, 429, 500, 502, 503, 504),
    allowed_methods=frozenset({"POST"}),
    raise_on_status=False,
    respect_retry_after_header=False,
)
# Seconds to connect, and to wait for the answer once the POST is sent.
TIMEOUT = urllib3.Timeout(connect=2.0, read=3.0)


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The deprecated ``X-RemoteBatch-Signature``: ``sha256=<hex>``, HMAC-SHA256 of
    ``"{timestamp}.{body}"`` under ``secret``'s text."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def signed_headers(secret: str, delivery_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The signature headers of one attempt: Standard Webhooks' (``standardwebhooks`` signs) and,
    for one release, the earlier pair.

    Raises
    ------
    DeliveryRefused
        ``secret`` is not one of this service's (no key to sign with).
    """
    try:
        key = signing_key(secret)
    except ValueError:
        raise DeliveryRefused("the account's webhook secret is not valid") from None
    moment = datetime.fromtimestamp(timestamp, UTC)
    return {
        ID_HEADER: delivery_id,
        STANDARD_TIMESTAMP_HEADER: str(timestamp),
        STANDARD_SIGNATURE_HEADER: Webhook(key).sign(delivery_id, moment, body.decode()),
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: sign(secret, timestamp, body),
    }


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
    """POSTs signed webhook notifications, to the address it checked.

    At every delivery the URL's host is resolved again (DNS can change after ``PUT /account/contacts``
    checked it) and every address must be public unicast (``functions.domain.webhook_addresses``);
    the connection then goes to the checked address, with the host name for ``Host``, TLS SNI and
    certificate checks, so a second DNS answer cannot redirect it (DNS rebinding). On the local stack
    (``local``) http:// is allowed and the addresses must be this machine's instead.

    Parameters
    ----------
    resolver : HostResolver | None
        Default: the C library's resolver.
    local : bool
        The local stack's rule: this machine only.
    timeout : urllib3.Timeout
        Seconds to connect and to wait for the answer (default ``TIMEOUT``: 2 and 3).
    """

    def __init__(
        self, resolver: HostResolver | None = None, local: bool = False, timeout: urllib3.Timeout = TIMEOUT
    ) -> None:
        self._resolver = resolver or SocketResolver()
        self._local = local
        self._timeout = timeout

    def _checked_address(self, host: str, port: int) -> str:
        addresses = self._resolver.resolve(host, port)
        if not addresses:
            raise DependencyFailed(f"the webhook host {host} does not resolve")
        for address in addresses:
            if self._local:
                if not is_this_machine(address):
                    raise DeliveryRefused(
                        f"the local stack only posts webhooks to this machine, not {address}"
                    )
            elif (problem := non_public_reason(address)) is not None:
                raise DeliveryRefused(f"the webhook host {host} resolves to a non-public address ({problem})")
        return addresses[0]

    def send(self, notification: OutgoingNotification, secret: str) -> None:
        """POST the notification to ``notification.to``.

        Raises
        ------
        DeliveryRefused
            The host resolves to a non-public address, or the endpoint answered a 4xx other than
            408/429: sending again cannot help.
        DependencyFailed
            No answer within the timeout (sent once), no connection, a 5xx, 408 or 429 after the
            retries, or a host that does not resolve now.
        """
        parsed = urlsplit(notification.to)
        host = (parsed.hostname or "").rstrip(".")
        schemes = ("https", "http") if self._local else ("https",)
        if parsed.scheme not in schemes or not host:
            raise DeliveryRefused(f"the webhook URL is not {' or '.join(schemes)}")
        try:
            port = parsed.port or (443 if parsed.scheme == "https" else 80)
        except ValueError:
            raise DeliveryRefused("the webhook URL has an invalid port") from None
        address = self._checked_address(host, port)
        body = webhook_body(notification)
        headers = {
            "Host": parsed.netloc.rsplit("@", 1)[-1],
            "Content-Type": "application/json",
            "User-Agent": "remote-batch-webhook/1",
            **signed_headers(secret, notification.delivery_id, int(time.time()), body),
        }
        pool: urllib3.HTTPConnectionPool
        if parsed.scheme == "https":
            pool = urllib3.HTTPSConnectionPool(
                address,
                port,
                server_hostname=host,
                assert_hostname=host,
                cert_reqs="CERT_REQUIRED",
                retries=RETRY,
                timeout=self._timeout,
            )
        else:
            pool = urllib3.HTTPConnectionPool(address, port, retries=RETRY, timeout=self._timeout)
        target = parsed.path or "/"
        if parsed.query:
            target += f"?{parsed.query}"
        try:
            with pool:
                response = pool.urlopen("POST", target, body=body, headers=headers, redirect=False)
        except HTTPError as exc:
            raise DependencyFailed("the webhook endpoint did not answer") from exc
        if 200 <= response.status < 300:
            return
        if 400 <= response.status < 500 and response.status not in (408, 429):
            raise DeliveryRefused(f"the webhook endpoint answered HTTP {response.status}")
        raise DependencyFailed(f"the webhook endpoint answered HTTP {response.status}")
