"""dispatcher Lambda: SQS messages of admitted jobs → AWS Batch ``SubmitJob`` (``functions.logic.dispatch``).

Each message is ``{"jobId": "job-..."}`` (send that admitted job) or ``{"accountId": "..."}`` (admit
what the account's held jobs may take now and enqueue them, once per account per delivered batch:
``functions.logic.dispatch_requests.request_admission``). The event source mapping's maximum
concurrency bounds the instances; each paces its SubmitJob calls at ``REMOTE_BATCH_DISPATCH_TPS`` /
``REMOTE_BATCH_DISPATCH_CONCURRENCY`` per second, so together they stay below AWS Batch's limit.
Answers SQS partial batch responses (``batchItemFailures``): a message whose job AWS Batch did not
accept yet is delivered again after the queue's visibility timeout; the queue's DLQ keeps a message
that kept failing for another reason (DynamoDB down).

The partial batch response is made here, as powertools' ``BatchProcessor`` with
``process_partial_response`` made it (each record handled in turn; one that raises is listed by its
``messageId``, the others are not; all failing is still a partial answer; an event without a
``Records`` list is refused with ``ValueError``): importing ``aws_lambda_powertools.utilities.batch``
loads its parser models and every event data class, about 80 ms of each cold start for a loop.
The answer's shape: AWS Lambda developer guide, "Handling errors for an SQS event source"
(``{"batchItemFailures": [{"itemIdentifier": messageId}, ...]}``).
"""

from __future__ import annotations

import json
from functools import cache
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit

from functions.bootstrap import get_services
from functions.logic.dispatch import dispatch_job
from functions.logic.dispatch_rules import DispatchOutcome, Pacer
from functions.logic.quotas import admit_and_enqueue
from functions.observability import lambda_entry, logger, metrics
from functions.settings import load_settings

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext


class NotDispatchedYet(Exception):
    """AWS Batch did not take the job this time: the message is to be delivered again."""


@cache
def _pacer() -> Pacer:
    """This instance's pacer, built once per cold start from the settings."""
    settings = load_settings()
    return Pacer(settings.dispatch_tps / settings.dispatch_concurrency)


def _dispatch_record(record: dict[str, Any], admitted_accounts: set[str]) -> None:
    try:
        body = json.loads(record["body"])
        account_id, job_id = body.get("accountId"), body.get("jobId")
    except (ValueError, AttributeError):
        account_id = job_id = None
    if isinstance(account_id, str) and account_id:
        # Every request of this batch was sent before the batch was read: one admission sees them all.
        if account_id not in admitted_accounts:
            admit_and_enqueue(get_services(), account_id)
            admitted_accounts.add(account_id)
        return
    if not (isinstance(job_id, str) and job_id):
        logger.error("malformed dispatch message dropped", message_id=record["messageId"])
        return
    receive_count = int(record["attributes"]["ApproximateReceiveCount"] or 1)
    outcome = dispatch_job(get_services(), job_id, receive_count=receive_count, pacer=_pacer())
    metrics.add_metric(name=f"Dispatch{outcome.value.capitalize()}", unit=MetricUnit.Count, value=1)
    if outcome == DispatchOutcome.RETRY:
        raise NotDispatchedYet(job_id)


# The first message's id correlates the invocation's log lines (each line also names its job).
SQS_FIRST_MESSAGE_ID = "Records[0].messageId"


@lambda_entry(SQS_FIRST_MESSAGE_ID)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Dispatch each message's job or admit its account's held jobs; returns the ``batchItemFailures``
    of those to deliver again (an admission that failed on DynamoDB is retried as well)."""
    records = event.get("Records")
    if not isinstance(records, list):
        raise ValueError("Invalid event format: an SQS event has a Records list.")
    admitted_accounts: set[str] = set()
    failures: list[dict[str, Any]] = []
    for record in records:
        try:
            _dispatch_record(record, admitted_accounts)
        except Exception as exc:  # any failure: the message is delivered again
            logger.debug("record to deliver again", message_id=record.get("messageId"), error=repr(exc))
            # Every record failing is still a partial answer (each delivered again), not an invocation error.
            failures.append({"itemIdentifier": record["messageId"]})
    return {"batchItemFailures": failures}
