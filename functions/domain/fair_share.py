"""Fair share across accounts in the shared AWS Batch job queues.

Quotas (``functions.domain.quotas``) bound what each account may hold at once, but the accounts'
quotas together exceed a compute environment's ``maxvCpus``: on a first-in, first-out job queue,
one account's admitted burst would run before a job another account submitted a moment later. So
every shared job queue has a fair-share scheduling policy (``infra/constructs/batch_compute.py``) and
every job on it carries a share identifier derived from its account: AWS Batch then starts, among
the queue's runnable jobs, one of the share whose recent vCPU usage is lowest ("Use share
identifiers to identify workloads", AWS Batch User Guide: usage is vCPU time × weight, decayed over
``shareDecaySeconds``), first in, first out within a share.

AWS Batch takes at most 500 *active* share identifiers per job queue and refuses SubmitJob of a job
that would add one more (CreateJobQueue API reference, ``schedulingPolicyArn``), so accounts are
hashed into ``SHARE_BUCKETS`` shares (under that bound, with room to spare): two accounts share a
bucket with probability 1/``SHARE_BUCKETS``, and are then first in, first out between themselves. A
share identifier is at most 255 letters and digits (SubmitJob API reference, ``shareIdentifier``).

A dedicated compute's job queue belongs to one account and stays first in, first out: its jobs carry
no share identifier (AWS Batch refuses one on a queue without a fair-share policy).
"""

from __future__ import annotations

import hashlib

#: How many share identifiers the accounts are hashed into (AWS Batch: at most 500 active per queue).
SHARE_BUCKETS = 400
#: How long AWS Batch remembers a share's vCPU usage when it compares shares (seconds).
SHARE_DECAY_SECONDS = 3600
_PREFIX = "acct"


def share_identifier(account_id: str) -> str:
    """The share identifier of ``account_id``'s jobs in a shared queue: ``acct`` and the account's
    bucket (``acct0`` … ``acct399``), the same for the account on every queue and in every zone.

    The bucket is the account id's SHA-256 modulo ``SHARE_BUCKETS`` (stable across processes, unlike
    Python's ``hash``)."""
    digest = hashlib.sha256(account_id.encode("utf-8")).digest()
    return f"{_PREFIX}{int.from_bytes(digest[:8], 'big') % SHARE_BUCKETS}"
