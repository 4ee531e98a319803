"""One geo zone's AWS Batch compute: VPC, compute environment, job queue, job definition, job logs.

Issue 2 builds one managed EC2 (Spot) compute environment, one queue and one job definition that
every machine class routes to; ``routes`` is the seam where per-class queues and definitions plug in.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aws_cdk import RemovalPolicy, Size
from aws_cdk import aws_batch as batch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from functions.domain.machine_classes import MACHINE_CLASSES
from infra import constants


@dataclass(frozen=True)
class JobRoute:
    """Where a machine class's jobs go: the queue to submit to and the definition to run."""

    job_queue: batch.IJobQueue
    job_definition: batch.IJobDefinition


class BatchCompute(Construct):
    """A zone's Batch resources.

    Parameters
    ----------
    zone : str
        The geo zone's name as the API spells it (``UnitedStates``).
    bucket : s3.IBucket
        The zone's data bucket: the job role reads ``inputs/*`` and writes ``outputs/*`` of it.
    worker_image_dir : Path
        The worker's Docker build context (``worker/``); the image is built at deploy time only.

    Attributes
    ----------
    routes : dict[str, JobRoute]
        Every machine class name → its queue and job definition.
    job_queues : list[batch.JobQueue]
        The zone's queues (the EventBridge rule filters Batch events on them).
    job_log_group : logs.LogGroup
        Every job's console log (14-day retention).
    """

    def __init__(
        self, scope: Construct, construct_id: str, *, zone: str, bucket: s3.IBucket, worker_image_dir: Path
    ) -> None:
        super().__init__(scope, construct_id)
        self.zone = zone
        self.bucket = bucket
        self.vpc = self._build_vpc()
        self.compute_environment = self._build_compute_environment(self.vpc)
        self.job_queue = self._build_job_queue(self.compute_environment)
        self.job_log_group = self._build_job_log_group()
        self.job_role = self._build_job_role(bucket)
        self.job_definition = self._build_job_definition(worker_image_dir, self.job_role, self.job_log_group)
        route = JobRoute(job_queue=self.job_queue, job_definition=self.job_definition)
        self.routes = dict.fromkeys(MACHINE_CLASSES, route)
        self.job_queues = [self.job_queue]

    def _build_vpc(self) -> ec2.Vpc:
        flow_log_group = logs.LogGroup(
            self,
            "FlowLogGroup",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
        )
        return ec2.Vpc(
            self,
            "Vpc",
            max_azs=constants.VPC_MAX_AZS,
            nat_gateways=constants.VPC_NAT_GATEWAYS,
            subnet_configuration=[
                ec2.SubnetConfiguration(name="Public", subnet_type=ec2.SubnetType.PUBLIC),
                ec2.SubnetConfiguration(name="Compute", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            ],
            # Inputs and outputs go to S3 through the gateway endpoint, not through the NAT.
            gateway_endpoints={
                "S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3)
            },
            flow_logs={
                "All": ec2.FlowLogOptions(
                    destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_log_group),
                    traffic_type=ec2.FlowLogTrafficType.ALL,
                )
            },
        )

    def _build_compute_environment(self, vpc: ec2.Vpc) -> batch.ManagedEc2EcsComputeEnvironment:
        # IMDSv2 with a hop limit of 1: job containers (bridge network) cannot reach the instance
        # role's credentials; they get the job role from the ECS credential endpoint instead.
        launch_template = ec2.LaunchTemplate(
            self,
            "InstanceLaunchTemplate",
            require_imdsv2=True,
            http_put_response_hop_limit=1,
        )
        return batch.ManagedEc2EcsComputeEnvironment(
            self,
            "SpotComputeEnvironment",
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            spot=True,
            allocation_strategy=batch.AllocationStrategy.SPOT_PRICE_CAPACITY_OPTIMIZED,
            # Whole families ("m7i"): Batch picks the size that fits the queued jobs.
            instance_classes=[
                getattr(ec2.InstanceClass, family.upper()) for family in constants.COMPUTE_INSTANCE_FAMILIES
            ],
            use_optimal_instance_classes=False,
            images=[batch.EcsMachineImage(image_type=batch.EcsMachineImageType.ECS_AL2023)],
            minv_cpus=0,
            maxv_cpus=constants.COMPUTE_MAX_VCPUS,
            launch_template=launch_template,
        )

    def _build_job_queue(self, compute_environment: batch.IComputeEnvironment) -> batch.JobQueue:
        return batch.JobQueue(
            self,
            "JobQueue",
            compute_environments=[
                batch.OrderedComputeEnvironment(compute_environment=compute_environment, order=1)
            ],
        )

    def _build_job_log_group(self) -> logs.LogGroup:
        return logs.LogGroup(
            self,
            "JobLogGroup",
            retention=logs.RetentionDays.TWO_WEEKS,
            removal_policy=RemovalPolicy.DESTROY,
        )

    def _build_job_role(self, bucket: s3.IBucket) -> iam.Role:
        role = iam.Role(
            self,
            "JobRole",
            assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
            description=f"{constants.SERVICE_NAME} {self.zone} job: reads inputs/, writes outputs/",
        )
        # Object reads only, no s3:List*: a job fetches its own input by key and never needs to
        # see which other jobs exist.
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"],
                resources=[bucket.arn_for_objects(f"{constants.INPUTS_PREFIX}*")],
            )
        )
        bucket.grant_put(role, f"{constants.OUTPUTS_PREFIX}*")
        return role

    def _build_job_definition(
        self, worker_image_dir: Path, job_role: iam.IRole, log_group: logs.ILogGroup
    ) -> batch.EcsJobDefinition:
        container = batch.EcsEc2ContainerDefinition(
            self,
            "WorkerContainer",
            image=ecs.ContainerImage.from_asset(
                str(worker_image_dir), platform=ecr_assets.Platform.LINUX_AMD64
            ),
            cpu=constants.JOB_DEFAULT_VCPUS,
            memory=Size.gibibytes(constants.JOB_DEFAULT_MEMORY_GIB),
            privileged=False,
            job_role=job_role,
            logging=ecs.LogDrivers.aws_logs(
                stream_prefix=constants.JOB_LOG_STREAM_PREFIX, log_group=log_group
            ),
        )
        return batch.EcsJobDefinition(
            self,
            "WorkerJobDefinition",
            container=container,
            retry_attempts=constants.JOB_MAX_ATTEMPTS,
            # Retry only what the infrastructure lost (Spot reclaim, host failure); a job's own
            # failure is final.
            retry_strategies=[
                batch.RetryStrategy.of(
                    batch.Action.RETRY,
                    batch.Reason.custom(on_status_reason=constants.JOB_RETRY_STATUS_REASON),
                ),
                batch.RetryStrategy.of(batch.Action.EXIT, batch.Reason.custom(on_reason="*")),
            ],
        )
