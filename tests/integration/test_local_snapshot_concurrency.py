"""Snapshots on a real moto server: the tables' images agree with a Scan, and no lock is held while a
snapshot is written (so requests never wait for the disk); the stack's own requests in process."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSPreparedRequest
from botocore.compat import HTTPHeaders
from botocore.exceptions import ClientError
from moto.moto_api._internal.models import moto_api_backend

from functions.adapters.tables import ALL_TABLES
from remote_batch_local import files, state
from remote_batch_local.journal import Journal
from remote_batch_local.resources import AwsClients, MotoServer, local_settings, provision, table_name
from remote_batch_local.state import SnapshotScope, StateSnapshots
from remote_batch_local.transport import InProcessTransport


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
    moto_api_backend.reset()
    server = MotoServer(Journal(journal_dir))
    server.start(journal_dir.parent / "moto-credentials.json")
    clients = AwsClients()
    provision(clients, local_settings())
    return server, clients


TABLES = tuple(table_name(spec) for spec in ALL_TABLES)


def _snapshots(home: Path, server: MotoServer, clients: AwsClients) -> StateSnapshots:
    settings = local_settings()
    assert server.journaling is not None and server.moto_app is not None and server.access is not None
    scope = SnapshotScope(
        tables=TABLES,
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
        tables=server.access.tables,
    )


def _scanned(clients: AwsClients) -> dict[str, list[dict[str, Any]]]:
    dynamodb = clients.client("dynamodb")
    return {table: _sorted(dynamodb.scan(TableName=table)["Items"]) for table in TABLES}


def _sorted(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(items, key=repr)


def _writes(clients: AwsClients, round_: int) -> None:
    """One of each DynamoDB item write, on the accounts (key only) and ledger (key and sort key) tables."""
    settings = local_settings()
    dynamodb = clients.client("dynamodb")
    accounts, ledger = settings.accounts_table, settings.ledger_table
    dynamodb.put_item(
        TableName=accounts,
        Item={
            "accountId": {"S": f"a{round_}"},
            "creditBalance": {"N": "10"},
            "m": {"M": {"k": {"L": [{"S": "v"}]}}},
        },
    )
    dynamodb.update_item(
        TableName=accounts,
        Key={"accountId": {"S": f"a{round_}"}},
        UpdateExpression="ADD creditBalance :c",
        ExpressionAttributeValues={":c": {"N": "5"}},
    )
    dynamodb.batch_write_item(
        RequestItems={
            ledger: [
                {"PutRequest": {"Item": {"accountId": {"S": f"a{round_}"}, "entryId": {"S": f"e{n}"}}}}
                for n in range(3)
            ]
        }
    )
    dynamodb.transact_write_items(
        TransactItems=[
            {
                "Delete": {
                    "TableName": ledger,
                    "Key": {"accountId": {"S": f"a{round_}"}, "entryId": {"S": "e0"}},
                }
            },
            {
                "Update": {
                    "TableName": accounts,
                    "Key": {"accountId": {"S": f"a{round_}"}},
                    "UpdateExpression": "SET note = :n",
                    "ExpressionAttributeValues": {":n": {"S": f"round {round_}"}},
                }
            },
        ]
    )
    if round_:
        dynamodb.delete_item(TableName=accounts, Key={"accountId": {"S": f"a{round_ - 1}"}})
    # A write moto refuses changes nothing
    with pytest.raises(dynamodb.exceptions.ConditionalCheckFailedException):
        dynamodb.put_item(
            TableName=accounts,
            Item={"accountId": {"S": f"a{round_}"}},
            ConditionExpression="attribute_not_exists(accountId)",
        )


def test_the_tables_images_agree_with_a_scan_after_every_kind_of_write(
    tmp_path: Path, aws_environment: None
) -> None:
    server, clients = _fresh_moto(tmp_path / "state" / "journal")
    assert server.access is not None
    images = server.access.tables
    try:
        for round_ in range(3):  # the first copy reads the tables whole, the next ones what changed
            _writes(clients, round_)
            captured = images.capture(TABLES)
            assert {table: _sorted(items) for table, items in captured.items()} == _scanned(clients)
    finally:
        server.stop()


def test_a_snapshot_is_written_with_no_lock_held_and_restores_what_was_written(
    tmp_path: Path, aws_environment: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, clients = _fresh_moto(tmp_path / "state" / "journal")
    snapshots = _snapshots(tmp_path, server, clients)
    snapshots.restore()
    assert server.journaling is not None and server.access is not None
    server.journaling.enable()
    journal, table_lock = server.journaling.journal, server.access.lock_of("dynamodb")
    # Given a snapshot's file writer that notes which locks are held as it writes
    held: list[tuple[str, bool, bool]] = []
    write = files.write_bytes_atomic

    def noting(path: Path, data: bytes, *args: Any, **kwargs: Any) -> None:
        held.append((path.name, journal.held("dynamodb"), table_lock.locked()))
        write(path, data, *args, **kwargs)

    monkeypatch.setattr(state, "write_bytes_atomic", noting)

    # When tables are written, a snapshot taken, then more written and another taken
    _writes(clients, 0)
    assert snapshots.take()
    _writes(clients, 1)
    assert snapshots.take()
    expected = _scanned(clients)
    server.stop()

    # Then the table file was written twice, each time with neither the journal's table writes nor
    # moto's table lock held (requests went on meanwhile) ...
    assert [entry for entry in held if entry[0] == "dynamodb.json"] == [("dynamodb.json", False, False)] * 2
    # ... and a fresh moto restores exactly the tables as they were
    fresh, fresh_clients = _fresh_moto(tmp_path / "state" / "journal")
    report = _snapshots(tmp_path, fresh, fresh_clients).restore()
    try:
        assert _scanned(fresh_clients) == expected
        assert report.journal.applied == 0  # the last snapshot covered every write
    finally:
        fresh.stop()


def test_the_stacks_own_requests_reach_the_servers_middlewares_in_process(
    tmp_path: Path, aws_environment: None
) -> None:
    server, _ = _fresh_moto(tmp_path / "state" / "journal")
    assert server.journaling is not None and server.app is not None
    server.journaling.enable()
    journal = server.journaling.journal
    transport = InProcessTransport(server.endpoint, server.app)
    answered: list[str] = []

    def spy(request: Any, **kwargs: Any) -> Any:
        response = transport(request, **kwargs)
        answered.append(request.method if response is not None else "sent")
        return response

    def session(secret: str | None = None) -> boto3.Session:
        made = (
            boto3.Session(aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"], aws_secret_access_key=secret)
            if secret
            else boto3.Session()
        )
        made.events.register("before-send", spy)
        return made

    settings = local_settings()
    bucket = settings.zones[next(iter(settings.zones))].bucket
    try:
        dynamodb = session().client("dynamodb")
        s3 = session().client("s3")
        counted, last = server.write_counts().get("dynamodb", 0), journal.last_seq()

        # When the stack's clients write and read through the transport
        dynamodb.put_item(TableName=settings.accounts_table, Item={"accountId": {"S": "t"}})
        item = dynamodb.get_item(TableName=settings.accounts_table, Key={"accountId": {"S": "t"}})["Item"]
        s3.put_object(Bucket=bucket, Key="inputs/t", Body=b"\x00bytes\xff")
        body = s3.get_object(Bucket=bucket, Key="inputs/t")["Body"].read()

        # Then moto answered them in process, counted and journaled as over HTTP ...
        assert answered == ["POST", "POST", "PUT", "GET"]
        assert (item, body) == ({"accountId": {"S": "t"}}, b"\x00bytes\xff")
        assert server.write_counts()["dynamodb"] == counted + 1
        assert journal.last_seq() == last + 2  # the item and the object
        # ... and the IAM gate checked their signatures: a wrong secret is refused
        wrong = session("not-the-secret").client("dynamodb")
        with pytest.raises(ClientError):
            wrong.get_item(TableName=settings.accounts_table, Key={"accountId": {"S": "t"}})
        # Requests to another host are left to botocore
        assert (
            transport(AWSPreparedRequest("GET", "http://example.invalid/", HTTPHeaders(), b"", False)) is None
        )
    finally:
        server.stop()
