"""Quotas for their owner and operators: check a submit, hold a job, admit waiting jobs, report usage.

A submitted job that fits while nothing of its family and zone waits is written admitted, its units
in use, by one conditional transaction (``admit_at_submit``). Any other is written *held* (counted as
queued), then the account's held jobs are admitted oldest first within its limits
(``admit_waiting``); every job that ends gives its units back in the transaction that settles it and
admits the account's next held jobs. Because both sides write before they look (a submit holds then
admits; an ending job releases then admits, or its release proves nothing was queued) and every
admission is a conditional write, no interleaving admits past a limit, and no job stays held while
the capacity it waits for is free: whichever writer comes second sees the other's write.

Fairness across accounts: limits are per account, so one account's burst never takes another's
quota; the dispatcher's queue holds at most an account's admitted jobs, never its held ones, so an
account's share of the dispatcher is bounded by its own quota.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from aws_lambda_powertools import Logger

from functions.domain.arrays import queued_spans, span_ids
from functions.domain.errors import (
    ConditionFailed,
    Conflict,
    DependencyFailed,
    NotFound,
    QuotaExceeded,
    ValidationFailed,
)
from functions.domain.fleet import AuditAction, AuditEntry, account_target
from functions.domain.jobs import OUT_OF_CREDITS, Account, DispatchState, Job, JobType
from functions.domain.machine_classes import GeoZone, MachineClass, machine_class
from functions.domain.quotas import (
    AdmissionPlan,
    Demand,
    HeldJob,
    QuotaKey,
    QuotaLimits,
    QuotaLine,
    Usage,
    check_fits_alone,
    check_limit,
    demand_of,
    fits,
    quota_lines,
    waiting_reason,
)
from functions.logic.array_admission import SpanAdmission, admit_spans
from functions.logic.audit import audit_entry_id
from functions.logic.dispatch_requests import enqueue, request_admission
from functions.logic.endings import end_undispatched, withdraw_unsent

if TYPE_CHECKING:
    from functions.ports import Services

logger = Logger(child=True)

# Re-reads after an admission lost a race before the pass gives up (the next release or submit of the
# account, or the meter's backstop, admits what is left).
MAX_ADMISSION_PASSES = 20
# Held jobs of one family and zone read at once by an admission (one Query page; fewer when fewer
# could go): room for more than this many admits them a page at a time.
HELD_READ_CAP = 100


def check_submit(
    services: Services,
    account_id: str,
    machine: MachineClass,
    zone: GeoZone,
    array_size: int | None = None,
    *,
    limits: QuotaLimits | None = None,
) -> tuple[Demand, QuotaLimits]:
    """What a new job of ``machine`` in ``zone`` would hold, after checking it could ever be admitted,
    and the account's limits (``limits`` when the caller read them already, else read here).

    Raises
    ------
    QuotaExceeded
        The job alone needs more than the account's limit for its family and zone, or its total.
    """
    demand = demand_of(machine, zone, array_size)
    if limits is None:
        limits = services.store.get_quota_limits(account_id)
    check_fits_alone(demand, limits, machine.name)
    return demand, limits


def admit_at_submit(services: Services, job: Job, limits: QuotaLimits) -> Job | None:
    """Write a new job admitted at once, with its units in use, when nothing of its family and zone
    waits and it fits the account's limits (one conditional transaction, no read of the counters
    first: its conditions are the rule ``hold`` then ``admit_new`` apply). The job as written, or
    None, with nothing written, when it must wait: the caller then ``hold``s it.

    Raises ``ConditionFailed`` (the id exists) or ``DependencyFailed``.
    """
    if services.store.create_admitted_job(job, limits):
        return replace(job, dispatch_state=DispatchState.ADMITTED, status_reason=None)
    return None


def hold(services: Services, job: Job, demand: Demand, limits: QuotaLimits) -> tuple[Job, bool]:
    """Write a new job held for quota (counted as queued). Its ``statusReason`` says what it waits for
    when the account's usage (or older held jobs of its family and zone) already stands in its way.

    Returns
    -------
    tuple[Job, bool]
        The job as written, and whether it may be admitted on its own at once (nothing of its family
        and zone waited and it fitted when read): the caller tries ``admit_job`` for it alone, else
        ``admit_waiting``, which also catches a release that happened between the read and the write.

    Raises ``ConditionFailed`` (the id exists) or ``DependencyFailed``.
    """
    usage = services.store.get_quota_usage(job.account_id)
    waits = usage.waiting(demand.key) > 0 or not fits(demand, usage, limits)
    held = replace(
        job,
        dispatch_state=DispatchState.HELD,
        status_reason=waiting_reason(demand, usage, limits) if waits else None,
    )
    services.store.hold_job(held)
    return held, not waits


def release_into_hold(services: Services, job: Job) -> Job | None:
    """Release a job that waited for its prerequisites (``functions.logic.waits``) into the admission,
    as a submit of it now would go: held for quota (counted as queued, with ``statusReason`` when the
    account's usage or older held jobs stand in its way, as ``hold`` gives it) and the account's
    admission asked for; on a dedicated compute, admitted at once and handed to the dispatcher (an
    array: all its spans). ``job`` is the job as it waited, with what its prerequisites gave it.

    Returns the job as released, or None when it no longer waited (another writer released or ended
    it first: nothing written).

    Raises ``DependencyFailed`` (DynamoDB or the dispatch queue failed; a release written stands and
    the meter's backstop admits or enqueues it).
    """
    store = services.store
    if job.compute is not None:
        released = replace(job, dispatch_state=DispatchState.ADMITTED, status_reason=None, waiting_for=())
        if job.type == JobType.ARRAY:
            spans = queued_spans(released, services.array_span_size)
            released = replace(released, array_admitted=job.array_children, array_queue=spans)
        if not store.release_waiting_job(released):
            return None
        enqueue(services, span_ids(released) if job.type == JobType.ARRAY else [job.job_id])
        return released
    # One job's demand (an array's: one child's, as its submit checks and holds it).
    demand = demand_of(machine_class(job.machine_class), job.geo_zone)
    limits = store.get_quota_limits(job.account_id)
    usage = store.get_quota_usage(job.account_id)
    waits = usage.waiting(demand.key) > 0 or not fits(demand, usage, limits)
    released = replace(
        job,
        dispatch_state=DispatchState.HELD,
        status_reason=waiting_reason(demand, usage, limits) if waits else None,
        waiting_for=(),
    )
    if not store.release_waiting_job(released):
        return None
    request_admission(services, job.account_id)
    return released


def room_after_hold(services: Services, account_id: str, demand: Demand, limits: QuotaLimits) -> bool:
    """Whether, read after a job was held, its family and zone and the account's total each have a
    unit free: when either has none, no held job of that family can be admitted now, and the release
    that makes room admits it (``dispatch_requests.admit_after_end`` lists the held jobs after its release,
    and this read follows the hold, so one of the two sees the other). The submit then skips the scan
    of every held job: a burst past the quota costs each submit one read, not a read of all held jobs."""
    usage = services.store.get_quota_usage(account_id)
    key = demand.key
    return usage.committed(key) < limits.limit(key) and usage.total_committed < limits.total_limit


def admit_new(services: Services, job: Job, demand: Demand, limits: QuotaLimits) -> Job | None:
    """Admit a job ``hold`` said may go at once (one conditional write); the job admitted, or None
    when the write lost (``admit_waiting`` then decides)."""
    if services.store.admit_job(job.account_id, HeldJob(job.job_id, demand), limits):
        return replace(job, dispatch_state=DispatchState.ADMITTED, status_reason=None)
    return None


def admit_waiting(services: Services, account_id: str, limits: QuotaLimits | None = None) -> list[str]:
    """Admit the account's held jobs that fit now, oldest first per family and zone.

    The usage is read first: only a family and zone with units queued is looked at, and only one with
    room for at least its family's smallest job (``AdmissionPlan.admissible``) has its held jobs read:
    its oldest, a page sized to what could still go (``HELD_READ_CAP`` at most; another page only when
    every job of the last one went). The keys' pages are merged oldest first, so the total limit is
    shared across keys in submission order, exactly as ``domain.quotas.plan_admissions`` rules, and a
    key stops at its first job that does not fit (no overtaking). A family with 10,000 held jobs costs
    a pass one page, and never holds back another family. The limits are read only when a job waits.

    The oldest job left in a key that stops gets ``statusReason`` with the current numbers, written
    only when it changed (the held record carries the last reason); for a key with no room that is
    one Query of one item. An admission that loses a race (another writer admitted or ended the job,
    or took the room) re-reads and goes on.

    Returns
    -------
    list[str]
        The ids admitted by this call, in admission order (the caller hands them to the dispatcher): a
        job's id, or for a span of an array ``<parent>#<offset>`` (``array_admission.admit_spans``:
        an array is admitted a span at a time, each sized to the room left).
    """
    store = services.store
    admitted: list[str] = []
    for _ in range(MAX_ADMISSION_PASSES):
        usage = store.get_quota_usage(account_id)
        waiting = sorted((key for key, units in usage.queued.items() if units > 0), key=lambda k: k.name)
        if not waiting:
            break
        if not admitted:
            # The balance (and the limits, when not given) in one read: held jobs of an account out of
            # credits end instead of going to AWS Batch.
            if limits is None:
                account, read_limits = store.get_account_and_quota_limits(account_id)
                limits = read_limits or store.get_quota_limits(account_id)
            else:
                account = store.get_account(account_id)
            if _end_held_out_of_credits(services, account_id, waiting, account):
                break
        limits = limits or store.get_quota_limits(account_id)
        plan = AdmissionPlan(usage, limits)
        raced = _admission_pass(services, account_id, plan, limits=limits, waiting=waiting, admitted=admitted)
        if not raced:
            break
    if admitted:
        logger.info("jobs admitted", account_id=account_id, count=len(admitted))
    return admitted


def admit_and_enqueue(services: Services, account_id: str, limits: QuotaLimits | None = None) -> list[str]:
    """Admit what the account's quota lets go now (``admit_waiting``; ``limits`` when read already) and
    hand it to the dispatcher (``dispatch_requests.enqueue``): the dispatcher's answer to an admission
    request, and what an operator's quota change and the meter's backstop run. Returns the ids admitted.

    Raises ``DependencyFailed`` (DynamoDB or the dispatch queue failed: what was admitted stays
    admitted, and the meter's backstop enqueues it).
    """
    admitted = admit_waiting(services, account_id, limits)
    enqueue(services, admitted)
    return admitted


class _KeyQueue:
    """One family and zone's held jobs as read so far (oldest first), and whether more may follow."""

    def __init__(self, key: QuotaKey) -> None:
        self.key = key
        self.jobs: deque[HeldJob] = deque()
        self.more = True
        self.last: str | None = None

    def read(self, services: Services, account_id: str, plan: AdmissionPlan) -> None:
        """Read the next page: what the plan could still admit of this key, plus the job after those
        (the one that stops the key gets its reason), at most ``HELD_READ_CAP``."""
        size = min(plan.admissible(self.key, HELD_READ_CAP) + 1, HELD_READ_CAP)
        page = services.store.list_held_jobs(account_id, self.key, limit=size, after=self.last)
        self.jobs.extend(page)
        self.more = len(page) == size
        if page:
            self.last = page[-1].job_id


def _admission_pass(
    services: Services,
    account_id: str,
    plan: AdmissionPlan,
    *,
    limits: QuotaLimits,
    waiting: Sequence[QuotaKey],
    admitted: list[str],
) -> bool:
    """One pass over the keys with units queued (``admit_waiting``); appends to ``admitted`` and
    returns True when an admission lost a race (the caller re-reads)."""
    store = services.store
    heads: list[tuple[str, str]] = []  # (job id, key name): each key's oldest job not yet offered
    queues: dict[str, _KeyQueue] = {}
    quiet: list[QuotaKey] = []
    for key in waiting:
        if plan.admissible(key, 1) == 0:
            quiet.append(key)
            continue
        queue = queues[key.name] = _KeyQueue(key)
        queue.read(services, account_id, plan)
        if queue.jobs:
            heapq.heappush(heads, (queue.jobs[0].job_id, key.name))
    while heads:
        _, name = heapq.heappop(heads)
        queue = queues[name]
        job = queue.jobs.popleft()
        went = _offer(services, account_id, job, plan=plan, limits=limits, admitted=admitted)
        if went is None:
            return True
        if not went:
            continue  # the key stops here
        if not queue.jobs and queue.more:
            queue.read(services, account_id, plan)
        if queue.jobs:
            heapq.heappush(heads, (queue.jobs[0].job_id, name))
    # A key without room for one job: its held jobs are not read, only its oldest, for its reason.
    for key in quiet:
        oldest = store.list_held_jobs(account_id, key, limit=1)
        if oldest and _end_if_never_fits(services, oldest[0], limits):
            return True  # the next oldest is looked at in the next pass
        if oldest:
            _refresh_reason(services, oldest[0], plan.usage, limits)
    return False


def _end_held_out_of_credits(
    services: Services, account_id: str, waiting: Sequence[QuotaKey], account: Account | None
) -> bool:
    """When the account's balance is not positive: end its held jobs ``Terminated``, free, with
    ``Account out of credits`` (an array: its children not in AWS Batch), as the meter ends its running
    jobs and a submit is refused (402), instead of admitting work nobody pays for. Ends at most a page
    per family and zone (``HELD_READ_CAP``) and asks for another admission when more may be left.
    Returns True when the balance (of ``account``, as just read) was not positive (nothing is to be
    admitted)."""
    if account is not None and account.credit_balance > 0:
        return False
    now = services.clock()
    more = False
    for key in waiting:
        page = services.store.list_held_jobs(account_id, key, limit=HELD_READ_CAP)
        more = more or len(page) == HELD_READ_CAP
        for held in page:
            job = services.store.get_job(held.job_id)
            if job is None or job.is_final:
                continue
            if job.type == JobType.ARRAY:
                withdraw_unsent(services, job, OUT_OF_CREDITS, now, admit_next=False)
            else:
                end_undispatched(services, job, OUT_OF_CREDITS, now, admit_next=False)
    logger.warning("held jobs ended: account out of credits", account_id=account_id, more=more)
    if more:
        request_admission(services, account_id)
    return True


#: The ``statusReason`` of a held job ended because its quota was lowered below what it needs alone.
QUOTA_LOWERED_REASON = "The account's quota was lowered while it waited: {detail}"


def _end_if_never_fits(services: Services, job: HeldJob, limits: QuotaLimits) -> bool:
    """End a held job that can never be admitted under ``limits``: it (an array: one child) alone
    holds more than its family's limit or the account's total, because an operator lowered them after
    it was held. Left held, it would wait for good at the head of its family and zone, and hold back
    every job behind it while the quota is free. A single job ends ``Terminated``, free
    (``endings.end_undispatched``), an array's children not in AWS Batch likewise
    (``endings.withdraw_unsent``), with ``QUOTA_LOWERED_REASON`` (the same sentence a submit
    of it would get as a 400 ``QuotaExceeded``). Returns True when it ended the job."""
    demand = job.next_demand
    if demand.units <= limits.limit(demand.key) and demand.vcpus <= limits.total_limit:
        return False
    stored = services.store.get_job(job.job_id)
    if stored is None or stored.is_final:
        return False
    try:
        check_fits_alone(demand, limits, stored.machine_class)
    except QuotaExceeded as exc:
        reason = QUOTA_LOWERED_REASON.format(detail=exc.message)
    else:  # the limits read now and the held item's demand disagree: leave it to the next pass
        return False
    now = services.clock()
    if stored.type == JobType.ARRAY:
        withdraw_unsent(services, stored, reason, now, admit_next=False)
    else:
        end_undispatched(services, stored, reason, now, admit_next=False)
    logger.warning("held job ended: quota lowered below it", job_id=job.job_id)
    return True


def _offer(
    services: Services,
    account_id: str,
    job: HeldJob,
    *,
    plan: AdmissionPlan,
    limits: QuotaLimits,
    admitted: list[str],
) -> bool | None:
    """Offer ``job``, the next in admission order, to the plan and admit it if it goes (appending to
    ``admitted``): True when it went (an array: every child of it is in a span now, or it is gone),
    False when its key stops here (its reason refreshed), None when a write lost a race (the caller
    re-reads)."""
    if _end_if_never_fits(services, job, limits):
        return True  # ended: the next of its key is offered
    if job.child is not None:
        # An array: admitted a span at a time (its units are its children's not yet in a span).
        went = admit_spans(
            services,
            account_id,
            job,
            plan=plan,
            limits=limits,
            admitted=admitted,
            refresh_reason=lambda held: _refresh_reason(services, held, plan.usage, limits),
        )
        return None if went == SpanAdmission.RACED else went != SpanAdmission.BLOCKED
    if not plan.admit(job):
        _refresh_reason(services, job, plan.usage, limits)
        return False
    if not services.store.admit_job(account_id, job, limits):
        return None
    admitted.append(job.job_id)
    return True


def _refresh_reason(services: Services, job: HeldJob, usage: Usage, limits: QuotaLimits) -> None:
    """Give the oldest held job of a key that stops the reason with the current numbers, unless it has
    it already."""
    reason = waiting_reason(job.next_demand, usage, limits)
    if reason != job.reason:
        services.store.set_waiting_reason(job.job_id, reason)


@dataclass(frozen=True, slots=True)
class QuotaReport:
    """``GET /account/quotas``: each family in each zone, and the account's total (vCPUs): the limit,
    what jobs hold (in use), what held jobs wait for (queued), what dedicated computes reserve."""

    lines: list[QuotaLine]
    total_limit: int
    total_in_use: int
    total_queued: int
    total_reserved: int = 0


def account_quotas(services: Services, account_id: str) -> QuotaReport:
    """The account's limits, units in use by jobs, units queued and units reserved by computes."""
    usage = services.store.get_quota_usage(account_id)
    limits = services.store.get_quota_limits(account_id)
    return QuotaReport(
        quota_lines(usage, limits),
        limits.total_limit,
        usage.total_in_use,
        usage.total_queued,
        usage.total_reserved,
    )


def set_account_quotas(
    services: Services,
    account_id: str,
    changes: Sequence[tuple[str, str, int]],
    total: int | None,
    set_total: bool,
    *,
    actor: str,
    now: datetime,
    idempotency_key: str | None = None,
) -> QuotaReport:
    """``PUT /admin/accounts/{accountId}/quotas``: the listed (family, zone, limit) entries replace
    those limits, the others keep theirs; with ``set_total``, the total becomes ``total`` (None: the
    default). Jobs held under the old limits are admitted at once if the new ones let them.

    The new limits and an audit entry (``SetQuotas``: who, when, every limit before and after,
    ``QuotaLimits.view``) are written in one transaction, over the version of the limits read. A
    request that finds the limits it asks for changes nothing and records nothing (so a retry, with
    or without an ``Idempotency-Key``, never counts twice), as the fleet actions do.

    Raises
    ------
    NotFound
        No such account.
    ValidationFailed
        A limit outside 0..``quotas.MAX_LIMIT``, or a family and zone listed twice (``field`` names
        the entry).
    Conflict
        Another operator changed the account's limits at the same moment (read them, retry).
    DependencyFailed
        DynamoDB failed, or the operations store (the audit log) is not configured.
    """
    if services.store.get_account(account_id) is None:
        raise NotFound(f"No account {account_id}.")
    parsed: dict[QuotaKey, int] = {}
    for index, (family, zone, limit) in enumerate(changes):
        key = QuotaKey.parse(f"{family}#{zone}")
        if key in parsed:
            raise ValidationFailed(
                f"quotas lists {family} in {zone} twice; give each family and zone once.",
                field=f"quotas[{index}]",
            )
        parsed[key] = check_limit(limit, f"quotas[{index}].limit")
    if set_total and total is not None:
        check_limit(total, "total")
    if services.operations is None:
        raise DependencyFailed("the operations store (the audit log) is not configured")
    current = services.store.get_quota_limits(account_id)
    limits = current.with_changes(parsed, total, set_total)
    if not limits.same_as(current):
        target = account_target(account_id)
        audit = AuditEntry(
            entry_id=audit_entry_id(actor, AuditAction.SET_QUOTAS, target, idempotency_key),
            at=now,
            actor=actor,
            action=AuditAction.SET_QUOTAS,
            target=target,
            before=current.view(),
            after=limits.view(),
        )
        try:
            services.operations.save_quota_limits(account_id, limits, audit)
        except ConditionFailed:
            raise Conflict(
                "Another operator changed this account's quotas just now; read them and try again."
            ) from None
    logger.info("quotas set", account_id=account_id, changed=not limits.same_as(current), total=limits.total)
    # Raised limits may let held jobs go now (also after an earlier attempt that stopped before this
    # point).
    admit_and_enqueue(services, account_id)
    return account_quotas(services, account_id)
