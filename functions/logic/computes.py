"""Dedicated computes: the API's requests, the provisioning that follows AWS Batch's asynchronous
state changes, the charges, and the meter's schedules, idle stops and balance rule.

Every change goes through ``functions.domain.computes`` (``apply_request``/``apply_event``) and is
stored with a write conditional on the version read (a lost race re-reads and tries again, or waits
for the next tick). AWS Batch calls follow each stored change (``advance``): the record says what
the compute should be, Batch is moved toward it, and the meter's next poll turns what Batch reports
into the next event, so a failed call is simply made again on a later tick.

AWS Batch's ordering rules (AWS Batch User Guide, "Updating compute environments", "Deleting a job
queue", "Deleting a compute environment"): a job queue needs a ``VALID`` compute environment; a
queue is disabled, then deleted, before its compute environment; a compute environment is
disabled before it is deleted; each change is done when ``status`` is back to ``VALID``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from functools import partial

from aws_lambda_powertools import Logger

from functions.domain.charged_time import clamp_moment
from functions.domain.computes import (
    BILLED,
    IDLE_STOP,
    OUT_OF_CREDITS_STOP,
    SCHEDULED_START,
    SCHEDULED_STOP,
    Compute,
    ComputeEvent,
    ComputeRequest,
    ComputeStatus,
    Schedules,
    Step,
    apply_event,
    apply_request,
    compute_cost,
    compute_entry_id,
    ends_jobs,
    idle_expired,
    new_compute,
    released_reservation,
    reservation_of,
    resource_name,
    scheduled_request,
    settlement,
    settlement_due,
    settlement_reason,
)
from functions.domain.credits import ZERO, quantize_credits
from functions.domain.errors import ConditionFailed, Conflict, DependencyFailed, NotFound, ValidationFailed
from functions.domain.jobs import LedgerEntry, LedgerKind
from functions.domain.machine_classes import MachineClass, machine_class, resolve_geo_zone
from functions.domain.quotas import Demand, check_reservation
from functions.logic.compute_jobs import end_jobs_on_compute
from functions.logic.dispatch_requests import request_admission
from functions.ports import ComputeEnvironments, ComputeRepository, Services

logger = Logger(child=True)

WRITE_ATTEMPTS = 5
# AWS Batch statuses in which a resource takes a new change (others: wait for the next poll).
SETTLED = ("VALID", "INVALID")


@dataclass(frozen=True, slots=True)
class ComputeReport:
    """What one meter tick did to computes: how many it looked at, moved (a status change or a
    settlement), and skipped on an error (logged; tried again next tick)."""

    seen: int = 0
    moved: int = 0
    skipped: int = 0


# -- wiring --------------------------------------------------------------------------------------------
def _store(services: Services) -> ComputeRepository:
    if services.compute_store is None:
        raise DependencyFailed("dedicated computes are not configured in this deployment")
    return services.compute_store


def _environments(services: Services, compute: Compute) -> ComputeEnvironments:
    zone = services.zones.get(compute.geo_zone)
    if zone is None or zone.computes is None:
        raise DependencyFailed(f"no dedicated compute support in {compute.geo_zone.value}")
    return zone.computes


def batch_name(services: Services, compute: Compute) -> str:
    """The name of the compute's AWS Batch compute environment and job queue."""
    return resource_name(services.compute_prefix, compute.account_id, compute.name)


def get_compute(services: Services, account_id: str, name: str) -> Compute:
    """The caller's compute. Raises ``NotFound`` (another account's is not found either)."""
    compute = _store(services).get_compute(account_id, name)
    if compute is None:
        raise NotFound(f"No compute {name} in this account.")
    return compute


def list_computes(services: Services, account_id: str) -> list[Compute]:
    """The caller's computes by name."""
    return _store(services).list_computes(account_id)


# -- requests ------------------------------------------------------------------------------------------
def put_compute(
    services: Services, account_id: str, name: str, *, machine: str, zone_name: str, count: int, now: datetime
) -> tuple[Compute, bool]:
    """``PUT /account/computes/{name}``: create the compute, reserving its quota, or return the
    existing one unchanged when it has this very spec (idempotent: its quota is reserved once).
    Returns ``(compute, created)``.

    The reservation is conditional (``functions.adapters.dynamodb.quotas``): the compute is written
    only while its family and zone, and the account's total, keep ``in use + reserved + its units <=
    limit``, in one transaction with the compute, so concurrent creates and job admissions never take
    more than a limit between them. A create that loses (a concurrent PUT of the name, or jobs and
    computes that took the room) re-reads and decides again.

    Raises
    ------
    ValidationFailed
        Bad name, machine class, zone (or one without dedicated compute here), or count.
    QuotaExceeded
        Its reservation does not fit in what the account's jobs and computes leave of its family's
        quota in its zone or of its total, or alone exceeds a limit (``field`` ``machineClass``).
    Conflict
        A compute of that name exists with another spec.
    """
    zone = resolve_geo_zone(zone_name)
    compute = new_compute(account_id, name, machine=machine, zone=zone, count=count, now=now)
    zone_services = services.zones.get(zone)
    if zone_services is None or zone_services.computes is None:
        raise ValidationFailed(f"Dedicated compute is not available in {zone.value} here.", field="geoZone")
    store = _store(services)
    reservation = reservation_of(compute)
    limits = services.store.get_quota_limits(account_id)
    for _ in range(WRITE_ATTEMPTS):
        existing = store.get_compute(account_id, name)
        if existing is not None:
            if not existing.same_spec(compute.machine_class, zone, compute.count):
                raise Conflict(
                    f"Compute {name} exists as {existing.machine_class} x {existing.count} in "
                    f"{existing.geo_zone.value}; delete it first to change it."
                )
            return existing, False
        usage = services.store.get_quota_usage(account_id)
        check_reservation(reservation, usage, limits, f"{compute.machine_class} x {compute.count}")
        try:
            store.create_compute(compute, reservation, limits)
        except ConditionFailed:
            continue  # a concurrent PUT of the name won, or others took the room: read again
        logger.info("compute created", account_id=account_id, compute=name, vcpus=compute.vcpus)
        return _advance_quietly(services, compute, now), True
    raise DependencyFailed("The compute could not be created; try again.")


def request_compute(
    services: Services,
    account_id: str,
    name: str,
    request: ComputeRequest,
    *,
    now: datetime,
    reason: str | None = None,
) -> Compute:
    """Start, stop, restart or delete a compute (a duplicated start or stop is a no-op), settle its
    billed time when it leaves Starting or Running, end the jobs on it when its capacity goes
    (``domain.computes.ends_jobs``: ``compute_jobs.end_jobs_on_compute``), then make the AWS Batch
    call that follows.

    Returns the compute as stored (as it was, for a delete that already removed it).

    Raises
    ------
    NotFound
        No such compute in the account.
    Conflict
        The status does not allow the request.
    """
    for _ in range(WRITE_ATTEMPTS):
        compute = get_compute(services, account_id, name)
        step = apply_request(compute, request, now, reason)
        if not step.changed:
            return compute
        try:
            stored = store_step(services, step, now)
        except ConditionFailed:
            continue
        logger.info("compute request", compute=name, request=request.value, status=_status(stored))
        if ends_jobs(step):
            end_jobs_on_compute(services, compute, request, reason, now)
        return _advance_quietly(services, stored, now) if stored is not None else compute
    raise DependencyFailed("The compute changed concurrently; try again.")


def set_schedules(
    services: Services, account_id: str, name: str, schedules: Schedules, now: datetime
) -> Compute:
    """``PUT .../schedules``: replace the compute's schedules (daily times apply from ``now`` on).

    Raises ``NotFound``; ``Conflict`` while it is Deleting.
    """
    for _ in range(WRITE_ATTEMPTS):
        compute = get_compute(services, account_id, name)
        if compute.status == ComputeStatus.DELETING:
            raise Conflict(f"Compute {name} is Deleting; its schedules cannot change.")
        try:
            return _store(services).save_compute(
                compute, replace(compute, schedules=schedules, schedule_checked_at=now)
            )
        except ConditionFailed:
            continue
    raise DependencyFailed("The compute changed concurrently; try again.")


def _status(compute: Compute | None) -> str:
    return compute.status.value if compute is not None else "deleted"


# -- charges -------------------------------------------------------------------------------------------
def store_step(services: Services, step: Step, now: datetime, *, hourly: bool = False) -> Compute | None:
    """Store one step: a removal or a failure gives the compute's reserved quota back (and has the
    account's held jobs admitted into it); leaving Running (``step.settle``) settles the run's
    unsettled time with the write; ``hourly`` settles a Running compute up to ``now`` (whole seconds,
    the rest carried). Returns the stored compute (None once removed).

    Raises ``ConditionFailed`` on a lost race.
    """
    # A deletion gives the reservation back, and so does a failure (``holds_reservation``).
    release = released_reservation(step.before, step.after)
    stored = _write_step(services, step, now, release, hourly=hourly)
    _admit_after_release(services, step.before, release)
    return stored


def _write_step(
    services: Services, step: Step, now: datetime, release: Demand | None, *, hourly: bool
) -> Compute | None:
    """``store_step``'s write: one transaction with the release and, when due, the settlement."""
    store = _store(services)
    before, after = step.before, step.after
    if after is None:
        store.remove_compute(before, release)
        return None
    until = step.settle or (now if hourly else None)
    if until is None or before.settled_until is None:
        return store.save_compute(before, after, release)
    # The billed time lies inside the run: from what is settled, never past this write's clock.
    until = clamp_moment(until, before.settled_until, now)
    bill = settlement(before, before.settled_until, until, final=not hourly)
    if bill is None:
        return store.save_compute(before, after, release)
    account = services.store.get_account(before.account_id)
    if account is None:
        raise DependencyFailed(f"account {before.account_id} of compute {before.name} is missing")
    credits = quantize_credits(max(min(bill.cost, account.credit_balance), ZERO))
    entry = LedgerEntry(
        entry_id=compute_entry_id(before.name, bill.start),
        account_id=before.account_id,
        at=bill.until,
        kind=LedgerKind.COMPUTE,
        credits=credits,
        balance_after=account.credit_balance - credits,
        unbilled=quantize_credits(bill.cost - credits),
        reason=settlement_reason(before, bill.seconds),
        compute=before.name,
    )
    settled = replace(
        after,
        credits_spent=quantize_credits(after.credits_spent + credits),
        running_seconds=after.running_seconds + bill.seconds,
    )
    if hourly:
        settled = replace(settled, settled_until=bill.until)
    stored = store.settle_compute(before, settled, entry, release)
    services.events.count("CreditsCharged", float(credits), amount=True)
    logger.info("compute settled", compute=before.name, seconds=bill.seconds, credits=str(credits))
    return stored


def _admit_after_release(services: Services, compute: Compute, release: Demand | None) -> None:
    """After ``compute`` gave its reservation back (``release``; None: nothing given back), have its
    account's held jobs admitted into it (``dispatch_requests.request_admission``). A failure to ask is
    logged: the write stands, and the account's next submit or job end, or the meter's backstop, admits."""
    if release is None:
        return
    logger.info("compute reservation released", compute=compute.name, units=release.units)
    try:
        request_admission(services, compute.account_id)
    except DependencyFailed:
        logger.exception("admission after a compute's release deferred", compute=compute.name)


def unsettled_cost(compute: Compute, now: datetime) -> Decimal:
    """What a billed compute has cost since its last settlement (credits, whole seconds)."""
    if compute.status not in BILLED or compute.settled_until is None:
        return ZERO
    seconds = int(max((now - compute.settled_until).total_seconds(), 0))
    return compute_cost(seconds, compute.credits_per_hour)


# -- provisioning: move AWS Batch toward the record, and the record along what Batch reports --------
def _advance_quietly(services: Services, compute: Compute, now: datetime) -> Compute:
    """``advance`` right after a request (so Batch starts at once); a failure is logged, and the
    meter's next tick tries again."""
    try:
        return advance(services, compute, now) or compute
    except (DependencyFailed, ConditionFailed):
        logger.exception("compute provisioning deferred to the meter", compute=compute.name)
        return compute


def advance(services: Services, compute: Compute, now: datetime) -> Compute | None:
    """One provisioning step of ``compute``: the AWS Batch call its status needs next, or the event
    Batch's state makes. Returns the compute as stored (None once deleted).

    Raises ``DependencyFailed`` when Batch fails, ``ConditionFailed`` on a lost race.
    """
    batch = _environments(services, compute)
    name = batch_name(services, compute)
    status = compute.status
    event: ComputeEvent | None = None
    reason: str | None = None
    if status == ComputeStatus.CREATING:
        event, reason = _advance_creation(batch, name, compute.machine)
    elif status in (ComputeStatus.STARTING, ComputeStatus.STOPPING, ComputeStatus.RUNNING):
        target = 0 if status == ComputeStatus.STOPPING else compute.vcpus
        event, reason = _advance_capacity(batch, name, target, status)
    elif status == ComputeStatus.DELETING:
        event = _advance_deletion(batch, name)
    if event is None:
        return compute
    step = apply_event(compute, event, now, reason)
    if not step.changed:
        return compute
    stored = store_step(services, step, now)
    logger.info("compute moved", compute=compute.name, event=event.value, status=_status(stored))
    if stored is not None and stored.status != status:
        return advance(services, stored, now)  # e.g. Stopping → Starting of a restart: scale up now
    return stored


def _advance_creation(
    batch: ComputeEnvironments, name: str, machine: MachineClass
) -> tuple[ComputeEvent | None, str | None]:
    environment = batch.describe_environment(name)
    if environment is None:
        batch.create_environment(name, machine)
        return None, None
    if environment.status == "INVALID":
        return ComputeEvent.BROKEN, environment.reason
    if environment.status != "VALID":
        return None, None
    queue = batch.describe_queue(name)
    if queue is None:
        batch.create_queue(name, name)
        return None, None
    if queue.status == "INVALID":
        return ComputeEvent.BROKEN, queue.reason
    return (ComputeEvent.READY, None) if queue.status == "VALID" else (None, None)


def _advance_capacity(
    batch: ComputeEnvironments, name: str, target: int, status: ComputeStatus
) -> tuple[ComputeEvent | None, str | None]:
    environment = batch.describe_environment(name)
    if environment is None or environment.status == "INVALID":
        gone = "the compute environment no longer exists"
        return ComputeEvent.BROKEN, environment.reason if environment is not None else gone
    if environment.status != "VALID":
        return None, None  # an update in progress
    if environment.min_vcpus != target or environment.max_vcpus != target:
        batch.set_capacity(name, target)
        return None, None
    up = status == ComputeStatus.STARTING and environment.desired_vcpus >= target
    if up or status == ComputeStatus.STOPPING:
        return (ComputeEvent.CAPACITY_UP if up else ComputeEvent.CAPACITY_DOWN), None
    return None, None


def _advance_deletion(batch: ComputeEnvironments, name: str) -> ComputeEvent | None:
    queue = batch.describe_queue(name)
    if queue is not None:
        if queue.status not in SETTLED:
            return None
        if queue.state == "ENABLED":
            batch.disable_queue(name)
        else:
            batch.delete_queue(name)
        return None
    environment = batch.describe_environment(name)
    if environment is not None:
        if environment.status not in SETTLED:
            return None
        if environment.state == "ENABLED":
            batch.disable_environment(name)
        else:
            batch.delete_environment(name)
        return None
    return ComputeEvent.GONE


# -- the meter -----------------------------------------------------------------------------------------
def meter_computes(
    services: Services, now: datetime, active: Iterable[tuple[str, str]] = ()
) -> ComputeReport:
    """One meter tick over every compute: record the activity of computes with jobs Starting or
    Running (``active``: (account id, compute name)), advance provisioning, then apply the balance
    rule and the hourly settlement to billed ones (Starting, Running), the daily schedules, and the
    idle stop to Running ones.

    One compute's failure is logged and skipped; the others go on.
    """
    if services.compute_store is None:
        return ComputeReport()
    store = services.compute_store
    for account_id, name in set(active):
        _guard(name, partial(store.touch_compute, account_id, name, now))
    seen = moved = skipped = 0
    try:
        every = list(store.list_all_computes())
    except DependencyFailed:
        # The jobs' part of the tick already ran; computes wait for the next tick.
        logger.exception("computes not metered this tick")
        return ComputeReport(skipped=1)
    for compute in every:
        seen += 1
        result = _guard(compute.name, partial(_meter_one, services, compute, now))
        if result is None:
            skipped += 1
        elif result:
            moved += 1
    if seen:
        logger.info("computes metered", seen=seen, moved=moved, skipped=skipped)
    return ComputeReport(seen=seen, moved=moved, skipped=skipped)


def _guard(name: str, action: Callable[[], object]) -> object | None:
    try:
        return action()
    except Exception:
        # Deliberately broad: one compute's failure never stops the tick for the others.
        logger.exception("compute skipped by the meter", compute=name)
        return None


def _meter_one(services: Services, compute: Compute, now: datetime) -> bool:
    """One compute at one tick; True when it moved."""
    fresh = _store(services).get_compute(compute.account_id, compute.name)
    if fresh is None:
        return False
    after = advance(services, fresh, now)
    if after is None:
        return True
    moved = after != fresh
    scheduled = None
    if after.schedules.daily and after.schedule_checked_at != now:
        # Recorded before acting: a boundary is acted on once, even if a user undoes it right after.
        scheduled = scheduled_request(after.schedules, after.schedule_checked_at, now)
        after = _store(services).save_compute(after, replace(after, schedule_checked_at=now))
    decided = _decide(services, after, now, scheduled)
    if decided is not None:
        request, reason = decided
        request_compute(services, after.account_id, after.name, request, now=now, reason=reason)
        return True
    if settlement_due(after, now):
        store_step(services, Step(after, after), now, hourly=True)
        moved = True
    return moved


def _decide(
    services: Services, compute: Compute, now: datetime, scheduled: ComputeRequest | None
) -> tuple[ComputeRequest, str] | None:
    """What the meter asks of a compute now, and why: the balance rule first, then the daily
    schedules (``scheduled``: the latest boundary since the last check), then the idle stop."""
    if compute.status in BILLED:
        account = services.store.get_account(compute.account_id)
        if account is not None and account.credit_balance - unsettled_cost(compute, now) <= 0:
            return ComputeRequest.STOP, OUT_OF_CREDITS_STOP
    if scheduled == ComputeRequest.START and compute.status == ComputeStatus.STOPPED:
        return scheduled, SCHEDULED_START
    if scheduled == ComputeRequest.STOP and compute.status in (ComputeStatus.RUNNING, ComputeStatus.STARTING):
        return scheduled, SCHEDULED_STOP
    if idle_expired(compute, now, services.idle_stop_minute):
        return ComputeRequest.STOP, IDLE_STOP.format(minutes=compute.schedules.idle_stop_minutes)
    return None


# -- jobs on a compute ---------------------------------------------------------------------------------
def compute_for_job(
    services: Services,
    account_id: str,
    name: str,
    requested_class: str | None,
    requested_zone: str,
) -> tuple[Compute, MachineClass, str]:
    """The compute a job is submitted to, the job's machine class (the compute's when the request
    named none) and the compute's job queue.

    Raises
    ------
    ValidationFailed
        ``field="compute"``: no such compute in the account, or it is not Running or Starting;
        ``field="machineClass"``/``"geoZone"``: the job asks for another class or zone than the compute's.
    """
    compute = _store(services).get_compute(account_id, name)
    if compute is None:
        raise ValidationFailed(f"No compute {name} in this account.", field="compute")
    if compute.status not in (ComputeStatus.RUNNING, ComputeStatus.STARTING):
        raise ValidationFailed(
            f"Compute {name} is {compute.status.value}; start it before submitting jobs to it.",
            field="compute",
        )
    machine = compute.machine if requested_class is None else machine_class(requested_class)
    if machine.name != compute.machine_class:
        raise ValidationFailed(
            f"Compute {name} is {compute.machine_class}; the job asks for {machine.name}.",
            field="machineClass",
        )
    if requested_zone != "Automatic" and resolve_geo_zone(requested_zone) != compute.geo_zone:
        raise ValidationFailed(
            f"Compute {name} is in {compute.geo_zone.value}; the job asks for {requested_zone}.",
            field="geoZone",
        )
    return compute, machine, batch_name(services, compute)


def note_job_submitted(services: Services, account_id: str, name: str, now: datetime) -> None:
    """Record that a job was submitted to the compute (its idle timer restarts)."""
    _store(services).touch_compute(account_id, name, now)
