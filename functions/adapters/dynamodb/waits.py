"""DynamoDB: jobs waiting for prerequisites (``functions.domain.prerequisites``), on the quotas table.

A job that waits is three kinds of item:

- the job itself (``dispatchState`` ``Waiting``, ``waitingFor`` its prerequisites' ids);
- its guard ``waiting#<jobId>`` in the account's held partition (``quotas.held_partition``), written
  with the job; its release (into ``Held``) and its ending each delete it conditionally in their own
  transaction, so exactly one of them happens, whatever races;
- one wait item per prerequisite that is no parent (a parent lists its children on its own record,
  ``dependencies``), partition ``wait|<prerequisite id>``, sort key the job id: the
  prerequisite's waiters are one Query of its partition (strongly consistent), however many
  accounts' jobs wait for it. They are an index only: written after the job, deleted after its
  release or end (and whenever a Query finds one whose job no longer waits), so one left behind by a
  crash costs a read, never a wrong release.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from functions.adapters.dynamodb.base import LIVE_JOB, store_errors
from functions.adapters.dynamodb.items import job_to_item, serialize_item, serialize_value
from functions.adapters.dynamodb.quotas import QuotaRecords, held_partition, waiting_entry
from functions.domain.jobs import DispatchState, Job
from functions.domain.prerequisites import Prerequisite, PrerequisiteKind
from functions.domain.status import JobStatus

if TYPE_CHECKING:  # the stubs are a dev dependency; the Lambda runtime has no need of them
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

#: The partition prefix of a prerequisite's wait items.
WAIT_PREFIX = "wait|"
# BatchWriteItem takes at most 25 requests (DynamoDB API reference, BatchWriteItem).
_BATCH_WRITE_LIMIT = 25
# What a release writes of the job (the rest of the item is as submitted).
_RELEASED_FIELDS = (
    "dispatchState",
    "statusReason",
    "environment",
    "waitingFor",
    "arrayAdmitted",
    "arrayQueue",
)


def wait_partition(prerequisite: Prerequisite) -> str:
    """``wait|<prerequisite id>``: where the wait items of ``prerequisite`` live."""
    return WAIT_PREFIX + prerequisite.id


class WaitRecords(QuotaRecords):
    """The waiting part of ``DynamoJobStore`` (on its ``quotas_table``)."""

    def create_waiting_job(self, job: Job) -> None:
        """Create ``job`` (``dispatchState`` ``Waiting``) with its guard, in one transaction, then its
        wait items. ``ConditionFailed`` when the job id exists (nothing written)."""
        items: list[TransactWriteItemTypeDef] = [
            {
                "Put": {
                    "TableName": self._jobs,
                    "Item": serialize_item(job_to_item(job)),
                    "ConditionExpression": "attribute_not_exists(jobId)",
                }
            },
            {
                "Put": {
                    "TableName": self._quota_table,
                    "Item": serialize_item(
                        {"accountId": held_partition(job.account_id), "entry": waiting_entry(job.job_id)}
                    ),
                }
            },
        ]
        with store_errors("TransactWriteItems"):
            self._db.transact_write_items(TransactItems=items)
        self._write_waits(
            [
                {
                    "PutRequest": {
                        "Item": self._wait_key(p, job.job_id) | {"jobAccount": {"S": job.account_id}}
                    }
                }
                for p in job.waiting_for
                if p.kind is not PrerequisiteKind.JOB
            ]
        )

    def list_waiters(self, prerequisite: Prerequisite) -> Iterator[str]:
        """The ids of the jobs with a wait item for ``prerequisite``, oldest first (strongly consistent,
        every page); some may no longer wait (their items are deleted after the fact)."""
        kwargs: dict[str, Any] = {
            "TableName": self._quota_table,
            "KeyConditionExpression": "accountId = :p",
            "ExpressionAttributeValues": {":p": serialize_value(wait_partition(prerequisite))},
            "ProjectionExpression": "entry",
            "ConsistentRead": True,
        }
        for item in self._query(**kwargs):
            yield str(item["entry"])

    def delete_waits(self, job_id: str, prerequisites: Sequence[Prerequisite]) -> None:
        """Delete the wait items of ``job_id`` for ``prerequisites`` (absent ones are no error)."""
        self._write_waits([{"DeleteRequest": {"Key": self._wait_key(p, job_id)}} for p in prerequisites])

    def release_waiting_job(self, released: Job) -> bool:
        """Write the release of a waiting job, in one transaction: the job as ``released`` has it (its
        ``dispatchState`` ``Held``, or ``Admitted`` on a dedicated compute; its ``statusReason``, its
        ``environment``; ``waitingFor`` removed) only while it is still ``Waiting``, alive and not
        final; its guard deleted; held, its ``held#`` item written and its units counted as queued
        (``QuotaRecords.hold_items``).

        Returns False, writing nothing, when the job no longer waits (released or ended by another
        writer) or is gone.
        """
        item = job_to_item(released)
        names = {f"#{f}": f for f in _RELEASED_FIELDS}
        present = [f for f in _RELEASED_FIELDS if item.get(f) is not None]
        absent = [f for f in _RELEASED_FIELDS if item.get(f) is None]
        expression = "SET " + ", ".join(f"#{f} = :{f}" for f in present)
        if absent:
            expression += " REMOVE " + ", ".join(f"#{f}" for f in absent)
        update: dict[str, Any] = {
            "TableName": self._jobs,
            "Key": serialize_item({"jobId": released.job_id}),
            "UpdateExpression": expression,
            "ConditionExpression": f"{LIVE_JOB} AND #dispatchState = :waiting AND NOT #status IN (:s, :t)",
            "ExpressionAttributeNames": {**names, "#ttl": "ttl", "#status": "status"},
            "ExpressionAttributeValues": {
                **{f":{f}": serialize_value(item[f]) for f in present},
                ":waiting": serialize_value(DispatchState.WAITING.value),
                ":s": serialize_value(JobStatus.SUCCEEDED.value),
                ":t": serialize_value(JobStatus.TERMINATED.value),
                ":liveNow": serialize_value(self._now_epoch()),
            },
        }
        items: list[TransactWriteItemTypeDef] = [
            {"Update": update},  # type: ignore[typeddict-item]
            self.waiting_guard_delete(released),
        ]
        if released.dispatch_state == DispatchState.HELD:
            items += self.hold_items(released)
        return self._transact_if(items)

    def set_wait_reason(self, job_id: str, reason: str, *, settled: frozenset[str] = frozenset()) -> None:
        """Set a waiting job's ``statusReason`` and add ``settled`` to its ``settledParents`` (no-op once
        it no longer waits), in one UpdateItem. ``RecordMissing`` when the job is gone."""
        update = "SET statusReason = :r"
        values: dict[str, Any] = {":r": reason, ":waiting": DispatchState.WAITING.value}
        if settled:
            update += " ADD settledParents :settled"
            values[":settled"] = set(settled)
        self._update_job(job_id, update, condition="dispatchState = :waiting", values=values)

    # -- the wait items -----------------------------------------------------------------------------
    def _wait_key(self, prerequisite: Prerequisite, job_id: str) -> dict[str, Any]:
        return serialize_item({"accountId": wait_partition(prerequisite), "entry": job_id})

    def _write_waits(self, requests: list[dict[str, Any]]) -> None:
        """BatchWriteItem ``requests`` on the quotas table, 25 at a time, unprocessed ones sent again."""
        for start in range(0, len(requests), _BATCH_WRITE_LIMIT):
            pending: dict[str, Any] = {self._quota_table: requests[start : start + _BATCH_WRITE_LIMIT]}
            while pending:
                with store_errors("BatchWriteItem"):
                    response = self._db.batch_write_item(RequestItems=pending)
                pending = dict(response.get("UnprocessedItems") or {})
