"""The meter: every tick (1 minute on AWS), for the jobs that are Starting or Running:

1. refresh ``creditsSpent`` (never lowering it);
2. enforce, in this order: the job's ``creditConstraint``, its ``timeConstraint``, then the
   account's balance less what its running jobs have spent (``Account out of credits`` for all of
   them); a terminated job keeps the reason the meter gave, whatever the later FAILED event says;
3. reconcile jobs whose last event is older than 10 minutes with Batch ``DescribeJobs`` (events
   can be lost), applying what it finds exactly as an event would be applied.

Running jobs come from a sparse index, so a tick's cost grows with running jobs, not with history.
TerminateJob is sent once per job (the request is recorded on the job by a conditional write; only
a failed call is sent again, on a later tick, at most ``MAX_TERMINATE_ATTEMPTS`` times). One job
that cannot be read or written (a partial item, a job deleted meanwhile, a failing dependency)
never stops a tick for the others: it is logged, counted in ``MeterReport.skipped``, and skipped.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import partial
from typing import TypeVar

from aws_lambda_powertools import Logger

from functions.domain.arrays import child_job_id, parse_span_job_name, span_job_name
from functions.domain.errors import DependencyFailed, UnreadableRecord
from functions.domain.jobs import OUT_OF_CREDITS, BatchJobState, DispatchState, Job, JobType
from functions.domain.machine_classes import GeoZone
from functions.domain.metering import MeterReading, balance_exhausted, read_array_meter, read_meter
from functions.domain.notification_schedule import due_notifications
from functions.logic import waits
from functions.logic.array_dispatch import nudge_array
from functions.logic.array_results import finish_array
from functions.logic.compute_jobs import end_stray_jobs
from functions.logic.computes import meter_computes
from functions.logic.dispatch import recover_claim
from functions.logic.dispatch_requests import enqueue
from functions.logic.dispatch_rules import ClaimRecovery
from functions.logic.endings import terminate
from functions.logic.job_events import apply_job_state_change
from functions.logic.notifying import deliver_due_notifications
from functions.logic.quotas import admit_and_enqueue
from functions.ports import Services

logger = Logger(child=True)

STALE_AFTER = timedelta(minutes=10)
UNSUBMITTED_REASON = "AWS Batch never confirmed the job's submission; nothing was charged"
UNKNOWN_TO_BATCH_REASON = "AWS Batch has no record of the job"
# A synthetic final state must order after every real event of the job (AWS Batch allows at most
# 10 attempts), so the forward-only rule lets it through.
SYNTHETIC_ATTEMPT_COUNT = 1000


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class MeterReport:
    """What one tick did: jobs metered, ``creditsSpent`` raised, TerminateJob requests sent, jobs
    reconciled, and jobs skipped because they could not be read or written (each counted once);
    ``running`` are the Starting/Running jobs the tick read (for ``health.count_stuck_jobs``)."""

    metered: int
    updated: int
    terminated: int = 0
    reconciled: int = 0
    skipped: int = 0
    running: tuple[Job, ...] = ()


@dataclass
class _Skips:
    """The jobs one tick skipped (by id; an unreadable item by its key)."""

    job_ids: set[str] = field(default_factory=set)

    def unreadable(self, problem: UnreadableRecord) -> None:
        self.job_ids.add(problem.key)

    def guard(self, job_id: str, what: str, action: Callable[[], T]) -> T | None:
        """Run one job's ``action``; a failure is logged and counted, and the tick goes on."""
        try:
            return action()
        except Exception:
            # Deliberately broad: whatever one job's item or dependency does, the others are metered.
            logger.exception("job skipped by the meter", job_id=job_id, step=what)
            self.job_ids.add(job_id)
            return None


def _terminate(services: Services, reading: MeterReading, reason: str, now: datetime) -> bool:
    """Ask Batch to terminate the job unless that was already asked; True when this call sent it."""
    job = reading.job
    if job.termination_requested_at is not None:
        return False  # sent once already; the FAILED event (or reconciliation) ends it
    try:
        return terminate(services, job, job.termination_reason or reason, now).termination_requested_at == now
    except DependencyFailed:
        # The request was released: a later tick sends it again (bounded by MAX_TERMINATE_ATTEMPTS).
        logger.exception("termination not sent", job_id=job.job_id, reason=reason)
        return False


def meter_tick(services: Services, now: datetime) -> MeterReport:
    """One tick: refresh spend, enforce the caps and the balance, reconcile stale jobs.

    Parameters
    ----------
    services : Services
        Ports.
    now : datetime
        The tick's time; a job's running time is ``now - startedAt``.
    """
    skips = _Skips()
    # First what earlier deliveries failed to publish (this tick's failures wait for the next one).
    retry_failed_notifications(services, now, skips)
    by_account: dict[str, list[MeterReading]] = defaultdict(list)
    running = tuple(services.store.list_metered_jobs(on_unreadable=skips.unreadable))
    for job in running:
        reading = skips.guard(job.job_id, "read", partial(read_meter, job, now))
        if reading is not None:
            by_account[job.account_id].append(reading)
    metered = sum(len(readings) for readings in by_account.values())
    updated = terminated = 0
    for account_id, readings in by_account.items():
        account_updated, account_terminated = _enforce(services, account_id, readings, skips, now)
        updated += account_updated
        terminated += account_terminated
    for readings in by_account.values():
        for reading in readings:
            skips.guard(reading.job.job_id, "notify", partial(notify_progress, services, reading, now))
    ended: set[str] = set()
    reconciled = reconcile_stale_jobs(services, now, skips, ended)
    # Dedicated computes: provisioning, schedules, idle stops, the balance rule, hourly settlements.
    on_computes = {
        (r.job.account_id, r.job.compute)
        for rs in by_account.values()
        for r in rs
        if r.job.compute is not None
    }
    meter_computes(services, now, on_computes)
    # A job never runs on a compute that is not billed (its stop's termination failed or raced).
    end_stray_jobs(services, (r.job for rs in by_account.values() for r in rs), now)
    skipped = len(skips.job_ids)
    logger.info(
        "meter tick",
        metered=metered,
        updated=updated,
        terminated=terminated,
        reconciled=reconciled,
        skipped=skipped,
    )
    return MeterReport(
        metered=metered,
        updated=updated,
        terminated=terminated,
        reconciled=reconciled,
        skipped=skipped,
        running=tuple(job for job in running if job.job_id not in ended),
    )


def _enforce(
    services: Services, account_id: str, readings: list[MeterReading], skips: _Skips, now: datetime
) -> tuple[int, int]:
    """One account's running jobs: raise their ``creditsSpent``, then stop those at a cap, then all
    of them when the balance is used up. Returns (credits raised, terminations sent).

    Arrays: a parent's reading is replaced by the sum of its running children (``_read_arrays``); its
    ``creditConstraint`` and the balance stop the whole array (one termination for all its spans),
    a child's own ``timeConstraint`` stops that child.
    """
    updated = terminated = 0
    _read_arrays(services, readings, skips)
    for reading in readings:
        if reading.spent > reading.job.credits_spent and skips.guard(
            reading.job.job_id,
            "credits",
            partial(services.store.raise_credits_spent, reading.job.job_id, reading.spent),
        ):
            updated += 1
    stopping: set[str] = set()
    for reading in readings:
        reason = reading.cap_reached or reading.job.termination_reason
        if reason and reading.job.type == JobType.ARRAY_CHILD and not reading.cap_reached:
            continue  # the child's array carries the reason and is being stopped as a whole
        if reason:
            stopping.add(reading.job.job_id)
            if skips.guard(
                reading.job.job_id,
                "terminate",
                partial(_terminate, services, reading, reason, now),
            ):
                terminated += 1
    account = skips.guard(account_id, "account", lambda: services.store.get_account(account_id))
    if account is not None and balance_exhausted(account.credit_balance, readings):
        for reading in readings:
            # A child is stopped with its array (the parent's reading is in the list).
            if reading.job.type == JobType.ARRAY_CHILD or reading.job.job_id in stopping:
                continue
            if skips.guard(
                reading.job.job_id,
                "terminate",
                partial(_terminate, services, reading, OUT_OF_CREDITS, now),
            ):
                terminated += 1
    return updated, terminated


def _read_arrays(services: Services, readings: list[MeterReading], skips: _Skips) -> None:
    """Replace each array parent's reading (in place) by ``read_array_meter`` of its running
    children; a parent not listed (its children run, it is not in the index yet) is read once.
    One read per array with running children at most: finished children cost nothing."""
    children: dict[str, list[MeterReading]] = defaultdict(list)
    for reading in readings:
        if reading.job.type == JobType.ARRAY_CHILD and reading.job.parent_job_id:
            children[reading.job.parent_job_id].append(reading)
    listed = {r.job.job_id: i for i, r in enumerate(readings) if r.job.type == JobType.ARRAY}
    for parent_id in sorted(set(children) | set(listed)):
        if parent_id in listed:
            parent: Job | None = readings[listed[parent_id]].job
        else:
            parent = skips.guard(parent_id, "array", lambda p=parent_id: services.store.get_job(p))  # type: ignore[misc]
        if parent is None or parent.is_final:
            continue
        reading = read_array_meter(parent, children.get(parent_id, []))
        if parent_id in listed:
            readings[listed[parent_id]] = reading
        else:
            readings.append(reading)


def notify_progress(services: Services, reading: MeterReading, now: datetime) -> None:
    """Send what a metered job owes now (Hourly, Daily, HoursElapsed, JobCreditsUsed,
    TimeConstraintNear, and any status notification a failed publish left unsent). A failure is left
    for the next tick: its key was released."""
    job = replace(reading.job, credits_spent=max(reading.spent, reading.job.credits_spent))
    try:
        deliver_due_notifications(services, job, now, raise_on_failure=False)
    except DependencyFailed:
        logger.exception("notifications not delivered", job_id=job.job_id)


def retry_failed_notifications(services: Services, now: datetime, skips: _Skips | None = None) -> None:
    """Send again what failed to publish (for final jobs too: the meter is their only retry).

    A job that is gone (deleted, past its TTL) is left alone; one whose item cannot be read or
    written is logged, counted in ``skips`` and skipped: the others are still retried.
    """
    guard = skips or _Skips()
    for job_id in list(services.store.list_notification_retries()):
        guard.guard(job_id, "notification retry", partial(_retry_notifications, services, job_id, now))


def _retry_notifications(services: Services, job_id: str, now: datetime) -> None:
    job = services.store.get_job(job_id)
    if job is None:
        return
    try:
        deliver_due_notifications(services, job, now, raise_on_failure=False)
    except DependencyFailed:
        logger.exception("notification retry failed", job_id=job_id)
        return
    after = services.store.get_job(job_id)
    if after is not None and not due_notifications(after, now):
        # Conditional too: a publish that failed meanwhile keeps the job listed.
        services.store.clear_notification_retry(job_id)


def _synthetic_failure(job: Job, reason: str, now: datetime) -> BatchJobState:
    """A FAILED state for a job Batch cannot tell us about; it never ran as far as we can prove.

    An array child's is shaped as its span's events are (the span's ``jobName``, the index in the
    span as ``arrayProperties.index``), so it reaches the same child.
    """
    job_name, array_index = job.job_id, None
    if job.type == JobType.ARRAY_CHILD and job.parent_job_id and job.array_index is not None:
        local = _index_in_span(job.batch_job_id or "")
        job_name = span_job_name(job.parent_job_id, job.array_index - (local or 0))
        array_index = local
    return BatchJobState(
        batch_job_id=job.batch_job_id or f"unsubmitted-{job.job_id}",
        job_name=job_name,
        array_index=array_index,
        status="FAILED",
        status_reason=reason,
        created_at_ms=int(job.submitted_at.timestamp() * 1000),
        started_at_ms=int(job.started_at.timestamp() * 1000) if job.started_at else None,
        stopped_at_ms=int(now.timestamp() * 1000),
        exit_code=None,
        log_stream_name=job.log_stream_name,
        attempt_count=SYNTHETIC_ATTEMPT_COUNT,
    )


def _index_in_span(batch_job_id: str) -> int | None:
    """The index in its span of a child's Batch id ``<span id>:<index>`` (None: a one-item span)."""
    _, colon, suffix = batch_job_id.rpartition(":")
    return int(suffix) if colon and suffix.isascii() and suffix.isdigit() else None


def reconcile_stale_jobs(
    services: Services, now: datetime, skips: _Skips | None = None, ended: set[str] | None = None
) -> int:
    """Ask Batch about non-final jobs with no event for 10 minutes; apply what it says.

    Returns how many jobs were checked; the ids of the jobs it made final are added to ``ended``.
    A job Batch does not know (never submitted, or past Batch's retention) is ended ``Terminated``
    with a reason saying so. A job that cannot be read or written is logged, counted in ``skips``
    and skipped.
    """
    guard = skips or _Skips()
    stale = list(services.store.list_stale_jobs(now - STALE_AFTER, on_unreadable=guard.unreadable))
    by_zone: dict[GeoZone, list[Job]] = defaultdict(list)
    for job in stale:
        by_zone[job.geo_zone].append(job)
    observed_ms = int(now.timestamp() * 1000)
    for zone, jobs in by_zone.items():
        zone_services = services.zones.get(zone)
        if zone_services is None:
            logger.error("jobs in a zone this deployment lacks", zone=zone.value, jobs=len(jobs))
            continue
        ids = [j.batch_job_id for j in jobs if j.batch_job_id]
        try:
            states = (
                {s.batch_job_id: s for s in zone_services.batch.describe_jobs(ids, observed_ms)}
                if ids
                else {}
            )
        except DependencyFailed:
            logger.exception("reconciliation skipped", zone=str(zone))
            continue
        for job in jobs:
            if job.batch_job_id is None and job.dispatch_state is not None:
                # Not in AWS Batch yet: waiting for quota or for the dispatcher, not lost.
                guard.guard(job.job_id, "reconcile", partial(_nudge_undispatched, services, job, now))
                continue
            if job.type == JobType.ARRAY:
                guard.guard(job.job_id, "reconcile", lambda j=job: _reconcile_array(services, j, now))  # type: ignore[misc]
                continue
            state = states.get(job.batch_job_id or "")
            if state is None:
                reason = UNKNOWN_TO_BATCH_REASON if job.batch_job_id else UNSUBMITTED_REASON
                state = _synthetic_failure(job, reason, now)
            # A store or publish failure for one job must not stop the tick for the others: what was
            # not written is still stale next tick; a failed publish released its key.
            applied = guard.guard(job.job_id, "reconcile", partial(_reconcile, services, job, state, now))
            if applied is not None and applied.is_final and ended is not None:
                ended.add(job.job_id)
    return len(stale)


def _nudge_undispatched(services: Services, job: Job, now: datetime) -> None:
    """The backstop of a job not yet in AWS Batch that had no event for a while: admit what its
    account's quota lets go (an admission a failure cut short), send an admitted job's message again
    (one lost or dead-lettered; the dispatcher's claim makes a repeat harmless), then mark it checked.
    A job in ``Dispatching`` is left to its dispatcher for ``dispatch_rules.CLAIM_TIMEOUT``; past it, its
    dispatcher died mid-way, and ``dispatch.recover_claim`` records the Batch job AWS Batch has under
    its name, or gives the claim back and enqueues it again (never a second SubmitJob). An array
    admitted span by span: ``array_dispatch.nudge_array``, for its spans. A job waiting for its
    prerequisites is judged against them again (``waits.settle``: released or ended when a report of
    theirs was lost)."""
    if job.is_waiting:
        if waits.settle(services, job, now).is_waiting:
            services.store.mark_reconciled(job.job_id, now)
        return
    if job.type == JobType.ARRAY:
        nudge_array(services, job, now)
        services.store.mark_reconciled(job.job_id, now)
        return
    if job.dispatch_state == DispatchState.DISPATCHING:
        recovery = recover_claim(services, job, now)
        if recovery != ClaimRecovery.WAITING:
            logger.info("stranded claim recovered", job_id=job.job_id, outcome=recovery.value)
    admitted = admit_and_enqueue(services, job.account_id)
    if job.dispatch_state == DispatchState.ADMITTED and job.job_id not in admitted:
        enqueue(services, [job.job_id])
    services.store.mark_reconciled(job.job_id, now)


def _reconcile(services: Services, job: Job, state: BatchJobState, now: datetime) -> Job | None:
    applied = apply_job_state_change(services, state, now)
    if applied is not None and not applied.is_final:
        services.store.mark_reconciled(job.job_id, now)
    logger.info("job reconciled", job_id=job.job_id, batch_status=state.status)
    return applied


def _reported_children(services: Services, parent: Job, offset: int, count: int) -> set[int | None]:
    """The span's children (global indexes ``offset`` .. ``offset + count - 1``) whose events were
    applied: an item's record each, or, for an array whose containers take many items, each container
    settled (``Job.array_containers_settled``; a running one is asked again, which starts nothing twice)."""
    if parent.array_containers is not None:
        return {c for c in parent.array_containers_settled if offset <= c < offset + count}
    children = services.store.get_jobs([child_job_id(parent.job_id, offset + i) for i in range(count)])
    return {c.array_index for c in children}


def _reconcile_array(services: Services, parent: Job, now: datetime) -> None:
    """A quiet array: children with a record are reconciled as jobs of their own (they are in the
    same index); here, the children that never had an event. Each span is described; a missing
    child of a known span is described by its Batch id (``<span>:<index>``, or the span's own for a
    one-item span) and what Batch says is applied as its event; a child Batch does not know (or
    whose whole span it does not know) ends Terminated, never charged. Then the parent is settled
    if every child is final (``finish_array``)."""
    batch = services.zones[parent.geo_zone].batch
    observed_ms = int(now.timestamp() * 1000)
    spans = {s.batch_job_id: s for s in batch.describe_jobs(list(parent.array_spans), observed_ms)}
    for span_id in parent.array_spans:
        span = spans.get(span_id)
        if span is None:
            logger.warning("array span unknown to batch", job_id=parent.job_id, batch_job_id=span_id)
            continue
        located = parse_span_job_name(span.job_name)
        offset = located[1] if located else 0
        count = span.array_size or 1
        seen = _reported_children(services, parent, offset, count)
        missing = [i for i in range(count) if offset + i not in seen]
        ids = {f"{span_id}:{i}" if span.array_size else span_id: i for i in missing}
        found = {s.batch_job_id: s for s in batch.describe_jobs(list(ids), observed_ms)} if ids else {}
        for batch_job_id, local in ids.items():
            state = found.get(batch_job_id)
            if state is None and span.status in ("SUCCEEDED", "FAILED"):
                state = BatchJobState(
                    batch_job_id=batch_job_id,
                    job_name=span.job_name,
                    status="FAILED",
                    status_reason=UNKNOWN_TO_BATCH_REASON,
                    created_at_ms=span.created_at_ms,
                    started_at_ms=None,
                    stopped_at_ms=observed_ms,
                    exit_code=None,
                    log_stream_name=None,
                    attempt_count=SYNTHETIC_ATTEMPT_COUNT,
                    array_index=local if span.array_size else None,
                )
            if state is not None:
                apply_job_state_change(services, replace(state, job_name=span.job_name), now)
    fresh = services.store.get_job(parent.job_id)
    if fresh is not None and fresh.dispatch_state is not None:
        # Spans not in AWS Batch yet (held, admitted, or claimed by a dispatcher that died).
        nudge_array(services, fresh, now)
        fresh = services.store.get_job(parent.job_id)
    if fresh is not None:
        finished = finish_array(services, fresh, now)
        waits.settle_dependents(services, finished, now)
        if not finished.is_final:
            services.store.mark_reconciled(parent.job_id, now)
    logger.info("array reconciled", job_id=parent.job_id)
