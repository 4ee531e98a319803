"""The journal on a real moto server: what was answered is replayed into a fresh moto identically."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from moto.moto_api._internal.models import moto_api_backend

from remote_batch_local.journal import Journal, replay
from remote_batch_local.resources import AwsClients, MotoServer, local_settings, provision
from remote_batch_local.state import SnapshotScope, StateSnapshots

PART = 5 * 1024 * 1024  # S3's smallest part but the last


@pytest.fixture
def aws_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """``MotoServer.start`` points this process's AWS variables at moto: restore them afterwards."""
    for name in ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.setenv(name, "unset")
    for name in ("AWS_REGION", "MOTO_ACCOUNT_ID"):
        monkeypatch.setenv(name, "unset")
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)


def _fresh_moto(journal_dir: Path) -> tuple[MotoServer, AwsClients]:
    """A moto server of the stack's own on empty backends (the servers of one test share moto's
    backends in this process: they are reset before the stack makes its IAM user)."""
    moto_api_backend.reset()
    server = MotoServer(Journal(journal_dir))
    server.start(journal_dir.parent / "moto-credentials.json")
    clients = AwsClients()
    provision(clients, local_settings())
    return server, clients


def _state(clients: AwsClients, topic_arn: str, table: str, bucket: str) -> dict[str, Any]:
    s3 = clients.client("s3")
    sns = clients.client("sns")
    items = clients.client("dynamodb").scan(TableName=table)["Items"]
    subscriptions = sns.list_subscriptions_by_topic(TopicArn=topic_arn)["Subscriptions"]
    return {
        "items": sorted(items, key=lambda item: item["accountId"]["S"]),
        "objects": {
            o["Key"]: (o["ETag"], s3.get_object(Bucket=bucket, Key=o["Key"])["Body"].read())
            for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])
        },
        "subscriptions": [
            (
                s["SubscriptionArn"],
                s["Endpoint"],
                sns.get_subscription_attributes(SubscriptionArn=s["SubscriptionArn"])["Attributes"].get(
                    "FilterPolicy"
                ),
            )
            for s in subscriptions
        ],
    }


def test_answered_writes_replay_into_a_fresh_moto_with_the_same_ids(
    tmp_path: Path, aws_environment: None
) -> None:
    settings = local_settings()
    table = settings.accounts_table
    bucket = settings.zones[next(iter(settings.zones))].bucket
    server, clients = _fresh_moto(tmp_path)
    assert server.journaling is not None
    server.journaling.enable()
    dynamodb, s3, sns = clients.client("dynamodb"), clients.client("s3"), clients.client("sns")
    # An account's email topic (made on demand under the deployment's prefix, so journaled too)
    topic_name = settings.email_topic_arn_prefix.rsplit(":", 1)[1] + "a"

    # Given writes moto answered: items with an order-dependent condition and additions ...
    dynamodb.put_item(TableName=table, Item={"accountId": {"S": "a"}, "creditBalance": {"N": "10"}})
    for _ in range(2):
        dynamodb.update_item(
            TableName=table,
            Key={"accountId": {"S": "a"}},
            UpdateExpression="ADD creditBalance :c",
            ExpressionAttributeValues={":c": {"N": "5"}},
        )
    dynamodb.put_item(
        TableName=table,
        Item={"accountId": {"S": "b"}, "creditBalance": {"N": "1"}},
        ConditionExpression="attribute_not_exists(accountId)",
    )
    with pytest.raises(dynamodb.exceptions.ConditionalCheckFailedException):
        dynamodb.put_item(
            TableName=table,
            Item={"accountId": {"S": "b"}, "creditBalance": {"N": "999"}},
            ConditionExpression="attribute_not_exists(accountId)",
        )
    # ... a topic, and a subscription whose (random) ARN an item stores, with a filter policy ...
    topic = sns.create_topic(Name=topic_name)["TopicArn"]
    arn = sns.subscribe(
        TopicArn=topic, Protocol="email", Endpoint="a@example.com", ReturnSubscriptionArn=True
    )["SubscriptionArn"]
    sns.set_subscription_attributes(
        SubscriptionArn=arn, AttributeName="FilterPolicy", AttributeValue='{"accountId": ["a"]}'
    )
    dynamodb.update_item(
        TableName=table,
        Key={"accountId": {"S": "a"}},
        UpdateExpression="SET emailSubscription = :arn",
        ExpressionAttributeValues={":arn": {"S": arn}},
    )
    sns.publish(TopicArn=topic, Message="not journaled")
    # ... objects written, one deleted, and a multipart upload (random upload id)
    s3.put_object(Bucket=bucket, Key="inputs/j1/code.py", Body=b"print(1)")
    s3.put_object(Bucket=bucket, Key="inputs/j1/gone", Body=b"x")
    s3.delete_object(Bucket=bucket, Key="inputs/j1/gone")
    upload = s3.create_multipart_upload(Bucket=bucket, Key="outputs/j1/big.bin")["UploadId"]
    parts = [
        {
            "PartNumber": n,
            "ETag": s3.upload_part(
                Bucket=bucket, Key="outputs/j1/big.bin", UploadId=upload, PartNumber=n, Body=body
            )["ETag"],
        }
        for n, body in ((1, b"a" * PART), (2, b"b" * 10))
    ]
    s3.complete_multipart_upload(
        Bucket=bucket, Key="outputs/j1/big.bin", UploadId=upload, MultipartUpload={"Parts": parts}
    )
    before = _state(clients, topic, table, bucket)
    server.stop()

    # When a fresh moto is provisioned and the journal replayed on it (nothing snapshotted)
    journal = Journal(tmp_path)
    records = journal.records()
    journal.close()
    fresh, fresh_clients = _fresh_moto(tmp_path / "unused")
    assert fresh.moto_app is not None
    report = replay(records, fresh.moto_app, {})

    # Then every answered write, and only those, was journaled and applied, with the same ids
    assert [r["service"] for r in records] == ["dynamodb"] * 4 + ["sns"] * 3 + ["dynamodb"] + ["s3"] * 7
    assert (report.applied, report.skipped, report.refused) == (15, 0, 0)
    after = _state(fresh_clients, topic, table, bucket)
    assert after == before
    assert after["items"][0]["creditBalance"] == {"N": "20"}
    assert after["items"][0]["emailSubscription"] == {"S": arn}
    assert after["subscriptions"][0][0] == arn
    assert set(after["objects"]) == {"inputs/j1/code.py", "outputs/j1/big.bin"}

    # And records a snapshot covers are skipped
    fresh.stop()
    fresh, fresh_clients = _fresh_moto(tmp_path / "unused-again")
    assert fresh.moto_app is not None
    covered = replay(records, fresh.moto_app, {"dynamodb": 8, "sns": 7, "s3": 0})
    assert (covered.applied, covered.skipped) == (7, 8)
    fresh.stop()


def _snapshots(home: Path, server: MotoServer, clients: AwsClients) -> StateSnapshots:
    settings = local_settings()
    assert server.journaling is not None and server.moto_app is not None
    scope = SnapshotScope(
        tables=(settings.accounts_table,),
        buckets={zone.bucket: zone.region for zone in settings.zones.values()},
        log_groups=(),
        topic_arn_prefix=settings.email_topic_arn_prefix,
        home_region=settings.home_region,
    )
    return StateSnapshots(
        home / "state",
        home / "s3",
        scope,
        clients,
        server.write_counts,
        journal=server.journaling.journal,
        moto_app=server.moto_app,
    )


def _add(clients: AwsClients, credits: int) -> None:
    clients.client("dynamodb").update_item(
        TableName=local_settings().accounts_table,
        Key={"accountId": {"S": "a"}},
        UpdateExpression="ADD creditBalance :c",
        ExpressionAttributeValues={":c": {"N": str(credits)}},
    )


def test_a_snapshot_and_the_journal_after_it_restore_each_write_exactly_once(
    tmp_path: Path, aws_environment: None
) -> None:
    settings = local_settings()
    bucket = settings.zones[next(iter(settings.zones))].bucket
    server, clients = _fresh_moto(tmp_path / "state" / "journal")
    snapshots = _snapshots(tmp_path, server, clients)
    snapshots.restore()
    assert server.journaling is not None
    server.journaling.enable()

    # Given additions before a snapshot, one after it, and an upload a crash leaves unfinished
    _add(clients, 10)
    _add(clients, 5)
    clients.client("s3").put_object(Bucket=bucket, Key="inputs/a", Body=b"before")
    covered_segments = sorted((tmp_path / "state" / "journal").glob("*.jsonl"))
    snapshots.take()
    assert covered_segments and not any(path.exists() for path in covered_segments)
    _add(clients, 7)
    clients.client("s3").put_object(Bucket=bucket, Key="inputs/a", Body=b"after")
    clients.client("s3").create_multipart_upload(Bucket=bucket, Key="outputs/cut-short")
    server.stop()  # no snapshot at the end: a crash

    # When a fresh moto restores the snapshot and replays the journal after it
    fresh, fresh_clients = _fresh_moto(tmp_path / "state" / "journal")
    report = _snapshots(tmp_path, fresh, fresh_clients).restore()

    # Then every addition counts once, the last object write wins, the upload is gone
    # (and the journal segment the snapshot covered had been deleted, above)
    item = fresh_clients.client("dynamodb").get_item(
        TableName=settings.accounts_table, Key={"accountId": {"S": "a"}}
    )["Item"]
    assert item["creditBalance"] == {"N": "22"}
    assert fresh_clients.client("s3").get_object(Bucket=bucket, Key="inputs/a")["Body"].read() == b"after"
    assert not fresh_clients.client("s3").list_multipart_uploads(Bucket=bucket).get("Uploads")
    assert (report.journal.applied, report.journal.refused) == (3, 0)
    fresh.stop()
