"""Settling the jobs a stopped local stack left unfinished.

When the stack stops, its job subprocesses stop with it. A clean stop ends them through the
executor (each gets its FAILED event); after a crash, the jobs table still says Queued, Starting or
Running. At the next start after a crash, the jobs the crashed run's executor had accepted and not
ended run on in the new one (``recovery_accepted``: as AWS Batch keeps its jobs through a host
loss); they are left out of what follows (``taken_back``). Each other such job is settled by the
batch_events Lambda like any other (charged for the time it ran, nothing if it never started), from
the job's own times:

1. If the executor had already emitted the job's final event (SUCCEEDED or FAILED, in the event
   bus's journal) but the crash came before it was delivered, that event is delivered again: the
   job is billed from its own start to its own stop, with its own exit code.
2. Otherwise it gets the event AWS Batch would send for a job whose host vanished: FAILED,
   ``Local stack stopped while the job ran``, ``startedAt`` = the job's own start (the jobs table's,
   else the one of the RUNNING event the executor emitted), ``stoppedAt`` = the crash instant as
   the stack recorded it: its clean-stop time, else its last "alive" stamp (rewritten every second
   by its own thread, so at most about a second before the crash, never a stale snapshot time),
   and never before ``startedAt``. A job with no start gets ``Local stack stopped before the job
   ran`` and no charge.
3. An array job (its parent is unfinished) is settled child by child by these two rules, from the
   events the executor emitted for it, then its AWS Batch parent gets its final event
   (``recovery_arrays``).
4. A job AWS Batch was never given (waiting for its environment's build, held for quota, admitted, or
   claimed by the dispatcher with no Batch job id recorded) is not stopped: it is what the deployed
   dispatch queue (SQS, durable) would still hold, so it is resumed (``resume_undispatched``): a
   claim is given back, admitted jobs are enqueued again and their accounts' held jobs admitted, a
   waiting one judged again against its prerequisites (``waits.settle``). Only the in-memory queue's
   messages died.
   An array admitted span by span is resumed likewise, span by span (``array_dispatch.resume_array``):
   its claimed spans given back, its admitted spans enqueued, its held children admitted; the spans
   AWS Batch had are settled by rule 3.

Before that, ``remove_leftover_jobs`` kills whatever the crashed run's jobs left alive (recorded in
the ``ProcessRegistry``, by pid and start time) and removes their folders.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Iterator
from datetime import datetime
from typing import Any

from boto3.dynamodb.types import TypeDeserializer

from functions.adapters.dynamodb import job_from_item
from functions.domain.charged_time import ended_attempt
from functions.domain.jobs import DispatchState, Job, JobType
from functions.domain.machine_classes import machine_class
from functions.domain.status import JobStatus
from functions.logic import waits
from functions.logic.array_dispatch import resume_array
from functions.logic.dispatch_requests import enqueue, request_admission
from functions.ports import Services
from functions.settings import Settings
from remote_batch_local.events import BatchAttempt, batch_job_state_change, task_arn
from remote_batch_local.executor import SHUTDOWN_REASON, SHUTDOWN_UNSTARTED_REASON
from remote_batch_local.lambda_context import LOCAL_ACCOUNT_ID
from remote_batch_local.recovery_arrays import settle_array
from remote_batch_local.sandbox import Leftovers, ProcessRegistry

logger = logging.getLogger(__name__)

STOPPED_REASON = SHUTDOWN_REASON
STOPPED_UNSTARTED_REASON = SHUTDOWN_UNSTARTED_REASON
_UNFINISHED = (JobStatus.QUEUED, JobStatus.STARTING, JobStatus.RUNNING)
_deserializer = TypeDeserializer()


def _ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


def unfinished_jobs(dynamodb: Any, jobs_table: str) -> Iterator[Job]:
    """Jobs whose status is Queued, Starting or Running: single jobs and array parents (an array's
    children are settled through their parent, ``recovery_arrays``, written to the table or not)."""
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
            if job.status in _UNFINISHED and job.type != JobType.ARRAY_CHILD:
                yield job


def stopped_event(
    job: Job,
    settings: Settings,
    stopped_at: datetime,
    started_at_ms: int | None = None,
    batch_job_id: str | None = None,
) -> dict[str, Any]:
    """The FAILED ``Batch Job State Change`` envelope of a job the stack stopped under.

    ``startedAt`` is the job's stored start, else ``started_at_ms`` (ms since the epoch, from the
    RUNNING event the executor emitted). ``stoppedAt`` is ``stopped_at`` (the crash instant), never
    before ``startedAt``, which is never before ``submittedAt`` (``charged_time.ended_attempt``).
    The reason is ``STOPPED_REASON`` for a job that started, ``STOPPED_UNSTARTED_REASON`` for one
    that never did.
    """
    zone = settings.zones[job.geo_zone]
    route = zone.routes[job.machine_class]
    machine = machine_class(job.machine_class)
    batch_job_id = job.batch_job_id or batch_job_id or f"lost-{job.job_id}"
    # From its start, never before its submission, to the crash (``charged_time``).
    started = _ms(job.started_at) if job.started_at else started_at_ms
    times = ended_attempt(_ms(job.submitted_at), started, _ms(stopped_at))
    started_ms = times.started_ms
    stopped_ms = times.stopped_ms if times.stopped_ms is not None else _ms(stopped_at)
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
    dynamodb: Any,
    settings: Settings,
    publish: Callable[[dict[str, Any]], None],
    stopped_at: datetime,
    *,
    emitted_for: Callable[[str], list[dict[str, Any]]] | None = None,
    redeliver: Callable[[Iterable[dict[str, Any]]], None] | None = None,
    taken_back: Collection[str] = frozenset(),
) -> list[str]:
    """Settle every unfinished job by the rules of this module's docstring; returns their ids.

    Parameters
    ----------
    dynamodb : Any
        A DynamoDB client on the local tables.
    settings : Settings
        Table names and zones (for the event's region, queue and definition).
    publish : Callable[[dict], None]
        The event bus's ``publish`` (the event is recorded as emitted, then delivered).
    stopped_at : datetime
        The crash instant as recorded: the last clean-stop time or "alive" stamp.
    emitted_for : Callable[[str], list[dict]] | None
        The event bus's ``emitted_for``: the events the executor emitted for a top-level job id.
    redeliver : Callable[[Iterable[dict]], None] | None
        The event bus's ``replay``: delivers an emitted event again without recording it twice.
    taken_back : Collection[str]
        The Batch job ids (single jobs, array spans) the new executor took back
        (``recovery_accepted``): they run on, nothing here settles them.
    """
    recovered = []
    for job in unfinished_jobs(dynamodb, settings.jobs_table):
        if never_given_to_batch(job) and job.type != JobType.ARRAY:
            continue  # resumed instead (``resume_undispatched``)
        if job.batch_job_id is not None and job.batch_job_id in taken_back:
            continue  # AWS Batch still runs it (``recovery_accepted``)
        if job.type == JobType.ARRAY:
            # Whatever the crashed run's executor emitted for its spans (a span whose record the crash
            # cut off too); its spans never given to AWS Batch are resumed (``resume_undispatched``).
            children = settle_array(
                emitted_for(job.job_id) if emitted_for is not None else [],
                stopped_at,
                publish,
                redeliver,
                (STOPPED_REASON, STOPPED_UNSTARTED_REASON),
                taken_back=taken_back,
            )
            if children or not never_given_to_batch(job):
                recovered.append(job.job_id)
                logger.info(
                    "array left unfinished by the last run settled job_id=%s children=%d",
                    job.job_id,
                    children,
                )
            continue
        own = _own_events(job, emitted_for)
        final = next((e for e in reversed(own) if e["detail"].get("status") in ("SUCCEEDED", "FAILED")), None)
        if final is not None and redeliver is not None:
            redeliver([final])
            how = "its own final event delivered again"
        else:
            started = next(
                (e["detail"]["startedAt"] for e in reversed(own) if e["detail"].get("startedAt")), None
            )
            batch_job_id = own[-1]["detail"].get("jobId") if own else None
            publish(stopped_event(job, settings, stopped_at, started, batch_job_id))
            how = f"stopped at {stopped_at.isoformat()}"
        recovered.append(job.job_id)
        logger.info(
            "job left unfinished by the last run settled job_id=%s status=%s how=%s",
            job.job_id,
            job.status,
            how,
        )
    return recovered


def _own_events(job: Job, emitted_for: Callable[[str], list[dict[str, Any]]] | None) -> list[dict[str, Any]]:
    """The events the executor emitted for the single job ``job``."""
    if emitted_for is None:
        return []
    return [
        envelope
        for envelope in emitted_for(job.job_id)
        if isinstance(envelope.get("detail"), dict) and envelope["detail"].get("jobName") == job.job_id
    ]


def remove_leftover_jobs(registry: ProcessRegistry) -> Leftovers:
    """Kill every process the last run's jobs left alive and remove their folders.

    Run at start, before the executor runs any job. After a clean stop the registry is empty; after
    a crash (``kill -9`` of the stack) the kernel has usually killed the jobs' PID namespaces already
    (their sandboxes die with the stack), and this kills what a weaker sandbox let survive.
    """
    return registry.clean()


def never_given_to_batch(job: Job) -> bool:
    """Whether ``job`` waits for its prerequisites, for quota or for the dispatcher: waiting, held,
    admitted, or claimed with no Batch job id recorded (rule 4 of this module's docstring)."""
    return job.batch_job_id is None and job.dispatch_state in (
        DispatchState.WAITING,
        DispatchState.HELD,
        DispatchState.ADMITTED,
        DispatchState.DISPATCHING,
    )


def resume_undispatched(dynamodb: Any, settings: Settings, services: Services) -> list[str]:
    """Resume the jobs a crash left between submit and AWS Batch (rule 4): give back each claim (its
    SubmitJob, if any, went to the executor that died with the stack), enqueue every admitted job
    again and ask for the admission of each account's held jobs. Returns the ids enqueued or held.

    The dispatcher's claim makes a repeated message harmless; no job is submitted twice.
    """
    resumed: list[str] = []
    to_enqueue: list[str] = []
    accounts: set[str] = set()
    for job in unfinished_jobs(dynamodb, settings.jobs_table):
        if job.is_waiting:
            # Waiting for its prerequisites: judged again (a build reported while the stack was down
            # is seen now; one still Building goes on, resumed by the builder).
            waits.settle(services, job, services.clock())
            resumed.append(job.job_id)
            continue
        if job.type == JobType.ARRAY:
            # Admitted span by span: its spans not in AWS Batch resume (those it has are rule 3's).
            if job.dispatch_state is not None and (
                job.array_queue or job.dispatch_state == DispatchState.HELD
            ):
                resume_array(services, job)
                resumed.append(job.job_id)
            continue
        if not never_given_to_batch(job):
            continue
        resumed.append(job.job_id)
        if job.dispatch_state == DispatchState.HELD:
            accounts.add(job.account_id)
            continue
        if job.dispatch_state == DispatchState.DISPATCHING:
            services.store.release_dispatch(job.job_id)
        to_enqueue.append(job.job_id)
    enqueue(services, to_enqueue)
    for account_id in sorted(accounts):
        request_admission(services, account_id)
    if resumed:
        logger.info("jobs not yet in aws batch resumed count=%d accounts=%d", len(resumed), len(accounts))
    return resumed
