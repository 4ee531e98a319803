"""What the logic asks of the dispatcher, always through the ``Services.dispatch`` port: send admitted
jobs (``enqueue``) and admit an account's held jobs (``request_admission``).

The port is the dispatch queue deployed (SQS with a DLQ) and in the local stack (an in-process queue
delivered to the dispatcher function); where there is no queue (tests, a deployment without
``REMOTE_BATCH_DISPATCH_QUEUE_URL``) ``functions.bootstrap`` gives an inline one
(``ports.InlineDispatch``), which runs the dispatcher's own handling within the call. Either way the
modules that end or hold jobs only send a message: none of them imports the dispatcher or the admission.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_lambda_powertools import Logger

from functions.domain.arrays import span_ids
from functions.domain.jobs import Job
from functions.domain.machine_classes import GeoZone
from functions.ports import Services

logger = Logger(child=True)


def enqueue(services: Services, job_ids: Sequence[str]) -> None:
    """Hand admitted jobs (or spans, ``<parent>#<offset>``) to the dispatcher. Without a queue each is
    sent here, its only chance (a job AWS Batch does not take ends ``Terminated``).

    Raises ``DependencyFailed`` when the queue refuses (the jobs stay admitted: the meter's backstop
    enqueues them again)."""
    if job_ids:
        services.dispatch.send(job_ids)


def enqueue_one(services: Services, job: Job) -> Job:
    """``enqueue`` one admitted job as written by its submit; returns it as the submit answers it: as
    written when it waits on the queue, else (no queue: sent here) as the dispatcher left it.

    Raises ``DependencyFailed`` when the queue refuses (the job stays admitted: the meter's backstop
    enqueues it again).
    """
    sent = services.dispatch.send([job.job_id])
    if sent is None:
        return job
    return sent[0] or services.store.get_job(job.job_id) or job


def request_admission(services: Services, account_id: str) -> None:
    """Have what the account's held jobs may take now admitted: an admission request on the dispatch
    queue (or, without a queue, the admission here: ``quotas.admit_and_enqueue``).

    The dispatcher runs admissions one account message at a time per instance (and once per account
    per delivered batch: every request in a batch was sent before the batch was read), so a burst of
    submits or endings costs one scan of the held jobs per batch, not one per request racing the
    others for the same jobs. No request is lost: each is sent after its sender's write (a hold or a
    release), so the scan it causes sees that write; a message lost with the local stack's memory is
    made good by the meter's backstop (``metering._nudge_undispatched``).

    Raises ``DependencyFailed`` when the queue refuses (the caller's write stands; the next request
    of the account or the backstop admits).
    """
    services.dispatch.request_admission([account_id])


def admit_after_end(services: Services, job: Job) -> None:
    """After ``job`` (as stored) is final: when it took part in the quota (not one on a dedicated
    compute), have its account's held jobs admitted into what it gave back (``request_admission``)."""
    if job.is_final and job.dispatch_state is not None and job.compute is None:
        request_admission(services, job.account_id)


def resume_parked(services: Services, class_name: str, zone: GeoZone) -> int:
    """After ``class_name`` is back in service in ``zone``: send what waits for it to the dispatcher
    again: its queued single jobs, and the admitted spans of its unfinished arrays (the dispatcher's
    claim skips any that are not admitted). Returns how many messages were sent.

    Raises ``DependencyFailed`` when DynamoDB or the queue fails (the meter's backstop sends them later).
    """
    singles, arrays = services.store.list_waiting_job_ids(class_name, zone)
    messages = list(singles)
    for parent_id in arrays:
        parent = services.store.get_job(parent_id)
        if parent is not None and not parent.is_final:
            messages += span_ids(parent)
    enqueue(services, messages)
    if messages:
        logger.info(
            "parked jobs resumed", machine_class=class_name, geo_zone=zone.value, messages=len(messages)
        )
    return len(messages)
