"""dispatcher Lambda: SQS messages of admitted jobs → AWS Batch ``SubmitJob`` (``functions.logic.dispatch``).

Each message is ``{"jobId": "job-..."}``. The event source mapping's maximum concurrency bounds the
instances; each paces its SubmitJob calls at ``REMOTE_BATCH_DISPATCH_TPS`` /
``REMOTE_BATCH_DISPATCH_CONCURRENCY`` per second, so together they stay below AWS Batch's limit.
Answers SQS partial batch responses (``batchItemFailures``): a message whose job AWS Batch did not
accept yet is delivered again after the queue's visibility timeout; the queue's DLQ keeps a message
that kept failing for another reason (DynamoDB down).
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.bootstrap import get_services
from functions.logic.dispatch import DispatchOutcome, Pacer, dispatch_job
from functions.observability import lambda_entry, logger, metrics
from functions.settings import load_settings


class NotDispatchedYet(Exception):
    """AWS Batch did not take the job this time: the message is to be delivered again."""


@cache
def _pacer() -> Pacer:
    """This instance's pacer, built once per cold start from the settings."""
    settings = load_settings()
    return Pacer(settings.dispatch_tps / settings.dispatch_concurrency)


def _dispatch_record(record: SQSRecord) -> None:
    try:
        job_id = str(json.loads(record.body)["jobId"])
    except (ValueError, KeyError, TypeError):
        logger.error("malformed dispatch message dropped", message_id=record.message_id)
        return
    receive_count = int(record.attributes.approximate_receive_count or 1)
    outcome = dispatch_job(get_services(), job_id, receive_count=receive_count, pacer=_pacer())
    metrics.add_metric(name=f"Dispatch{outcome.value.capitalize()}", unit=MetricUnit.Count, value=1)
    if outcome == DispatchOutcome.RETRY:
        raise NotDispatchedYet(job_id)


# The first message's id correlates the invocation's log lines (each line also names its job).
SQS_FIRST_MESSAGE_ID = "Records[0].messageId"


@lambda_entry(SQS_FIRST_MESSAGE_ID)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Dispatch each message's job; returns the ``batchItemFailures`` of those to deliver again."""
    # Every record failing is still a partial answer (each delivered again), not an invocation error.
    processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
    response: dict[str, Any] = dict(
        process_partial_response(
            event=event, record_handler=_dispatch_record, processor=processor, context=context
        )
    )
    return response
