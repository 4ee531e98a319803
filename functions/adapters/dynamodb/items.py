"""The DynamoDB items of jobs, accounts and ledger entries (plain Python values) and the low-level
(de)serialization of attribute values (boto3's ``TypeSerializer``: numbers are ``Decimal``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from functions.domain.credits import quantize_credits
from functions.domain.dependencies import Condition, Dependency, DependencyMode, InputsFrom, settled_reason
from functions.domain.environments import JobEnvironment
from functions.domain.errors import UnreadableRecord
from functions.domain.jobs import (
    RECORD_TTL,
    Account,
    DispatchState,
    Job,
    JobType,
    LedgerEntry,
    LedgerKind,
    NotificationRecord,
    PayloadKind,
    QueuedSpan,
    WithdrawnSpan,
)
from functions.domain.machine_classes import GeoZone
from functions.domain.notifications import rules_from_json, rules_to_json
from functions.domain.prerequisites import Prerequisite
from functions.domain.status import METERED_STATUSES, JobStatus
from functions.domain.timefmt import from_sortable, to_sortable

METER_PARTITION = "metered"
OPEN_PARTITION = "open"
RETRY_PARTITION = "retry"

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def serialize_value(value: Any) -> dict[str, Any]:
    """One attribute value in DynamoDB's wire form (``"x"`` → ``{"S": "x"}``, numbers as ``{"N": ...}``)."""
    serialized: dict[str, Any] = dict(_serializer.serialize(value))
    return serialized


def serialize_item(values: dict[str, Any]) -> dict[str, Any]:
    """An item (or key) in DynamoDB's wire form; attributes whose value is None are left out."""
    return {k: serialize_value(v) for k, v in values.items() if v is not None}


def deserialize_item(item: dict[str, Any]) -> dict[str, Any]:
    """An item in plain Python values (numbers as ``Decimal``, string sets as ``set``)."""
    return {k: _deserializer.deserialize(v) for k, v in item.items()}


def _opt_time(value: str | None) -> datetime | None:
    return from_sortable(value) if value else None


def _opt_int(value: Decimal | None) -> int | None:
    return int(value) if value is not None else None


def record_to_item(record: NotificationRecord) -> dict[str, Any]:
    """One ``notificationLog`` line as a map."""
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
        "arrayContainers": job.array_containers,
        "childStatusCounts": job.child_status_counts,
        "sentNotifications": set(job.sent_notifications) or None,
        "retryNotifications": set(job.retry_notifications) or None,
        "publishFailures": set(job.publish_failures) or None,
        "notificationLog": [record_to_item(r) for r in job.notification_log] or None,
        "dataDeletedAt": to_sortable(job.data_deleted_at) if job.data_deleted_at else None,
        "batchReason": job.batch_reason,
        "submittedBy": job.submitted_by,
        "pythonVersion": job.python_version,
        "environment": _environment_item(job.environment),
        "warnings": list(job.warnings) or None,
        "compute": job.compute,
        "terminationRequestedAt": (
            to_sortable(job.termination_requested_at) if job.termination_requested_at else None
        ),
        "terminationAttempts": job.termination_attempts or None,
        "dispatchState": job.dispatch_state.value if job.dispatch_state else None,
        "dispatchClaimedAt": to_sortable(job.dispatch_claimed_at) if job.dispatch_claimed_at else None,
        "waitingFor": [p.id for p in job.waiting_for] or None,
        "dependsOn": [_dependency_item(d) for d in job.depends_on] or None,
        "inputsFrom": [{"jobId": i.job_id, "files": list(i.files)} for i in job.inputs_from] or None,
        "hasDependents": True if job.has_dependents else None,
        "dependents": list(job.dependents) or None,
        "settledParents": set(job.settled_parents) or None,
        "itemDependents": list(job.item_dependents) or None,
        "arrayReleased": list(job.array_released) or None,
        "arrayEndedItems": set(job.array_ended_items) or None,
        "arrayContainersSettled": set(job.array_containers_settled) or None,
        "ttl": int((job.record_expires_at or job.submitted_at + RECORD_TTL).timestamp()),
    }
    values.update(_array_values(job))
    if job.type != JobType.ARRAY_CHILD:
        values["listKey"] = list_key(job)
    if job.status in METERED_STATUSES:
        values["meterPartition"] = METER_PARTITION
    if not job.is_final:
        values["openPartition"] = OPEN_PARTITION
    return values


def list_key(job: Job) -> str:
    """The ``byAccount`` index's sort key of a top-level job: newest first by submission, then id."""
    return f"{to_sortable(job.submitted_at)}#{job.job_id}"


def _environment_item(environment: JobEnvironment | None) -> dict[str, str | None] | None:
    """A job's environment as its item's map (the image and its pull secret only when it has them)."""
    if environment is None:
        return None
    item: dict[str, str | None] = {
        "name": environment.name,
        "hash": environment.hash,
        "python": environment.python,
    }
    if environment.image is not None:
        item["image"] = environment.image
    if environment.repository_credentials is not None:
        item["repositoryCredentials"] = environment.repository_credentials
    return item


def _environment(value: Any) -> JobEnvironment | None:
    if not value:
        return None
    name, digest = value.get("name"), value.get("hash")
    return JobEnvironment(
        str(name) if name is not None else None,
        str(digest) if digest is not None else None,
        str(value["python"]),
        image=value.get("image"),
        repository_credentials=value.get("repositoryCredentials"),
    )


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
        array_containers=_opt_int(item.get("arrayContainers")),
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
        compute=item.get("compute"),
        submitted_by=item.get("submittedBy"),
        python_version=item.get("pythonVersion"),
        environment=_environment(item.get("environment")),
        dispatch_state=DispatchState(item["dispatchState"]) if item.get("dispatchState") else None,
        dispatch_claimed_at=_opt_time(item.get("dispatchClaimedAt")),
        array_admitted=int(item.get("arrayAdmitted", 0)),
        array_queue=_queued_spans(item.get("arrayQueue")),
        array_withdrawn=tuple(
            WithdrawnSpan(int(w["offset"]), int(w["count"]), str(w["reason"]))
            for w in item.get("arrayWithdrawn", [])
        ),
        waiting_for=tuple(Prerequisite.parse(str(p)) for p in item.get("waitingFor", [])),
        depends_on=tuple(
            Dependency(
                str(d["jobId"]), Condition(str(d["condition"])), DependencyMode(str(d.get("mode", "whole")))
            )
            for d in item.get("dependsOn", [])
        ),
        inputs_from=tuple(
            InputsFrom(str(i["jobId"]), tuple(str(f) for f in i.get("files", [])))
            for i in item.get("inputsFrom", [])
        ),
        has_dependents=bool(item.get("hasDependents", False)),
        dependents=tuple(str(d) for d in item.get("dependents", [])),
        settled_parents=frozenset(str(p) for p in item.get("settledParents", set())),
        item_dependents=tuple(str(d) for d in item.get("itemDependents", [])),
        array_released=tuple(int(i) for i in item.get("arrayReleased", [])),
        array_ended_items=frozenset(int(i) for i in item.get("arrayEndedItems", set())),
        array_containers_settled=frozenset(int(i) for i in item.get("arrayContainersSettled", set())),
        status_reason=_status_reason(item),
    )


def _dependency_item(dependency: Dependency) -> dict[str, Any]:
    """One ``dependsOn`` entry as stored (``mode`` only when not ``whole``, as records before it)."""
    item: dict[str, Any] = {"jobId": dependency.job_id, "condition": dependency.condition.value}
    if dependency.mode is not DependencyMode.WHOLE:
        item["mode"] = dependency.mode.value
    return item


def _status_reason(item: dict[str, Any]) -> str | None:
    """The stored ``statusReason``; of a waiting job whose parents' settlements removed it (they count
    themselves without reading its other parents), the one its record says
    (``dependencies.settled_reason``)."""
    reason = item.get("statusReason")
    if reason is not None or item.get("dispatchState") != DispatchState.WAITING.value:
        return reason
    settled = item.get("settledParents")
    if not settled:
        return None
    waiting_for = [Prerequisite.parse(str(p)) for p in item.get("waitingFor", [])]
    return settled_reason(waiting_for, frozenset(str(p) for p in settled))


def span_queue_entry(span: QueuedSpan) -> dict[str, Any]:
    """One entry of a parent's ``arrayQueue`` map (keyed by the span's offset as a string):
    ``{"count": n, "state": "Admitted"|"Dispatching"[, "claimedAt": sortable time]}``."""
    entry: dict[str, Any] = {"count": span.count, "state": span.state.value}
    if span.claimed_at is not None:
        entry["claimedAt"] = to_sortable(span.claimed_at)
    return entry


def _queued_spans(queue: dict[str, Any] | None) -> tuple[QueuedSpan, ...]:
    spans = [
        QueuedSpan(
            int(offset),
            int(entry["count"]),
            DispatchState(entry["state"]),
            _opt_time(entry.get("claimedAt")),
        )
        for offset, entry in (queue or {}).items()
    ]
    return tuple(sorted(spans, key=lambda s: s.offset))


def _array_values(job: Job) -> dict[str, Any]:
    """The array attributes of a parent's item: ``creditsSettled`` (credits) and ``arraySpans`` (its
    Batch job ids, in the order AWS Batch took them); for a parent admitted through the quota and the
    dispatcher, ``arrayAdmitted``, ``arrayQueue`` and ``arrayWithdrawn`` (``Job``)."""
    if job.type != JobType.ARRAY:
        return {}
    values: dict[str, Any] = {
        "creditsSettled": job.credits_settled,
        "arraySpans": list(job.array_spans) or None,
    }
    if job.dispatch_state is not None:
        # Admitted through the dispatcher (``functions.logic.array_admission``): the span queue is a map
        # from the start, so a span's entry is one ``SET arrayQueue.#offset`` (a nested path needs it).
        values["arrayAdmitted"] = job.array_admitted
        values["arrayQueue"] = {str(s.offset): span_queue_entry(s) for s in job.array_queue}
        values["arrayWithdrawn"] = [
            {"offset": w.offset, "count": w.count, "reason": w.reason} for w in job.array_withdrawn
        ] or None
    return values


def account_from_item(item: dict[str, Any]) -> Account:
    """The account of a plain Accounts item (``KeyError`` for one without ``creditBalance``)."""
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


def entry_to_item(entry: LedgerEntry) -> dict[str, Any]:
    """The Ledger item (plain values) of an entry; ``unbilled`` only when not 0."""
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
        "compute": entry.compute,
    }


def entry_from_item(item: dict[str, Any]) -> LedgerEntry:
    """The entry of a plain Ledger item."""
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
        compute=item.get("compute"),
    )
