"""The home region's stack: tables, notifications, auth, functions, events, monitoring and the API,
each a construct. Every zone's Batch resources and bucket live in that zone's ``ComputeStack``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from infra import constants, nag_suppressions
from infra.constructs.api import Api
from infra.constructs.auth import Auth
from infra.constructs.console import Console
from infra.constructs.data import Data
from infra.constructs.dispatch import DispatchQueue
from infra.constructs.events import Events
from infra.constructs.functions import Functions
from infra.constructs.monitoring import Monitoring
from infra.constructs.notifications import Notifications
from infra.naming import ZoneNames


class ControlPlaneStack(Stack):
    """remote-batch's API and state, in the home region.

    Parameters
    ----------
    zones : Sequence[ZoneNames]
        Every geo zone's resource names (their compute stacks create the resources).
    console_domain_prefix : str
        The prefix of the console's Cognito sign-in domain.
    **kwargs
        Passed to ``Stack`` (description, env, …).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        zones: Sequence[ZoneNames],
        console_domain_prefix: str,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.zones = list(zones)
        self.data = Data(self, "Data")
        stages = {zone.stage for zone in self.zones}
        if len(stages) != 1:
            raise ValueError(f"every zone belongs to one stage, got {sorted(stages)}")
        self.notifications = Notifications(self, "Notifications", stage=stages.pop())
        self.auth = Auth(self, "Auth")
        self.dispatch = DispatchQueue(self, "Dispatch")
        self.functions = Functions(
            self,
            "Functions",
            data=self.data,
            notifications=self.notifications,
            zones=self.zones,
            dispatch=self.dispatch,
        )
        self.events = Events(
            self,
            "Events",
            batch_events=self.functions.batch_events,
            meter=self.functions.meter,
            job_queue_arn_prefixes=[self.job_queue_arn_prefix(zone) for zone in self.zones],
        )
        self.api = Api(self, "Api", handler=self.functions.api, user_pool=self.auth.user_pool)
        self.console = Console(
            self,
            "Console",
            rest_api=self.api.rest_api,
            user_pool=self.auth.user_pool,
            domain_prefix=console_domain_prefix,
        )
        self.monitoring = Monitoring(
            self,
            "Monitoring",
            dead_letter_queues={
                "Events": self.events.dead_letter_queue,
                "Dispatch": self.dispatch.dead_letter_queue,
            },
            functions={
                "Api": self.functions.api,
                "BatchEvents": self.functions.batch_events,
                "Meter": self.functions.meter,
                "Dispatcher": self.functions.dispatcher,
            },
            duration_thresholds_ms={
                "Api": constants.FUNCTION_DURATION_P90_ALARM_MS["api"],
                "BatchEvents": constants.FUNCTION_DURATION_P90_ALARM_MS["batch_events"],
                "Meter": constants.FUNCTION_DURATION_P90_ALARM_MS["meter"],
                "Dispatcher": constants.FUNCTION_DURATION_P90_ALARM_MS["dispatcher"],
            },
            backlog_queues={"Dispatch": self.dispatch.queue},
            api_stage=self.api.rest_api.deployment_stage,
            meter=self.functions.meter,
        )
        self._build_outputs()
        nag_suppressions.acknowledge_control_plane(
            nag_suppressions.ControlPlaneFindings(
                stack=self,
                zones=self.zones,
                user_pool=self.auth.user_pool,
                api_function=self.functions.api,
                batch_events_function=self.functions.batch_events,
                meter_function=self.functions.meter,
                dispatcher_function=self.functions.dispatcher,
                jobs_table=self.data.jobs_table,
                ledger_table=self.data.ledger_table,
                computes_table=self.data.computes_table,
                email_topic_prefix=self.notifications.topic_name_prefix,
                dead_letter_queue=self.events.dead_letter_queue,
                rest_api=self.api.rest_api,
                health_method=self.api.health_method,
                console_distribution=self.console.distribution,
                console_log_bucket=self.console.log_bucket,
            )
        )

    def job_queue_arn_prefix(self, zone: ZoneNames) -> str:
        """``arn:…:batch:<zone region>:<account>:job-queue/remote-batch-<stage>-``."""
        return self.format_arn(
            service="batch", region=zone.region, resource="job-queue", resource_name=zone.prefix
        )

    def _build_outputs(self) -> None:
        CfnOutput(self, "ApiUrl", value=self.api.url, description="The API's base URL")
        CfnOutput(self, "UserPoolId", value=self.auth.user_pool.user_pool_id)
        CfnOutput(self, "UserPoolClientId", value=self.auth.client.user_pool_client_id)
        CfnOutput(self, "ConsoleUrl", value=self.console.url, description="The web console (and the API)")
        CfnOutput(self, "ConsoleBucketName", value=self.console.bucket.bucket_name)
        CfnOutput(self, "ConsoleDistributionId", value=self.console.distribution.distribution_id)
        CfnOutput(self, "ConsoleClientId", value=self.console.client.user_pool_client_id)
        CfnOutput(self, "ConsoleSignInUrl", value=self.console.domain.base_url())
        CfnOutput(self, "DeadLetterQueueUrl", value=self.events.dead_letter_queue.queue_url)
        CfnOutput(
            self,
            "OperatorTopicArn",
            value=self.monitoring.operator_topic.topic_arn,
            description="Subscribe the operator's email to the alarms",
        )
