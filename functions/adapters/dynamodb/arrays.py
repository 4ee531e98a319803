"""The DynamoDB store's array-job writes (``functions.domain.arrays``): a parent's spans, a child's
event rolled into its parent in one transaction, the parent's start and finish, and batched reads."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

from botocore.exceptions import ClientError

from functions.adapters.dynamodb.array_spans import child_release_items
from functions.adapters.dynamodb.base import LIVE_JOB, store_errors
from functions.adapters.dynamodb.items import (
    METER_PARTITION,
    deserialize_item,
    job_to_item,
    serialize_item,
    serialize_value,
)
from functions.adapters.dynamodb.ledger import AccountsAndLedger
from functions.domain.credits import Charge
from functions.domain.errors import ConditionFailed
from functions.domain.item_reports import MAX_CONTAINER_ITEMS
from functions.domain.jobs import Job, LedgerEntry, Transition
from functions.domain.status import JobStatus
from functions.domain.timefmt import to_sortable

if TYPE_CHECKING:  # the stubs are a dev dependency; the Lambda runtime has no need of them
    from mypy_boto3_dynamodb.type_defs import (
        KeysAndAttributesTypeDef,
        TransactWriteItemTypeDef,
        UpdateTypeDef,
    )

# BatchGetItem takes at most 100 keys a call (DynamoDB API reference, BatchGetItem).
BATCH_GET_KEYS = 100


class ArrayRecords(AccountsAndLedger):
    """The array half of ``JobRepository`` (parents, children and their roll-up)."""

    def set_array_spans(self, job_id: str, batch_job_ids: Sequence[str]) -> None:
        """Record an array's Batch job ids (``arraySpans``, offset order) and the first as its
        ``batchJobId``. ``RecordMissing`` when the job is gone."""
        self._update_job(
            job_id,
            "SET arraySpans = :spans, batchJobId = if_not_exists(batchJobId, :first)",
            values={":spans": list(batch_job_ids), ":first": batch_job_ids[0]},
        )

    def save_child_event(
        self,
        transition: Transition,
        *,
        created: bool,
        charge: Charge | None,
        entry: LedgerEntry | None,
        settled_at_most: Decimal | None,
        now: datetime,
    ) -> None:
        """The child's write, its parent's counters, and a settlement's ledger entry, balance change
        and quota release (``array_spans.child_release_items``), in one ``TransactWriteItems`` (see
        ``JobRepository.save_child_event``).

        The parent's counters move with ``SET #c.#from = #c.#from - 1, #c.#to = #c.#to + 1`` (no
        read-modify-write of the parent, so siblings' events do not conflict); the child's own
        condition (absent, or at the event position it was read at) is what makes a replay a no-op.

        Raises ``RecordMissing`` when the parent is gone, ``ConditionFailed`` on any other lost race,
        ``ValueError`` for a job that is not an array child.
        """
        child = transition.after
        if charge is not None:
            child = replace(child, credits_spent=charge.credits)
            transition = replace(transition, after=child)
        parent_id = child.parent_job_id
        if parent_id is None:
            raise ValueError(f"job {child.job_id} is not an array child")
        child_item: TransactWriteItemTypeDef
        if created:
            child_item = {
                "Put": {
                    "TableName": self._jobs,
                    "Item": serialize_item(job_to_item(replace(child, last_event_at=now))),
                    "ConditionExpression": "attribute_not_exists(jobId)",
                }
            }
        else:
            child_item = {"Update": self._transition_update(transition, now)}
        items: list[TransactWriteItemTypeDef] = [
            child_item,
            {"Update": self._parent_rollup(transition, charge, settled_at_most, now)},
        ]
        if entry is not None:
            items += self._charge_items(entry)
        if transition.settles and self._quotas:
            # The child's units go back as it ends (``array_spans``; nothing for one holding none).
            items += child_release_items(self._quotas, child)
        self._transact(items, parent_id, self._parent_missing)

    def save_container_items(
        self,
        parent_id: str,
        items: Sequence[Job],
        *,
        container: int | None,
        credits: Decimal,
        entry: LedgerEntry | None,
        release: Job | None,
        settled_at_most: Decimal | None,
        now: datetime,
    ) -> None:
        """Items of an ended container, their parent's roll-up, the container's charge and quota
        release in one ``TransactWriteItems`` (see ``JobRepository.save_container_items``).

        Each item is put only if absent; the parent's counters move with
        ``SET #c.Queued = #c.Queued - :n, #c.#to = if_not_exists(#c.#to, :zero) + :k`` per final
        status (no read of the parent); with ``container``, ``ADD arrayContainersSettled`` under
        ``NOT contains(...)`` (the guard that makes the charge and the quota release happen once)
        and ``creditsSettled`` grows by ``credits`` (at most ``settled_at_most`` before it, with a cap).
        """
        if len(items) > MAX_CONTAINER_ITEMS:
            raise ValueError(f"at most {MAX_CONTAINER_ITEMS} items a transaction, not {len(items)}")
        writes: list[TransactWriteItemTypeDef] = [
            {
                "Put": {
                    "TableName": self._jobs,
                    "Item": serialize_item(job_to_item(replace(item, last_event_at=now))),
                    "ConditionExpression": "attribute_not_exists(jobId)",
                }
            }
            for item in items
        ]
        sets = ["lastEventAt = :now"]
        names: dict[str, str] = {"#ttl": "ttl"}
        values: dict[str, Any] = {":now": to_sortable(now), ":liveNow": self._now_epoch()}
        moved = Counter(item.status.value for item in items)
        if moved:
            names.update({"#c": "childStatusCounts", "#from": JobStatus.QUEUED.value})
            values.update({":moved": len(items), ":zero": 0})
            sets.append("#c.#from = #c.#from - :moved")
            for position, (status, count) in enumerate(sorted(moved.items())):
                names[f"#to{position}"] = status
                values[f":to{position}"] = count
                sets.append(f"#c.#to{position} = if_not_exists(#c.#to{position}, :zero) + :to{position}")
        condition = LIVE_JOB
        adds = ""
        if container is not None:
            condition += " AND NOT contains(arrayContainersSettled, :container)"
            values.update({":container": container, ":containers": {container}})
            adds = " ADD arrayContainersSettled :containers"
        if credits > 0:
            sets.append("creditsSettled = if_not_exists(creditsSettled, :none) + :credits")
            values.update({":none": Decimal(0), ":credits": credits})
            if settled_at_most is not None:
                condition += " AND creditsSettled <= :most"
                values[":most"] = settled_at_most
        parent: TransactWriteItemTypeDef = {
            "Update": {
                "TableName": self._jobs,
                "Key": serialize_item({"jobId": parent_id}),
                "UpdateExpression": "SET " + ", ".join(sets) + adds,
                "ConditionExpression": condition,
                "ExpressionAttributeNames": names,
                "ExpressionAttributeValues": {k: serialize_value(v) for k, v in values.items()},
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        }
        # The parent second, as in ``save_child_event``: ``_parent_missing`` reads its cancellation.
        writes.insert(min(1, len(writes)), parent)
        if entry is not None:
            writes += self._charge_items(entry)
        if release is not None and self._quotas:
            writes += child_release_items(self._quotas, release)
        self._transact(writes, parent_id, self._container_parent_missing(len(items)))

    def _container_parent_missing(self, items: int) -> Callable[[ConditionFailed], bool]:
        """``_parent_missing`` for ``save_container_items``: the parent is its first action when it
        writes no item, else its second."""
        if items:
            return self._parent_missing
        return lambda exc: self._parent_missing(exc, position=0)

    def _parent_rollup(
        self, transition: Transition, charge: Charge | None, settled_at_most: Decimal | None, now: datetime
    ) -> UpdateTypeDef:
        """The parent's half of ``save_child_event``: counters, settled credits, ``lastEventAt``."""
        before, after = transition.before.status, transition.after.status
        sets = ["lastEventAt = :now"]
        names: dict[str, str] = {"#ttl": "ttl"}
        values: dict[str, Any] = {":now": to_sortable(now), ":liveNow": self._now_epoch()}
        if before != after:
            sets += ["#c.#from = #c.#from - :one", "#c.#to = if_not_exists(#c.#to, :zero) + :one"]
            names.update({"#c": "childStatusCounts", "#from": before.value, "#to": after.value})
            values.update({":one": 1, ":zero": 0})
        condition = LIVE_JOB
        if charge is not None and charge.credits > 0:
            sets.append("creditsSettled = if_not_exists(creditsSettled, :none) + :credits")
            values.update({":none": Decimal(0), ":credits": charge.credits})
            if settled_at_most is not None:
                condition += " AND creditsSettled <= :most"
                values[":most"] = settled_at_most
        return {
            "TableName": self._jobs,
            "Key": serialize_item({"jobId": transition.after.parent_job_id}),
            "UpdateExpression": "SET " + ", ".join(sets),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": {k: serialize_value(v) for k, v in values.items()},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }

    def _parent_missing(self, exc: ConditionFailed, position: int = 1) -> bool:
        """True when ``save_child_event`` failed because the parent (the transaction's action at
        ``position``: its second) is absent or past its TTL."""
        cause = exc.__cause__
        if not isinstance(cause, ClientError):
            return False
        response: dict[str, Any] = dict(cause.response)
        reasons: list[Any] = list(response.get("CancellationReasons") or [])
        if len(reasons) <= position or reasons[position].get("Code") != "ConditionalCheckFailed":
            return False
        old = reasons[position].get("Item")
        if not old:
            return True
        ttl = deserialize_item(dict(old)).get("ttl")
        return ttl is not None and int(ttl) <= self._now_epoch()

    def start_array(
        self, job_id: str, started_at: datetime, now: datetime, *, keep_reason: bool = False
    ) -> bool:
        """Queued → Running for an array parent whose first child started (history gets Starting
        and Running, so both notifications are owed once); with ``keep_reason``, its ``statusReason``
        (the quota reason of an array with children still held) stays. ``RecordMissing`` when it is
        gone."""
        started = self._update_job(
            job_id,
            "SET #s = :running, statusHistory = list_append(statusHistory, :entered), startedAt = :at, "
            "meterPartition = :metered, lastEventAt = :now" + ("" if keep_reason else " REMOVE statusReason"),
            condition="#s = :queued",
            names={"#s": "status"},
            values={
                ":running": JobStatus.RUNNING.value,
                ":queued": JobStatus.QUEUED.value,
                ":entered": [JobStatus.STARTING.value, JobStatus.RUNNING.value],
                ":at": to_sortable(started_at),
                ":metered": METER_PARTITION,
                ":now": to_sortable(now),
            },
        )
        return started is not None

    def finish_array(self, parent: Job, now: datetime) -> bool:
        """Store the parent's final status and ``creditsSpent = creditsSettled``, conditional on it
        not being final and on ``creditsSettled`` being what the outcome was computed with.
        ``RecordMissing`` when it is gone."""
        item = job_to_item(replace(parent, credits_spent=parent.credits_settled, last_event_at=now))
        fields = ["status", "statusReason", "statusHistory", "startedAt", "completedAt", "creditsSpent"]
        sets = [f"#{f} = :{f}" for f in fields if item.get(f) is not None] + ["lastEventAt = :now"]
        removes = [f"#{f}" for f in fields if item.get(f) is None] + ["meterPartition", "openPartition"]
        finished = self._update_job(
            parent.job_id,
            "SET " + ", ".join(sets) + " REMOVE " + ", ".join(removes),
            condition="NOT #status IN (:succeeded, :terminated) AND creditsSettled = :settled",
            names={f"#{f}": f for f in fields},
            values={
                **{f":{f}": item[f] for f in fields if item.get(f) is not None},
                ":now": to_sortable(now),
                ":settled": parent.credits_settled,
                ":succeeded": JobStatus.SUCCEEDED.value,
                ":terminated": JobStatus.TERMINATED.value,
            },
        )
        return finished is not None

    def get_jobs(self, job_ids: Sequence[str]) -> list[Job]:
        """The live jobs among ``job_ids``: BatchGetItem, 100 keys a call, strongly consistent, with
        its unprocessed keys asked again. An unreadable item is logged and left out."""
        jobs: list[Job] = []
        unique = list(dict.fromkeys(job_ids))
        for start in range(0, len(unique), BATCH_GET_KEYS):
            keys = [serialize_item({"jobId": job_id}) for job_id in unique[start : start + BATCH_GET_KEYS]]
            request: dict[str, KeysAndAttributesTypeDef] = {
                self._jobs: {"Keys": keys, "ConsistentRead": True}
            }
            while request:
                with store_errors("BatchGetItem"):
                    response = self._db.batch_get_item(RequestItems=request)
                found = response.get("Responses", {}).get(self._jobs, [])
                items = (deserialize_item(dict(item)) for item in found)
                jobs += list(self._jobs_of(items, None))
                # The unprocessed keys come back in the request's own shape (BatchGetItem reference).
                request = cast("dict[str, KeysAndAttributesTypeDef]", response.get("UnprocessedKeys") or {})
        return jobs
