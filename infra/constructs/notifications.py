"""The SNS topic that carries job notifications by email (one filtered subscription per account)."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from constructs import Construct

from infra import constants


class Notifications(Construct):
    """The email topic and the key that encrypts it.

    SMS goes straight to a phone number (no topic), so it has no resource here: the functions that
    notify get ``sns:Publish`` for it in ``functions.py``.

    Attributes
    ----------
    email_topic : sns.Topic
        Messages carry an ``accountId`` attribute; each account's email subscription filters on it.
    key : kms.Key
        Customer-managed, rotated yearly.
    """

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.key = self._build_key()
        self.email_topic = self._build_email_topic(self.key)

    def _build_key(self) -> kms.Key:
        return kms.Key(
            self,
            "TopicKey",
            description=f"{constants.SERVICE_NAME}: encrypts the job notification topic",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
        )

    def _build_email_topic(self, key: kms.Key) -> sns.Topic:
        return sns.Topic(
            self,
            "EmailTopic",
            display_name=f"{constants.SERVICE_NAME} job notifications",
            master_key=key,
            enforce_ssl=True,
        )
