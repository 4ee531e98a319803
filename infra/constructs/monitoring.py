"""Alarms to the operator: anything in a dead-letter queue, any function error.

An alarm can only notify a topic in its own region, so every stack with something to watch has its
own operator topic; the operator subscribes to each (docs/deploy.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration, RemovalPolicy
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
        By a short name (``Api``): each alarms at one error within the period.

    Attributes
    ----------
    operator_topic : sns.Topic
        Encrypted with ``key``; CloudWatch may use the key to publish.
    key : kms.Key
    alarms : dict[str, cloudwatch.Alarm]
        ``<Name>DeadLetterQueueDepth`` and ``<Name>FunctionErrors``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        dead_letter_queues: Mapping[str, sqs.IQueue],
        functions: Mapping[str, lambda_.IFunction] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.key = self._build_key()
        self.operator_topic = self._build_operator_topic(self.key)
        self.alarms: dict[str, cloudwatch.Alarm] = {}
        for name, queue in dead_letter_queues.items():
            self._build_dead_letter_queue_alarm(name, queue)
        for name, function in (functions or {}).items():
            self._build_function_errors_alarm(name, function)
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

    def _period(self) -> Duration:
        return Duration.minutes(constants.ALARM_PERIOD_MINUTES)

    def _build_dead_letter_queue_alarm(self, name: str, queue: sqs.IQueue) -> None:
        self.alarms[f"{name}DeadLetterQueueDepth"] = cloudwatch.Alarm(
            self,
            f"{name}DeadLetterQueueDepthAlarm",
            alarm_description=(
                f"{constants.SERVICE_NAME}: events in the {name} dead-letter queue were not delivered "
                "or not handled; inspect and redrive them."
            ),
            metric=queue.metric_approximate_number_of_messages_visible(
                period=self._period(), statistic=cloudwatch.Stats.MAXIMUM
            ),
            threshold=constants.DLQ_DEPTH_ALARM_THRESHOLD,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )

    def _build_function_errors_alarm(self, name: str, function: lambda_.IFunction) -> None:
        self.alarms[f"{name}FunctionErrors"] = cloudwatch.Alarm(
            self,
            f"{name}FunctionErrorsAlarm",
            alarm_description=f"{constants.SERVICE_NAME}: the {name} function raised; see its log.",
            metric=function.metric_errors(period=self._period(), statistic=cloudwatch.Stats.SUM),
            threshold=constants.FUNCTION_ERRORS_ALARM_THRESHOLD,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
