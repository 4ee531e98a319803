"""Quotas: how much compute one account's jobs may hold at once, per machine family and geo zone.

The model is Azure Machine Learning's (one of the references this service follows): a dedicated-core
quota per VM family per region, plus a total per region (Azure ML docs, "Manage and increase quotas
for resources", "VM family vCPU quotas"). Here a family's quota counts vCPUs (GPUs for the GPU
family) in one geo zone, and the account's total counts vCPUs of every family and zone together.

What a job holds
----------------
A job holds its machine class's vCPUs (GPUs for a GPU class) from the moment it is *admitted* (about
to be sent to AWS Batch) until it ends: Starting, Running, and the short time it waits in AWS Batch's
own queue all count, because AWS Batch may start it at any moment then. A job over the limit is
*held* (``Queued``, ``statusReason`` ``Waiting for quota: ...``) and counts as *queued* instead.

What a dedicated compute reserves
---------------------------------
A dedicated compute (``functions.domain.computes``) reserves ``count`` x its class's units of its
family in its zone, and their vCPUs of the total, from its creation until it is deleted (Stopped
included, as Azure ML keeps a stopped compute instance's cores; a Failed one gives them back). What is
reserved is not free for jobs: a job is admitted only while ``in use + reserved + its units`` stays
within the limit, and a compute is created only while ``in use + reserved + its units`` does. Jobs
submitted to a compute run on its reserved capacity and hold nothing more.

The rule for an array job (``demand_of`` with ``array_size``): it holds ``arraySize`` x its class's
units, because AWS Batch runs an array's children concurrently as far as the compute environment's
capacity allows, so the service must assume all of them may run at once (it cannot hold back single
children of one AWS Batch array job once it is submitted). That is what is *queued* for an array: its
children not yet in a span. It is admitted **span by span** (``span_size_for``): each span takes as
many children as fit in what is free now (at most the span size, at least one), its units go from
queued to in use when the span is admitted, and each child gives its own units back when it ends, so
the next span goes as children end. Only a child that alone exceeds its family's limit is refused.

Everything here is pure: the store keeps the counters with conditional writes
(``functions.adapters.dynamodb.quotas``), the logic (``functions.logic.quotas``) decides with this.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from functions.domain.errors import QuotaExceeded, ValidationFailed
from functions.domain.machine_classes import MACHINE_CLASSES, GeoZone, MachineClass


class Family(StrEnum):
    """A machine family: the machine classes whose names start with it (``Memory16x128``)."""

    BASIC = "Basic"
    MEMORY = "Memory"
    COMPUTE = "Compute"
    GPU = "GPU"


class Unit(StrEnum):
    """What a family's quota counts."""

    VCPU = "vCPU"
    GPU = "GPU"


# Default limits per family and geo zone (units of ``unit_of``), and the per-account total (vCPUs of
# every family and zone). Each family's default admits one job of its largest class (Memory192x1536
# and Compute192x384: 192 vCPUs; GPU4xL4: 4 GPUs) and a few of its smaller ones; an operator raises an
# account's limits with ``PUT /admin/accounts/{accountId}/quotas``.
DEFAULT_FAMILY_LIMITS: Mapping[Family, int] = {
    Family.BASIC: 64,
    Family.MEMORY: 384,
    Family.COMPUTE: 384,
    Family.GPU: 8,
}
DEFAULT_TOTAL_LIMIT = 768
# The largest limit an operator may set (units): far above any AWS Batch compute environment.
MAX_LIMIT = 1_000_000


def family_of(machine: MachineClass) -> Family:
    """The family of a machine class (its name's prefix: ``Basic1x8`` → ``Basic``)."""
    for family in Family:
        if machine.name.startswith(family.value):
            return family
    raise ValueError(f"machine class {machine.name} belongs to no family")


def unit_of(family: Family) -> Unit:
    """GPUs for the GPU family, vCPUs for the others."""
    return Unit.GPU if family == Family.GPU else Unit.VCPU


@dataclass(frozen=True, slots=True)
class QuotaKey:
    """One family in one geo zone."""

    family: Family
    zone: GeoZone

    @property
    def name(self) -> str:
        """``Basic#UnitedStates``: how the store names it."""
        return f"{self.family.value}#{self.zone.value}"

    @staticmethod
    def parse(name: str) -> QuotaKey:
        """The key ``name`` (``QuotaKey.name``) names. Raises ``ValueError`` for anything else."""
        family, _, zone = name.partition("#")
        return QuotaKey(Family(family), GeoZone(zone))


ALL_KEYS: tuple[QuotaKey, ...] = tuple(QuotaKey(f, z) for z in GeoZone for f in Family)


@dataclass(frozen=True, slots=True)
class Demand:
    """What one job holds while admitted: ``units`` of its family's quota in its zone, and ``vcpus``
    of the account's total."""

    key: QuotaKey
    units: int
    vcpus: int


def demand_of(machine: MachineClass, zone: GeoZone, array_size: int | None = None) -> Demand:
    """What a job of ``machine`` in ``zone`` holds (an array: ``array_size`` times one child's)."""
    family = family_of(machine)
    count = array_size or 1
    per_job = machine.gpus if unit_of(family) == Unit.GPU else machine.vcpus
    return Demand(QuotaKey(family, zone), per_job * count, machine.vcpus * count)


@dataclass(frozen=True, slots=True)
class QuotaLimits:
    """An account's limits: its overrides (set by an operator) over the defaults.

    ``overrides`` maps a ``QuotaKey`` to its limit; ``total`` overrides ``DEFAULT_TOTAL_LIMIT`` when set.
    ``version`` counts the operators' changes (0: none stored): each change is written only over the
    version it read, so two operators at once never both win, nor log a ``before`` that was not.
    """

    overrides: Mapping[QuotaKey, int] = field(default_factory=dict)
    total: int | None = None
    version: int = 0

    def limit(self, key: QuotaKey) -> int:
        """The limit of ``key`` (units)."""
        return self.overrides.get(key, DEFAULT_FAMILY_LIMITS[key.family])

    @property
    def total_limit(self) -> int:
        """The account's total (vCPUs)."""
        return DEFAULT_TOTAL_LIMIT if self.total is None else self.total

    def with_changes(
        self, changes: Mapping[QuotaKey, int], total: int | None, set_total: bool
    ) -> QuotaLimits:
        """These limits with ``changes`` replacing theirs (others keep theirs) and, with ``set_total``,
        the total set to ``total`` (None: back to the default): the next version."""
        return QuotaLimits(
            {**self.overrides, **changes}, total if set_total else self.total, version=self.version + 1
        )

    def same_as(self, other: QuotaLimits) -> bool:
        """True when both store the same overrides and total (whatever their versions)."""
        return dict(self.overrides) == dict(other.overrides) and self.total == other.total

    def view(self) -> dict[str, Any]:
        """The audit log's ``before``/``after`` of an account's limits, in the spelling of
        ``PUT /admin/accounts/{accountId}/quotas``'s body: every family in every zone and the total,
        each as in force (an override, else the default)::

            {"quotas": [{"family": "Basic", "geoZone": "UnitedStates", "limit": 64}, ...], "total": 768}
        """
        return {
            "quotas": [
                {"family": key.family.value, "geoZone": key.zone.value, "limit": self.limit(key)}
                for key in ALL_KEYS
            ],
            "total": self.total_limit,
        }


def check_limit(value: int, field_path: str) -> int:
    """A limit an operator sets: a whole number 0..``MAX_LIMIT``. Raises ``ValidationFailed``."""
    if not 0 <= value <= MAX_LIMIT:
        raise ValidationFailed(f"{field_path} must be between 0 and {MAX_LIMIT}.", field=field_path)
    return value


def _exceeded(
    request: str, needed: int, unit: str, *, quota: str, limit: int, advice: str, taken: str = ""
) -> QuotaExceeded:
    """The ``QuotaExceeded`` of a request: ``<request> needs <n> <unit>s but the account's <quota> is
    <limit> <unit>s[<taken>]; <advice>`` (``field`` ``machineClass``: the class decides the family)."""
    return QuotaExceeded(
        f"{request} needs {needed} {unit}s but the account's {quota} is {limit} {unit}s{taken}; {advice}.",
        field="machineClass",
    )


ASK_OPERATOR = "ask an operator for a higher quota"


def check_fits_alone(demand: Demand, limits: QuotaLimits, machine_class: str) -> None:
    """Refuse a job (or a compute: ``machine_class`` then reads ``Basic2x8 x 3``) that could never be
    admitted: it alone holds more than its family's limit or the account's total.

    Raises
    ------
    QuotaExceeded
        Naming the family, zone, limit and request (``field`` ``machineClass``).
    """
    key = demand.key
    limit = limits.limit(key)
    unit = unit_of(key.family).value
    if demand.units > limit:
        quota = f"{key.family.value} quota in {key.zone.value}"
        raise _exceeded(machine_class, demand.units, unit, quota=quota, limit=limit, advice=ASK_OPERATOR)
    if demand.vcpus > limits.total_limit:
        raise _exceeded(
            machine_class,
            demand.vcpus,
            "vCPU",
            quota="total quota",
            limit=limits.total_limit,
            advice=ASK_OPERATOR,
        )


@dataclass(frozen=True, slots=True)
class Usage:
    """What an account holds now: per key, units in use by its admitted jobs, units queued (held jobs)
    and units reserved by its dedicated computes; in all, the same in vCPUs.

    ``in_use`` and ``reserved`` never overlap: a key's committed units (what no new job or compute may
    take) are ``in_use + reserved``.
    """

    in_use: Mapping[QuotaKey, int] = field(default_factory=dict)
    queued: Mapping[QuotaKey, int] = field(default_factory=dict)
    total_in_use: int = 0
    total_queued: int = 0
    reserved: Mapping[QuotaKey, int] = field(default_factory=dict)
    total_reserved: int = 0

    def used(self, key: QuotaKey) -> int:
        """Units of ``key`` in use by admitted jobs."""
        return self.in_use.get(key, 0)

    def waiting(self, key: QuotaKey) -> int:
        """Units of ``key`` queued."""
        return self.queued.get(key, 0)

    def reserved_of(self, key: QuotaKey) -> int:
        """Units of ``key`` reserved by dedicated computes."""
        return self.reserved.get(key, 0)

    def committed(self, key: QuotaKey) -> int:
        """Units of ``key`` taken: in use by jobs plus reserved by computes."""
        return self.used(key) + self.reserved_of(key)

    @property
    def total_committed(self) -> int:
        """vCPUs of the total taken: in use by jobs plus reserved by computes."""
        return self.total_in_use + self.total_reserved


def family_fits(demand: Demand, usage: Usage, limits: QuotaLimits) -> bool:
    """True when ``demand`` fits in what its family and zone have free (limit - in use - reserved)."""
    return usage.committed(demand.key) + demand.units <= limits.limit(demand.key)


def total_fits(demand: Demand, usage: Usage, limits: QuotaLimits) -> bool:
    """True when ``demand``'s vCPUs fit in what the account's total has free."""
    return usage.total_committed + demand.vcpus <= limits.total_limit


def fits(demand: Demand, usage: Usage, limits: QuotaLimits) -> bool:
    """True when admitting ``demand`` keeps its family and the total within their limits, counting
    what jobs hold and what dedicated computes reserve."""
    return family_fits(demand, usage, limits) and total_fits(demand, usage, limits)


def _taken(committed: int, reserved: int, limit: int) -> str:
    """``64 of 64 in use`` or ``64 of 64 in use, 16 of them reserved by dedicated compute``."""
    text = f"{committed} of {limit} in use"
    return f"{text}, {reserved} of them reserved by dedicated compute" if reserved else text


def waiting_reason(demand: Demand, usage: Usage, limits: QuotaLimits) -> str:
    """The held job's ``statusReason``: ``Waiting for quota: Memory vCPUs in EuropeanUnion (64 of 64
    in use)``, or ``Waiting for quota: total vCPUs (768 of 768 in use)`` when the total alone is what
    blocks it. "In use" counts what dedicated computes reserve, said when there is some:
    ``(64 of 64 in use, 16 of them reserved by dedicated compute)``."""
    key = demand.key
    # The family's numbers unless the total alone blocks it (a job queued behind older ones of its
    # family and zone waits for the family's quota too).
    if not family_fits(demand, usage, limits) or total_fits(demand, usage, limits):
        unit = unit_of(key.family).value
        taken = _taken(usage.committed(key), usage.reserved_of(key), limits.limit(key))
        return f"Waiting for quota: {key.family.value} {unit}s in {key.zone.value} ({taken})"
    taken = _taken(usage.total_committed, usage.total_reserved, limits.total_limit)
    return f"Waiting for quota: total vCPUs ({taken})"


def check_reservation(demand: Demand, usage: Usage, limits: QuotaLimits, request: str) -> None:
    """Refuse a dedicated compute (``request``: ``Basic2x8 x 3``) whose reservation does not fit in
    what its family and zone, or the account's total, have free now (``in use + reserved + its units
    <= limit``), or that alone exceeds a limit (``check_fits_alone``).

    Raises
    ------
    QuotaExceeded
        Naming the family (or the total), zone, limit, what is taken and the request (``field``
        ``machineClass``), e.g. ``Basic2x8 x 3 needs 6 vCPUs but the account's Basic quota in
        UnitedStates is 64 vCPUs, 60 of them in use (16 reserved by dedicated compute); ...``.
    """
    check_fits_alone(demand, limits, request)
    advice = "wait for jobs to end, delete a compute or ask an operator for a higher quota"
    key = demand.key
    if not family_fits(demand, usage, limits):
        unit = unit_of(key.family).value
        quota = f"{key.family.value} quota in {key.zone.value}"
        taken = _taken_of_limit(usage.committed(key), usage.reserved_of(key))
        raise _exceeded(
            request, demand.units, unit, quota=quota, limit=limits.limit(key), taken=taken, advice=advice
        )
    if not total_fits(demand, usage, limits):
        taken = _taken_of_limit(usage.total_committed, usage.total_reserved)
        raise _exceeded(
            request,
            demand.vcpus,
            "vCPU",
            quota="total quota",
            limit=limits.total_limit,
            taken=taken,
            advice=advice,
        )


def _taken_of_limit(committed: int, reserved: int) -> str:
    """``, 60 of them in use (16 reserved by dedicated compute)``."""
    return f", {committed} of them in use ({reserved} reserved by dedicated compute)"


def smallest_demand(key: QuotaKey) -> Demand:
    """A lower bound of what any job of ``key`` holds: the fewest units and the fewest vCPUs of any
    class of its family (each minimum on its own). When even this does not fit, no held job of
    ``key`` does (``fits`` only gets harder as a demand grows)."""
    family = [mc for mc in MACHINE_CLASSES.values() if family_of(mc) == key.family]
    units = min(mc.gpus if unit_of(key.family) == Unit.GPU else mc.vcpus for mc in family)
    return Demand(key, units, min(mc.vcpus for mc in family))


@dataclass(frozen=True, slots=True)
class HeldJob:
    """A job waiting for quota: its id (ids sort by submission time), what it will hold, and the
    ``statusReason`` it was last given (None: none yet), so a reason is only written when it changes.

    An array's parent has ``child``: one child's demand; ``demand`` is then what its children not yet
    in a span hold together (``children`` of them), and it is admitted a span at a time
    (``AdmissionPlan.admit_span``).
    """

    job_id: str
    demand: Demand
    reason: str | None = None
    child: Demand | None = None

    @property
    def next_demand(self) -> Demand:
        """What must fit for the job (an array: its next child) to go: the demand its reason is about."""
        return self.child or self.demand

    @property
    def children(self) -> int:
        """Children still held (an array's), 1 for a single job."""
        return self.demand.vcpus // self.child.vcpus if self.child is not None else 1


def span_size_for(child: Demand, remaining: int, usage: Usage, limits: QuotaLimits, span_size: int) -> int:
    """How many children an array's next span takes now: as many of ``child`` as fit together in what
    its family and zone and the account's total have free (``room // child units`` for each), at most
    ``span_size`` (``REMOTE_BATCH_ARRAY_SPAN_SIZE``) and ``remaining``; 0 when not even one fits (the
    array waits). ``child``'s units and vCPUs are at least 1 (every class has a vCPU; a GPU class a GPU).
    """
    family_room = limits.limit(child.key) - usage.committed(child.key)
    total_room = limits.total_limit - usage.total_committed
    fitting = min(family_room // child.units, total_room // child.vcpus)
    return max(0, min(fitting, span_size, remaining))


def admission_order(held: Iterable[HeldJob]) -> list[HeldJob]:
    """The order to try admitting an account's held jobs: oldest first (by id: ``job-<ULID>`` sorts by
    submission time). Each (family, zone) is a queue of its own, so a job blocked on one family never
    holds back a job of another (``admit_waiting`` stops a key at its first job that does not fit)."""
    return sorted(held, key=lambda h: h.job_id)


class AdmissionPlan:
    """``plan_admissions`` one job at a time, for an admitter that reads the held jobs lazily (each
    family and zone's oldest first, merged by id across keys: ``functions.logic.quotas.admit_waiting``).

    Offered the held jobs in ``admission_order``, ``admit`` says yes exactly to the jobs
    ``plan_admissions`` returns: each key stops at its first job that does not fit (no overtaking
    within a family and zone), and the total is shared by every key in that order. ``usage`` is the
    usage read plus what was admitted so far.
    """

    def __init__(self, usage: Usage, limits: QuotaLimits) -> None:
        self._usage = usage
        self._limits = limits
        self._blocked: set[QuotaKey] = set()

    @property
    def usage(self) -> Usage:
        """The usage read, with the units of every job admitted by this plan in use (not queued)."""
        return self._usage

    def is_blocked(self, key: QuotaKey) -> bool:
        """True once a job of ``key`` did not fit: no later job of ``key`` is admitted by this plan."""
        return key in self._blocked

    def admit(self, job: HeldJob) -> bool:
        """Whether ``job`` (the next in admission order) goes now; counts it in ``usage`` if so, and
        blocks its key if it does not fit."""
        key = job.demand.key
        if key in self._blocked:
            return False
        if not fits(job.demand, self._usage, self._limits):
            self._blocked.add(key)
            return False
        self._take(job.demand)
        return True

    def admit_span(self, job: HeldJob, span_size: int) -> int:
        """How many children of the held array ``job`` (the next in admission order) go now as one span
        (``span_size_for``, at most ``span_size``); counts them in ``usage``. 0 blocks its key (not even
        one child fits), as ``admit`` does for a job that does not fit. The array stays first in its
        key while children remain: offered again, it gets the next span or blocks the key."""
        child = job.child
        if child is None:
            raise ValueError(f"job {job.job_id} is no array")
        key = child.key
        if key in self._blocked:
            return 0
        count = span_size_for(child, job.children, self._usage, self._limits, span_size)
        if count == 0:
            self._blocked.add(key)
            return 0
        self._take(Demand(key, child.units * count, child.vcpus * count))
        return count

    def _take(self, demand: Demand) -> None:
        """Count ``demand`` in use (and no longer queued)."""
        key, usage = demand.key, self._usage
        # ``replace`` keeps what dedicated computes reserve.
        self._usage = replace(
            usage,
            in_use={**usage.in_use, key: usage.used(key) + demand.units},
            queued={**usage.queued, key: usage.waiting(key) - demand.units},
            total_in_use=usage.total_in_use + demand.vcpus,
            total_queued=usage.total_queued - demand.vcpus,
        )

    def admissible(self, key: QuotaKey, cap: int) -> int:
        """At most how many more jobs of ``key`` this plan could admit (0..``cap``): how many of its
        family's smallest jobs (``smallest_demand``) fit together now. 0 when ``key`` is blocked or
        not even one fits, so its held jobs need not be read."""
        if key in self._blocked:
            return 0
        one = smallest_demand(key)
        low, high = 0, cap  # the largest n in 0..cap whose n smallest jobs fit (fits is monotone in n)
        while low < high:
            n = (low + high + 1) // 2
            if fits(Demand(key, one.units * n, one.vcpus * n), self._usage, self._limits):
                low = n
            else:
                high = n - 1
        return low


def plan_admissions(held: Iterable[HeldJob], usage: Usage, limits: QuotaLimits) -> list[HeldJob]:
    """The held jobs that may be admitted now, in admission order, as the pure rule says: each key's
    jobs oldest first, stopping that key at its first job that does not fit (no overtaking within a
    family and zone); the total is shared by every key.

    The store applies each admission with a conditional write, so this is what a single admitter would
    do; concurrent admitters each re-check under the store's conditions.
    """
    plan = AdmissionPlan(usage, limits)
    return [job for job in admission_order(held) if plan.admit(job)]


@dataclass(frozen=True, slots=True)
class QuotaLine:
    """One line of ``GET /account/quotas``."""

    key: QuotaKey
    unit: Unit
    limit: int
    in_use: int
    queued: int
    reserved: int = 0


def quota_lines(usage: Usage, limits: QuotaLimits) -> list[QuotaLine]:
    """Every family in every zone with its limit, units in use by jobs, units queued and units
    reserved by dedicated computes."""
    return [
        QuotaLine(
            key,
            unit_of(key.family),
            limits.limit(key),
            usage.used(key),
            usage.waiting(key),
            usage.reserved_of(key),
        )
        for key in ALL_KEYS
    ]
