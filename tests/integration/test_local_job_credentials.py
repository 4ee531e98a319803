"""A job's own AWS credentials in the local stack (``remote_batch_local.iam.JobCredentials``), on moto."""

from __future__ import annotations

import boto3
from moto import mock_aws

from functions.ports import BatchSubmission
from remote_batch_local.iam import JobCredentials

SUBMISSION = BatchSubmission(
    job_name="job-1",
    job_queue="q",
    job_definition="d",
    vcpus=1,
    memory_mib=512,
    gpus=0,
    environment={"REMOTE_BATCH_BUCKET": "bucket", "REMOTE_BATCH_JOB_ID": "job-1"},
    tags={"remote-batch:accountId": "dev"},
)


def test_a_job_run_again_after_a_crash_gets_its_credentials_anew():
    with mock_aws():
        iam = boto3.client("iam", region_name="us-east-1")
        credentials = JobCredentials(iam)
        # Given the user of an attempt a crash cut (never revoked)
        first = credentials.issue("batch-1", SUBMISSION)

        # When the job runs again under the same Batch job id
        second = credentials.issue("batch-1", SUBMISSION)

        # Then it gets new keys, and the old ones are gone
        assert second["AWS_ACCESS_KEY_ID"] != first["AWS_ACCESS_KEY_ID"]
        keys = iam.list_access_keys(UserName=JobCredentials.user_name("batch-1"))["AccessKeyMetadata"]
        assert [key["AccessKeyId"] for key in keys] == [second["AWS_ACCESS_KEY_ID"]]
