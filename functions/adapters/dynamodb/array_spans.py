"""DynamoDB: an array's way through the quota and the dispatcher, span by span
(``functions.logic.array_admission``).

An ``Array`` parent submitted through the quota is written ``Held`` with its ``held#`` item
(``QuotaRecords.hold_job``: ``units``/``vcpus`` of every child, plus ``childUnits``/``childVcpus`` of
one), ``arrayAdmitted`` 0 and an empty ``arrayQueue`` map. Every write here is one conditional
UpdateItem or ``TransactWriteItems``:

- ``admit_span``: the parent's ``arrayAdmitted`` moves from the offset read to the span's end and the
  span enters ``arrayQueue`` (``{"<offset>": {"count", "state": "Admitted"}}``); the ``held#`` item
  shrinks by the span's units (or goes, with the last span, when the parent becomes ``Admitted`` and
  loses its waiting reason); the span's units move from queued to in use under the same ``inUse <=
  limit - units`` condition a single job's admission has (``quotas.admit_job``). One transaction: no
  span is admitted twice, none past a limit.
- ``claim_span`` / ``release_span`` / ``record_span``: the dispatcher's claim-before-submit, on the
  span's entry (``Admitted`` → ``Dispatching`` → removed, its Batch id appended to ``arraySpans``).
- ``withdraw_spans``: the children that will never reach AWS Batch (the held remainder and admitted
  spans not claimed) end ``Terminated``, free: the parent's counts move ``Queued`` → ``Terminated``,
  the ranges join ``arrayWithdrawn``, the queued and in-use units go back, the ``held#`` item goes.
- ``child_release_items``: a child's units go back in the transaction that settles it
  (``ArrayRecords.save_child_event``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from functions.adapters.dynamodb.base import LIVE_JOB
from functions.adapters.dynamodb.items import (
    deserialize_item,
    serialize_item,
    serialize_value,
    span_queue_entry,
)
from functions.adapters.dynamodb.quotas import (
    TOTAL_ENTRY,
    QuotaRecords,
    held_entry,
    held_partition,
    usage_counter_update,
    usage_entry,
)
from functions.domain.arrays import unsent_runs
from functions.domain.dependencies import per_item_waiting_reason
from functions.domain.jobs import DispatchState, Job, QueuedSpan
from functions.domain.machine_classes import machine_class
from functions.domain.quotas import Demand, HeldJob, QuotaLimits, demand_of
from functions.domain.status import JobStatus
from functions.domain.timefmt import to_sortable

if TYPE_CHECKING:  # the stubs are a dev dependency; the Lambda runtime has no need of them
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

_FINAL = {":succeeded": JobStatus.SUCCEEDED.value, ":terminated": JobStatus.TERMINATED.value}
_NOT_FINAL = "NOT #status IN (:succeeded, :terminated)"


def child_demand(job: Job) -> Demand:
    """What one child of the array ``job`` (or the child ``job``) holds while it runs."""
    return demand_of(machine_class(job.machine_class), job.geo_zone)


def child_release_items(table: str, child: Job) -> list[TransactWriteItemTypeDef]:
    """The transaction items that give back an ending child's units (unconditionally: the child's own
    conditional write in the same transaction is what makes it happen once). Nothing for a child that
    holds no quota (on a dedicated compute, or of an array submitted before arrays took quota)."""
    if not child.holds_quota:
        return []
    demand = child_demand(child)
    return [
        usage_counter_update(table, child.account_id, usage_entry(demand.key), in_use=-demand.units),
        usage_counter_update(table, child.account_id, TOTAL_ENTRY, in_use=-demand.vcpus),
    ]


class ArraySpanRecords(QuotaRecords):
    """The array-span part of ``DynamoJobStore`` (its jobs and quotas tables)."""

    def _held_item_key(self, parent: Job | HeldJob, account_id: str, demand: Demand) -> dict[str, Any]:
        return serialize_item(
            {"accountId": held_partition(account_id), "entry": held_entry(demand.key, parent.job_id)}
        )

    def admit_span(self, account_id: str, held: HeldJob, size: int, count: int, limits: QuotaLimits) -> bool:
        """Admit the next ``count`` children of the held array ``held`` (of ``size`` children) as one span
        at offset ``size - held.children``, in one transaction (see the module's docstring).

        Returns False, changing nothing, when a limit would be exceeded or the array moved meanwhile (a
        span admitted by another writer, aborted, gone).
        """
        child = held.child
        if child is None or not 1 <= count <= held.children:
            raise ValueError(f"no span of {count} children for job {held.job_id}")
        offset = size - held.children
        units, vcpus = child.units * count, child.vcpus * count
        family_room = limits.limit(child.key) - units
        total_room = limits.total_limit - vcpus
        if family_room < 0 or total_room < 0:
            return False
        last = count == held.children
        span = QueuedSpan(offset, count, DispatchState.ADMITTED)
        sets = ["arrayAdmitted = :next", "arrayQueue.#offset = :span"]
        values: dict[str, Any] = {
            ":next": offset + count,
            ":read": offset,
            ":span": span_queue_entry(span),
            ":held": DispatchState.HELD.value,
            ":liveNow": self._now_epoch(),
            **_FINAL,
        }
        update = "SET " + ", ".join(sets)
        if last:
            update = "SET " + ", ".join([*sets, "dispatchState = :admitted"]) + " REMOVE statusReason"
            values[":admitted"] = DispatchState.ADMITTED.value
        parent_update: dict[str, Any] = {
            "TableName": self._jobs,
            "Key": serialize_item({"jobId": held.job_id}),
            "UpdateExpression": update,
            "ConditionExpression": f"{LIVE_JOB} AND dispatchState = :held AND arrayAdmitted = :read "
            f"AND attribute_not_exists(terminationReason) AND {_NOT_FINAL}",
            "ExpressionAttributeNames": {"#ttl": "ttl", "#offset": str(offset), "#status": "status"},
            "ExpressionAttributeValues": {k: serialize_value(v) for k, v in values.items()},
        }
        held_key = self._held_item_key(held, account_id, child)
        held_item: TransactWriteItemTypeDef
        if last:
            held_item = {
                "Delete": {
                    "TableName": self._quota_table,
                    "Key": held_key,
                    "ConditionExpression": "attribute_exists(accountId)",
                }
            }
        else:
            held_item = {
                "Update": {
                    "TableName": self._quota_table,
                    "Key": held_key,
                    "UpdateExpression": "ADD units :du, vcpus :dv",
                    "ConditionExpression": "units = :units",
                    "ExpressionAttributeValues": {
                        ":du": serialize_value(-units),
                        ":dv": serialize_value(-vcpus),
                        ":units": serialize_value(held.demand.units),
                    },
                }
            }
        items: list[TransactWriteItemTypeDef] = [
            {"Update": parent_update},  # type: ignore[typeddict-item]
            held_item,
            self._counter_update(account_id, usage_entry(child.key), units, -units, at_most=family_room),
            self._counter_update(account_id, TOTAL_ENTRY, vcpus, -vcpus, at_most=total_room),
        ]
        return self._transact_if(items)

    def claim_span(self, parent_id: str, offset: int, now: datetime) -> Job | None:
        """Claim an admitted span for SubmitJob (``Admitted`` → ``Dispatching``, claimed at ``now``) while
        the array is not final and no termination was asked for; the parent after the claim, or None
        when another dispatcher has it, it was sent or withdrawn, or the array is ending.
        ``RecordMissing`` when the job is gone."""
        response = self._update_job(
            parent_id,
            "SET arrayQueue.#offset.#state = :dispatching, arrayQueue.#offset.claimedAt = :now",
            condition=f"arrayQueue.#offset.#state = :admitted AND attribute_not_exists(terminationReason) "
            f"AND {_NOT_FINAL}",
            names={"#offset": str(offset), "#state": "state", "#status": "status"},
            values={
                ":admitted": DispatchState.ADMITTED.value,
                ":dispatching": DispatchState.DISPATCHING.value,
                ":now": to_sortable(now),
                **_FINAL,
            },
            return_new=True,
        )
        return self._live_job(deserialize_item(dict(response["Attributes"])), "span") if response else None

    def release_span(self, parent_id: str, offset: int) -> bool:
        """Give a span's claim back (``Dispatching`` → ``Admitted``). False when it is not claimed."""
        response = self._update_job(
            parent_id,
            "SET arrayQueue.#offset.#state = :admitted REMOVE arrayQueue.#offset.claimedAt",
            condition="arrayQueue.#offset.#state = :dispatching",
            names={"#offset": str(offset), "#state": "state"},
            values={
                ":admitted": DispatchState.ADMITTED.value,
                ":dispatching": DispatchState.DISPATCHING.value,
            },
        )
        return response is not None

    def record_span(self, parent_id: str, offset: int, batch_job_id: str) -> Job | None:
        """Record the Batch id SubmitJob returned for a claimed span: appended to ``arraySpans`` (and the
        parent's ``batchJobId`` if it has none), the span out of the queue. The parent after the write
        (it may be ending: the caller then terminates the span), or None when the span was not claimed.
        ``RecordMissing`` when the job is gone."""
        response = self._update_job(
            parent_id,
            "SET arraySpans = list_append(if_not_exists(arraySpans, :none), :ids), "
            "batchJobId = if_not_exists(batchJobId, :id) REMOVE arrayQueue.#offset",
            condition="arrayQueue.#offset.#state = :dispatching",
            names={"#offset": str(offset), "#state": "state"},
            values={
                ":none": [],
                ":ids": [batch_job_id],
                ":id": batch_job_id,
                ":dispatching": DispatchState.DISPATCHING.value,
            },
            return_new=True,
        )
        return self._live_job(deserialize_item(dict(response["Attributes"])), "span") if response else None

    def withdraw_spans(self, parent: Job, spans: Sequence[QueuedSpan], reason: str, now: datetime) -> bool:
        """End, ``Terminated`` with ``reason`` and free, the children of ``parent`` (as read) that will never
        reach AWS Batch: its held remainder (``arrayAdmitted`` .. size) and ``spans`` (entries of its
        queue, in the state read). One transaction: the parent's counts (``Queued`` → ``Terminated``),
        ``arrayWithdrawn``, ``arrayAdmitted`` = size, the spans out of the queue, the parent no longer
        held (its waiting reason removed); the ``held#`` item deleted and its queued units, and the
        spans' units in use, given back.

        Returns False, changing nothing, when the parent moved since it was read (the caller re-reads).
        ``RecordMissing`` is not raised: a gone parent is False too.
        """
        size = parent.array_children
        unsent = unsent_runs(parent)
        ranges: list[dict[str, Any]] = [
            {"offset": s.offset, "count": s.count, "reason": reason} for s in spans
        ]
        ranges += [{"offset": offset, "count": count, "reason": reason} for offset, count in unsent]
        # The children counted queued on its ``held#`` item (a ``perItem`` array's released, not admitted).
        remaining = (
            size - parent.array_admitted
            if parent.per_item_parent is None
            else len(parent.array_released) - parent.array_admitted
        )
        ended = sum(int(r["count"]) for r in ranges)
        if ended == 0:
            return True
        names: dict[str, str] = {
            "#ttl": "ttl",
            "#status": "status",
            "#c": "childStatusCounts",
            "#queued": JobStatus.QUEUED.value,
            "#terminated": JobStatus.TERMINATED.value,
        }
        values: dict[str, Any] = {
            ":size": size,
            ":read": parent.array_admitted,
            ":ranges": sorted(ranges, key=lambda r: int(r["offset"])),
            ":none": [],
            ":ended": ended,
            ":zero": 0,
            ":admitted": DispatchState.ADMITTED.value,
            ":now": to_sortable(now),
            ":liveNow": self._now_epoch(),
            **_FINAL,
        }
        conditions = [LIVE_JOB, "arrayAdmitted = :read", _NOT_FINAL]
        if parent.per_item_parent is not None:
            conditions += _size_is("arrayReleased", len(parent.array_released), values, ":released")
        removes = ["statusReason"]
        for i, span in enumerate(spans):
            names[f"#o{i}"] = str(span.offset)
            names["#state"] = "state"
            values[f":st{i}"] = span.state.value
            conditions.append(f"arrayQueue.#o{i}.#state = :st{i}")
            removes.append(f"arrayQueue.#o{i}")
        counts = "#c.#queued = #c.#queued - :ended, "
        counts += "#c.#terminated = if_not_exists(#c.#terminated, :zero) + :ended, "
        adds = ""
        if parent.array_containers is not None:
            # Containers that take many items: the withdrawn ones count as settled (they never run);
            # the items they would have claimed end once every container is (``logic.unclaimed_items``).
            counts = ""
            del names["#queued"], names["#terminated"], names["#c"], values[":ended"], values[":zero"]
            values[":containers"] = {
                o + i for r in ranges for o in [int(r["offset"])] for i in range(int(r["count"]))
            }
            adds = " ADD arrayContainersSettled :containers"
        parent_update: dict[str, Any] = {
            "TableName": self._jobs,
            "Key": serialize_item({"jobId": parent.job_id}),
            "UpdateExpression": "SET arrayAdmitted = :size, "
            "arrayWithdrawn = list_append(if_not_exists(arrayWithdrawn, :none), :ranges), "
            + counts
            + "dispatchState = :admitted, lastEventAt = :now REMOVE "
            + ", ".join(removes)
            + adds,
            "ConditionExpression": " AND ".join(conditions),
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": {k: serialize_value(v) for k, v in values.items()},
        }
        items: list[TransactWriteItemTypeDef] = [{"Update": parent_update}]  # type: ignore[typeddict-item]
        if parent.dispatch_state == DispatchState.WAITING and self._quotas:
            # Waiting for a prerequisite, it holds no units: only its guard goes.
            items.append(self.waiting_guard_delete(parent))
        elif parent.compute is None and self._quotas:
            child = child_demand(parent)
            in_use = sum(s.count for s in spans)
            account = parent.account_id
            if remaining > 0:
                items.append(
                    {
                        "Delete": {
                            "TableName": self._quota_table,
                            "Key": self._held_item_key(parent, account, child),
                            "ConditionExpression": "attribute_exists(accountId)",
                        }
                    }
                )
            items += [
                usage_counter_update(
                    self._quota_table,
                    account,
                    usage_entry(child.key),
                    in_use=-child.units * in_use,
                    queued=-child.units * remaining,
                ),
                usage_counter_update(
                    self._quota_table,
                    account,
                    TOTAL_ENTRY,
                    in_use=-child.vcpus * in_use,
                    queued=-child.vcpus * remaining,
                ),
            ]
        return self._transact_if(items)

    # -- a ``perItem`` child array: items released one by one (``logic.item_dependencies``) ----------
    def release_item(self, child: Job, index: int, reason: str) -> bool:
        """Release item ``index`` of the ``perItem`` array ``child`` (its parent's item succeeded): the
        index appended to ``arrayReleased`` (``statusReason`` set to ``reason``) while the array is
        ``Held`` and the index neither released nor ended yet; one child's units added to its ``held#``
        item (created by the first) and counted as queued. One transaction. False, writing nothing,
        when the condition fails (released before, ended, aborted, gone)."""
        demand = child_demand(child)
        account = child.account_id
        job_update: dict[str, Any] = {
            "TableName": self._jobs,
            "Key": serialize_item({"jobId": child.job_id}),
            "UpdateExpression": "SET arrayReleased = list_append(if_not_exists(arrayReleased, :none), :i), "
            "statusReason = :reason",
            "ConditionExpression": f"{LIVE_JOB} AND dispatchState = :held AND {_NOT_FINAL} "
            "AND attribute_not_exists(terminationReason) AND NOT contains(arrayReleased, :index) "
            "AND NOT contains(arrayEndedItems, :index)",
            "ExpressionAttributeNames": {"#ttl": "ttl", "#status": "status"},
            "ExpressionAttributeValues": {
                k: serialize_value(v)
                for k, v in {
                    ":none": [],
                    ":i": [index],
                    ":index": index,
                    ":reason": reason,
                    ":held": DispatchState.HELD.value,
                    ":liveNow": self._now_epoch(),
                    **_FINAL,
                }.items()
            },
        }
        held_update: dict[str, Any] = {
            "TableName": self._quota_table,
            "Key": self._held_item_key(child, account, demand),
            "UpdateExpression": "SET #key = :key, childUnits = :cu, childVcpus = :cv "
            "ADD units :cu, vcpus :cv",
            "ExpressionAttributeNames": {"#key": "key"},
            "ExpressionAttributeValues": {
                ":key": serialize_value(demand.key.name),
                ":cu": serialize_value(demand.units),
                ":cv": serialize_value(demand.vcpus),
            },
        }
        items: list[TransactWriteItemTypeDef] = [
            {"Update": job_update},  # type: ignore[typeddict-item]
            {"Update": held_update},  # type: ignore[typeddict-item]
            self._counter_update(account, usage_entry(demand.key), 0, demand.units),
            self._counter_update(account, TOTAL_ENTRY, 0, demand.vcpus),
        ]
        return self._transact_if(items)

    def end_items(self, child: Job, indices: Sequence[int], now: datetime) -> bool:
        """End items ``indices`` of the ``perItem`` array ``child`` (as read) ``Terminated``, free (their
        parent's items did not succeed; they never held units): added to ``arrayEndedItems``, the counts
        moved ``Queued`` → ``Terminated``, and, when every item is then admitted or ended, the array no
        longer ``Held``. One UpdateItem conditional on the array as read (its released, admitted and
        ended items). False, writing nothing, when it moved meanwhile (the caller re-reads)."""
        if not indices:
            return True
        size = child.array_size or 0
        names: dict[str, str] = {
            "#status": "status",
            "#c": "childStatusCounts",
            "#queued": JobStatus.QUEUED.value,
            "#terminated": JobStatus.TERMINATED.value,
        }
        values: dict[str, Any] = {
            ":ended": len(indices),
            ":zero": 0,
            ":now": to_sortable(now),
            ":held": DispatchState.HELD.value,
            ":read": child.array_admitted,
            **_FINAL,
        }
        conditions = [
            "dispatchState = :held",
            _NOT_FINAL,
            "attribute_not_exists(terminationReason)",
            "arrayAdmitted = :read",
            *_size_is("arrayReleased", len(child.array_released), values, ":released"),
            *_size_is("arrayEndedItems", len(child.array_ended_items), values, ":endedRead"),
        ]
        update = (
            "SET #c.#queued = #c.#queued - :ended, "
            "#c.#terminated = if_not_exists(#c.#terminated, :zero) + :ended, lastEventAt = :now"
        )
        complete = len(child.array_ended_items) + len(indices) + len(
            child.array_released
        ) == size and child.array_admitted == len(child.array_released)
        if complete:
            update += ", dispatchState = :admitted"
            values[":admitted"] = DispatchState.ADMITTED.value
        update += " ADD arrayEndedItems :items"
        if complete:
            update += " REMOVE statusReason"
        response = self._update_job(
            child.job_id,
            update,
            condition=" AND ".join(conditions),
            names=names,
            values={**values, ":items": set(indices)},
        )
        return response is not None

    def admit_item(self, account_id: str, held: HeldJob, parent: Job, limits: QuotaLimits) -> bool:
        """Admit the next released item of the held ``perItem`` array ``parent`` (as read: its
        ``arrayReleased[arrayAdmitted]``) as a span of one at its own index, in one transaction: the
        parent's ``arrayAdmitted`` moves on by one and the span enters ``arrayQueue``; its ``held#``
        item shrinks by one child (goes with the last released one, while no release came meanwhile);
        the child's units move from queued to in use within ``limits``. The array stops being ``Held``
        when every item is then admitted or ended. False, changing nothing, when a limit would be
        exceeded or the array moved."""
        child = held.child
        read = parent.array_admitted
        if child is None or read >= len(parent.array_released):
            raise ValueError(f"no released item to admit for job {held.job_id}")
        offset = parent.array_released[read]
        family_room = limits.limit(child.key) - child.units
        total_room = limits.total_limit - child.vcpus
        if family_room < 0 or total_room < 0:
            return False
        last = read + 1 == len(parent.array_released)
        values: dict[str, Any] = {
            ":next": read + 1,
            ":read": read,
            ":span": span_queue_entry(QueuedSpan(offset, 1, DispatchState.ADMITTED)),
            ":held": DispatchState.HELD.value,
            ":liveNow": self._now_epoch(),
            **_FINAL,
        }
        conditions = [
            LIVE_JOB,
            "dispatchState = :held",
            "arrayAdmitted = :read",
            "attribute_not_exists(terminationReason)",
            _NOT_FINAL,
            *_size_is("arrayReleased", len(parent.array_released), values, ":released"),
        ]
        update = "SET arrayAdmitted = :next, arrayQueue.#offset = :span"
        if last and len(parent.array_released) + len(parent.array_ended_items) == parent.array_size:
            conditions += _size_is("arrayEndedItems", len(parent.array_ended_items), values, ":endedRead")
            update += ", dispatchState = :admitted REMOVE statusReason"
            values[":admitted"] = DispatchState.ADMITTED.value
        elif last:
            # Nothing released waits for quota now: the array waits for its parent's items again.
            update += ", statusReason = :reason"
            values[":reason"] = per_item_waiting_reason(
                parent.per_item_parent or "", len(parent.array_released), parent.array_size or 0
            )
        parent_update: dict[str, Any] = {
            "TableName": self._jobs,
            "Key": serialize_item({"jobId": held.job_id}),
            "UpdateExpression": update,
            "ConditionExpression": " AND ".join(conditions),
            "ExpressionAttributeNames": {"#ttl": "ttl", "#offset": str(offset), "#status": "status"},
            "ExpressionAttributeValues": {k: serialize_value(v) for k, v in values.items()},
        }
        held_key = self._held_item_key(held, account_id, child)
        held_item: TransactWriteItemTypeDef = (
            {
                "Delete": {
                    "TableName": self._quota_table,
                    "Key": held_key,
                    "ConditionExpression": "units = :units",
                    "ExpressionAttributeValues": {":units": serialize_value(child.units)},
                }
            }
            if last
            else {
                "Update": {
                    "TableName": self._quota_table,
                    "Key": held_key,
                    "UpdateExpression": "ADD units :du, vcpus :dv",
                    "ConditionExpression": "units = :units",
                    "ExpressionAttributeValues": {
                        ":du": serialize_value(-child.units),
                        ":dv": serialize_value(-child.vcpus),
                        ":units": serialize_value(held.demand.units),
                    },
                }
            }
        )
        items: list[TransactWriteItemTypeDef] = [
            {"Update": parent_update},  # type: ignore[typeddict-item]
            held_item,
            self._counter_update(
                account_id, usage_entry(child.key), child.units, -child.units, at_most=family_room
            ),
            self._counter_update(account_id, TOTAL_ENTRY, child.vcpus, -child.vcpus, at_most=total_room),
        ]
        return self._transact_if(items)


def _size_is(attribute: str, size: int, values: dict[str, Any], name: str) -> list[str]:
    """A condition that the list or set ``attribute`` holds ``size`` entries (absent for 0), its value
    added to ``values`` as ``name``."""
    if size == 0:
        return [f"attribute_not_exists({attribute})"]
    values[name] = size
    return [f"size({attribute}) = {name}"]
