"""Settling the jobs a stopped local stack left unfinished.

When the stack stops, its job subprocesses stop with it. A clean stop ends them through the
executor (each gets its FAILED event); after a crash, the jobs table still says Queued, Starting or
Running. At the next start each such job gets the event AWS Batch would have sent for a job whose
host vanished: FAILED, ``Local stack stopped while the job ran``, with the job's stored ``startedAt``
and ``stoppedAt`` = when the stack was last alive (``Local stack stopped before the job ran`` for a
job that has no ``startedAt``). The batch_events Lambda settles it like any other
(charged for the time it ran, nothing if it never started).

Before that, ``remove_leftover_jobs`` kills whatever the crashed run's jobs left alive (recorded in
the ``ProcessRegistry``, by pid and start time) and removes their folders.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from boto3.dynamodb.types import TypeDeserializer

from functions.adapters.dynamodb import job_from_item
from functions.domain.jobs import Job, JobType
from functions.domain.machine_classes import machine_class
from functions.domain.status import JobStatus
from functions.settings import Settings
from remote_batch.local.events import BatchAttempt, batch_job_state_change, task_arn
from remote_batch.local.executor import SHUTDOWN_REASON, SHUTDOWN_UNSTARTED_REASON
from remote_batch.local.lambda_context import LOCAL_ACCOUNT_ID
from remote_batch.local.sandbox import Leftovers, ProcessRegistry

logger = logging.getLogger(__name__)

STOPPED_REASON = SHUTDOWN_REASON
STOPPED_UNSTARTED_REASON = SHUTDOWN_UNSTARTED_REASON
_UNFINISHED = (JobStatus.QUEUED, JobStatus.STARTING, JobStatus.RUNNING)
_deserializer = TypeDeserializer()


def _ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


def unfinished_jobs(dynamodb: Any, jobs_table: str) -> Iterator[Job]:
    """Jobs whose status is Queued, Starting or Running (array parents excluded: their status is
    derived from their children, which are recovered one by one)."""
    paginator = dynamodb.get_paginator("scan")
    pages = paginator.paginate(
        TableName=jobs_table,
        FilterExpression="#s IN (:q, :st, :r)",
        ExpressionAttributeNames={"#s": "status"},
        ExpressionAttributeValues={
            ":q": {"S": JobStatus.QUEUED.value},
            ":st": {"S": JobStatus.STARTING.value},
            ":r": {"S": JobStatus.RUNNING.value},
        },
    )
    for page in pages:
        for item in page.get("Items", []):
            job = job_from_item({k: _deserializer.deserialize(v) for k, v in item.items()})
            if job.status in _UNFINISHED and job.type != JobType.ARRAY:
                yield job


def stopped_event(job: Job, settings: Settings, stopped_at: datetime) -> dict[str, Any]:
    """The FAILED ``Batch Job State Change`` envelope of a job the stack stopped under.

    ``stoppedAt`` is never before the job's ``startedAt`` (a job that started after the last
    snapshot ran for no time we know of). The reason is ``STOPPED_REASON`` for a job that started,
    ``STOPPED_UNSTARTED_REASON`` for one that never did.
    """
    zone = settings.zones[job.geo_zone]
    route = zone.routes[job.machine_class]
    machine = machine_class(job.machine_class)
    batch_job_id = job.batch_job_id or f"lost-{job.job_id}"
    started_ms = _ms(job.started_at) if job.started_at else None
    stopped_ms = max(_ms(stopped_at), started_ms or 0)
    reason = STOPPED_REASON if started_ms is not None else STOPPED_UNSTARTED_REASON
    attempts: tuple[BatchAttempt, ...] = ()
    if started_ms is not None:
        attempts = (
            BatchAttempt(
                exit_code=None,
                log_stream_name=job.log_stream_name,
                task_arn=task_arn(zone.region, LOCAL_ACCOUNT_ID, batch_job_id),
                started_at_ms=started_ms,
                stopped_at_ms=stopped_ms,
                status_reason=reason,
            ),
        )
    return batch_job_state_change(
        region=zone.region,
        account=LOCAL_ACCOUNT_ID,
        job_id=batch_job_id,
        job_name=job.job_id,
        job_queue=route.job_queue,
        job_definition=route.job_definition,
        status="FAILED",
        created_at_ms=_ms(job.submitted_at),
        vcpus=machine.vcpus,
        memory_mib=machine.memory_mib,
        gpus=machine.gpus,
        status_reason=reason,
        started_at_ms=started_ms,
        stopped_at_ms=stopped_ms,
        log_stream=job.log_stream_name,
        attempts=attempts,
    )


def recover_unfinished_jobs(
    dynamodb: Any, settings: Settings, publish: Callable[[dict[str, Any]], None], stopped_at: datetime
) -> list[str]:
    """Publish a FAILED event for every unfinished job; returns their ids.

    Parameters
    ----------
    dynamodb : Any
        A DynamoDB client on the local tables.
    settings : Settings
        Table names and zones (for the event's region, queue and definition).
    publish : Callable[[dict], None]
        The event bus's ``publish`` (the event is recorded as emitted, then delivered).
    stopped_at : datetime
        When the stack was last alive.
    """
    recovered = []
    for job in unfinished_jobs(dynamodb, settings.jobs_table):
        publish(stopped_event(job, settings, stopped_at))
        recovered.append(job.job_id)
        logger.info("job left unfinished by the last run settled job_id=%s status=%s", job.job_id, job.status)
    return recovered


def remove_leftover_jobs(registry: ProcessRegistry) -> Leftovers:
    """Kill every process the last run's jobs left alive and remove their folders.

    Run at start, before the executor runs any job. After a clean stop the registry is empty; after
    a crash (``kill -9`` of the stack) the kernel has usually killed the jobs' PID namespaces already
    (their sandboxes die with the stack), and this kills what a weaker sandbox let survive.
    """
    return registry.clean()
