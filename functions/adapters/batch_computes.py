"""AWS Batch compute environments and job queues of dedicated computes (``ComputeEnvironments``).

One managed EC2 compute environment and one job queue per compute, both named
``<prefix>-cmp-<account digest>-<name>`` (``functions.domain.computes.resource_name``), built from
the zone's ``ComputeTemplate`` (the subnets, security group, instance profile, service role and
launch templates the zone's shared compute environments use: ``infra/constructs/batch_compute.py``).

Rules taken from the AWS Batch API reference: ``UpdateComputeEnvironment`` may raise
``desiredvCpus`` but never lower it ("the updated desiredvCpus value must be greater than or equal
to the current desiredvCpus value"), so a scale-down sets only ``minvCpus``/``maxvCpus`` and Batch
lowers the desired count itself; a job queue is created on ``VALID`` compute environments only;
``DeleteJobQueue`` needs the queue ``DISABLED``; ``DeleteComputeEnvironment`` needs the environment
``DISABLED`` and no queue using it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from functions.adapters.errors import translate_errors
from functions.domain.errors import DependencyFailed
from functions.domain.machine_classes import MachineClass
from functions.ports import EnvironmentState, QueueState
from functions.settings import ComputeTemplateSettings

if TYPE_CHECKING:
    from mypy_boto3_batch import BatchClient

BATCH_FAILED = "AWS Batch refused the dedicated compute's change ({code}); the meter retries."


@dataclass(frozen=True, slots=True)
class ComputeTemplate:
    """What every dedicated compute environment of a zone is built from.

    ``instance_types`` maps a machine class to the EC2 instance types (or families) of its shared
    compute environment; ``launch_templates`` maps a class to a launch template id (the GPU classes'
    ECS GPU AMI), classes without one use Batch's default ECS AMI. ``instance_role`` is the instance
    profile ARN, ``service_role`` the Batch service role ARN (the only roles the api may pass).
    """

    subnets: tuple[str, ...]
    security_groups: tuple[str, ...]
    instance_role: str
    service_role: str
    instance_types: Mapping[str, tuple[str, ...]]
    launch_templates: Mapping[str, str] = field(default_factory=dict)
    image_types: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)


class SsmComputeTemplate:
    """The zone's ``ComputeTemplate`` from the SSM parameter its stack wrote (JSON of
    ``functions.settings.ComputeTemplateSettings``), read on first use and kept (it changes only with
    a deploy of the zone's stack, which also restarts the functions).

    Raises ``DependencyFailed`` when the parameter cannot be read or is malformed.
    """

    def __init__(self, ssm: Any, name: str, tags: Mapping[str, str]) -> None:
        self._ssm = ssm
        self._name = name
        self._tags = dict(tags)
        self._template: ComputeTemplate | None = None

    def __call__(self) -> ComputeTemplate:
        if self._template is None:
            with translate_errors(
                "ssm", "GetParameter", failed="The dedicated compute template is unreadable."
            ):
                value = self._ssm.get_parameter(Name=self._name)["Parameter"].get("Value", "")
            try:
                parsed = ComputeTemplateSettings.model_validate_json(value)
            except ValidationError as exc:
                raise DependencyFailed(f"SSM parameter {self._name} is not a compute template") from exc
            self._template = ComputeTemplate(
                subnets=parsed.subnets,
                security_groups=parsed.security_groups,
                instance_role=parsed.instance_role,
                service_role=parsed.service_role,
                instance_types=parsed.instance_types,
                launch_templates=parsed.launch_templates,
                image_types=parsed.image_types,
                tags=self._tags,
            )
        return self._template


class AwsComputeEnvironments:
    """``ComputeEnvironments`` on one region's AWS Batch client.

    Parameters
    ----------
    client : BatchClient
        The zone region's Batch client (built once per cold start).
    template : ComputeTemplate | Callable[[], ComputeTemplate]
        The zone's network, roles and instance types (or what loads them on first need:
        ``SsmComputeTemplate``; only a creation needs them).
    tags : Mapping[str, str]
        Put on every queue (with ``remote-batch:compute``).
    """

    def __init__(
        self,
        client: BatchClient,
        template: ComputeTemplate | Callable[[], ComputeTemplate],
        tags: Mapping[str, str] | None = None,
    ) -> None:
        self._batch = client
        self._template = template
        self._tags = dict(tags if tags is not None else getattr(template, "tags", {}))

    def _loaded(self) -> ComputeTemplate:
        return self._template if isinstance(self._template, ComputeTemplate) else self._template()

    def create_environment(self, name: str, machine: MachineClass) -> None:
        """CreateComputeEnvironment: managed, EC2 on-demand, the class's instance types, 0 vCPUs
        (``maxvCpus`` the class's vCPUs until the first start sets min = max). None when it exists."""
        if self.describe_environment(name) is not None:
            return
        template = self._loaded()
        resources: dict[str, Any] = {
            "type": "EC2",
            "allocationStrategy": "BEST_FIT_PROGRESSIVE",
            "minvCpus": 0,
            "maxvCpus": machine.vcpus,
            "desiredvCpus": 0,
            "instanceTypes": list(template.instance_types[machine.name]),
            "subnets": list(template.subnets),
            "securityGroupIds": list(template.security_groups),
            "instanceRole": template.instance_role,
            "tags": {**template.tags, "remote-batch:compute": name},
        }
        launch_template = template.launch_templates.get(machine.name)
        if launch_template:
            resources["launchTemplate"] = {"launchTemplateId": launch_template, "version": "$Latest"}
        image_type = template.image_types.get(machine.name)
        if image_type:
            resources["ec2Configuration"] = [{"imageType": image_type}]
        with translate_errors("batch", "CreateComputeEnvironment", failed=BATCH_FAILED):
            self._batch.create_compute_environment(
                computeEnvironmentName=name,
                type="MANAGED",
                state="ENABLED",
                computeResources=resources,  # type: ignore[arg-type]
                serviceRole=template.service_role,
                tags={**template.tags, "remote-batch:compute": name},
            )

    def describe_environment(self, name: str) -> EnvironmentState | None:
        """DescribeComputeEnvironments of ``name``; None when absent or ``DELETED``."""
        with translate_errors("batch", "DescribeComputeEnvironments", failed=BATCH_FAILED):
            found = self._batch.describe_compute_environments(computeEnvironments=[name])
        for environment in found.get("computeEnvironments", []):
            status = environment.get("status", "")
            if environment.get("computeEnvironmentName") != name or status == "DELETED":
                continue
            resources: dict[str, Any] = dict(environment.get("computeResources") or {})
            return EnvironmentState(
                status=status,
                state=environment.get("state", "ENABLED"),
                min_vcpus=int(resources.get("minvCpus", 0)),
                max_vcpus=int(resources.get("maxvCpus", 0)),
                desired_vcpus=int(resources.get("desiredvCpus", 0)),
                reason=environment.get("statusReason"),
            )
        return None

    def set_capacity(self, name: str, vcpus: int) -> None:
        """UpdateComputeEnvironment: min = max (= desired when scaling up) = ``vcpus``."""
        resources: dict[str, Any] = {"minvCpus": vcpus, "maxvCpus": vcpus}
        if vcpus > 0:
            resources["desiredvCpus"] = vcpus
        with translate_errors("batch", "UpdateComputeEnvironment", failed=BATCH_FAILED):
            self._batch.update_compute_environment(
                computeEnvironment=name,
                computeResources=resources,  # type: ignore[arg-type]
            )

    def disable_environment(self, name: str) -> None:
        """UpdateComputeEnvironment ``state=DISABLED``."""
        with translate_errors("batch", "UpdateComputeEnvironment", failed=BATCH_FAILED):
            self._batch.update_compute_environment(computeEnvironment=name, state="DISABLED")

    def delete_environment(self, name: str) -> None:
        """DeleteComputeEnvironment."""
        with translate_errors("batch", "DeleteComputeEnvironment", failed=BATCH_FAILED):
            self._batch.delete_compute_environment(computeEnvironment=name)

    def create_queue(self, name: str, environment: str) -> None:
        """CreateJobQueue on ``environment`` alone (priority 1, ENABLED); none if it exists."""
        if self.describe_queue(name) is not None:
            return
        with translate_errors("batch", "CreateJobQueue", failed=BATCH_FAILED):
            self._batch.create_job_queue(
                jobQueueName=name,
                state="ENABLED",
                priority=1,
                computeEnvironmentOrder=[{"order": 1, "computeEnvironment": environment}],
                tags={**self._tags, "remote-batch:compute": name},
            )

    def describe_queue(self, name: str) -> QueueState | None:
        """DescribeJobQueues of ``name``; None when absent or ``DELETED``."""
        with translate_errors("batch", "DescribeJobQueues", failed=BATCH_FAILED):
            found = self._batch.describe_job_queues(jobQueues=[name])
        for queue in found.get("jobQueues", []):
            status = queue.get("status", "")
            if queue.get("jobQueueName") != name or status == "DELETED":
                continue
            return QueueState(
                status=status, state=queue.get("state", "ENABLED"), reason=queue.get("statusReason")
            )
        return None

    def disable_queue(self, name: str) -> None:
        """UpdateJobQueue ``state=DISABLED``."""
        with translate_errors("batch", "UpdateJobQueue", failed=BATCH_FAILED):
            self._batch.update_job_queue(jobQueue=name, state="DISABLED")

    def delete_queue(self, name: str) -> None:
        """DeleteJobQueue."""
        with translate_errors("batch", "DeleteJobQueue", failed=BATCH_FAILED):
            self._batch.delete_job_queue(jobQueue=name)
