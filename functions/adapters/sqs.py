"""SQS: the dispatch queue (``DispatchQueue``) the api, batch_events and the meter put admitted jobs and
admission requests on."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger

from functions.adapters.errors import translate_errors
from functions.domain.errors import DependencyFailed

if TYPE_CHECKING:  # the stubs are a dev dependency; the Lambda runtime has no need of them
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import SendMessageBatchRequestEntryTypeDef

logger = Logger(child=True)

# SendMessageBatch takes at most 10 messages (Amazon SQS API reference).
SEND_BATCH_SIZE = 10


def dispatch_message(job_id: str) -> str:
    """The body of one job's message: ``{"jobId": "job-..."}``."""
    return json.dumps({"jobId": job_id})


def admission_message(account_id: str) -> str:
    """The body of an admission request: ``{"accountId": "..."}`` (the dispatcher admits what the
    account's held jobs may take now, ``functions.logic.quotas.admit_and_enqueue``)."""
    return json.dumps({"accountId": account_id})


class SqsDispatchQueue:
    """``DispatchQueue`` on one SQS queue (a typed boto3 ``sqs`` client and the queue's URL)."""

    inline = False  # the dispatcher Lambda reads the queue

    def __init__(self, client: SQSClient, queue_url: str) -> None:
        self._sqs = client
        self._url = queue_url

    def send(self, job_ids: Sequence[str]) -> None:
        """One message per job (``dispatch_message``). Raises ``DependencyFailed`` when SQS fails or
        still refuses an entry."""
        self._send_bodies([dispatch_message(job_id) for job_id in job_ids])

    def request_admission(self, account_ids: Sequence[str]) -> None:
        """One admission request per account (``admission_message``). Raises ``DependencyFailed``
        when SQS fails or still refuses an entry."""
        self._send_bodies([admission_message(account_id) for account_id in dict.fromkeys(account_ids)])

    def _send_bodies(self, bodies: Sequence[str]) -> None:
        """SendMessageBatch, 10 messages a call; entries SQS reports failed are sent once more."""
        for start in range(0, len(bodies), SEND_BATCH_SIZE):
            pending = list(bodies[start : start + SEND_BATCH_SIZE])
            for _ in range(2):
                entries: list[SendMessageBatchRequestEntryTypeDef] = [
                    {"Id": str(i), "MessageBody": body} for i, body in enumerate(pending)
                ]
                with translate_errors("sqs", "SendMessageBatch", failed="The dispatch queue is unavailable."):
                    response = self._sqs.send_message_batch(QueueUrl=self._url, Entries=entries)
                failed = {int(f["Id"]) for f in response.get("Failed", [])}
                pending = [body for i, body in enumerate(pending) if i in failed]
                if not pending:
                    break
            if pending:
                logger.error("dispatch messages refused", count=len(pending))
                raise DependencyFailed("The dispatch queue refused messages; try again.")
