"""Array jobs admitted through the quota a span at a time (``admit_spans``), and an array's whole way.

``POST /jobs`` with items writes the ``Array`` parent and answers 202 without calling AWS Batch
(``functions.logic.arrays.submit_array``). Its children are admitted through the account's quota a
**span** at a time, oldest first per account among arrays and single jobs alike (the parent's
``held#`` item sits in its family and zone's queue by its id, as a single job's does):

1. **Hold.** The parent is written ``Held`` (``quotas.hold``), every child counted queued; its
   ``statusReason`` is the quota reason while children remain held (``Waiting for quota: Basic vCPUs in
   UnitedStates (2 of 2 in use)``), as a single job's.
2. **Admit a span** (``admit_spans``, called by ``quotas.admit_waiting`` for a held array): the span
   takes as many children as fit in the free room (``domain.quotas.span_size_for``: room // one child's
   units, at most ``REMOTE_BATCH_ARRAY_SPAN_SIZE``, at least 1), and its units are added to usage in
   the same conditional transaction that records the span on the parent (``admit_span``). The next span
   waits for room; the parent stays ``Held`` until every child is in a span.
3. **Dispatch a span** (``array_dispatch.dispatch_span``, from the dispatch queue: the message names
   ``<parent>#<offset>``): claimed before SubmitJob (``Admitted`` → ``Dispatching`` on the span's
   entry), paced and retried as a single job's SubmitJob (``functions.logic.dispatch_rules``),
   submitted as an AWS Batch array job of the span's size (a plain job for a span of one) named
   ``span_job_name`` and carrying ``REMOTE_BATCH_ARRAY_OFFSET``, then recorded (its Batch id appended to
   ``arraySpans``). A dispatcher that dies between its claim and the record leaves the span
   ``Dispatching``: the meter's backstop (``array_dispatch.nudge_array``) looks it up in AWS Batch by
   name after ``dispatch_rules.CLAIM_TIMEOUT`` before anything else, so no span is submitted twice.
4. **Children end.** Each child's end gives its units back in the transaction that settles it
   (``ArrayRecords.save_child_event``) and asks for an admission (``array_events``), so the next span
   goes as children end.

An abort (or a cap, or the balance) withdraws what never reached AWS Batch (``endings.withdraw_unsent``): the
held remainder and the spans admitted but not claimed end ``Terminated``, free (the parent's counts
move, ``arrayWithdrawn`` names them, their units go back), in one transaction; the spans AWS Batch has
are terminated (``endings.terminate``) and a span whose SubmitJob is in flight is terminated by its
dispatcher once named. A span AWS Batch refuses for good ends likewise with the reason
(``array_dispatch.refuse``), with every child not yet submitted: nothing half-written, nothing charged.

An array on a dedicated compute takes no quota: every span is queued ``Admitted`` at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from enum import StrEnum

from aws_lambda_powertools import Logger

from functions.domain.arrays import span_dispatch_id
from functions.domain.jobs import DispatchState, Job
from functions.domain.quotas import AdmissionPlan, Demand, HeldJob, QuotaLimits
from functions.ports import Services

logger = Logger(child=True)


class SpanAdmission(StrEnum):
    """What ``admit_spans`` did with one held array."""

    DONE = "done"  # every child is in a span now: the array left its key's queue
    GONE = "gone"  # the array is gone (deleted, past its record's TTL): the key goes on without it
    BLOCKED = "blocked"  # its next child does not fit: its key stops here (its reason refreshed)
    RACED = "raced"  # a write lost a race or the array moved: the admission re-reads


def admit_spans(  # noqa: PLR0911 - one return per SpanAdmission outcome and path
    services: Services,
    account_id: str,
    held: HeldJob,
    *,
    plan: AdmissionPlan,
    limits: QuotaLimits,
    admitted: list[str],
    refresh_reason: Callable[[HeldJob], None],
) -> SpanAdmission:
    """Admit spans of the held array ``held`` (its key's oldest job in ``plan``'s order) while its next
    child fits, each sized to the room left (``AdmissionPlan.admit_span``) and written with one
    conditional transaction (``JobRepository.admit_span``); appends each span's dispatch name
    (``span_dispatch_id``) to ``admitted``. When the next child does not fit, ``refresh_reason`` gives
    the array its reason with the current numbers.

    Raises ``DependencyFailed`` (DynamoDB failed).
    """
    store = services.store
    parent = store.get_job(held.job_id)
    if parent is None:
        logger.warning("held array gone", job_id=held.job_id)
        return SpanAdmission.GONE
    if parent.is_final or parent.dispatch_state != DispatchState.HELD:
        return SpanAdmission.RACED
    if parent.per_item_parent is not None:
        return _admit_items(services, account_id, held, parent, plan, limits, admitted, refresh_reason)
    size = parent.array_children
    if size - parent.array_admitted != held.children:
        return SpanAdmission.RACED  # read before another writer's span
    current = held
    while True:
        count = plan.admit_span(current, services.array_span_size)
        if count == 0:
            refresh_reason(current)
            return SpanAdmission.BLOCKED
        if not store.admit_span(account_id, current, size, count, limits):
            return SpanAdmission.RACED
        offset = size - current.children
        admitted.append(span_dispatch_id(current.job_id, offset))
        logger.info("array span admitted", job_id=current.job_id, offset=offset, children=count)
        if count == current.children:
            return SpanAdmission.DONE
        child = current.child
        assert child is not None  # admit_span refuses a job that is no array
        demand = current.demand
        current = replace(
            current,
            demand=Demand(demand.key, demand.units - child.units * count, demand.vcpus - child.vcpus * count),
        )


def _admit_items(  # noqa: PLR0917 - admit_spans' own arguments, passed on
    services: Services,
    account_id: str,
    held: HeldJob,
    parent: Job,
    plan: AdmissionPlan,
    limits: QuotaLimits,
    admitted: list[str],
    refresh_reason: Callable[[HeldJob], None],
) -> SpanAdmission:
    """``admit_spans`` for a ``perItem`` array (``logic.item_dependencies``): its released items not
    admitted yet (``array_released`` from ``array_admitted`` on, the children its ``held#`` item
    counts) go in release order, each a span of one at its own index (``JobRepository.admit_item``)."""
    if len(parent.array_released) - parent.array_admitted != held.children:
        return SpanAdmission.RACED  # read before another writer's release or admission
    current = held
    while True:
        if plan.admit_span(current, 1) == 0:
            refresh_reason(current)
            return SpanAdmission.BLOCKED
        if not services.store.admit_item(account_id, current, parent, limits):
            return SpanAdmission.RACED
        offset = parent.array_released[parent.array_admitted]
        admitted.append(span_dispatch_id(current.job_id, offset))
        logger.info("array item admitted", job_id=current.job_id, offset=offset)
        if current.children == 1:
            return SpanAdmission.DONE
        child = current.child
        assert child is not None  # admit_item refuses a job that is no array
        demand = current.demand
        current = replace(
            current, demand=Demand(demand.key, demand.units - child.units, demand.vcpus - child.vcpus)
        )
        parent = replace(parent, array_admitted=parent.array_admitted + 1)
