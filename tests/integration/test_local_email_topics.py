"""The local stack's snapshots keep every account's email topic, and a snapshot taken when email
went through one shared topic (a filter policy per account) comes back as per-account topics."""

from __future__ import annotations

import json
from typing import Any

import boto3
from moto import mock_aws

from functions.adapters.sns import SnsEmailSubscriptions, email_topic_arn
from remote_batch_local.journal import Journal
from remote_batch_local.state import SnapshotScope, StateSnapshots

PREFIX = "arn:aws:sns:us-east-1:123456789012:remote-batch-local-email-"


class Clients:
    def client(self, service: str, region: str) -> Any:
        make: Any = boto3.client  # typed per service literal; the name is dynamic here
        return make(service, region_name=region)


def snapshots(tmp_path) -> StateSnapshots:
    scope = SnapshotScope(
        tables=(), buckets={}, log_groups=(), topic_arn_prefix=PREFIX, home_region="us-east-1"
    )
    return StateSnapshots(
        tmp_path / "state",
        tmp_path / "s3",
        scope,
        Clients(),  # type: ignore[arg-type]
        lambda: {"sns": 1},
        journal=Journal(tmp_path / "state" / "journal"),
        moto_app=_no_replay,
    )


def _no_replay(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("these snapshots have no journal records to replay")


def subscriptions_of(topic_arn: str) -> list[tuple[str, str]]:
    sns = boto3.client("sns", region_name="us-east-1")
    return [
        (s["Protocol"], s["Endpoint"])
        for s in sns.list_subscriptions_by_topic(TopicArn=topic_arn)["Subscriptions"]
    ]


def test_email_topics_survive_a_restart(tmp_path):
    with mock_aws():
        SnsEmailSubscriptions(boto3.client("sns", region_name="us-east-1"), PREFIX).subscribe(
            "ana", "ana@example.com"
        )
        snapshots(tmp_path).take()
    with mock_aws():  # a fresh moto
        report = snapshots(tmp_path).restore()
        assert report.subscriptions == 1
        assert subscriptions_of(email_topic_arn(PREFIX, "ana", "ana@example.com")) == [
            ("email", "ana@example.com")
        ]


def test_a_shared_topic_snapshot_comes_back_as_the_accounts_own_topic(tmp_path):
    state = tmp_path / "state"
    state.mkdir()
    (state / "snapshot.json").write_text(
        json.dumps({"version": 1, "takenAt": "x", "takenAtMs": 1_796_000_000_000})
    )
    old = {
        "arn": "arn:aws:sns:us-east-1:123456789012:remote-batch-local-email:1234",
        "protocol": "email",
        "endpoint": "dev@example.com",
        "attributes": {"FilterPolicy": json.dumps({"accountId": ["dev"]})},
    }
    (state / "sns.json").write_text(json.dumps({"subscriptions": [old]}))
    with mock_aws():
        assert snapshots(tmp_path).restore().subscriptions == 1
        topic = email_topic_arn(PREFIX, "dev", "dev@example.com")
        assert subscriptions_of(topic) == [("email", "dev@example.com")]
        sns = boto3.client("sns", region_name="us-east-1")
        (listed,) = sns.list_subscriptions_by_topic(TopicArn=topic)["Subscriptions"]
        attributes = sns.get_subscription_attributes(SubscriptionArn=listed["SubscriptionArn"])["Attributes"]
        assert "FilterPolicy" not in attributes
