"""The dispatcher's partial batch response is what powertools' ``BatchProcessor`` with
``process_partial_response`` answered for the same records (the handler makes it itself so that its
cold start does not import powertools' batch utility and the parser models it loads)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord

from functions.handlers import dispatcher
from tests.fakes import FakeLambdaContext


def _record(message_id: str, body: str, receive_count: str | None = "1") -> dict[str, Any]:
    attributes = {"SentTimestamp": "1764000000000"}
    if receive_count is not None:
        attributes["ApproximateReceiveCount"] = receive_count
    return {
        "messageId": message_id,
        "receiptHandle": f"r-{message_id}",
        "body": body,
        "attributes": attributes,
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:remote-batch-dispatch",
        "awsRegion": "us-east-1",
    }


BATCHES = {
    "all succeed": ["ok", "ok"],
    "one fails": ["ok", "fail", "ok"],
    "all fail": ["fail", "fail"],
    "a bug": ["ok", "bug"],
}


def _outcome_of(body: str) -> None:
    if body == "fail":
        raise dispatcher.NotDispatchedYet("job-x")
    if body == "bug":
        raise KeyError("something")


@pytest.mark.parametrize("batch", list(BATCHES))
def test_partial_response_matches_powertools_batch_processor(
    batch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = [_record(f"m-{i}", json.dumps({"jobId": kind})) for i, kind in enumerate(BATCHES[batch])]
    seen: list[str] = []

    def dispatch(record: dict[str, Any], admitted: set[str]) -> None:
        seen.append(record["messageId"])
        _outcome_of(json.loads(record["body"])["jobId"])

    def powertools_handler(record: SQSRecord) -> None:
        _outcome_of(json.loads(record.body)["jobId"])

    monkeypatch.setattr(dispatcher, "_dispatch_record", dispatch)
    expected = process_partial_response(
        event={"Records": records},
        record_handler=powertools_handler,
        processor=BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False),
        context=FakeLambdaContext(),
    )

    answer = dispatcher.handler({"Records": records}, FakeLambdaContext())

    assert answer == expected
    assert seen == [r["messageId"] for r in records]  # each record once, in order
    if batch == "one fails":
        assert answer == {"batchItemFailures": [{"itemIdentifier": "m-1"}]}


def test_an_empty_batch_has_nothing_to_deliver_again() -> None:
    """SQS never invokes with no record; were it to, nothing is to be delivered again (powertools
    raised its UnexpectedBatchTypeError there, an invocation error)."""
    assert dispatcher.handler({"Records": []}, FakeLambdaContext()) == {"batchItemFailures": []}


def test_a_message_without_its_receive_count_is_delivered_again_as_before() -> None:
    """powertools' ``SQSRecord.attributes.approximate_receive_count`` raised KeyError for a message
    without the attribute (a failed record); reading the dict raises the same."""
    record = _record("m-0", json.dumps({"jobId": "job-1"}), receive_count=None)

    answer = dispatcher.handler({"Records": [record]}, FakeLambdaContext())

    assert answer == {"batchItemFailures": [{"itemIdentifier": "m-0"}]}
    with pytest.raises(KeyError):
        _ = SQSRecord(record).attributes.approximate_receive_count


def test_an_event_without_records_is_refused() -> None:
    with pytest.raises(ValueError, match="Records"):
        dispatcher.handler({"detail": {}}, FakeLambdaContext())
