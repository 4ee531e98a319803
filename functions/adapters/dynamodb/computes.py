"""Dedicated computes (``ComputeRepository``) on the ``Computes`` table, with their charges on the
job store's ``Ledger`` and ``Accounts`` tables.

Items of one account (partition ``accountId``):

- ``compute#<name>``: one compute; ``version`` guards every write; ``computePartition``/``computeKey``
  put it in the sparse ``allComputes`` index the meter reads.

The quota a compute reserves lives on the quotas table's usage counters (``usage#<Family>#<Zone>`` and
``usage#total``: ``reserved``, counted in ``inUse`` too; ``functions.adapters.dynamodb.quotas``), moved
in the same ``TransactWriteItems`` as the compute's creation (conditional on the limits), its failure
and its deletion, so a compute and its reservation never exist one without the other.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, time
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from functions.adapters.dynamodb.base import store_errors
from functions.adapters.dynamodb.items import deserialize_item, entry_to_item, serialize_item, serialize_value
from functions.adapters.dynamodb.quotas import reserve_items, unreserve_items
from functions.domain.computes import Compute, ComputeStatus, DailySchedule, Schedules
from functions.domain.credits import quantize_credits
from functions.domain.errors import ConditionFailed, UnreadableRecord
from functions.domain.jobs import LedgerEntry
from functions.domain.machine_classes import GeoZone
from functions.domain.quotas import Demand, QuotaLimits
from functions.domain.timefmt import from_sortable, to_sortable

if TYPE_CHECKING:  # the stubs are a dev dependency; the Lambda runtime has no need of them
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

COMPUTE_PARTITION = "computes"


def _key(account_id: str, name: str) -> dict[str, Any]:
    return {"accountId": account_id, "entry": f"compute#{name}"}


def _opt_time(value: datetime | None) -> str | None:
    return to_sortable(value) if value is not None else None


def _schedules_json(schedules: Schedules) -> str:
    return json.dumps(
        {
            "idleStopMinutes": schedules.idle_stop_minutes,
            "daily": [
                {
                    "start": d.start.strftime("%H:%M") if d.start else None,
                    "stop": d.stop.strftime("%H:%M") if d.stop else None,
                    "timeZone": d.time_zone,
                }
                for d in schedules.daily
            ],
        }
    )


def _schedules_from_json(text: str) -> Schedules:
    def clock(value: str | None) -> time | None:
        return time.fromisoformat(value) if value else None

    data = json.loads(text)
    return Schedules(
        idle_stop_minutes=data.get("idleStopMinutes"),
        daily=tuple(DailySchedule(clock(d["start"]), clock(d["stop"]), d["timeZone"]) for d in data["daily"]),
    )


def compute_to_item(compute: Compute) -> dict[str, Any]:
    """The item (plain values) of a compute; None values are left out when serialized."""
    return {
        **_key(compute.account_id, compute.name),
        "computePartition": COMPUTE_PARTITION,
        "computeKey": f"{compute.account_id}#{compute.name}",
        "name": compute.name,
        "machineClass": compute.machine_class,
        "geoZone": compute.geo_zone.value,
        "count": compute.count,
        "createdAt": to_sortable(compute.created_at),
        "status": compute.status.value,
        "statusReason": compute.status_reason,
        "schedules": _schedules_json(compute.schedules),
        "version": compute.version,
        "restartPending": compute.start_pending,
        "runningSince": _opt_time(compute.running_since),
        "settledUntil": _opt_time(compute.settled_until),
        "lastActivityAt": _opt_time(compute.last_activity_at),
        "creditsSpent": compute.credits_spent,
        "runningSeconds": compute.running_seconds,
        "scheduleCheckedAt": _opt_time(compute.schedule_checked_at),
        "quotaReserved": compute.quota_reserved,
    }


def compute_from_item(item: dict[str, Any]) -> Compute:
    """The compute of a plain item. Raises ``UnreadableRecord`` for an item that is not a whole compute."""

    def when(name: str) -> datetime | None:
        value = item.get(name)
        return from_sortable(value) if value else None

    try:
        return Compute(
            account_id=item["accountId"],
            name=item["name"],
            machine_class=item["machineClass"],
            geo_zone=GeoZone(item["geoZone"]),
            count=int(item["count"]),
            created_at=from_sortable(item["createdAt"]),
            status=ComputeStatus(item["status"]),
            status_reason=item.get("statusReason"),
            schedules=_schedules_from_json(item["schedules"]),
            version=int(item["version"]),
            start_pending=bool(item.get("restartPending", False)),
            running_since=when("runningSince"),
            settled_until=when("settledUntil"),
            last_activity_at=when("lastActivityAt"),
            credits_spent=quantize_credits(Decimal(item.get("creditsSpent", 0))),
            running_seconds=int(item.get("runningSeconds", 0)),
            schedule_checked_at=when("scheduleCheckedAt"),
            quota_reserved=bool(item.get("quotaReserved", True)),
        )
    except (KeyError, ValueError, TypeError) as exc:
        key = f"{item.get('accountId')}/{item.get('entry')}"
        raise UnreadableRecord(f"compute item {key} is incomplete: {exc!r}", key=key) from None


class DynamoComputeStore:
    """``ComputeRepository`` on DynamoDB.

    Parameters
    ----------
    client : DynamoDBClient
        The home region's client.
    computes_table, accounts_table, ledger_table, quotas_table : str
        Table names (the others are the job store's: a compute's charge moves the same balance, its
        reservation the same quota counters).
    """

    def __init__(
        self,
        client: DynamoDBClient,
        computes_table: str,
        accounts_table: str,
        ledger_table: str,
        quotas_table: str,
    ):
        self._db = client
        self._computes = computes_table
        self._accounts = accounts_table
        self._ledger = ledger_table
        self._quotas = quotas_table

    # -- reads ------------------------------------------------------------------------------------------
    def get_compute(self, account_id: str, name: str) -> Compute | None:
        """The compute (strongly consistent), or None. Raises ``UnreadableRecord`` for a partial item."""
        with store_errors("GetItem"):
            response = self._db.get_item(
                TableName=self._computes, Key=serialize_item(_key(account_id, name)), ConsistentRead=True
            )
        item = response.get("Item")
        return compute_from_item(deserialize_item(item)) if item else None

    def _query(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        while True:
            with store_errors("Query"):
                page = self._db.query(**kwargs)
            for item in page.get("Items", []):
                yield deserialize_item(item)
            if not page.get("LastEvaluatedKey"):
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def list_computes(self, account_id: str) -> list[Compute]:
        """The account's computes by name (strongly consistent)."""
        items = self._query(
            TableName=self._computes,
            KeyConditionExpression="accountId = :a AND begins_with(#e, :p)",
            ExpressionAttributeNames={"#e": "entry"},
            ExpressionAttributeValues={":a": serialize_value(account_id), ":p": serialize_value("compute#")},
            ConsistentRead=True,
        )
        return [compute_from_item(item) for item in items]

    def list_all_computes(self) -> Iterator[Compute]:
        """Every compute, through the sparse ``allComputes`` index (eventually consistent: the meter
        re-reads each before it writes)."""
        items = self._query(
            TableName=self._computes,
            IndexName="allComputes",
            KeyConditionExpression="computePartition = :p",
            ExpressionAttributeValues={":p": serialize_value(COMPUTE_PARTITION)},
        )
        for item in items:
            yield compute_from_item(item)

    # -- writes -----------------------------------------------------------------------------------------
    def create_compute(self, compute: Compute, reservation: Demand, limits: QuotaLimits) -> None:
        """Put the compute (only if absent) and reserve its quota (only while the account's jobs and
        computes leave room for it within ``limits``) in one transaction.

        Raises ``ConditionFailed`` when the name is taken or the reservation does not fit (nothing is
        written: the caller re-reads to tell which).
        """
        with store_errors("TransactWriteItems"):
            self._db.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": self._computes,
                            "Item": serialize_item(compute_to_item(compute)),
                            "ConditionExpression": "attribute_not_exists(accountId)",
                        }
                    },
                    *reserve_items(self._quotas, compute.account_id, reservation, limits),
                ]
            )

    def _versioned_put(self, before: Compute, after: Compute) -> tuple[Compute, TransactWriteItemTypeDef]:
        stored = replace(after, version=before.version + 1)
        return stored, {
            "Put": {
                "TableName": self._computes,
                "Item": serialize_item(compute_to_item(stored)),
                "ConditionExpression": "#v = :v",
                "ExpressionAttributeNames": {"#v": "version"},
                "ExpressionAttributeValues": {":v": serialize_value(before.version)},
            }
        }

    def save_compute(self, before: Compute, after: Compute, release: Demand | None = None) -> Compute:
        """Store ``after`` at version ``before.version + 1``, giving ``release`` (the reservation of a
        compute that fails) back in the same transaction. Raises ``ConditionFailed`` on a lost race (or
        when the compute is gone)."""
        stored, put = self._versioned_put(before, after)
        if release is None:
            with store_errors("PutItem"):
                self._db.put_item(**put["Put"])
            return stored
        with store_errors("TransactWriteItems"):
            self._db.transact_write_items(
                TransactItems=[put, *unreserve_items(self._quotas, before.account_id, release)]
            )
        return stored

    def settle_compute(
        self, before: Compute, after: Compute, entry: LedgerEntry, release: Demand | None = None
    ) -> Compute:
        """Store ``after``, the ``compute`` ledger entry (put only if absent: its id is deterministic),
        the balance change (conditional on the exact balance before) and the release of ``release`` (a
        compute that fails while Running), in one transaction.

        Raises ``ConditionFailed`` on any lost race (re-read, retry).
        """
        stored, put = self._versioned_put(before, after)
        items: list[TransactWriteItemTypeDef] = [
            put,
            *(unreserve_items(self._quotas, before.account_id, release) if release is not None else ()),
            {
                "Put": {
                    "TableName": self._ledger,
                    "Item": serialize_item(entry_to_item(entry)),
                    "ConditionExpression": "attribute_not_exists(entryId)",
                }
            },
        ]
        if entry.credits > 0:
            items.append(
                {
                    "Update": {
                        "TableName": self._accounts,
                        "Key": serialize_item({"accountId": entry.account_id}),
                        "UpdateExpression": "SET creditBalance = :after",
                        "ConditionExpression": "attribute_exists(accountId) AND creditBalance = :before",
                        "ExpressionAttributeValues": {
                            ":after": serialize_value(entry.balance_after),
                            ":before": serialize_value(quantize_credits(entry.balance_after + entry.credits)),
                        },
                    }
                }
            )
        with store_errors("TransactWriteItems"):
            self._db.transact_write_items(TransactItems=items)
        return stored

    def remove_compute(self, before: Compute, release: Demand | None) -> None:
        """Delete the compute at ``before.version`` and give ``release`` back (None: a Failed compute's,
        given back when it failed), in one transaction. Raises ``ConditionFailed`` when it moved or is
        gone."""
        with store_errors("TransactWriteItems"):
            self._db.transact_write_items(
                TransactItems=[
                    {
                        "Delete": {
                            "TableName": self._computes,
                            "Key": serialize_item(_key(before.account_id, before.name)),
                            "ConditionExpression": "#v = :v",
                            "ExpressionAttributeNames": {"#v": "version"},
                            "ExpressionAttributeValues": {":v": serialize_value(before.version)},
                        }
                    },
                    *(
                        unreserve_items(self._quotas, before.account_id, release)
                        if release is not None
                        else ()
                    ),
                ]
            )

    def touch_compute(self, account_id: str, name: str, at: datetime) -> None:
        """Raise ``lastActivityAt`` to ``at`` unless it is later already or the compute is gone (a
        lost condition is not an error: someone else recorded later activity). Bumps the version, so a
        concurrent write from an older read fails and re-reads instead of undoing it."""
        try:
            with store_errors("UpdateItem"):
                self._db.update_item(
                    TableName=self._computes,
                    Key=serialize_item(_key(account_id, name)),
                    UpdateExpression="SET lastActivityAt = :at ADD version :one",
                    ConditionExpression=(
                        "attribute_exists(accountId) AND "
                        "(attribute_not_exists(lastActivityAt) OR lastActivityAt < :at)"
                    ),
                    ExpressionAttributeValues={
                        ":at": serialize_value(to_sortable(at)),
                        ":one": serialize_value(1),
                    },
                )
        except ConditionFailed:
            return
