"""What a job's code may do in AWS: the IAM policy of the job role, shared by the CDK app and the local stack.

A job reads its input and writes its outputs, nothing else: ``s3:GetObject`` under ``inputs/`` and the
put actions of CDK's ``Bucket.grant_put`` (``s3:PutObject*`` and ``s3:Abort*``, to abort its own failed
multipart uploads) under ``outputs/``. A job with ``inputsFrom`` reads no parent's outputs: the service
copies them under its own inputs when it releases the job (``functions.domain.parent_inputs``). No
``s3:List*`` (a job never needs to see which other jobs exist), no DynamoDB, no SNS. In the cloud the
job role is fixed at deploy time, so its resources are the whole prefixes; the local stack gives each
job a user whose policy narrows them to ``inputs/<jobId>/*`` and ``outputs/<jobId>/*``, and moto's IAM
enforces it.
"""

from __future__ import annotations

from typing import Any

INPUTS_PREFIX = "inputs/"
OUTPUTS_PREFIX = "outputs/"
# Where ``POST /jobs/uploads`` puts an account's uploads (``functions.logic.uploads``).
UPLOADS_PREFIX = f"{INPUTS_PREFIX}uploads/"
# CDK's BUCKET_PUT_ACTIONS (aws-cdk-lib/aws-s3/lib/perms.ts), what ``Bucket.grant_put`` grants.
JOB_INPUT_ACTIONS = ("s3:GetObject",)
JOB_OUTPUT_ACTIONS = (
    "s3:PutObject",
    "s3:PutObjectLegalHold",
    "s3:PutObjectRetention",
    "s3:PutObjectTagging",
    "s3:PutObjectVersionTagging",
    "s3:Abort*",
)


def job_policy_statements(
    bucket_arn: str,
    job_id: str | None = None,
    account_id: str | None = None,
) -> list[dict[str, Any]]:
    """The IAM policy statements of a job's role, as JSON-shaped dicts.

    Parameters
    ----------
    bucket_arn : str
        The zone's data bucket (``arn:aws:s3:::name``; a CDK token in the CDK app).
    job_id : str | None
        Narrows the resources to this job's ``inputs/<jobId>/*`` and ``outputs/<jobId>/*``; None (the
        cloud job role, shared by every job of the zone) allows ``inputs/*`` and ``outputs/*``.
    account_id : str | None
        With ``job_id``: the job's account, whose uploads (``inputs/uploads/<accountId>/*``, which a
        job's input may name, ``POST /jobs/uploads``) it may read too.

    Returns
    -------
    list[dict]
        ``[{"Effect": "Allow", "Action": [...], "Resource": ...inputs...}, {... outputs ...}]``.
    """
    if job_id is None:
        inputs: str | list[str] = f"{bucket_arn}/{INPUTS_PREFIX}*"
        outputs = f"{bucket_arn}/{OUTPUTS_PREFIX}*"
    else:
        inputs = [f"{bucket_arn}/{INPUTS_PREFIX}{job_id}/*"]
        if account_id:
            inputs.append(f"{bucket_arn}/{UPLOADS_PREFIX}{account_id}/*")
        outputs = f"{bucket_arn}/{OUTPUTS_PREFIX}{job_id}/*"
    return [
        {"Effect": "Allow", "Action": list(JOB_INPUT_ACTIONS), "Resource": inputs},
        {"Effect": "Allow", "Action": list(JOB_OUTPUT_ACTIONS), "Resource": outputs},
    ]


def job_policy_document(
    bucket_arn: str, job_id: str | None = None, account_id: str | None = None
) -> dict[str, Any]:
    """``job_policy_statements`` as a whole policy document (``{"Version": "2012-10-17", ...}``)."""
    return {"Version": "2012-10-17", "Statement": job_policy_statements(bucket_arn, job_id, account_id)}
