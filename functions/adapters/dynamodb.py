"""DynamoDB: jobs, accounts and the ledger (``JobRepository``).

Every write is conditional: creates use ``attribute_not_exists``; job transitions require the stored
``eventPosition`` to be the one the transition was computed from; money moves only inside one
``TransactWriteItems`` with a deterministic ledger id and an exact-balance condition.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from aws_lambda_powertools import Logger
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from functions.domain.credits import Charge, quantize_credits
from functions.domain.errors import (
    ConditionFailed,
    DependencyFailed,
    RecordMissing,
    UnreadableRecord,
    ValidationFailed,
)
from functions.domain.jobs import (
    MAX_TERMINATE_ATTEMPTS,
    RECORD_TTL,
    Account,
    Job,
    JobType,
    LedgerEntry,
    LedgerKind,
    NotificationRecord,
    PayloadKind,
    Transition,
)
from functions.domain.machine_classes import GeoZone
from functions.domain.notifications import rules_from_json, rules_to_json
from functions.domain.status import METERED_STATUSES, JobStatus
from functions.domain.text import URLSAFE_BASE64_PATTERN, full_match
from functions.domain.timefmt import from_sortable, to_sortable

METER_PARTITION = "metered"
OPEN_PARTITION = "open"
RETRY_PARTITION = "retry"
NOTIFICATION_LOG_LIMIT = 200
# GET /jobs reads at most this many index pages per request: a span of expired or filtered-out jobs
# then gives a short (even empty) page whose nextToken continues after it.
MAX_LIST_QUERIES = 20
# BatchGetItem takes at most 100 keys a call (DynamoDB API reference).
BATCH_GET_KEYS = 100
# A job item is alive while it exists and its TTL has not passed (DynamoDB deletes expired items
# days late, so every read and every write of an existing job checks it).
_LIVE_JOB = "attribute_exists(jobId) AND (attribute_not_exists(#ttl) OR #ttl > :liveNow)"
_NOT_EXPIRED = "(attribute_not_exists(#ttl) OR #ttl > :liveNow)"
logger = Logger(child=True)
_CONDITION_CODES = {
    "ConditionalCheckFailedException",
    "TransactionCanceledException",
    "TransactionConflictException",
}

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def _ser(value: Any) -> dict[str, Any]:
    serialized: dict[str, Any] = dict(_serializer.serialize(value))
    return serialized


def _item(values: dict[str, Any]) -> dict[str, Any]:
    return {k: _ser(v) for k, v in values.items() if v is not None}


def _plain(item: dict[str, Any]) -> dict[str, Any]:
    return {k: _deserializer.deserialize(v) for k, v in item.items()}


def _opt_time(value: str | None) -> datetime | None:
    return from_sortable(value) if value else None


def _opt_int(value: Decimal | None) -> int | None:
    return int(value) if value is not None else None


def _record_to_item(record: NotificationRecord) -> dict[str, Any]:
    return {
        "at": to_sortable(record.at),
        "event": record.event,
        "method": record.method,
        "outcome": record.outcome,
        "to": record.to,
        "detail": record.detail,
    }


def _record_from_item(item: dict[str, Any]) -> NotificationRecord:
    return NotificationRecord(
        at=from_sortable(item["at"]),
        event=item["event"],
        method=item["method"],
        outcome=item["outcome"],
        to=item.get("to"),
        detail=item.get("detail", ""),
    )


def job_to_item(job: Job) -> dict[str, Any]:
    """The DynamoDB item (plain Python values) of a job."""
    values: dict[str, Any] = {
        "jobId": job.job_id,
        "accountId": job.account_id,
        "name": job.name,
        "type": job.type.value,
        "payloadKind": job.payload_kind.value,
        "machineClass": job.machine_class,
        "geoZone": job.geo_zone.value,
        "creditConstraint": job.credit_constraint,
        "timeConstraint": job.time_constraint,
        "notifications": json.dumps(rules_to_json(job.notifications)),
        "submittedAt": to_sortable(job.submitted_at),
        "status": job.status.value,
        "statusReason": job.status_reason,
        "statusHistory": [s.value for s in job.status_history],
        "eventPosition": job.event_position,
        "terminationReason": job.termination_reason,
        "creditsSpent": job.credits_spent,
        "exitCode": job.exit_code,
        "startedAt": to_sortable(job.started_at) if job.started_at else None,
        "completedAt": to_sortable(job.completed_at) if job.completed_at else None,
        "batchJobId": job.batch_job_id,
        "logStreamName": job.log_stream_name,
        "lastEventAt": to_sortable(job.last_event_at or job.submitted_at),
        "parentJobId": job.parent_job_id,
        "arrayIndex": job.array_index,
        "arraySize": job.array_size,
        "childStatusCounts": job.child_status_counts,
        "sentNotifications": set(job.sent_notifications) or None,
        "retryNotifications": set(job.retry_notifications) or None,
        "publishFailures": set(job.publish_failures) or None,
        "notificationLog": [_record_to_item(r) for r in job.notification_log] or None,
        "dataDeletedAt": to_sortable(job.data_deleted_at) if job.data_deleted_at else None,
        "batchReason": job.batch_reason,
        "warnings": list(job.warnings) or None,
        "terminationRequestedAt": (
            to_sortable(job.termination_requested_at) if job.termination_requested_at else None
        ),
        "terminationAttempts": job.termination_attempts or None,
        "ttl": int((job.record_expires_at or job.submitted_at + RECORD_TTL).timestamp()),
    }
    values.update(_array_values(job))
    if job.type != JobType.ARRAY_CHILD:
        values["listKey"] = f"{to_sortable(job.submitted_at)}#{job.job_id}"
    if job.status in METERED_STATUSES:
        values["meterPartition"] = METER_PARTITION
    if not job.is_final:
        values["openPartition"] = OPEN_PARTITION
    return values


def job_from_item(item: dict[str, Any]) -> Job:
    """The job of a plain (deserialized) DynamoDB item.

    Raises
    ------
    UnreadableRecord
        For an item that is not a whole job (a stub an update made, a partial write).
    """
    try:
        return _job_from_item(item)
    except (KeyError, ValueError, TypeError, AttributeError) as exc:
        job_id = str(item.get("jobId", "?"))
        raise UnreadableRecord(f"job item {job_id} is not a whole job ({exc!r})", key=job_id) from exc


def _job_from_item(item: dict[str, Any]) -> Job:
    counts = item.get("childStatusCounts")
    ttl = item.get("ttl")
    return Job(
        job_id=item["jobId"],
        account_id=item["accountId"],
        name=item.get("name"),
        type=JobType(item["type"]),
        payload_kind=PayloadKind(item["payloadKind"]),
        machine_class=item["machineClass"],
        geo_zone=GeoZone(item["geoZone"]),
        credit_constraint=item.get("creditConstraint"),
        time_constraint=_opt_int(item.get("timeConstraint")),
        notifications=rules_from_json(json.loads(item["notifications"])),
        submitted_at=from_sortable(item["submittedAt"]),
        status=JobStatus(item["status"]),
        status_reason=item.get("statusReason"),
        status_history=tuple(JobStatus(s) for s in item.get("statusHistory", ["Queued"])),
        event_position=int(item.get("eventPosition", -1)),
        termination_reason=item.get("terminationReason"),
        credits_spent=quantize_credits(item.get("creditsSpent", Decimal(0))),
        exit_code=_opt_int(item.get("exitCode")),
        started_at=_opt_time(item.get("startedAt")),
        completed_at=_opt_time(item.get("completedAt")),
        batch_job_id=item.get("batchJobId"),
        log_stream_name=item.get("logStreamName"),
        last_event_at=_opt_time(item.get("lastEventAt")),
        parent_job_id=item.get("parentJobId"),
        array_index=_opt_int(item.get("arrayIndex")),
        array_size=_opt_int(item.get("arraySize")),
        child_status_counts={k: int(v) for k, v in counts.items()} if counts else None,
        sent_notifications=frozenset(item.get("sentNotifications", ())),
        retry_notifications=frozenset(item.get("retryNotifications", ())),
        publish_failures=frozenset(item.get("publishFailures", ())),
        notification_log=tuple(_record_from_item(r) for r in item.get("notificationLog", [])),
        data_deleted_at=_opt_time(item.get("dataDeletedAt")),
        batch_reason=item.get("batchReason"),
        warnings=tuple(str(w) for w in item.get("warnings", [])),
        termination_requested_at=_opt_time(item.get("terminationRequestedAt")),
        termination_attempts=int(item.get("terminationAttempts", 0)),
        record_expires_at=datetime.fromtimestamp(int(ttl), tz=UTC) if ttl is not None else None,
        credits_settled=quantize_credits(item.get("creditsSettled", Decimal(0))),
        array_spans=tuple(str(span) for span in item.get("arraySpans", [])),
    )


def _array_values(job: Job) -> dict[str, Any]:
    """The array attributes of a parent's item: ``creditsSettled`` and ``arraySpans``."""
    if job.type == JobType.ARRAY:
        return {"creditsSettled": job.credits_settled, "arraySpans": list(job.array_spans) or None}
    return {}


def _account_from_item(item: dict[str, Any]) -> Account:
    return Account(
        account_id=item["accountId"],
        credit_balance=quantize_credits(item["creditBalance"]),
        email=item.get("email"),
        phone=item.get("phone"),
        roles=tuple(item.get("roles", ["user"])),
        created_at=_opt_time(item.get("createdAt")),
        email_subscription=item.get("emailSubscription"),
        webhook_url=item.get("webhookUrl"),
        webhook_secret=item.get("webhookSecret"),
    )


def _entry_to_item(entry: LedgerEntry) -> dict[str, Any]:
    return {
        "accountId": entry.account_id,
        "entryId": entry.entry_id,
        "at": to_sortable(entry.at),
        "kind": entry.kind.value,
        "credits": entry.credits,
        "balanceAfter": entry.balance_after,
        "jobId": entry.job_id,
        "unbilled": entry.unbilled if entry.unbilled else None,
        "reason": entry.reason,
    }


def _entry_from_item(item: dict[str, Any]) -> LedgerEntry:
    return LedgerEntry(
        entry_id=item["entryId"],
        account_id=item["accountId"],
        at=from_sortable(item["at"]),
        kind=LedgerKind(item["kind"]),
        credits=quantize_credits(item["credits"]),
        balance_after=quantize_credits(item["balanceAfter"]),
        job_id=item.get("jobId"),
        unbilled=quantize_credits(item.get("unbilled", Decimal(0))),
        reason=item.get("reason"),
    )


class DynamoJobStore:
    """``JobRepository`` on three DynamoDB tables (see ``functions.adapters.tables``).

    Every UpdateItem of a job is conditional on the job being alive (its key exists and its ``ttl``
    has not passed): a write to a deleted or expired job raises ``RecordMissing`` instead of
    creating a stub item. Every read leaves out jobs past their ``ttl``.

    Parameters
    ----------
    client :
        A boto3 DynamoDB client of the home region (built once per cold start).
    jobs_table, accounts_table, ledger_table : str
        Table names.
    clock :
        Source of "now" for the TTL checks (the service's clock; the wall clock by default).
    """

    def __init__(
        self,
        client: Any,
        jobs_table: str,
        accounts_table: str,
        ledger_table: str,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self._db = client
        self._jobs = jobs_table
        self._accounts = accounts_table
        self._ledger = ledger_table
        self._clock = clock or (lambda: datetime.now(UTC))

    # -- helpers -----------------------------------------------------------------------------------
    def _call(self, operation: str, **kwargs: Any) -> Any:
        try:
            return getattr(self._db, operation)(**kwargs)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in _CONDITION_CODES:
                raise ConditionFailed(code) from exc
            raise DependencyFailed("The job store is unavailable; try again shortly.") from exc

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
        kwargs["FilterExpression"] = f"{_NOT_EXPIRED} AND ({existing})" if existing else _NOT_EXPIRED
        kwargs["ExpressionAttributeNames"] = {**kwargs.get("ExpressionAttributeNames", {}), "#ttl": "ttl"}
        kwargs["ExpressionAttributeValues"] = {
            **kwargs.get("ExpressionAttributeValues", {}),
            ":liveNow": _ser(self._now_epoch()),
        }
        return kwargs

    def _query(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """Every item a Query returns, page after page, as plain Python values."""
        while True:
            page = self._call("query", **kwargs)
            for item in page.get("Items", []):
                yield _plain(item)
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
    ) -> dict[str, Any] | None:
        """An UpdateItem of an existing, live job (never creates one).

        Returns the response, or None when ``condition`` (beyond being alive) failed.

        Raises
        ------
        RecordMissing
            The job does not exist or is past its TTL.
        """
        kwargs: dict[str, Any] = {
            "TableName": self._jobs,
            "Key": _item({"jobId": job_id}),
            "UpdateExpression": update,
            "ConditionExpression": f"{_LIVE_JOB} AND ({condition})" if condition else _LIVE_JOB,
            "ExpressionAttributeNames": {**(names or {}), "#ttl": "ttl"},
            "ExpressionAttributeValues": {
                **{k: _ser(v) for k, v in (values or {}).items()},
                ":liveNow": _ser(self._now_epoch()),
            },
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if return_new:
            kwargs["ReturnValues"] = "ALL_NEW"
        try:
            response: dict[str, Any] = self._call("update_item", **kwargs)
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
        ttl = _plain(old).get("ttl")
        return ttl is not None and int(ttl) <= self._now_epoch()

    # -- jobs --------------------------------------------------------------------------------------
    def create_job(self, job: Job) -> None:
        """Write a new job; ``ConditionFailed`` if its id exists."""
        self._call(
            "put_item",
            TableName=self._jobs,
            Item=_item(job_to_item(job)),
            ConditionExpression="attribute_not_exists(jobId)",
        )

    def delete_job(self, job_id: str) -> None:
        """Delete a job record (compensation of a submit that never reached AWS Batch)."""
        self._call("delete_item", TableName=self._jobs, Key=_item({"jobId": job_id}))

    def get_job(self, job_id: str) -> Job | None:
        """The job, read strongly consistent, or None (also when past its TTL).

        Raises ``UnreadableRecord`` for an item that is not a whole job.
        """
        response = self._call(
            "get_item", TableName=self._jobs, Key=_item({"jobId": job_id}), ConsistentRead=True
        )
        item = response.get("Item")
        return self._live_job(_plain(item), "get") if item else None

    def list_jobs(
        self, account_id: str, status: JobStatus | None, limit: int, next_token: str | None
    ) -> tuple[list[Job], str | None]:
        """An account's top-level live jobs, newest first, through the sparse ``byAccount`` index.

        Jobs past their TTL and (with ``status``) other statuses are filtered out by DynamoDB after
        it reads them, so a page may hold fewer than ``limit`` jobs while its token is set: at most
        ``MAX_LIST_QUERIES`` index pages are read per call. Unreadable items are logged and skipped.
        """
        start_key = self._decode_token(next_token, account_id) if next_token else None
        jobs: list[Job] = []
        last_key: dict[str, Any] | None = None
        for _ in range(MAX_LIST_QUERIES):
            kwargs: dict[str, Any] = {
                "TableName": self._jobs,
                "IndexName": "byAccount",
                "KeyConditionExpression": "accountId = :a",
                "ExpressionAttributeValues": {":a": _ser(account_id)},
                "ScanIndexForward": False,
                "Limit": limit - len(jobs),
            }
            if status is not None:
                kwargs["FilterExpression"] = "#s = :s"
                kwargs["ExpressionAttributeNames"] = {"#s": "status"}
                kwargs["ExpressionAttributeValues"][":s"] = _ser(status.value)
            if start_key:
                kwargs["ExclusiveStartKey"] = start_key
            page = self._call("query", **self._not_expired_filter(kwargs))
            items = (_plain(item) for item in page.get("Items", []))
            jobs += list(self._jobs_of(items, None))
            last_key = page.get("LastEvaluatedKey")
            if not last_key or len(jobs) >= limit:
                break
            start_key = last_key
        return jobs, self._encode_token(last_key) if last_key else None

    @staticmethod
    def _encode_token(key: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(_plain(key)).encode()).decode()

    @staticmethod
    def _decode_token(token: str, account_id: str) -> dict[str, Any]:
        try:
            # b64decode drops characters outside the alphabet (a trailing newline, any Unicode)
            # unless they are refused first.
            if not full_match(URLSAFE_BASE64_PATTERN, token):
                raise ValueError(token)
            key = json.loads(base64.urlsafe_b64decode(token.encode()))
            valid = isinstance(key, dict) and set(key) == {"jobId", "accountId", "listKey"}
        except (ValueError, binascii.Error):
            valid = False
        if not valid or key["accountId"] != account_id:
            raise ValidationFailed(
                "nextToken is not one this API issued for this account.", field="nextToken"
            )
        return _item(key)

    def set_batch_job_id(self, job_id: str, batch_job_id: str) -> None:
        """Record the Batch job id unless an event already did; ``RecordMissing`` if the job is gone."""
        self._update_job(
            job_id,
            "SET batchJobId = :b",
            condition="attribute_not_exists(batchJobId)",
            values={":b": batch_job_id},
        )

    def _transition_update(self, transition: Transition, now: datetime) -> dict[str, Any]:
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
        values = {f":{f}": _ser(item[f]) for f in fields if item.get(f) is not None}
        values[":before"] = _ser(transition.before.event_position)
        values[":succeeded"] = _ser(JobStatus.SUCCEEDED.value)
        values[":terminated"] = _ser(JobStatus.TERMINATED.value)
        values[":liveNow"] = _ser(self._now_epoch())
        return {
            "TableName": self._jobs,
            "Key": _item({"jobId": after.job_id}),
            "UpdateExpression": expression,
            "ConditionExpression": (
                f"{_LIVE_JOB} AND #eventPosition = :before AND NOT #status IN (:succeeded, :terminated)"
            ),
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }

    def save_transition(self, transition: Transition, now: datetime) -> None:
        """Store a non-final transition (conditional on the position it was computed from).

        Raises ``RecordMissing`` when the job is gone, ``ConditionFailed`` when it moved since read.
        """
        try:
            self._call("update_item", **self._transition_update(transition, now))
        except ConditionFailed as exc:
            if self._missing(exc):
                raise RecordMissing(f"Job {transition.after.job_id} no longer exists.") from None
            raise

    def settle(
        self, transition: Transition, charge: Charge, entry: LedgerEntry | None, now: datetime
    ) -> None:
        """The final transition, the ledger entry and the balance change in one transaction.

        Raises ``RecordMissing`` when the job is gone, ``ConditionFailed`` on any other lost race.
        """
        final = replace(transition, after=replace(transition.after, credits_spent=charge.credits))
        items: list[dict[str, Any]] = [{"Update": self._transition_update(final, now)}]
        if entry is not None:
            items.append(
                {
                    "Put": {
                        "TableName": self._ledger,
                        "Item": _item(_entry_to_item(entry)),
                        "ConditionExpression": "attribute_not_exists(entryId)",
                    }
                }
            )
        if entry is not None and entry.credits > 0:
            before = quantize_credits(entry.balance_after + entry.credits)
            items.append(
                {
                    "Update": {
                        "TableName": self._accounts,
                        "Key": _item({"accountId": entry.account_id}),
                        "UpdateExpression": "SET creditBalance = :after",
                        "ConditionExpression": "attribute_exists(accountId) AND creditBalance = :before",
                        "ExpressionAttributeValues": {
                            ":after": _ser(entry.balance_after),
                            ":before": _ser(before),
                        },
                    }
                }
            )
        try:
            self._call("transact_write_items", TransactItems=items)
        except ConditionFailed as exc:
            if self._missing(exc):
                raise RecordMissing(f"Job {transition.after.job_id} no longer exists.") from None
            raise

    def set_termination_reason(self, job_id: str, reason: str) -> Job | None:
        """Record the service's termination reason unless the job is final or has one.

        Returns the job after the write, or None when nothing was written; ``RecordMissing`` when
        the job is gone.
        """
        response = self._update_job(
            job_id,
            "SET terminationReason = :r",
            condition="attribute_not_exists(terminationReason) AND NOT #s IN (:succeeded, :terminated)",
            names={"#s": "status"},
            values={
                ":r": reason,
                ":succeeded": JobStatus.SUCCEEDED.value,
                ":terminated": JobStatus.TERMINATED.value,
            },
            return_new=True,
        )
        return job_from_item(_plain(response["Attributes"])) if response else None

    def claim_termination(self, job_id: str, now: datetime) -> bool:
        """Claim the right to send TerminateJob for a job: True for the one writer that recorded
        ``terminationRequestedAt`` (none in flight, not final, fewer than ``MAX_TERMINATE_ATTEMPTS``
        requests so far). ``RecordMissing`` when the job is gone."""
        claimed = self._update_job(
            job_id,
            "SET terminationRequestedAt = :now ADD terminationAttempts :one",
            condition=(
                "attribute_not_exists(terminationRequestedAt) AND NOT #s IN (:succeeded, :terminated)"
                " AND (attribute_not_exists(terminationAttempts) OR terminationAttempts < :max)"
            ),
            names={"#s": "status"},
            values={
                ":now": to_sortable(now),
                ":one": 1,
                ":max": MAX_TERMINATE_ATTEMPTS,
                ":succeeded": JobStatus.SUCCEEDED.value,
                ":terminated": JobStatus.TERMINATED.value,
            },
        )
        return claimed is not None

    def release_termination(self, job_id: str) -> None:
        """Forget a TerminateJob request that failed, so a later tick may send it again (bounded by
        ``terminationAttempts``). ``RecordMissing`` when the job is gone."""
        self._update_job(
            job_id, "REMOVE terminationRequestedAt", condition="attribute_exists(terminationRequestedAt)"
        )

    def claim_notification(self, job_id: str, key: str, while_open: bool = False) -> bool:
        """Add ``key`` to ``sentNotifications``; True only for the writer that added it. With
        ``while_open`` (progress notifications), only while the job is not final.
        ``RecordMissing`` when the job is gone."""
        condition = "NOT contains(sentNotifications, :key)"
        if while_open:
            condition += " AND attribute_exists(openPartition)"
        added = self._update_job(
            job_id,
            "ADD sentNotifications :k DELETE retryNotifications :k",
            condition=condition,
            values={":k": {key}, ":key": key},
        )
        return added is not None

    def release_notification(self, job_id: str, key: str, failure: str) -> None:
        """After a transient publish failure: remove ``key`` from ``sentNotifications``, keep it owed
        (``retryNotifications``), record the attempt (``publishFailures``, see
        ``notification_schedule.failure_record``) and list the job for the meter's retries (sparse
        ``notifyRetry``). ``RecordMissing`` when the job is gone (nothing is created)."""
        self._update_job(
            job_id,
            "DELETE sentNotifications :k ADD retryNotifications :k, publishFailures :f "
            "SET retryPartition = :r",
            values={":k": {key}, ":f": {failure}, ":r": RETRY_PARTITION},
        )

    def list_notification_retries(self) -> Iterator[str]:
        """Ids of jobs with a notification to send again (the sparse, keys-only ``notifyRetry``
        index; callers read each job, which leaves out the expired ones)."""
        for item in self._query(
            TableName=self._jobs,
            IndexName="notifyRetry",
            KeyConditionExpression="retryPartition = :r",
            ExpressionAttributeValues={":r": _ser(RETRY_PARTITION)},
        ):
            yield str(item["jobId"])

    def request_notification_retry(self, job_id: str) -> None:
        """List the job for the meter's next tick (more is owed than one delivery sends).
        ``RecordMissing`` when the job is gone."""
        self._update_job(job_id, "SET retryPartition = :r", values={":r": RETRY_PARTITION})

    def clear_notification_retry(self, job_id: str) -> None:
        """Take the job out of ``notifyRetry`` once nothing is left to send again (no-op while some
        is). ``RecordMissing`` when the job is gone."""
        self._update_job(
            job_id, "REMOVE retryPartition", condition="attribute_not_exists(retryNotifications)"
        )

    def append_notification_record(self, job_id: str, record: NotificationRecord) -> None:
        """Append to the job's ``notificationLog``, keeping the newest ``NOTIFICATION_LOG_LIMIT``
        lines (a DynamoDB item is at most 400 KB; a year of Hourly would not fit).
        ``RecordMissing`` when the job is gone."""
        entry = [_record_to_item(record)]
        for _ in range(5):
            appended = self._update_job(
                job_id,
                "SET notificationLog = list_append(if_not_exists(notificationLog, :empty), :e)",
                condition="attribute_not_exists(notificationLog) OR size(notificationLog) < :limit",
                values={":e": entry, ":empty": [], ":limit": NOTIFICATION_LOG_LIMIT},
            )
            if appended is not None:
                return
            job = self.get_job(job_id)
            if job is None:
                raise RecordMissing(f"Job {job_id} no longer exists.")
            kept = [_record_to_item(r) for r in job.notification_log[-(NOTIFICATION_LOG_LIMIT // 2) :]]
            self._update_job(
                job_id,
                "SET notificationLog = :kept",
                condition="size(notificationLog) = :n",
                values={":kept": kept, ":n": len(job.notification_log)},
            )
        logger.warning("notification log line dropped", job_id=job_id)

    def list_metered_jobs(
        self, on_unreadable: Callable[[UnreadableRecord], None] | None = None
    ) -> Iterator[Job]:
        """Live Starting/Running jobs from the sparse ``metered`` index (past-TTL ones filtered out);
        an unreadable item is logged, passed to ``on_unreadable`` and skipped."""
        items = self._query(
            **self._not_expired_filter(
                {
                    "TableName": self._jobs,
                    "IndexName": "metered",
                    "KeyConditionExpression": "meterPartition = :p",
                    "ExpressionAttributeValues": {":p": _ser(METER_PARTITION)},
                }
            )
        )
        yield from self._jobs_of(items, on_unreadable)

    def mark_data_deleted(self, job_id: str, now: datetime) -> None:
        """Record that a final job's data was deleted by its owner (its data routes answer 410).
        ``RecordMissing`` when the job is gone."""
        self._update_job(
            job_id,
            "SET dataDeletedAt = if_not_exists(dataDeletedAt, :now)",
            values={":now": to_sortable(now)},
        )

    def list_stale_jobs(
        self, last_event_before: datetime, on_unreadable: Callable[[UnreadableRecord], None] | None = None
    ) -> Iterator[Job]:
        """Live jobs that are not final and whose last event is older than ``last_event_before``
        (the sparse ``unfinished`` index, one key-range query; past-TTL ones filtered out); an
        unreadable item is logged, passed to ``on_unreadable`` and skipped."""
        kwargs: dict[str, Any] = {
            "TableName": self._jobs,
            "IndexName": "unfinished",
            "KeyConditionExpression": "openPartition = :p AND lastEventAt < :t",
            "ExpressionAttributeValues": {
                ":p": _ser(OPEN_PARTITION),
                ":t": _ser(to_sortable(last_event_before)),
            },
        }
        yield from self._jobs_of(self._query(**self._not_expired_filter(kwargs)), on_unreadable)

    def mark_reconciled(self, job_id: str, now: datetime) -> None:
        """Set ``lastEventAt`` of a non-final job to ``now`` after the meter checked it with Batch.
        ``RecordMissing`` when the job is gone."""
        self._update_job(
            job_id,
            "SET lastEventAt = :now",
            condition="attribute_exists(openPartition)",
            values={":now": to_sortable(now)},
        )

    def raise_credits_spent(self, job_id: str, credits: Decimal) -> bool:
        """Raise ``creditsSpent`` of a Running job; never lowers it. ``RecordMissing`` when the job
        is gone."""
        raised = self._update_job(
            job_id,
            "SET creditsSpent = :c",
            condition="#s = :running AND creditsSpent < :c",
            names={"#s": "status"},
            values={":c": credits, ":running": JobStatus.RUNNING.value},
        )
        return raised is not None

    # -- accounts and ledger -----------------------------------------------------------------------
    def get_account(self, account_id: str) -> Account | None:
        """The account, read strongly consistent, or None."""
        response = self._call(
            "get_item", TableName=self._accounts, Key=_item({"accountId": account_id}), ConsistentRead=True
        )
        item = response.get("Item")
        return _account_from_item(_plain(item)) if item else None

    def create_account(self, account: Account, now: datetime) -> Account:
        """Create the account if absent, with a ``grant#initial`` entry for a positive balance."""
        balance = quantize_credits(account.credit_balance)
        values = {
            "accountId": account.account_id,
            "creditBalance": balance,
            "email": account.email,
            "phone": account.phone,
            "roles": list(account.roles),
            "createdAt": to_sortable(now),
        }
        items: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self._accounts,
                    "Item": _item(values),
                    "ConditionExpression": "attribute_not_exists(accountId)",
                }
            }
        ]
        if balance > 0:
            grant = LedgerEntry(
                entry_id="grant#initial",
                account_id=account.account_id,
                at=now,
                kind=LedgerKind.GRANT,
                credits=balance,
                balance_after=balance,
                reason="Initial credits",
            )
            items.append({"Put": {"TableName": self._ledger, "Item": _item(_entry_to_item(grant))}})
        try:
            self._call("transact_write_items", TransactItems=items)
        except ConditionFailed:
            logger.debug("account exists", account_id=account.account_id)
        stored = self.get_account(account.account_id)
        if stored is None:
            raise DependencyFailed("The account could not be created; try again.")
        return stored

    def take_sms_allowance(self, account_id: str, hour: str, limit: int) -> bool:
        """Count one SMS against the account's ``limit`` for the clock hour ``hour``
        (``2026-11-29T17``); False, counting nothing, once ``limit`` were sent in that hour."""
        key = _item({"accountId": account_id})
        values = {":h": _ser(hour), ":one": _ser(1), ":limit": _ser(limit)}
        if limit <= 0:
            return False
        try:
            # The hour's first SMS starts a new count.
            self._call(
                "update_item",
                TableName=self._accounts,
                Key=key,
                UpdateExpression="SET smsHour = :h, smsCount = :one",
                ConditionExpression=(
                    "attribute_exists(accountId) AND (attribute_not_exists(smsHour) OR smsHour <> :h)"
                ),
                ExpressionAttributeValues={":h": values[":h"], ":one": values[":one"]},
            )
            return True
        except ConditionFailed:
            pass
        try:
            self._call(
                "update_item",
                TableName=self._accounts,
                Key=key,
                UpdateExpression="ADD smsCount :one",
                ConditionExpression="smsHour = :h AND smsCount < :limit",
                ExpressionAttributeValues=values,
            )
        except ConditionFailed:
            return False
        return True

    def update_contacts(self, account: Account) -> Account:
        """Store the account's contacts: email, phone, email subscription, webhook URL and secret
        (None removes each).

        Raises ``RecordMissing`` (a ``ConditionFailed``) when the account does not exist: the update
        never creates one.
        """
        account_id = account.account_id
        values = {
            "email": account.email,
            "phone": account.phone,
            "emailSubscription": account.email_subscription,
            "webhookUrl": account.webhook_url,
            "webhookSecret": account.webhook_secret,
        }
        sets = [f"{k} = :{k}" for k, v in values.items() if v is not None]
        removes = [k for k, v in values.items() if v is None]
        expression = ("SET " + ", ".join(sets) if sets else "") + (
            " REMOVE " + ", ".join(removes) if removes else ""
        )
        kwargs: dict[str, Any] = {
            "TableName": self._accounts,
            "Key": _item({"accountId": account_id}),
            "UpdateExpression": expression.strip(),
            "ConditionExpression": "attribute_exists(accountId)",
            "ReturnValues": "ALL_NEW",
        }
        if sets:
            kwargs["ExpressionAttributeValues"] = {
                f":{k}": _ser(v) for k, v in values.items() if v is not None
            }
        kwargs["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        try:
            response = self._call("update_item", **kwargs)
        except ConditionFailed as exc:
            raise RecordMissing(f"No account {account_id}.") from exc
        return _account_from_item(_plain(response["Attributes"]))

    def grant_credits(self, entry: LedgerEntry) -> Account:
        """Add ``entry.credits`` to the balance with its ``grant`` entry, in one transaction.

        ``entry.balance_after`` must be the balance read before plus the credits: the write is
        conditional on that balance, so a concurrent change raises ``ConditionFailed`` (re-read, retry).
        """
        before = quantize_credits(entry.balance_after - entry.credits)
        self._call(
            "transact_write_items",
            TransactItems=[
                {
                    "Put": {
                        "TableName": self._ledger,
                        "Item": _item(_entry_to_item(entry)),
                        "ConditionExpression": "attribute_not_exists(entryId)",
                    }
                },
                {
                    "Update": {
                        "TableName": self._accounts,
                        "Key": _item({"accountId": entry.account_id}),
                        "UpdateExpression": "SET creditBalance = :after",
                        "ConditionExpression": "attribute_exists(accountId) AND creditBalance = :before",
                        "ExpressionAttributeValues": {
                            ":after": _ser(entry.balance_after),
                            ":before": _ser(before),
                        },
                    }
                },
            ],
        )
        stored = self.get_account(entry.account_id)
        if stored is None:
            raise DependencyFailed("The account vanished during the grant.")
        return stored

    def list_ledger(self, account_id: str, start: datetime | None, end: datetime | None) -> list[LedgerEntry]:
        """Entries with ``start <= at < end``, newest first, through the ``byTime`` index."""
        low = to_sortable(start) if start else "0"
        high = to_sortable(end) if end else "9"
        kwargs: dict[str, Any] = {
            "TableName": self._ledger,
            "IndexName": "byTime",
            "KeyConditionExpression": "accountId = :a AND #at BETWEEN :low AND :high",
            "ExpressionAttributeNames": {"#at": "at"},
            "ExpressionAttributeValues": {":a": _ser(account_id), ":low": _ser(low), ":high": _ser(high)},
            "ScanIndexForward": False,
        }
        entries = [_entry_from_item(item) for item in self._query(**kwargs)]
        return [e for e in entries if end is None or e.at < end]

    # -- array jobs (``functions.domain.arrays``) --------------------------------------------------
    def set_array_spans(self, job_id: str, batch_job_ids: Sequence[str]) -> None:
        """Record an array's Batch job ids (``arraySpans``, offset order) and the first as its
        ``batchJobId``. ``RecordMissing`` when the job is gone."""
        self._update_job(
            job_id,
            "SET arraySpans = :spans, batchJobId = if_not_exists(batchJobId, :first)",
            values={":spans": list(batch_job_ids), ":first": batch_job_ids[0]},
        )

    def save_child_event(
        self,
        transition: Transition,
        *,
        created: bool,
        charge: Charge | None,
        entry: LedgerEntry | None,
        settled_at_most: Decimal | None,
        now: datetime,
    ) -> None:
        """The child's write, its parent's counters, and a settlement's ledger entry and balance
        change, in one ``TransactWriteItems`` (see ``JobRepository.save_child_event``).

        The parent's counters move with ``SET #c.#from = #c.#from - 1, #c.#to = #c.#to + 1`` (no
        read-modify-write of the parent, so siblings' events do not conflict); the child's own
        condition (absent, or at the event position it was read at) is what makes a replay a no-op.
        """
        child = transition.after
        if charge is not None:
            child = replace(child, credits_spent=charge.credits)
            transition = replace(transition, after=child)
        parent_id = child.parent_job_id
        if parent_id is None:
            raise ValueError(f"job {child.job_id} is not an array child")
        if created:
            child_item: dict[str, Any] = {
                "Put": {
                    "TableName": self._jobs,
                    "Item": _item(job_to_item(replace(child, last_event_at=now))),
                    "ConditionExpression": "attribute_not_exists(jobId)",
                }
            }
        else:
            child_item = {"Update": self._transition_update(transition, now)}
        items = [child_item, {"Update": self._parent_rollup(transition, charge, settled_at_most, now)}]
        items += self._charge_items(entry)
        try:
            self._call("transact_write_items", TransactItems=items)
        except ConditionFailed as exc:
            if self._parent_missing(exc):
                raise RecordMissing(f"Job {parent_id} no longer exists.") from None
            raise

    def _parent_rollup(
        self, transition: Transition, charge: Charge | None, settled_at_most: Decimal | None, now: datetime
    ) -> dict[str, Any]:
        """The parent's half of ``save_child_event``: counters, settled credits, ``lastEventAt``."""
        before, after = transition.before.status, transition.after.status
        sets = ["lastEventAt = :now"]
        names: dict[str, str] = {"#ttl": "ttl"}
        values: dict[str, Any] = {":now": to_sortable(now), ":liveNow": self._now_epoch()}
        if before != after:
            sets += ["#c.#from = #c.#from - :one", "#c.#to = if_not_exists(#c.#to, :zero) + :one"]
            names.update({"#c": "childStatusCounts", "#from": before.value, "#to": after.value})
            values.update({":one": 1, ":zero": 0})
        condition = _LIVE_JOB
        if charge is not None and charge.credits > 0:
            sets.append("creditsSettled = if_not_exists(creditsSettled, :none) + :credits")
            values.update({":none": Decimal(0), ":credits": charge.credits})
            if settled_at_most is not None:
                condition += " AND creditsSettled <= :most"
                values[":most"] = settled_at_most
        return {
            "TableName": self._jobs,
            "Key": _item({"jobId": transition.after.parent_job_id}),
            "UpdateExpression": "SET " + ", ".join(sets),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": {k: _ser(v) for k, v in values.items()},
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }

    def _charge_items(self, entry: LedgerEntry | None) -> list[dict[str, Any]]:
        """The ledger entry (written only if absent) and the exact-balance update of a charge."""
        if entry is None:
            return []
        items: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self._ledger,
                    "Item": _item(_entry_to_item(entry)),
                    "ConditionExpression": "attribute_not_exists(entryId)",
                }
            }
        ]
        if entry.credits > 0:
            before = quantize_credits(entry.balance_after + entry.credits)
            items.append(
                {
                    "Update": {
                        "TableName": self._accounts,
                        "Key": _item({"accountId": entry.account_id}),
                        "UpdateExpression": "SET creditBalance = :after",
                        "ConditionExpression": "attribute_exists(accountId) AND creditBalance = :before",
                        "ExpressionAttributeValues": {
                            ":after": _ser(entry.balance_after),
                            ":before": _ser(before),
                        },
                    }
                }
            )
        return items

    def _parent_missing(self, exc: ConditionFailed) -> bool:
        """True when ``save_child_event`` failed because the parent (its second item) is absent or
        past its TTL."""
        cause = exc.__cause__
        if not isinstance(cause, ClientError):
            return False
        reasons = cause.response.get("CancellationReasons") or []
        if len(reasons) < 2 or reasons[1].get("Code") != "ConditionalCheckFailed":
            return False
        old = reasons[1].get("Item")
        if not old:
            return True
        ttl = _plain(dict(old)).get("ttl")
        return ttl is not None and int(ttl) <= self._now_epoch()

    def start_array(self, job_id: str, started_at: datetime, now: datetime) -> bool:
        """Queued → Running for an array parent whose first child started (history gets Starting
        and Running, so both notifications are owed once). ``RecordMissing`` when it is gone."""
        started = self._update_job(
            job_id,
            "SET #s = :running, statusHistory = list_append(statusHistory, :entered), startedAt = :at, "
            "meterPartition = :metered, lastEventAt = :now REMOVE statusReason",
            condition="#s = :queued",
            names={"#s": "status"},
            values={
                ":running": JobStatus.RUNNING.value,
                ":queued": JobStatus.QUEUED.value,
                ":entered": [JobStatus.STARTING.value, JobStatus.RUNNING.value],
                ":at": to_sortable(started_at),
                ":metered": METER_PARTITION,
                ":now": to_sortable(now),
            },
        )
        return started is not None

    def finish_array(self, parent: Job, now: datetime) -> bool:
        """Store the parent's final status and ``creditsSpent = creditsSettled``, conditional on it
        not being final and on ``creditsSettled`` being what the outcome was computed with.
        ``RecordMissing`` when it is gone."""
        item = job_to_item(replace(parent, credits_spent=parent.credits_settled, last_event_at=now))
        fields = ["status", "statusReason", "statusHistory", "startedAt", "completedAt", "creditsSpent"]
        sets = [f"#{f} = :{f}" for f in fields if item.get(f) is not None] + ["lastEventAt = :now"]
        removes = [f"#{f}" for f in fields if item.get(f) is None] + ["meterPartition", "openPartition"]
        finished = self._update_job(
            parent.job_id,
            "SET " + ", ".join(sets) + " REMOVE " + ", ".join(removes),
            condition="NOT #status IN (:succeeded, :terminated) AND creditsSettled = :settled",
            names={f"#{f}": f for f in fields},
            values={
                **{f":{f}": item[f] for f in fields if item.get(f) is not None},
                ":now": to_sortable(now),
                ":settled": parent.credits_settled,
                ":succeeded": JobStatus.SUCCEEDED.value,
                ":terminated": JobStatus.TERMINATED.value,
            },
        )
        return finished is not None

    def get_jobs(self, job_ids: Sequence[str]) -> list[Job]:
        """The live jobs among ``job_ids``: BatchGetItem, 100 keys a call, strongly consistent, with
        its unprocessed keys asked again. An unreadable item is logged and left out."""
        jobs: list[Job] = []
        unique = list(dict.fromkeys(job_ids))
        for start in range(0, len(unique), BATCH_GET_KEYS):
            request: dict[str, Any] = {
                self._jobs: {
                    "Keys": [_item({"jobId": job_id}) for job_id in unique[start : start + BATCH_GET_KEYS]],
                    "ConsistentRead": True,
                }
            }
            while request:
                response = self._call("batch_get_item", RequestItems=request)
                items = (_plain(item) for item in response.get("Responses", {}).get(self._jobs, []))
                jobs += list(self._jobs_of(items, None))
                request = response.get("UnprocessedKeys") or {}
        return jobs
