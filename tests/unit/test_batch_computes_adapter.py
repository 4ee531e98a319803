"""The dedicated compute adapter at its boundary: the exact AWS Batch requests it sends (botocore's
``Stubber`` checks each against the expected parameters and the API's model) for a compute's
environment and queue, and how Batch's answers map to ``EnvironmentState``/``QueueState``. Rules:
AWS Batch API reference (UpdateComputeEnvironment never lowers ``desiredvCpus``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from functions.adapters.batch_computes import AwsComputeEnvironments, ComputeTemplate, SsmComputeTemplate
from functions.domain.errors import DependencyFailed
from functions.domain.machine_classes import MACHINE_CLASSES
from functions.ports import EnvironmentState, QueueState

NAME = "remote-batch-prod-cmp-0123456789ab-lab"
TEMPLATE = ComputeTemplate(
    subnets=("subnet-1", "subnet-2"),
    security_groups=("sg-1",),
    instance_role="arn:aws:iam::123456789012:instance-profile/remote-batch-instance",
    service_role="arn:aws:iam::123456789012:role/remote-batch-batch-service",
    instance_types={"Basic1x8": ("r7i.large", "r6i.large"), "GPU1xL40S": ("g6e.2xlarge",)},
    launch_templates={"GPU1xL40S": "lt-0gpu"},
    image_types={"Basic1x8": "ECS_AL2023", "GPU1xL40S": "ECS_AL2023_NVIDIA"},
    tags={"remote-batch:prefix": "remote-batch-prod"},
)


@pytest.fixture
def batch() -> Iterator[tuple[AwsComputeEnvironments, Stubber]]:
    client = boto3.client("batch", region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(client) as stub:
        yield AwsComputeEnvironments(client, TEMPLATE), stub
        stub.assert_no_pending_responses()


def _environment(**overrides: Any) -> dict[str, Any]:
    return {
        "computeEnvironmentName": NAME,
        "computeEnvironmentArn": f"arn:aws:batch:us-east-1:123456789012:compute-environment/{NAME}",
        "status": "VALID",
        "state": "ENABLED",
        "computeResources": {
            "type": "EC2",
            "minvCpus": 2,
            "maxvCpus": 2,
            "desiredvCpus": 2,
            "subnets": ["subnet-1"],
        },
        **overrides,
    }


def test_create_environment_builds_it_from_the_template(
    batch: tuple[AwsComputeEnvironments, Stubber],
) -> None:
    adapter, stub = batch
    stub.add_response(
        "describe_compute_environments", {"computeEnvironments": []}, {"computeEnvironments": [NAME]}
    )
    tags = {"remote-batch:prefix": "remote-batch-prod", "remote-batch:compute": NAME}
    stub.add_response(
        "create_compute_environment",
        {"computeEnvironmentName": NAME, "computeEnvironmentArn": "arn"},
        {
            "computeEnvironmentName": NAME,
            "type": "MANAGED",
            "state": "ENABLED",
            "computeResources": {
                "type": "EC2",
                "allocationStrategy": "BEST_FIT_PROGRESSIVE",
                "minvCpus": 0,
                "maxvCpus": 8,
                "desiredvCpus": 0,
                "instanceTypes": ["g6e.2xlarge"],
                "subnets": ["subnet-1", "subnet-2"],
                "securityGroupIds": ["sg-1"],
                "instanceRole": TEMPLATE.instance_role,
                "tags": tags,
                "launchTemplate": {"launchTemplateId": "lt-0gpu", "version": "$Latest"},
                "ec2Configuration": [{"imageType": "ECS_AL2023_NVIDIA"}],
            },
            "serviceRole": TEMPLATE.service_role,
            "tags": tags,
        },
    )
    adapter.create_environment(NAME, MACHINE_CLASSES["GPU1xL40S"])


def test_create_environment_is_a_no_op_when_it_exists(batch: tuple[AwsComputeEnvironments, Stubber]) -> None:
    adapter, stub = batch
    stub.add_response("describe_compute_environments", {"computeEnvironments": [_environment()]})
    adapter.create_environment(NAME, MACHINE_CLASSES["Basic1x8"])


def test_scaling_up_sets_min_max_and_desired_down_never_lowers_desired(
    batch: tuple[AwsComputeEnvironments, Stubber],
) -> None:
    adapter, stub = batch
    stub.add_response(
        "update_compute_environment",
        {},
        {"computeEnvironment": NAME, "computeResources": {"minvCpus": 4, "maxvCpus": 4, "desiredvCpus": 4}},
    )
    stub.add_response(
        "update_compute_environment",
        {},
        {"computeEnvironment": NAME, "computeResources": {"minvCpus": 0, "maxvCpus": 0}},
    )
    adapter.set_capacity(NAME, 4)
    adapter.set_capacity(NAME, 0)


def test_describe_maps_the_environment_and_leaves_out_deleted_ones(
    batch: tuple[AwsComputeEnvironments, Stubber],
) -> None:
    adapter, stub = batch
    stub.add_response(
        "describe_compute_environments",
        {"computeEnvironments": [_environment(status="INVALID", statusReason="CLIENT_ERROR - bad subnet")]},
    )
    stub.add_response(
        "describe_compute_environments", {"computeEnvironments": [_environment(status="DELETED")]}
    )
    assert adapter.describe_environment(NAME) == EnvironmentState(
        status="INVALID",
        state="ENABLED",
        min_vcpus=2,
        max_vcpus=2,
        desired_vcpus=2,
        reason="CLIENT_ERROR - bad subnet",
    )
    assert adapter.describe_environment(NAME) is None


def test_queue_calls_in_the_order_aws_requires(batch: tuple[AwsComputeEnvironments, Stubber]) -> None:
    adapter, stub = batch
    queue = {
        "jobQueueName": NAME,
        "jobQueueArn": "arn",
        "state": "DISABLED",
        "status": "VALID",
        "priority": 1,
        "computeEnvironmentOrder": [{"order": 1, "computeEnvironment": NAME}],
    }
    stub.add_response("describe_job_queues", {"jobQueues": []}, {"jobQueues": [NAME]})
    stub.add_response(
        "create_job_queue",
        {"jobQueueName": NAME, "jobQueueArn": "arn"},
        {
            "jobQueueName": NAME,
            "state": "ENABLED",
            "priority": 1,
            "computeEnvironmentOrder": [{"order": 1, "computeEnvironment": NAME}],
            "tags": {"remote-batch:prefix": "remote-batch-prod", "remote-batch:compute": NAME},
        },
    )
    stub.add_response("update_job_queue", {}, {"jobQueue": NAME, "state": "DISABLED"})
    stub.add_response("describe_job_queues", {"jobQueues": [queue]}, {"jobQueues": [NAME]})
    stub.add_response("delete_job_queue", {}, {"jobQueue": NAME})
    stub.add_response("update_compute_environment", {}, {"computeEnvironment": NAME, "state": "DISABLED"})
    stub.add_response("delete_compute_environment", {}, {"computeEnvironment": NAME})
    adapter.create_queue(NAME, NAME)
    adapter.disable_queue(NAME)
    assert adapter.describe_queue(NAME) == QueueState(status="VALID", state="DISABLED")
    adapter.delete_queue(NAME)
    adapter.disable_environment(NAME)
    adapter.delete_environment(NAME)


def test_a_refusal_is_a_dependency_failure(batch: tuple[AwsComputeEnvironments, Stubber]) -> None:
    adapter, stub = batch
    stub.add_client_error(
        "delete_compute_environment", "ClientException", "Cannot delete, found existing JobQueue relationship"
    )
    with pytest.raises(DependencyFailed, match="ClientException"):
        adapter.delete_environment(NAME)


def test_the_template_comes_from_ssm_once() -> None:
    ssm = boto3.client("ssm", region_name="eu-central-1", aws_access_key_id="x", aws_secret_access_key="x")
    value = json.dumps(
        {
            "subnets": ["subnet-1"],
            "securityGroups": ["sg-1"],
            "instanceRole": TEMPLATE.instance_role,
            "serviceRole": TEMPLATE.service_role,
            "instanceTypes": {"Basic1x8": ["r7i"]},
            "launchTemplates": {"Basic1x8": "lt-1"},
            "imageTypes": {"Basic1x8": "ECS_AL2023"},
        }
    )
    with Stubber(ssm) as stub:
        stub.add_response(
            "get_parameter",
            {"Parameter": {"Name": "/remote-batch/prod/EuropeanUnion/compute-template", "Value": value}},
            {"Name": "/remote-batch/prod/EuropeanUnion/compute-template"},
        )
        loader = SsmComputeTemplate(ssm, "/remote-batch/prod/EuropeanUnion/compute-template", {"k": "v"})
        first = loader()
        assert loader() is first  # read once
        stub.assert_no_pending_responses()
    assert (first.subnets, first.instance_types["Basic1x8"], first.launch_templates["Basic1x8"]) == (
        ("subnet-1",),
        ("r7i",),
        "lt-1",
    )
    assert first.tags == {"k": "v"}


def test_a_malformed_template_is_a_dependency_failure() -> None:
    ssm = boto3.client("ssm", region_name="eu-central-1", aws_access_key_id="x", aws_secret_access_key="x")
    with Stubber(ssm) as stub:
        stub.add_response("get_parameter", {"Parameter": {"Name": "p", "Value": '{"subnets": []}'}})
        with pytest.raises(DependencyFailed, match="not a compute template"):
            SsmComputeTemplate(ssm, "p", {})()
