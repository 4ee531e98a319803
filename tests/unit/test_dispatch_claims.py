"""A dead dispatcher's claim: the bound after which the meter recovers it, and the AWS Batch lookup by
name it makes first (ListJobs with a ``JOB_NAME`` filter: AWS Batch API reference, ListJobs; every page;
exact names only, since the filter matches case-insensitively and reads a trailing ``*`` as a prefix)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from functions.adapters.batch import AwsBatchGateway
from functions.domain.errors import BatchRefused, DependencyFailed
from functions.logic import dispatch_rules
from infra import constants

QUEUE = "arn:aws:batch:us-east-1:123456789012:job-queue/remote-batch-Basic1x8"
NAME = "job-01JDXYZ0000000000000000000"
FILTERS = [{"name": "JOB_NAME", "values": [NAME]}]


def test_the_claim_bound_is_far_past_the_dispatcher_lambdas_timeout() -> None:
    # A claim older than this belongs to a dispatcher Lambda stopped at its timeout long ago.
    bound = dispatch_rules.CLAIM_TIMEOUT
    lambda_timeout = timedelta(seconds=constants.LAMBDA_TIMEOUT_SECONDS["dispatcher"])
    assert bound >= 10 * lambda_timeout
    # And past the queue's visibility timeout: a message the dead dispatcher held is visible again.
    assert bound > timedelta(seconds=constants.DISPATCH_VISIBILITY_TIMEOUT_SECONDS)


@pytest.fixture
def batch() -> Any:
    return boto3.client("batch", region_name="us-east-1")


def summary(job_id: str, name: str = NAME, created_at: int = 1_764_000_000_000) -> dict[str, Any]:
    return {"jobId": job_id, "jobName": name, "createdAt": created_at, "status": "SUCCEEDED"}


def test_find_job_by_name_reads_every_page_and_keeps_the_oldest_exact_name(batch: Any) -> None:
    with Stubber(batch) as stub:
        stub.add_response(
            "list_jobs",
            {
                "jobSummaryList": [
                    summary("newer", created_at=1_764_000_002_000),
                    summary("other-case", name=NAME.lower(), created_at=1_764_000_000_000),
                ],
                "nextToken": "page-2",
            },
            {"jobQueue": QUEUE, "filters": FILTERS},
        )
        stub.add_response(
            "list_jobs",
            {"jobSummaryList": [summary("older", created_at=1_764_000_001_000)]},
            {"jobQueue": QUEUE, "filters": FILTERS, "nextToken": "page-2"},
        )
        assert AwsBatchGateway(batch).find_job_by_name(QUEUE, NAME) == "older"
        stub.assert_no_pending_responses()


def test_find_job_by_name_is_none_when_batch_lists_no_such_job(batch: Any) -> None:
    with Stubber(batch) as stub:
        stub.add_response("list_jobs", {"jobSummaryList": []}, {"jobQueue": QUEUE, "filters": FILTERS})
        assert AwsBatchGateway(batch).find_job_by_name(QUEUE, NAME) is None


@pytest.mark.parametrize(
    ("code", "status", "refused"),
    [
        ("ClientException", 400, True),
        ("TooManyRequestsException", 429, False),
        ("ServerException", 500, False),
    ],
)
def test_find_job_by_name_failures_are_dependency_failures(
    batch: Any, code: str, status: int, refused: bool
) -> None:
    with Stubber(batch) as stub:
        stub.add_client_error("list_jobs", service_error_code=code, http_status_code=status)
        with pytest.raises(DependencyFailed) as caught:
            AwsBatchGateway(batch).find_job_by_name(QUEUE, NAME)
    # An unknown queue (AWS Batch's 400) is a refusal for good; throttling and 5xx are worth retrying.
    assert isinstance(caught.value, BatchRefused) is refused
