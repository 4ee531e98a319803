"""Submitting, reading and aborting jobs.

Submit writes the input to S3 and the job to DynamoDB, admitted when its account's quota has room
for it, else held; the dispatcher (``functions.logic.dispatch``) calls Batch ``SubmitJob`` once the
quota admits it. A job AWS Batch never takes ends ``Terminated`` with the reason, free. An abort
records its reason and ends the job where it is (``functions.logic.endings.terminate``).
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from aws_lambda_powertools import Logger

from functions.domain.arrays import child_template, initial_counts, parse_child_job_id
from functions.domain.dependencies import Dependency, InputsFrom
from functions.domain.environments import (
    Environment,
    EnvironmentSpec,
    JobEnvironment,
    check_name,
    environment_prerequisite,
    for_job,
    for_job_spec,
)
from functions.domain.errors import (
    Conflict,
    DependencyFailed,
    InsufficientCredits,
    NotFound,
    UnreadableRecord,
    ValidationFailed,
)
from functions.domain.ids import new_ulid
from functions.domain.jobs import (
    ABORTED_BY_USER,
    DispatchState,
    Job,
    JobType,
    PayloadKind,
)
from functions.domain.machine_classes import GeoZone, MachineClass, machine_class, resolve_geo_zone
from functions.domain.notifications import NotificationRule, normalize_notifications
from functions.domain.prerequisites import Prerequisite
from functions.domain.quotas import QuotaLimits
from functions.domain.runtime import DEFAULT_PYTHON_VERSION
from functions.domain.text import JOB_ID_PATTERN, full_match
from functions.logic import dependencies, inline_environments, quotas, waits
from functions.logic.batch_submission import input_key
from functions.logic.computes import compute_for_job
from functions.logic.dispatch_requests import enqueue_one, request_admission
from functions.logic.endings import terminate
from functions.logic.fleet import ensure_class_available
from functions.logic.uploads import uploaded_input
from functions.ports import Services

logger = Logger(child=True)


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A validated submit request, in the domain's terms.

    ``payload`` is the Python source (code), the argv (command) or the base64 cloudpickle (pickle);
    or ``input_key`` names an upload (``functions.logic.uploads``) whose Content-Type tells its kind,
    and ``payload_kind`` is None until submit reads it.
    ``time_constraint`` is seconds of Running time; ``credit_constraint`` credits. ``array_items``
    (inline) or ``array_items_key`` (an upload of JSON Lines) make it an array job
    (``functions.logic.arrays``); ``parallelism`` (1..10,000, an array's only) runs its items on that
    many containers that each take many items (``Job.array_containers``), None: a container per item.
    """

    payload_kind: PayloadKind | None
    payload: str | list[str]
    name: str | None = None
    machine_class: str = "Basic1x8"
    geo_zone: str = "Automatic"
    credit_constraint: Decimal | None = None
    time_constraint: int | None = None
    notifications: Any = "Automatic"
    input_key: str | None = None
    # The ``major.minor`` a pickle was made with (``pythonVersion``), None when the client did not say.
    python_version: str | None = None
    # The caller's environment to run in (``functions.domain.environments``): a name, or an inline
    # spec (an unnamed environment, found again by its spec's hash).
    environment: str | EnvironmentSpec | None = None
    array_items: list[Any] | None = None
    array_items_key: str | None = None
    parallelism: int | None = None
    # The caller's dedicated compute to run on (``functions.logic.computes.compute_for_job``), and
    # whether ``machine_class`` was asked for (else the compute's class is the job's).
    compute: str | None = None
    machine_class_given: bool = True
    # The user who submits (the token's user id), recorded on the job as ``submittedBy``.
    submitted_by: str | None = None
    # The job's parents and the outputs it takes from them (``functions.domain.dependencies``; checked).
    depends_on: tuple[Dependency, ...] = ()
    inputs_from: tuple[InputsFrom, ...] = ()

    @property
    def is_array(self) -> bool:
        """True for an array job: ``arrayItems`` or ``arrayItemsKey`` given."""
        return self.array_items is not None or self.array_items_key is not None


def new_job_id(now_ms: int | None = None) -> str:
    """``job-<ULID>`` (``functions.domain.ids.new_ulid``): ids sort by creation time; a valid AWS
    Batch job name."""
    return "job-" + new_ulid(time.time_ns() // 1_000_000 if now_ms is None else now_ms)


def _input_document(request: JobRequest, kind: PayloadKind) -> dict[str, Any]:
    """The input object the worker reads (``worker.runner.parse_job_input``): the payload inline,
    or ``payloadKey``, the key of an uploaded object that is the payload (source text, pickle bytes);
    with ``inputsFrom``, the parents whose outputs it starts with (``[{"jobId", "files"}]``: the
    service copies them under the job's inputs at its release, ``logic.parent_inputs``)."""
    document = _payload_document(request, kind)
    if request.inputs_from:
        document["inputsFrom"] = [{"jobId": i.job_id, "files": list(i.files)} for i in request.inputs_from]
    return document


def _payload_document(request: JobRequest, kind: PayloadKind) -> dict[str, Any]:
    if request.input_key is not None:
        return {"kind": kind.value, "payloadKey": request.input_key}
    if kind == PayloadKind.PICKLE:
        try:
            base64.b64decode(str(request.payload), validate=True)
        except (binascii.Error, ValueError):
            raise ValidationFailed(
                "pickle must be base64 (standard alphabet, padded).", field="pickle"
            ) from None
    return {"kind": kind.value, kind.value: request.payload}


@dataclass(frozen=True, slots=True)
class PreparedSubmission:
    """What every submit checks before it writes anything: the machine class, the zone, the
    normalized notification rules, the payload's kind and the worker's input document."""

    machine: MachineClass
    zone: GeoZone
    rules: tuple[NotificationRule, ...]
    kind: PayloadKind
    document: dict[str, Any]
    # The new job's id (``new_job_id``), chosen first: its parents list it before it is written.
    job_id: str
    # On a dedicated compute: its name and its job queue (else None: the class's shared queue).
    compute: str | None = None
    job_queue: str | None = None
    # The account's quota limits as read with its balance (None: read them when needed).
    limits: QuotaLimits | None = None
    # The Python (major.minor) the job runs on: the request's, or the deployment's default.
    python_version: str = DEFAULT_PYTHON_VERSION
    # The environment the job runs in (None: the worker image's packages).
    environment: JobEnvironment | None = None
    # What the job waits for before it takes quota (``functions.logic.waits``; empty: nothing) and
    # what it says meanwhile.
    waiting_for: tuple[Prerequisite, ...] = ()
    waiting_reason: str | None = None
    # The parents final already when the submit marked them (``Job.settled_parents``).
    settled_parents: frozenset[str] = frozenset()
    # The size of the array a submitted array depends on per item (``MarkedParents.per_item_size``).
    per_item_size: int | None = None
    # An inline spec whose unnamed environment is still to be asked for (``with_inline_environment``,
    # once every other check passed, so a refused job starts no build).
    inline_spec: EnvironmentSpec | None = None


def prepare_submission(services: Services, account_id: str, request: JobRequest) -> PreparedSubmission:
    """Validate a submit request against this deployment and the caller's account.

    Raises
    ------
    ValidationFailed
        Unknown machine class or geo zone, a zone this deployment lacks, a bad notifications spec,
        an ``inputKey`` that is not the caller's upload in the job's zone, a Python version this
        deployment does not run (``field`` ``pythonVersion``, naming those it does).
    InsufficientCredits
        The account's balance is not positive.
    ClassUnavailable
        An operator took the class out of service in the zone (503, with the operator's reason).
    """
    compute, job_queue = None, None
    if request.compute is not None:
        requested = request.machine_class if request.machine_class_given else None
        on, machine, job_queue = compute_for_job(
            services, account_id, request.compute, requested, request.geo_zone
        )
        zone, compute = on.geo_zone, on.name
    else:
        machine = machine_class(request.machine_class)
        zone = resolve_geo_zone(request.geo_zone)
    if zone not in services.zones:
        available = ", ".join(z.value for z in services.zones)
        raise ValidationFailed(
            f"Geo zone {zone.value} is not available in this deployment; available: {available}.",
            field="geoZone",
        )
    rules = normalize_notifications(request.notifications)
    kind = request.payload_kind
    if request.input_key is not None:
        kind, _ = uploaded_input(services, account_id, request.input_key, zone)
    if kind is None:
        raise ValidationFailed("Give one of code, command, pickle or inputKey.", field="inputKey")
    now = services.clock()
    environment, waiting_for, waiting_reason = _job_environment(services, account_id, request, now)
    inline_spec = (
        request.environment
        if isinstance(request.environment, EnvironmentSpec)
        and environment
        and not waiting_for
        and environment.hash is None
        else None
    )
    job_id = new_job_id()
    settled_parents: frozenset[str] = frozenset()
    per_item_size: int | None = None
    if request.depends_on:
        marked = dependencies.mark_parents(
            services,
            account_id,
            job_id,
            zone,
            request.depends_on,
            takes_outputs=tuple(i.job_id for i in request.inputs_from),
            now=now,
        )
        waiting_for += marked.prerequisites
        if marked.prerequisites:
            waiting_reason = waiting_reason or marked.reason or "Waiting for its dependencies"
        settled_parents = marked.settled
        per_item_size = marked.per_item_size
    python_version = environment.python if environment else services.python.choose(request.python_version)
    document = _input_document(request, kind)
    ensure_class_available(services, machine.name, zone)
    # The account and its quota limits in one read (a job on a dedicated compute needs no limits).
    account, limits = services.store.get_account_and_quota_limits(account_id)
    if account is None or account.credit_balance <= 0:
        balance = account.credit_balance if account else Decimal(0)
        raise InsufficientCredits(f"The account's credit balance is {balance}; add credits to submit jobs.")
    return PreparedSubmission(
        machine=machine,
        zone=zone,
        rules=rules,
        kind=kind,
        document=document,
        job_id=job_id,
        compute=compute,
        job_queue=job_queue,
        limits=limits,
        python_version=python_version,
        environment=environment,
        waiting_for=waiting_for,
        waiting_reason=waiting_reason,
        settled_parents=settled_parents,
        per_item_size=per_item_size,
        inline_spec=inline_spec,
    )


def _job_environment(
    services: Services, account_id: str, request: JobRequest, now: datetime
) -> tuple[JobEnvironment | None, tuple[Prerequisite, ...], str | None]:
    """The environment ``request`` names or gives inline, as the job records it (None when it gives
    none), and, while it builds, the job's prerequisite on it and its waiting reason (``Building
    environment ml ...``). An inline spec with no unnamed environment to take yet gives its Python and
    no hash (``PreparedSubmission.inline_spec``: asked for once every check passed).

    Raises ``ValidationFailed`` (``environment``, or ``environment.<field>`` of an inline spec) for a
    bad name or spec, one the account lacks or one that failed; ``NotSupported`` for an inline spec
    where no builder is wired.
    """
    wanted = request.environment
    if wanted is None:
        return None, (), None
    if isinstance(wanted, EnvironmentSpec):
        found = inline_environments.find_unnamed_environment(
            services, account_id, inline_environments.check_inline_spec(services, wanted), now
        )
        if found is None:
            return for_job_spec(wanted, request.python_version), (), None
    else:
        check_name(wanted, "environment")
        found = None
        if services.environment_store is not None:
            found = services.environment_store.get_environment(account_id, wanted)
        if found is None:
            raise ValidationFailed(f"No environment {wanted} in this account.", field="environment")
    return _waiting_on(found, request.python_version)


def _waiting_on(
    environment: Environment, python_version: str | None
) -> tuple[JobEnvironment, tuple[Prerequisite, ...], str | None]:
    """``environment`` as a job records it, and its prerequisite and reason while it builds."""
    chosen = for_job(environment, python_version)
    if chosen.hash is not None:
        return chosen, (), None
    return chosen, (environment_prerequisite(environment),), environment.waiting_reason


def with_inline_environment(
    services: Services, account_id: str, prepared: PreparedSubmission, now: datetime
) -> PreparedSubmission:
    """``prepared`` with its inline spec's unnamed environment asked for (created Building and its
    build started, or the one another job asked for meanwhile): what the job records of it and what
    it waits for. Unchanged without a pending inline spec. Raises ``QuotaExceeded`` (``environment``:
    the account's builds are full) and what ``domain.environments.for_job`` raises."""
    if prepared.inline_spec is None:
        return prepared
    environment = inline_environments.ask_unnamed_environment(services, account_id, prepared.inline_spec, now)
    chosen, waiting_for, reason = _waiting_on(environment, prepared.python_version)
    return replace(
        prepared,
        environment=chosen,
        waiting_for=waiting_for + prepared.waiting_for,
        waiting_reason=reason or prepared.waiting_reason,
        inline_spec=None,
    )


def new_job(
    account_id: str,
    request: JobRequest,
    prepared: PreparedSubmission,
    now: datetime,
    *,
    array_size: int | None = None,
) -> Job:
    """The Queued job a checked request makes (its id ``prepared.job_id``, submitted at ``now``): a
    ``Single`` job, or with ``array_size`` an ``Array`` parent whose children all count as Queued."""
    return Job(
        job_id=prepared.job_id,
        account_id=account_id,
        name=request.name,
        type=JobType.SINGLE if array_size is None else JobType.ARRAY,
        payload_kind=prepared.kind,
        machine_class=prepared.machine.name,
        geo_zone=prepared.zone,
        credit_constraint=request.credit_constraint,
        time_constraint=request.time_constraint,
        notifications=prepared.rules,
        submitted_at=now,
        array_size=array_size,
        child_status_counts=None if array_size is None else initial_counts(array_size),
        compute=prepared.compute,
        submitted_by=request.submitted_by,
        python_version=prepared.python_version,
        environment=prepared.environment,
        waiting_for=prepared.waiting_for,
        depends_on=request.depends_on,
        inputs_from=request.inputs_from,
        settled_parents=prepared.settled_parents,
    )


def submit_job(services: Services, account_id: str, request: JobRequest, now: datetime) -> Job:
    """Create a job; the dispatcher hands it to AWS Batch once its account's quota admits it.

    The input goes to S3, then the job to DynamoDB: a job that fits with nothing of its family and
    zone waiting is written admitted with its units in use (one conditional transaction,
    ``quotas.admit_at_submit``) and enqueued; any other is written held for quota (``quotas.hold``)
    and, when its family and the account's total have room, the dispatcher is asked to admit the
    account's held jobs oldest first (``dispatch_requests.request_admission``). A job on a dedicated
    compute (``request.compute``) runs on the compute's reservation: it is not held nor counted, but
    admitted at once (``_submit_to_compute``). AWS Batch is not called here: a burst of submits is
    absorbed by the dispatch queue.

    A job whose environment builds (named, or an inline spec's unnamed one, asked for here once every
    other check passed) is written waiting for it instead (``waits.submit_waiting``): it takes no quota
    until the build is Ready, then goes this same way; a failed build ends it, free.

    Returns
    -------
    Job
        The job, Queued: admitted (waiting for the dispatcher), held with ``statusReason``
        ``Waiting for quota: ...``, or waiting with ``Building environment ml (...)``.

    Raises
    ------
    ValidationFailed
        Unknown machine class or geo zone, a zone this deployment lacks, a bad notifications spec,
        an ``inputKey`` that is not the caller's upload in the job's zone.
    QuotaExceeded
        The job alone needs more than its account's quota for its family and zone (or its total).
    InsufficientCredits
        The account's balance is not positive.
    DependencyFailed
        S3 or DynamoDB failed; nothing is left behind.
    """
    prepared = prepare_submission(services, account_id, request)
    if prepared.inline_spec is not None or prepared.waiting_for:
        if prepared.compute is None:
            quotas.check_submit(services, account_id, prepared.machine, prepared.zone, limits=prepared.limits)
        prepared = with_inline_environment(services, account_id, prepared, now)
    if prepared.waiting_for:
        return _submit_waiting(services, new_job(account_id, request, prepared, now), prepared, now)
    if prepared.compute is not None:
        return _submit_to_compute(services, account_id, request, prepared, now)
    demand, limits = quotas.check_submit(
        services, account_id, prepared.machine, prepared.zone, limits=prepared.limits
    )
    job = new_job(account_id, request, prepared, now)
    zone_services = services.zones[prepared.zone]
    zone_services.blobs.put(input_key(job.job_id), json.dumps(prepared.document).encode(), "application/json")
    try:
        # The usual case in one write: admitted at once with its units in use; else held.
        admitted = quotas.admit_at_submit(services, job, limits)
        alone = False
        if admitted is None:
            job, alone = quotas.hold(services, job, demand, limits)
        else:
            job = admitted
    except Exception:
        zone_services.blobs.delete_prefix(f"inputs/{job.job_id}/")
        raise
    services.events.count("JobsSubmitted")
    logger.info("job accepted", job_id=job.job_id, machine_class=prepared.machine.name)
    try:
        if admitted is None and alone:
            admitted = quotas.admit_new(services, job, demand, limits)
        if admitted is not None:
            # Queued: answer as admitted; without a queue it was sent (or ended) here: the job as
            # the dispatcher left it.
            return enqueue_one(services, admitted)
        if quotas.room_after_hold(services, account_id, demand, limits):
            request_admission(services, account_id)
    except DependencyFailed:
        # The job is stored, held or admitted: the account's next release or submit, or the meter's
        # backstop, admits or enqueues it.
        logger.exception("admission deferred", job_id=job.job_id)
    if not services.dispatch.inline:
        return job  # held as written: the dispatcher admits it later
    # Without a queue the admission ran here and may have sent (or ended) it: read it.
    return services.store.get_job(job.job_id) or job


def _submit_waiting(services: Services, job: Job, prepared: PreparedSubmission, now: datetime) -> Job:
    """Create a job that waits for its prerequisites (its environment builds): its input goes to S3,
    the job is written ``Waiting``, holding no quota (``waits.submit_waiting``), and is released into
    the quota's admission once they hold (or ends ``Terminated``, free, when one cannot).

    Raises ``DependencyFailed`` (S3 or DynamoDB failed; nothing is left behind).
    """
    zone_services = services.zones[prepared.zone]
    zone_services.blobs.put(input_key(job.job_id), json.dumps(prepared.document).encode(), "application/json")
    try:
        stored = waits.submit_waiting(services, job, prepared.waiting_reason or "Waiting", now)
    except Exception:
        zone_services.blobs.delete_prefix(f"inputs/{job.job_id}/")
        raise
    services.events.count("JobsSubmitted")
    logger.info("job accepted", job_id=job.job_id, machine_class=prepared.machine.name, waiting=True)
    if services.dispatch.inline and not stored.is_waiting:
        # Released (or ended) at once, and without a queue admitted here: read what that wrote.
        return services.store.get_job(job.job_id) or stored
    return stored


def _submit_to_compute(
    services: Services, account_id: str, request: JobRequest, prepared: PreparedSubmission, now: datetime
) -> Job:
    """Create a job on a dedicated compute: it runs on the capacity the compute reserves, so it takes
    nothing more of the quota (never held, never counted: written ``Admitted``) and goes to the
    dispatcher at once, which sends it to the compute's job queue.

    Raises ``DependencyFailed`` (S3 or DynamoDB failed; nothing is left behind).
    """
    job = replace(new_job(account_id, request, prepared, now), dispatch_state=DispatchState.ADMITTED)
    zone_services = services.zones[prepared.zone]
    zone_services.blobs.put(input_key(job.job_id), json.dumps(prepared.document).encode(), "application/json")
    try:
        services.store.create_job(job)
    except Exception:
        zone_services.blobs.delete_prefix(f"inputs/{job.job_id}/")
        raise
    services.events.count("JobsSubmitted")
    logger.info("job accepted", job_id=job.job_id, machine_class=prepared.machine.name, compute=job.compute)
    try:
        return enqueue_one(services, job)
    except DependencyFailed:
        # The job is stored admitted: the meter's backstop enqueues it again (``_nudge_undispatched``).
        logger.exception("dispatch deferred", job_id=job.job_id)
        return job


def get_owned_job(services: Services, account_id: str, job_id: str) -> Job:
    """The job if it belongs to ``account_id``.

    An array's child (``<parent>:<index>``) that had no event yet is its parent's ``child_template``
    (Queued); a child's data is gone once its parent's is (``DELETE`` of the parent).

    Raises
    ------
    NotFound
        No such job, another account's (tenant isolation: never 403), one past its record TTL, or an
        item that is not a whole job (it belongs to nobody; logged).
    """
    # An id this service never makes is not looked up (and never reaches a key expression).
    child = parse_child_job_id(job_id)
    try:
        job = services.store.get_job(job_id) if child or full_match(JOB_ID_PATTERN, job_id) else None
        if child is not None:
            job = _child_view(services, job, *child)
    except UnreadableRecord as exc:
        logger.error("unreadable job item answered as not found", job_id=job_id, problem=exc.message)
        job = None
    if job is None or job.account_id != account_id:
        raise NotFound(f"No job {job_id} in this account.")
    return job


def _child_view(services: Services, stored: Job | None, parent_id: str, index: int) -> Job | None:
    parent = services.store.get_job(parent_id)
    if parent is None or parent.type != JobType.ARRAY or not 0 <= index < (parent.array_size or 0):
        return None
    child = stored or child_template(parent, index)
    if parent.data_deleted_at is not None and child.data_deleted_at is None:
        child = replace(child, data_deleted_at=parent.data_deleted_at)
    return child


def abort_job(services: Services, account_id: str, job_id: str) -> Job:
    """``POST /jobs/{jobId}/abort``: terminate a job that is not final with ``Aborted by user``.

    Aborting a final job is a no-op that returns it. An array's child is aborted alone (its array
    goes on); one that had no event yet is not in AWS Batch's hands as a job of its own yet.

    Raises
    ------
    NotFound
        Another account's job.
    Conflict
        An array's child that has not started yet: abort its array instead, or try again later.
    """
    job = get_owned_job(services, account_id, job_id)
    if job.type == JobType.ARRAY_CHILD and job.batch_job_id is None:
        raise Conflict(
            f"Child {job_id} has not reached AWS Batch as a job of its own yet; abort its array "
            f"({job.parent_job_id}) or try again once it is Starting."
        )
    aborted = terminate(services, job, ABORTED_BY_USER)
    if not job.is_final:
        services.events.count("JobsAborted")
        # Ended here (AWS Batch never had it): the children waiting for it are settled now; one
        # AWS Batch has ends by its FAILED event, which settles them (``job_events``).
        waits.settle_dependents(services, aborted, services.clock())
    return aborted
