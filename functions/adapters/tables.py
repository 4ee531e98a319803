"""The DynamoDB tables' key schemas: the one description both the CDK app and the local stack build from.

No boto3 here: this module is plain data so ``infra/`` can import it without the AWS SDK.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # the stubs are a dev dependency: nothing of boto3 is imported at run time
    from mypy_boto3_dynamodb.type_defs import (
        CreateTableInputTypeDef,
        GlobalSecondaryIndexTypeDef,
        KeySchemaElementTypeDef,
        LocalSecondaryIndexTypeDef,
    )


@dataclass(frozen=True, slots=True)
class Index:
    """A secondary index. ``local`` indexes share the table's partition key.

    ``projection`` is ``ALL`` or ``KEYS_ONLY``.
    """

    name: str
    partition_key: str
    sort_key: str | None = None
    local: bool = False
    projection: Literal["ALL", "KEYS_ONLY"] = "ALL"


@dataclass(frozen=True, slots=True)
class TableSpec:
    """A table: logical name, keys (all string attributes), indexes and TTL attribute."""

    logical_name: str
    partition_key: str
    sort_key: str | None = None
    indexes: tuple[Index, ...] = field(default_factory=tuple)
    ttl_attribute: str | None = None

    def attribute_names(self) -> list[str]:
        """Every key attribute of the table and its indexes, each once."""
        names = [self.partition_key, *([self.sort_key] if self.sort_key else [])]
        for index in self.indexes:
            names += [index.partition_key, *([index.sort_key] if index.sort_key else [])]
        return list(dict.fromkeys(names))


# Jobs. byAccount is sparse: only top-level jobs carry listKey (submittedAt#jobId), so
# GET /jobs never reads array children. metered is sparse: only Starting/Running jobs carry
# meterPartition, so the meter's cost grows with running jobs, not with history. unfinished is
# sparse too: every job that is not final carries openPartition, sorted by lastEventAt, so the
# meter finds jobs whose events may have been lost with one key-range query. notifyRetry holds
# the jobs with a notification whose publish failed, for the meter to send again.
JOBS = TableSpec(
    logical_name="Jobs",
    partition_key="jobId",
    indexes=(
        Index("byAccount", partition_key="accountId", sort_key="listKey"),
        Index("metered", partition_key="meterPartition", sort_key="jobId"),
        Index("unfinished", partition_key="openPartition", sort_key="lastEventAt"),
        Index("notifyRetry", partition_key="retryPartition", sort_key="jobId", projection="KEYS_ONLY"),
    ),
    ttl_attribute="ttl",
)

ACCOUNTS = TableSpec(logical_name="Accounts", partition_key="accountId")

# Ledger: sort key is the deterministic entry id (charge#<jobId>), the idempotency guard of money;
# the byTime local index orders an account's entries by time for /account/usage.
LEDGER = TableSpec(
    logical_name="Ledger",
    partition_key="accountId",
    sort_key="entryId",
    indexes=(Index("byTime", partition_key="accountId", sort_key="at", local=True),),
)

# Quotas (``functions.adapters.dynamodb.quotas``): per account, its limits (``limits``), a usage counter
# per family and zone (``usage#Basic#UnitedStates``: inUse, queued) and for the total (``usage#total``),
# and one ``held#<jobId>`` item per job waiting for quota, so the account's held jobs read oldest first
# with one Query.
QUOTAS = TableSpec(logical_name="Quotas", partition_key="accountId", sort_key="entry")

# Powertools idempotency persistence layer's default schema.
IDEMPOTENCY = TableSpec(logical_name="Idempotency", partition_key="id", ttl_attribute="expiration")

ALL_TABLES = (JOBS, ACCOUNTS, LEDGER, IDEMPOTENCY, QUOTAS)


def create_table_request(spec: TableSpec, name: str) -> CreateTableInputTypeDef:
    """The ``CreateTable`` parameters of a table spec: on-demand, string keys, its GSIs and LSIs.

    The local stack and the integration tests create their moto tables with this; the CDK app
    builds the same keys and indexes from the same spec.
    """

    def key_schema(partition_key: str, sort_key: str | None) -> list[KeySchemaElementTypeDef]:
        schema: list[KeySchemaElementTypeDef] = [{"AttributeName": partition_key, "KeyType": "HASH"}]
        if sort_key:
            schema.append({"AttributeName": sort_key, "KeyType": "RANGE"})
        return schema

    def global_index(index: Index) -> GlobalSecondaryIndexTypeDef:
        keys = key_schema(index.partition_key, index.sort_key)
        return {
            "IndexName": index.name,
            "KeySchema": keys,
            "Projection": {"ProjectionType": index.projection},
        }

    def local_index(index: Index) -> LocalSecondaryIndexTypeDef:
        keys = key_schema(index.partition_key, index.sort_key)
        return {
            "IndexName": index.name,
            "KeySchema": keys,
            "Projection": {"ProjectionType": index.projection},
        }

    request: CreateTableInputTypeDef = {
        "TableName": name,
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [{"AttributeName": a, "AttributeType": "S"} for a in spec.attribute_names()],
        "KeySchema": key_schema(spec.partition_key, spec.sort_key),
    }
    if global_indexes := [global_index(index) for index in spec.indexes if not index.local]:
        request["GlobalSecondaryIndexes"] = global_indexes
    if local_indexes := [local_index(index) for index in spec.indexes if index.local]:
        request["LocalSecondaryIndexes"] = local_indexes
    return request
