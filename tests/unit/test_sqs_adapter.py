"""The dispatch queue's SQS adapter at its boundary (botocore's ``Stubber`` checks each request against the
SQS API's own model): SendMessageBatch takes at most 10 entries (Amazon SQS API reference), entries SQS
reports failed are sent once more, and what still fails is ``DependencyFailed``."""

from __future__ import annotations

import json
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from functions.adapters.sqs import SqsDispatchQueue
from functions.domain.errors import DependencyFailed

URL = "https://sqs.us-east-1.amazonaws.com/123456789012/remote-batch-dev-dispatch"


@pytest.fixture
def sqs() -> Any:
    return boto3.client("sqs", region_name="us-east-1")


def entries(bodies: list[str]) -> list[dict[str, str]]:
    return [{"Id": str(i), "MessageBody": body} for i, body in enumerate(bodies)]


def sent(count: int) -> dict[str, Any]:
    return {
        "Successful": [
            {"Id": str(i), "MessageId": f"m{i}", "MD5OfMessageBody": "0" * 32} for i in range(count)
        ],
        "Failed": [],
    }


def test_job_ids_go_ten_to_a_call_one_message_each(sqs: Any) -> None:
    bodies = [json.dumps({"jobId": f"job-{i}"}) for i in range(12)]
    with Stubber(sqs) as stub:
        stub.add_response("send_message_batch", sent(10), {"QueueUrl": URL, "Entries": entries(bodies[:10])})
        stub.add_response("send_message_batch", sent(2), {"QueueUrl": URL, "Entries": entries(bodies[10:])})
        SqsDispatchQueue(sqs, URL).send([f"job-{i}" for i in range(12)])
        stub.assert_no_pending_responses()


def test_an_entry_sqs_refuses_is_sent_once_more_and_a_second_refusal_raises(sqs: Any) -> None:
    bodies = [json.dumps({"accountId": a}) for a in ("alice", "bob")]
    failed = {
        "Successful": [{"Id": "0", "MessageId": "m0", "MD5OfMessageBody": "0" * 32}],
        "Failed": [{"Id": "1", "SenderFault": False, "Code": "InternalError"}],
    }
    again = {"Successful": [], "Failed": [{"Id": "0", "SenderFault": False, "Code": "InternalError"}]}
    with Stubber(sqs) as stub:
        # Each account asked once, however often it is named.
        stub.add_response("send_message_batch", failed, {"QueueUrl": URL, "Entries": entries(bodies)})
        stub.add_response("send_message_batch", again, {"QueueUrl": URL, "Entries": entries(bodies[1:])})
        with pytest.raises(DependencyFailed):
            SqsDispatchQueue(sqs, URL).request_admission(["alice", "bob", "alice"])
        stub.assert_no_pending_responses()
