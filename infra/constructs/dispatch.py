"""The dispatch queue: admitted jobs wait here for the dispatcher (``functions/logic/dispatch.py``).

An encrypted, TLS-only SQS queue with a dead-letter queue (same protections) that takes a message after
``DISPATCH_MAX_RECEIVE_COUNT`` failed deliveries, and the dispatcher's event source mapping: batches
of ``DISPATCH_BATCH_SIZE``, partial batch responses, and a maximum concurrency that bounds the
instances (each paces SubmitJob at ``DISPATCH_TPS`` / ``DISPATCH_MAX_CONCURRENCY`` per second).
"""

from __future__ import annotations

from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from constructs import Construct

from infra import constants
from infra.constructs.queues import secure_queue


class DispatchQueue(Construct):
    """The queue and its dead-letter queue.

    Attributes
    ----------
    queue, dead_letter_queue : sqs.Queue
    """

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue = secure_queue(
            self, "DeadLetterQueue", retention_days=constants.DISPATCH_DLQ_RETENTION_DAYS
        )
        self.queue = secure_queue(
            self,
            "Queue",
            visibility_timeout_seconds=constants.DISPATCH_VISIBILITY_TIMEOUT_SECONDS,
            dead_letter_queue=self.dead_letter_queue,
            max_receive_count=constants.DISPATCH_MAX_RECEIVE_COUNT,
        )

    def connect(self, dispatcher: lambda_.Function) -> None:
        """Deliver the queue's messages to ``dispatcher`` (which may then receive and delete them)."""
        dispatcher.add_event_source(
            sources.SqsEventSource(
                self.queue,
                batch_size=constants.DISPATCH_BATCH_SIZE,
                max_concurrency=constants.DISPATCH_MAX_CONCURRENCY,
                report_batch_item_failures=True,
            )
        )
