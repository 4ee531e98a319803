"""Fleet control for operators: each machine class's state per geo zone, taking one out of service
and back, its compute environments' capacity; and the checks a submit and the dispatcher make.

Where the switches live: the operators' state (out of service, reason) is stored in DynamoDB
(``OperationsStore``), so a submit learns it without calling AWS Batch: each api environment reads
all class states with one Query at most every ``CLASS_STATE_MAX_AGE_SECONDS`` (the environment that
made a change sees it at once). The job queue's ``state`` in AWS Batch follows: ``DISABLED`` while the
class is out of service, so nothing submits to it meanwhile, and jobs already in it still run
("Jobs that are already in the queue can finish", AWS Batch API reference, ``UpdateJobQueue``).

Order of the two writes, so a retry always converges and no submit reaches a disabled queue:
disable writes DynamoDB first, then Batch; enable writes Batch first, then DynamoDB. A retried
request finds the state already set, writes nothing and records no second audit entry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from aws_lambda_powertools import Logger

from functions.domain.errors import ConditionFailed, Conflict, DependencyFailed, NotFound, ValidationFailed
from functions.domain.fleet import (
    MAX_VCPUS_LIMIT,
    AuditAction,
    AuditEntry,
    ClassAvailability,
    QueueState,
    check_geo_zone,
    check_machine_class,
    class_target,
    disabled,
    enabled,
    ensure_available,
)
from functions.domain.jobs import Job
from functions.domain.machine_classes import MACHINE_CLASSES, GeoZone
from functions.logic.audit import audit_entry_id
from functions.logic.dispatch_requests import resume_parked
from functions.ports import (
    ClassLoad,
    ComputeEnvironmentInfo,
    FleetControl,
    JobQueueInfo,
    OperationsStore,
    Services,
)

logger = Logger(child=True)

# How stale a submit's view of the class states may be in api environments that did not make the
# change (seconds): one DynamoDB Query per environment per this interval at most.
CLASS_STATE_MAX_AGE_SECONDS = 10.0
# An admitted job whose (class, zone) an operator took out of service waits, admitted, until the class
# is enabled again (``dispatch_requests.resume_parked``); issue 15: "queued jobs stay queued".
OUT_OF_SERVICE_REASON = "Waiting: {machine_class} is out of service in {zone}: {reason}"


@dataclass(frozen=True, slots=True)
class ComputeEnvironmentStatus:
    """One compute environment of a class's job queue: name, Batch ``state``, ``maxvCpus``."""

    name: str
    state: str
    max_vcpus: int | None


@dataclass(frozen=True, slots=True)
class MachineClassStatus:
    """A machine class in a geo zone as ``GET /admin/machine-classes`` shows it.

    Attributes
    ----------
    machine_class : str
    geo_zone : GeoZone
    availability : ClassAvailability
        The operators' state (out of service, reason, who, when).
    queue_state : str | None
        The job queue's ``state`` in AWS Batch (``ENABLED``/``DISABLED``); None when Batch does not
        know the queue.
    load : ClassLoad
        Jobs not final: queued, running.
    compute_environments : tuple[ComputeEnvironmentStatus, ...]
        The queue's compute environments in order.
    shared_with : tuple[str, ...]
        Other classes whose queues use one of these compute environments (a capacity change
        applies to them too).
    """

    machine_class: str
    geo_zone: GeoZone
    availability: ClassAvailability
    queue_state: str | None
    load: ClassLoad
    compute_environments: tuple[ComputeEnvironmentStatus, ...] = ()
    shared_with: tuple[str, ...] = field(default_factory=tuple)

    @property
    def max_vcpus(self) -> int:
        """The vCPUs the class's compute environments may run at once, all together."""
        return sum(ce.max_vcpus or 0 for ce in self.compute_environments)


def ensure_class_available(services: Services, machine_class: str, geo_zone: GeoZone) -> None:
    """Refuse a submit for a (class, zone) an operator took out of service.

    Raises
    ------
    ClassUnavailable
        503 with the operator's reason.
    """
    if services.operations is None:
        return
    states = services.operations.class_states(CLASS_STATE_MAX_AGE_SECONDS)
    ensure_available(states.get((machine_class, geo_zone)))


def out_of_service_reason(services: Services, job: Job, *, fresh: bool) -> str | None:
    """The ``statusReason`` a job (or an array's span) waits with while an operator has its (class,
    zone) out of service (``OUT_OF_SERVICE_REASON``), or None when the class takes jobs. A job on a
    dedicated compute goes to the compute's own queue: never out of service. ``fresh`` reads the
    state strongly consistent (after AWS Batch refused the job), else from the store's short-lived
    cache (``CLASS_STATE_MAX_AGE_SECONDS``)."""
    if job.compute is not None or services.operations is None:
        return None
    key = (job.machine_class, job.geo_zone)
    state = (
        services.operations.get_class_state(*key)
        if fresh
        else services.operations.class_states(CLASS_STATE_MAX_AGE_SECONDS).get(key)
    )
    if state is None or not state.disabled:
        return None
    return OUT_OF_SERVICE_REASON.format(
        machine_class=job.machine_class, zone=job.geo_zone.value, reason=state.reason or "no reason given"
    )


def _operations(services: Services) -> OperationsStore:
    if services.operations is None:
        raise DependencyFailed("the operations store is not configured")
    return services.operations


def _fleet(services: Services, zone: GeoZone) -> FleetControl:
    fleet = services.zones[zone].fleet
    if fleet is None:
        raise DependencyFailed(f"no AWS Batch fleet control in {zone.value}")
    return fleet


def locate(services: Services, machine_class: str, zone: str) -> tuple[str, GeoZone]:
    """The (class, zone) a path names. Raises ``ValidationFailed`` (``machineClass``/``geoZone``)."""
    return check_machine_class(machine_class), check_geo_zone(zone, list(services.zones))


def list_machine_classes(services: Services) -> list[MachineClassStatus]:
    """Every class in every deployed zone, in docs/http-api.md's order per zone: the operators' state, the
    queue's Batch state, jobs not final, the compute environments' ``maxvCpus``.

    Costs per zone one DescribeJobQueues and one DescribeComputeEnvironments, plus one Query of
    the class states and one of the unfinished jobs.

    Raises ``DependencyFailed`` when Batch or DynamoDB fail.
    """
    operations = _operations(services)
    states = operations.class_states(0)
    loads = operations.count_unfinished()
    result: list[MachineClassStatus] = []
    for zone in services.zones:
        result += _zone_statuses(services, zone, states, loads, list(MACHINE_CLASSES))
    return result


def class_status(services: Services, machine_class: str, zone: GeoZone) -> MachineClassStatus:
    """One class in one zone, as ``list_machine_classes`` shows it (without the job counts' Query
    of the whole fleet: those are counted too, from the same index)."""
    operations = _operations(services)
    states = {(machine_class, zone): operations.get_class_state(machine_class, zone)}
    return _zone_statuses(services, zone, states, operations.count_unfinished(), [machine_class])[0]


def _zone_statuses(
    services: Services,
    zone: GeoZone,
    states: Mapping[tuple[str, GeoZone], ClassAvailability],
    loads: Mapping[tuple[str, GeoZone], ClassLoad],
    classes: Sequence[str],
) -> list[MachineClassStatus]:
    routes = services.zones[zone].routes
    fleet = _fleet(services, zone)
    queue_names = sorted({routes[name].job_queue for name in MACHINE_CLASSES})
    queues: dict[str, JobQueueInfo] = {}
    for info in fleet.describe_job_queues(queue_names):
        queues[info.name] = info
        queues[info.arn] = info
    environment_ids = sorted({ce for q in queues.values() for ce in q.compute_environments})
    environments: dict[str, ComputeEnvironmentInfo] = {}
    for info_ce in fleet.describe_compute_environments(environment_ids) if environment_ids else []:
        environments[info_ce.arn] = info_ce
        environments[info_ce.name] = info_ce
    users: dict[str, set[str]] = {}
    for name in MACHINE_CLASSES:
        queue = queues.get(routes[name].job_queue)
        for ce in queue.compute_environments if queue else ():
            users.setdefault(ce, set()).add(name)
    statuses = []
    for name in classes:
        queue = queues.get(routes[name].job_queue)
        ces = queue.compute_environments if queue else ()
        shared = sorted({other for ce in ces for other in users.get(ce, set())} - {name})
        statuses.append(
            MachineClassStatus(
                machine_class=name,
                geo_zone=zone,
                availability=states.get((name, zone)) or ClassAvailability(name, zone),
                queue_state=queue.state if queue else None,
                load=loads.get((name, zone)) or ClassLoad(),
                compute_environments=tuple(
                    ComputeEnvironmentStatus(
                        name=environments[ce].name,
                        state=environments[ce].state,
                        max_vcpus=environments[ce].max_vcpus,
                    )
                    for ce in ces
                    if ce in environments
                ),
                shared_with=tuple(shared),
            )
        )
    return statuses


def set_class_availability(
    services: Services,
    *,
    actor: str,
    machine_class: str,
    zone: GeoZone,
    disable: bool,
    reason: str | None,
    now: datetime,
    idempotency_key: str | None = None,
) -> MachineClassStatus:
    """Take a class out of service in a zone (``disable``, with ``reason``) or put it back.

    A request that finds the state it asks for changes nothing and records nothing (so a retry,
    with or without an ``Idempotency-Key``, never counts twice); it still sets the Batch queue's
    state, which a failed earlier attempt may have left behind.

    Raises
    ------
    Conflict
        Another operator changed the class at the same moment (retry).
    DependencyFailed
        Batch or DynamoDB failed; a retry finishes what this attempt began.
    """
    operations = _operations(services)
    fleet = _fleet(services, zone)
    queue = services.zones[zone].routes[machine_class].job_queue
    current = operations.get_class_state(machine_class, zone)
    target = class_target(machine_class, zone)
    if disable:
        wanted = disabled(current, reason or "", actor, now)
        if not (current.disabled and current.reason == reason):
            _save(
                operations,
                current,
                wanted,
                actor=actor,
                action=AuditAction.DISABLE_CLASS,
                target=target,
                reason=reason,
                now=now,
                idempotency_key=idempotency_key,
            )
        fleet.set_job_queue_state(queue, QueueState.DISABLED.value)
    else:
        fleet.set_job_queue_state(queue, QueueState.ENABLED.value)
        resumed = current.disabled
        if current.disabled:
            wanted = enabled(current, actor, now)
            _save(
                operations,
                current,
                wanted,
                actor=actor,
                action=AuditAction.ENABLE_CLASS,
                target=target,
                reason=reason,
                now=now,
                idempotency_key=idempotency_key,
            )
    logger.info(
        "machine class availability set", machine_class=machine_class, geo_zone=zone.value, disabled=disable
    )
    if not disable and resumed:
        # The jobs admitted while it was out of service wait parked: send them now.
        resume_parked(services, machine_class, zone)
    return class_status(services, machine_class, zone)


def _save(
    operations: OperationsStore,
    current: ClassAvailability,
    wanted: ClassAvailability,
    *,
    actor: str,
    action: AuditAction,
    target: str,
    reason: str | None,
    now: datetime,
    idempotency_key: str | None,
) -> None:
    audit = AuditEntry(
        entry_id=audit_entry_id(actor, action, target, idempotency_key),
        at=now,
        actor=actor,
        action=action,
        target=target,
        before=current.view(),
        after=wanted.view(),
        reason=reason,
    )
    try:
        operations.save_class_state(wanted, audit)
    except ConditionFailed:
        raise Conflict(
            "Another operator changed this machine class just now; read it and try again."
        ) from None


def set_capacity(
    services: Services,
    *,
    actor: str,
    machine_class: str,
    zone: GeoZone,
    max_vcpus: int,
    now: datetime,
    idempotency_key: str | None = None,
) -> MachineClassStatus:
    """Set ``maxvCpus`` of every compute environment of the class's job queue (UpdateComputeEnvironment),
    with one audit entry of the environments' values before and after. Environments already at
    ``max_vcpus`` are not updated; when none changes, nothing is recorded.

    The environments are shared by the classes of one compute pool (``shared_with`` of the answer).

    Raises
    ------
    ValidationFailed
        ``max_vcpus`` outside 0..100,000 (``field="maxVcpus"``).
    NotFound
        Batch does not know the class's job queue in this zone.
    DependencyFailed
        Batch or DynamoDB failed; a retry finishes what this attempt began.
    """
    if not 0 <= max_vcpus <= MAX_VCPUS_LIMIT:
        raise ValidationFailed(f"maxVcpus must be between 0 and {MAX_VCPUS_LIMIT}.", field="maxVcpus")
    operations = _operations(services)
    fleet = _fleet(services, zone)
    queue_name = services.zones[zone].routes[machine_class].job_queue
    queues = fleet.describe_job_queues([queue_name])
    if not queues:
        raise NotFound(f"AWS Batch has no job queue for {machine_class} in {zone.value}.")
    environments = fleet.describe_compute_environments(list(queues[0].compute_environments))
    before = {ce.name: ce.max_vcpus for ce in environments}
    changed = [ce for ce in environments if ce.max_vcpus != max_vcpus]
    for ce in changed:
        fleet.set_max_vcpus(ce.arn, max_vcpus)
    if changed:
        target = class_target(machine_class, zone)
        operations.record(
            AuditEntry(
                entry_id=audit_entry_id(actor, AuditAction.SET_CAPACITY, target, idempotency_key),
                at=now,
                actor=actor,
                action=AuditAction.SET_CAPACITY,
                target=target,
                before={"maxVcpus": before},
                after={"maxVcpus": {ce.name: max_vcpus for ce in environments}},
            )
        )
    logger.info(
        "capacity set",
        machine_class=machine_class,
        geo_zone=zone.value,
        max_vcpus=max_vcpus,
        changed=len(changed),
    )
    return class_status(services, machine_class, zone)
