"""An ended container of an array whose containers take many items: its items' records and charge.

A container (an AWS Batch array child running ``worker.item_loop``) that ended (its SUCCEEDED or FAILED
event) ran some of its array's items. ``settle_container_end`` reads what it left
(``container_reports.read_container``: its reports, untrusted, and the item it died holding), charges
the container ONCE (its Batch running time, clamped into the array's life as every charge's time is by
``domain.charged_time``, at the array's machine class, the 60-second minimum once per container, cut to
what the array's ``creditConstraint`` leaves and to the balance: ``domain.credits.settle_charge``; a
container that claimed no item costs nothing), splits that charge over its items by their reported times
(``domain.item_reports.split_charge``) and writes them in transactions of up to ``MAX_CONTAINER_ITEMS``
items (``JobRepository.save_container_items``): the first records the container as settled and carries
its one ledger entry (``charge#<parent>#<batch job id>``), the balance change, the whole charge in the
parent's ``creditsSettled`` and the container's quota units given back; each moves the parent's
``childStatusCounts`` by its items. Then, as after a child's event, the array is terminated at its
``creditConstraint`` (``array_events.stop_at_cap``), started if it was ``Queued`` and finished once
every item is (``array_results.finish_array``).

Replays: the first transaction adds the container (its global array-child index) to the parent's
``arrayContainersSettled`` only if absent, so its charge and quota release happen once; a container
already settled keeps its stored charge (a replay, or a settlement cut short between its
transactions, splits the same charge again whatever the array's cap has left since), and a later
transaction whose items are already stored is skipped, so a replayed end event changes nothing.
DynamoDB requests for a container of k items: the parent and the account read, one transaction per
90 items, then the array's start and finish (``finish_array`` reads its items 100 a request): well
under 3 an item.

Routing: ``apply_container_event`` takes every Batch event of such an array (``Job.array_containers``
set; ``job_events`` sends it here instead of ``array_events.apply_array_event``, the meter's
reconciliation too): a container's RUNNING starts the array, its end is settled here.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal

from aws_lambda_powertools import Logger

from functions.domain.arrays import child_template, locate_array_event, remaining_cap
from functions.domain.charged_time import AttemptTimes, Window, epoch_ms, final_attempt_times
from functions.domain.credits import ZERO, Charge, settle_charge
from functions.domain.errors import ConditionFailed, DependencyFailed, RecordMissing
from functions.domain.item_reports import MAX_CONTAINER_ITEMS, ItemSettlement
from functions.domain.jobs import BatchJobState, DispatchState, Job, LedgerEntry, LedgerKind, job_rate
from functions.domain.status import JobStatus
from functions.logic import waits
from functions.logic.array_events import stop_at_cap
from functions.logic.array_results import finish_array
from functions.logic.container_reports import read_container
from functions.logic.unclaimed_items import end_unclaimed
from functions.ports import Services

logger = Logger(child=True)

MAX_WRITE_ATTEMPTS = 25
#: Why an item a container held ends when the container's event gives no reason.
CONTAINER_ENDED = "The container running this item ended before it reported"


def container_entry_id(parent_job_id: str, batch_job_id: str) -> str:
    """The deterministic ledger id of a container's charge: ``charge#<parent>#<batch job id>``."""
    return f"charge#{parent_job_id}#{batch_job_id}"


def _ms(moment: int) -> datetime:
    return datetime.fromtimestamp(moment / 1000, tz=UTC)


def item_record(parent: Job, state: BatchJobState, item: ItemSettlement) -> Job:
    """The final ``ArrayChild`` record of one item a container ran (``child_template`` with its
    outcome, times, container and part of the charge). A failed item is ``Terminated``."""
    status = JobStatus.SUCCEEDED if item.succeeded else JobStatus.TERMINATED
    return replace(
        child_template(parent, item.index),
        status=status,
        status_reason=item.reason,
        status_history=(JobStatus.QUEUED, JobStatus.STARTING, JobStatus.RUNNING, status),
        exit_code=item.exit_code,
        started_at=_ms(item.started_at_ms),
        completed_at=_ms(item.stopped_at_ms),
        batch_job_id=state.batch_job_id,
        log_stream_name=state.log_stream_name,
        credits_spent=item.credits,
    )


def _container_charge(
    services: Services, parent: Job, state: BatchJobState, container: int, life: AttemptTimes
) -> tuple[Charge, LedgerEntry | None, Decimal]:
    """The container's charge, its ledger entry when already stored, and the account's balance.

    A container already settled (in the parent's ``arrayContainersSettled``: a replay, or a
    settlement cut short between its transactions) keeps its stored charge (its entry's; none: 0),
    so every item's part comes from the same split whatever the array's cap has left since. A new
    charge is the container's Batch running time at the array's machine class, the 60-s minimum
    once, cut to what the array's cap leaves and to the balance (``settle_charge``); ``life`` is
    its Batch-reported start and stop as ``charged_time`` corrected them.
    """
    account = services.store.get_account(parent.account_id)
    if account is None:
        raise DependencyFailed(f"account {parent.account_id} of job {parent.job_id} is missing")
    if container in parent.array_containers_settled:
        stored = services.store.get_ledger_entry(
            parent.account_id, container_entry_id(parent.job_id, state.batch_job_id)
        )
        if stored is None:
            return Charge(credits=ZERO, cost=ZERO, unbilled=ZERO), None, account.credit_balance
        cost = stored.credits + stored.unbilled
        charge = Charge(credits=stored.credits, cost=cost, unbilled=stored.unbilled)
        return charge, stored, account.credit_balance
    cap = remaining_cap(parent.credit_constraint, parent.credits_settled)
    charge = settle_charge(life.running_ms, job_rate(parent), cap, account.credit_balance)
    return charge, None, account.credit_balance


def apply_container_event(services: Services, parent: Job, state: BatchJobState, now: datetime) -> Job:
    """Apply one Batch event of an array whose containers take many items (``parent.array_containers``).

    A container's (``<span id>:<index>``; global index: its span's offset + its index in the span)
    SUCCEEDED or FAILED is settled (``settle_container_end``); its RUNNING starts a ``Queued`` array
    (``JobRepository.start_array``, conditional: a replay changes nothing); its earlier states record
    nothing (its items have no record until it ended). A span's own event, and every event, ends
    with the array finished when every item is final (``finish_array``).

    Returns the parent after. Raises ``DependencyFailed`` (DynamoDB or S3 failed; the event is
    delivered again).
    """
    located = locate_array_event(state.batch_job_id, state.job_name, state.array_index, state.array_size)
    container = None if located is None else located.index
    if container is not None and not 0 <= container < (parent.array_containers or 0):
        logger.warning(
            "event for a container outside its array ignored", job_id=parent.job_id, index=container
        )
        return parent
    if container is not None and state.status in ("SUCCEEDED", "FAILED"):
        return settle_container_end(services, parent, state, container, now)
    if container is not None and state.status == "RUNNING" and parent.status == JobStatus.QUEUED:
        started = _ms(state.started_at_ms) if state.started_at_ms is not None else now
        # An array with containers still held keeps its quota reason while it runs.
        held = parent.dispatch_state == DispatchState.HELD
        services.store.start_array(parent.job_id, max(started, parent.submitted_at), now, keep_reason=held)
    fresh = services.store.get_job(parent.job_id) or parent
    finished = finish_array(services, fresh, now)
    waits.settle_dependents(services, finished, now)
    return finished


def settle_container_end(
    services: Services, parent: Job, state: BatchJobState, container: int, now: datetime
) -> Job:
    """Record the items an ended container ran and its one charge; then finish the array if every
    item is final.

    Parameters
    ----------
    parent : Job
        The ``Array`` job.
    state : BatchJobState
        The container's SUCCEEDED or FAILED event (``batch_job_id`` ``<span id>:<c>``, its
        ``startedAt``/``stoppedAt``: trusted).
    container : int
        The container's global array-child index (its span's offset + its index in the span): the
        parent records each container it settled, so its charge and quota release happen once.

    Returns
    -------
    Job
        The parent after (finished when every item is final).

    Raises
    ------
    DependencyFailed
        DynamoDB or S3 failed, or a write kept losing races (the event is delivered again; every
        step is idempotent).
    """
    # The container's life as every charge's time is taken: inside [the array's submission, now].
    life = final_attempt_times(
        Window.of(parent.submitted_at, now),
        state.started_at_ms,
        state.stopped_at_ms,
        observed_ms=state.observed_at_ms,
    )
    for correction in life.corrections:
        logger.warning("container time corrected", job_id=parent.job_id, correction=str(correction))
    # A container that never ran has no life: its reports (if any were forged) clamp to its stop.
    stopped = life.stopped_ms if life.stopped_ms is not None else epoch_ms(now)
    started = life.started_ms if life.started_ms is not None else stopped
    for _ in range(MAX_WRITE_ATTEMPTS):
        current = services.store.get_job(parent.job_id)
        if current is None:
            logger.warning("container end for a gone array ignored", job_id=parent.job_id)
            return parent
        already = container in current.array_containers_settled
        charge, entry, balance = _container_charge(services, current, state, container, life)
        settled = read_container(
            services.zones[current.geo_zone].blobs,
            current.job_id,
            state.batch_job_id,
            array_size=current.array_size or 0,
            started_ms=started,
            stopped_ms=stopped,
            charge=charge.credits,
            end_reason=state.status_reason or CONTAINER_ENDED,
        )
        if not already and not settled.items:
            # A container that claimed no item (the others had taken them all) is not charged: its
            # time bought none of the account's work, and the array's ``creditsSpent`` is its items'
            # sum, so a charge here would be credits no item accounts for.
            charge = Charge(credits=ZERO, cost=ZERO, unbilled=ZERO)
        records = [item_record(current, state, item) for item in settled.items]
        if not already and (charge.credits > 0 or charge.unbilled > 0):
            entry = LedgerEntry(
                entry_id=container_entry_id(current.job_id, state.batch_job_id),
                account_id=current.account_id,
                at=_ms(stopped),
                kind=LedgerKind.CHARGE,
                credits=charge.credits,
                balance_after=balance - charge.credits,
                job_id=current.job_id,
                unbilled=charge.unbilled,
            )
        most = None
        if current.credit_constraint is not None and charge.credits > 0:
            most = current.credit_constraint - charge.credits
        # The container held quota as one child does; its units go back with its first write.
        release = child_template(current, 0) if current.dispatch_state is not None else None
        chunks = [records[i : i + MAX_CONTAINER_ITEMS] for i in range(0, len(records), MAX_CONTAINER_ITEMS)]
        try:
            for position, chunk in enumerate(chunks or [[]]):
                if position == 0 and already:
                    continue
                _write_chunk(
                    services,
                    current,
                    chunk,
                    container=container if position == 0 else None,
                    charge=charge,
                    entry=entry,
                    release=release,
                    most=most,
                    now=now,
                )
        except RecordMissing:
            logger.warning("container end for a gone array ignored", job_id=parent.job_id)
            return parent
        except ConditionFailed:
            continue  # the balance or the cap moved, or another writer settled it: read again
        if charge.credits > 0 and not already:
            services.events.count("CreditsCharged", float(charge.credits), amount=True)
        logger.info(
            "container settled",
            job_id=current.job_id,
            batch_job_id=state.batch_job_id,
            items=len(records),
            credits=str(charge.credits),
        )
        break
    else:
        raise DependencyFailed(f"job {parent.job_id} kept changing; the container's end will be retried")
    return _after_settlement(services, parent, records, now)


def _after_settlement(services: Services, parent: Job, records: list[Job], now: datetime) -> Job:
    """After a container's items were written: stop the array at its cap (its other containers
    would run for nothing), start it if ``Queued``, end the items no container claimed once every
    container was settled (``unclaimed_items.end_unclaimed``), finish it when every item is final."""
    fresh = services.store.get_job(parent.job_id) or parent
    stop_at_cap(services, fresh, now)
    if fresh.status == JobStatus.QUEUED and records:
        services.store.start_array(fresh.job_id, min(r.started_at for r in records if r.started_at), now)
        fresh = services.store.get_job(parent.job_id) or fresh
    if end_unclaimed(services, fresh, now):
        fresh = services.store.get_job(parent.job_id) or fresh
    finished = finish_array(services, fresh, now)
    waits.settle_dependents(services, finished, now)
    return finished


def _write_chunk(
    services: Services,
    parent: Job,
    chunk: list[Job],
    *,
    container: int | None,
    charge: Charge,
    entry: LedgerEntry | None,
    release: Job | None,
    most: Decimal | None,
    now: datetime,
) -> None:
    """Write one chunk of the container's items; the first (``container`` given) with its charge,
    entry, quota release and the parent's record of the container. A later chunk already stored
    (its items put before a cut-short settlement) is skipped. Raises ``ConditionFailed`` when the
    first chunk lost a race or was written by another writer (the caller reads again)."""
    first = container is not None
    try:
        services.store.save_container_items(
            parent.job_id,
            chunk,
            container=container,
            credits=charge.credits if first else ZERO,
            entry=entry if first else None,
            release=release if first else None,
            settled_at_most=most if first else None,
            now=now,
        )
    except ConditionFailed:
        if first:
            raise
        if len(services.store.get_jobs([i.job_id for i in chunk])) == len(chunk):
            logger.info("container items already stored", job_id=parent.job_id, first=chunk[0].array_index)
            return
        raise DependencyFailed(f"items of job {parent.job_id} could not be stored; retried") from None
