"""The benchmarks' request counter (benchmarks/capacity.py RequestRecorder) on moto: every request of
every client counted by operation, its own reads not, and write units computed from the images."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import boto3
import pytest
from moto import mock_aws

from benchmarks.capacity import RequestRecorder

pytestmark = pytest.mark.usefixtures("aws")


@pytest.fixture
def aws() -> Iterator[None]:
    with mock_aws():
        client = boto3.client("dynamodb", region_name="us-east-1")
        client.create_table(
            TableName="t",
            BillingMode="PAY_PER_REQUEST",
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "open", "AttributeType": "S"},
                {"AttributeName": "at", "AttributeType": "S"},
            ],
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "unfinished",
                    "KeySchema": [
                        {"AttributeName": "open", "KeyType": "HASH"},
                        {"AttributeName": "at", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
        )
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="bench-bucket")
        yield


def test_requests_and_units_of_a_job_like_item() -> None:
    client = boto3.client("dynamodb", region_name="us-east-1")
    with RequestRecorder() as recorder:
        client.put_item(TableName="t", Item={"pk": {"S": "j"}, "open": {"S": "0"}, "at": {"S": "t1"}})
        # The index's sort key moves: a delete and a put in the index.
        client.update_item(
            TableName="t",
            Key={"pk": {"S": "j"}},
            UpdateExpression="SET #at = :at",
            ExpressionAttributeNames={"#at": "at"},
            ExpressionAttributeValues={":at": {"S": "t2"}},
        )
        with pytest.raises(client.exceptions.ConditionalCheckFailedException):
            client.put_item(
                TableName="t", Item={"pk": {"S": "j"}}, ConditionExpression="attribute_not_exists(pk)"
            )
        client.get_item(TableName="t", Key={"pk": {"S": "j"}})
        client.query(
            TableName="t",
            IndexName="unfinished",
            KeyConditionExpression="#o = :o",
            ExpressionAttributeNames={"#o": "open"},
            ExpressionAttributeValues={":o": {"S": "0"}},
        )
        boto3.client("s3", region_name="us-east-1").put_object(Bucket="bench-bucket", Key="k", Body=b"x")
    usage = recorder.usage
    assert dict(usage.requests) == {
        "dynamodb:PutItem": 2,
        "dynamodb:UpdateItem": 1,
        "dynamodb:GetItem": 1,
        "dynamodb:Query": 1,
        "s3:PutObject": 1,
    }  # the recorder's own DescribeTable and GetItem calls are not there
    assert dict(usage.write_units_by_target) == {"t": 3, "t/unfinished": 3}
    assert dict(usage.write_units) == {"PutItem": 3, "UpdateItem": 3}
    assert usage.failed_conditions == 1
    assert usage.total_read_units() == Decimal(1)  # two eventually consistent reads of < 4 KB


def test_after_the_block_nothing_is_counted() -> None:
    client = boto3.client("dynamodb", region_name="us-east-1")
    with RequestRecorder() as recorder:
        client.get_item(TableName="t", Key={"pk": {"S": "x"}}, ConsistentRead=True)
    client.get_item(TableName="t", Key={"pk": {"S": "x"}})
    assert recorder.usage.dynamodb_requests() == {"GetItem": 1}
    assert recorder.usage.total_read_units() == Decimal(1)
    assert recorder.reset().count("dynamodb") == 1
    assert recorder.usage.count("dynamodb") == 0
