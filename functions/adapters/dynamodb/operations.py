"""DynamoDB: the operators' state and audit log (``OperationsStore``), on the Operations table
(``functions.adapters.tables.OPERATIONS``), plus the counts of unfinished jobs per class and zone read
from the jobs table's ``unfinished`` index.

Items of the Operations table:
- ``pk = "machine-classes"``, ``sk = "<class>#<zone>"``: ``disabled``, ``reason``, ``changedBy``,
  ``changedAt``, ``version`` (each write conditional on the version read);
- ``pk = "audit"``, ``sk = "<at, sortable>#<entryId>"``: ``entryId``, ``at``, ``actor``, ``action``,
  ``target``, ``before``, ``after``, ``reason``, ``ttl`` (epoch seconds: ``at`` + 400 days).

An operator's change of an account's quota limits is written to the Quotas table's ``limits`` item
(``functions.adapters.dynamodb.quotas.limits_put``) in the transaction of its audit entry.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from functions.adapters.dynamodb.base import store_errors
from functions.adapters.dynamodb.items import (
    OPEN_PARTITION,
    deserialize_item,
    entry_to_item,
    serialize_item,
    serialize_value,
)
from functions.adapters.dynamodb.page_tokens import decode_token, encode_token
from functions.adapters.dynamodb.quotas import limits_put
from functions.adapters.errors import cancellation_reasons
from functions.domain.credits import quantize_credits
from functions.domain.errors import ConditionFailed
from functions.domain.fleet import AuditAction, AuditEntry, ClassAvailability
from functions.domain.jobs import LedgerEntry
from functions.domain.machine_classes import GeoZone
from functions.domain.quotas import QuotaLimits
from functions.domain.timefmt import from_sortable, to_sortable
from functions.ports import ClassLoad

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

CLASS_PARTITION = "machine-classes"
AUDIT_PARTITION = "audit"
_RUNNING = frozenset({"Starting", "Running"})


def _class_key(machine_class: str, geo_zone: GeoZone) -> dict[str, Any]:
    return {"pk": CLASS_PARTITION, "sk": f"{machine_class}#{geo_zone.value}"}


def _state_from_item(item: dict[str, Any]) -> ClassAvailability:
    machine_class, _, zone = str(item["sk"]).partition("#")
    changed_at = item.get("changedAt")
    return ClassAvailability(
        machine_class=machine_class,
        geo_zone=GeoZone(zone),
        disabled=bool(item.get("disabled", False)),
        reason=item.get("reason"),
        changed_by=item.get("changedBy"),
        changed_at=from_sortable(changed_at) if changed_at else None,
        version=int(item.get("version", 0)),
    )


def _audit_to_item(audit: AuditEntry) -> dict[str, Any]:
    return {
        "pk": AUDIT_PARTITION,
        "sk": f"{to_sortable(audit.at)}#{audit.entry_id}",
        "entryId": audit.entry_id,
        "at": to_sortable(audit.at),
        "actor": audit.actor,
        "action": audit.action.value,
        "target": audit.target,
        # JSON text: before/after hold any JSON value (floats included), which DynamoDB maps cannot.
        "before": json.dumps(audit.before, sort_keys=True),
        "after": json.dumps(audit.after, sort_keys=True),
        "reason": audit.reason,
        "ttl": int(audit.expires_at.timestamp()),
    }


def _audit_from_item(item: dict[str, Any]) -> AuditEntry:
    return AuditEntry(
        entry_id=str(item["entryId"]),
        at=from_sortable(str(item["at"])),
        actor=str(item["actor"]),
        action=AuditAction(item["action"]),
        target=str(item["target"]),
        before=json.loads(item.get("before") or "{}"),
        after=json.loads(item.get("after") or "{}"),
        reason=item.get("reason"),
    )


#: The attribute of an audit page's token: the sort key (the partition is the audit's one).
_AUDIT_PAGE_KEY = frozenset({"sk"})


class DynamoOperationsStore:
    """``OperationsStore`` on DynamoDB.

    Parameters
    ----------
    client : DynamoDBClient
        The home region's client (shared with the job store).
    operations_table, jobs_table, accounts_table, ledger_table : str
        Table names.
    clock : Callable[[], datetime] | None
        "now" for the TTL filter of the audit log (default: the wall clock).
    quotas_table : str | None
        The Quotas table (accounts' limits; None: ``save_quota_limits`` is unavailable).
    monotonic : Callable[[], float]
        Seconds for the class-state cache's age (``time.monotonic``).
    """

    def __init__(
        self,
        client: DynamoDBClient,
        operations_table: str,
        jobs_table: str,
        accounts_table: str,
        ledger_table: str,
        *,
        clock: Callable[[], datetime] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        quotas_table: str | None = None,
    ) -> None:
        self._db = client
        self._quotas = quotas_table
        self._table = operations_table
        self._jobs = jobs_table
        self._accounts = accounts_table
        self._ledger = ledger_table
        self._clock = clock or (lambda: datetime.now(UTC))
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._cached: tuple[float, dict[tuple[str, GeoZone], ClassAvailability]] | None = None

    # -- class states ------------------------------------------------------------------------------
    def class_states(self, max_age_seconds: float) -> Mapping[tuple[str, GeoZone], ClassAvailability]:
        """Every stored class state, from memory when read less than ``max_age_seconds`` ago."""
        now = self._monotonic()
        with self._lock:
            if self._cached is not None and now - self._cached[0] < max_age_seconds:
                return self._cached[1]
        states: dict[tuple[str, GeoZone], ClassAvailability] = {}
        for item in self._query_partition(CLASS_PARTITION):
            state = _state_from_item(item)
            states[(state.machine_class, state.geo_zone)] = state
        with self._lock:
            self._cached = (now, states)
        return states

    def get_class_state(self, machine_class: str, geo_zone: GeoZone) -> ClassAvailability:
        """The stored state (strongly consistent), or version 0 in service."""
        with store_errors("GetItem"):
            response = self._db.get_item(
                TableName=self._table,
                Key=serialize_item(_class_key(machine_class, geo_zone)),
                ConsistentRead=True,
            )
        item = response.get("Item")
        if not item:
            return ClassAvailability(machine_class=machine_class, geo_zone=geo_zone)
        return _state_from_item(deserialize_item(item))

    def save_class_state(self, state: ClassAvailability, audit: AuditEntry) -> None:
        """The state (if its stored version is ``state.version - 1``) and the audit entry, in one
        transaction; ``ConditionFailed`` when another change came first. Forgets the cached states,
        so this environment sees its own change at once."""
        values = {
            **_class_key(state.machine_class, state.geo_zone),
            "disabled": state.disabled,
            "reason": state.reason,
            "changedBy": state.changed_by,
            "changedAt": to_sortable(state.changed_at) if state.changed_at else None,
            "version": state.version,
        }
        condition = "attribute_not_exists(pk)" if state.version == 1 else "version = :read"
        put: Any = {
            "TableName": self._table,
            "Item": serialize_item(values),
            "ConditionExpression": condition,
        }
        if state.version != 1:
            put["ExpressionAttributeValues"] = {":read": serialize_value(state.version - 1)}
        with store_errors("TransactWriteItems"):
            self._db.transact_write_items(TransactItems=[{"Put": put}, self._audit_put(audit)])
        with self._lock:
            self._cached = None

    # -- quota limits ------------------------------------------------------------------------------
    def save_quota_limits(self, account_id: str, limits: QuotaLimits, audit: AuditEntry) -> None:
        """The account's limits (if its stored version is ``limits.version - 1``) and the audit entry, in
        one transaction; ``ConditionFailed`` when another change came first."""
        if not self._quotas:
            raise ValueError("this store was built without a quotas table")
        items: list[Any] = [limits_put(self._quotas, account_id, limits), self._audit_put(audit)]
        with store_errors("TransactWriteItems"):
            self._db.transact_write_items(TransactItems=items)

    # -- audit log ---------------------------------------------------------------------------------
    def _audit_put(self, audit: AuditEntry) -> Any:
        return {
            "Put": {
                "TableName": self._table,
                "Item": serialize_item(_audit_to_item(audit)),
                "ConditionExpression": "attribute_not_exists(sk)",
            }
        }

    def record(self, audit: AuditEntry) -> None:
        """Add the entry (a no-op when this very entry is stored already)."""
        try:
            with store_errors("PutItem"):
                self._db.put_item(**self._audit_put(audit)["Put"])
        except ConditionFailed:
            return

    def list_audit(self, limit: int, next_token: str | None) -> tuple[list[AuditEntry], str | None]:
        """A page of the audit log, newest first; entries past their TTL are left out."""
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk",
            "FilterExpression": "#ttl > :now",
            "ExpressionAttributeNames": {"#ttl": "ttl"},
            "ExpressionAttributeValues": {
                ":pk": serialize_value(AUDIT_PARTITION),
                ":now": serialize_value(int(self._clock().timestamp())),
            },
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if next_token:
            kwargs["ExclusiveStartKey"] = serialize_item(
                {
                    "pk": AUDIT_PARTITION,
                    "sk": decode_token(next_token, _AUDIT_PAGE_KEY, for_account=False)["sk"],
                }
            )
        with store_errors("Query"):
            page = self._db.query(**kwargs)
        entries = [_audit_from_item(deserialize_item(item)) for item in page.get("Items", [])]
        last = page.get("LastEvaluatedKey")
        token = encode_token({"sk": str(deserialize_item(last)["sk"])}) if last else None
        return entries, token

    # -- credit grants -----------------------------------------------------------------------------
    def grant_credits(self, entry: LedgerEntry, audit: AuditEntry) -> bool:
        """Ledger entry (if absent), balance (if still the one read) and audit entry, in one
        transaction. False when the ledger entry exists: that grant was made already."""
        before = quantize_credits(entry.balance_after - entry.credits)
        items: list[Any] = [
            {
                "Put": {
                    "TableName": self._ledger,
                    "Item": serialize_item(entry_to_item(entry)),
                    "ConditionExpression": "attribute_not_exists(entryId)",
                }
            },
            {
                "Update": {
                    "TableName": self._accounts,
                    "Key": serialize_item({"accountId": entry.account_id}),
                    "UpdateExpression": "SET creditBalance = :after",
                    "ConditionExpression": "attribute_exists(accountId) AND creditBalance = :before",
                    "ExpressionAttributeValues": {
                        ":after": serialize_value(entry.balance_after),
                        ":before": serialize_value(before),
                    },
                }
            },
            self._audit_put(audit),
        ]
        try:
            with store_errors("TransactWriteItems"):
                self._db.transact_write_items(TransactItems=items)
        except ConditionFailed as exc:
            cause = exc.__cause__
            if isinstance(cause, ClientError) and cancellation_reasons(cause)[:1] == [
                "ConditionalCheckFailed"
            ]:
                return False
            raise
        return True

    # -- load --------------------------------------------------------------------------------------
    def count_unfinished(self) -> Mapping[tuple[str, GeoZone], ClassLoad]:
        """One paged Query of the jobs' ``unfinished`` index (not-final jobs only), reading four
        attributes of each: cost grows with the jobs in flight, never with history."""
        counts: dict[tuple[str, GeoZone], list[int]] = {}
        kwargs: dict[str, Any] = {
            "TableName": self._jobs,
            "IndexName": "unfinished",
            "KeyConditionExpression": "openPartition = :open",
            "ProjectionExpression": "machineClass, geoZone, #status, #type",
            "ExpressionAttributeNames": {"#status": "status", "#type": "type"},
            "ExpressionAttributeValues": {":open": serialize_value(OPEN_PARTITION)},
        }
        for item in self._query(kwargs):
            if item.get("type") == "Array" or "machineClass" not in item or "geoZone" not in item:
                continue
            key = (str(item["machineClass"]), GeoZone(item["geoZone"]))
            pair = counts.setdefault(key, [0, 0])
            pair[1 if item.get("status") in _RUNNING else 0] += 1
        return {key: ClassLoad(queued=q, running=r) for key, (q, r) in counts.items()}

    def _query_partition(self, partition: str) -> list[dict[str, Any]]:
        return list(
            self._query(
                {
                    "TableName": self._table,
                    "KeyConditionExpression": "pk = :pk",
                    "ExpressionAttributeValues": {":pk": serialize_value(partition)},
                    "ConsistentRead": True,
                }
            )
        )

    def _query(self, kwargs: dict[str, Any]) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        while True:
            with store_errors("Query"):
                page = self._db.query(**kwargs)
            items += [deserialize_item(item) for item in page.get("Items", [])]
            if not page.get("LastEvaluatedKey"):
                return items
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


__all__ = ["AUDIT_PARTITION", "CLASS_PARTITION", "DynamoOperationsStore"]
