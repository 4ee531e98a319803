"""The DynamoDB store's shared parts: the client, the tables, the error translation, paged queries,
the conditional UpdateItem of a live job, and the job transition's update (used by the job and the
ledger writes alike)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger
from botocore.exceptions import ClientError

from functions.adapters.dynamodb.items import (
    deserialize_item,
    job_from_item,
    job_to_item,
    serialize_item,
    serialize_value,
)
from functions.adapters.errors import cancellation_reasons, translate_errors
from functions.domain.errors import ConditionFailed, RecordMissing, UnreadableRecord
from functions.domain.jobs import Job, Transition
from functions.domain.status import JobStatus

if TYPE_CHECKING:  # the stubs are a dev dependency; the Lambda runtime has no need of them
    from mypy_boto3_dynamodb import DynamoDBClient
    from mypy_boto3_dynamodb.type_defs import (
        TransactWriteItemTypeDef,
        UpdateItemOutputTypeDef,
        UpdateTypeDef,
    )

# A job item is alive while it exists and its TTL has not passed (DynamoDB deletes expired items
# days late, so every read and every write of an existing job checks it).
LIVE_JOB = "attribute_exists(jobId) AND (attribute_not_exists(#ttl) OR #ttl > :liveNow)"
NOT_EXPIRED = "(attribute_not_exists(#ttl) OR #ttl > :liveNow)"
STORE_UNAVAILABLE = "The job store is unavailable; try again shortly."
# The condition of a usage counter's update that holds only while nothing of it is queued.
QUEUED_NONE = "attribute_not_exists(queued) OR queued <= :queuedNone"
logger = Logger(child=True)


def store_errors(operation: str) -> AbstractContextManager[None]:
    """``translate_errors`` for one DynamoDB call (``"UpdateItem"``): a lost condition (also a
    cancelled transaction whose reasons say so) is ``ConditionFailed``; anything else, throttling
    included, is ``DependencyFailed`` ("The job store is unavailable; try again shortly.")."""
    return translate_errors("dynamodb", operation, failed=STORE_UNAVAILABLE)


def cancelled_by(exc: ConditionFailed) -> set[int]:
    """The positions (request order) of the items whose condition cancelled a ``TransactWriteItems``;
    empty when the error carries no reasons (DynamoDB Developer Guide, ``TransactionCanceledException``
    ``CancellationReasons``)."""
    cause = exc.__cause__
    if not isinstance(cause, ClientError):
        return set()
    return {i for i, code in enumerate(cancellation_reasons(cause)) if code == "ConditionalCheckFailed"}


def transact_if(db: DynamoDBClient, items: list[TransactWriteItemTypeDef]) -> bool:
    """``TransactWriteItems`` of ``items``; False (nothing written) when a condition failed. Raises
    ``DependencyFailed`` as ``store_errors`` does for any other failure."""
    try:
        with store_errors("TransactWriteItems"):
            db.transact_write_items(TransactItems=items)
    except ConditionFailed:
        return False
    return True


class StoreBase:
    """What every part of ``DynamoJobStore`` shares (its parameters are ``DynamoJobStore``'s)."""

    def __init__(
        self,
        client: DynamoDBClient,
        jobs_table: str,
        accounts_table: str,
        ledger_table: str,
        clock: Callable[[], datetime] | None = None,
        *,
        quotas_table: str | None = None,
    ) -> None:
        self._db = client
        self._quotas = quotas_table
        self._jobs = jobs_table
        self._accounts = accounts_table
        self._ledger = ledger_table
        self._clock = clock or (lambda: datetime.now(UTC))

    def _now_epoch(self) -> int:
        return int(self._clock().timestamp())

    def _live_job(self, item: dict[str, Any] | None, where: str) -> Job | None:
        """The job of a plain item, or None when it is past its TTL."""
        if item is None:
            return None
        job = job_from_item(item)
        if job.is_gone(self._clock()):
            logger.debug("expired job left out", job_id=job.job_id, where=where)
            return None
        return job

    def _not_expired_filter(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``kwargs`` of a Query with the not-past-TTL filter added (AND-ed to any filter given)."""
        existing = kwargs.get("FilterExpression")
        kwargs["FilterExpression"] = f"{NOT_EXPIRED} AND ({existing})" if existing else NOT_EXPIRED
        kwargs["ExpressionAttributeNames"] = {**kwargs.get("ExpressionAttributeNames", {}), "#ttl": "ttl"}
        kwargs["ExpressionAttributeValues"] = {
            **kwargs.get("ExpressionAttributeValues", {}),
            ":liveNow": serialize_value(self._now_epoch()),
        }
        return kwargs

    def _batch_get(self, request: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
        """Every item a BatchGetItem of ``request`` (table → ``{"Keys", "ConsistentRead"}``) finds, by
        table, as plain Python values; unprocessed keys are asked again (they come back in the
        request's own shape: BatchGetItem reference)."""
        found: dict[str, list[dict[str, Any]]] = {table: [] for table in request}
        while request:
            with store_errors("BatchGetItem"):
                response = self._db.batch_get_item(RequestItems=request)
            for table, items in response.get("Responses", {}).items():
                found[table] += [deserialize_item(dict(item)) for item in items]
            request = dict(response.get("UnprocessedKeys") or {})
        return found

    def _transact_if(self, items: list[TransactWriteItemTypeDef]) -> bool:
        """``TransactWriteItems`` of ``items``; False (nothing written) when a condition failed."""
        return transact_if(self._db, items)

    def _query(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """Every item a Query returns, page after page, as plain Python values."""
        while True:
            with store_errors("Query"):
                page = self._db.query(**kwargs)
            for item in page.get("Items", []):
                yield deserialize_item(item)
            if not page.get("LastEvaluatedKey"):
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _jobs_of(
        self, items: Iterator[dict[str, Any]], on_unreadable: Callable[[UnreadableRecord], None] | None
    ) -> Iterator[Job]:
        """The live jobs of index items; an unreadable item is logged, reported and skipped, so one
        bad item never stops a reader of many."""
        for item in items:
            try:
                job = self._live_job(item, "index")
            except UnreadableRecord as exc:
                logger.error("unreadable job item skipped", job_id=exc.key, problem=exc.message)
                if on_unreadable is not None:
                    on_unreadable(exc)
                continue
            if job is not None:
                yield job

    def _update_job(
        self,
        job_id: str,
        update: str,
        *,
        condition: str | None = None,
        names: dict[str, str] | None = None,
        values: dict[str, Any] | None = None,
        return_new: bool = False,
    ) -> UpdateItemOutputTypeDef | None:
        """An UpdateItem of an existing, live job (never creates one).

        Returns the response, or None when ``condition`` (beyond being alive) failed.

        Raises
        ------
        RecordMissing
            The job does not exist or is past its TTL.
        """
        kwargs: dict[str, Any] = {
            "TableName": self._jobs,
            "Key": serialize_item({"jobId": job_id}),
            "UpdateExpression": update,
            "ConditionExpression": f"{LIVE_JOB} AND ({condition})" if condition else LIVE_JOB,
            "ExpressionAttributeNames": {**(names or {}), "#ttl": "ttl"},
            "ExpressionAttributeValues": {
                **{k: serialize_value(v) for k, v in (values or {}).items()},
                ":liveNow": serialize_value(self._now_epoch()),
            },
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if return_new:
            kwargs["ReturnValues"] = "ALL_NEW"
        try:
            with store_errors("UpdateItem"):
                response = self._db.update_item(**kwargs)
        except ConditionFailed as exc:
            if self._missing(exc):
                raise RecordMissing(f"Job {job_id} no longer exists.") from None
            return None
        return response

    def _missing(self, exc: ConditionFailed) -> bool:
        """True when a conditional write (asked for ``ALL_OLD`` on failure) failed because its job
        item is absent or past its TTL, rather than on the rest of its condition."""
        cause = exc.__cause__
        if not isinstance(cause, ClientError):
            return False
        response: dict[str, Any] = dict(cause.response)
        if "CancellationReasons" in response:  # TransactWriteItems: the job's update is the first item
            reasons = response.get("CancellationReasons") or [{}]
            if reasons[0].get("Code") != "ConditionalCheckFailed":
                return False
            response = reasons[0]
        old = response.get("Item")
        if not old:
            return True
        ttl = deserialize_item(old).get("ttl")
        return ttl is not None and int(ttl) <= self._now_epoch()

    def release_items(self, job: Job, *, unless_queued: bool = False) -> list[TransactWriteItemTypeDef]:
        """The items a settlement adds to give back what the job holds (none here; the quota store's
        ``QuotaRecords.release_items`` says what)."""
        return []

    def get_job(self, job_id: str) -> Job | None:
        """The job, read strongly consistent, or None (also when past its TTL).

        Raises ``UnreadableRecord`` for an item that is not a whole job.
        """
        with store_errors("GetItem"):
            response = self._db.get_item(
                TableName=self._jobs, Key=serialize_item({"jobId": job_id}), ConsistentRead=True
            )
        item = response.get("Item")
        return self._live_job(deserialize_item(item), "get") if item else None

    def _transition_update(self, transition: Transition, now: datetime) -> UpdateTypeDef:
        """The conditional update of a job's transition (an UpdateItem's parameters, or a
        TransactWriteItems ``Update``): the job's status fields as ``transition.after`` has them,
        only if the stored ``eventPosition`` is still ``transition.before``'s, the job is alive and
        not Succeeded or Terminated (the job-row condition of the settlement)."""
        after = replace(transition.after, last_event_at=now)
        item = job_to_item(after)
        fields = [
            "status",
            "statusReason",
            "statusHistory",
            "eventPosition",
            "exitCode",
            "startedAt",
            "completedAt",
            "batchJobId",
            "logStreamName",
            "lastEventAt",
            "meterPartition",
            "openPartition",
            "batchReason",
            "warnings",
        ]
        if after.is_final:
            fields.append("creditsSpent")
        names = {f"#{f}": f for f in fields}
        names["#ttl"] = "ttl"
        sets = [f"#{f} = :{f}" for f in fields if item.get(f) is not None]
        removes = [f"#{f}" for f in fields if item.get(f) is None]
        expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        values = {f":{f}": serialize_value(item[f]) for f in fields if item.get(f) is not None}
        values[":before"] = serialize_value(transition.before.event_position)
        values[":succeeded"] = serialize_value(JobStatus.SUCCEEDED.value)
        values[":terminated"] = serialize_value(JobStatus.TERMINATED.value)
        values[":liveNow"] = serialize_value(self._now_epoch())
        condition = f"{LIVE_JOB} AND #eventPosition = :before AND NOT #status IN (:succeeded, :terminated)"
        if after.is_final:
            # A child marked the job its parent since it was read: the settlement is computed again
            # from the job as it is, so its ending settles that child (``dependencies``).
            before = transition.before
            if not before.has_dependents:
                condition += " AND attribute_not_exists(#hasDependents)"
                names["#hasDependents"] = "hasDependents"
            names["#dependents"] = "dependents"
            if before.dependents:
                condition += " AND size(#dependents) = :dependents"
                values[":dependents"] = serialize_value(len(before.dependents))
            else:
                condition += " AND attribute_not_exists(#dependents)"
        return {
            "TableName": self._jobs,
            "Key": serialize_item({"jobId": after.job_id}),
            "UpdateExpression": expression,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
