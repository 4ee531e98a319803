"""``remote_batch.webhooks.verify``: a receiver checks a notification's Standard Webhooks signature,
its age, and gets the body; the secret as the service showed it, in either form it has had."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks import Webhook

from remote_batch import webhooks

KEY = bytes([0xFB, 0xEF, 0xFF] * 10 + [1, 2])  # encodes to "+" and "/" (base64url: "-" and "_")
STANDARD = "whsec_" + base64.b64encode(KEY).decode()
# The earlier form of the same key: base64url without padding, as ``secrets.token_urlsafe`` made it.
EARLIER = "whsec_" + base64.urlsafe_b64encode(KEY).decode().rstrip("=")
BODY = json.dumps({"jobId": "job-1", "accountId": "dev", "event": "JobCompleted"}).encode()


def signed(at: datetime, body: bytes = BODY, key: bytes = KEY) -> dict[str, str]:
    return {
        "Webhook-Id": "msg_0123456789abcdef0123456789abcdef",
        "Webhook-Timestamp": str(int(at.timestamp())),
        "Webhook-Signature": Webhook(key).sign("msg_0123456789abcdef0123456789abcdef", at, body.decode()),
    }


def test_the_two_forms_of_a_secret_name_one_key() -> None:
    assert "-" in EARLIER and "_" in EARLIER  # the case a strict decoder refuses
    assert webhooks.standard_secret(EARLIER) == webhooks.standard_secret(STANDARD) == STANDARD


@pytest.mark.parametrize("secret", [STANDARD, EARLIER], ids=["standard", "earlier-form"])
def test_a_signed_notification_verifies_and_gives_its_body(secret: str) -> None:
    headers = signed(datetime.now(UTC))

    assert webhooks.verify(BODY, headers, secret) == json.loads(BODY)
    assert webhooks.verify(BODY.decode(), headers, secret) == json.loads(BODY)


@pytest.mark.parametrize(
    "tamper",
    [
        lambda h, b: (h, b.replace(b"dev", b"eve")),  # a changed body
        lambda h, b: ({k: v for k, v in h.items() if k != "Webhook-Id"}, b),  # a missing header
        lambda h, b: ({**h, "Webhook-Id": "msg_other"}, b),  # another delivery's id
        lambda h, b: (signed(datetime.now(UTC) - timedelta(minutes=6)), b),  # a replay, too old
        lambda h, b: (signed(datetime.now(UTC) + timedelta(minutes=6)), b),  # from the future
        lambda h, b: (signed(datetime.now(UTC), key=b"k" * 32), b),  # another sender
    ],
    ids=["body", "missing-header", "other-id", "too-old", "too-new", "other-key"],
)
def test_anything_else_is_refused(tamper) -> None:
    headers, body = tamper(signed(datetime.now(UTC)), BODY)

    with pytest.raises(webhooks.WebhookVerificationError):
        webhooks.verify(body, headers, STANDARD)


@pytest.mark.parametrize("secret", ["", "whsec_", "whsec_***", "not a secret"])
def test_a_secret_that_is_none_of_ours_is_refused(secret: str) -> None:
    with pytest.raises(webhooks.WebhookVerificationError):
        webhooks.verify(BODY, signed(datetime.now(UTC)), secret)
