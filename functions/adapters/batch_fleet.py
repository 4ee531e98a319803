"""AWS Batch: the operators' switches of one region (``FleetControl``): DescribeJobQueues,
UpdateJobQueue ``state``, DescribeComputeEnvironments, UpdateComputeEnvironment ``maxvCpus``.

IAM (``infra/constructs/functions.py``): the two updates are allowed on exactly the service's job
queues and compute environments; the two describes support no resource-level permission (Service
Authorization Reference, "Actions defined by AWS Batch": no resource type for them), so they are
allowed on ``*``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from functions.adapters.batch import translated_errors
from functions.ports import ComputeEnvironmentInfo, JobQueueInfo

if TYPE_CHECKING:
    from mypy_boto3_batch import BatchClient

# DescribeJobQueues and DescribeComputeEnvironments take at most 100 names or ARNs a call.
DESCRIBE_BATCH_SIZE = 100


def job_queue_info(raw: dict[str, Any]) -> JobQueueInfo:
    """A ``JobQueueDetail`` (DescribeJobQueues) in the service's terms."""
    order = sorted(raw.get("computeEnvironmentOrder") or [], key=lambda ce: int(ce.get("order", 0)))
    return JobQueueInfo(
        name=str(raw["jobQueueName"]),
        arn=str(raw["jobQueueArn"]),
        state=str(raw.get("state", "")),
        status=str(raw.get("status", "")),
        compute_environments=tuple(str(ce["computeEnvironment"]) for ce in order),
    )


def compute_environment_info(raw: dict[str, Any]) -> ComputeEnvironmentInfo:
    """A ``ComputeEnvironmentDetail`` (DescribeComputeEnvironments) in the service's terms."""
    resources = raw.get("computeResources") or {}
    max_vcpus = resources.get("maxvCpus")
    return ComputeEnvironmentInfo(
        name=str(raw["computeEnvironmentName"]),
        arn=str(raw["computeEnvironmentArn"]),
        state=str(raw.get("state", "")),
        status=str(raw.get("status", "")),
        max_vcpus=None if max_vcpus is None else int(max_vcpus),
    )


class AwsBatchFleet:
    """``FleetControl`` on the AWS Batch API of one region (a typed boto3 ``batch`` client).

    Every method raises ``DependencyFailed`` when Batch refuses (``ClientException``), throttles or
    cannot be reached.
    """

    def __init__(self, client: BatchClient) -> None:
        self._batch = client

    def describe_job_queues(self, job_queues: Sequence[str]) -> list[JobQueueInfo]:
        """DescribeJobQueues, 100 names a call."""
        found: list[JobQueueInfo] = []
        for start in range(0, len(job_queues), DESCRIBE_BATCH_SIZE):
            chunk = list(job_queues[start : start + DESCRIBE_BATCH_SIZE])
            with translated_errors("describe the job queues", "try again."):
                response = self._batch.describe_job_queues(jobQueues=chunk)
            found += [job_queue_info(dict(raw)) for raw in response.get("jobQueues", [])]
        return found

    def set_job_queue_state(self, job_queue: str, state: str) -> None:
        """UpdateJobQueue ``state``."""
        with translated_errors(f"set the job queue {state}", "try again."):
            self._batch.update_job_queue(jobQueue=job_queue, state=state)  # type: ignore[arg-type]

    def describe_compute_environments(self, environments: Sequence[str]) -> list[ComputeEnvironmentInfo]:
        """DescribeComputeEnvironments, 100 names a call."""
        found: list[ComputeEnvironmentInfo] = []
        for start in range(0, len(environments), DESCRIBE_BATCH_SIZE):
            chunk = list(environments[start : start + DESCRIBE_BATCH_SIZE])
            with translated_errors("describe the compute environments", "try again."):
                response = self._batch.describe_compute_environments(computeEnvironments=chunk)
            found += [compute_environment_info(dict(raw)) for raw in response.get("computeEnvironments", [])]
        return found

    def set_max_vcpus(self, environment: str, max_vcpus: int) -> None:
        """UpdateComputeEnvironment ``computeResources.maxvCpus``."""
        with translated_errors("change the compute environment's maxvCpus", "try again."):
            self._batch.update_compute_environment(
                computeEnvironment=environment, computeResources={"maxvCpus": max_vcpus}
            )
