"""Counting what a piece of code asks of AWS: requests per service and operation, and the DynamoDB
read and write request units they would consume on an on-demand table.

moto answers ``ReturnConsumedCapacity`` with a constant, so the units are computed here from the item
images and the tables' indexes, by the rules of the DynamoDB Developer Guide (pages "Item sizes and
formats", "Read/write capacity mode: on-demand", "Managing settings on DynamoDB provisioned capacity
tables" (index writes) and "Managing capacity for transactions"), as written down on 2026-12-01:

- item size: each attribute's name (UTF-8 bytes) plus its value: a string its UTF-8 bytes, a binary
  its bytes, a number 1 byte per two significant digits plus 1, a boolean or null 1 byte, a list or
  map 3 bytes plus its elements plus 1 byte per element, a set the sum of its elements;
- a write: ``ceil(size / 1 KB)`` write request units (at least 1) of the larger of the item's images
  before and after (a delete: the item deleted), twice that inside ``TransactWriteItems``; a write
  whose condition fails still consumes the units of the item it read; the ``ConditionCheck`` of a
  transaction is charged as a transactional write of the item it checks;
- each secondary index (global or local) the write touches: nothing when neither the index's keys
  nor its projected attributes change; one write of the projected new image when the item enters the
  index or changes in it; one write (of the old projection) when it leaves; two (delete the old
  entry, put the new) when the index's key changes;
- a read: ``ceil(size / 4 KB)`` read request units (at least 1) per item read with ``GetItem`` /
  ``BatchGetItem``, for the returned items' total with ``Query`` / ``Scan`` (a query's units are
  those of the items it returns here: filters are not counted), halved when eventually consistent,
  doubled inside ``TransactGetItems``.

:class:`RequestRecorder` wraps ``botocore``'s ``BaseClient._make_api_call`` (every client of the
process: the adapters', powertools idempotency's), so nothing in the service is changed to be counted.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

KB = 1024
WRITE_UNIT_BYTES = 1 * KB
READ_UNIT_BYTES = 4 * KB

Item = Mapping[str, Mapping[str, Any]]  # DynamoDB's low-level JSON: {"name": {"S": "value"}}


def _number_size(text: str) -> int:
    """Bytes of a number: 1 per two significant digits (leading and trailing zeros trimmed) + 1."""
    digits = text.lstrip("-+").lower().split("e")[0].replace(".", "").strip("0") or "0"
    return math.ceil(len(digits) / 2) + 1


def value_size(value: Mapping[str, Any]) -> int:
    """Bytes of one attribute value in DynamoDB's low-level JSON form (``{"S": "x"}``, ``{"M": {...}}``).

    Raises ``ValueError`` for an unknown type descriptor.
    """
    ((kind, content),) = value.items()
    if kind == "S":
        return len(str(content).encode())
    if kind == "N":
        return _number_size(str(content))
    if kind == "B":
        return len(content) if isinstance(content, bytes | bytearray) else len(str(content).encode())
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(str(s).encode()) for s in content)
    if kind == "NS":
        return sum(_number_size(str(n)) for n in content)
    if kind == "BS":
        return sum(len(b) for b in content)
    if kind == "L":
        return 3 + sum(value_size(v) + 1 for v in content)
    if kind == "M":
        return 3 + sum(len(k.encode()) + value_size(v) + 1 for k, v in content.items())
    raise ValueError(f"unknown DynamoDB type {kind!r}")


def item_size(item: Item | None) -> int:
    """Bytes of an item: the sum of its attribute names (UTF-8) and values; 0 for no item."""
    if not item:
        return 0
    return sum(len(name.encode()) + value_size(value) for name, value in item.items())


def write_units(size: int) -> int:
    """Write request units of one write of an item of ``size`` bytes (at least 1)."""
    return max(1, math.ceil(size / WRITE_UNIT_BYTES))


def read_units(size: int, *, consistent: bool) -> Decimal:
    """Read request units of reading ``size`` bytes (at least one unit), half when eventually consistent."""
    units = Decimal(max(1, math.ceil(size / READ_UNIT_BYTES)))
    return units if consistent else units / 2


@dataclass(frozen=True)
class IndexSchema:
    """A secondary index as DescribeTable shows it: key attributes, projection and its extra attributes."""

    name: str
    keys: tuple[str, ...]
    projection: str  # ALL, KEYS_ONLY or INCLUDE
    included: frozenset[str] = frozenset()


@dataclass(frozen=True)
class TableSchema:
    """A table's key attributes and its indexes (global and local alike: both consume writes)."""

    name: str
    keys: tuple[str, ...]
    indexes: tuple[IndexSchema, ...] = ()

    @classmethod
    def from_description(cls, table: Mapping[str, Any]) -> TableSchema:
        """From ``DescribeTable``'s ``Table``."""

        def keys(schema: list[dict[str, str]]) -> tuple[str, ...]:
            return tuple(part["AttributeName"] for part in schema)

        indexes = [
            IndexSchema(
                name=index["IndexName"],
                keys=keys(index["KeySchema"]),
                projection=index["Projection"]["ProjectionType"],
                included=frozenset(index["Projection"].get("NonKeyAttributes", ())),
            )
            for kind in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes")
            for index in table.get(kind, ())
        ]
        return cls(name=table["TableName"], keys=keys(table["KeySchema"]), indexes=tuple(indexes))

    def key_of(self, item: Item) -> dict[str, Any]:
        """The primary key of ``item``."""
        return {name: item[name] for name in self.keys}

    def projected(self, index: IndexSchema, item: Item | None) -> dict[str, Any] | None:
        """What ``index`` holds of ``item``: None when the item lacks one of the index's keys (sparse)."""
        if not item or any(key not in item for key in index.keys):
            return None
        if index.projection == "ALL":
            return dict(item)
        wanted = (
            set(self.keys) | set(index.keys) | (index.included if index.projection == "INCLUDE" else set())
        )
        return {name: value for name, value in item.items() if name in wanted}


def index_write_units(schema: TableSchema, old: Item | None, new: Item | None) -> dict[str, int]:
    """Write request units each index of ``schema`` consumes when the item goes from ``old`` to
    ``new`` (None: absent), by index name; indexes not written are left out."""
    units: dict[str, int] = {}
    for index in schema.indexes:
        before, after = schema.projected(index, old), schema.projected(index, new)
        if before is None and after is None:
            continue
        if before is None:
            spent = write_units(item_size(after))
        elif after is None:
            spent = write_units(item_size(before))
        elif any(before[key] != after[key] for key in index.keys):
            spent = write_units(item_size(before)) + write_units(item_size(after))
        elif before != after:
            spent = write_units(item_size(after))
        else:
            continue
        units[index.name] = spent
    return units


@dataclass
class Usage:
    """What the recorded code asked: requests by ``service:Operation``, DynamoDB units by operation and
    by table or index (``table`` / ``table/index``), failed conditional writes, S3 bytes put."""

    requests: Counter[str] = field(default_factory=Counter)
    write_units: Counter[str] = field(default_factory=Counter)
    write_units_by_target: Counter[str] = field(default_factory=Counter)
    read_units: defaultdict[str, Decimal] = field(default_factory=lambda: defaultdict(Decimal))
    failed_conditions: int = 0

    def dynamodb_requests(self) -> dict[str, int]:
        """DynamoDB requests by operation."""
        return {k.split(":", 1)[1]: v for k, v in sorted(self.requests.items()) if k.startswith("dynamodb:")}

    def count(self, service: str, operations: tuple[str, ...] | None = None) -> int:
        """Requests to ``service`` (only ``operations`` when given)."""
        total = 0
        for key, value in self.requests.items():
            name, _, operation = key.partition(":")
            if name == service and (operations is None or operation in operations):
                total += value
        return total

    def total_write_units(self) -> int:
        """All DynamoDB write request units."""
        return sum(self.write_units.values())

    def total_read_units(self) -> Decimal:
        """All DynamoDB read request units."""
        return sum((Decimal(v) for v in self.read_units.values()), Decimal(0))

    def add(self, other: Usage) -> None:
        """Add ``other``'s figures to these."""
        self.requests.update(other.requests)
        self.write_units.update(other.write_units)
        self.write_units_by_target.update(other.write_units_by_target)
        for operation, units in other.read_units.items():
            self.read_units[operation] += units
        self.failed_conditions += other.failed_conditions

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready figures."""
        return {
            "requests": dict(sorted(self.requests.items())),
            "dynamodbRequests": sum(self.dynamodb_requests().values()),
            "dynamodbWriteUnits": self.total_write_units(),
            "dynamodbReadUnits": str(self.total_read_units()),
            "writeUnitsByOperation": dict(sorted(self.write_units.items())),
            "writeUnitsByTableOrIndex": dict(sorted(self.write_units_by_target.items())),
            "readUnitsByOperation": {k: str(v) for k, v in sorted(self.read_units.items())},
            "failedConditionalWrites": self.failed_conditions,
        }


@dataclass(frozen=True)
class _Write:
    """One item a write request touches: its table, key, kind (Put/Update/Delete/ConditionCheck)."""

    table: str
    key: dict[str, Any]
    kind: str


def _writes(
    operation: str, params: Mapping[str, Any], key_of: Callable[[str, Item], dict[str, Any]]
) -> list[_Write]:
    if operation == "PutItem":
        return [_Write(params["TableName"], key_of(params["TableName"], params["Item"]), "Put")]
    if operation in ("UpdateItem", "DeleteItem"):
        return [_Write(params["TableName"], dict(params["Key"]), operation.removesuffix("Item"))]
    if operation == "TransactWriteItems":
        found = []
        for entry in params["TransactItems"]:
            ((kind, body),) = entry.items()
            key = key_of(body["TableName"], body["Item"]) if kind == "Put" else dict(body["Key"])
            found.append(_Write(body["TableName"], key, kind))
        return found
    if operation == "BatchWriteItem":
        found = []
        for table, requests in params["RequestItems"].items():
            for request in requests:
                if "PutRequest" in request:
                    found.append(_Write(table, key_of(table, request["PutRequest"]["Item"]), "Put"))
                else:
                    found.append(_Write(table, dict(request["DeleteRequest"]["Key"]), "Delete"))
        return found
    return []


# botocore's one method every client call goes through (private; not in botocore-stubs).
_PRIVATE_CALL = "_make_api_call"


class RequestRecorder:
    """Counts every AWS request this process makes through botocore while installed (``with recorder:``),
    and computes the DynamoDB units of each (rules in the module docstring).

    To know a write's old and new images it reads the item before and after with a consistent
    ``GetItem`` of its own (not counted), and the table's indexes with ``DescribeTable`` (not counted).
    Thread-safe; the images of concurrent writes to one item may interleave (use it single-threaded
    when the units matter). ``units=False`` counts the requests only.
    """

    def __init__(self, *, units: bool = True) -> None:
        # units False: count the requests only (no images read, no units computed: faster).
        self._units = units
        self.usage = Usage()
        self._lock = threading.Lock()
        self._local = threading.local()
        self._schemas: dict[str, TableSchema] = {}
        self._original: Callable[..., Any] | None = None

    # -- installation ---------------------------------------------------------------------------------
    def __enter__(self) -> RequestRecorder:
        from botocore.client import BaseClient

        # getattr/setattr by a name: _make_api_call is private (not in botocore-stubs).
        original: Callable[..., Any] = getattr(BaseClient, _PRIVATE_CALL)
        self._original = original
        recorder = self

        def recorded(client: Any, operation: str, params: dict[str, Any]) -> Any:
            if getattr(recorder._local, "paused", False):
                return original(client, operation, params)
            return recorder._record(client, operation, params, lambda: original(client, operation, params))

        setattr(BaseClient, _PRIVATE_CALL, recorded)
        return self

    def __exit__(self, *exc: object) -> None:
        from botocore.client import BaseClient

        if self._original is not None:
            setattr(BaseClient, _PRIVATE_CALL, self._original)
            self._original = None

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Requests made inside are not counted (the recorder's own reads)."""
        previous = getattr(self._local, "paused", False)
        self._local.paused = True
        try:
            yield
        finally:
            self._local.paused = previous

    def reset(self) -> Usage:
        """Start counting afresh; returns what was counted so far."""
        with self._lock:
            usage, self.usage = self.usage, Usage()
        return usage

    # -- recording ------------------------------------------------------------------------------------
    def _schema(self, client: Any, table: str) -> TableSchema:
        if table not in self._schemas:
            with self.paused():
                description = client.describe_table(TableName=table)["Table"]
            self._schemas[table] = TableSchema.from_description(description)
        return self._schemas[table]

    def _image(self, client: Any, table: str, key: dict[str, Any]) -> dict[str, Any] | None:
        with self.paused():
            found: dict[str, Any] | None = client.get_item(TableName=table, Key=key, ConsistentRead=True).get(
                "Item"
            )
        return found

    def _record(self, client: Any, operation: str, params: dict[str, Any], call: Callable[[], Any]) -> Any:
        service = client.meta.service_model.service_name
        with self._lock:
            self.usage.requests[f"{service}:{operation}"] += 1
        if service != "dynamodb" or not self._units:
            return call()
        writes = _writes(operation, params, lambda table, item: self._schema(client, table).key_of(item))
        before = [self._image(client, w.table, w.key) for w in writes]
        failed = False
        try:
            response = call()
        except client.exceptions.ConditionalCheckFailedException:
            failed = True
            raise
        except client.exceptions.TransactionCanceledException:
            failed = True
            raise
        else:
            self._read_units(operation, params, response)
            return response
        finally:
            if writes:
                after = [self._image(client, w.table, w.key) for w in writes]
                self._write_units(client, operation, writes, before, after, failed)

    def _write_units(
        self,
        client: Any,
        operation: str,
        writes: list[_Write],
        before: list[dict[str, Any] | None],
        after: list[dict[str, Any] | None],
        failed: bool,
    ) -> None:
        factor = 2 if operation == "TransactWriteItems" else 1
        spent: Counter[str] = Counter()
        for write, old, new in zip(writes, before, after, strict=True):
            if failed or write.kind == "ConditionCheck":
                units = write_units(item_size(old)) * factor
                spent[write.table] += units
                continue
            spent[write.table] += write_units(max(item_size(old), item_size(new))) * factor
            for index, units in index_write_units(self._schema(client, write.table), old, new).items():
                spent[f"{write.table}/{index}"] += units * factor
        with self._lock:
            self.usage.write_units[operation] += sum(spent.values())
            self.usage.write_units_by_target.update(spent)
            if failed:
                self.usage.failed_conditions += 1

    def _read_units(self, operation: str, params: Mapping[str, Any], response: Mapping[str, Any]) -> None:
        consistent = bool(params.get("ConsistentRead"))
        units = Decimal(0)
        if operation == "GetItem":
            units = read_units(item_size(response.get("Item")), consistent=consistent)
        elif operation in ("Query", "Scan"):
            size = sum(item_size(item) for item in response.get("Items", ()))
            units = read_units(size, consistent=consistent)
        elif operation == "BatchGetItem":
            for table, items in response.get("Responses", {}).items():
                strong = bool(params["RequestItems"][table].get("ConsistentRead"))
                units += sum((read_units(item_size(i), consistent=strong) for i in items), Decimal(0))
        elif operation == "TransactGetItems":
            units = sum(
                (
                    2 * read_units(item_size(r.get("Item")), consistent=True)
                    for r in response.get("Responses", ())
                ),
                Decimal(0),
            )
        if units:
            with self._lock:
                self.usage.read_units[operation] += units
