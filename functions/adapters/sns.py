"""SNS: email through the topic (filtered per account), SMS straight to a phone (``Notifier``)."""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from functions.domain.errors import DependencyFailed
from functions.ports import OutgoingNotification

SMS_MAX_CHARS = 140
EMAIL_SUBJECT_MAX_CHARS = 100


class SnsNotifier:
    """``Notifier`` on SNS.

    Email is published to one topic with an ``accountId`` message attribute; each account's email
    subscription has a filter policy on it, so only that account's address receives it. SMS is a
    direct publish to the E.164 phone, ``Transactional``, at most 140 characters.
    """

    def __init__(self, client: Any, email_topic_arn: str) -> None:
        self._sns = client
        self._topic = email_topic_arn

    def send(self, notification: OutgoingNotification) -> None:
        """Publish one notification; ``DependencyFailed`` when SNS refuses."""
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
                    Subject=notification.subject[:EMAIL_SUBJECT_MAX_CHARS],
                    Message=notification.message,
                    MessageAttributes={
                        "accountId": {"DataType": "String", "StringValue": notification.account_id},
                        "event": {"DataType": "String", "StringValue": notification.event},
                    },
                )
        except ClientError as exc:
            raise DependencyFailed(f"SNS refused a {notification.method} notification.") from exc
