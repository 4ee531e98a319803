"""Alarms to the operator: anything in a dead-letter queue, any function error, and what callers see:
the API's 5xx rate and p90 latency, each function's p90 duration, a meter that stopped running, jobs
stuck past their Batch timeout. docs/operations.md's "Alarms" section has one runbook line per alarm.

An alarm can only notify a topic in its own region, so every stack with something to watch has its
own operator topic; the operator subscribes to each (docs/deploy.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra import constants


class Monitoring(Construct):
    """The operator topic and the alarms that publish to it.

    Parameters
    ----------
    dead_letter_queues : Mapping[str, sqs.IQueue]
        By a short name (``Events``): each alarms at one visible message.
    functions : Mapping[str, lambda_.IFunction]
        By a short name (``Api``): each alarms at one error within the period, and at a p90 duration
        over ``duration_thresholds_ms[name]``.
    duration_thresholds_ms : Mapping[str, float]
        p90 duration (milliseconds) each function alarms above, by the same short names.
    api_stage : apigw.Stage | None
        The API's stage: alarms on its 5xx rate and p90 latency.
    meter : lambda_.IFunction | None
        The meter: alarms when it has not run for ``METER_SILENCE_MINUTES``, and on ``StuckJobs``.
    backlog_queues : Mapping[str, sqs.IQueue] | None
        Work queues by a short name (``Dispatch``): each alarms when its oldest message is older than
        ``DISPATCH_BACKLOG_ALARM_SECONDS`` (a stalled consumer).

    Attributes
    ----------
    operator_topic : sns.Topic
        Encrypted with ``key``; CloudWatch may use the key to publish.
    key : kms.Key
    alarms : dict[str, cloudwatch.Alarm]
        ``<Name>DeadLetterQueueDepth``, ``<Name>FunctionErrors``, ``<Name>DurationP90``,
        ``ApiServerErrorRate``, ``ApiLatencyP90``, ``MeterNotRunning``, ``StuckJobs``, ``SkippedJobs``,
        ``<Name>BacklogAge``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        dead_letter_queues: Mapping[str, sqs.IQueue],
        functions: Mapping[str, lambda_.IFunction] | None = None,
        duration_thresholds_ms: Mapping[str, float] | None = None,
        api_stage: apigw.Stage | None = None,
        meter: lambda_.IFunction | None = None,
        backlog_queues: Mapping[str, sqs.IQueue] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.key = self._build_key()
        self.operator_topic = self._build_operator_topic(self.key)
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        for name, queue in dead_letter_queues.items():
            self._build_dead_letter_queue_alarm(name, queue)
        for name, function in (functions or {}).items():
            self._build_function_errors_alarm(name, function)
            if duration_thresholds_ms is not None:
                self._build_duration_alarm(name, function, duration_thresholds_ms[name])
        if api_stage is not None:
            self._build_api_alarms(api_stage)
        if meter is not None:
            self._build_meter_alarms(meter)
        for name, queue in (backlog_queues or {}).items():
            self._build_backlog_alarm(name, queue)
        action = cloudwatch_actions.SnsAction(self.operator_topic)
        for alarm in self.alarms.values():
            alarm.add_alarm_action(action)

    def _build_key(self) -> kms.Key:
        key = kms.Key(
            self,
            "OperatorTopicKey",
            description=f"{constants.SERVICE_NAME}: encrypts the operator alarm topic",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.DESTROY,
        )
        # CloudWatch publishes alarm notifications to the encrypted topic with this key.
        key.grant(iam.ServicePrincipal("cloudwatch.amazonaws.com"), "kms:Decrypt", "kms:GenerateDataKey*")
        return key

    def _build_operator_topic(self, key: kms.Key) -> sns.Topic:
        return sns.Topic(
            self,
            "OperatorTopic",
            display_name=f"{constants.SERVICE_NAME} operator alarms",
            master_key=key,
            enforce_ssl=True,
        )

    def _alarm(
        self,
        key: str,
        *,
        description: str,
        metric: cloudwatch.IMetric,
        threshold: float,
        comparison: cloudwatch.ComparisonOperator,
        evaluation_periods: int = 1,
        treat_missing_data: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
    ) -> None:
        """Alarm ``key`` (construct ``<key>Alarm``; its description prefixed with the service's name),
        kept in ``alarms``; no data is not breaching unless said otherwise."""
        self.alarms[key] = cloudwatch.Alarm(
            self,
            f"{key}Alarm",
            alarm_description=f"{constants.SERVICE_NAME}: {description}",
            metric=metric,
            threshold=threshold,
            evaluation_periods=evaluation_periods,
            comparison_operator=comparison,
            treat_missing_data=treat_missing_data,
        )

    def _meter_count_alarm(self, name: str, description: str, *, threshold: float) -> None:
        """An alarm when the meter's count metric ``name`` (namespace ``RemoteBatch``, dimension
        ``service``; the largest value in a period) is over ``threshold``; no data is not breaching."""
        metric = cloudwatch.Metric(
            namespace=constants.METRICS_NAMESPACE,
            metric_name=name,
            dimensions_map={"service": constants.SERVICE_NAME},
            period=self._period(),
            statistic=cloudwatch.Stats.MAXIMUM,
        )
        self._alarm(
            name,
            description=description,
            metric=metric,
            threshold=threshold,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        )

    def _period(self) -> Duration:
        return Duration.minutes(constants.ALARM_PERIOD_MINUTES)

    def _build_dead_letter_queue_alarm(self, name: str, queue: sqs.IQueue) -> None:
        self._alarm(
            f"{name}DeadLetterQueueDepth",
            description=(
                f"events in the {name} dead-letter queue were not delivered "
                "or not handled; inspect and redrive them."
            ),
            metric=queue.metric_approximate_number_of_messages_visible(
                period=self._period(), statistic=cloudwatch.Stats.MAXIMUM
            ),
            threshold=constants.DLQ_DEPTH_ALARM_THRESHOLD,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        )

    def _build_backlog_alarm(self, name: str, queue: sqs.IQueue) -> None:
        self._alarm(
            f"{name}BacklogAge",
            description=(
                f"the {name} queue's oldest message waits too long; check its "
                "consumer's errors and AWS Batch's SubmitJob throttling."
            ),
            metric=queue.metric_approximate_age_of_oldest_message(
                period=self._period(), statistic=cloudwatch.Stats.MAXIMUM
            ),
            threshold=constants.DISPATCH_BACKLOG_ALARM_SECONDS,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        )

    def _build_function_errors_alarm(self, name: str, function: lambda_.IFunction) -> None:
        self._alarm(
            f"{name}FunctionErrors",
            description=f"the {name} function raised; see its log.",
            metric=function.metric_errors(period=self._period(), statistic=cloudwatch.Stats.SUM),
            threshold=constants.FUNCTION_ERRORS_ALARM_THRESHOLD,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        )

    def _build_duration_alarm(self, name: str, function: lambda_.IFunction, threshold_ms: float) -> None:
        self._alarm(
            f"{name}DurationP90",
            description=(
                f"the {name} function's p90 duration is over {threshold_ms:g} ms; "
                "see its X-Ray traces for the slow calls."
            ),
            metric=function.metric_duration(period=self._period(), statistic=cloudwatch.Stats.p(90)),
            threshold=threshold_ms,
            evaluation_periods=constants.LATENCY_ALARM_EVALUATION_PERIODS,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        )

    def _build_api_alarms(self, stage: apigw.Stage) -> None:
        # 5XXError is 1 for a request answered 5xx and 0 otherwise: its average is the 5xx rate.
        self._alarm(
            "ApiServerErrorRate",
            description=(
                f"more than {constants.API_5XX_RATE_ALARM_THRESHOLD:.0%} of API "
                "requests were answered 5xx; see the api function's errors in its log."
            ),
            metric=stage.metric_server_error(period=self._period(), statistic=cloudwatch.Stats.AVERAGE),
            threshold=constants.API_5XX_RATE_ALARM_THRESHOLD,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        )
        self._alarm(
            "ApiLatencyP90",
            description=(
                "the API's p90 latency is over "
                f"{constants.API_LATENCY_P90_ALARM_MS} ms; compare with the api function's duration."
            ),
            metric=stage.metric_latency(period=self._period(), statistic=cloudwatch.Stats.p(90)),
            threshold=constants.API_LATENCY_P90_ALARM_MS,
            evaluation_periods=constants.LATENCY_ALARM_EVALUATION_PERIODS,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        )

    def _build_meter_alarms(self, meter: lambda_.IFunction) -> None:
        # The schedule invokes the meter every minute: no invocation in 3 one-minute periods (no data
        # counts as none) means no metering, no caps enforced, no reconciliation.
        self._alarm(
            "MeterNotRunning",
            description=(
                f"the meter has not run for {constants.METER_SILENCE_MINUTES} "
                "minutes; check its EventBridge schedule rule is enabled and the function's throttles."
            ),
            metric=meter.metric_invocations(period=Duration.minutes(1), statistic=cloudwatch.Stats.SUM),
            threshold=1,
            evaluation_periods=constants.METER_SILENCE_MINUTES,
            comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.BREACHING,
        )
        # The meter's count of Starting/Running jobs past their Batch timeout plus a margin
        # (functions/logic/health.py); with no data the meter alarm above speaks.
        self._meter_count_alarm(
            "StuckJobs",
            "jobs are still Starting or Running past their Batch timeout; the meter logs each "
            '("job stuck past its batch timeout"): compare with DescribeJobs.',
            threshold=constants.STUCK_JOBS_ALARM_THRESHOLD,
        )
        # Jobs a meter tick could not read or update (functions/logic/metering.py): logged with
        # their ids and skipped, so one bad item never stops the tick for the others.
        self._meter_count_alarm(
            "SkippedJobs",
            "the meter skipped jobs it could not read or update; it logs each with its id "
            '("job skipped by the meter"): inspect those items.',
            threshold=0,
        )
