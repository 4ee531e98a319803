"""AWS Batch in one region (``BatchGateway``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError
from pydantic import ValidationError

from functions.adapters.batch_detail import BatchJobDetail, to_state
from functions.domain.errors import DependencyFailed
from functions.domain.jobs import BatchJobState
from functions.ports import BatchSubmission

# DescribeJobs takes at most 100 job ids (AWS Batch API reference).
DESCRIBE_BATCH_SIZE = 100

# AWS Batch's smallest attemptDurationSeconds (SubmitJob API reference, JobTimeout).
MIN_TIMEOUT_SECONDS = 60


def submit_job_request(submission: BatchSubmission) -> dict[str, Any]:
    """The SubmitJob parameters for a submission: resource requirements per machine class as
    ``containerOverrides``, the worker's environment, the timeout and tags."""
    requirements = [
        {"type": "VCPU", "value": str(submission.vcpus)},
        {"type": "MEMORY", "value": str(submission.memory_mib)},
    ]
    if submission.gpus:
        requirements.append({"type": "GPU", "value": str(submission.gpus)})
    request: dict[str, Any] = {
        "jobName": submission.job_name,
        "jobQueue": submission.job_queue,
        "jobDefinition": submission.job_definition,
        "containerOverrides": {
            "environment": [{"name": k, "value": v} for k, v in sorted(submission.environment.items())],
            "resourceRequirements": requirements,
        },
        "propagateTags": True,
    }
    if submission.tags:
        request["tags"] = dict(submission.tags)
    if submission.timeout_seconds is not None:
        request["timeout"] = {"attemptDurationSeconds": max(MIN_TIMEOUT_SECONDS, submission.timeout_seconds)}
    return request


class AwsBatchGateway:
    """``BatchGateway`` on the AWS Batch API of one region."""

    def __init__(self, client: Any) -> None:
        self._batch = client

    def submit_job(self, submission: BatchSubmission) -> str:
        """SubmitJob; returns the Batch job id. ``DependencyFailed`` when Batch refuses."""
        try:
            response = self._batch.submit_job(**submit_job_request(submission))
        except ClientError as exc:
            raise DependencyFailed(
                "AWS Batch did not accept the job; nothing was charged. Try again."
            ) from exc
        job_id: str = response["jobId"]
        return job_id

    def terminate_job(self, batch_job_id: str, reason: str) -> None:
        """TerminateJob (works in every non-final Batch status)."""
        try:
            self._batch.terminate_job(jobId=batch_job_id, reason=reason)
        except ClientError as exc:
            raise DependencyFailed("AWS Batch did not accept the termination; try again.") from exc

    def describe_jobs(self, batch_job_ids: Sequence[str], observed_at_ms: int) -> list[BatchJobState]:
        """DescribeJobs, 100 ids a call; details that do not parse are skipped."""
        states: list[BatchJobState] = []
        for start in range(0, len(batch_job_ids), DESCRIBE_BATCH_SIZE):
            chunk = list(batch_job_ids[start : start + DESCRIBE_BATCH_SIZE])
            try:
                response = self._batch.describe_jobs(jobs=chunk)
            except ClientError as exc:
                raise DependencyFailed("AWS Batch did not describe the jobs; the meter retries.") from exc
            for raw in response.get("jobs", []):
                try:
                    states.append(to_state(BatchJobDetail.model_validate(raw), observed_at_ms))
                except ValidationError:
                    continue
        return states
