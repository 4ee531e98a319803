"""What a job's AWS Batch ``SubmitJob`` carries: its S3 keys, timeout, environment, tags and job queue.

One home for the request the dispatcher sends for a single job (``job_submission``) and for one span of
an array (``span_submission``), and for the keys the worker reads and writes (``input_key``,
``output_prefix``). SubmitJob's ``jobName`` is the job's id (a span's: ``domain.arrays.span_job_name``),
which is how a dead dispatcher's claim is looked up in AWS Batch before anything is sent again
(``functions.logic.dispatch.recover_claim``).
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from functions.domain.arrays import span_job_name
from functions.domain.computes import resource_name
from functions.domain.environments import ENVIRONMENT_HASH_VARIABLE
from functions.domain.fair_share import share_identifier
from functions.domain.jobs import Job, QueuedSpan, credit_cap_seconds
from functions.domain.machine_classes import MachineClass, machine_class
from functions.domain.runtime import DEFAULT_PYTHON_VERSION, job_definition_name
from functions.ports import BatchSubmission, ImageJob, Services, ZoneServices

# A creditConstraint also sets a Batch timeout (cap ÷ rate plus a margin) so a job stops even if
# the meter is down (docs/architecture.md "Credits"); the meter normally stops it first.
CREDIT_TIMEOUT_MARGIN_SECONDS = 120
#: Environment variable of an image job's supervisor: the Python the image's ``python3`` must be.
IMAGE_PYTHON_VARIABLE = "REMOTE_BATCH_IMAGE_PYTHON"
#: Environment variable of a span's container: the global index of the span's first item.
ARRAY_OFFSET_VARIABLE = "REMOTE_BATCH_ARRAY_OFFSET"
#: Environment variable of a span's container when the array's containers take many items
#: (``Job.array_containers``): how many containers the array runs on (``worker.item_loop``).
ARRAY_CONTAINERS_VARIABLE = "REMOTE_BATCH_ARRAY_CONTAINERS"


def input_key(job_id: str) -> str:
    """Where a job's input document lives in its zone's bucket."""
    return f"inputs/{job_id}/input.json"


def output_prefix(job_id: str) -> str:
    """Where a job's worker writes its outputs."""
    return f"outputs/{job_id}/"


def batch_timeout(
    machine: MachineClass, credit_constraint: Decimal | None, time_constraint: int | None
) -> int | None:
    """The Batch ``attemptDurationSeconds`` backing the job's caps (seconds), or None."""
    limits: list[int] = []
    if time_constraint is not None:
        limits.append(time_constraint)
    if credit_constraint is not None:
        limits.append(credit_cap_seconds(credit_constraint, machine) + CREDIT_TIMEOUT_MARGIN_SECONDS)
    return min(limits) if limits else None


def batch_submission(
    job: Job,
    machine: MachineClass,
    zone_services: ZoneServices,
    *,
    job_name: str,
    environment: Mapping[str, str] | None = None,
    array_size: int | None = None,
    job_queue: str | None = None,
) -> BatchSubmission:
    """The ``SubmitJob`` of ``job`` (or of one span of an array) on ``machine``'s queue in its zone:
    the worker's environment (job id, bucket, input key, output prefix, memory in GiB, the build hash
    of the job's environment when it names one, then ``environment``), the timeout backing its caps
    (``batch_timeout``), the job and account tags, and on the class's shared queue the account's share
    identifier (``domain.fair_share``). ``job_queue`` (a dedicated compute's, first in, first out: no
    share identifier) replaces the shared queue. A job in an image environment carries the image
    (``BatchSubmission.image``: its definition is registered per image and class from the class's
    own) and the Python the image must run instead of a build hash: the image's packages are its
    environment."""
    route = zone_services.routes[machine.name]
    definition = job_definition_name(route.job_definition, job.python_version or DEFAULT_PYTHON_VERSION)
    image = job.environment.image if job.environment else None
    build: dict[str, str] = {}
    if image is not None:
        build = {IMAGE_PYTHON_VARIABLE: job.environment.python} if job.environment else {}
    elif job.environment is not None and job.environment.hash:
        # Set once the environment is Ready: a job reaches AWS Batch only after (``logic.waits``).
        build = {ENVIRONMENT_HASH_VARIABLE: job.environment.hash}
    return BatchSubmission(
        job_name=job_name,
        job_queue=job_queue or route.job_queue,
        job_definition=definition,
        vcpus=machine.vcpus,
        memory_mib=machine.memory_mib,
        gpus=machine.gpus,
        environment={
            "REMOTE_BATCH_JOB_ID": job.job_id,
            "REMOTE_BATCH_BUCKET": zone_services.bucket,
            "REMOTE_BATCH_INPUT_KEY": input_key(job.job_id),
            "REMOTE_BATCH_OUTPUT_PREFIX": output_prefix(job.job_id),
            "REMOTE_BATCH_MEMORY_GIB": str(machine.memory_gib),
            **build,
            **(environment or {}),
        },
        timeout_seconds=batch_timeout(machine, job.credit_constraint, job.time_constraint),
        tags={"remote-batch:jobId": job.job_id, "remote-batch:accountId": job.account_id},
        array_size=array_size,
        share_identifier=None if job_queue else share_identifier(job.account_id),
        image=(
            None
            if image is None or job.environment is None
            else ImageJob(image, definition, job.environment.repository_credentials)
        ),
    )


def compute_job_queue(services: Services, job: Job) -> str | None:
    """The job queue of the dedicated compute ``job`` (or an array) runs on (``domain.computes``), or
    None for the class's shared queue."""
    if job.compute is None:
        return None
    return resource_name(services.compute_prefix, job.account_id, job.compute)


def job_submission(services: Services, job: Job) -> BatchSubmission:
    """The single job's SubmitJob (``jobName`` its id); a job on a dedicated compute goes to that
    compute's own job queue (``domain.computes``)."""
    return batch_submission(
        job,
        machine_class(job.machine_class),
        services.zones[job.geo_zone],
        job_name=job.job_id,
        job_queue=compute_job_queue(services, job),
    )


def span_submission(services: Services, parent: Job, span: QueuedSpan) -> BatchSubmission:
    """The span's SubmitJob: an array job of ``span.count`` children (a plain job for one), named
    ``span_job_name``, with ``REMOTE_BATCH_ARRAY_OFFSET`` (and, for an array whose containers take
    many items, ``REMOTE_BATCH_ARRAY_CONTAINERS``: then a child is a container and ``span.offset``
    the global index of the span's first container); a dedicated compute's job queue for an array
    on one."""
    environment = {ARRAY_OFFSET_VARIABLE: str(span.offset)}
    if parent.array_containers is not None:
        environment[ARRAY_CONTAINERS_VARIABLE] = str(parent.array_containers)
    return batch_submission(
        parent,
        machine_class(parent.machine_class),
        services.zones[parent.geo_zone],
        job_name=span_job_name(parent.job_id, span.offset),
        environment=environment,
        array_size=span.count if span.count >= 2 else None,
        job_queue=compute_job_queue(services, parent),
    )
