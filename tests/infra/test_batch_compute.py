"""AWS Batch: the Spot compute environment, the queue and the worker's job definition."""

from __future__ import annotations

import pytest

from tests.infra.conftest import Synth

pytestmark = pytest.mark.infra


def _job_definition(synth: Synth) -> dict:
    (job_definition,) = synth.resources("AWS::Batch::JobDefinition").values()
    return job_definition["Properties"]


def test_job_definition_runs_unprivileged_with_default_resources(synth: Synth) -> None:
    container = _job_definition(synth)["ContainerProperties"]

    assert container["Privileged"] is False
    assert sorted(container["ResourceRequirements"], key=lambda r: r["Type"]) == [
        {"Type": "MEMORY", "Value": "8192"},
        {"Type": "VCPU", "Value": "1"},
    ]
    assert container["JobRoleArn"] == {"Fn::GetAtt": [synth.logical_id(synth.stack.compute.job_role), "Arn"]}


def test_job_logs_go_to_a_14_day_log_group(synth: Synth) -> None:
    log_config = _job_definition(synth)["ContainerProperties"]["LogConfiguration"]
    log_group = synth.logical_id(synth.stack.compute.job_log_group)

    assert log_config["LogDriver"] == "awslogs"
    assert log_config["Options"]["awslogs-group"] == {"Ref": log_group}
    assert synth.template_json["Resources"][log_group]["Properties"]["RetentionInDays"] == 14


def test_only_host_failures_are_retried_at_most_three_attempts(synth: Synth) -> None:
    assert _job_definition(synth)["RetryStrategy"] == {
        "Attempts": 3,
        "EvaluateOnExit": [
            {"Action": "RETRY", "OnStatusReason": "Host EC2*"},
            {"Action": "EXIT", "OnReason": "*"},
        ],
    }


def test_compute_environment_is_spot_and_scales_to_zero(synth: Synth) -> None:
    (environment,) = synth.resources("AWS::Batch::ComputeEnvironment").values()
    resources = environment["Properties"]["ComputeResources"]

    assert environment["Properties"]["Type"] == "managed"
    assert resources["Type"] == "SPOT"
    assert resources["AllocationStrategy"] == "SPOT_PRICE_CAPACITY_OPTIMIZED"
    assert resources["MinvCpus"] == 0
    assert set(resources["InstanceTypes"]) == {"m7i", "r7i"}
    assert resources["Ec2Configuration"] == [{"ImageType": "ECS_AL2023"}]
    assert all("Ref" in subnet for subnet in resources["Subnets"])


def test_instances_require_imdsv2_with_hop_limit_one(synth: Synth) -> None:
    synth.template.has_resource_properties(
        "AWS::EC2::LaunchTemplate",
        {"LaunchTemplateData": {"MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 1}}},
    )


def test_vpc_has_flow_logs_and_an_s3_gateway_endpoint(synth: Synth) -> None:
    synth.template.resource_count_is("AWS::EC2::FlowLog", 1)
    synth.template.has_resource_properties("AWS::EC2::VPCEndpoint", {"VpcEndpointType": "Gateway"})


def test_job_role_reads_inputs_and_writes_outputs_only(synth: Synth) -> None:
    role = synth.logical_id(synth.stack.compute.job_role)
    bucket_arn = {"Fn::GetAtt": [synth.logical_id(synth.stack.data.bucket), "Arn"]}
    (policy,) = [
        p["Properties"]
        for p in synth.resources("AWS::IAM::Policy").values()
        if p["Properties"]["Roles"] == [{"Ref": role}]
    ]

    by_resource = {
        json_join[1]: statement["Action"]
        for statement in policy["PolicyDocument"]["Statement"]
        for json_join in [statement["Resource"]["Fn::Join"][1]]
        if json_join[0] == bucket_arn
    }
    assert set(by_resource) == {"/inputs/*", "/outputs/*"}
    assert by_resource["/inputs/*"] == "s3:GetObject"
    assert "s3:PutObject" in by_resource["/outputs/*"]
    assert not any(a.startswith(("s3:Get", "s3:List", "s3:Delete")) for a in by_resource["/outputs/*"])
    assert len(policy["PolicyDocument"]["Statement"]) == len(by_resource)
