"""How long a job may wait at the head of its queue, and what the user reads when AWS Batch cancels it.

Each job queue carries ``jobStateTimeLimitActions`` (infra/constructs/batch_compute.py): a job
RUNNABLE behind one of the reasons below is cancelled after the time set here. The reasons, and the
``statusReason`` Batch writes on the job it cancels (``Canceled by JobStateTimeLimit action due to
reason: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY``), are those of the AWS Batch user guide, "Automatic
remediation with jobStateTimeLimitActions" and "Jobs stuck in RUNNABLE due to capacity" /
"... due to misconfiguration". Batch allows 600 to 86,400 seconds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

INSUFFICIENT_INSTANCE_CAPACITY = "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"
COMPUTE_ENVIRONMENT_MAX_RESOURCE = "MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE"
JOB_RESOURCE_REQUIREMENT = "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT"
EC2_INSTANCE_CONFIGURATION_UNSUPPORTED = "MISCONFIGURATION:EC2_INSTANCE_CONFIGURATION_UNSUPPORTED"

# Seconds: capacity can come back (Spot is reclaimed, on-demand pools refill), so a job waits half an
# hour for it; a misconfiguration never clears by itself, so such a job is cancelled after Batch's minimum.
CAPACITY_WAIT_SECONDS = 1800
MISCONFIGURATION_WAIT_SECONDS = 600


@dataclass(frozen=True, slots=True)
class QueueLimit:
    """One ``jobStateTimeLimitActions`` entry: cancel a RUNNABLE job blocked by ``reason`` after
    ``wait_seconds``; ``template`` is the user's ``statusReason`` (``{machine_class}``, ``{zone}``,
    ``{minutes}``)."""

    reason: str
    wait_seconds: int
    template: str


QUEUE_LIMITS: tuple[QueueLimit, ...] = (
    QueueLimit(
        INSUFFICIENT_INSTANCE_CAPACITY,
        CAPACITY_WAIT_SECONDS,
        "No capacity for {machine_class} in {zone} for {minutes} min",
    ),
    QueueLimit(
        COMPUTE_ENVIRONMENT_MAX_RESOURCE,
        MISCONFIGURATION_WAIT_SECONDS,
        "{machine_class} does not fit the vCPU limit of its compute environments in {zone}",
    ),
    QueueLimit(
        JOB_RESOURCE_REQUIREMENT,
        MISCONFIGURATION_WAIT_SECONDS,
        "No instance type in {zone} can run {machine_class}",
    ),
    QueueLimit(
        EC2_INSTANCE_CONFIGURATION_UNSUPPORTED,
        MISCONFIGURATION_WAIT_SECONDS,
        "The instances configured for {machine_class} in {zone} cannot be launched",
    ),
)
_BY_REASON = {limit.reason: limit for limit in QUEUE_LIMITS}
_CANCELLED = re.compile(r"by JobStateTimeLimit action due to reason: (?P<reason>[A-Z0-9_]+:[A-Z0-9_]+)")


def describe_queue_limit(batch_reason: str | None, machine_class: str, zone: str) -> str | None:
    """The user's ``statusReason`` for a job Batch cancelled at a queue time limit, else None.

    Parameters
    ----------
    batch_reason : str | None
        The FAILED event's ``statusReason``.
    machine_class, zone : str
        The job's class and geo zone as the API spells them.
    """
    match = _CANCELLED.search(batch_reason or "")
    limit = _BY_REASON.get(match.group("reason")) if match else None
    if limit is None:
        return None
    return limit.template.format(machine_class=machine_class, zone=zone, minutes=limit.wait_seconds // 60)
