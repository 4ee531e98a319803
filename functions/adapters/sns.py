"""SNS: email through one topic per account, SMS straight to a phone (``Notifier``, ``EmailSubscriptions``).

Why one topic per account (and not one topic with a filter policy per account's subscription): SNS
allows 200 filter policies per topic by default (and 10,000 per AWS account), so a shared topic
stops taking email subscriptions at about 200 accounts. A topic per account needs no filter policy
at all; the default quotas allow 100,000 standard topics per AWS account and 12,500,000
subscriptions per topic (AWS General Reference, "Amazon SNS endpoints and quotas"), so 10,000
accounts use a tenth of the topic quota with no increase. Publish on a topic is billed per request
as on the shared topic; CreateTopic/DeleteTopic happen only when an account sets or changes its email.

Each topic is named deterministically, ``<prefix><sha256(accountId, email)[:40]>`` under the
deployment's prefix (``remote-batch-<stage>-email-``), so:

- IAM scopes every topic action to ``arn:…:sns:<region>:<account>:<prefix>*``;
- setting the same email again re-uses the topic (CreateTopic is idempotent for a name);
- a replaced or cleared email deletes its topic, which also removes a subscription still pending
  confirmation (SNS refuses to unsubscribe one): the old address can never confirm its way into the
  new address's mail;
- the name reveals neither the account nor the address.

Publish failures are sorted into refused for good (``DeliveryRefused``: never retried) and
transient (``DependencyFailed``: retried a bounded number of times by ``functions.logic.notifying``).
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from functions.adapters.errors import Absent, translate_errors
from functions.adapters.webhook import WebhookSender
from functions.domain.errors import DeliveryRefused, DependencyFailed
from functions.ports import OutgoingNotification

if TYPE_CHECKING:  # the stubs are a dev dependency; the Lambda runtime has no need of them
    from mypy_boto3_sns import SNSClient

SMS_MAX_CHARS = 140
EMAIL_SUBJECT_MAX_CHARS = 100
TOPIC_DIGEST_CHARS = 40
# SNS Publish error codes that mean the same request can never succeed (SNS API Reference, Publish
# "Errors"): a malformed message or phone, a disabled endpoint, a topic or endpoint that no longer
# exists, a phone number that opted out of SMS from this AWS account.
PERMANENT_CODES = frozenset(
    {
        "InvalidParameter",
        "InvalidParameterValue",
        "ParameterValueInvalid",
        "EndpointDisabled",
        "PlatformApplicationDisabled",
        "NotFound",
        "OptedOut",
        "OptedOutException",
        "ValidationException",
    }
)

SUBSCRIBE_FAILED = "SNS did not accept the email subscription; try again."
REMOVE_FAILED = "SNS did not remove the old email topic; try again."
STATUS_FAILED = "SNS could not tell the email subscription's status."


def email_subject(text: str) -> str:
    """An SNS email Subject: printable ASCII, no line breaks, at most 100 characters (SNS Publish
    refuses anything else); other characters become ``?``."""
    cleaned = "".join(c if 32 <= ord(c) < 127 else "?" for c in text)
    return cleaned[:EMAIL_SUBJECT_MAX_CHARS] or "remote-batch notification"


def email_topic_arn(arn_prefix: str, account_id: str, email: str) -> str:
    """The ARN of the topic that carries ``account_id``'s mail to ``email``.

    ``arn_prefix`` is ``arn:aws:sns:<region>:<account>:<name prefix>``; the name adds 40 hex
    characters of SHA-256 over the account id and the address (topic names allow 256 characters).
    """
    digest = hashlib.sha256(f"{account_id}\n{email}".encode()).hexdigest()[:TOPIC_DIGEST_CHARS]
    return f"{arn_prefix}{digest}"


def _topic_name(topic_arn: str) -> str:
    return topic_arn.rsplit(":", 1)[1]


class SnsNotifier:
    """``Notifier`` on SNS (and HTTPS for webhooks).

    Email is published to the account's own topic (``email_topic_arn``), whose one subscription is
    the account's address. SMS is a direct publish to the E.164 phone, ``Transactional``, at most
    140 characters. Webhook is a signed HTTPS POST (``functions.adapters.webhook``).

    Parameters
    ----------
    client : SNSClient
    email_topic_arn_prefix : str
        ``arn:aws:sns:<region>:<account>:remote-batch-<stage>-email-``.
    webhooks : WebhookSender | None
        The webhook sender (default: one that posts to public addresses only).
    """

    def __init__(
        self, client: SNSClient, email_topic_arn_prefix: str, webhooks: WebhookSender | None = None
    ) -> None:
        self._sns = client
        self._prefix = email_topic_arn_prefix
        self._webhooks = webhooks or WebhookSender()

    def send(self, notification: OutgoingNotification) -> None:
        """Publish one notification.

        Raises
        ------
        DeliveryRefused
            SNS (or the webhook endpoint) refused it for good: see ``PERMANENT_CODES``.
        DependencyFailed
            A failure that may pass (throttling, a network error, an internal error).
        """
        if notification.method == "Webhook":
            if not notification.secret:
                raise DeliveryRefused("the account's webhook has no signing secret")
            self._webhooks.send(notification, notification.secret)
            return
        with translate_errors(
            "sns",
            "Publish",
            failed=f"SNS did not take the {notification.method} notification ({{code}}).",
            unreachable=f"SNS could not be reached for a {notification.method} notification.",
            permanent=PERMANENT_CODES,
            refused=f"SNS refused the {notification.method} notification ({{code}}).",
        ):
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
                    TopicArn=email_topic_arn(self._prefix, notification.account_id, notification.to),
                    Subject=email_subject(notification.subject),
                    Message=notification.message,
                )


class SnsEmailSubscriptions:
    """``EmailSubscriptions``: the account's email topic and its one email subscription.

    Parameters
    ----------
    client : SNSClient
    email_topic_arn_prefix : str
        As for ``SnsNotifier``.
    kms_key_id : str
        The KMS key (ARN or alias) every topic is encrypted with; "" for none (the local stack).
    """

    def __init__(self, client: SNSClient, email_topic_arn_prefix: str, kms_key_id: str = "") -> None:
        self._sns = client
        self._prefix = email_topic_arn_prefix
        self._key = kms_key_id

    def topic_arn(self, account_id: str, email: str) -> str:
        """The account's topic for ``email`` (whether or not it exists yet)."""
        return email_topic_arn(self._prefix, account_id, email)

    def _attributes(self, topic_arn: str) -> dict[str, str]:
        # Publishing without TLS is refused, as the CDK topics' enforceSSL policy does.
        policy = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "TlsOnly",
                    "Effect": "Deny",
                    "Principal": "*",
                    "Action": "sns:Publish",
                    "Resource": topic_arn,
                    "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                }
            ],
        }
        attributes = {"Policy": json.dumps(policy, separators=(",", ":"), sort_keys=True)}
        if self._key:
            attributes["KmsMasterKeyId"] = self._key
        return attributes

    def _create_topic(self, topic_arn: str) -> None:
        attributes = self._attributes(topic_arn)
        try:
            # InvalidParameter: the topic exists with other attributes (a key or policy changed since).
            with translate_errors(
                "sns", "CreateTopic", failed=SUBSCRIBE_FAILED, permanent={"InvalidParameter"}
            ):
                created = self._sns.create_topic(Name=_topic_name(topic_arn), Attributes=attributes)
        except DeliveryRefused:
            # Bring the existing topic up to date.
            with translate_errors("sns", "SetTopicAttributes", failed=SUBSCRIBE_FAILED):
                for name, value in attributes.items():
                    self._sns.set_topic_attributes(
                        TopicArn=topic_arn, AttributeName=name, AttributeValue=value
                    )
            return
        if created["TopicArn"] != topic_arn:
            raise DependencyFailed(f"SNS made topic {created['TopicArn']}, expected {topic_arn}")

    def subscribe(self, account_id: str, email: str) -> str:
        """Create the account's topic for ``email`` (CreateTopic, idempotent; SetTopicAttributes when
        it exists with other attributes) and subscribe the address to it.

        Returns the subscription ARN (pending until its owner follows the confirmation link).
        Raises ``DependencyFailed`` when SNS refuses either step.
        """
        topic_arn = self.topic_arn(account_id, email)
        self._create_topic(topic_arn)
        with translate_errors("sns", "Subscribe", failed=SUBSCRIBE_FAILED):
            response = self._sns.subscribe(
                TopicArn=topic_arn, Protocol="email", Endpoint=email, ReturnSubscriptionArn=True
            )
        return response["SubscriptionArn"]

    def remove(self, account_id: str, email: str) -> None:
        """Delete the account's topic for ``email`` with its subscription, pending or confirmed
        (DeleteTopic is idempotent: a topic already gone, ``NotFound``, is fine). Raises
        ``DependencyFailed``."""
        try:
            with translate_errors("sns", "DeleteTopic", failed=REMOVE_FAILED, absent_ok=True):
                self._sns.delete_topic(TopicArn=self.topic_arn(account_id, email))
        except Absent:
            return

    def status(self, account_id: str, email: str) -> str:
        """``confirmed`` once the topic has a confirmed subscription for ``email``, else ``pending``
        (also when SNS cannot say: the topic is missing, or the call fails).

        Read with ListSubscriptionsByTopic on the account's own topic (a pending subscription is
        listed with the ARN ``PendingConfirmation``), so IAM scopes it to the topic prefix.
        """
        try:
            with translate_errors("sns", "ListSubscriptionsByTopic", failed=STATUS_FAILED):
                paginator = self._sns.get_paginator("list_subscriptions_by_topic")
                for page in paginator.paginate(TopicArn=self.topic_arn(account_id, email)):
                    for subscription in page.get("Subscriptions", []):
                        arn = subscription.get("SubscriptionArn", "")
                        if subscription.get("Endpoint") == email and arn.startswith("arn:"):
                            return "confirmed"
        except DependencyFailed:
            return "pending"
        return "pending"
