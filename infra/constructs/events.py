"""EventBridge: Batch job state changes to batch_events, the meter's one-minute schedule, and the
rule that forwards another region's Batch events to the home region's bus."""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from functions.adapters.event_patterns import (
    BATCH_DETAIL_TYPE,
    BATCH_SOURCE,
    job_changing_detail_pattern,
)
from infra import constants
from infra.constructs.queues import secure_queue


def batch_state_change_pattern(job_queue_arn_prefixes: Sequence[str]) -> events.EventPattern:
    """``Batch Job State Change`` events of the queues whose ARN starts with one of the prefixes that
    can change a job (``functions.adapters.event_patterns``: a first attempt's PENDING and RUNNABLE
    are left out, so they cost no Lambda call)."""
    return events.EventPattern(
        source=[BATCH_SOURCE],
        detail_type=[BATCH_DETAIL_TYPE],
        detail={
            "jobQueue": [{"prefix": prefix} for prefix in job_queue_arn_prefixes],
            **job_changing_detail_pattern(),
        },
    )


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
    job_queue_arn_prefixes : Sequence[str]
        Every zone's queue ARN up to the stage's name prefix (``…:job-queue/remote-batch-dev-``):
        events of other queues in the account are not ours. Other regions' events arrive here
        through their ``BatchEventForwarder``.

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
        job_queue_arn_prefixes: Sequence[str],
    ) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue = self._build_dead_letter_queue()
        self.batch_state_rule = self._build_batch_state_rule(batch_events, job_queue_arn_prefixes)
        self.meter_schedule = self._build_meter_schedule(meter)
        self._configure_failed_invocations(batch_events, constants.BATCH_EVENTS_HANDLER_RETRY_ATTEMPTS)
        # A failed meter tick is not retried: the next tick, a minute later, does the same work.
        self._configure_failed_invocations(meter, 0)

    def _build_dead_letter_queue(self) -> sqs.Queue:
        return secure_queue(self, "DeadLetterQueue", retention_days=constants.DLQ_RETENTION_DAYS)

    def _build_batch_state_rule(
        self, handler: lambda_.IFunction, job_queue_arn_prefixes: Sequence[str]
    ) -> events.Rule:
        return events.Rule(
            self,
            "BatchJobStateChangeRule",
            description=f"{constants.SERVICE_NAME}: Batch job state changes of the service's queues",
            event_pattern=batch_state_change_pattern(job_queue_arn_prefixes),
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


class BatchEventForwarder(Construct):
    """Forwards this region's Batch job state changes to the home region's default event bus.

    EventBridge delivers across regions with a role allowed ``events:PutEvents`` on the home bus;
    events it cannot deliver (after its own retries, up to 24 hours) land in the dead-letter queue.

    Parameters
    ----------
    job_queue_arn_prefix : str
        This zone's queue ARN up to the stage's name prefix.
    home_event_bus_arn : str
        ``arn:…:events:<home region>:<account>:event-bus/default``.

    Attributes
    ----------
    rule : events.Rule
    role : iam.Role
        Assumed by EventBridge to put the events on the home bus.
    dead_letter_queue : sqs.Queue
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, job_queue_arn_prefix: str, home_event_bus_arn: str
    ) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue = secure_queue(
            self, "DeadLetterQueue", retention_days=constants.DLQ_RETENTION_DAYS
        )
        self.role = iam.Role(
            self,
            "ForwardingRole",
            assumed_by=iam.ServicePrincipal("events.amazonaws.com"),
            description=f"{constants.SERVICE_NAME}: forward Batch job state changes to the home region",
        )
        home_bus = events.EventBus.from_event_bus_arn(self, "HomeEventBus", home_event_bus_arn)
        self.rule = events.Rule(
            self,
            "ForwardBatchJobStateChangeRule",
            description=f"{constants.SERVICE_NAME}: Batch job state changes to the home region's bus",
            event_pattern=batch_state_change_pattern([job_queue_arn_prefix]),
            targets=[targets.EventBus(home_bus, role=self.role, dead_letter_queue=self.dead_letter_queue)],
        )
