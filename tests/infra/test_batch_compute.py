"""AWS Batch in each zone's stack: one queue per machine class and one job definition per machine class
and Python version, compute environments in per-pool order, queue time limits, the CPU and GPU worker
images of each Python version, shared memory, root volumes, job logs, retries and the job role; the
environments' build queue, its definition per Python version and its role, and the host cache of
environments every job definition mounts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from functions.domain.fair_share import SHARE_DECAY_SECONDS
from functions.domain.machine_classes import MACHINE_CLASSES, MachineClass
from functions.domain.runtime import PYTHON_VERSIONS
from infra import constants
from tests.infra.conftest import Synth

GPU_FAMILIES = {"L40S": "g6e", "L4": "g6"}


def _by_name(synth: Synth, resource_type: str, name_key: str) -> dict[str, dict[str, Any]]:
    return {r["Properties"][name_key]: r["Properties"] for r in synth.resources(resource_type).values()}


def _job_definitions(synth: Synth) -> dict[str, dict[str, Any]]:
    return _by_name(synth, "AWS::Batch::JobDefinition", "JobDefinitionName")


def _job_queues(synth: Synth) -> dict[str, dict[str, Any]]:
    return _by_name(synth, "AWS::Batch::JobQueue", "JobQueueName")


def _class_queues(synth: Synth) -> dict[str, dict[str, Any]]:
    """The machine classes' queues (not the environments' build queue)."""
    build = synth.stack.names.build_queue_name
    return {name: queue for name, queue in _job_queues(synth).items() if name != build}


def _build_definitions(synth: Synth) -> dict[str, dict[str, Any]]:
    names = synth.stack.names
    wanted = {names.build_job_definition_name(version) for version in PYTHON_VERSIONS}
    return {name: d for name, d in _job_definitions(synth).items() if name in wanted}


def _class_definitions(synth: Synth) -> dict[str, dict[str, Any]]:
    builds = _build_definitions(synth)
    return {name: d for name, d in _job_definitions(synth).items() if name not in builds}


def _requirements(machine_class: MachineClass) -> list[dict[str, str]]:
    expected = [
        {"Type": "MEMORY", "Value": str(machine_class.memory_gib * 1024)},
        {"Type": "VCPU", "Value": str(machine_class.vcpus)},
    ]
    if machine_class.gpus:
        expected.append({"Type": "GPU", "Value": str(machine_class.gpus)})
    return sorted(expected, key=lambda r: r["Type"])


def test_one_queue_per_machine_class_and_one_definition_per_class_and_python(compute: Synth) -> None:
    names = compute.stack.names

    # And the environments' build queue with a build definition per Python version.
    compute.template.resource_count_is("AWS::Batch::JobQueue", 11)
    compute.template.resource_count_is("AWS::Batch::JobDefinition", 33)
    assert set(_class_queues(compute)) == {names.job_queue_name(mc) for mc in MACHINE_CLASSES}
    assert set(_job_queues(compute)) - set(_class_queues(compute)) == {"remote-batch-dev-build"}
    assert set(_class_definitions(compute)) == {
        f"remote-batch-dev-{mc}-py{version.replace('.', '')}"
        for mc in MACHINE_CLASSES
        for version in PYTHON_VERSIONS
    }
    assert set(_build_definitions(compute)) == {
        "remote-batch-dev-build-py311",
        "remote-batch-dev-build-py312",
        "remote-batch-dev-build-py313",
    }
    assert len(MACHINE_CLASSES) == 10


@pytest.mark.parametrize("machine_class", MACHINE_CLASSES.values(), ids=lambda mc: mc.name)
def test_job_definition_has_the_api_figures(compute: Synth, machine_class: MachineClass) -> None:
    for version in PYTHON_VERSIONS:
        definition = _job_definitions(compute)[
            compute.stack.names.job_definition_name(machine_class.name, version)
        ]
        requirements = definition["ContainerProperties"]["ResourceRequirements"]

        # docs/http-api.md: vCPUs, memory (GiB, as MiB for Batch) and GPUs of the class.
        assert sorted(requirements, key=lambda r: r["Type"]) == _requirements(machine_class)


def test_api_md_figures_reach_the_templates(compute: Synth) -> None:
    by_name = {
        name.removeprefix(compute.stack.names.prefix).removesuffix("-py312"): {
            r["Type"]: r["Value"] for r in props["ContainerProperties"]["ResourceRequirements"]
        }
        for name, props in _job_definitions(compute).items()
        if name.endswith("-py312")
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
def test_queue_order_is_per_pool(compute: Synth, machine_class: MachineClass) -> None:
    queue = _job_queues(compute)[compute.stack.names.job_queue_name(machine_class.name)]
    environments = _compute_environments(compute)
    pool = constants.COMPUTE_POOLS[constants.MACHINE_CLASS_POOLS[machine_class.name]]

    order = sorted(queue["ComputeEnvironmentOrder"], key=lambda entry: entry["Order"])
    first, second = (environments[_environment_id(entry["ComputeEnvironment"])] for entry in order)
    assert [entry["Order"] for entry in order] == [1, 2]
    # Where Spot is scarce (the largest memory sizes, GPUs) on-demand comes first; elsewhere Spot
    # comes first and spills to on-demand.
    scarce = machine_class.gpus > 0 or machine_class.name == "Memory192x1536"
    assert pool.on_demand_first is scarce
    expected = ["EC2", "SPOT"] if scarce else ["SPOT", "EC2"]
    assert [first["ComputeResources"]["Type"], second["ComputeResources"]["Type"]] == expected
    # Both environments are the same pool of instances.
    assert first["ComputeResources"]["InstanceTypes"] == second["ComputeResources"]["InstanceTypes"]
    if machine_class.gpu_type:
        family = GPU_FAMILIES[machine_class.gpu_type]
        assert first["ComputeResources"]["InstanceTypes"] == [family]
        assert first["ComputeResources"]["Ec2Configuration"] == [{"ImageType": "ECS_AL2023_NVIDIA"}]
    else:
        assert first["ComputeResources"]["Ec2Configuration"] == [{"ImageType": "ECS_AL2023"}]
        assert not any(t.startswith("g") for t in first["ComputeResources"]["InstanceTypes"])


def test_every_queue_cancels_jobs_blocked_by_capacity_or_misconfiguration(
    compute: Synth, capsys: pytest.CaptureFixture[str]
) -> None:
    queues = _job_queues(compute)
    expected = [
        # AWS Batch user guide, "Automatic remediation with jobStateTimeLimitActions": the reasons
        # Batch can act on.
        {"Reason": "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY", "MaxTimeSeconds": 1800},
        {"Reason": "MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE", "MaxTimeSeconds": 600},
        {"Reason": "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT", "MaxTimeSeconds": 600},
        {"Reason": "MISCONFIGURATION:EC2_INSTANCE_CONFIGURATION_UNSUPPORTED", "MaxTimeSeconds": 600},
    ]

    assert len(queues) == len(MACHINE_CLASSES) + 1  # and the build queue: a build waits no longer
    for name, queue in queues.items():
        assert queue["JobStateTimeLimitActions"] == [
            {"Action": "CANCEL", "State": "RUNNABLE", **action} for action in expected
        ], name
    with capsys.disabled():
        blocked = sum(
            1
            for queue in queues.values()
            for action in queue["JobStateTimeLimitActions"]
            if action["Reason"] == "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
        )
        print(f"\n{compute.stack.stack_name}: {blocked}/{len(queues)} queues cancel on capacity", end="")


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
    build_role = {"Fn::GetAtt": [compute.logical_id(compute.stack.compute.build_role), "Arn"]}
    builds = _build_definitions(compute)

    for name, definition in _job_definitions(compute).items():
        container = definition["ContainerProperties"]
        assert container["Privileged"] is False, name
        assert container["JobRoleArn"] == (build_role if name in builds else job_role), name
        # A build runs as the image's worker user; a job's supervisor as the image's root, which
        # starts the user's code as that worker user (worker/job_user.py).
        assert container.get("User") == ("10001" if name in builds else None), name
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


def _docker_images(compute: Synth) -> dict[tuple[str, str], dict[str, Any]]:
    """The stack's image assets by (Dockerfile name, PYTHON_VERSION build argument)."""
    assets = json.loads((compute.outdir / f"{compute.stack.artifact_id}.assets.json").read_text())
    return {
        (image["source"]["dockerFile"], image["source"]["dockerBuildArgs"]["PYTHON_VERSION"]): image
        for image in assets["dockerImages"].values()
    }


def test_worker_images_are_assets_built_at_deploy_time(compute: Synth) -> None:
    images = _docker_images(compute)

    # One CPU and one GPU image per Python version a job may choose, the version as a build argument.
    assert set(images) == {(f, v) for f in ("Dockerfile", "Dockerfile.gpu") for v in PYTHON_VERSIONS}
    for (dockerfile, _version), image in images.items():
        assert image["source"]["platform"] == "linux/amd64"
        # Same build context (the same worker code), each with its own Dockerfile.
        assert (compute.outdir / image["source"]["directory"] / dockerfile).is_file()
    tags = {d["imageTag"] for image in images.values() for d in image["destinations"].values()}
    assert len(tags) == 6  # six different images


@pytest.mark.parametrize("machine_class", MACHINE_CLASSES.values(), ids=lambda mc: mc.name)
def test_gpu_classes_run_the_cuda_image_and_the_others_the_cpu_image(
    compute: Synth, machine_class: MachineClass
) -> None:
    images = _docker_images(compute)
    dockerfile = "Dockerfile.gpu" if machine_class.gpus else "Dockerfile"
    for version in PYTHON_VERSIONS:
        definition = _job_definitions(compute)[
            compute.stack.names.job_definition_name(machine_class.name, version)
        ]
        image = definition["ContainerProperties"]["Image"]["Fn::Sub"]

        (destination,) = images[(dockerfile, version)]["destinations"].values()
        assert image.endswith(f":{destination['imageTag']}")
        assert compute.stack.region in image


def test_gpu_dockerfile_starts_from_the_cuda_runtime(worker_image_dir: Path) -> None:
    dockerfile = (worker_image_dir / "Dockerfile.gpu").read_text()
    *_stages, base = [line for line in dockerfile.splitlines() if line.startswith("FROM ")]

    assert base.startswith("FROM nvidia/cuda:12.") and "-runtime-" in base
    # The same worker as the CPU image: its code, its packages, its entrypoint; the supervisor as
    # root (no USER), the user's code as the unprivileged worker user (REMOTE_BATCH_JOB_UID).
    cpu = (worker_image_dir / "Dockerfile").read_text()
    for line in (
        "ARG PYTHON_VERSION=3.12",
        "COPY . /opt/remote-batch/worker/",
        'ENTRYPOINT ["/opt/remote-batch/venv/bin/python", "-m", "worker"]',
        "RUN useradd --create-home --uid 10001 --user-group worker",
        "ENV REMOTE_BATCH_JOB_UID=10001",
        "WORKDIR /home/worker",
    ):
        assert line in dockerfile and line in cpu
    for text in (cpu, dockerfile):
        assert not [line for line in text.splitlines() if line.startswith("USER ")]
    assert "-r requirements.txt" in (worker_image_dir / "requirements-gpu.txt").read_text()
    # The service's side (boto3) has its own venv; the user's interpreter gets the image's packages.
    assert "boto3==" in (worker_image_dir / "requirements-service.txt").read_text()
    for text in (cpu, dockerfile):
        assert "/opt/remote-batch/venv" in text and "requirements-service.txt" in text


@pytest.mark.parametrize("machine_class", MACHINE_CLASSES.values(), ids=lambda mc: mc.name)
def test_jobs_get_shared_memory_and_their_region(compute: Synth, machine_class: MachineClass) -> None:
    definition = _job_definitions(compute)[
        compute.stack.names.job_definition_name(machine_class.name, "3.13")
    ]
    container = definition["ContainerProperties"]

    # A quarter of the class's memory as /dev/shm (Docker's default is 64 MiB).
    assert container["LinuxParameters"] == {"SharedMemorySize": machine_class.memory_mib // 4}
    assert {e["Name"]: e["Value"] for e in container["Environment"]} == {
        "AWS_REGION": compute.stack.region,
        "AWS_DEFAULT_REGION": compute.stack.region,
        "REMOTE_BATCH_ENVIRONMENT_CACHE": "/var/cache/remote-batch/environments",
    }


def test_each_pool_has_an_encrypted_root_volume_of_its_size(compute: Synth) -> None:
    templates = compute.resources("AWS::EC2::LaunchTemplate")
    environments = _compute_environments(compute)
    sizes = {"General": 100, "HighMemory": 500, "GpuL40S": 200, "GpuL4": 200}

    assert {name: pool.root_volume_gib for name, pool in constants.COMPUTE_POOLS.items()} == sizes
    for name, pool in compute.stack.compute.pools.items():
        logical_id = compute.logical_id(pool.launch_template)
        data = templates[logical_id]["Properties"]["LaunchTemplateData"]
        assert data["BlockDeviceMappings"] == [
            {
                "DeviceName": "/dev/xvda",
                "Ebs": {
                    "DeleteOnTermination": True,
                    "Encrypted": True,
                    "VolumeSize": sizes[name],
                    "VolumeType": "gp3",
                },
            }
        ], name
        # IMDSv2 with a hop limit of 1: job containers cannot reach the instance role.
        assert data["MetadataOptions"] == data["MetadataOptions"] | {
            "HttpTokens": "required",
            "HttpPutResponseHopLimit": 1,
        }, name
        for environment in (pool.spot, pool.on_demand):
            resources = environments[compute.logical_id(environment)]["ComputeResources"]
            assert resources["LaunchTemplate"]["LaunchTemplateId"] == {"Ref": logical_id}, name
    assert len(templates) == len(sizes)


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

    statements = policy["PolicyDocument"]["Statement"]
    by_resource = {
        json_join[1]: statement["Action"]
        for statement in statements
        for resource in (
            statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        )
        for json_join in [resource["Fn::Join"][1]]
        if json_join[0] == bucket_arn
    }
    assert set(by_resource) == {"/inputs/*", "/outputs/*", "/environments/*"}
    assert by_resource["/inputs/*"] == "s3:GetObject"
    assert by_resource["/environments/*"] == "s3:GetObject"  # its environment's build, never written
    assert "s3:PutObject" in by_resource["/outputs/*"]
    assert not any(a.startswith(("s3:Get", "s3:List", "s3:Delete")) for a in by_resource["/outputs/*"])
    assert len(statements) == 2  # reads (inputs/, environments/) and puts (outputs/)


def test_compute_environments_have_the_names_the_api_may_update(compute: Synth) -> None:
    from infra.constants import COMPUTE_POOLS

    names = sorted(p["ComputeEnvironmentName"] for p in _compute_environments(compute).values())
    expected = sorted(
        f"remote-batch-dev-{pool}-{kind}" for pool in COMPUTE_POOLS for kind in ("Spot", "OnDemand")
    )
    assert names == expected


def test_every_shared_queue_schedules_by_fair_share_across_accounts(compute: Synth) -> None:
    # One fair-share scheduling policy per zone (share identifiers count per queue), all shares of
    # weight 1, usage remembered SHARE_DECAY_SECONDS: functions/domain/fair_share.py.
    policies = compute.resources("AWS::Batch::SchedulingPolicy")
    assert len(policies) == 1, policies
    ((policy_id, policy),) = policies.items()
    fair_share = policy["Properties"]["FairsharePolicy"]
    assert fair_share["ShareDecaySeconds"] == SHARE_DECAY_SECONDS
    assert not fair_share.get("ShareDistribution"), fair_share  # no account weighs more than another
    for name, queue in _class_queues(compute).items():
        assert queue["SchedulingPolicyArn"] == {"Fn::GetAtt": [policy_id, "Arn"]}, name
    # Builds are first in, first out (they are no account's share of the class queues).
    assert "SchedulingPolicyArn" not in _job_queues(compute)["remote-batch-dev-build"]


def test_the_build_queue_runs_builds_on_the_general_on_demand_environment_first(compute: Synth) -> None:
    queue = _job_queues(compute)["remote-batch-dev-build"]
    general = compute.stack.compute.pools["General"]

    assert queue["ComputeEnvironmentOrder"] == [
        {
            "ComputeEnvironment": {
                "Fn::GetAtt": [compute.logical_id(general.on_demand), "ComputeEnvironmentArn"]
            },
            "Order": 1,
        }
    ]
    # Ahead of every class queue sharing that environment: jobs wait on their environment's build.
    assert all(queue["Priority"] > other["Priority"] for other in _class_queues(compute).values())


def test_each_build_definition_runs_the_build_program_in_its_pythons_cpu_image(compute: Synth) -> None:
    from functions.domain.environment_builds import BUILD_MEMORY_MIB, BUILD_TIMEOUT_SECONDS, BUILD_VCPUS

    images = _docker_images(compute)
    for version in PYTHON_VERSIONS:
        definition = _build_definitions(compute)[compute.stack.names.build_job_definition_name(version)]
        container = definition["ContainerProperties"]

        # The image's entrypoint is `python -m worker`: the command makes it `python -m worker build`.
        assert container["Command"] == ["build"]
        (destination,) = images[("Dockerfile", version)]["destinations"].values()
        assert container["Image"]["Fn::Sub"].endswith(f":{destination['imageTag']}")
        requirements = {r["Type"]: r["Value"] for r in container["ResourceRequirements"]}
        assert requirements == {"VCPU": str(BUILD_VCPUS), "MEMORY": str(BUILD_MEMORY_MIB)}
        assert definition["Timeout"] == {"AttemptDurationSeconds": BUILD_TIMEOUT_SECONDS}
        assert "Volumes" not in container  # a build needs no environment cache
    assert BUILD_TIMEOUT_SECONDS == 30 * 60 + 5 * 60


def test_the_cpu_image_has_uv_for_the_build_program(worker_image_dir: Path) -> None:
    text = (worker_image_dir / "Dockerfile").read_text()

    assert "COPY --from=uv /uv /usr/local/bin/uv" in text
    assert "FROM ghcr.io/astral-sh/uv:" in text


def _policy_statements(compute: Synth, role: Any) -> list[dict[str, Any]]:
    logical_id = compute.logical_id(role)
    return [
        statement
        for p in compute.resources("AWS::IAM::Policy").values()
        if p["Properties"]["Roles"] == [{"Ref": logical_id}]
        for statement in p["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_the_build_role_writes_builds_in_every_zone_and_its_request_outcome_and_log_only(
    compute: Synth,
) -> None:
    statements = _policy_statements(compute, compute.stack.compute.build_role)
    resolved = compute.stack.resolve
    bucket_arn = {"Fn::GetAtt": [compute.logical_id(compute.stack.data.bucket), "Arn"]}
    other = {"us-east-1": "eu-central-1", "eu-central-1": "us-east-1"}[compute.stack.region]

    by_actions = {tuple(sorted(s["Action"])): s["Resource"] for s in statements}
    assert by_actions[("s3:GetObject", "s3:PutObject")] == {
        "Fn::Join": ["", [bucket_arn, "/environment-builds/*"]]
    }
    builds = by_actions[("s3:AbortMultipartUpload", "s3:GetObject", "s3:PutObject")]
    assert {"Fn::Join": ["", [bucket_arn, "/environments/*"]]} in builds
    assert json.dumps(resolved(builds)).count(f"-{other}/environments/*") == 1
    assert len(builds) == 2
    (logs,) = [r for a, r in by_actions.items() if "logs:PutLogEvents" in a]
    assert json.dumps(logs).endswith(':log-group:/remote-batch/dev/jobs:log-stream:environments/*"]]}')
    (listing,) = [s for s in statements if s["Action"] == "s3:ListBucket"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["environments/*"]}}
    assert len(listing["Resource"]) == 2  # this zone's bucket and the other's
    assert len(statements) == 4
    # No other listing, no deleting, nothing of inputs/ or outputs/.
    text = json.dumps([s for s in statements if s is not listing])
    assert (
        "s3:List" not in text
        and "s3:Delete" not in text
        and "/inputs/" not in text
        and "/outputs/" not in text
    )


def test_every_job_definition_mounts_the_hosts_environment_cache_made_at_boot(compute: Synth) -> None:
    path = constants.ENVIRONMENT_CACHE_PATH

    for name, definition in _class_definitions(compute).items():
        container = definition["ContainerProperties"]
        assert container["Volumes"] == [{"Name": "environments", "Host": {"SourcePath": path}}], name
        assert container["MountPoints"] == [
            {"SourceVolume": "environments", "ContainerPath": path, "ReadOnly": False}
        ], name
    for template in compute.resources("AWS::EC2::LaunchTemplate").values():
        user_data = json.dumps(template["Properties"]["LaunchTemplateData"]["UserData"])
        assert "multipart/mixed" in user_data
        # Root's, 0755: the supervisor (root) unpacks there; the user's code (uid 10001) only reads.
        assert f"install -d -m 0755 -o 0 -g 0 {path}" in user_data
