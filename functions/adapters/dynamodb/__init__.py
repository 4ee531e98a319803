"""DynamoDB: jobs, accounts and the ledger (``JobRepository``).

Every write is conditional: creates use ``attribute_not_exists``; job transitions require the stored
``eventPosition`` to be the one the transition was computed from; money moves only inside one
``TransactWriteItems`` with a deterministic ledger id and an exact-balance condition.

The store is split by concern: ``items`` (the items' shapes), ``base`` (client, error translation,
queries, the live-job UpdateItem), ``jobs``, ``notifications`` and ``ledger`` (accounts, grants and
the settlement), ``members`` (an account's members, on its item), ``arrays`` (array parents,
children and their roll-up), ``array_spans`` (an array's spans through the quota and the
dispatcher), ``waits`` (jobs waiting for prerequisites). Calls are made directly on a
typed ``DynamoDBClient`` inside
``functions.adapters.errors.translate_errors``.
"""

from __future__ import annotations

from functions.adapters.dynamodb.array_spans import ArraySpanRecords
from functions.adapters.dynamodb.arrays import BATCH_GET_KEYS, ArrayRecords
from functions.adapters.dynamodb.base import STORE_UNAVAILABLE
from functions.adapters.dynamodb.items import (
    METER_PARTITION,
    OPEN_PARTITION,
    RETRY_PARTITION,
    job_from_item,
    job_to_item,
)
from functions.adapters.dynamodb.jobs import MAX_LIST_QUERIES, JobRecords
from functions.adapters.dynamodb.members import MemberRecords
from functions.adapters.dynamodb.notifications import NOTIFICATION_LOG_LIMIT, NotificationClaims
from functions.adapters.dynamodb.quotas import QuotaRecords
from functions.adapters.dynamodb.waits import WaitRecords

__all__ = [
    "BATCH_GET_KEYS",
    "MAX_LIST_QUERIES",
    "METER_PARTITION",
    "NOTIFICATION_LOG_LIMIT",
    "OPEN_PARTITION",
    "RETRY_PARTITION",
    "STORE_UNAVAILABLE",
    "DynamoJobStore",
    "job_from_item",
    "job_to_item",
]


class DynamoJobStore(
    ArraySpanRecords, WaitRecords, QuotaRecords, JobRecords, NotificationClaims, ArrayRecords, MemberRecords
):
    """``JobRepository`` on three DynamoDB tables (see ``functions.adapters.tables``).

    Every UpdateItem of a job is conditional on the job being alive (its key exists and its ``ttl``
    has not passed): a write to a deleted or expired job raises ``RecordMissing`` instead of
    creating a stub item. Every read leaves out jobs past their ``ttl``. A lost condition is
    ``ConditionFailed``; any other DynamoDB failure (throttling, an unreachable endpoint, a missing
    table, access denied) is ``DependencyFailed``.

    Parameters
    ----------
    client : DynamoDBClient
        A boto3 DynamoDB client of the home region (built once per cold start).
    jobs_table, accounts_table, ledger_table : str
        Table names.
    clock : Callable[[], datetime] | None
        Source of "now" for the TTL checks (the service's clock; the wall clock by default).
    quotas_table : str | None
        The quotas table (``QuotaRecords``); None: a store whose jobs take no part in quotas.
    """
