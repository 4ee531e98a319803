"""AWS Batch in each zone's stack: one queue and one job definition per machine class, Spot then
on-demand compute environments, the worker image, job logs, retries and the job role."""

from __future__ import annotations

import json
from typing import Any

import pytest

from functions.domain.machine_classes import MACHINE_CLASSES, MachineClass
from infra import constants
from tests.infra.conftest import Synth

pytestmark = pytest.mark.infra

GPU_FAMILIES = {"L40S": "g6e", "L4": "g6"}


def _by_name(synth: Synth, resource_type: str, name_key: str) -> dict[str, dict[str, Any]]:
    return {r["Properties"][name_key]: r["Properties"] for r in synth.resources(resource_type).values()}


def _job_definitions(synth: Synth) -> dict[str, dict[str, Any]]:
    return _by_name(synth, "AWS::Batch::JobDefinition", "JobDefinitionName")


def _job_queues(synth: Synth) -> dict[str, dict[str, Any]]:
    return _by_name(synth, "AWS::Batch::JobQueue", "JobQueueName")


def _requirements(machine_class: MachineClass) -> list[dict[str, str]]:
    expected = [
        {"Type": "MEMORY", "Value": str(machine_class.memory_gib * 1024)},
        {"Type": "VCPU", "Value": str(machine_class.vcpus)},
    ]
    if machine_class.gpus:
        expected.append({"Type": "GPU", "Value": str(machine_class.gpus)})
    return sorted(expected, key=lambda r: r["Type"])


def test_one_queue_and_one_definition_per_machine_class(compute: Synth) -> None:
    names = compute.stack.names

    compute.template.resource_count_is("AWS::Batch::JobQueue", 10)
    compute.template.resource_count_is("AWS::Batch::JobDefinition", 10)
    assert set(_job_queues(compute)) == {names.job_queue_name(mc) for mc in MACHINE_CLASSES}
    assert set(_job_definitions(compute)) == {names.job_definition_name(mc) for mc in MACHINE_CLASSES}
    assert len(MACHINE_CLASSES) == 10


@pytest.mark.parametrize("machine_class", MACHINE_CLASSES.values(), ids=lambda mc: mc.name)
def test_job_definition_has_the_api_figures(compute: Synth, machine_class: MachineClass) -> None:
    definition = _job_definitions(compute)[compute.stack.names.job_definition_name(machine_class.name)]
    requirements = definition["ContainerProperties"]["ResourceRequirements"]

    # API.md: vCPUs, memory (GiB, as MiB for Batch) and GPUs of the class.
    assert sorted(requirements, key=lambda r: r["Type"]) == _requirements(machine_class)


def test_api_md_figures_reach_the_templates(compute: Synth) -> None:
    by_name = {
        name.removeprefix(compute.stack.names.prefix): {
            r["Type"]: r["Value"] for r in props["ContainerProperties"]["ResourceRequirements"]
        }
        for name, props in _job_definitions(compute).items()
    }

    # Spelled out, so a change to machine_classes.py cannot silently move both sides.
    assert by_name["Basic1x8"] == {"VCPU": "1", "MEMORY": "8192"}
    assert by_name["Memory192x1536"] == {"VCPU": "192", "MEMORY": "1572864"}
    assert by_name["Compute192x384"] == {"VCPU": "192", "MEMORY": "393216"}
    assert by_name["GPU1xL40S"] == {"VCPU": "8", "MEMORY": "65536", "GPU": "1"}
    assert by_name["GPU4xL4"] == {"VCPU": "48", "MEMORY": "196608", "GPU": "4"}


def _compute_environments(synth: Synth) -> dict[str, dict[str, Any]]:
    return {name: r["Properties"] for name, r in synth.resources("AWS::Batch::ComputeEnvironment").items()}


def _environment_id(reference: dict[str, Any]) -> str:
    (logical_id, attribute) = reference["Fn::GetAtt"]
    assert attribute == "ComputeEnvironmentArn"
    return str(logical_id)


@pytest.mark.parametrize("machine_class", MACHINE_CLASSES.values(), ids=lambda mc: mc.name)
def test_queue_spills_from_spot_to_on_demand(compute: Synth, machine_class: MachineClass) -> None:
    queue = _job_queues(compute)[compute.stack.names.job_queue_name(machine_class.name)]
    environments = _compute_environments(compute)

    order = sorted(queue["ComputeEnvironmentOrder"], key=lambda entry: entry["Order"])
    spot, on_demand = (environments[_environment_id(entry["ComputeEnvironment"])] for entry in order)
    assert [entry["Order"] for entry in order] == [1, 2]
    assert spot["ComputeResources"]["Type"] == "SPOT"
    assert on_demand["ComputeResources"]["Type"] == "EC2"
    # Both environments are the same pool of instances.
    assert spot["ComputeResources"]["InstanceTypes"] == on_demand["ComputeResources"]["InstanceTypes"]
    if machine_class.gpu_type:
        family = GPU_FAMILIES[machine_class.gpu_type]
        assert spot["ComputeResources"]["InstanceTypes"] == [family]
        assert spot["ComputeResources"]["Ec2Configuration"] == [{"ImageType": "ECS_AL2023_NVIDIA"}]
    else:
        assert spot["ComputeResources"]["Ec2Configuration"] == [{"ImageType": "ECS_AL2023"}]
        assert not any(t.startswith("g") for t in spot["ComputeResources"]["InstanceTypes"])


def test_queues_cancel_jobs_stuck_behind_a_misconfiguration(compute: Synth) -> None:
    for name, queue in _job_queues(compute).items():
        actions = queue["JobStateTimeLimitActions"]

        assert {a["Reason"] for a in actions} == {
            "MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE",
            "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT",
        }, name
        for action in actions:
            assert action | {"Reason": None} == {
                "Action": "CANCEL",
                "MaxTimeSeconds": 600,
                "State": "RUNNABLE",
                "Reason": None,
            }, name


def test_compute_environments_scale_to_zero_in_private_subnets(compute: Synth) -> None:
    environments = _compute_environments(compute)

    assert len(environments) == 2 * len(constants.COMPUTE_POOLS)
    for name, environment in environments.items():
        resources = environment["ComputeResources"]
        assert environment["Type"] == "managed", name
        assert resources["MinvCpus"] == 0, name
        assert resources["AllocationStrategy"] == (
            "SPOT_PRICE_CAPACITY_OPTIMIZED" if resources["Type"] == "SPOT" else "BEST_FIT_PROGRESSIVE"
        )
        assert all("Ref" in subnet for subnet in resources["Subnets"]), name
        assert "LaunchTemplate" in resources, name


def test_job_definitions_run_unprivileged_with_retries_for_host_failures_only(compute: Synth) -> None:
    job_role = {"Fn::GetAtt": [compute.logical_id(compute.stack.compute.job_role), "Arn"]}

    for name, definition in _job_definitions(compute).items():
        container = definition["ContainerProperties"]
        assert container["Privileged"] is False, name
        assert container["JobRoleArn"] == job_role, name
        assert definition["RetryStrategy"] == {
            "Attempts": 3,
            "EvaluateOnExit": [
                {"Action": "RETRY", "OnStatusReason": "Host EC2*"},
                {"Action": "EXIT", "OnReason": "*"},
            ],
        }, name


def test_job_logs_go_to_a_named_14_day_log_group(compute: Synth) -> None:
    log_group = compute.logical_id(compute.stack.compute.job_log_group)
    props = compute.template_json["Resources"][log_group]["Properties"]

    assert props == props | {"LogGroupName": "/remote-batch/dev/jobs", "RetentionInDays": 14}
    for definition in _job_definitions(compute).values():
        log_config = definition["ContainerProperties"]["LogConfiguration"]
        assert log_config["LogDriver"] == "awslogs"
        assert log_config["Options"]["awslogs-group"] == {"Ref": log_group}


def test_worker_image_is_an_asset_built_at_deploy_time(compute: Synth) -> None:
    assets = json.loads((compute.outdir / f"{compute.stack.artifact_id}.assets.json").read_text())

    (image,) = assets["dockerImages"].values()
    assert image["source"]["platform"] == "linux/amd64"
    assert (compute.outdir / image["source"]["directory"] / "Dockerfile").is_file()
    images = {d["ContainerProperties"]["Image"]["Fn::Sub"] for d in _job_definitions(compute).values()}
    assert len(images) == 1
    assert f"{compute.stack.region}" in images.pop()


def test_instances_require_imdsv2_with_hop_limit_one(compute: Synth) -> None:
    compute.template.has_resource_properties(
        "AWS::EC2::LaunchTemplate",
        {"LaunchTemplateData": {"MetadataOptions": {"HttpTokens": "required", "HttpPutResponseHopLimit": 1}}},
    )


def test_vpc_uses_the_context_zones_with_flow_logs_and_an_s3_endpoint(compute: Synth) -> None:
    subnets = compute.resources("AWS::EC2::Subnet").values()

    assert {s["Properties"]["AvailabilityZone"] for s in subnets} == {
        f"{compute.stack.region}{letter}" for letter in "abc"
    }
    compute.template.resource_count_is("AWS::EC2::FlowLog", 1)
    compute.template.resource_count_is("AWS::EC2::NatGateway", 1)
    compute.template.has_resource_properties("AWS::EC2::VPCEndpoint", {"VpcEndpointType": "Gateway"})


def test_job_role_reads_inputs_and_writes_outputs_of_its_own_bucket_only(compute: Synth) -> None:
    role = compute.logical_id(compute.stack.compute.job_role)
    bucket_arn = {"Fn::GetAtt": [compute.logical_id(compute.stack.data.bucket), "Arn"]}
    (policy,) = [
        p["Properties"]
        for p in compute.resources("AWS::IAM::Policy").values()
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
