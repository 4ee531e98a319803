"""AWS Batch in one region (``BatchGateway``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger
from pydantic import ValidationError

from functions.adapters.batch_detail import BatchJobDetail, to_state
from functions.adapters.errors import translate_errors
from functions.domain.errors import BatchRefused
from functions.domain.images import SUPERVISOR_CONTAINER
from functions.domain.jobs import BatchJobState
from functions.ports import BatchSubmission, JobDefinitions

if TYPE_CHECKING:  # the stubs are a dev dependency; the Lambda runtime has no need of them
    from mypy_boto3_batch import BatchClient
    from mypy_boto3_batch.type_defs import (
        KeyValuePairTypeDef,
        ResourceRequirementTypeDef,
        SubmitJobRequestTypeDef,
    )

logger = Logger(child=True)

# AWS Batch's 400 (a job, queue or definition it does not know, bad parameters): the same request
# never succeeds (AWS Batch API reference, "Common errors").
CLIENT_ERROR_CODES = frozenset({"ClientException"})

# DescribeJobs takes at most 100 job ids (AWS Batch API reference).
DESCRIBE_BATCH_SIZE = 100

# ListJobs' filter on the job name: with a filter, ListJobs returns jobs in any status (its
# ``jobStatus`` is ignored) and matches the name case-insensitively, a trailing ``*`` as a prefix (AWS
# Batch API reference, ListJobs, ``filters``).
JOB_NAME_FILTER = "JOB_NAME"

# AWS Batch's smallest attemptDurationSeconds (SubmitJob API reference, JobTimeout).
MIN_TIMEOUT_SECONDS = 60


def submit_job_request(
    submission: BatchSubmission, job_definition: str | None = None
) -> SubmitJobRequestTypeDef:
    """The SubmitJob parameters for a submission: resource requirements per machine class as
    ``containerOverrides`` (vCPUs, MiB of memory, GPUs when asked), the worker's environment sorted by
    name, ``propagateTags`` (the job's tags reach its ECS task), the tags, the share identifier on a
    fair-share queue, and the timeout (``attemptDurationSeconds``, raised to AWS Batch's 60-second
    minimum).

    ``job_definition`` (an image job's, ``batch_definitions``) replaces the submission's: a
    multi-container job, whose overrides are ``ecsPropertiesOverride`` for its supervisor container
    (the environment; the resources are the definition's)."""
    requirements: list[ResourceRequirementTypeDef] = [
        {"type": "VCPU", "value": str(submission.vcpus)},
        {"type": "MEMORY", "value": str(submission.memory_mib)},
    ]
    if submission.gpus:
        requirements.append({"type": "GPU", "value": str(submission.gpus)})
    environment: list[KeyValuePairTypeDef] = [
        {"name": k, "value": v} for k, v in sorted(submission.environment.items())
    ]
    request: SubmitJobRequestTypeDef = {
        "jobName": submission.job_name,
        "jobQueue": submission.job_queue,
        "jobDefinition": job_definition or submission.job_definition,
        "propagateTags": True,
    }
    if job_definition is None:
        request["containerOverrides"] = {"environment": environment, "resourceRequirements": requirements}
    else:
        request["ecsPropertiesOverride"] = {
            "taskProperties": [{"containers": [{"name": SUPERVISOR_CONTAINER, "environment": environment}]}]
        }
    if submission.tags:
        request["tags"] = dict(submission.tags)
    if submission.share_identifier is not None:
        # The account's share on a fair-share queue (functions.domain.fair_share).
        request["shareIdentifier"] = submission.share_identifier
    if submission.array_size is not None:
        # An AWS Batch array job: children <jobId>:0..size-1, each with AWS_BATCH_JOB_ARRAY_INDEX.
        request["arrayProperties"] = {"size": submission.array_size}
    if submission.timeout_seconds is not None:
        request["timeout"] = {"attemptDurationSeconds": max(MIN_TIMEOUT_SECONDS, submission.timeout_seconds)}
    return request


@contextmanager
def translated_errors(action: str, consequence: str) -> Iterator[None]:
    """Turn what boto3 raises for one AWS Batch call into the domain's ``DependencyFailed``
    (through the adapters' shared ``translate_errors``).

    Parameters
    ----------
    action : str
        What was asked, for the message and the log (``"accept the job"``).
    consequence : str
        What happens next, told to the caller (``"nothing was charged. Try again."``).

    Raises
    ------
    DependencyFailed
        Throttling (``ThrottlingException``, ``TooManyRequestsException``...): "AWS Batch is busy";
        ``ClientException`` (AWS Batch's 400: a job, queue or definition it does not know, bad
        parameters): ``BatchRefused`` "AWS Batch refused to ..."; ``ServerException`` and any other
        error code, and errors reaching the endpoint at all (``EndpointConnectionError``, timeouts: botocore's
        ``BotoCoreError``): "AWS Batch did not ...". The original error is the ``__cause__``; its
        code is logged, never shown to the caller.
    """
    with translate_errors(
        "batch",
        action,
        failed=f"AWS Batch did not {action}; {consequence}",
        busy=f"AWS Batch is busy and did not {action}; {consequence}",
        unreachable=f"AWS Batch could not be reached to {action}; {consequence}",
        permanent=CLIENT_ERROR_CODES,
        refused=f"AWS Batch refused to {action}; {consequence}",
        refusal=BatchRefused,
    ):
        yield


class AwsBatchGateway:
    """``BatchGateway`` on the AWS Batch API of one region (a typed boto3 ``batch`` client);
    ``definitions`` gives image jobs their job definitions (None: the zone runs no images of its own,
    and a submission with an image is refused)."""

    def __init__(self, client: BatchClient, definitions: JobDefinitions | None = None) -> None:
        self._batch = client
        self._definitions = definitions

    def submit_job(self, submission: BatchSubmission) -> str:
        """SubmitJob (``submit_job_request``), an image job with its image's definition
        (``JobDefinitions.definition_for``, registered on first use); returns the Batch job id.

        Raises ``DependencyFailed`` when Batch refuses, throttles or cannot be reached.
        """
        definition: str | None = None
        if submission.image is not None:
            if self._definitions is None:
                raise BatchRefused("AWS Batch here runs no images of their own; nothing was charged.")
            definition = self._definitions.definition_for(submission.image)
        with translated_errors("accept the job", "nothing was charged. Try again."):
            response = self._batch.submit_job(**submit_job_request(submission, definition))
        return response["jobId"]

    def terminate_job(self, batch_job_id: str, reason: str) -> None:
        """TerminateJob (works in every non-final Batch status; a final job is left as it is).

        Raises ``DependencyFailed`` when Batch refuses (a job id it does not know is a
        ``ClientException``), throttles or cannot be reached: the caller sends it again later.
        """
        with translated_errors("accept the termination", "try again."):
            self._batch.terminate_job(jobId=batch_job_id, reason=reason)

    def describe_jobs(self, batch_job_ids: Sequence[str], observed_at_ms: int) -> list[BatchJobState]:
        """DescribeJobs, at most 100 ids a call (``DESCRIBE_BATCH_SIZE``), in the order given.

        A job Batch does not know (never submitted, or past its retention) is simply absent from
        the result; details that do not parse are skipped. Raises ``DependencyFailed`` when a call
        fails (nothing is returned then: the meter retries the whole set next tick).
        """
        states: list[BatchJobState] = []
        for start in range(0, len(batch_job_ids), DESCRIBE_BATCH_SIZE):
            chunk = list(batch_job_ids[start : start + DESCRIBE_BATCH_SIZE])
            with translated_errors("describe the jobs", "the meter retries."):
                response = self._batch.describe_jobs(jobs=chunk)
            for raw in response.get("jobs", []):
                try:
                    states.append(to_state(BatchJobDetail.model_validate(raw), observed_at_ms))
                except ValidationError:
                    logger.warning("job detail not understood", batch_job_id=raw.get("jobId"))
                    continue
        return states

    def find_job_by_name(self, job_queue: str, job_name: str) -> str | None:
        """ListJobs of ``job_queue`` with a ``JOB_NAME`` filter (every page), keeping the summaries whose
        name is exactly ``job_name`` (the filter is case-insensitive and reads a trailing ``*`` as a
        prefix); the oldest one's id (``createdAt``), or None.

        Raises ``DependencyFailed`` when Batch refuses (a queue it does not know is a
        ``ClientException``), throttles or cannot be reached.
        """
        found: list[tuple[int, str]] = []
        with translated_errors("list the jobs", "the meter retries."):
            pages = self._batch.get_paginator("list_jobs").paginate(
                jobQueue=job_queue, filters=[{"name": JOB_NAME_FILTER, "values": [job_name]}]
            )
            for page in pages:
                for summary in page.get("jobSummaryList", []):
                    if summary["jobName"] == job_name:
                        found.append((summary.get("createdAt", 0), summary["jobId"]))
        if len(found) > 1:
            logger.warning("several batch jobs share a name", job_name=job_name, count=len(found))
        return min(found)[1] if found else None
