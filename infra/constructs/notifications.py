"""Job notifications by email: one SNS topic per account (and address), made at run time by the api
function when the account sets its email, all under one name prefix; this construct holds their KMS
key and the names IAM scopes the grants to.

Why a topic per account rather than one shared topic with a filter policy per subscription: SNS
allows 200 filter policies per topic by default, so a shared topic stops at about 200 accounts; the
default quota of 100,000 topics per AWS account holds 10,000 accounts with no increase (the full
argument is in ``functions/adapters/sns.py``).
"""

from __future__ import annotations

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from infra import constants


def email_topic_name_prefix(stage: str) -> str:
    """``remote-batch-<stage>-email-``: every account's email topic name starts with it (the stage has
    no hyphen, so one stage's prefix never matches another stage's topics)."""
    return f"{constants.SERVICE_NAME}-{stage}-email-"


class Notifications(Construct):
    """The key that encrypts the accounts' email topics, and where those topics are named.

    SMS goes straight to a phone number (no topic), so it has no resource here: the functions that
    notify get ``sns:Publish`` for it in ``functions.py``. The topics themselves are not CloudFormation
    resources: ``cdk destroy`` leaves them (docs/deploy.md says how to remove them).

    Parameters
    ----------
    stage : str
        The deployment stage; part of the topic names.

    Attributes
    ----------
    key : kms.Key
        Customer-managed, rotated yearly; every email topic is created with it (``KmsMasterKeyId``).
    topic_name_prefix : str
        ``remote-batch-<stage>-email-``.
    topic_arn_prefix : str
        ``arn:<partition>:sns:<region>:<account>:remote-batch-<stage>-email-`` (the functions'
        ``REMOTE_BATCH_EMAIL_TOPIC_ARN_PREFIX``).
    topic_arn_pattern : str
        ``topic_arn_prefix`` followed by ``*``: the resource of every email topic grant.
    """

    def __init__(self, scope: Construct, construct_id: str, *, stage: str) -> None:
        super().__init__(scope, construct_id)
        self.key = self._build_key()
        self.topic_name_prefix = email_topic_name_prefix(stage)
        stack = Stack.of(self)
        self.topic_arn_prefix = stack.format_arn(
            service="sns", resource=self.topic_name_prefix, arn_format=ArnFormat.NO_RESOURCE_NAME
        )
        self.topic_arn_pattern = f"{self.topic_arn_prefix}*"

    def _build_key(self) -> kms.Key:
        return kms.Key(
            self,
            "TopicKey",
            description=f"{constants.SERVICE_NAME}: encrypts the accounts' job notification topics",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.RETAIN,
        )

    def grant_manage_topics(self, role: iam.IRole) -> None:
        """Create an account's topic (encrypted, TLS-only policy), subscribe its address, read whether
        it is confirmed, bring an old topic's attributes up to date, delete a replaced address's topic.

        Scoped to the prefix; no ``sns:Unsubscribe``/``sns:GetSubscriptionAttributes``, which support
        no resource type (Service Authorization Reference, Amazon SNS): deleting the topic removes its
        subscription, pending or not, and ``ListSubscriptionsByTopic`` shows whether it is confirmed.
        """
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=[
                    "sns:CreateTopic",
                    "sns:SetTopicAttributes",
                    "sns:Subscribe",
                    "sns:ListSubscriptionsByTopic",
                    "sns:DeleteTopic",
                ],
                resources=[self.topic_arn_pattern],
            )
        )

    def grant_publish(self, role: iam.IRole) -> None:
        """Publish to the accounts' topics: ``sns:Publish`` on the prefix, and the key's
        ``kms:GenerateDataKey*``/``kms:Decrypt`` that SNS uses on the publisher's behalf for an
        encrypted topic (Amazon SNS Developer Guide, "Encryption at rest")."""
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["sns:Publish"], resources=[self.topic_arn_pattern])
        )
        self.key.grant(role, "kms:GenerateDataKey*", "kms:Decrypt")
