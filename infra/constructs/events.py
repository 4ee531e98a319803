"""EventBridge: Batch job state changes to batch_events, and the meter's one-minute schedule."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_batch as batch
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra import constants

BATCH_SOURCE = "aws.batch"
BATCH_DETAIL_TYPE = "Batch Job State Change"


class Events(Construct):
    """The two rules and the dead-letter queue of what could not be delivered or handled.

    EventBridge invokes Lambda asynchronously: the rule target's DLQ catches events EventBridge
    could not hand to Lambda, and the function's on-failure destination catches events whose
    handler kept failing. Both land in the same queue, so one alarm on it covers both.

    Parameters
    ----------
    batch_events : lambda_.IFunction
        Receives every ``Batch Job State Change`` of ``job_queues`` (at least once, in any order).
    meter : lambda_.IFunction
        Invoked every minute.
    job_queues : Sequence[batch.IJobQueue]
        This service's queues: events of other queues in the account are not ours.

    Attributes
    ----------
    batch_state_rule, meter_schedule : events.Rule
    dead_letter_queue : sqs.Queue
        Events given up on, by EventBridge or by Lambda's asynchronous retries (both rules).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        batch_events: lambda_.IFunction,
        meter: lambda_.IFunction,
        job_queues: Sequence[batch.IJobQueue],
    ) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue = self._build_dead_letter_queue()
        self.batch_state_rule = self._build_batch_state_rule(batch_events, job_queues)
        self.meter_schedule = self._build_meter_schedule(meter)
        self._configure_failed_invocations(batch_events, constants.BATCH_EVENTS_HANDLER_RETRY_ATTEMPTS)
        # A failed meter tick is not retried: the next tick, a minute later, does the same work.
        self._configure_failed_invocations(meter, 0)

    def _build_dead_letter_queue(self) -> sqs.Queue:
        return sqs.Queue(
            self,
            "DeadLetterQueue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=Duration.days(constants.DLQ_RETENTION_DAYS),
        )

    def _build_batch_state_rule(
        self, handler: lambda_.IFunction, job_queues: Sequence[batch.IJobQueue]
    ) -> events.Rule:
        return events.Rule(
            self,
            "BatchJobStateChangeRule",
            description=f"{constants.SERVICE_NAME}: Batch job state changes of the service's queues",
            event_pattern=events.EventPattern(
                source=[BATCH_SOURCE],
                detail_type=[BATCH_DETAIL_TYPE],
                detail={"jobQueue": [queue.job_queue_arn for queue in job_queues]},
            ),
            targets=[
                targets.LambdaFunction(
                    handler,
                    dead_letter_queue=self.dead_letter_queue,
                    retry_attempts=constants.BATCH_EVENTS_RETRY_ATTEMPTS,
                    max_event_age=Duration.hours(constants.BATCH_EVENTS_MAX_EVENT_AGE_HOURS),
                )
            ],
        )

    def _build_meter_schedule(self, handler: lambda_.IFunction) -> events.Rule:
        return events.Rule(
            self,
            "MeterSchedule",
            description=f"{constants.SERVICE_NAME}: meter running jobs",
            schedule=events.Schedule.rate(Duration.minutes(constants.METER_RATE_MINUTES)),
            targets=[
                targets.LambdaFunction(
                    handler,
                    dead_letter_queue=self.dead_letter_queue,
                    retry_attempts=constants.METER_RETRY_ATTEMPTS,
                    max_event_age=Duration.seconds(constants.METER_MAX_EVENT_AGE_SECONDS),
                )
            ],
        )

    def _configure_failed_invocations(self, handler: lambda_.IFunction, retry_attempts: int) -> None:
        handler.configure_async_invoke(
            retry_attempts=retry_attempts,
            on_failure=destinations.SqsDestination(self.dead_letter_queue),
        )
