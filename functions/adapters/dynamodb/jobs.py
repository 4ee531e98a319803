"""Job records: create, read, list, conditional status transitions, termination requests, and
the meter's sparse indexes (``metered``, ``unfinished``)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import datetime
from decimal import Decimal
from typing import Any

from botocore.exceptions import ClientError

from functions.adapters.dynamodb.base import LIVE_JOB, StoreBase, store_errors
from functions.adapters.dynamodb.items import (
    METER_PARTITION,
    OPEN_PARTITION,
    deserialize_item,
    job_from_item,
    job_to_item,
    list_key,
    serialize_item,
    serialize_value,
)
from functions.adapters.dynamodb.page_tokens import decode_token, encode_token
from functions.domain.errors import ConditionFailed, RecordMissing, UnreadableRecord
from functions.domain.jobs import MAX_TERMINATE_ATTEMPTS, Job, JobType, Transition, ms_to_datetime
from functions.domain.machine_classes import GeoZone
from functions.domain.presumed import PresumedTransition
from functions.domain.status import METERED_STATUSES, JobStatus
from functions.domain.timefmt import to_sortable

# GET /jobs reads at most this many index pages per request: a span of expired or filtered-out jobs
# then gives a short (even empty) page whose nextToken continues after it.
MAX_LIST_QUERIES = 20
# BatchGetItem takes at most 100 keys (DynamoDB API reference, BatchGetItem).
BATCH_GET_LIMIT = 100


#: The attributes of a page key of the jobs list (the ``byAccount`` index's and the table's).
_JOBS_PAGE_KEY = frozenset({"jobId", "accountId", "listKey"})


class JobRecords(StoreBase):
    """The job half of ``JobRepository``."""

    def create_job(self, job: Job) -> None:
        """Write a new job; ``ConditionFailed`` if its id exists."""
        with store_errors("PutItem"):
            self._db.put_item(
                TableName=self._jobs,
                Item=serialize_item(job_to_item(job)),
                ConditionExpression="attribute_not_exists(jobId)",
            )

    def delete_job(self, job_id: str) -> None:
        """Delete a job record (compensation of a submit that never reached AWS Batch)."""
        with store_errors("DeleteItem"):
            self._db.delete_item(TableName=self._jobs, Key=serialize_item({"jobId": job_id}))

    def list_jobs(
        self, account_id: str, status: JobStatus | None, limit: int, next_token: str | None
    ) -> tuple[list[Job], str | None]:
        """An account's top-level live jobs, newest first, through the sparse ``byAccount`` index.

        Jobs past their TTL and (with ``status``) other statuses are filtered out by DynamoDB after
        it reads them, so a page may hold fewer than ``limit`` jobs while its token is set: at most
        ``MAX_LIST_QUERIES`` index pages are read per call. Unreadable items are logged and skipped.
        """
        start_key = (
            serialize_item(decode_token(next_token, _JOBS_PAGE_KEY, {"accountId": account_id}))
            if next_token
            else None
        )
        jobs: list[Job] = []
        last_key: dict[str, Any] | None = None
        for _ in range(MAX_LIST_QUERIES):
            kwargs: dict[str, Any] = {
                "TableName": self._jobs,
                "IndexName": "byAccount",
                "KeyConditionExpression": "accountId = :a",
                "ExpressionAttributeValues": {":a": serialize_value(account_id)},
                "ScanIndexForward": False,
                "Limit": limit - len(jobs),
            }
            if status is not None:
                kwargs["FilterExpression"] = "#s = :s"
                kwargs["ExpressionAttributeNames"] = {"#s": "status"}
                kwargs["ExpressionAttributeValues"][":s"] = serialize_value(status.value)
            if start_key:
                kwargs["ExclusiveStartKey"] = start_key
            with store_errors("Query"):
                page = self._db.query(**self._not_expired_filter(kwargs))
            items = (deserialize_item(item) for item in page.get("Items", []))
            jobs += list(self._jobs_of(items, None))
            last_key = page.get("LastEvaluatedKey")
            if not last_key or len(jobs) >= limit:
                break
            start_key = last_key
        return jobs, encode_token(deserialize_item(last_key)) if last_key else None

    def list_token_after(self, job: Job) -> str:
        """The ``list_jobs`` token that goes on after ``job`` (its key in the ``byAccount`` index)."""
        return encode_token({"jobId": job.job_id, "accountId": job.account_id, "listKey": list_key(job)})

    def set_batch_job_id(self, job_id: str, batch_job_id: str) -> None:
        """Record the Batch job id unless an event already did; ``RecordMissing`` if the job is gone."""
        self._update_job(
            job_id,
            "SET batchJobId = :b",
            condition="attribute_not_exists(batchJobId)",
            values={":b": batch_job_id},
        )

    def save_transition(self, transition: Transition, now: datetime) -> None:
        """Store a non-final transition (conditional on the position it was computed from).

        Raises ``RecordMissing`` when the job is gone, ``ConditionFailed`` when it moved since read.
        """
        try:
            with store_errors("UpdateItem"):
                self._db.update_item(**self._transition_update(transition, now))
        except ConditionFailed as exc:
            if self._missing(exc):
                raise RecordMissing(f"Job {transition.after.job_id} no longer exists.") from None
            raise

    def save_presumed_transition(
        self, presumed: PresumedTransition, now: datetime
    ) -> tuple[Job | None, Job | None]:
        """Write an event's transition without reading the job: one UpdateItem conditional on
        ``presumed.holds_for`` (a live Single job in the presumed status and event position, of the
        event's Batch job or none, submitted no later than the event's ``startedAt``), returning what
        it wrote (``ALL_NEW``) or, when the condition failed, the job as it is (``ALL_OLD``).

        Returns
        -------
        tuple[Job | None, Job | None]
            (the job written, None), or (None, the job as stored) when it is not in the presumed state.

        Raises
        ------
        RecordMissing
            The job does not exist or is past its TTL.
        UnreadableRecord
            The stored item is not a whole job.
        """
        state = presumed.state
        values: dict[str, Any] = {
            ":status": presumed.target.value,
            ":presumed": presumed.presumed.value,
            ":position": state.position,
            ":before": presumed.before,
            ":batchJobId": state.batch_job_id,
            ":lastEventAt": to_sortable(now),
            ":openPartition": OPEN_PARTITION,
            ":single": JobType.SINGLE.value,
        }
        sets = [
            "#status = :status",
            "#eventPosition = :position",
            "#batchJobId = if_not_exists(#batchJobId, :batchJobId)",
            "#lastEventAt = :lastEventAt",
            "#openPartition = :openPartition",
        ]
        removes = ["#completedAt"]
        if presumed.entered:
            sets.append("#statusHistory = list_append(if_not_exists(#statusHistory, :initial), :entered)")
            values[":initial"] = [JobStatus.QUEUED.value]
            values[":entered"] = [status.value for status in presumed.entered]
        optional = {
            "statusReason": presumed.status_reason,
            "startedAt": to_sortable(ms_to_datetime(state.started_at_ms))
            if state.started_at_ms is not None
            else None,
            "exitCode": state.exit_code,
            "logStreamName": state.log_stream_name,
        }
        for field, value in optional.items():
            if value is not None:
                sets.append(f"#{field} = :{field}")
                values[f":{field}"] = value
            elif field == "statusReason":
                removes.append("#statusReason")
        if presumed.target in METERED_STATUSES:
            sets.append("#meterPartition = :meterPartition")
            values[":meterPartition"] = METER_PARTITION
        else:
            removes.append("#meterPartition")
        values[":liveNow"] = self._now_epoch()
        update = "SET " + ", ".join(sets) + " REMOVE " + ", ".join(removes)
        condition = (
            f"{LIVE_JOB} AND #type = :single AND #status = :presumed AND #eventPosition = :before"
            " AND (attribute_not_exists(#batchJobId) OR #batchJobId = :batchJobId)"
        )
        if state.started_at_ms is not None:
            # A start before the submission is clamped from the job as read (``charged_time``).
            condition += " AND #submittedAt <= :startedAt"
        # DynamoDB refuses a name the expressions do not use.
        used = set(re.findall(r"#\w+", update + " " + condition))
        kwargs: dict[str, Any] = {
            "TableName": self._jobs,
            "Key": serialize_item({"jobId": presumed.job_id}),
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {name: name[1:] for name in sorted(used)},
            "ExpressionAttributeValues": {k: serialize_value(v) for k, v in values.items()},
            "ReturnValues": "ALL_NEW",
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        try:
            with store_errors("UpdateItem"):
                response = self._db.update_item(**kwargs)
        except ConditionFailed as exc:
            if self._missing(exc):
                raise RecordMissing(f"Job {presumed.job_id} no longer exists.") from None
            cause = exc.__cause__
            response_body: dict[str, Any] = dict(cause.response) if isinstance(cause, ClientError) else {}
            old: dict[str, Any] = response_body.get("Item") or {}
            if not old:
                return None, self.get_job(presumed.job_id)
            return None, job_from_item(deserialize_item(old))
        return job_from_item(deserialize_item(dict(response["Attributes"]))), None

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
        return job_from_item(deserialize_item(response["Attributes"])) if response else None

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
                    "ExpressionAttributeValues": {":p": serialize_value(METER_PARTITION)},
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
        """Live jobs that are not final and whose last event is older than ``last_event_before``: the
        sparse ``unfinished`` index (its keys, ``lastEventAt`` and ``ttl``) filtered on both, then
        those jobs read whole (BatchGetItem, strongly consistent), and kept if still not final and
        quiet. An unreadable item is logged, passed to ``on_unreadable`` and skipped."""
        before = to_sortable(last_event_before)
        kwargs: dict[str, Any] = {
            "TableName": self._jobs,
            "IndexName": "unfinished",
            "KeyConditionExpression": "openPartition = :p",
            "FilterExpression": "lastEventAt < :t",
            "ExpressionAttributeValues": {
                ":p": serialize_value(OPEN_PARTITION),
                ":t": serialize_value(before),
            },
        }
        ids = [str(item["jobId"]) for item in self._query(**self._not_expired_filter(kwargs))]
        for job in self._jobs_of(self._batch_get_items(ids), on_unreadable):
            if not job.is_final and to_sortable(job.last_event_at or job.submitted_at) < before:
                yield job

    def list_waiting_job_ids(self, machine_class: str, geo_zone: GeoZone) -> tuple[list[str], list[str]]:
        """(single jobs still ``Queued``, unfinished arrays) of ``machine_class`` in ``geo_zone``, by id:
        one paged Query of the sparse ``unfinished`` index (it holds the class, zone, status and type),
        filtered on them and on the TTL, reading no job."""
        kwargs: dict[str, Any] = {
            "TableName": self._jobs,
            "IndexName": "unfinished",
            "KeyConditionExpression": "openPartition = :p",
            "FilterExpression": (
                "machineClass = :class AND geoZone = :zone"
                " AND ((#status = :queued AND #type = :single) OR #type = :array)"
            ),
            "ProjectionExpression": "jobId, #type",
            "ExpressionAttributeNames": {"#status": "status", "#type": "type"},
            "ExpressionAttributeValues": {
                ":p": serialize_value(OPEN_PARTITION),
                ":class": serialize_value(machine_class),
                ":zone": serialize_value(geo_zone.value),
                ":queued": serialize_value(JobStatus.QUEUED.value),
                ":single": serialize_value(JobType.SINGLE.value),
                ":array": serialize_value(JobType.ARRAY.value),
            },
        }
        singles: list[str] = []
        arrays: list[str] = []
        for item in self._query(**self._not_expired_filter(kwargs)):
            (arrays if item.get("type") == JobType.ARRAY.value else singles).append(str(item["jobId"]))
        return singles, arrays

    def list_unfinished_jobs_on(self, account_id: str, compute: str) -> Iterator[Job]:
        """The account's not-final top-level jobs on dedicated compute ``compute``: the sparse
        ``unfinished`` index's keys (cost grows with the jobs in flight, never with history), those
        jobs read whole (BatchGetItem, strongly consistent) and kept when they are the account's, on
        that compute and still not final. An unreadable item is logged and skipped."""
        kwargs: dict[str, Any] = {
            "TableName": self._jobs,
            "IndexName": "unfinished",
            "KeyConditionExpression": "openPartition = :p",
            "ExpressionAttributeValues": {":p": serialize_value(OPEN_PARTITION)},
        }
        ids = [str(item["jobId"]) for item in self._query(**self._not_expired_filter(kwargs))]
        for job in self._jobs_of(self._batch_get_items(ids), None):
            if (
                job.account_id == account_id
                and job.compute == compute
                and job.type != JobType.ARRAY_CHILD
                and not job.is_final
            ):
                yield job

    def _batch_get_items(self, job_ids: list[str]) -> Iterator[dict[str, Any]]:
        """The job items of ``job_ids`` (plain values; absent ones left out), BatchGetItem 100 keys a
        call, strongly consistent, unprocessed keys asked again."""
        unique = list(dict.fromkeys(job_ids))
        for start in range(0, len(unique), BATCH_GET_LIMIT):
            keys = [serialize_item({"jobId": job_id}) for job_id in unique[start : start + BATCH_GET_LIMIT]]
            request: dict[str, Any] = {self._jobs: {"Keys": keys, "ConsistentRead": True}}
            while request:
                with store_errors("BatchGetItem"):
                    response = self._db.batch_get_item(RequestItems=request)
                for item in response.get("Responses", {}).get(self._jobs, []):
                    yield deserialize_item(dict(item))
                request = dict(response.get("UnprocessedKeys") or {})

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
