"""The benchmarks' pure arithmetic: DynamoDB item sizes and request units (benchmarks/capacity.py) and
the control-plane cost of a job from the price table (benchmarks/costing.py)."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from benchmarks.capacity import (
    IndexSchema,
    TableSchema,
    Usage,
    index_write_units,
    item_size,
    read_units,
    value_size,
    write_units,
)
from benchmarks.costing import (
    PRICES_FILE,
    ControlPlaneUsage,
    LambdaInvocation,
    Prices,
    job_cost,
    load_prices,
)


@pytest.mark.parametrize(
    ("value", "size"),
    [
        ({"S": "abc"}, 3),
        ({"S": "é"}, 2),  # UTF-8 bytes
        ({"N": "123.45"}, 4),  # 5 significant digits: 3 bytes + 1
        ({"N": "1000"}, 2),  # trailing zeros trimmed
        ({"N": "-0.0012"}, 2),
        ({"B": b"\x00\x01\x02"}, 3),
        ({"BOOL": True}, 1),
        ({"NULL": True}, 1),
        ({"SS": ["ab", "c"]}, 3),
        ({"L": [{"S": "ab"}, {"N": "7"}]}, 3 + (2 + 1) + (2 + 1)),
        ({"M": {"k": {"S": "v"}}}, 3 + (1 + 1 + 1)),
        ({"L": []}, 3),
    ],
)
def test_value_sizes_follow_the_developer_guide(value: dict[str, object], size: int) -> None:
    assert value_size(value) == size


def test_an_item_is_its_names_and_values() -> None:
    assert item_size({"jobId": {"S": "j-1"}, "n": {"N": "12"}}) == 5 + 3 + 1 + 2
    assert item_size(None) == 0
    with pytest.raises(ValueError, match="unknown DynamoDB type"):
        value_size({"X": 1})


def test_units_round_up_per_kilobyte_and_four_kilobytes() -> None:
    assert [write_units(s) for s in (0, 1, 1024, 1025, 3000)] == [1, 1, 1, 2, 3]
    assert read_units(4096, consistent=True) == Decimal(1)
    assert read_units(4097, consistent=True) == Decimal(2)
    assert read_units(10, consistent=False) == Decimal("0.5")
    assert read_units(0, consistent=False) == Decimal("0.5")


SCHEMA = TableSchema(
    name="jobs",
    keys=("jobId",),
    indexes=(
        IndexSchema("open", keys=("openPartition", "lastEventAt"), projection="ALL"),
        IndexSchema("retry", keys=("retryPartition", "jobId"), projection="KEYS_ONLY"),
        IndexSchema("byAccount", keys=("accountId",), projection="INCLUDE", included=frozenset({"status"})),
    ),
)


def _job(**attributes: str) -> dict[str, dict[str, str]]:
    return {"jobId": {"S": "j-1"}, **{k: {"S": v} for k, v in attributes.items()}}


def test_an_index_key_that_moves_costs_a_delete_and_a_put() -> None:
    old = _job(openPartition="0", lastEventAt="t1", status="Queued")
    new = _job(openPartition="0", lastEventAt="t2", status="Queued")
    assert index_write_units(SCHEMA, old, new) == {"open": 2}


def test_an_item_entering_leaving_or_changing_in_an_index_costs_one_write() -> None:
    assert index_write_units(SCHEMA, None, _job(openPartition="0", lastEventAt="t")) == {"open": 1}
    assert index_write_units(SCHEMA, _job(openPartition="0", lastEventAt="t"), _job()) == {"open": 1}
    before = _job(openPartition="0", lastEventAt="t", note="a")
    after = _job(openPartition="0", lastEventAt="t", note="b")
    assert index_write_units(SCHEMA, before, after) == {"open": 1}


def test_an_unprojected_change_writes_no_index() -> None:
    old = _job(retryPartition="0", accountId="a", status="Queued", note="x")
    new = _job(retryPartition="0", accountId="a", status="Queued", note="y")
    assert index_write_units(SCHEMA, old, new) == {}  # note is neither a key nor projected there
    changed = _job(retryPartition="0", accountId="a", status="Running", note="y")
    assert index_write_units(SCHEMA, new, changed) == {"byAccount": 1}  # INCLUDE status


def test_a_schema_reads_describe_table() -> None:
    schema = TableSchema.from_description(
        {
            "TableName": "t",
            "KeySchema": [
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            "LocalSecondaryIndexes": [
                {
                    "IndexName": "byTime",
                    "KeySchema": [
                        {"AttributeName": "pk", "KeyType": "HASH"},
                        {"AttributeName": "at", "KeyType": "RANGE"},
                    ],
                    "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["amount"]},
                }
            ],
        }
    )
    assert schema.keys == ("pk", "sk")
    assert schema.indexes == (IndexSchema("byTime", ("pk", "at"), "INCLUDE", frozenset({"amount"})),)


def test_usage_adds_up() -> None:
    usage = Usage()
    usage.requests.update({"dynamodb:GetItem": 2, "s3:PutObject": 1})
    usage.read_units["GetItem"] += Decimal("0.5")
    other = Usage()
    other.requests.update({"dynamodb:GetItem": 1})
    other.read_units["GetItem"] += Decimal(1)
    other.write_units["PutItem"] += 3
    usage.add(other)
    assert usage.dynamodb_requests() == {"GetItem": 3}
    assert usage.count("s3") == 1
    assert usage.total_read_units() == Decimal("1.5")
    assert usage.total_write_units() == 3


def test_the_price_table_names_a_source_for_every_section() -> None:
    prices = load_prices()
    assert set(prices.sources) >= {"dynamodb", "s3", "lambda", "eventbridge", "sns", "api_gateway", "credit"}
    assert all(source for source in prices.sources.values())
    assert prices.written == "2026-12-01"
    assert prices["credit.usd"] == Decimal("0.001")


def test_prices_must_be_decimal_strings(tmp_path: Path) -> None:
    bad = tmp_path / "prices.toml"
    bad.write_text('[meta]\nwritten = "x"\nstatus = "y"\n[s3]\nsource = "z"\nput = 0.005\n')
    with pytest.raises(ValueError, match="decimal strings"):
        load_prices(bad)
    bad.write_text('[meta]\nwritten = "x"\nstatus = "y"\n[s3]\nput = "0.005"\n')
    with pytest.raises(ValueError, match="no source"):
        load_prices(bad)


def test_lambda_bills_milliseconds_of_configured_memory() -> None:
    assert LambdaInvocation("api", 1024, 0.0101).billed_gb_seconds() == Decimal("0.011")
    assert LambdaInvocation("batch_events", 512, 0.0).billed_gb_seconds() == Decimal("0.0005")


def test_a_jobs_cost_is_each_count_times_its_price() -> None:
    table = PRICES_FILE.read_text()  # the real file's keys, made-up round prices
    assert "write_request_unit_per_million" in table
    prices = Prices(
        sections={
            "credit": {"usd": Decimal("0.001")},
            "dynamodb": {
                "write_request_unit_per_million": Decimal(1),
                "read_request_unit_per_million": Decimal(2),
            },
            "s3": {
                "put_copy_post_list_per_thousand": Decimal("0.005"),
                "get_select_other_per_thousand": Decimal(0),
            },
            "lambda": {"requests_per_million": Decimal("0.2"), "gb_second_x86_64": Decimal("0.00001")},
            "api_gateway": {"rest_requests_per_million": Decimal("3.5")},
            "eventbridge": {
                "custom_events_per_million": Decimal(1),
                "aws_service_events_per_million": Decimal(0),
            },
            "sns": {
                "publish_requests_per_million": Decimal("0.5"),
                "email_deliveries_per_hundred_thousand": Decimal(2),
                "http_deliveries_per_million": Decimal("0.6"),
            },
        },
        written="test",
        status="test",
        sources={},
    )
    usage = ControlPlaneUsage(
        dynamodb_write_units=10,
        dynamodb_read_units=Decimal("2.5"),
        s3_puts=2,
        s3_gets=1,
        lambda_invocations=(LambdaInvocation("api", 1024, 0.1), LambdaInvocation("meter", 1024, 0.1)),
        api_requests=1,
        aws_service_events=5,
        sns_publishes=1,
        deliveries={"Email": 1},
    )
    figures = job_cost(usage, prices)
    lines = figures["lines"]
    assert lines["dynamodbWrites"] == Decimal("0.00001")
    assert lines["dynamodbReads"] == Decimal("0.000005")
    assert lines["s3Puts"] == Decimal("0.00001")
    assert lines["lambdaRequests"] == Decimal("0.0000004")
    assert lines["lambdaDuration"] == Decimal("0.000002")
    assert lines["apiGateway"] == Decimal("0.0000035")
    assert lines["eventBridge"] == Decimal(0)
    assert lines["snsPublishes"] == Decimal("0.0000005")
    assert lines["snsDeliveries"] == Decimal("0.00002")
    assert figures["totalUsd"] == Decimal("0.0000514")
    assert figures["creditShare"] == Decimal("0.0514")
    with pytest.raises(KeyError, match="SMS"):
        job_cost(ControlPlaneUsage(0, Decimal(0), 0, 0, (), 0, deliveries={"SMS": 1}), prices)
