"""The local stack's TransactWriteItems on moto (remote_batch_local/moto_transactions.py): the same
results and errors as moto's own method, rolled back item by item instead of copying whole tables."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import Item
from moto.dynamodb.models.table import Table

from remote_batch_local import moto_transactions

Patcher = Callable[[bool], None]


@pytest.fixture
def use_patched(monkeypatch: pytest.MonkeyPatch) -> Patcher:
    """Selects moto's own method (False) or the item-level copy (True) for this test only."""

    def select(patched: bool) -> None:
        method = (
            moto_transactions.transact_write_items if patched else moto_transactions.MOTO_TRANSACT_WRITE_ITEMS
        )
        monkeypatch.setattr(DynamoDBBackend, "transact_write_items", method)

    return select


@pytest.fixture
def dynamodb(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A DynamoDB client on moto in this process, with tables ``jobs`` (pk, sk) and ``flat`` (id)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client = boto3.client("dynamodb", region_name="eu-west-1")
        client.create_table(
            TableName="jobs",
            KeySchema=[
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
        )
        client.create_table(
            TableName="flat",
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
            BillingMode="PAY_PER_REQUEST",
        )
        yield client


def _seed(client: Any) -> None:
    client.put_item(TableName="jobs", Item={"pk": {"S": "job#1"}, "sk": {"S": "meta"}, "n": {"N": "1"}})
    client.put_item(TableName="flat", Item={"id": {"S": "counter"}, "n": {"N": "10"}})


def _state(client: Any) -> dict[str, list[dict[str, Any]]]:
    return {name: sorted(client.scan(TableName=name)["Items"], key=repr) for name in ("jobs", "flat")}


def _items(second_condition: str) -> list[dict[str, Any]]:
    """Put of a new item, update of job#1, update of the counter under ``second_condition``."""
    return [
        {
            "Put": {
                "TableName": "jobs",
                "Item": {"pk": {"S": "job#2"}, "sk": {"S": "meta"}, "n": {"N": "2"}},
                "ConditionExpression": "attribute_not_exists(pk)",
            }
        },
        {
            "Update": {
                "TableName": "flat",
                "Key": {"id": {"S": "counter"}},
                "UpdateExpression": "SET n = n + :one",
                "ConditionExpression": second_condition,
                "ExpressionAttributeValues": {":one": {"N": "1"}, ":ten": {"N": "10"}},
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        },
        {
            "Update": {
                "TableName": "jobs",
                "Key": {"pk": {"S": "job#1"}, "sk": {"S": "meta"}},
                "UpdateExpression": "SET n = :five",
                "ExpressionAttributeValues": {":five": {"N": "5"}},
            }
        },
    ]


def test_successful_transaction_writes_every_item(dynamodb: Any, use_patched: Patcher) -> None:
    use_patched(True)
    _seed(dynamodb)
    dynamodb.transact_write_items(TransactItems=_items("n = :ten"))
    assert _state(dynamodb) == {
        "jobs": sorted(
            [
                {"pk": {"S": "job#1"}, "sk": {"S": "meta"}, "n": {"N": "5"}},
                {"pk": {"S": "job#2"}, "sk": {"S": "meta"}, "n": {"N": "2"}},
            ],
            key=repr,
        ),
        "flat": [{"id": {"S": "counter"}, "n": {"N": "11"}}],
    }


def _cancelled(client: Any, items: list[dict[str, Any]]) -> dict[str, Any]:
    with pytest.raises(ClientError) as raised:
        client.transact_write_items(TransactItems=items)
    error = raised.value.response
    return {"Error": error["Error"], "CancellationReasons": error.get("CancellationReasons")}


@pytest.mark.parametrize("patched", [False, True], ids=["moto", "item-rollback"])
def test_failed_condition_leaves_every_item_as_it_was(
    dynamodb: Any, use_patched: Patcher, patched: bool
) -> None:
    use_patched(patched)
    _seed(dynamodb)
    before = _state(dynamodb)
    failure = _cancelled(dynamodb, _items("n = :one"))
    assert _state(dynamodb) == before  # the put of job#2 and the update of job#1 are undone
    assert failure["Error"]["Code"] == "TransactionCanceledException"
    reasons = failure["CancellationReasons"]
    assert [reason["Code"] for reason in reasons] == ["None", "ConditionalCheckFailed", "None"]
    assert reasons[1]["Item"] == {"id": {"S": "counter"}, "n": {"N": "10"}}


def test_errors_are_moto_s_own(dynamodb: Any, use_patched: Patcher) -> None:
    """Same inputs on moto's method and on the copy: the same error bodies and the same end state."""
    _seed(dynamodb)
    cases = [
        _items("n = :one"),
        _items("attribute_not_exists(id)"),
        [_items("n = :ten")[0], _items("n = :ten")[0]],  # twice the same item: a validation error
        [*_items("n = :ten")[:2], {"Put": {"TableName": "missing", "Item": {"id": {"S": "x"}}}}],
    ]
    for items in cases:
        answers = []
        for patched in (False, True):
            use_patched(patched)
            answers.append((_cancelled(dynamodb, items), _state(dynamodb)))
        assert answers[0] == answers[1]


def test_copies_only_the_items_named(
    dynamodb: Any, use_patched: Patcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    """5,000 items in the table: each transaction deep-copies the items it names that exist, never a table."""
    _fill(dynamodb, 5000)
    _seed(dynamodb)
    assert dynamodb.describe_table(TableName="jobs")["Table"]["ItemCount"] == 5001
    copied: list[Item] = []
    real_copy = moto_transactions.copy_item
    tables_copied: list[str] = []

    def counting_copy(item: Item) -> Item:
        copied.append(item)
        return real_copy(item)

    def table_deepcopy(self: Table, memo: dict[int, Any]) -> Table:
        tables_copied.append(self.name)
        raise AssertionError("a whole table was copied")

    monkeypatch.setattr(moto_transactions, "copy_item", counting_copy)
    monkeypatch.setattr(Table, "__deepcopy__", table_deepcopy, raising=False)
    use_patched(True)
    _cancelled(dynamodb, _items("n = :one"))
    dynamodb.transact_write_items(TransactItems=_items("n = :ten"))
    # 1st: job#2 absent (nothing to copy), counter and job#1 copied; 2nd: job#2 is absent again.
    assert len(copied) == 4
    assert tables_copied == []
    use_patched(False)
    with pytest.raises(AssertionError, match="a whole table was copied"):
        dynamodb.transact_write_items(TransactItems=_items("n = :ten"))
    assert tables_copied == ["jobs"]  # moto's own method copies the 5,002-item table first


def _fill(client: Any, count: int) -> None:
    """``count`` items ``child#i`` in ``jobs``, by BatchWriteItem (25 a request)."""
    for start in range(0, count, 25):
        requests = [
            {"PutRequest": {"Item": {"pk": {"S": f"child#{index}"}, "sk": {"S": "meta"}, "n": {"N": "0"}}}}
            for index in range(start, min(start + 25, count))
        ]
        client.batch_write_item(RequestItems={"jobs": requests})
