"""DynamoDB: jobs, accounts and the ledger (``JobRepository``).

Every write is conditional: creates use ``attribute_not_exists``; job transitions require the stored
``eventPosition`` to be the one the transition was computed from; money moves only inside one
``TransactWriteItems`` with a deterministic ledger id and an exact-balance condition.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from typing import Any

from aws_lambda_powertools import Logger
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.exceptions import ClientError

from functions.domain.credits import Charge, quantize_credits
from functions.domain.errors import ConditionFailed, DependencyFailed, ValidationFailed
from functions.domain.jobs import (
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
        "ttl": int((job.submitted_at + RECORD_TTL).timestamp()),
    }
    if job.type != JobType.ARRAY_CHILD:
        values["listKey"] = f"{to_sortable(job.submitted_at)}#{job.job_id}"
    if job.status in METERED_STATUSES:
        values["meterPartition"] = METER_PARTITION
    if not job.is_final:
        values["openPartition"] = OPEN_PARTITION
    return values


def job_from_item(item: dict[str, Any]) -> Job:
    """The job of a plain (deserialized) DynamoDB item."""
    counts = item.get("childStatusCounts")
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
    )


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

    Parameters
    ----------
    client :
        A boto3 DynamoDB client of the home region (built once per cold start).
    jobs_table, accounts_table, ledger_table : str
        Table names.
    """

    def __init__(self, client: Any, jobs_table: str, accounts_table: str, ledger_table: str) -> None:
        self._db = client
        self._jobs = jobs_table
        self._accounts = accounts_table
        self._ledger = ledger_table

    # -- helpers -----------------------------------------------------------------------------------
    def _call(self, operation: str, **kwargs: Any) -> Any:
        try:
            return getattr(self._db, operation)(**kwargs)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in _CONDITION_CODES:
                raise ConditionFailed(code) from exc
            raise DependencyFailed("The job store is unavailable; try again shortly.") from exc

    def _query(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """Every item a Query returns, page after page, as plain Python values."""
        while True:
            page = self._call("query", **kwargs)
            for item in page.get("Items", []):
                yield _plain(item)
            if not page.get("LastEvaluatedKey"):
                return
            kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _update_if(self, key: dict[str, Any], **kwargs: Any) -> dict[str, Any] | None:
        """A conditional UpdateItem on the jobs table: its response, or None when the condition failed."""
        try:
            response: dict[str, Any] = self._call(
                "update_item", TableName=self._jobs, Key=_item(key), **kwargs
            )
        except ConditionFailed:
            return None
        return response

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
        """The job, read strongly consistent, or None."""
        response = self._call(
            "get_item", TableName=self._jobs, Key=_item({"jobId": job_id}), ConsistentRead=True
        )
        item = response.get("Item")
        return job_from_item(_plain(item)) if item else None

    def list_jobs(
        self, account_id: str, status: JobStatus | None, limit: int, next_token: str | None
    ) -> tuple[list[Job], str | None]:
        """An account's top-level jobs, newest first, through the sparse ``byAccount`` index."""
        start_key = self._decode_token(next_token, account_id) if next_token else None
        jobs: list[Job] = []
        last_key: dict[str, Any] | None = None
        while len(jobs) < limit:
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
            page = self._call("query", **kwargs)
            jobs += [job_from_item(_plain(item)) for item in page.get("Items", [])]
            last_key = page.get("LastEvaluatedKey")
            if not last_key:
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
        """Record the Batch job id unless an event already did."""
        self._update_if(
            {"jobId": job_id},
            UpdateExpression="SET batchJobId = :b",
            ConditionExpression="attribute_exists(jobId) AND attribute_not_exists(batchJobId)",
            ExpressionAttributeValues={":b": _ser(batch_job_id)},
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
        ]
        if after.is_final:
            fields.append("creditsSpent")
        names = {f"#{f}": f for f in fields}
        sets = [f"#{f} = :{f}" for f in fields if item.get(f) is not None]
        removes = [f"#{f}" for f in fields if item.get(f) is None]
        expression = "SET " + ", ".join(sets) + (" REMOVE " + ", ".join(removes) if removes else "")
        values = {f":{f}": _ser(item[f]) for f in fields if item.get(f) is not None}
        values[":before"] = _ser(transition.before.event_position)
        values[":succeeded"] = _ser(JobStatus.SUCCEEDED.value)
        values[":terminated"] = _ser(JobStatus.TERMINATED.value)
        return {
            "TableName": self._jobs,
            "Key": _item({"jobId": after.job_id}),
            "UpdateExpression": expression,
            "ConditionExpression": "#eventPosition = :before AND NOT #status IN (:succeeded, :terminated)",
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }

    def save_transition(self, transition: Transition, now: datetime) -> None:
        """Store a non-final transition (conditional on the position it was computed from)."""
        self._call("update_item", **self._transition_update(transition, now))

    def settle(
        self, transition: Transition, charge: Charge, entry: LedgerEntry | None, now: datetime
    ) -> None:
        """The final transition, the ledger entry and the balance change in one transaction."""
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
                        "ConditionExpression": "creditBalance = :before",
                        "ExpressionAttributeValues": {
                            ":after": _ser(entry.balance_after),
                            ":before": _ser(before),
                        },
                    }
                }
            )
        self._call("transact_write_items", TransactItems=items)

    def set_termination_reason(self, job_id: str, reason: str) -> Job | None:
        """Record the service's termination reason unless the job is final or has one."""
        response = self._update_if(
            {"jobId": job_id},
            UpdateExpression="SET terminationReason = :r",
            ConditionExpression=(
                "attribute_exists(jobId) AND attribute_not_exists(terminationReason)"
                " AND NOT #s IN (:succeeded, :terminated)"
            ),
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={
                ":r": _ser(reason),
                ":succeeded": _ser(JobStatus.SUCCEEDED.value),
                ":terminated": _ser(JobStatus.TERMINATED.value),
            },
            ReturnValues="ALL_NEW",
        )
        return job_from_item(_plain(response["Attributes"])) if response else None

    def claim_notification(self, job_id: str, key: str, while_open: bool = False) -> bool:
        """Add ``key`` to ``sentNotifications``; True only for the writer that added it. With
        ``while_open`` (progress notifications), only while the job is not final."""
        condition = "attribute_exists(jobId) AND NOT contains(sentNotifications, :key)"
        if while_open:
            condition += " AND attribute_exists(openPartition)"
        added = self._update_if(
            {"jobId": job_id},
            UpdateExpression="ADD sentNotifications :k DELETE retryNotifications :k",
            ConditionExpression=condition,
            ExpressionAttributeValues={":k": _ser({key}), ":key": _ser(key)},
        )
        return added is not None

    def release_notification(self, job_id: str, key: str, failure: str) -> None:
        """After a transient publish failure: remove ``key`` from ``sentNotifications``, keep it owed
        (``retryNotifications``), record the attempt (``publishFailures``, see
        ``notification_schedule.failure_record``) and list the job for the meter's retries (sparse
        ``notifyRetry``). Nothing happens to a job that no longer exists."""
        self._update_if(
            {"jobId": job_id},
            UpdateExpression=(
                "DELETE sentNotifications :k ADD retryNotifications :k, publishFailures :f "
                "SET retryPartition = :r"
            ),
            ConditionExpression="attribute_exists(jobId)",
            ExpressionAttributeValues={":k": _ser({key}), ":f": _ser({failure}), ":r": _ser(RETRY_PARTITION)},
        )

    def list_notification_retries(self) -> Iterator[str]:
        """Ids of jobs with a notification to send again (the sparse ``notifyRetry`` index)."""
        for item in self._query(
            TableName=self._jobs,
            IndexName="notifyRetry",
            KeyConditionExpression="retryPartition = :r",
            ExpressionAttributeValues={":r": _ser(RETRY_PARTITION)},
        ):
            yield str(item["jobId"])

    def request_notification_retry(self, job_id: str) -> None:
        """List the job for the meter's next tick (more is owed than one delivery sends)."""
        self._update_if(
            {"jobId": job_id},
            UpdateExpression="SET retryPartition = :r",
            ConditionExpression="attribute_exists(jobId)",
            ExpressionAttributeValues={":r": _ser(RETRY_PARTITION)},
        )

    def clear_notification_retry(self, job_id: str) -> None:
        """Take the job out of ``notifyRetry`` once nothing is left to send again."""
        self._update_if(
            {"jobId": job_id},
            UpdateExpression="REMOVE retryPartition",
            ConditionExpression="attribute_exists(jobId) AND attribute_not_exists(retryNotifications)",
        )

    def append_notification_record(self, job_id: str, record: NotificationRecord) -> None:
        """Append to the job's ``notificationLog``, keeping the newest ``NOTIFICATION_LOG_LIMIT``
        lines (a DynamoDB item is at most 400 KB; a year of Hourly would not fit)."""
        entry = _ser([_record_to_item(record)])
        for _ in range(5):
            try:
                self._call(
                    "update_item",
                    TableName=self._jobs,
                    Key=_item({"jobId": job_id}),
                    UpdateExpression=(
                        "SET notificationLog = list_append(if_not_exists(notificationLog, :empty), :e)"
                    ),
                    ConditionExpression="attribute_exists(jobId) AND "
                    "(attribute_not_exists(notificationLog) OR size(notificationLog) < :limit)",
                    ExpressionAttributeValues={
                        ":e": entry,
                        ":empty": _ser([]),
                        ":limit": _ser(NOTIFICATION_LOG_LIMIT),
                    },
                )
                return
            except ConditionFailed:
                job = self.get_job(job_id)
                if job is None:
                    return
                kept = [_record_to_item(r) for r in job.notification_log[-(NOTIFICATION_LOG_LIMIT // 2) :]]
                try:
                    self._call(
                        "update_item",
                        TableName=self._jobs,
                        Key=_item({"jobId": job_id}),
                        UpdateExpression="SET notificationLog = :kept",
                        ConditionExpression="size(notificationLog) = :n",
                        ExpressionAttributeValues={
                            ":kept": _ser(kept),
                            ":n": _ser(len(job.notification_log)),
                        },
                    )
                except ConditionFailed:
                    continue
        logger.warning("notification log line dropped", job_id=job_id)

    def list_metered_jobs(self) -> Iterator[Job]:
        """Starting/Running jobs from the sparse ``metered`` index, then read in full."""
        for item in self._query(
            TableName=self._jobs,
            IndexName="metered",
            KeyConditionExpression="meterPartition = :p",
            ExpressionAttributeValues={":p": _ser(METER_PARTITION)},
        ):
            yield job_from_item(item)

    def mark_data_deleted(self, job_id: str, now: datetime) -> None:
        """Record that a final job's data was deleted by its owner (its data routes answer 410)."""
        self._call(
            "update_item",
            TableName=self._jobs,
            Key=_item({"jobId": job_id}),
            UpdateExpression="SET dataDeletedAt = if_not_exists(dataDeletedAt, :now)",
            ConditionExpression="attribute_exists(jobId)",
            ExpressionAttributeValues={":now": _ser(to_sortable(now))},
        )

    def list_stale_jobs(self, last_event_before: datetime) -> Iterator[Job]:
        """Jobs that are not final and whose last event is older than ``last_event_before``
        (the sparse ``unfinished`` index, one key-range query)."""
        kwargs: dict[str, Any] = {
            "TableName": self._jobs,
            "IndexName": "unfinished",
            "KeyConditionExpression": "openPartition = :p AND lastEventAt < :t",
            "ExpressionAttributeValues": {
                ":p": _ser(OPEN_PARTITION),
                ":t": _ser(to_sortable(last_event_before)),
            },
        }
        for item in self._query(**kwargs):
            yield job_from_item(item)

    def mark_reconciled(self, job_id: str, now: datetime) -> None:
        """Set ``lastEventAt`` of a non-final job to ``now`` after the meter checked it with Batch."""
        self._update_if(
            {"jobId": job_id},
            UpdateExpression="SET lastEventAt = :now",
            ConditionExpression="attribute_exists(openPartition)",
            ExpressionAttributeValues={":now": _ser(to_sortable(now))},
        )

    def raise_credits_spent(self, job_id: str, credits: Decimal) -> bool:
        """Raise ``creditsSpent`` of a Running job; never lowers it."""
        raised = self._update_if(
            {"jobId": job_id},
            UpdateExpression="SET creditsSpent = :c",
            ConditionExpression="#s = :running AND creditsSpent < :c",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":c": _ser(credits), ":running": _ser(JobStatus.RUNNING.value)},
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

        Raises ``ConditionFailed`` when the account does not exist.
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
        response = self._call("update_item", **kwargs)
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
                        "ConditionExpression": "creditBalance = :before",
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
