"""Which AWS Batch attempts are retried, and how many attempts a job has: the service's retry rule.

A job's own failure is final; an attempt the infrastructure lost (a reclaimed Spot instance, a host
that went away: AWS Batch's ``statusReason`` starts ``Host EC2``) is retried, up to ``MAX_ATTEMPTS``
attempts in all. The deployed job definitions carry this as their ``retryStrategy``
(``infra.constructs.batch_compute``); the local stack applies it to an attempt lost to its own crash
(``remote_batch_local.recovery_accepted``). An attempt lost to infrastructure is never charged
(``batch_reasons.INFRASTRUCTURE_FAMILIES``). Sources: AWS Batch API reference, ``RetryStrategy``
(``attempts`` 1-10) and ``EvaluateOnExit`` (``onStatusReason``: a pattern that "can optionally end
with an asterisk (*) so that only the start of the string needs to be an exact match"); user guide
"Automated job retries".
"""

from __future__ import annotations

# Attempts in all, the first included (``retryStrategy.attempts``).
MAX_ATTEMPTS = 3
# ``evaluateOnExit.onStatusReason`` of the retried attempts: a host lost under the job.
RETRY_STATUS_REASON = "Host EC2*"


def retried(status_reason: str | None, attempts_so_far: int) -> bool:
    """Whether AWS Batch runs a job again after an attempt that ended with ``status_reason``, when the
    job has had ``attempts_so_far`` attempts (that one included): the reason matches
    ``RETRY_STATUS_REASON`` (a prefix before its ``*``, else the whole text) and attempts are left."""
    if status_reason is None or attempts_so_far >= MAX_ATTEMPTS:
        return False
    pattern = RETRY_STATUS_REASON
    if pattern.endswith("*"):
        return status_reason.startswith(pattern[:-1])
    return status_reason == pattern
