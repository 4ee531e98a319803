"""SNS: email through the topic (filtered per account), SMS straight to a phone (``Notifier``)."""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from functions.adapters.webhook import WebhookSender
from functions.domain.errors import DependencyFailed
from functions.ports import OutgoingNotification

SMS_MAX_CHARS = 140
EMAIL_SUBJECT_MAX_CHARS = 100


def email_subject(text: str) -> str:
    """An SNS email Subject: printable ASCII, no line breaks, at most 100 characters (SNS Publish
    refuses anything else); other characters become ``?``."""
    cleaned = "".join(c if 32 <= ord(c) < 127 else "?" for c in text)
    return cleaned[:EMAIL_SUBJECT_MAX_CHARS] or "remote-batch notification"


class SnsNotifier:
    """``Notifier`` on SNS (and HTTPS for webhooks).

    Email is published to one topic with an ``accountId`` message attribute; each account's email
    subscription has a filter policy on it, so only that account's address receives it. SMS is a
    direct publish to the E.164 phone, ``Transactional``, at most 140 characters. Webhook is a
    signed HTTPS POST (``functions.adapters.webhook``).
    """

    def __init__(self, client: Any, email_topic_arn: str, webhooks: WebhookSender | None = None) -> None:
        self._sns = client
        self._topic = email_topic_arn
        self._webhooks = webhooks or WebhookSender()

    def send(self, notification: OutgoingNotification) -> None:
        """Publish one notification; ``DependencyFailed`` when SNS (or the webhook endpoint) refuses."""
        if notification.method == "Webhook":
            if not notification.secret:
                raise DependencyFailed("the account's webhook has no signing secret")
            self._webhooks.send(notification, notification.secret)
            return
        try:
            if notification.method == "SMS":
                self._sns.publish(
                    PhoneNumber=notification.to,
                    Message=notification.message[:SMS_MAX_CHARS],
                    MessageAttributes={
                        "AWS.SNS.SMS.SMSType": {"DataType": "String", "StringValue": "Transactional"},
                    },
                )
            else:
                self._sns.publish(
                    TopicArn=self._topic,
                    Subject=email_subject(notification.subject),
                    Message=notification.message,
                    MessageAttributes={
                        "accountId": {"DataType": "String", "StringValue": notification.account_id},
                        "event": {"DataType": "String", "StringValue": notification.event},
                    },
                )
        except ClientError as exc:
            raise DependencyFailed(f"SNS refused a {notification.method} notification.") from exc


class SnsEmailSubscriptions:
    """``EmailSubscriptions`` on the email topic: one subscription per account, whose filter policy
    matches the ``accountId`` message attribute ``SnsNotifier`` sets on every email it publishes."""

    def __init__(self, client: Any, email_topic_arn: str) -> None:
        self._sns = client
        self._topic = email_topic_arn

    def subscribe(self, account_id: str, email: str) -> str:
        """Subscribe ``email``; returns the subscription ARN (pending until confirmed)."""
        try:
            response = self._sns.subscribe(
                TopicArn=self._topic,
                Protocol="email",
                Endpoint=email,
                Attributes={"FilterPolicy": json.dumps({"accountId": [account_id]})},
                ReturnSubscriptionArn=True,
            )
        except ClientError as exc:
            raise DependencyFailed("SNS did not accept the email subscription; try again.") from exc
        arn: str = response["SubscriptionArn"]
        return arn

    def unsubscribe(self, subscription_arn: str) -> None:
        """Remove a subscription; SNS refuses for a pending one, which then simply expires."""
        try:
            self._sns.unsubscribe(SubscriptionArn=subscription_arn)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code not in ("NotFound", "InvalidParameter"):
                raise DependencyFailed("SNS did not remove the old email subscription; try again.") from exc

    def status(self, subscription_arn: str) -> str:
        """``pending`` or ``confirmed``, from the subscription's ``PendingConfirmation`` attribute."""
        try:
            attributes = self._sns.get_subscription_attributes(SubscriptionArn=subscription_arn)["Attributes"]
        except ClientError:
            return "pending"
        return "pending" if attributes.get("PendingConfirmation", "false") == "true" else "confirmed"
