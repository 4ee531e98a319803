"""Every cdk-nag (AwsSolutions) finding this app accepts, with its reason, in one reviewable place.

Each acknowledgment is attached to the narrowest construct it concerns (a role, a method, a queue),
never to the whole app. IAM5 ids are granular (``AwsSolutions-IAM5[Resource::…]``): a new wildcard
that nobody reviewed still fails the synth.

The stacks call ``acknowledge_control_plane`` / ``acknowledge_compute`` with their own constructs
(typed by CDK's own classes), so this module never imports a stack.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from aws_cdk import Acknowledgment, CfnResource, Stack, Token, Validations
from aws_cdk import aws_lambda as lambda_
from constructs import IConstruct

from functions.domain.machine_classes import MACHINE_CLASSES
from infra.naming import ZoneNames

Finding = tuple[str, str]
"""(cdk-nag rule id, reason)."""

# Reasons shared by several scopes.
_XRAY_DESCRIBE_SMS = (
    "Resource '*' only for actions that have no resource-level permissions: xray:PutTraceSegments and "
    "xray:PutTelemetryRecords (active tracing), batch:DescribeJobs, batch:ListJobs, batch:DescribeJobQueues, "
    "batch:DescribeComputeEnvironments, batch:DescribeJobDefinitions, and sns:Publish to a phone number "
    "(SMS has no ARN). Data actions and batch:UpdateJobQueue/UpdateComputeEnvironment are all scoped to "
    "the service's own resources."
)
_S3_GRANT = (
    "s3:GetObject/PutObject/DeleteObject on the geo zones' data buckets' objects: the function presigns "
    "and reads/deletes any job's inputs/outputs, whose keys are job ids known only at run time."
)
_TABLE_INDEXES = (
    "grant_read_write_data adds '<table>/index/*' so Query can use the table's own indexes (byAccount, "
    "metered, byTime); it grants nothing beyond the service's tables."
)
_ARRAY_RESULTS = (
    "PutObject under outputs/ only: an array's result document, outputs/<arrayId>/result.json, assembled "
    "from its children's results when the array ends; the array id is known only at submit time."
)
_INPUT_COPIES = (
    "PutObject under inputs/ only: a released child's copies of its parents' outputs "
    "(inputs/<childId>/from/<parentId>/...) and their manifests, made within the bucket by CopyObject; "
    "the child id is known only at submit time."
)
_JOB_ARNS = (
    "batch:SubmitJob, batch:TagResource (tag on create, only the service's tag keys) and "
    "batch:TerminateJob are authorized on the job's ARN, which exists only after SubmitJob; scoped to "
    "jobs in this account and the geo zone's region."
)
_JOB_DEFINITION_REVISIONS = (
    "SubmitJob and its tag-on-create batch:TagResource are authorized on the job definition's ARN with "
    "its revision (job-definition/<name>:<n>), which grows with every deploy that changes it; ':*' "
    "allows every revision. A machine class has one definition per Python version a job may choose "
    "(<class>-py311, -py312, -py313): '-py3*' names them all, the class's and no other."
)
_JOB_LOG_STREAMS = (
    "'<job log group>:log-stream:*' names the group's log streams (one per job attempt, named by Batch "
    "at run time); reading and deleting them is limited to the one job log group."
)
_BUILD_DEFINITIONS = (
    "PUT /environments/{name} submits the build on the build definition of the environment's Python "
    "(<stage>-build-py3XY, every revision): the versions are one pattern, not one ARN each."
)
_TOPIC_KEY = (
    "Publishing to the KMS-encrypted email topics needs kms:GenerateDataKey* and kms:Decrypt on that one key."
)
_EMAIL_TOPICS = (
    "One email topic per account (SNS allows 200 filter policies per shared topic), created when the "
    "account sets its email, named '<stage prefix>-email-<digest>': the grant covers that prefix only."
)
_COMPUTES = (
    "Dedicated computes' compute environments and job queues are created at run time, one per compute, "
    "named '<stage prefix>-cmp-<account digest>-<name>': the grant covers that name prefix only."
)
_IMAGE_REPOSITORIES = (
    "Environments name their own images in ECR repositories created by the operator at run time under "
    "the stage's prefix '<stage prefix>images/' (docs/deploy.md), in any region: the api resolves their "
    "tags (ecr:DescribeImages) and the execution role pulls them, in those repositories only."
)
_REGISTRY_SECRETS = (
    "A private registry's credentials are Secrets Manager secrets the operator creates under "
    "'remote-batch/<stage>/registry/' (docs/deploy.md); the execution role reads those only, never any "
    "other secret."
)
_IMAGE_JOB_DEFINITIONS = (
    "An image environment's job definitions are registered at run time, one per (image digest, machine "
    "class), named '<class definition>-py3XY-img-<hash>': RegisterJobDefinition is allowed on those "
    "names only."
)
_LAMBDA_RUNTIME = (
    "Python 3.12 is pinned on purpose: the public Powertools v3 layer (with pydantic) is built per "
    "Python version and the layer ARN in infra/constants.py names python312; move both together."
)


@dataclasses.dataclass(frozen=True, slots=True)
class ControlPlaneFindings:
    """The control plane stack's constructs that carry accepted findings (the stack passes its own).

    ``jobs_table``/``ledger_table``/``computes_table`` are the DynamoDB tables (for their
    ``<LogicalId.Arn>/index/*``), ``email_topic_prefix`` the name prefix of the per-account email
    topics, ``rest_api`` the API Gateway REST API and ``health_method`` its public ``GET /health``
    method.
    """

    stack: Stack
    zones: Sequence[ZoneNames]
    user_pool: IConstruct
    api_function: lambda_.Function
    batch_events_function: lambda_.Function
    meter_function: lambda_.Function
    dispatcher_function: lambda_.Function
    jobs_table: IConstruct
    ledger_table: IConstruct
    computes_table: IConstruct
    email_topic_prefix: str
    dead_letter_queue: IConstruct
    rest_api: IConstruct
    health_method: IConstruct
    console_distribution: IConstruct
    console_log_bucket: IConstruct


def acknowledge_control_plane(scopes: ControlPlaneFindings) -> None:
    """Attach the accepted findings to the control plane stack's constructs."""
    _acknowledge_auth(scopes.user_pool)
    _acknowledge_console(scopes)
    _acknowledge_functions(scopes)
    _acknowledge_dead_letter_queue(scopes.dead_letter_queue)
    _acknowledge_api(scopes.rest_api, scopes.health_method)


def acknowledge_compute(
    stack: Stack,
    *,
    bucket: IConstruct,
    instance_role: IConstruct,
    job_role: IConstruct,
    execution_role: IConstruct,
    dedicated_roles: tuple[IConstruct, IConstruct],
    dead_letter_queue: IConstruct | None,
    build_role: IConstruct,
    replicas: Sequence[ZoneNames],
    job_log_group_name: str,
    names: ZoneNames,
) -> None:
    """Attach the accepted findings to a geo zone's compute stack's constructs: its data ``bucket``,
    its Batch roles, the dedicated computes' (instance, Batch service) roles, the dead-letter
    queue of its event forwarder (None in the home region), and the environment build role (which
    writes the builds of the other zones, ``replicas``, too); ``names`` are the zone's."""
    _acknowledge_compute(stack, bucket, instance_role, job_role, execution_role)
    replica_buckets = [_nag_spelling(zone).bucket_name for zone in replicas]
    _acknowledge_build(
        stack,
        bucket,
        job_role,
        build_role=build_role,
        replica_buckets=replica_buckets,
        job_log_group_name=job_log_group_name,
    )
    partition = _partition(stack)
    _acknowledge(
        execution_role,
        (
            f"AwsSolutions-IAM5[Resource::arn:{partition}:ecr:*:<AWS::AccountId>:repository/"
            f"{names.image_repository_prefix}*]",
            _IMAGE_REPOSITORIES,
        ),
        (
            f"AwsSolutions-IAM5[Resource::arn:{partition}:secretsmanager:*:<AWS::AccountId>:secret:"
            f"{names.registry_secret_prefix}*]",
            _REGISTRY_SECRETS,
        ),
    )
    dedicated_instance, batch_service = dedicated_roles
    _acknowledge(
        dedicated_instance,
        (
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AmazonEC2ContainerServiceforEC2Role]",
            "The AWS-maintained policy an ECS container instance of a dedicated compute needs to join its "
            "cluster; job containers cannot use it (the launch template's IMDSv2 hop limit 1).",
        ),
    )
    _acknowledge(
        batch_service,
        (
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSBatchServiceRole]",
            "The AWS-maintained policy AWS Batch documents for a compute environment's service role; the "
            "control plane may pass only this role (and the dedicated instance role) to Batch.",
        ),
    )
    if dead_letter_queue is not None:
        _acknowledge_dead_letter_queue(dead_letter_queue)


def _acknowledge_build(
    stack: Stack,
    data_bucket: IConstruct,
    job_role: IConstruct,
    *,
    build_role: IConstruct,
    replica_buckets: Sequence[str],
    job_log_group_name: str,
) -> None:
    bucket = _arn_token(stack, data_bucket)
    builds = "A build is stored as environments/<hash>.tar.gz and .json; the hash is known only once "
    _acknowledge(
        job_role,
        (
            f"AwsSolutions-IAM5[Resource::{bucket}/environments/*]",
            "A job's supervisor reads its environment's build, environments/<hash>.tar.gz; the hash is "
            "the job's, known only at submit time (read only: no job writes a build).",
        ),
    )
    partition = _partition(stack)
    replicas = [
        (
            f"AwsSolutions-IAM5[Resource::arn:{partition}:s3:::{name}/environments/*]",
            builds + "the requirements are resolved; every zone's bucket gets a copy of each build.",
        )
        for name in replica_buckets
    ]
    _acknowledge(
        build_role,
        (f"AwsSolutions-IAM5[Resource::{bucket}/environments/*]", builds + "the requirements are resolved."),
        (
            f"AwsSolutions-IAM5[Resource::{bucket}/environment-builds/*]",
            "A build reads its request and writes its outcome under environment-builds/<buildId>/; the "
            "build id is made when the build is asked for.",
        ),
        (
            f"AwsSolutions-IAM5[Resource::arn:{partition}:logs:{stack.region}:<AWS::AccountId>:"
            f"log-group:{job_log_group_name}:log-stream:environments/*]",
            "A build writes its log to the environment's own stream (environments/<account>/<name>/...), "
            "named when the environment is asked for.",
        ),
        *replicas,
    )


def _acknowledge_auth(user_pool: IConstruct) -> None:
    _acknowledge(
        user_pool,
        (
            "AwsSolutions-COG8",
            "Essentials tier for now: the Plus tier (threat protection) is priced per monthly active "
            "user; the Cognito issue decides it together with MFA.",
        ),
        (
            "AwsSolutions-COG2",
            "MFA is optional (TOTP) rather than required: accounts are created by an administrator and "
            "the SDK/CLI sign in non-interactively; the Cognito issue revisits requiring it.",
        ),
    )


def _acknowledge_console(scopes: ControlPlaneFindings) -> None:
    _acknowledge(
        scopes.console_distribution,
        (
            "AwsSolutions-CFR1",
            "No geo restriction: the service is offered wherever its accounts are; the geo zones decide "
            "where a job's data lives, not where its owner may sign in.",
        ),
        (
            "AwsSolutions-CFR2",
            "The API behind the distribution has its own WAF web ACL on the stage (body size, per-caller "
            "rate: infra/constructs/api.py), which every request CloudFront forwards passes; the console's "
            "own paths are static files. A CLOUDFRONT-scope ACL would have to live in us-east-1.",
        ),
        (
            "AwsSolutions-CFR4",
            "The distribution uses CloudFront's default certificate (*.cloudfront.net), whose security "
            "policy CloudFront fixes at TLSv1; a custom domain with its own certificate would set "
            "TLSv1.2_2021.",
        ),
    )
    _acknowledge(
        scopes.console_log_bucket,
        (
            "AwsSolutions-S1",
            "The log bucket of the console's distribution and bucket: its own access would be logged "
            "into itself.",
        ),
    )


def _acknowledge_compute(
    stack: Stack,
    data_bucket: IConstruct,
    instance_role: IConstruct,
    job_role: IConstruct,
    execution_role: IConstruct,
) -> None:
    bucket = _arn_token(stack, data_bucket)
    _acknowledge(
        instance_role,
        (
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AmazonEC2ContainerServiceforEC2Role]",
            "The AWS-maintained policy an ECS container instance needs to join the cluster Batch manages; "
            "job containers cannot use it (IMDSv2 with hop limit 1), they get the job role.",
        ),
    )
    _acknowledge(
        job_role,
        (
            f"AwsSolutions-IAM5[Resource::{bucket}/inputs/*]",
            "A job reads its input under inputs/<jobId>/; the job id is known only at submit time.",
        ),
        (
            f"AwsSolutions-IAM5[Resource::{bucket}/outputs/*]",
            "A job writes its result and files under outputs/<jobId>/; the job id is known only at "
            "submit time.",
        ),
        (
            "AwsSolutions-IAM5[Action::s3:Abort*]",
            "From bucket.grant_put on outputs/*: lets the worker abort its own failed multipart uploads.",
        ),
    )
    _acknowledge(
        execution_role,
        (
            "AwsSolutions-IAM5[Resource::*]",
            "ecr:GetAuthorizationToken (pull the worker image, and an environment's own ECR image) has no "
            "resource-level permissions (AWS's design: the token is per registry, not per repository); "
            "the image pulls and log writes are scoped to the repositories and the job log group.",
        ),
    )


def _acknowledge_functions(scopes: ControlPlaneFindings) -> None:
    stack = scopes.stack
    zones = [_nag_spelling(zone) for zone in scopes.zones]
    partition = _partition(stack)
    table_indexes = [
        (f"AwsSolutions-IAM5[Resource::{_arn_token(stack, table)}/index/*]", _TABLE_INDEXES)
        for table in (scopes.jobs_table, scopes.ledger_table, scopes.computes_table)
    ]
    bucket_objects = [
        (f"AwsSolutions-IAM5[Resource::arn:{partition}:s3:::{zone.bucket_name}/*]", _S3_GRANT)
        for zone in zones
    ]
    wildcard = ("AwsSolutions-IAM5[Resource::*]", _XRAY_DESCRIBE_SMS)
    jobs = [
        (f"AwsSolutions-IAM5[Resource::{_batch_arn(partition, zone, 'job/*')}]", _JOB_ARNS) for zone in zones
    ]
    job_definitions = [
        (
            f"AwsSolutions-IAM5[Resource::{_batch_arn(partition, zone, 'job-definition/')}"
            f"{zone.job_definition_pattern(machine_class)}{revision}]",
            _JOB_DEFINITION_REVISIONS,
        )
        for zone in zones
        for machine_class in MACHINE_CLASSES
        for revision in (":*", "")
    ]
    job_log_streams = [
        (
            f"AwsSolutions-IAM5[Resource::arn:{partition}:logs:{zone.region}:<AWS::AccountId>:"
            f"log-group:{zone.job_log_group_name}:log-stream:*]",
            _JOB_LOG_STREAMS,
        )
        for zone in zones
    ]
    topic_key = ("AwsSolutions-IAM5[Action::kms:GenerateDataKey*]", _TOPIC_KEY)
    array_results = [
        (f"AwsSolutions-IAM5[Resource::arn:{partition}:s3:::{zone.bucket_name}/outputs/*]", _ARRAY_RESULTS)
        for zone in zones
    ]
    input_copies = [
        (f"AwsSolutions-IAM5[Resource::arn:{partition}:s3:::{zone.bucket_name}/inputs/*]", _INPUT_COPIES)
        for zone in zones
    ]

    dedicated = [
        (
            f"AwsSolutions-IAM5[Resource::{_batch_arn(partition, zone, kind)}/{zone.compute_prefix}-cmp-*]",
            _COMPUTES,
        )
        for zone in zones
        for kind in ("compute-environment", "job-queue")
    ]
    image_repositories = sorted(
        {
            (
                f"AwsSolutions-IAM5[Resource::arn:{partition}:ecr:*:<AWS::AccountId>:repository/"
                f"{zone.image_repository_prefix}*]",
                _IMAGE_REPOSITORIES,
            )
            for zone in zones
        }
    )
    image_job_definitions = [
        (
            f"AwsSolutions-IAM5[Resource::{_batch_arn(partition, zone, 'job-definition/')}"
            f"{zone.image_job_definition_pattern(machine_class)}]",
            _IMAGE_JOB_DEFINITIONS,
        )
        for zone in zones
        for machine_class in MACHINE_CLASSES
    ]
    email_topics = (
        f"AwsSolutions-IAM5[Resource::arn:{partition}:sns:{_home_region(stack)}:<AWS::AccountId>:"
        f"{scopes.email_topic_prefix}*]",
        _EMAIL_TOPICS,
    )
    build_definitions = [
        (
            f"AwsSolutions-IAM5[Resource::{_batch_arn(partition, zone, 'job-definition/')}"
            f"{zone.build_job_definition_pattern}{revision}]",
            _BUILD_DEFINITIONS,
        )
        for zone in zones
        for revision in (":*", "")
    ]
    _acknowledge(
        scopes.api_function.role,
        wildcard,
        email_topics,
        *jobs,
        *job_definitions,
        *build_definitions,
        *job_log_streams,
        *bucket_objects,
        *table_indexes,
        *dedicated,
        *image_repositories,
    )
    _acknowledge(
        scopes.batch_events_function.role,
        wildcard,
        topic_key,
        email_topics,
        *jobs,
        *bucket_objects,
        *array_results,
        *input_copies,
        *table_indexes,
    )
    _acknowledge(
        scopes.meter_function.role,
        wildcard,
        topic_key,
        email_topics,
        *jobs,
        *bucket_objects,
        *array_results,
        *input_copies,
        *table_indexes,
        *dedicated,
    )
    # The dispatcher: SubmitJob (job/*, the definitions' revisions, the dedicated computes' queues),
    # TerminateJob of a job aborted while it was submitted, notifications of a job it ends (X-Ray and
    # SMS on "*", the topic key).
    _acknowledge(
        scopes.dispatcher_function.role,
        wildcard,
        topic_key,
        email_topics,
        *jobs,
        *job_definitions,
        *table_indexes,
        *dedicated,
        *image_job_definitions,
    )
    functions = (
        scopes.api_function,
        scopes.batch_events_function,
        scopes.meter_function,
        scopes.dispatcher_function,
    )
    for function in functions:
        _acknowledge(function, ("AwsSolutions-L1", _LAMBDA_RUNTIME))


def _acknowledge_dead_letter_queue(queue: IConstruct) -> None:
    _acknowledge(
        queue,
        (
            "AwsSolutions-SQS3",
            "This queue is itself a dead-letter queue: of EventBridge rule targets (and, in the home "
            "region, of the functions' failed asynchronous invocations); neither is an SQS redrive, "
            "which is all cdk-nag recognizes, and a DLQ has no DLQ of its own.",
        ),
    )


def _acknowledge_api(rest_api: IConstruct, health_method: IConstruct) -> None:
    _acknowledge(
        rest_api,
        (
            "AwsSolutions-APIG2",
            "Requests are validated in the api Lambda (Powertools enable_validation), which answers "
            "docs/http-api.md's 400 ValidationError body with the offending field; API Gateway's validator "
            "cannot produce that body.",
        ),
    )
    cloud_watch_role = rest_api.node.try_find_child("CloudWatchRole")
    if cloud_watch_role is not None:
        _acknowledge(
            cloud_watch_role,
            (
                "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                "AmazonAPIGatewayPushToCloudWatchLogs]",
                "API Gateway's account-level logging role: the AWS-maintained policy is the documented "
                "one and it only writes CloudWatch Logs.",
            ),
        )
    _acknowledge(
        health_method,
        (
            "AwsSolutions-APIG4",
            "GET /health is public by contract (docs/http-api.md): a load balancer or a person checks "
            "readiness without a token; it returns no data.",
        ),
        (
            "AwsSolutions-COG4",
            "GET /health is public by contract (docs/http-api.md); every other method uses the Cognito "
            "authorizer.",
        ),
    )


def _acknowledge(scope: IConstruct | None, *findings: Finding) -> None:
    if scope is None:
        raise ValueError("cannot acknowledge findings on a missing construct")
    Validations.of(scope).acknowledge(*(Acknowledgment(id=rule, reason=reason) for rule, reason in findings))


def _nag_spelling(zone: ZoneNames) -> ZoneNames:
    """The zone's names as cdk-nag spells them in a granular id (the account is ``<AWS::AccountId>``)."""
    return dataclasses.replace(zone, account="<AWS::AccountId>")


def _partition(stack: Stack) -> str:
    """The stack's partition as cdk-nag spells it: a literal (``aws``) once the region is known."""
    partition = stack.resolve(stack.partition)
    return partition if isinstance(partition, str) else "<AWS::Partition>"


def _batch_arn(partition: str, zone: ZoneNames, resource: str) -> str:
    return f"arn:{partition}:batch:{zone.region}:<AWS::AccountId>:{resource}"


def _home_region(stack: Stack) -> str:
    """The stack's region as cdk-nag spells it: the name, or ``<AWS::Region>`` when env-agnostic."""
    return "<AWS::Region>" if Token.is_unresolved(stack.region) else stack.region


def _arn_token(stack: Stack, construct: IConstruct) -> str:
    """How cdk-nag spells a resource's ``Fn::GetAtt Arn`` in a granular IAM5 id: ``<LogicalId.Arn>``."""
    resource = construct.node.default_child
    if not isinstance(resource, CfnResource):
        raise TypeError(f"{construct.node.path} has no CloudFormation resource")
    return f"<{stack.resolve(resource.logical_id)}.Arn>"
