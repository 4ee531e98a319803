"""SQS: the dispatch queue (``DispatchQueue``) the api and the meter put admitted jobs on."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from aws_lambda_powertools import Logger

from functions.adapters.errors import translate_errors
from functions.domain.errors import DependencyFailed

logger = Logger(child=True)

# SendMessageBatch takes at most 10 messages (Amazon SQS API reference).
SEND_BATCH_SIZE = 10


def dispatch_message(job_id: str) -> str:
    """The body of one job's message: ``{"jobId": "job-..."}``."""
    return json.dumps({"jobId": job_id})


class SqsDispatchQueue:
    """``DispatchQueue`` on one SQS queue (a boto3 ``sqs`` client and the queue's URL; the project has
    no SQS type stubs, so the client is untyped)."""

    def __init__(self, client: Any, queue_url: str) -> None:
        self._sqs = client
        self._url = queue_url

    def send(self, job_ids: Sequence[str]) -> None:
        """SendMessageBatch, 10 messages a call; entries SQS reports failed are sent once more.

        Raises ``DependencyFailed`` when SQS fails or still refuses an entry.
        """
        for start in range(0, len(job_ids), SEND_BATCH_SIZE):
            pending = list(job_ids[start : start + SEND_BATCH_SIZE])
            for _ in range(2):
                entries = [{"Id": str(i), "MessageBody": dispatch_message(j)} for i, j in enumerate(pending)]
                with translate_errors("sqs", "SendMessageBatch", failed="The dispatch queue is unavailable."):
                    response = self._sqs.send_message_batch(QueueUrl=self._url, Entries=entries)
                failed = {int(f["Id"]) for f in response.get("Failed", [])}
                pending = [job_id for i, job_id in enumerate(pending) if i in failed]
                if not pending:
                    break
            if pending:
                logger.error("dispatch messages refused", count=len(pending))
                raise DependencyFailed("The dispatch queue refused messages; try again.")
