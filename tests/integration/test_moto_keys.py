"""remote_batch_local/moto_keys.py: moto's serializer, remembering the keys it tries on a dict, answers as
moto's own does."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.core import serialize

from remote_batch_local import moto_keys

ITEM: dict[str, Any] = {
    "pk": {"S": "job#1"},
    "n": {"N": "1.5"},
    "b": {"B": b"\x00\x01"},
    "ss": {"SS": ["a", "b"]},
    "ns": {"NS": ["1", "2"]},
    "flag": {"BOOL": True},
    "none": {"NULL": True},
    "history": {"L": [{"M": {"status": {"S": "Running"}, "at": {"N": "17"}}}] * 3},
}


def _answers() -> list[Any]:
    """The answers of the DynamoDB, SQS and Batch calls the service makes, on a fresh moto."""
    with mock_aws():
        db = boto3.client("dynamodb", region_name="us-east-1")
        db.create_table(
            TableName="t",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        db.put_item(TableName="t", Item=ITEM)
        key = {"pk": {"S": "job#1"}}
        calls: list[Callable[[], Any]] = [
            lambda: db.describe_table(TableName="t"),
            lambda: db.get_item(TableName="t", Key=key),
            lambda: db.query(
                TableName="t",
                KeyConditionExpression="pk = :p",
                ExpressionAttributeValues={":p": {"S": "job#1"}},
            ),
            lambda: db.scan(TableName="t"),
            lambda: db.batch_get_item(RequestItems={"t": {"Keys": [key]}}),
            lambda: db.transact_get_items(TransactItems=[{"Get": {"TableName": "t", "Key": key}}]),
            lambda: db.update_item(
                TableName="t",
                Key=key,
                UpdateExpression="SET n = n + :one",
                ExpressionAttributeValues={":one": {"N": "1"}},
                ReturnValues="ALL_NEW",
            ),
            lambda: boto3.client("sqs", region_name="us-east-1").create_queue(QueueName="q"),
            lambda: boto3.client("batch", region_name="us-east-1").describe_job_queues(),
        ]
        answers = [call() for call in calls]
    for answer in answers:
        answer.pop("ResponseMetadata", None)
    return [_timeless(answer) for answer in answers]


def _timeless(value: Any) -> Any:
    """``value`` with each datetime (a table's creation time: each run's own) as one mark."""
    if isinstance(value, dict):
        return {key: _timeless(member) for key, member in value.items()}
    if isinstance(value, list):
        return [_timeless(member) for member in value]
    return "<datetime>" if isinstance(value, datetime) else value


def test_the_remembered_keys_give_every_answer_moto_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the answers of moto's own picker (the one tests/conftest.py replaced put back)
    assert serialize.AttributePicker.__call__ is moto_keys._picked
    monkeypatch.setattr(serialize.AttributePicker, "__call__", moto_keys._original_call)
    expected = _answers()
    monkeypatch.undo()

    # When the same calls are answered through the remembering picker, twice (the second from its memo)
    first, second = _answers(), _answers()

    # Then every answer is the same, item values, sets, binary and nested maps included
    assert first == expected and second == expected
    assert expected[1]["Item"] == ITEM
