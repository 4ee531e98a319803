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
        ProjectionTypeDef,
    )


@dataclass(frozen=True, slots=True)
class Index:
    """A secondary index. ``local`` indexes share the table's partition key.

    ``projection`` is ``ALL``, ``KEYS_ONLY`` or ``INCLUDE`` (the keys and ``included``): an index
    write costs a write unit whenever an attribute it holds changes, so it holds what its queries read.
    """

    name: str
    partition_key: str
    sort_key: str | None = None
    local: bool = False
    projection: Literal["ALL", "KEYS_ONLY", "INCLUDE"] = "ALL"
    included: tuple[str, ...] = ()


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
# sparse too: every job that is not final carries openPartition; its sort key (jobId) never moves
# and it holds only lastEventAt and ttl (the meter's stale query) and machineClass, geoZone, status
# and type (the admin fleet counts: ``OperationsStore.count_unfinished``), so a transition costs it
# one small write (lastEventAt moves with every event anyway), not a delete and a put of the whole
# job; the meter finds jobs whose events may have been lost with one Query filtered on lastEventAt,
# then reads those few (rarely any) jobs. notifyRetry holds the jobs with
# a notification whose publish failed, for the meter to send again.
# What GET /jobs shows of each job (``handlers.api.models.jobs.job_view``) and what reading it back
# needs (``payloadKind``; ``ttl`` for the expiry filter): the byAccount index holds only these, so
# a write of anything else (the Batch job id, a notification claim, a termination request, the
# meter's reconciliation mark) costs the index nothing.
UNFINISHED_ATTRIBUTES = ("lastEventAt", "ttl", "machineClass", "geoZone", "status", "type")
JOB_LIST_ATTRIBUTES = (
    "name",
    "type",
    "payloadKind",
    "parentJobId",
    "arrayIndex",
    "arraySize",
    "status",
    "statusReason",
    "machineClass",
    "geoZone",
    "creditConstraint",
    "timeConstraint",
    "notifications",
    "creditsSpent",
    "creditsSettled",
    "exitCode",
    "submittedAt",
    "startedAt",
    "completedAt",
    "childStatusCounts",
    "batchReason",
    "warnings",
    "notificationLog",
    "submittedBy",
    "pythonVersion",
    "ttl",
)

JOBS = TableSpec(
    logical_name="Jobs",
    partition_key="jobId",
    indexes=(
        Index(
            "byAccount",
            partition_key="accountId",
            sort_key="listKey",
            projection="INCLUDE",
            included=JOB_LIST_ATTRIBUTES,
        ),
        Index("metered", partition_key="meterPartition", sort_key="jobId"),
        Index(
            "unfinished",
            partition_key="openPartition",
            sort_key="jobId",
            projection="INCLUDE",
            included=UNFINISHED_ATTRIBUTES,
        ),
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
# per family and zone (``usage#Basic#UnitedStates``: inUse, queued, reserved by dedicated computes) and
# for the total (``usage#total``), and one ``held#<Family>#<Zone>#<jobId>`` item per job waiting for
# quota, so each family and zone's held jobs read oldest first with one Query of its own range.
QUOTAS = TableSpec(logical_name="Quotas", partition_key="accountId", sort_key="entry")

# Powertools idempotency persistence layer's default schema.
IDEMPOTENCY = TableSpec(logical_name="Idempotency", partition_key="id", ttl_attribute="expiration")

# Operators' state: each (machine class, geo zone) out of service (partition ``machine-classes``) and
# the audit log (partition ``audit``, sorted by time; removed by TTL after 400 days). Both are read by
# one Query of their partition: a few dozen class items, an admin's page of audit entries.
OPERATIONS = TableSpec(logical_name="Operations", partition_key="pk", sort_key="sk", ttl_attribute="ttl")

# Dedicated computes (``functions.adapters.dynamodb.computes``): per account, one ``compute#<name>`` item
# per compute (the quota computes reserve is on the Quotas table's usage counters). The sparse
# ``allComputes`` index (only compute items carry ``computePartition``) lists every compute for the meter.
# Environments live here too (``functions.adapters.dynamodb.environments``); an unnamed one (a job's
# inline spec) carries ``ttl``, so DynamoDB removes it 30 days after it was asked for.
COMPUTES = TableSpec(
    logical_name="Computes",
    partition_key="accountId",
    sort_key="entry",
    indexes=(Index("allComputes", partition_key="computePartition", sort_key="computeKey"),),
    ttl_attribute="ttl",
)

ALL_TABLES = (JOBS, ACCOUNTS, LEDGER, IDEMPOTENCY, QUOTAS, OPERATIONS, COMPUTES)


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

    def projection(index: Index) -> ProjectionTypeDef:
        if index.projection == "INCLUDE":
            return {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(index.included)}
        return {"ProjectionType": index.projection}

    def global_index(index: Index) -> GlobalSecondaryIndexTypeDef:
        keys = key_schema(index.partition_key, index.sort_key)
        return {"IndexName": index.name, "KeySchema": keys, "Projection": projection(index)}

    def local_index(index: Index) -> LocalSecondaryIndexTypeDef:
        keys = key_schema(index.partition_key, index.sort_key)
        return {"IndexName": index.name, "KeySchema": keys, "Projection": projection(index)}

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
