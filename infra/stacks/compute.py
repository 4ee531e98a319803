"""A geo zone's stack, in the zone's region: its data bucket, its AWS Batch compute and, outside the
home region, the rule that forwards its Batch events to the home region's bus (with an alarm)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aws_cdk import CfnOutput, Stack
from constructs import Construct

from infra import constants, nag_suppressions
from infra.constructs.batch_compute import BatchCompute
from infra.constructs.data import DataBucket
from infra.constructs.events import BatchEventForwarder
from infra.constructs.monitoring import Monitoring
from infra.naming import ZoneNames


class ComputeStack(Stack):
    """One geo zone's data and compute.

    Parameters
    ----------
    names : ZoneNames
        The zone's deterministic resource names (the control plane uses the same).
    home_region : str
        The control plane's region; a stack elsewhere forwards its Batch events there.
    availability_zones : tuple[str, ...]
        The VPC's availability zones in ``names.region``.
    worker_image_dir : Path
        The job containers' Docker build context (CPU and GPU images, built at deploy time only).
    pools : Mapping[str, ComputePool], optional
        The region's compute pools, already checked against the region's instance offerings
        (``DeploymentConfig.instance_pools``); default ``COMPUTE_POOLS``.
    **kwargs
        Passed to ``Stack`` (description, env, …).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        names: ZoneNames,
        home_region: str,
        availability_zones: tuple[str, ...],
        worker_image_dir: Path,
        pools: Mapping[str, constants.ComputePool] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.names = names
        self.data = DataBucket(self, "Data", bucket_name=names.bucket_name)
        self.compute = BatchCompute(
            self,
            "Compute",
            names=names,
            bucket=self.data.bucket,
            availability_zones=availability_zones,
            worker_image_dir=worker_image_dir,
            pools=pools,
        )
        self.forwarder: BatchEventForwarder | None = None
        self.monitoring: Monitoring | None = None
        if names.region != home_region:
            self._build_forwarding(home_region)
        self._build_outputs()
        nag_suppressions.acknowledge_compute(
            self,
            bucket=self.data.bucket,
            instance_role=self.compute.instance_role,
            job_role=self.compute.job_role,
            execution_role=self.compute.execution_role,
            dedicated_roles=(self.compute.dedicated_instance_role, self.compute.batch_service_role),
            dead_letter_queue=None if self.forwarder is None else self.forwarder.dead_letter_queue,
            names=self.names,
        )

    def _build_forwarding(self, home_region: str) -> None:
        self.forwarder = BatchEventForwarder(
            self,
            "EventForwarding",
            job_queue_arn_prefix=self.format_arn(
                service="batch", resource="job-queue", resource_name=self.names.prefix
            ),
            home_event_bus_arn=self.format_arn(
                service="events", region=home_region, resource="event-bus", resource_name="default"
            ),
        )
        self.monitoring = Monitoring(
            self, "Monitoring", dead_letter_queues={"EventForwarding": self.forwarder.dead_letter_queue}
        )

    def _build_outputs(self) -> None:
        CfnOutput(self, "DataBucketName", value=self.data.bucket.bucket_name)
        CfnOutput(self, "JobLogGroupName", value=self.compute.job_log_group.log_group_name)
        if self.monitoring is not None:
            CfnOutput(
                self,
                "OperatorTopicArn",
                value=self.monitoring.operator_topic.topic_arn,
                description="Subscribe the operator's email to this region's alarms",
            )
