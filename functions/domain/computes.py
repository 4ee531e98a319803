"""Dedicated compute: a named, long-lived slice of capacity an account creates, starts, stops,
restarts and deletes (Azure Machine Learning's *compute instance*, built on AWS Batch as a managed
compute environment with its own job queue whose ``minvCpus = maxvCpus`` = the compute's vCPUs while
it is started and 0 while it is stopped).

This module is the pure part: the compute's record, its lifecycle as a state machine, its charges,
its schedules and the quota it holds. It reads no clock (times are passed in) and calls nothing.

Lifecycle
---------
Requests (``ComputeRequest``) come from the API, events (``ComputeEvent``) from the meter's polls of
AWS Batch (``DescribeComputeEnvironments``/``DescribeJobQueues``: compute environment state changes
are asynchronous, ``CREATING`` → ``VALID``)::

    Creating --READY--> Stopped --start--> Starting --CAPACITY_UP--> Running
    Creating(start pending) --READY--> Starting
    Running --stop--> Stopping --CAPACITY_DOWN--> Stopped
    Running --restart--> Stopping(start pending) --CAPACITY_DOWN--> Starting
    any but Deleting --delete--> Deleting --GONE--> (removed)
    Creating/Starting/Running/Stopping --BROKEN--> Failed

Requests during a transient status (``TRANSIENT``: Creating, Starting, Stopping, Deleting) are
answered by what the user means (``tests/unit/test_domain_computes.py`` checks every cell):

============  ==========================  ==========================  ===================  ========
status        start                       stop                        restart              delete
============  ==========================  ==========================  ===================  ========
Creating      accepted: starts once ready no-op (cancels a pending    Conflict: start it   Deleting
              (billed from then)          start)                      instead
Starting      no-op                       Stopping                    Stopping, pending    Deleting
Stopping      accepted: starts again once no-op (cancels a pending    pending start        Deleting
              stopped                     start)
Deleting      Conflict                    Conflict                    Conflict             no-op
============  ==========================  ==========================  ===================  ========

(Azure ML's compute instance ``create`` leaves it running; here ``PUT`` creates it Stopped, and a
start sent at once, while it is still Creating, is kept and applied when it is ready.) A start of
a Starting or Running compute and a stop of a Stopping or Stopped one are no-ops (the compute is
returned unchanged); a request the status does not allow raises ``Conflict`` naming the status; an
event the status does not expect is ignored (the poll that sees it is stale). Leaving a
billed status (``BILLED``: Starting or Running) by a stop, restart or delete settles its time
(``Step.settle``); so does a failure of a Running compute (a failure while Starting is not charged:
the capacity never came).

Jobs on a compute
-----------------
A compute's jobs run only while it is billed. A stop, a restart or a delete of a Starting or
Running compute ends every job on it (``ends_jobs``; the jobs fail with ``jobs_end_reason``,
``Dedicated compute lab stopped``, charged 0 as every job on a compute is: the compute's time up to
the stop is billed), as Azure ML's compute instance stop ends what runs on it. The meter also ends
any job it finds Starting or Running on a compute that is not billed (a job submitted as the stop
raced it, a failed compute).

Charges
-------
From its start request (``Starting``) until it leaves ``Running``, a compute is charged per second
at its class's ``creditsPerHour`` × ``count``, whether jobs run on it or not; jobs on it are not
charged again. Billing begins at the start request, not when the meter first sees it Running,
because that is when the machines begin to cost: AWS bills an EC2 instance from its launch and
Azure ML a compute instance from its start, and on AWS the compute's job queue places jobs on each
instance as soon as it joins the compute environment, before the whole environment is up (a job on
a Starting compute is never free). The time it takes to scale down (``Stopping``) is not charged:
no job runs on it then. Its time is settled at each stop
and at least hourly by the meter: a settlement bills whole seconds (``floor`` for an hourly one, the
remainder carried to the next; ``ceil`` for the one that ends a run, so no started second is
free) at ``seconds × rate × count / 3600`` rounded half-up to 4 places. There is no 60-second
minimum (that rule is a job's: a compute's periods are contiguous slices of one run).

Quota
-----
A compute reserves ``count`` × its class's vCPUs (GPUs for a GPU class) of its account's quota of the
class's family in its zone, and their vCPUs of the total, from creation until it is deleted, Stopped
included (as Azure ML reserves a stopped compute instance's cores), so it can always start again; a
compute that fails gives them back then. It is created only when they fit in what the account's jobs
and other computes leave free (``functions.domain.quotas.check_reservation``), and jobs submitted to it
run on them without taking more.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal
from enum import StrEnum
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from functions.domain.credits import SECONDS_PER_HOUR, ZERO, quantize_credits
from functions.domain.errors import Conflict, ValidationFailed
from functions.domain.machine_classes import GeoZone, MachineClass, machine_class
from functions.domain.quotas import Demand, demand_of
from functions.domain.wall_clock import wall_instant

NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9-]{1,31}$"
MAX_COUNT = 64
MAX_IDLE_STOP_MINUTES = 7 * 24 * 60
MAX_DAILY_SCHEDULES = 8
SETTLE_EVERY = timedelta(hours=1)
# A schedule boundary is acted on only when the meter sees it within this long (a meter down for
# days does not replay a week of starts and stops).
SCHEDULE_LOOKBACK = timedelta(days=1)
OUT_OF_CREDITS_STOP = "Stopped: account out of credits"
IDLE_STOP = "Stopped: idle for {minutes} min"
SCHEDULED_STOP = "Stopped by its daily schedule"
SCHEDULED_START = "Started by its daily schedule"


class ComputeStatus(StrEnum):
    """A compute's status as the API shows it."""

    CREATING = "Creating"
    STARTING = "Starting"
    RUNNING = "Running"
    STOPPING = "Stopping"
    STOPPED = "Stopped"
    DELETING = "Deleting"
    FAILED = "Failed"


class ComputeRequest(StrEnum):
    """What a user (or the meter on a schedule, an idle timer or the balance rule) asks."""

    START = "start"
    STOP = "stop"
    RESTART = "restart"
    DELETE = "delete"


class ComputeEvent(StrEnum):
    """What the meter's poll of AWS Batch found.

    ``READY``: the compute environment is ``VALID`` and its job queue ``VALID``/``ENABLED``.
    ``CAPACITY_UP``: the environment finished its update to the compute's vCPUs (status ``VALID``,
    ``desiredvCpus`` ≥ ``minvCpus``). ``CAPACITY_DOWN``: it finished its update to 0 vCPUs.
    ``GONE``: the queue and the environment are deleted. ``BROKEN``: the environment is ``INVALID``.
    """

    READY = "ready"
    CAPACITY_UP = "capacity_up"
    CAPACITY_DOWN = "capacity_down"
    GONE = "gone"
    BROKEN = "broken"


# The statuses in which a compute is charged per second (and its jobs may run).
BILLED = frozenset({ComputeStatus.STARTING, ComputeStatus.RUNNING})


# The statuses a compute passes through on its own (the requests allowed in each: the module's table).
TRANSIENT = frozenset(
    {ComputeStatus.CREATING, ComputeStatus.STARTING, ComputeStatus.STOPPING, ComputeStatus.DELETING}
)


# Every edge the machine may take (the state machine test checks no other ever happens).
LEGAL_EDGES: frozenset[tuple[ComputeStatus, ComputeStatus]] = frozenset(
    {
        (ComputeStatus.CREATING, ComputeStatus.STOPPED),
        (ComputeStatus.CREATING, ComputeStatus.STARTING),
        (ComputeStatus.STOPPED, ComputeStatus.STARTING),
        (ComputeStatus.STARTING, ComputeStatus.RUNNING),
        (ComputeStatus.STARTING, ComputeStatus.STOPPING),
        (ComputeStatus.RUNNING, ComputeStatus.STOPPING),
        (ComputeStatus.STOPPING, ComputeStatus.STOPPED),
        (ComputeStatus.STOPPING, ComputeStatus.STARTING),
        *((s, ComputeStatus.DELETING) for s in ComputeStatus if s != ComputeStatus.DELETING),
        *(
            (s, ComputeStatus.FAILED)
            for s in (
                ComputeStatus.CREATING,
                ComputeStatus.STARTING,
                ComputeStatus.RUNNING,
                ComputeStatus.STOPPING,
            )
        ),
    }
)


@dataclass(frozen=True, slots=True)
class DailySchedule:
    """Start and/or stop the compute every day at a local time of ``time_zone`` (IANA name)."""

    start: time | None
    stop: time | None
    time_zone: str


@dataclass(frozen=True, slots=True)
class Schedules:
    """``idle_stop_minutes``: stop a Running compute no job has used for that many minutes (None:
    never); ``daily``: daily start/stop times."""

    idle_stop_minutes: int | None = None
    daily: tuple[DailySchedule, ...] = ()


@dataclass(frozen=True, slots=True)
class Compute:
    """A dedicated compute as the service keeps it.

    Attributes
    ----------
    account_id, name : str
        The owner and the compute's name (unique per account).
    machine_class : str
        Its machine class; ``count`` machines of it.
    geo_zone : GeoZone
        Where it runs.
    status, status_reason :
        ``ComputeStatus`` and a sentence for people (why it failed, what stopped it).
    created_at : datetime
        When it was asked for.
    version : int
        Bumped by every write; each write is conditional on the version it read.
    start_pending : bool
        A start waits: a Creating compute starts once it is ready, a Stopping one (a restart, or a
        start sent while it stopped) once it is stopped (stored as ``restartPending``).
    running_since : datetime | None
        When the current billed run began: its start request (set exactly while Starting or Running).
    settled_until : datetime | None
        The current run is billed up to here (set exactly while Starting or Running).
    last_activity_at : datetime | None
        Last time a job was submitted to it or seen Starting/Running on it (idle stops).
    credits_spent : Decimal
        Credits settled so far, all runs.
    running_seconds : int
        Seconds billed so far, all runs.
    schedule_checked_at : datetime | None
        Until when the daily schedules have been applied.
    quota_reserved : bool
        Whether it holds its quota reservation (``reservation_of``): from creation on, until it fails
        or is removed (a Deleting compute that had failed holds none, so its removal gives none back).
    """

    account_id: str
    name: str
    machine_class: str
    geo_zone: GeoZone
    count: int
    created_at: datetime
    status: ComputeStatus = ComputeStatus.CREATING
    status_reason: str | None = None
    schedules: Schedules = field(default_factory=Schedules)
    version: int = 0
    start_pending: bool = False
    running_since: datetime | None = None
    settled_until: datetime | None = None
    last_activity_at: datetime | None = None
    credits_spent: Decimal = ZERO
    running_seconds: int = 0
    schedule_checked_at: datetime | None = None
    quota_reserved: bool = True

    @property
    def machine(self) -> MachineClass:
        """Its machine class."""
        return machine_class(self.machine_class)

    @property
    def vcpus(self) -> int:
        """``count`` × the class's vCPUs: the compute environment's min = max vCPUs while started."""
        return self.count * self.machine.vcpus

    @property
    def credits_per_hour(self) -> Decimal:
        """What an hour Running costs: the class's rate × ``count``."""
        return self.machine.credits_per_hour * self.count

    def same_spec(self, machine: str, zone: GeoZone, count: int) -> bool:
        """Whether a ``PUT`` with this spec asks for this very compute (then it is idempotent)."""
        return (self.machine_class, self.geo_zone, self.count) == (machine, zone, count)


@dataclass(frozen=True, slots=True)
class Step:
    """One move of the machine: ``after`` is None when the compute is gone (deleted);
    ``settle`` is the time its billed time must be settled up to (it left Starting or Running:
    ``BILLED``), else None; ``changed`` is False for a no-op."""

    before: Compute
    after: Compute | None
    settle: datetime | None = None

    @property
    def changed(self) -> bool:
        """True when the step moved or changed anything."""
        return self.after != self.before


# -- validation ---------------------------------------------------------------------------------------
def check_name(name: str) -> str:
    """A compute's name: 2..32 ASCII letters, digits and hyphens, starting with a letter (it becomes
    part of AWS Batch resource names). Raises ``ValidationFailed`` (``field="name"``)."""
    if not re.fullmatch(NAME_PATTERN, name):
        raise ValidationFailed(
            f"Compute name {name!r} must be 2 to 32 letters, digits and hyphens, starting with a letter.",
            field="name",
        )
    return name


def check_count(count: int) -> int:
    """Machines in a compute: 1..``MAX_COUNT``. Raises ``ValidationFailed`` (``field="count"``)."""
    if not 1 <= count <= MAX_COUNT:
        raise ValidationFailed(f"count must be between 1 and {MAX_COUNT}, got {count}.", field="count")
    return count


def parse_clock_time(text: str, field_path: str) -> time:
    """``HH:MM`` (24-hour) as a time. Raises ``ValidationFailed`` naming ``field_path``."""
    match = re.fullmatch(r"([01][0-9]|2[0-3]):([0-5][0-9])", text)
    if not match:
        raise ValidationFailed(
            f"{field_path} must be a time HH:MM (00:00 to 23:59), got {text!r}.", field_path
        )
    return time(int(match.group(1)), int(match.group(2)))


def check_time_zone(name: str, field_path: str) -> str:
    """An IANA time zone name (``Europe/Berlin``, ``UTC``). Raises ``ValidationFailed``."""
    if name not in _time_zones():
        raise ValidationFailed(
            f"{field_path} must be an IANA time zone name such as Europe/Berlin or UTC, got {name!r}.",
            field_path,
        )
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValidationFailed(f"{field_path}: time zone {name!r} is not available.", field_path) from None
    return name


_ZONES: list[frozenset[str]] = []


def _time_zones() -> frozenset[str]:
    if not _ZONES:
        # The tz database's files that name no place: the host's own zone ("localtime", which differs by
        # machine), "Factory" (a placeholder whose abbreviation is "-00") and "posixrules".
        _ZONES.append((frozenset(available_timezones()) | {"UTC"}) - {"localtime", "Factory", "posixrules"})
    return _ZONES[0]


def check_schedules(
    idle_stop_minutes: int | None, daily: list[tuple[str | None, str | None, str]]
) -> Schedules:
    """Validated schedules from a request: ``idle_stop_minutes`` 1..``MAX_IDLE_STOP_MINUTES`` or None;
    ``daily`` as ``(start, stop, timeZone)`` with ``HH:MM`` times, at least one of them, at most
    ``MAX_DAILY_SCHEDULES`` entries.

    Raises ``ValidationFailed`` naming the field (``idleStopMinutes``, ``daily[0].start``, ...).
    """
    if idle_stop_minutes is not None and not 1 <= idle_stop_minutes <= MAX_IDLE_STOP_MINUTES:
        raise ValidationFailed(
            f"idleStopMinutes must be between 1 and {MAX_IDLE_STOP_MINUTES}, got {idle_stop_minutes}.",
            "idleStopMinutes",
        )
    if len(daily) > MAX_DAILY_SCHEDULES:
        raise ValidationFailed(f"daily takes at most {MAX_DAILY_SCHEDULES} entries.", "daily")
    parsed = []
    for i, (start, stop, zone) in enumerate(daily):
        if start is None and stop is None:
            raise ValidationFailed(f"daily[{i}] needs a start or a stop time.", f"daily[{i}]")
        parsed.append(
            DailySchedule(
                start=parse_clock_time(start, f"daily[{i}].start") if start is not None else None,
                stop=parse_clock_time(stop, f"daily[{i}].stop") if stop is not None else None,
                time_zone=check_time_zone(zone, f"daily[{i}].timeZone"),
            )
        )
    return Schedules(idle_stop_minutes=idle_stop_minutes, daily=tuple(parsed))


def new_compute(
    account_id: str, name: str, *, machine: str, zone: GeoZone, count: int, now: datetime
) -> Compute:
    """A compute being created (``Creating``). Raises ``ValidationFailed`` for a bad name, class or count."""
    return Compute(
        account_id=account_id,
        name=check_name(name),
        machine_class=machine_class(machine).name,
        geo_zone=zone,
        count=check_count(count),
        created_at=now,
    )


# -- the state machine ---------------------------------------------------------------------------------
def _refuse(compute: Compute, request: ComputeRequest, hint: str) -> Conflict:
    return Conflict(f"Compute {compute.name} is {compute.status.value}: cannot {request.value} it; {hint}.")


def _leave_running(compute: Compute, now: datetime) -> datetime | None:
    """The time to settle up to when a compute leaves a billed status at ``now`` (None if it was
    not billed)."""
    return now if compute.status in BILLED else None


def _billed_from(compute: Compute, now: datetime) -> Compute:
    """``compute`` Starting, billed from ``now`` (a start request, or a restart's capacity down)."""
    return replace(compute, status=ComputeStatus.STARTING, running_since=now, settled_until=now)


def _stopped_run(
    compute: Compute, *, status: ComputeStatus, status_reason: str | None, start_pending: bool | None = None
) -> Compute:
    """``compute`` in ``status`` with no run in progress (its time is settled by the step)."""
    pending = compute.start_pending if start_pending is None else start_pending
    return replace(
        compute,
        status=status,
        status_reason=status_reason,
        start_pending=pending,
        running_since=None,
        settled_until=None,
    )


def _delete(compute: Compute, now: datetime, reason: str | None) -> Step:
    if compute.status == ComputeStatus.DELETING:
        return Step(compute, compute)
    after = _stopped_run(compute, status=ComputeStatus.DELETING, status_reason=reason, start_pending=False)
    return Step(compute, after, _leave_running(compute, now))


def _start(compute: Compute, now: datetime, reason: str | None) -> Step:
    if compute.status in (ComputeStatus.STARTING, ComputeStatus.RUNNING):
        return Step(compute, compute)
    if compute.status in (ComputeStatus.CREATING, ComputeStatus.STOPPING):
        # Kept, and applied when it is ready (Creating) or stopped (Stopping): ``apply_event``.
        after = replace(compute, start_pending=True, status_reason=reason)
        return Step(compute, compute if compute.start_pending else after)
    if compute.status != ComputeStatus.STOPPED:
        raise _refuse(compute, ComputeRequest.START, _hint(compute.status))
    return Step(compute, replace(_billed_from(compute, now), status_reason=reason))


def _stop(compute: Compute, now: datetime, reason: str | None) -> Step:
    status = compute.status
    waiting = status in (ComputeStatus.CREATING, ComputeStatus.STOPPING)
    if status == ComputeStatus.STOPPED or (waiting and not compute.start_pending):
        return Step(compute, compute)
    if waiting:  # a stop cancels the start that waits (a restart's, or one sent while Creating)
        return Step(compute, replace(compute, start_pending=False, status_reason=reason))
    if status not in (ComputeStatus.STARTING, ComputeStatus.RUNNING):
        raise _refuse(compute, ComputeRequest.STOP, _hint(status))
    after = _stopped_run(compute, status=ComputeStatus.STOPPING, status_reason=reason)
    return Step(compute, after, _leave_running(compute, now))


def _restart(compute: Compute, now: datetime, reason: str | None) -> Step:
    status = compute.status
    if status == ComputeStatus.STOPPING:
        after = replace(compute, start_pending=True, status_reason=reason)
        return Step(compute, compute if compute.start_pending else after)
    if status not in (ComputeStatus.STARTING, ComputeStatus.RUNNING):
        waits = status in (ComputeStatus.STOPPED, ComputeStatus.CREATING)
        hint = "start it instead" if waits else _hint(status)
        raise _refuse(compute, ComputeRequest.RESTART, hint)
    after = _stopped_run(compute, status=ComputeStatus.STOPPING, status_reason=reason, start_pending=True)
    return Step(compute, after, _leave_running(compute, now))


_REQUESTS = {
    ComputeRequest.START: _start,
    ComputeRequest.STOP: _stop,
    ComputeRequest.RESTART: _restart,
    ComputeRequest.DELETE: _delete,
}


def apply_request(
    compute: Compute, request: ComputeRequest, now: datetime, reason: str | None = None
) -> Step:
    """The step ``request`` makes at ``now``.

    ``reason`` becomes the ``status_reason`` (the meter says why it stopped or started a compute).

    Raises
    ------
    Conflict
        The status does not allow the request (starting or stopping a compute that is Deleting or
        Failed; restarting one that is not Starting, Running or Stopping). A start while Creating or
        Stopping is kept (``start_pending``) and applied when it is ready or stopped.
    """
    return _REQUESTS[request](compute, now, reason)


def _hint(status: ComputeStatus) -> str:
    return {
        ComputeStatus.DELETING: "it is being deleted",
        ComputeStatus.FAILED: "delete it and create it again",
    }.get(status, "try again shortly")


_BREAKABLE = (ComputeStatus.CREATING, ComputeStatus.STARTING, ComputeStatus.RUNNING, ComputeStatus.STOPPING)


def apply_event(compute: Compute, event: ComputeEvent, now: datetime, reason: str | None = None) -> Step:
    """The step a poll's finding makes at ``now``; an event the status does not expect changes
    nothing. ``reason`` is AWS Batch's ``statusReason`` for ``BROKEN``."""
    status = compute.status
    after: Compute | None = compute
    settle = None
    if event == ComputeEvent.READY and status == ComputeStatus.CREATING:
        if compute.start_pending:  # started while it was created: billed from now, when it can run
            after = replace(_billed_from(compute, now), start_pending=False)
        else:
            after = replace(compute, status=ComputeStatus.STOPPED, status_reason=None)
    elif event == ComputeEvent.CAPACITY_UP and status == ComputeStatus.STARTING:
        # Billed since the start request already; the idle timer counts from here.
        after = replace(compute, status=ComputeStatus.RUNNING, last_activity_at=now)
    elif event == ComputeEvent.CAPACITY_DOWN and status == ComputeStatus.STOPPING:
        if compute.start_pending:
            after = replace(_billed_from(compute, now), start_pending=False)
        else:
            after = replace(compute, status=ComputeStatus.STOPPED, start_pending=False)
    elif event == ComputeEvent.GONE and status == ComputeStatus.DELETING:
        after = None
    elif event == ComputeEvent.BROKEN and status in _BREAKABLE:
        why = f"AWS Batch: {reason}" if reason else "AWS Batch reported the compute environment INVALID"
        failed = _stopped_run(compute, status=ComputeStatus.FAILED, status_reason=why, start_pending=False)
        after = replace(failed, quota_reserved=False)  # a Failed compute gives its quota back
        # A failure while Starting is not charged (the capacity never came); one while Running is.
        settle = now if status == ComputeStatus.RUNNING else None
    return Step(compute, after, settle)


# -- charges -------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Settlement:
    """One settlement of a compute's running time: ``seconds`` billed from ``start`` to
    ``until`` (``start + seconds``), costing ``cost`` credits before the balance's cut."""

    start: datetime
    until: datetime
    seconds: int
    cost: Decimal


def compute_cost(seconds: int, credits_per_hour: Decimal) -> Decimal:
    """``seconds × credits_per_hour / 3600`` rounded half-up to 4 places (credits)."""
    return quantize_credits(Decimal(seconds) * credits_per_hour / SECONDS_PER_HOUR)


def settlement(
    compute: Compute, settled_until: datetime, until: datetime, *, final: bool
) -> Settlement | None:
    """What to bill for a run from ``settled_until`` to ``until``: whole seconds, rounded down for an
    hourly settlement (the rest carries over) and up for the ``final`` one; None when there is no
    whole second to bill."""
    elapsed = max((until - settled_until).total_seconds(), 0.0)
    seconds = math.ceil(elapsed - 1e-9) if final else math.floor(elapsed + 1e-9)
    if seconds <= 0:
        return None
    return Settlement(
        start=settled_until,
        until=settled_until + timedelta(seconds=seconds),
        seconds=seconds,
        cost=compute_cost(seconds, compute.credits_per_hour),
    )


def settlement_due(compute: Compute, now: datetime) -> bool:
    """True when a billed compute's unsettled time reached ``SETTLE_EVERY`` (the meter settles it)."""
    return (
        compute.status in BILLED
        and compute.settled_until is not None
        and now - compute.settled_until >= SETTLE_EVERY
    )


def compute_entry_id(name: str, start: datetime) -> str:
    """The deterministic ledger id of a compute's settlement from ``start``
    (``compute#lab#2026-12-01T08:00:00.000000Z``): a replayed settlement cannot charge twice."""
    return f"compute#{name}#{start.astimezone(UTC).strftime('%Y-%m-%dT%H:%M:%S.%fZ')}"


def settlement_reason(compute: Compute, seconds: int) -> str:
    """``Dedicated compute lab (Basic1x8 x 1): 37 s at 60 credits/hour``."""
    rate = compute.credits_per_hour.normalize()
    return (
        f"Dedicated compute {compute.name} ({compute.machine_class} x {compute.count}): "
        f"{seconds} s at {rate:f} credits/hour"
    )


def ends_jobs(step: Step) -> bool:
    """Whether ``step`` ends the jobs on the compute: a stop, restart or delete of a billed compute
    (its capacity goes; what runs or waits on it is terminated, ``jobs_end_reason``)."""
    after = step.after
    return step.before.status in BILLED and (
        after is None or after.status in (ComputeStatus.STOPPING, ComputeStatus.DELETING)
    )


_ENDED_BY = {
    ComputeRequest.STOP: "stopped",
    ComputeRequest.RESTART: "restarted",
    ComputeRequest.DELETE: "deleted",
}


def jobs_end_reason(name: str, request: ComputeRequest, why: str | None = None) -> str:
    """Why a job on compute ``name`` ended when ``request`` took its capacity away:
    ``Dedicated compute lab stopped``, or with the meter's reason
    ``Dedicated compute lab stopped: idle for 5 min`` (from ``Stopped: idle for 5 min``)."""
    ended = f"Dedicated compute {name} {_ENDED_BY.get(request, 'stopped')}"
    if not why:
        return ended
    detail = why.removeprefix("Stopped: ")
    return f"{ended}: {detail[:1].lower()}{detail[1:]}"


def stray_job_reason(compute: Compute | None, name: str) -> str | None:
    """Why a job found Starting or Running on compute ``name`` (``compute`` as stored, None when
    gone) must end: its compute is not billed (Stopping, Stopped, Failed, Deleting or gone). None
    when the compute is billed (the job may run)."""
    if compute is not None and compute.status in BILLED:
        return None
    if compute is None or compute.status == ComputeStatus.DELETING:
        return f"Dedicated compute {name} deleted"
    if compute.status == ComputeStatus.FAILED:
        return f"Dedicated compute {name} failed"
    return f"Dedicated compute {name} stopped"


def job_on_compute_note(name: str) -> str:
    """The ledger note of a job that ran on a dedicated compute (charged 0: the compute pays)."""
    return f"Ran on dedicated compute {name}: its time is charged to the compute"


# -- schedules -----------------------------------------------------------------------------------------
def idle_expired(compute: Compute, now: datetime, minute: timedelta = timedelta(minutes=1)) -> bool:
    """True when a Running compute with an idle stop has had no job for ``idle_stop_minutes``
    minutes, each ``minute`` long (a real minute but on a local stack told otherwise, so its tests
    need not wait whole minutes)."""
    minutes = compute.schedules.idle_stop_minutes
    if compute.status != ComputeStatus.RUNNING or minutes is None or compute.running_since is None:
        return False
    last = max(compute.running_since, compute.last_activity_at or compute.running_since)
    return now - last >= minute * minutes


def scheduled_request(schedules: Schedules, since: datetime | None, now: datetime) -> ComputeRequest | None:
    """The request of the latest daily start or stop time in ``(since, now]`` (None: none fell there,
    or ``since`` is None: the schedules are new and nothing before them is replayed).

    Times are each schedule's local wall-clock time, as instants by ``wall_clock.wall_instant``: a
    time a daylight-saving change skips falls at the change (the next valid instant), a time it
    repeats fires once (its first occurrence). Boundaries are ordered by instant, then by their
    wall-clock time, then a stop after a start: a start and a stop never swap, and at one instant
    the later of the day wins (Europe/Berlin on 2026-03-29: a start at the skipped 02:00 and a stop
    at 03:00 are both at 01:00Z, and the compute stays stopped).
    """
    if since is None or now <= since:
        return None
    since = max(since, now - SCHEDULE_LOOKBACK)
    latest: tuple[datetime, datetime, int, ComputeRequest] | None = None
    for daily in schedules.daily:
        zone = ZoneInfo(daily.time_zone)
        first_day = since.astimezone(zone).date() - timedelta(days=1)
        last_day = now.astimezone(zone).date()
        day = first_day
        while day <= last_day:
            for at, request in ((daily.start, ComputeRequest.START), (daily.stop, ComputeRequest.STOP)):
                if at is None:
                    continue
                moment = wall_instant(day, at, zone)
                rank = (moment, datetime.combine(day, at), _REQUEST_RANK[request], request)
                if since < moment <= now and (latest is None or rank[:3] > latest[:3]):
                    latest = rank
            day += timedelta(days=1)
    return None if latest is None else latest[3]


# At one instant and wall-clock time, a stop is applied after a start (a compute is not left billed).
_REQUEST_RANK = {ComputeRequest.START: 0, ComputeRequest.STOP: 1}


# -- quota ---------------------------------------------------------------------------------------------
def reservation_of(compute: Compute) -> Demand:
    """The quota ``compute`` reserves from creation until deletion: ``count`` machines of its class,
    by the same rule as a job's (``functions.domain.quotas.demand_of`` with ``count`` as the size)."""
    return demand_of(compute.machine, compute.geo_zone, compute.count)


def holds_reservation(compute: Compute) -> bool:
    """Whether ``compute`` holds its reservation: from creation until it fails or is removed (Stopped
    included, so it can always start again; a Failed compute can only be deleted, so it gives its
    quota back when it fails instead of holding it until then)."""
    return compute.quota_reserved


def released_reservation(before: Compute, after: Compute | None) -> Demand | None:
    """The reservation a step from ``before`` to ``after`` (None: the compute is removed) gives back:
    a compute that held it and no longer does (deleted, or Failed), else None."""
    if not holds_reservation(before) or (after is not None and holds_reservation(after)):
        return None
    return reservation_of(before)


# -- AWS Batch names -----------------------------------------------------------------------------------
def resource_name(prefix: str, account_id: str, name: str) -> str:
    """The name of a compute's compute environment and job queue: ``<prefix>-cmp-<12 hex of the
    account>-<name>`` (≤ 128 letters, digits, hyphens and underscores, as AWS Batch names must be;
    the IAM policy allows exactly ``<prefix>-cmp-*``)."""
    digest = hashlib.sha256(account_id.encode()).hexdigest()[:12]
    return f"{prefix}-cmp-{digest}-{name}"
