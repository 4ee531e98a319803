"""The AWS Batch adapter at its boundary: the exact requests it sends (botocore's ``Stubber`` checks
each against the expected parameters and the API's own model) and how each error boto3 raises becomes
the domain's ``DependencyFailed``. Shapes: AWS Batch API reference (SubmitJob, TerminateJob,
DescribeJobs: at most 100 ids a call)."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from botocore.stub import Stubber

from functions.adapters.batch import DESCRIBE_BATCH_SIZE, AwsBatchGateway
from functions.domain.errors import DependencyFailed
from functions.domain.jobs import BatchJobState
from functions.ports import BatchSubmission

QUEUE = "arn:aws:batch:us-east-1:123456789012:job-queue/remote-batch-Basic1x8"
DEFINITION = "arn:aws:batch:us-east-1:123456789012:job-definition/remote-batch-worker:3"
JOB_NAME = "job-01JDXYZ0000000000000000000"
BATCH_ID = "3f1c9a52-0d2e-4f3b-9a77-6b1d1b0e2c11"
OBSERVED_MS = 1_764_000_900_000


@pytest.fixture
def client():
    return boto3.client("batch", region_name="us-east-1")


@pytest.fixture
def stubber(client):
    with Stubber(client) as stub:
        yield stub
        stub.assert_no_pending_responses()


@pytest.fixture
def gateway(client):
    return AwsBatchGateway(client)


def submission(**overrides):
    fields: dict[str, Any] = {
        "job_name": JOB_NAME,
        "job_queue": QUEUE,
        "job_definition": DEFINITION,
        "vcpus": 2,
        "memory_mib": 8192,
        "gpus": 0,
        "environment": {"REMOTE_BATCH_JOB_ID": JOB_NAME, "REMOTE_BATCH_BUCKET": "bucket-us"},
        "timeout_seconds": 3600,
        "tags": {"remote-batch:jobId": JOB_NAME, "remote-batch:account": "alice"},
    }
    return BatchSubmission(**(fields | overrides))


def submitted(job_id=BATCH_ID):
    return {
        "jobArn": f"arn:aws:batch:us-east-1:123456789012:job/{job_id}",
        "jobName": JOB_NAME,
        "jobId": job_id,
    }


def detail(job_id, status="RUNNING", **extra):
    return {
        "jobId": job_id,
        "jobName": f"job-{job_id}",
        "jobQueue": QUEUE,
        "jobDefinition": DEFINITION,
        "status": status,
        "startedAt": 1_764_000_030_000,
        **extra,
    }


# -- SubmitJob ------------------------------------------------------------------------------------


def test_submit_job_sends_every_parameter_and_returns_the_batch_id(stubber, gateway):
    stubber.add_response(
        "submit_job",
        submitted(),
        {
            "jobName": JOB_NAME,
            "jobQueue": QUEUE,
            "jobDefinition": DEFINITION,
            "containerOverrides": {
                # sorted by name, whatever order the mapping has
                "environment": [
                    {"name": "REMOTE_BATCH_BUCKET", "value": "bucket-us"},
                    {"name": "REMOTE_BATCH_JOB_ID", "value": JOB_NAME},
                ],
                "resourceRequirements": [
                    {"type": "VCPU", "value": "2"},
                    {"type": "MEMORY", "value": "8192"},
                ],
            },
            "propagateTags": True,
            "tags": {"remote-batch:jobId": JOB_NAME, "remote-batch:account": "alice"},
            "timeout": {"attemptDurationSeconds": 3600},
        },
    )
    assert gateway.submit_job(submission()) == BATCH_ID


def test_submit_job_asks_for_gpus_and_raises_a_short_timeout_to_batchs_60_second_minimum(stubber, gateway):
    stubber.add_response(
        "submit_job",
        submitted(),
        {
            "jobName": JOB_NAME,
            "jobQueue": QUEUE,
            "jobDefinition": DEFINITION,
            "containerOverrides": {
                "environment": [],
                "resourceRequirements": [
                    {"type": "VCPU", "value": "8"},
                    {"type": "MEMORY", "value": "61440"},
                    {"type": "GPU", "value": "1"},
                ],
            },
            "propagateTags": True,
            "timeout": {"attemptDurationSeconds": 60},
        },
    )
    job = submission(vcpus=8, memory_mib=61440, gpus=1, environment={}, timeout_seconds=5, tags={})
    assert gateway.submit_job(job) == BATCH_ID


def test_submit_job_without_a_timeout_or_tags_sends_neither(stubber, gateway):
    stubber.add_response(
        "submit_job",
        submitted(),
        {
            "jobName": JOB_NAME,
            "jobQueue": QUEUE,
            "jobDefinition": DEFINITION,
            "containerOverrides": {
                "environment": [{"name": "A", "value": "1"}],
                "resourceRequirements": [{"type": "VCPU", "value": "1"}, {"type": "MEMORY", "value": "2048"}],
            },
            "propagateTags": True,
        },
    )
    job = submission(vcpus=1, memory_mib=2048, environment={"A": "1"}, timeout_seconds=None, tags={})
    assert gateway.submit_job(job) == BATCH_ID


# -- TerminateJob ---------------------------------------------------------------------------------


def test_terminate_job_sends_the_id_and_the_reason(stubber, gateway):
    stubber.add_response("terminate_job", {}, {"jobId": BATCH_ID, "reason": "Aborted by user"})
    assert gateway.terminate_job(BATCH_ID, "Aborted by user") is None


# -- DescribeJobs ---------------------------------------------------------------------------------


def test_describe_jobs_asks_100_ids_a_call_and_returns_every_state(stubber, gateway):
    ids = [f"id-{i:03d}" for i in range(2 * DESCRIBE_BATCH_SIZE + 1)]
    for chunk in (ids[:100], ids[100:200], ids[200:]):
        stubber.add_response("describe_jobs", {"jobs": [detail(i) for i in chunk]}, {"jobs": chunk})
    states = gateway.describe_jobs(ids, OBSERVED_MS)
    assert [s.batch_job_id for s in states] == ids
    assert states[0] == BatchJobState(
        batch_job_id="id-000",
        job_name="job-id-000",
        status="RUNNING",
        status_reason=None,
        created_at_ms=None,
        started_at_ms=1_764_000_030_000,
        stopped_at_ms=None,
        exit_code=None,
        log_stream_name=None,
        attempt_count=0,
        observed_at_ms=OBSERVED_MS,  # when DescribeJobs was asked, for the times Batch leaves out
    )


def test_describe_jobs_of_no_ids_calls_nothing(stubber, gateway):
    assert gateway.describe_jobs([], OBSERVED_MS) == []


def test_a_job_batch_does_not_know_is_absent_from_the_result(stubber, gateway):
    # DescribeJobs answers 200 with only the jobs it knows (never submitted, or past retention).
    final = detail(
        "known",
        "SUCCEEDED",
        stoppedAt=1_764_000_120_000,
        container={"exitCode": 0, "logStreamName": "remote-batch/default/abc"},
        attempts=[
            {"container": {"exitCode": 0}, "startedAt": 1_764_000_030_000, "stoppedAt": 1_764_000_120_000}
        ],
    )
    stubber.add_response("describe_jobs", {"jobs": [final]}, {"jobs": ["known", "missing"]})
    [state] = gateway.describe_jobs(["known", "missing"], OBSERVED_MS)
    assert (state.batch_job_id, state.status, state.exit_code, state.stopped_at_ms, state.attempt_count) == (
        "known",
        "SUCCEEDED",
        0,
        1_764_000_120_000,
        1,
    )
    assert state.log_stream_name == "remote-batch/default/abc"


def test_a_final_detail_without_stopped_at_stops_when_observed(stubber, gateway):
    stubber.add_response("describe_jobs", {"jobs": [detail("a", "FAILED")]}, {"jobs": ["a"]})
    [state] = gateway.describe_jobs(["a"], OBSERVED_MS)
    assert state.stopped_at_ms == OBSERVED_MS


# -- errors ---------------------------------------------------------------------------------------

CALLS = {
    "submit_job": lambda gateway: gateway.submit_job(submission()),
    "terminate_job": lambda gateway: gateway.terminate_job(BATCH_ID, "Aborted by user"),
    "describe_jobs": lambda gateway: gateway.describe_jobs([BATCH_ID], OBSERVED_MS),
}
ACTIONS = {
    "submit_job": "accept the job; nothing was charged. Try again.",
    "terminate_job": "accept the termination; try again.",
    "describe_jobs": "describe the jobs; the meter retries.",
}


@pytest.mark.parametrize("operation", sorted(CALLS))
@pytest.mark.parametrize(
    ("code", "status", "prefix"),
    [
        ("TooManyRequestsException", 429, "AWS Batch is busy and did not"),
        ("ThrottlingException", 400, "AWS Batch is busy and did not"),
        ("ClientException", 400, "AWS Batch refused to"),
        ("ServerException", 500, "AWS Batch did not"),
    ],
)
def test_each_batch_error_becomes_dependency_failed(stubber, gateway, operation, code, status, prefix):
    stubber.add_client_error(
        operation, service_error_code=code, service_message="boom", http_status_code=status
    )
    with pytest.raises(DependencyFailed) as raised:
        CALLS[operation](gateway)
    assert str(raised.value) == f"{prefix} {ACTIONS[operation]}"
    assert isinstance(raised.value.__cause__, ClientError)
    assert raised.value.__cause__.response["Error"]["Code"] == code
    assert "boom" not in str(raised.value)  # Batch's own words stay in the log


def test_terminating_a_job_batch_does_not_know_is_refused_not_silent(stubber, gateway):
    stubber.add_client_error(
        "terminate_job",
        service_error_code="ClientException",
        service_message=f"Job {BATCH_ID} not found",
        http_status_code=400,
        expected_params={"jobId": BATCH_ID, "reason": "Account out of credits"},
    )
    with pytest.raises(DependencyFailed, match=r"^AWS Batch refused to accept the termination; try again\.$"):
        gateway.terminate_job(BATCH_ID, "Account out of credits")


def test_a_second_chunk_failing_fails_the_whole_call(stubber, gateway):
    ids = [f"id-{i:03d}" for i in range(DESCRIBE_BATCH_SIZE + 1)]
    stubber.add_response("describe_jobs", {"jobs": [detail(i) for i in ids[:100]]}, {"jobs": ids[:100]})
    stubber.add_client_error("describe_jobs", service_error_code="ServerException", http_status_code=500)
    with pytest.raises(DependencyFailed, match="describe the jobs"):
        gateway.describe_jobs(ids, OBSERVED_MS)


@pytest.mark.parametrize(
    "error",
    [
        EndpointConnectionError(endpoint_url="https://batch.us-east-1.amazonaws.com/"),
        ReadTimeoutError(endpoint_url="https://batch.us-east-1.amazonaws.com/"),
    ],
)
@pytest.mark.parametrize("operation", sorted(CALLS))
def test_an_unreachable_endpoint_becomes_dependency_failed(client, gateway, operation, error):
    def unreachable(**_kwargs):
        raise error

    client.meta.events.register("before-send.batch.*", unreachable)
    with pytest.raises(DependencyFailed) as raised:
        CALLS[operation](gateway)
    assert str(raised.value) == f"AWS Batch could not be reached to {ACTIONS[operation]}"
    assert raised.value.__cause__ is error
