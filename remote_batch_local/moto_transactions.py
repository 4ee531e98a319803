"""TransactWriteItems on the local stack's moto without copying whole tables.

moto 5.2.5's ``DynamoDBBackend.transact_write_items`` (``moto/dynamodb/models/__init__.py``) keeps a
rollback copy of every table a transaction touches (``copy.deepcopy(self.tables[table_name])``), so
each transaction costs time and memory proportional to the whole table: on the local stack, where
each array child's event is one transaction on the jobs table, an array of 400 children took 209 s
and 2.9 GB. ``transact_write_items`` below is moto's method copied with only the snapshot and the
rollback changed: it deep-copies the items the transaction names (its table and key; "absent" when
there is none) and, on failure, restores exactly those items (deletes the ones that were absent, puts
the others back) and drops the stream records the failed transaction added. The checks, the writes,
the exceptions and the cancellation reasons are moto's.

``install`` replaces the method on ``DynamoDBBackend`` (process-wide) when ``moto.__version__`` is the
version it was copied from (``COPIED_FROM``); on another version it leaves moto's own method in place
and logs a warning once. moto takes no lock in this method and neither does this copy: concurrent
requests interleave as they do on moto's own method.

Only the local stack installs it; ``functions/`` runs on real DynamoDB and never sees it.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import moto
from moto.dynamodb.comparisons import get_filter_expression
from moto.dynamodb.exceptions import (
    ConditionalCheckFailed,
    MockValidationException,
    MultipleTransactionsException,
    TooManyTransactionsException,
    TransactionCanceledException,
    TransactWriteSingleOpException,
)
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.dynamo_type import DynamoType, Item
from moto.dynamodb.models.table import Table

logger = logging.getLogger(__name__)

COPIED_FROM = "5.2.5"
"""The moto version whose ``transact_write_items`` this module's copy follows line for line."""

MOTO_TRANSACT_WRITE_ITEMS: Callable[[DynamoDBBackend, list[dict[str, Any]]], None] = (
    DynamoDBBackend.transact_write_items
)
"""moto's own method, as imported (before ``install``)."""

_warned: set[str] = set()
"""The moto versions already warned about (at most one warning per process)."""


@dataclass
class ItemSnapshot:
    """One item a transaction names, as it was before the transaction.

    ``item`` is a deep copy of moto's ``Item``, or None when the table held no item with that key;
    ``stream_length`` is the number of records in the table's stream shard then (None: no stream).
    """

    table: Table
    hash_key: DynamoType
    range_key: DynamoType | None
    item: Item | None
    stream_length: int | None


def copy_item(item: Item) -> Item:
    """A deep copy of one moto ``Item`` (a function of its own so that tests can count the copies)."""
    return copy.deepcopy(item)


def stored_item(table: Table, hash_key: DynamoType, range_key: DynamoType | None) -> Item | None:
    """The item under the key, read without ``Table.get_item`` (which adds an empty hash entry)."""
    items: dict[DynamoType, Any] = table.items
    if range_key is None:
        found: Item | None = items.get(hash_key)
        return found
    by_range: dict[DynamoType, Item] | None = items.get(hash_key)
    return None if by_range is None else by_range.get(range_key)


def snapshot_items(backend: DynamoDBBackend, transact_items: list[dict[str, Any]]) -> list[ItemSnapshot]:
    """The items ``transact_items`` (TransactWriteItems' ``TransactItems``) name, each deep-copied.

    An operation whose table does not exist or whose key is incomplete is skipped: the transaction
    fails on it before writing it, so there is nothing of it to restore.
    """
    snapshots: list[ItemSnapshot] = []
    for entry in transact_items:
        for op_type, op in entry.items():
            table_name = op.get("TableName") if isinstance(op, dict) else None
            if not table_name or table_name not in backend.tables:
                continue
            table = backend.tables[table_name]
            try:
                keys = op["Item"] if op_type == "Put" else op["Key"]
                hash_key, range_key = backend.get_keys_value(table, keys)
            except (KeyError, TypeError, MockValidationException):
                continue
            current = stored_item(table, hash_key, range_key)
            snapshots.append(
                ItemSnapshot(
                    table=table,
                    hash_key=hash_key,
                    range_key=range_key,
                    item=None if current is None else copy_item(current),
                    stream_length=None if table.stream_shard is None else len(table.stream_shard.items),
                )
            )
    return snapshots


def restore_items(snapshots: list[ItemSnapshot]) -> None:
    """Put every snapshotted item back as it was (in reverse order, so the oldest state wins)."""
    for snap in reversed(snapshots):
        table = snap.table
        items: dict[DynamoType, Any] = table.items
        if snap.range_key is None:
            if snap.item is None:
                items.pop(snap.hash_key, None)
            else:
                items[snap.hash_key] = snap.item
        elif snap.item is None:
            by_range: dict[DynamoType, Item] | None = items.get(snap.hash_key)
            if by_range is not None:
                by_range.pop(snap.range_key, None)
                if not by_range:
                    items.pop(snap.hash_key, None)
        else:
            items[snap.hash_key][snap.range_key] = snap.item
        if snap.stream_length is not None and table.stream_shard is not None:
            del table.stream_shard.items[snap.stream_length :]


def transact_write_items(  # noqa: PLR0912, PLR0915 (moto's method, kept line for line)
    self: DynamoDBBackend, transact_items: list[dict[str, Any]]
) -> None:
    """moto 5.2.5's ``DynamoDBBackend.transact_write_items`` with an item-level rollback.

    Raises what moto raises: ``TooManyTransactionsException`` (more than 100 items),
    ``TransactWriteSingleOpException``, ``MultipleTransactionsException`` / ``MockValidationException``
    (rolled back, re-raised), ``TransactionCanceledException`` with one reason per item (rolled back).
    """
    if len(transact_items) > 100:
        raise TooManyTransactionsException()
    # Create a backup of the items named, in case any of the transactions fail
    snapshots = snapshot_items(self, transact_items)

    target_items: set[tuple[str, str]] = set()

    def check_unicity(table_name: str, key: dict[str, Any]) -> None:
        item = (str(table_name), str(dict(sorted(key.items()))))
        if item in target_items:
            raise MultipleTransactionsException()
        target_items.add(item)

    errors: list[tuple[str, str, dict[str, Any] | None] | tuple[None, None, None]] = []
    for item in transact_items:
        original_item: dict[str, Any] | None = None
        # Check transact writes are not performing multiple operations on the same item
        if len(list(item.keys())) > 1:
            raise TransactWriteSingleOpException

        try:
            op_type, op = next(iter(item.items()))
            if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
                raise ValueError("Unsupported transaction operation")

            table_name = op["TableName"]
            condition_expression = op.get("ConditionExpression")
            expression_attribute_names = op.get("ExpressionAttributeNames")
            expression_attribute_values = op.get("ExpressionAttributeValues")
            return_values_on_condition_check_failure = op.get("ReturnValuesOnConditionCheckFailure")

            if op_type == "Put":
                attrs = op["Item"]
                table = self.get_table(table_name)
                key = {table.hash_key_attr: attrs[table.hash_key_attr]}
                if table.range_key_attr is not None:
                    key[table.range_key_attr] = attrs[table.range_key_attr]
            else:
                key = op["Key"]

            check_unicity(table_name, key)

            current = self.get_item(table_name, key)
            if condition_expression is not None:
                condition_op = get_filter_expression(
                    condition_expression,
                    expression_attribute_names,
                    expression_attribute_values,
                )
                if not condition_op.expr(current):
                    if return_values_on_condition_check_failure == "ALL_OLD" and current:
                        original_item = current.to_json()["Attributes"]
                    raise ConditionalCheckFailed(item=original_item)

            if op_type == "Put":
                attrs = op["Item"]
                self.put_item(
                    table_name,
                    attrs,
                    condition_expression=condition_expression,
                    expression_attribute_names=expression_attribute_names,
                    expression_attribute_values=expression_attribute_values,
                )
            elif op_type == "Delete":
                self.delete_item(
                    table_name,
                    key,
                    condition_expression=condition_expression,
                    expression_attribute_names=expression_attribute_names,
                    expression_attribute_values=expression_attribute_values,
                )
            elif op_type == "Update":
                update_expression = op["UpdateExpression"]
                self.update_item(
                    table_name,
                    key,
                    update_expression=update_expression,
                    condition_expression=condition_expression,
                    expression_attribute_names=expression_attribute_names,
                    expression_attribute_values=expression_attribute_values,
                )
            errors.append((None, None, None))
        except (MultipleTransactionsException, MockValidationException):
            # Rollback to the original state, and reraise the error
            restore_items(snapshots)
            raise
        except ConditionalCheckFailed as e:
            errors.append(("ConditionalCheckFailed", str(e.message), original_item))
        except Exception as e:
            # For other exceptions, capture their details
            errors.append((type(e).__name__, str(e), original_item))

    if any(code is not None for code, _, _ in errors):
        # Rollback to the original state, and reraise the errors
        restore_items(snapshots)
        raise TransactionCanceledException(errors)


def install() -> bool:
    """Make ``transact_write_items`` moto's ``DynamoDBBackend.transact_write_items`` (idempotent).

    Returns True when installed; False (moto's own method stays, a warning is logged once per
    process) when ``moto.__version__`` differs from ``COPIED_FROM``.
    """
    if moto.__version__ != COPIED_FROM:
        if not _warned:
            _warned.add(moto.__version__)
            logger.warning(
                "moto %s is not %s: DynamoDB transactions keep moto's whole-table rollback copy "
                "(slow on large tables); update remote_batch_local/moto_transactions.py",
                moto.__version__,
                COPIED_FROM,
            )
        return False
    DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    return True
