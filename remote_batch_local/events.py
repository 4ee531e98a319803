"""Real-shaped ``Batch Job State Change`` events, as AWS Batch sends them to EventBridge.

The envelope is EventBridge's; ``detail`` resembles DescribeJobs' ``JobDetail`` (AWS Batch user guide,
"Job state change events"). AWS sends no event for the initial SUBMITTED, so a job's events are
PENDING, RUNNABLE, STARTING, RUNNING, then SUCCEEDED or FAILED; a job terminated before it starts goes
straight to FAILED, without ``startedAt``. Times in ``detail`` are milliseconds since the epoch.
An array job's child (``<id>:<index>``) has these events too, with ``arrayProperties.index``; the
array job itself only PENDING and its outcome, with ``arrayProperties.size`` and ``statusSummary``
(``remote_batch_local.batch_arrays``).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from functions.domain.batch_retries import MAX_ATTEMPTS, RETRY_STATUS_REASON

DETAIL_TYPE = "Batch Job State Change"
SOURCE = "aws.batch"

# Envelope ids: unique, not secret. uuid4() reads os.urandom per id, which dominated publishing the
# events of a 10,000-child array; this generator is seeded from it once.
_ids = random.Random(uuid.uuid4().int)  # noqa: S311 - ids, not secrets

# The image a local job "runs"; the worker actually runs as a subprocess of the executor.
LOCAL_IMAGE = "remote-batch/worker:local"


@dataclass(frozen=True, slots=True)
class BatchAttempt:
    """One ended attempt of a job (DescribeJobs' ``AttemptDetail``).

    Attributes
    ----------
    exit_code : int | None
        The container's exit code (128 + signal number when a signal ended it).
    log_stream_name : str | None
        The CloudWatch Logs stream of the attempt's console output.
    task_arn : str
        The (stand-in) ECS task ARN that ran the attempt.
    started_at_ms : int
        When the attempt entered RUNNING, ms since the epoch.
    stopped_at_ms : int
        When the attempt's container stopped, ms since the epoch.
    status_reason : str
        Why the attempt ended.
    container_reason : str | None
        The container's own reason (``container.reason``, e.g. ``OutOfMemoryError: Container
        killed due to memory usage``), when it has one.
    """

    exit_code: int | None
    log_stream_name: str | None
    task_arn: str
    started_at_ms: int
    stopped_at_ms: int
    status_reason: str
    container_reason: str | None = None

    @classmethod
    def from_detail(cls, attempt: Mapping[str, Any]) -> BatchAttempt:
        """The attempt of one ``detail.attempts`` element (``as_detail``'s inverse)."""
        container = attempt.get("container")
        container = container if isinstance(container, Mapping) else {}
        exit_code = container.get("exitCode")
        return cls(
            exit_code=exit_code if isinstance(exit_code, int) else None,
            log_stream_name=container.get("logStreamName"),
            task_arn=str(container.get("taskArn", "")),
            started_at_ms=int(attempt.get("startedAt") or 0),
            stopped_at_ms=int(attempt.get("stoppedAt") or 0),
            status_reason=str(attempt.get("statusReason", "")),
            container_reason=container.get("reason"),
        )

    def as_detail(self) -> dict[str, Any]:
        """The attempt as it appears in ``detail.attempts``."""
        container: dict[str, Any] = {"taskArn": self.task_arn, "networkInterfaces": []}
        if self.exit_code is not None:
            container["exitCode"] = self.exit_code
        if self.log_stream_name is not None:
            container["logStreamName"] = self.log_stream_name
        if self.container_reason is not None:
            container["reason"] = self.container_reason
        return {
            "container": container,
            "startedAt": self.started_at_ms,
            "stoppedAt": self.stopped_at_ms,
            "statusReason": self.status_reason,
        }


def job_arn(region: str, account: str, job_id: str) -> str:
    """``arn:aws:batch:{region}:{account}:job/{job_id}``."""
    return f"arn:aws:batch:{region}:{account}:job/{job_id}"


def job_queue_arn(region: str, account: str, job_queue: str) -> str:
    """The queue's ARN; ``job_queue`` is a queue name or already an ARN."""
    if job_queue.startswith("arn:"):
        return job_queue
    return f"arn:aws:batch:{region}:{account}:job-queue/{job_queue}"


def job_definition_arn(region: str, account: str, job_definition: str) -> str:
    """The definition's ARN; ``job_definition`` is ``name``, ``name:revision`` or an ARN (revision 1
    when none is given)."""
    if job_definition.startswith("arn:"):
        return job_definition
    name, _, revision = job_definition.partition(":")
    return f"arn:aws:batch:{region}:{account}:job-definition/{name}:{revision or 1}"


def job_definition_name(job_definition: str) -> str:
    """The bare name of a job definition given as a name, ``name:revision`` or an ARN."""
    tail = job_definition.rsplit("/", 1)[-1] if job_definition.startswith("arn:") else job_definition
    return tail.split(":", 1)[0]


def log_stream_name(job_definition: str, batch_job_id: str) -> str:
    """The awslogs driver's stream name for a Batch job: ``{job definition name}/default/{id}``; an
    array child's (``<parent>:<index>``) ends with its ``task_id`` instead, as the awslogs driver
    names streams after the ECS task (a stream name cannot hold a colon)."""
    tail = task_id(batch_job_id) if ":" in batch_job_id else batch_job_id
    return f"{job_definition_name(job_definition)}/default/{tail}"


def task_arn(region: str, account: str, batch_job_id: str) -> str:
    """A stand-in ECS task ARN for a job's attempt (the local stack runs no ECS): ``task_id``'s."""
    return f"arn:aws:ecs:{region}:{account}:task/remote-batch-local/{task_id(batch_job_id)}"


def task_id(batch_job_id: str) -> str:
    """The (stand-in) ECS task id of a job's attempt: the id without dashes for a job, and for an
    array child (``<parent>:<index>``, whose colon ECS ids and log stream names cannot hold) 32 hex
    digits derived from its id."""
    if ":" in batch_job_id:
        return uuid.uuid5(uuid.NAMESPACE_URL, f"batch-job:{batch_job_id}").hex
    return batch_job_id.replace("-", "")


def _event_time(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def batch_job_state_change(
    *,
    region: str,
    account: str,
    job_id: str,
    job_name: str,
    job_queue: str,
    job_definition: str,
    status: str,
    created_at_ms: int,
    vcpus: int,
    memory_mib: int,
    gpus: int = 0,
    environment: Mapping[str, str] | None = None,
    command: Sequence[str] = (),
    status_reason: str | None = None,
    started_at_ms: int | None = None,
    stopped_at_ms: int | None = None,
    exit_code: int | None = None,
    container_reason: str | None = None,
    log_stream: str | None = None,
    task: str | None = None,
    attempts: Sequence[BatchAttempt] = (),
    array_properties: Mapping[str, Any] | None = None,
    timeout_seconds: int | None = None,
    tags: Mapping[str, str] | None = None,
    image: str = LOCAL_IMAGE,
    time: datetime | None = None,
    event_id: str | None = None,
) -> dict[str, Any]:
    """An EventBridge envelope of one ``Batch Job State Change`` event.

    Parameters
    ----------
    region, account : str
        Where the job runs: the region and the 12-digit account id, used in every ARN.
    job_id : str
        The Batch job id (a UUID; ``<parent id>:<index>`` for an array child).
    job_name : str
        The job's name (the service's job id); an array child carries its parent's name.
    job_queue, job_definition : str
        Names or ARNs; the event carries ARNs.
    status : str
        PENDING, RUNNABLE, STARTING, RUNNING, SUCCEEDED or FAILED.
    created_at_ms : int
        When the job was submitted, ms since the epoch.
    vcpus, memory_mib, gpus : int
        The requested resources (``resourceRequirements``; memory in MiB).
    environment : Mapping[str, str] | None
        The submission's container environment.
    command : Sequence[str]
        The container's command.
    status_reason : str | None
        Included when given.
    started_at_ms : int | None
        When the job entered RUNNING (ms); give it from RUNNING on.
    stopped_at_ms : int | None
        When the job stopped (ms); give it on the final event only.
    exit_code : int | None
        The container's exit code; give it on the final event of a job that ran.
    container_reason : str | None
        ``container.reason``: the container's own reason (out of memory, could not start, ...).
    log_stream : str | None
        The CloudWatch Logs stream name; give it from RUNNING on.
    task : str | None
        The (stand-in) ECS task ARN; give it from STARTING on.
    attempts : Sequence[BatchAttempt]
        Ended attempts, oldest first.
    array_properties : Mapping[str, Any] | None
        ``arrayProperties`` (DescribeJobs' ``ArrayPropertiesDetail``): ``{"index": i}`` for an array
        child, ``{"size": n, "statusSummary": {status: count}}`` for an array parent; absent when None.
    timeout_seconds : int | None
        ``timeout.attemptDurationSeconds``, when the job has one.
    tags : Mapping[str, str] | None
        The job's tags.
    image : str
        The container image.
    time : datetime | None
        The event's time (now when None); EventBridge carries it to the second.
    event_id : str | None
        The envelope id (a fresh UUID when None).

    Returns
    -------
    dict[str, Any]
        The envelope, JSON-serializable.
    """
    requirements = [
        {"value": str(vcpus), "type": "VCPU"},
        {"value": str(memory_mib), "type": "MEMORY"},
    ]
    if gpus:
        requirements.append({"value": str(gpus), "type": "GPU"})
    container: dict[str, Any] = {
        "image": image,
        "command": list(command),
        "volumes": [],
        "environment": [{"name": k, "value": v} for k, v in sorted((environment or {}).items())],
        "mountPoints": [],
        "ulimits": [],
        "networkInterfaces": [],
        "resourceRequirements": requirements,
        "secrets": [],
    }
    if task is not None:
        container["taskArn"] = task
    if log_stream is not None:
        container["logStreamName"] = log_stream
    if exit_code is not None:
        container["exitCode"] = exit_code
    if container_reason is not None:
        container["reason"] = container_reason

    arn = job_arn(region, account, job_id)
    detail: dict[str, Any] = {
        "jobArn": arn,
        "jobName": job_name,
        "jobId": job_id,
        "jobQueue": job_queue_arn(region, account, job_queue),
        "status": status,
    }
    if status_reason is not None:
        detail["statusReason"] = status_reason
    detail["attempts"] = [attempt.as_detail() for attempt in attempts]
    detail["createdAt"] = created_at_ms
    if started_at_ms is not None:
        detail["startedAt"] = started_at_ms
    if stopped_at_ms is not None:
        detail["stoppedAt"] = stopped_at_ms
    if array_properties is not None:
        detail["arrayProperties"] = dict(array_properties)
    detail.update(
        {
            # The job definitions' retry rule, as deployed (``functions.domain.batch_retries``).
            "retryStrategy": {
                "attempts": MAX_ATTEMPTS,
                "evaluateOnExit": [
                    {"onStatusReason": RETRY_STATUS_REASON, "action": "RETRY"},
                    {"onReason": "*", "action": "EXIT"},
                ],
            },
            "dependsOn": [],
            "jobDefinition": job_definition_arn(region, account, job_definition),
            "parameters": {},
            "container": container,
            "tags": dict(tags or {}),
            "propagateTags": True,
            "platformCapabilities": ["EC2"],
            "eksAttempts": [],
        }
    )
    if timeout_seconds is not None:
        detail["timeout"] = {"attemptDurationSeconds": timeout_seconds}

    return {
        "version": "0",
        "id": event_id or str(uuid.UUID(int=_ids.getrandbits(128), version=4)),
        "detail-type": DETAIL_TYPE,
        "source": SOURCE,
        "account": account,
        "time": _event_time(time or datetime.now(UTC)),
        "region": region,
        "resources": [arn],
        "detail": detail,
    }
