"""One geo zone's AWS Batch compute: VPC, compute environments, a job queue per machine class and a job
definition per machine class and Python version, the worker images, job roles and job logs.

Machine classes share compute pools (``constants.COMPUTE_POOLS``, per region: general purpose, high
memory, one per GPU type); each pool has a Spot and an on-demand compute environment and its own
launch template (encrypted gp3 root volume sized for the pool). A class's queue lists the pool's two
environments, Spot first or, where Spot is scarce (``on_demand_first``), on-demand first, cancels a
job that waits at its head for capacity or behind a misconfiguration
(``functions/domain/queue_limits.py``), so no job is stranded in Queued, and schedules by fair share
across accounts (the zone's fair-share scheduling policy; ``functions/domain/fair_share.py``).

GPU classes run the CUDA image (``worker/Dockerfile.gpu``), the others the CPU image
(``worker/Dockerfile``), each built once per Python version a job may choose
(``functions.domain.runtime.PYTHON_VERSIONS``, the ``PYTHON_VERSION`` build argument): same build
context and worker code, all built at deploy time only. AWS Batch cannot override a definition's
image per job, so a class has one definition per version and the api submits to the job's.

Environments (issue 24): the zone's **build queue** runs each environment's build (``python -m worker
build`` in the CPU image of its Python: one build definition per version) on the General pool's
on-demand compute environment, ahead of the class queues sharing it; the **build role** reads the
build's request and writes its outcome (``environment-builds/*``), the builds (``environments/*``)
of this zone's bucket and the other zones' (each gets a copy), and the build's log stream
(``environments/*`` streams of the job log group). Jobs read ``environments/*`` of their zone's bucket
(the job role) and unpack a build once per instance into ``constants.ENVIRONMENT_CACHE_PATH``, a host
folder every job definition mounts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Size, Stack
from aws_cdk import aws_batch as batch
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_ecr_assets as ecr_assets
from aws_cdk import aws_ecs as ecs
from aws_cdk import aws_iam as iam
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from functions.domain.batch_retries import MAX_ATTEMPTS, RETRY_STATUS_REASON
from functions.domain.environment_builds import (
    BUILD_MEMORY_MIB,
    BUILD_REQUESTS_PREFIX,
    BUILD_TIMEOUT_SECONDS,
    BUILD_VCPUS,
)
from functions.domain.fair_share import SHARE_DECAY_SECONDS
from functions.domain.job_policy import job_policy_statements
from functions.domain.machine_classes import MACHINE_CLASSES, MachineClass
from functions.domain.queue_limits import QUEUE_LIMITS
from functions.domain.runtime import PYTHON_VERSIONS
from infra import constants
from infra.naming import ZoneNames

# Build context hygiene: the asset hash (and the deploy-time build) skips bytecode caches.
_WORKER_IMAGE_EXCLUDE = ["**/__pycache__", "**/*.pyc", "**/.*"]
CPU_DOCKERFILE = "Dockerfile"
GPU_DOCKERFILE = "Dockerfile.gpu"
#: The Dockerfiles' build argument naming the job's Python (``major.minor``).
PYTHON_VERSION_BUILD_ARG = "PYTHON_VERSION"
#: Where the builds live in every zone's bucket (``worker/environments.py``).
ENVIRONMENTS_PREFIX = "environments/"
#: The worker's variable naming the host cache of environments (``worker/environments.py``).
ENVIRONMENT_CACHE_VARIABLE = "REMOTE_BATCH_ENVIRONMENT_CACHE"
#: The build job's container command after the image's entrypoint: ``python -m worker build``.
BUILD_COMMAND = ["build"]
BUILD_LOG_STREAM_PREFIX = "build"


def _instance_class(family: str) -> ec2.InstanceClass:
    instance_class: ec2.InstanceClass = getattr(ec2.InstanceClass, family.upper())
    return instance_class


def _cancel_stranded_jobs(queue: batch.JobQueue) -> None:
    """Cancel a job that waits RUNNABLE at the queue's head past ``QUEUE_LIMITS``: every reason AWS
    Batch can act on (CDK's enum lacks EC2_INSTANCE_CONFIGURATION_UNSUPPORTED, so the actions go on the
    L1 resource). Batch writes "Canceled by JobStateTimeLimit action due to reason: <reason>" on the
    job; batch_events turns it into the user's statusReason (or the build's error)."""
    cfn_queue = queue.node.default_child
    if not isinstance(cfn_queue, batch.CfnJobQueue):
        raise TypeError(f"{queue.node.path} has no AWS::Batch::JobQueue resource")
    cfn_queue.job_state_time_limit_actions = [
        batch.CfnJobQueue.JobStateTimeLimitActionProperty(
            action="CANCEL",
            max_time_seconds=limit.wait_seconds,
            reason=limit.reason,
            state="RUNNABLE",
        )
        for limit in QUEUE_LIMITS
    ]


@dataclass(frozen=True)
class PoolEnvironments:
    """A compute pool's two environments and the order its queues try them in."""

    pool: constants.ComputePool
    spot: batch.ManagedEc2EcsComputeEnvironment
    on_demand: batch.ManagedEc2EcsComputeEnvironment
    launch_template: ec2.LaunchTemplate

    @property
    def in_order(self) -> list[batch.ManagedEc2EcsComputeEnvironment]:
        """On-demand then Spot for an ``on_demand_first`` pool, Spot then on-demand otherwise."""
        if self.pool.on_demand_first:
            return [self.on_demand, self.spot]
        return [self.spot, self.on_demand]


@dataclass(frozen=True)
class JobRoute:
    """Where a machine class's jobs go: the queue to submit to and, per Python version
    (``major.minor``), the definition to run."""

    job_queue: batch.JobQueue
    job_definitions: dict[str, batch.EcsJobDefinition]


class BatchCompute(Construct):
    """A zone's Batch resources.

    Parameters
    ----------
    names : ZoneNames
        The zone's deterministic names (queues, job definitions, job log group).
    bucket : s3.IBucket
        The zone's data bucket: the job role reads ``inputs/*`` and writes ``outputs/*`` of it.
    availability_zones : tuple[str, ...]
        The VPC's zones (explicit: synth needs no account lookup).
    worker_image_dir : Path
        The worker's Docker build context (``worker/``, with ``Dockerfile`` and ``Dockerfile.gpu``);
        the images are built at deploy time only.
    pools : Mapping[str, ComputePool], optional
        The region's compute pools (``DeploymentConfig.instance_pools``); default ``COMPUTE_POOLS``.
    replica_buckets : Sequence[str], optional
        The other zones' bucket names: a build made here is copied to each (the build role may write
        their ``environments/*``).

    Attributes
    ----------
    routes : dict[str, JobRoute]
        Every machine class name → its queue and its job definition per Python version.
    pools : dict[str, PoolEnvironments]
        Every compute pool's Spot and on-demand environments and launch template.
    images : dict[tuple[str, str], ecs.ContainerImage]
        ``("cpu" | "gpu", "3.12")``: the worker image a job definition runs.
    job_log_group : logs.LogGroup
        Every job's console log (14-day retention).
    job_role : iam.Role
        What a job's code may do: read its zone's ``inputs/``, write its ``outputs/``.
    execution_role : iam.Role
        What ECS needs to start a job: pull the worker image, write the job log.
    instance_role : iam.Role
        The container instances' role (ECS agent).
    build_queue : batch.JobQueue
        The environments' build queue.
    build_definitions : dict[str, batch.EcsJobDefinition]
        Python version → the build job definition (the CPU image of that Python).
    build_role : iam.Role
        What a build may do (see the module docstring).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        names: ZoneNames,
        bucket: s3.IBucket,
        availability_zones: tuple[str, ...],
        worker_image_dir: Path,
        pools: Mapping[str, constants.ComputePool] | None = None,
        replica_buckets: Sequence[str] = (),
    ) -> None:
        super().__init__(scope, construct_id)
        self.names = names
        self.vpc = self._build_vpc(availability_zones)
        self.security_group = self._build_security_group()
        self.instance_role = self._build_instance_role()
        self.pools = {
            name: self._build_pool(pool) for name, pool in (pools or constants.COMPUTE_POOLS).items()
        }
        self.job_log_group = self._build_job_log_group()
        self.job_role = self._build_job_role(bucket)
        self.execution_role = self._build_execution_role()
        self.images = {
            (kind, version): self._build_worker_image(worker_image_dir, kind, version)
            for kind in ("cpu", "gpu")
            for version in PYTHON_VERSIONS
        }
        self.fair_share = self._build_fair_share()
        self.routes = {
            name: self._build_route(machine_class) for name, machine_class in MACHINE_CLASSES.items()
        }
        self.build_role = self._build_build_role(bucket, replica_buckets)
        self.build_queue = self._build_build_queue()
        self.build_definitions = {
            version: self._build_build_definition(version) for version in PYTHON_VERSIONS
        }
        self.dedicated_instance_role, self.batch_service_role = self._build_dedicated_roles()
        self.compute_template = self._build_compute_template()

    @property
    def job_queues(self) -> list[batch.JobQueue]:
        return [route.job_queue for route in self.routes.values()]

    @property
    def job_definitions(self) -> list[batch.EcsJobDefinition]:
        return [definition for route in self.routes.values() for definition in route.job_definitions.values()]

    # Network and instances

    def _build_vpc(self, availability_zones: tuple[str, ...]) -> ec2.Vpc:
        flow_log_group = logs.LogGroup(
            self,
            "FlowLogGroup",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
        )
        return ec2.Vpc(
            self,
            "Vpc",
            availability_zones=list(availability_zones),
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

    def _build_security_group(self) -> ec2.SecurityGroup:
        # Instances only call out (S3, ECR, Batch, Logs, what a job downloads); nothing calls in.
        return ec2.SecurityGroup(
            self,
            "InstanceSecurityGroup",
            vpc=self.vpc,
            description=f"{constants.SERVICE_NAME} {self.names.zone} Batch instances: egress only",
            allow_all_outbound=True,
        )

    def _build_instance_role(self) -> iam.Role:
        return iam.Role(
            self,
            "InstanceRole",
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"{constants.SERVICE_NAME} {self.names.zone} Batch container instances (ECS agent)",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name(
                    "service-role/AmazonEC2ContainerServiceforEC2Role"
                )
            ],
        )

    def _build_launch_template(self, pool: constants.ComputePool) -> ec2.LaunchTemplate:
        # IMDSv2 with a hop limit of 1: job containers (bridge network) cannot reach the instance
        # role's credentials; they get the job role from the ECS credential endpoint instead.
        # The root volume holds the images and every job's container layer on the instance: sized
        # per pool (a CUDA image alone is several GB), encrypted, deleted with the instance.
        # At boot, the host folder jobs unpack environments into (AWS Batch takes a launch
        # template's user data in MIME multi-part form only): root's, 0755, as the supervisor (root)
        # requires of a cache it uses; the user's code (the image's worker user) only reads it.
        user_data = ec2.MultipartUserData()
        commands = ec2.UserData.for_linux()
        user_data.add_user_data_part(commands, ec2.MultipartBody.SHELL_SCRIPT, True)
        user_data.add_commands(f"install -d -m 0755 -o 0 -g 0 {constants.ENVIRONMENT_CACHE_PATH}")
        return ec2.LaunchTemplate(
            self,
            f"{pool.name}LaunchTemplate",
            require_imdsv2=True,
            http_put_response_hop_limit=1,
            user_data=user_data,
            block_devices=[
                ec2.BlockDevice(
                    device_name=constants.ROOT_DEVICE_NAME,
                    volume=ec2.BlockDeviceVolume.ebs(
                        pool.root_volume_gib,
                        encrypted=True,
                        delete_on_termination=True,
                        volume_type=ec2.EbsDeviceVolumeType.GP3,
                    ),
                )
            ],
        )

    def _build_pool(self, pool: constants.ComputePool) -> PoolEnvironments:
        launch_template = self._build_launch_template(pool)
        return PoolEnvironments(
            pool=pool,
            spot=self._build_compute_environment(pool, launch_template, spot=True),
            on_demand=self._build_compute_environment(pool, launch_template, spot=False),
            launch_template=launch_template,
        )

    def _build_compute_environment(
        self, pool: constants.ComputePool, launch_template: ec2.LaunchTemplate, *, spot: bool
    ) -> batch.ManagedEc2EcsComputeEnvironment:
        image_type = (
            batch.EcsMachineImageType.ECS_AL2023_NVIDIA if pool.gpu else batch.EcsMachineImageType.ECS_AL2023
        )
        allocation = (
            batch.AllocationStrategy.SPOT_PRICE_CAPACITY_OPTIMIZED
            if spot
            else batch.AllocationStrategy.BEST_FIT_PROGRESSIVE
        )
        return batch.ManagedEc2EcsComputeEnvironment(
            self,
            f"{pool.name}{'Spot' if spot else 'OnDemand'}ComputeEnvironment",
            compute_environment_name=self.names.compute_environment_name(pool.name, spot=spot),
            vpc=self.vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            spot=spot,
            allocation_strategy=allocation,
            # Whole families ("m7i"): Batch picks the size that fits the queued jobs.
            instance_classes=[_instance_class(name) for name in pool.instance_types if "." not in name],
            instance_types=[ec2.InstanceType(name) for name in pool.instance_types if "." in name],
            use_optimal_instance_classes=False,
            images=[batch.EcsMachineImage(image_type=image_type)],
            minv_cpus=0,
            maxv_cpus=pool.max_vcpus,
            security_groups=[self.security_group],
            instance_role=self.instance_role,
            launch_template=launch_template,
        )

    # Dedicated computes: made at run time by the control plane (``functions/logic/computes.py``)

    def _build_dedicated_roles(self) -> tuple[iam.Role, iam.Role]:
        """The roles the control plane passes to CreateComputeEnvironment: the container instances'
        (with its instance profile) and the Batch service role, both with fixed names."""
        instance_role = iam.Role(
            self,
            "DedicatedInstanceRole",
            role_name=self.names.dedicated_instance_role_name,
            assumed_by=iam.ServicePrincipal("ec2.amazonaws.com"),
            description=f"{constants.SERVICE_NAME} {self.names.zone} dedicated compute instances (ECS agent)",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name(
                    "service-role/AmazonEC2ContainerServiceforEC2Role"
                )
            ],
        )
        self.dedicated_instance_profile = iam.InstanceProfile(
            self,
            "DedicatedInstanceProfile",
            role=instance_role,
            instance_profile_name=self.names.dedicated_instance_role_name,
        )
        service_role = iam.Role(
            self,
            "BatchServiceRole",
            role_name=self.names.batch_service_role_name,
            assumed_by=iam.ServicePrincipal("batch.amazonaws.com"),
            description=f"{constants.SERVICE_NAME} {self.names.zone} dedicated compute environments",
            managed_policies=[
                iam.ManagedPolicy.from_aws_managed_policy_name("service-role/AWSBatchServiceRole")
            ],
        )
        return instance_role, service_role

    def _build_compute_template(self) -> ssm.StringParameter:
        """``functions.settings.ComputeTemplateSettings`` as JSON in SSM: the shared pools' network,
        instance types, launch templates and AMI types per class, and the dedicated roles."""
        classes = {name: self.pools[constants.MACHINE_CLASS_POOLS[name]] for name in MACHINE_CLASSES}
        template = {
            "subnets": [subnet.subnet_id for subnet in self.vpc.private_subnets],
            "securityGroups": [self.security_group.security_group_id],
            "instanceRole": self.dedicated_instance_profile.instance_profile_arn,
            "serviceRole": self.batch_service_role.role_arn,
            "instanceTypes": {name: list(p.pool.instance_types) for name, p in classes.items()},
            "launchTemplates": {name: p.launch_template.launch_template_id for name, p in classes.items()},
            "imageTypes": {
                name: "ECS_AL2023_NVIDIA" if p.pool.gpu else "ECS_AL2023" for name, p in classes.items()
            },
        }
        return ssm.StringParameter(
            self,
            "ComputeTemplate",
            parameter_name=self.names.compute_template_parameter_name,
            description=f"{constants.SERVICE_NAME} {self.names.zone} dedicated compute template",
            string_value=Stack.of(self).to_json_string(template),
        )

    # Jobs

    def _build_job_log_group(self) -> logs.LogGroup:
        return logs.LogGroup(
            self,
            "JobLogGroup",
            log_group_name=self.names.job_log_group_name,
            retention=logs.RetentionDays.TWO_WEEKS,
            removal_policy=RemovalPolicy.DESTROY,
        )

    def _build_job_role(self, bucket: s3.IBucket) -> iam.Role:
        role = iam.Role(
            self,
            "JobRole",
            role_name=self.names.job_role_name,
            assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
            description=f"{constants.SERVICE_NAME} {self.names.zone} job: reads inputs/, writes outputs/",
        )
        # Object reads of inputs/ and puts to outputs/ only (no s3:List*): the same statements the
        # local stack gives each job's user, narrowed there to the job's own keys.
        for statement in job_policy_statements(bucket.bucket_arn):
            role.add_to_policy(iam.PolicyStatement.from_json(statement))
        # The job's environment, fetched by its supervisor (never written by a job).
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject"], resources=[bucket.arn_for_objects(f"{ENVIRONMENTS_PREFIX}*")]
            )
        )
        return role

    def _build_execution_role(self) -> iam.Role:
        # One for every job definition (the image pull and log writes are the same for all classes);
        # the image asset and the awslogs driver grant it what they need.
        role = iam.Role(
            self,
            "ExecutionRole",
            role_name=self.names.execution_role_name,
            assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
            description=f"{constants.SERVICE_NAME} {self.names.zone} job start: image pull, job log",
        )
        self._grant_environment_images(role)
        return role

    def _grant_environment_images(self, role: iam.Role) -> None:
        """What starting a job in an environment's own image takes (``functions.domain.images``):
        pulling from the deployment's ECR repositories named ``<prefix>images/*`` (in any region),
        and reading a private registry's credentials from secrets named ``remote-batch/<stage>/registry/*``
        (ECS's private registry authentication), nothing else. ``ecr:GetAuthorizationToken``, which
        every ECR pull needs, supports no resource-level permissions (Service Authorization
        Reference, Amazon ECR: no resource type), so it is granted on "*", as the worker image's
        asset grant already does."""
        stack = Stack.of(self)
        repositories = stack.format_arn(
            service="ecr",
            region="*",
            resource="repository",
            resource_name=f"{self.names.image_repository_prefix}*",
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=[
                    "ecr:BatchCheckLayerAvailability",
                    "ecr:BatchGetImage",
                    "ecr:GetDownloadUrlForLayer",
                ],
                resources=[repositories],
            )
        )
        role.add_to_policy(iam.PolicyStatement(actions=["ecr:GetAuthorizationToken"], resources=["*"]))
        secrets = stack.format_arn(
            service="secretsmanager",
            region="*",  # a secret in another region is named by its full ARN (ECS allows it)
            resource="secret",
            resource_name=f"{self.names.registry_secret_prefix}*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        role.add_to_policy(
            iam.PolicyStatement(actions=["secretsmanager:GetSecretValue"], resources=[secrets])
        )

    def _build_worker_image(self, worker_image_dir: Path, kind: str, version: str) -> ecs.ContainerImage:
        # One asset per image (CPU, GPU) and Python version for all job definitions; built and pushed
        # by `cdk deploy`, never at synth. All use the same build context, so they carry the same
        # worker code; the build argument picks the interpreter.
        asset = ecr_assets.DockerImageAsset(
            self,
            f"{'Gpu' if kind == 'gpu' else ''}WorkerImagePy{version.replace('.', '')}",
            directory=str(worker_image_dir),
            file=GPU_DOCKERFILE if kind == "gpu" else CPU_DOCKERFILE,
            build_args={PYTHON_VERSION_BUILD_ARG: version},
            platform=ecr_assets.Platform.LINUX_AMD64,
            exclude=_WORKER_IMAGE_EXCLUDE,
        )
        return ecs.ContainerImage.from_docker_image_asset(asset)

    def _build_route(self, machine_class: MachineClass) -> JobRoute:
        pool = self.pools[constants.MACHINE_CLASS_POOLS[machine_class.name]]
        return JobRoute(
            job_queue=self._build_job_queue(machine_class, pool),
            job_definitions={
                version: self._build_job_definition(machine_class, version) for version in PYTHON_VERSIONS
            },
        )

    def _build_fair_share(self) -> batch.FairshareSchedulingPolicy:
        """The zone's fair-share scheduling policy, on every shared job queue: accounts' shares
        (``functions.domain.fair_share``), all of weight 1, usage remembered ``SHARE_DECAY_SECONDS``.
        Share identifiers count per queue, so one policy serves every class's queue."""
        return batch.FairshareSchedulingPolicy(
            self,
            "FairShare",
            share_decay=Duration.seconds(SHARE_DECAY_SECONDS),
        )

    def _build_job_queue(self, machine_class: MachineClass, pool: PoolEnvironments) -> batch.JobQueue:
        first, second = pool.in_order
        queue = batch.JobQueue(
            self,
            f"{machine_class.name}JobQueue",
            job_queue_name=self.names.job_queue_name(machine_class.name),
            priority=constants.JOB_QUEUE_PRIORITY,
            scheduling_policy=self.fair_share,
            compute_environments=[
                batch.OrderedComputeEnvironment(compute_environment=first, order=constants.FIRST_ORDER),
                batch.OrderedComputeEnvironment(compute_environment=second, order=constants.SECOND_ORDER),
            ],
        )
        _cancel_stranded_jobs(queue)
        return queue

    # Environments' builds

    def _build_build_role(self, bucket: s3.IBucket, replica_buckets: Sequence[str]) -> iam.Role:
        role = iam.Role(
            self,
            "BuildRole",
            assumed_by=iam.ServicePrincipal("ecs-tasks.amazonaws.com"),
            description=f"{constants.SERVICE_NAME} {self.names.zone} environment build: builds, build log",
        )
        requests = bucket.arn_for_objects(f"{BUILD_REQUESTS_PREFIX}*")
        builds = [bucket.arn_for_objects(f"{ENVIRONMENTS_PREFIX}*")]
        builds += [
            f"arn:{Stack.of(self).partition}:s3:::{name}/{ENVIRONMENTS_PREFIX}*" for name in replica_buckets
        ]
        # Its request in, its outcome out; a build reused (read) or stored (in parts: a failed
        # upload aborts its parts) in every zone.
        role.add_to_policy(
            iam.PolicyStatement(actions=["s3:GetObject", "s3:PutObject"], resources=[requests])
        )
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"], resources=builds
            )
        )
        # Whether a build exists: listing its manifest's key (without s3:ListBucket, S3 answers a
        # missing key's GetObject with 403, not 404), narrowed to environments/.
        bucket_arns = [bucket.bucket_arn]
        bucket_arns += [f"arn:{Stack.of(self).partition}:s3:::{name}" for name in replica_buckets]
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["s3:ListBucket"],
                resources=bucket_arns,
                conditions={"StringLike": {"s3:prefix": [f"{ENVIRONMENTS_PREFIX}*"]}},
            )
        )
        # The build log: the environments' streams of the zone's job log group (named by the api).
        streams = Stack.of(self).format_arn(
            service="logs",
            resource="log-group",
            resource_name=f"{self.names.job_log_group_name}:log-stream:{ENVIRONMENTS_PREFIX}*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        role.add_to_policy(
            iam.PolicyStatement(actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[streams])
        )
        return role

    def _build_build_queue(self) -> batch.JobQueue:
        pool = self.pools[constants.BUILD_POOL]
        queue = batch.JobQueue(
            self,
            "BuildJobQueue",
            job_queue_name=self.names.build_queue_name,
            priority=constants.BUILD_QUEUE_PRIORITY,
            compute_environments=[
                batch.OrderedComputeEnvironment(
                    compute_environment=pool.on_demand, order=constants.FIRST_ORDER
                )
            ],
        )
        _cancel_stranded_jobs(queue)
        return queue

    def _build_build_definition(self, version: str) -> batch.EcsJobDefinition:
        region = Stack.of(self).region
        suffix = f"Py{version.replace('.', '')}"
        container = batch.EcsEc2ContainerDefinition(
            self,
            f"BuildContainer{suffix}",
            image=self.images[("cpu", version)],
            cpu=BUILD_VCPUS,
            memory=Size.mebibytes(BUILD_MEMORY_MIB),
            command=BUILD_COMMAND,
            environment={"AWS_REGION": region, "AWS_DEFAULT_REGION": region},
            # The image's unprivileged user: its default one, root, is the job supervisor's.
            user=str(constants.WORKER_UID),
            privileged=False,
            job_role=self.build_role,
            execution_role=self.execution_role,
            logging=ecs.LogDrivers.aws_logs(
                stream_prefix=BUILD_LOG_STREAM_PREFIX, log_group=self.job_log_group
            ),
        )
        return batch.EcsJobDefinition(
            self,
            f"BuildJobDefinition{suffix}",
            job_definition_name=self.names.build_job_definition_name(version),
            container=container,
            timeout=Duration.seconds(BUILD_TIMEOUT_SECONDS),
            retry_attempts=MAX_ATTEMPTS,
            # A build lost with its host is built again; a build's own failure is its outcome.
            retry_strategies=[
                batch.RetryStrategy.of(
                    batch.Action.RETRY,
                    batch.Reason.custom(on_status_reason=RETRY_STATUS_REASON),
                ),
                batch.RetryStrategy.of(batch.Action.EXIT, batch.Reason.custom(on_reason="*")),
            ],
        )

    def _build_job_definition(self, machine_class: MachineClass, version: str) -> batch.EcsJobDefinition:
        region = Stack.of(self).region
        suffix = f"Py{version.replace('.', '')}"
        container = batch.EcsEc2ContainerDefinition(
            self,
            f"{machine_class.name}Container{suffix}",
            image=self.images[("gpu" if machine_class.gpus else "cpu", version)],
            cpu=machine_class.vcpus,
            memory=Size.mebibytes(machine_class.memory_mib),
            gpu=machine_class.gpus or None,
            # boto3 in the job finds its zone's bucket endpoint without instance metadata (IMDS is
            # out of the container's reach: hop limit 1).
            environment={
                "AWS_REGION": region,
                "AWS_DEFAULT_REGION": region,
                ENVIRONMENT_CACHE_VARIABLE: constants.ENVIRONMENT_CACHE_PATH,
            },
            # The instance's cache of unpacked environments, shared by the jobs on it: read-write for
            # the supervisor (root, in the image), which starts the user's code as the image's
            # worker user, for whom the cache's builds are read only (worker/job_user.py).
            volumes=[
                batch.EcsVolume.host(
                    name="environments",
                    host_path=constants.ENVIRONMENT_CACHE_PATH,
                    container_path=constants.ENVIRONMENT_CACHE_PATH,
                    readonly=False,
                )
            ],
            linux_parameters=batch.LinuxParameters(
                self,
                f"{machine_class.name}LinuxParameters{suffix}",
                shared_memory_size=Size.mebibytes(
                    machine_class.memory_mib // constants.SHARED_MEMORY_FRACTION
                ),
            ),
            privileged=False,
            job_role=self.job_role,
            execution_role=self.execution_role,
            logging=ecs.LogDrivers.aws_logs(
                stream_prefix=constants.JOB_LOG_STREAM_PREFIX, log_group=self.job_log_group
            ),
        )
        return batch.EcsJobDefinition(
            self,
            f"{machine_class.name}JobDefinition{suffix}",
            job_definition_name=self.names.job_definition_name(machine_class.name, version),
            container=container,
            retry_attempts=MAX_ATTEMPTS,
            # Retry only what the infrastructure lost (Spot reclaim, host failure); a job's own
            # failure is final.
            retry_strategies=[
                batch.RetryStrategy.of(
                    batch.Action.RETRY,
                    batch.Reason.custom(on_status_reason=RETRY_STATUS_REASON),
                ),
                batch.RetryStrategy.of(batch.Action.EXIT, batch.Reason.custom(on_reason="*")),
            ],
        )
