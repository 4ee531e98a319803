"""The job role's policy: the whole prefixes in the cloud, the job's own keys locally."""

from __future__ import annotations

from functions.domain.job_policy import JOB_OUTPUT_ACTIONS, job_policy_document, job_policy_statements

BUCKET = "arn:aws:s3:::data"


def test_the_cloud_role_reads_inputs_and_puts_outputs_only():
    assert job_policy_statements(BUCKET) == [
        {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": "arn:aws:s3:::data/inputs/*"},
        {"Effect": "Allow", "Action": list(JOB_OUTPUT_ACTIONS), "Resource": "arn:aws:s3:::data/outputs/*"},
    ]
    assert not any(a.startswith(("s3:Get", "s3:List", "s3:Delete")) for a in JOB_OUTPUT_ACTIONS)


def test_a_local_job_gets_its_own_keys_and_its_accounts_uploads():
    inputs, outputs = job_policy_document(BUCKET, "job-1", "alice")["Statement"]

    assert inputs["Resource"] == [
        "arn:aws:s3:::data/inputs/job-1/*",
        "arn:aws:s3:::data/inputs/uploads/alice/*",
    ]
    assert outputs["Resource"] == "arn:aws:s3:::data/outputs/job-1/*"
    assert job_policy_statements(BUCKET, "job-1")[0]["Resource"] == ["arn:aws:s3:::data/inputs/job-1/*"]


def test_a_local_job_with_inputs_from_reads_and_lists_its_parents_outputs_only():
    statements = job_policy_statements("arn:aws:s3:::b", "job-c", "acct", parents=("job-p",))
    reads = [s for s in statements if s["Action"] == ["s3:GetObject"]]
    assert [r["Resource"] for r in reads] == [
        ["arn:aws:s3:::b/inputs/job-c/*", "arn:aws:s3:::b/inputs/uploads/acct/*"],
        ["arn:aws:s3:::b/outputs/job-p/*"],
    ]
    [listing] = [s for s in statements if s["Action"] == ["s3:ListBucket"]]
    assert listing["Resource"] == "arn:aws:s3:::b"
    assert listing["Condition"] == {"StringLike": {"s3:prefix": ["outputs/job-p/*"]}}
    # The shared cloud role is unchanged by parents: it reads no job's outputs.
    assert job_policy_statements("arn:aws:s3:::b", parents=("job-p",)) == job_policy_statements(
        "arn:aws:s3:::b"
    )
