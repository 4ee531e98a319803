"""The one way this app makes an SQS queue: encrypted at rest (SQS-managed keys) and TLS-only
(``enforce_ssl`` adds the ``aws:SecureTransport`` deny), as cdk-nag's AwsSolutions-SQS3/SQS4 and
the project's "TLS-only, encrypted" rule ask."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_sqs as sqs
from constructs import Construct


def secure_queue(
    scope: Construct,
    construct_id: str,
    *,
    retention_days: int | None = None,
    visibility_timeout_seconds: int | None = None,
    dead_letter_queue: sqs.IQueue | None = None,
    max_receive_count: int | None = None,
) -> sqs.Queue:
    """An encrypted, TLS-only queue.

    Parameters
    ----------
    retention_days : int | None
        How long a message is kept (days; SQS's default, 4 days, when None).
    visibility_timeout_seconds : int | None
        Seconds a received message stays hidden (SQS's default, 30 s, when None).
    dead_letter_queue, max_receive_count : sqs.IQueue | None, int | None
        Where a message goes after ``max_receive_count`` receives (both or neither).
    """
    if (dead_letter_queue is None) != (max_receive_count is None):
        raise ValueError("dead_letter_queue and max_receive_count go together")
    return sqs.Queue(
        scope,
        construct_id,
        encryption=sqs.QueueEncryption.SQS_MANAGED,
        enforce_ssl=True,
        retention_period=Duration.days(retention_days) if retention_days is not None else None,
        visibility_timeout=(
            Duration.seconds(visibility_timeout_seconds) if visibility_timeout_seconds is not None else None
        ),
        dead_letter_queue=(
            sqs.DeadLetterQueue(queue=dead_letter_queue, max_receive_count=max_receive_count)
            if dead_letter_queue is not None and max_receive_count is not None
            else None
        ),
    )
