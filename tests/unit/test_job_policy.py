"""The job role's policy: the whole prefixes in the cloud, the job's own keys locally."""

from __future__ import annotations

import fnmatch

from functions.domain.job_policy import JOB_OUTPUT_ACTIONS, job_policy_document, job_policy_statements
from functions.domain.parent_inputs import copy_prefix

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


def test_a_child_reads_its_parents_copies_under_its_own_inputs_and_no_job_outputs():
    # Given a local child job's policy (the cloud role's narrowed to its keys)
    statements = job_policy_statements(BUCKET, "job-c", "acct")

    # Then it reads only its inputs, where the service copied its parents' outputs, and no outputs
    reads = [s for s in statements if s["Action"] == ["s3:GetObject"]]
    assert [r["Resource"] for r in reads] == [
        ["arn:aws:s3:::data/inputs/job-c/*", "arn:aws:s3:::data/inputs/uploads/acct/*"]
    ]
    copied = f"arn:aws:s3:::data/{copy_prefix('job-c', 'job-p')}files/model.pt"
    assert fnmatch.fnmatchcase(copied, reads[0]["Resource"][0])
    assert not any("s3:ListBucket" in s["Action"] for s in statements)
