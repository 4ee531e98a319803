"""Environments (``EnvironmentRepository``) on the ``Computes`` table: like a dedicated compute, an
environment is a named resource of one account (partition ``accountId``).

Items of one account:

- ``environment#<name>``: one environment; ``version`` guards every write.
- ``unnamed-environment#<specHash>``: an environment a job asked for inline (``POST /jobs`` with an
  ``environment`` spec), found again by its spec's hash; ``GET /environments`` does not list it. Its
  ``ttl`` (the table's TTL attribute) is its creation + 30 days (``UNNAMED_RETENTION``).
- ``environments#building``: ``building``, how many of the account's environments are Building; moved
  in the same ``TransactWriteItems`` as an environment's creation (conditional on the quota), its end
  and its deletion while Building, so the count and the environments never disagree.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from functions.adapters.dynamodb.base import store_errors, transact_if
from functions.adapters.dynamodb.items import deserialize_item, serialize_item, serialize_value
from functions.adapters.dynamodb.page_tokens import decode_token, encode_token
from functions.domain.environments import (
    Environment,
    EnvironmentSpec,
    EnvironmentStatus,
    Package,
    unnamed_expires_at,
)
from functions.domain.errors import UnreadableRecord, ValidationFailed
from functions.domain.timefmt import from_sortable, to_sortable

if TYPE_CHECKING:  # the stubs are a dev dependency; the Lambda runtime has no need of them
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef

_BUILDING_ENTRY = "environments#building"
#: A build still counted among the account's builds after its environment was deleted, until its report
#: (``retire_build``): ``retired-build#<the build's log stream name>``.
_RETIRED_PREFIX = "retired-build#"
_UNNAMED_PREFIX = "unnamed-environment#"
#: The attributes of a page key of the account's environments (the table's key).
_PAGE_KEY = frozenset({"accountId", "entry"})


def _key(account_id: str, name: str) -> dict[str, Any]:
    return {"accountId": account_id, "entry": f"environment#{name}"}


def _unnamed_key(account_id: str, digest: str) -> dict[str, Any]:
    return {"accountId": account_id, "entry": f"{_UNNAMED_PREFIX}{digest}"}


def _record_key(environment: Environment) -> dict[str, Any]:
    if environment.name is None:
        return _unnamed_key(environment.account_id, environment.spec_hash)
    return _key(environment.account_id, environment.name)


def environment_to_item(environment: Environment) -> dict[str, Any]:
    """The item (plain values) of an environment; None values are left out when serialized."""
    spec = environment.spec
    return {
        **_record_key(environment),
        "name": environment.name,
        "spec": json.dumps(
            {
                "python": spec.python,
                "requirements": list(spec.requirements),
                "indexUrl": spec.index_url,
                "extraIndexUrls": list(spec.extra_index_urls),
                "image": spec.image,
                "repositoryCredentials": spec.repository_credentials,
            }
        ),
        "specHash": environment.spec_hash,
        "status": environment.status.value,
        "statusReason": environment.status_reason,
        "hash": environment.hash,
        "packages": json.dumps([[p.name, p.version] for p in environment.packages]),
        "sizeBytes": environment.size_bytes,
        "imageDigest": environment.image_digest,
        "createdAt": to_sortable(environment.created_at),
        "readyAt": to_sortable(environment.ready_at) if environment.ready_at else None,
        "failedAt": to_sortable(environment.failed_at) if environment.failed_at else None,
        "logStreamName": environment.log_stream_name,
        "version": environment.version,
        # An unnamed environment goes with DynamoDB's TTL once past its retention (the table's TTL
        # attribute); readers judge it by its times (``domain.environments.reusable``), not by this.
        "ttl": int(unnamed_expires_at(environment).timestamp()) if environment.name is None else None,
    }


def environment_from_item(item: dict[str, Any]) -> Environment:
    """The environment of a plain item. Raises ``UnreadableRecord`` for an item that is not a whole one."""
    try:
        spec = json.loads(item["spec"])
        status = EnvironmentStatus(item["status"])
        ready_at: datetime | None = from_sortable(item["readyAt"]) if item.get("readyAt") else None
        failed_at: datetime | None = from_sortable(item["failedAt"]) if item.get("failedAt") else None
        if status is EnvironmentStatus.FAILED and failed_at is None:
            # Records written before failedAt kept the failure's time in readyAt.
            ready_at, failed_at = None, ready_at
        return Environment(
            account_id=item["accountId"],
            name=item.get("name"),
            spec=EnvironmentSpec(
                python=spec["python"],
                requirements=tuple(spec["requirements"]),
                index_url=spec["indexUrl"],
                extra_index_urls=tuple(spec["extraIndexUrls"]),
                image=spec["image"],
                repository_credentials=spec.get("repositoryCredentials"),
            ),
            spec_hash=item["specHash"],
            status=status,
            status_reason=item.get("statusReason"),
            hash=item.get("hash"),
            packages=tuple(Package(name, version) for name, version in json.loads(item["packages"])),
            size_bytes=int(item.get("sizeBytes", 0)),
            image_digest=item.get("imageDigest"),
            created_at=from_sortable(item["createdAt"]),
            ready_at=ready_at,
            failed_at=failed_at,
            log_stream_name=item["logStreamName"],
            version=int(item["version"]),
        )
    except (KeyError, ValueError, TypeError) as exc:
        key = f"{item.get('accountId')}/{item.get('entry')}"
        raise UnreadableRecord(f"environment item {key} is incomplete: {exc!r}", key=key) from None


class DynamoEnvironmentStore:
    """``EnvironmentRepository`` on DynamoDB (the ``Computes`` table).

    Parameters
    ----------
    client : DynamoDBClient
        The home region's client.
    table : str
        The ``Computes`` table's name.
    """

    def __init__(self, client: DynamoDBClient, table: str) -> None:
        self._db = client
        self._table = table

    def _counter(self, account_id: str, delta: int, limit: int | None = None) -> TransactWriteItemTypeDef:
        values: dict[str, Any] = {":d": serialize_value(delta), ":zero": serialize_value(0)}
        update: dict[str, Any] = {
            "TableName": self._table,
            "Key": serialize_item({"accountId": account_id, "entry": _BUILDING_ENTRY}),
            "UpdateExpression": "SET building = if_not_exists(building, :zero) + :d",
        }
        if limit is not None:
            update["ConditionExpression"] = "attribute_not_exists(building) OR building < :limit"
            values[":limit"] = serialize_value(limit)
        update["ExpressionAttributeValues"] = values
        return {"Update": update}  # type: ignore[typeddict-item]

    # -- reads ------------------------------------------------------------------------------------------
    def get_environment(self, account_id: str, name: str) -> Environment | None:
        """The environment (strongly consistent), or None. Raises ``UnreadableRecord`` for a partial item."""
        with store_errors("GetItem"):
            response = self._db.get_item(
                TableName=self._table, Key=serialize_item(_key(account_id, name)), ConsistentRead=True
            )
        item = response.get("Item")
        return environment_from_item(deserialize_item(item)) if item else None

    def get_unnamed_environment(self, account_id: str, digest: str) -> Environment | None:
        """The account's unnamed environment of spec hash ``digest`` (strongly consistent), or None."""
        with store_errors("GetItem"):
            response = self._db.get_item(
                TableName=self._table,
                Key=serialize_item(_unnamed_key(account_id, digest)),
                ConsistentRead=True,
            )
        item = response.get("Item")
        return environment_from_item(deserialize_item(item)) if item else None

    def list_environments(
        self, account_id: str, limit: int, next_token: str | None
    ) -> tuple[list[Environment], str | None]:
        """A page of the account's environments by name (strongly consistent) and its token."""
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "accountId = :a AND begins_with(#e, :p)",
            "ExpressionAttributeNames": {"#e": "entry"},
            "ExpressionAttributeValues": {
                ":a": serialize_value(account_id),
                ":p": serialize_value("environment#"),
            },
            "ConsistentRead": True,
            "Limit": limit,
        }
        if next_token:
            start = decode_token(next_token, _PAGE_KEY, {"accountId": account_id})
            if not start["entry"].startswith("environment#"):
                raise ValidationFailed("nextToken is not one this API issued for this account.", "nextToken")
            kwargs["ExclusiveStartKey"] = serialize_item(start)
        with store_errors("Query"):
            page = self._db.query(**kwargs)
        found = [environment_from_item(deserialize_item(item)) for item in page.get("Items", [])]
        last = page.get("LastEvaluatedKey")
        return found, encode_token(deserialize_item(last)) if last else None

    # -- writes -----------------------------------------------------------------------------------------
    def create_environment(
        self, environment: Environment, max_building: int, replacing: Environment | None = None
    ) -> None:
        """Put the environment (only if the name is free, or with ``replacing`` only over that record
        at its version: an unnamed one past its use, not Building) and, when it is Building, count it
        (only while fewer than ``max_building`` are), in one transaction; an environment final at once
        (an image environment) counts nothing. Raises ``ConditionFailed`` when either does not hold
        (nothing written: the caller re-reads to tell which)."""
        put: dict[str, Any] = {
            "TableName": self._table,
            "Item": serialize_item(environment_to_item(environment)),
            "ConditionExpression": "attribute_not_exists(accountId)",
        }
        if replacing is not None:
            put["ConditionExpression"] = "#v = :v"
            put["ExpressionAttributeNames"] = {"#v": "version"}
            put["ExpressionAttributeValues"] = {":v": serialize_value(replacing.version)}
        items: list[TransactWriteItemTypeDef] = [{"Put": put}]  # type: ignore[typeddict-item]
        if environment.status is EnvironmentStatus.BUILDING:
            items.append(self._counter(environment.account_id, 1, max_building))
        with store_errors("TransactWriteItems"):
            self._db.transact_write_items(TransactItems=items)

    def save_environment(self, before: Environment, after: Environment) -> Environment:
        """Store ``after`` at version ``before.version + 1``; when it leaves Building, uncount it in the
        same transaction. Raises ``ConditionFailed`` on a lost race (or when it is gone)."""
        stored = replace(after, version=before.version + 1)
        put: TransactWriteItemTypeDef = {
            "Put": {
                "TableName": self._table,
                "Item": serialize_item(environment_to_item(stored)),
                "ConditionExpression": "#v = :v",
                "ExpressionAttributeNames": {"#v": "version"},
                "ExpressionAttributeValues": {":v": serialize_value(before.version)},
            }
        }
        items = [put]
        if before.status is EnvironmentStatus.BUILDING and after.status is not EnvironmentStatus.BUILDING:
            items.append(self._counter(before.account_id, -1))
        with store_errors("TransactWriteItems"):
            self._db.transact_write_items(TransactItems=items)
        return stored

    def delete_environment(self, before: Environment, now: datetime, *, build_started: bool = True) -> None:
        """Delete the environment at ``before.version``, in one transaction; one Building leaves its
        build counted until the build reports (``retire_build``): a ``retired-build#<log stream>``
        item dated ``now``; with ``build_started`` False (its build never began) it is uncounted at
        once. Raises ``ConditionFailed`` on a lost race."""
        items: list[TransactWriteItemTypeDef] = [
            {
                "Delete": {
                    "TableName": self._table,
                    "Key": serialize_item(_record_key(before)),
                    "ConditionExpression": "#v = :v",
                    "ExpressionAttributeNames": {"#v": "version"},
                    "ExpressionAttributeValues": {":v": serialize_value(before.version)},
                }
            }
        ]
        if before.status is EnvironmentStatus.BUILDING and not build_started:
            items.append(self._counter(before.account_id, -1))
        elif before.status is EnvironmentStatus.BUILDING:
            retired = {
                "accountId": before.account_id,
                "entry": f"{_RETIRED_PREFIX}{before.log_stream_name}",
                "retiredAt": to_sortable(now),
            }
            items.append({"Put": {"TableName": self._table, "Item": serialize_item(retired)}})
        with store_errors("TransactWriteItems"):
            self._db.transact_write_items(TransactItems=items)

    def retire_build(self, account_id: str, log_stream_name: str) -> bool:
        """Uncount the build of a deleted environment (its ``retired-build#`` item deleted and the
        account's count lowered, in one transaction, once). Returns False when there was none (never
        deleted while Building, or retired already)."""
        items: list[TransactWriteItemTypeDef] = [
            {
                "Delete": {
                    "TableName": self._table,
                    "Key": serialize_item(
                        {"accountId": account_id, "entry": f"{_RETIRED_PREFIX}{log_stream_name}"}
                    ),
                    "ConditionExpression": "attribute_exists(accountId)",
                }
            },
            self._counter(account_id, -1),
        ]
        return transact_if(self._db, items)

    def retired_builds(self, account_id: str, before: datetime) -> list[str]:
        """The log stream names of the account's deleted environments' builds still counted, retired
        before ``before`` (one Query of the account's ``retired-build#`` items)."""
        names: list[str] = []
        query: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "accountId = :a AND begins_with(#e, :p)",
            "ExpressionAttributeNames": {"#e": "entry"},
            "ExpressionAttributeValues": serialize_item({":a": account_id, ":p": _RETIRED_PREFIX}),
            "ConsistentRead": True,
        }
        with store_errors("Query"):
            for page in self._db.get_paginator("query").paginate(**query):
                for item in page.get("Items", []):
                    plain = deserialize_item(item)
                    if from_sortable(plain["retiredAt"]) < before:
                        names.append(str(plain["entry"]).removeprefix(_RETIRED_PREFIX))
        return names
