"""Builders of real-shaped events for tests: ``Batch Job State Change`` envelopes (AWS Batch's
schema, https://docs.aws.amazon.com/batch/latest/userguide/batch_job_events.html), API Gateway
REST proxy events and scheduled events. Tests build events here instead of pasting JSON."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

from remote_batch_local.events import BatchAttempt, batch_job_state_change

ACCOUNT = "123456789012"
REGION = "us-east-1"
QUEUE_ARN = f"arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/remote-batch-Basic1x8"
JOB_DEFINITION_ARN = f"arn:aws:batch:{REGION}:{ACCOUNT}:job-definition/remote-batch-worker:1"


def batch_event(
    job_name: str,
    batch_job_id: str,
    status: str,
    *,
    created_at: int = 1_764_000_000_000,
    started_at: int | None = None,
    stopped_at: int | None = None,
    exit_code: int | None = None,
    status_reason: str | None = None,
    attempts: list[dict[str, Any]] | None = None,
    log_stream_name: str | None = None,
    container_reason: str | None = None,
    time_ms: int | None = None,
    array_index: int | None = None,
    array_size: int | None = None,
    status_summary: dict[str, int] | None = None,
) -> dict[str, Any]:
    """A ``Batch Job State Change`` EventBridge envelope for one job status (times in ms), built by
    the same builder the local executor emits with. ``attempts`` are ``detail.attempts`` items
    (``container.reason`` included); ``container_reason`` is ``detail.container.reason``;
    ``time_ms`` is the envelope's time (default: the stop, else the start, else the creation).

    Array jobs (AWS Batch API reference, ``ArrayPropertiesDetail``): a child's event has
    ``array_index`` (``arrayProperties.index``; give ``batch_job_id`` as ``<array id>:<index>``), an
    array job's own has ``array_size`` and ``status_summary`` (``arrayProperties.size`` and
    ``.statusSummary``)."""
    ended = [
        BatchAttempt(
            exit_code=a.get("container", {}).get("exitCode"),
            log_stream_name=a.get("container", {}).get("logStreamName"),
            task_arn=f"arn:aws:ecs:{REGION}:{ACCOUNT}:task/remote-batch/{i}",
            started_at_ms=a["startedAt"],
            stopped_at_ms=a["stoppedAt"],
            status_reason=a.get("statusReason", "Essential container in task exited"),
            container_reason=a.get("container", {}).get("reason"),
        )
        for i, a in enumerate(attempts or [])
    ]
    stamp = time_ms or stopped_at or started_at or created_at
    envelope = batch_job_state_change(
        region=REGION,
        account=ACCOUNT,
        job_id=batch_job_id,
        job_name=job_name,
        job_queue=QUEUE_ARN,
        job_definition=JOB_DEFINITION_ARN,
        status=status,
        created_at_ms=created_at,
        vcpus=1,
        memory_mib=8192,
        command=["python", "-m", "worker"],
        status_reason=status_reason,
        started_at_ms=started_at,
        stopped_at_ms=stopped_at,
        exit_code=exit_code,
        container_reason=container_reason,
        log_stream=log_stream_name,
        attempts=ended,
        tags={"remote-batch:jobId": job_name},
        time=datetime.fromtimestamp(stamp / 1000, tz=UTC),
    )
    if array_index is not None:
        envelope["detail"]["arrayProperties"] = {"index": array_index}
    elif array_size is not None:
        envelope["detail"]["arrayProperties"] = {
            "size": array_size,
            "statusSummary": dict(status_summary or {}),
            "statusSummaryLastUpdatedAt": stamp,
        }
    return envelope


def job_lifecycle(
    job_name: str,
    batch_job_id: str,
    *,
    created_at: int,
    started_at: int,
    stopped_at: int,
    succeeded: bool = True,
    exit_code: int | None = None,
    status_reason: str | None = None,
) -> list[dict[str, Any]]:
    """The events of one attempt, in the order AWS Batch emits them (no event for SUBMITTED)."""
    stream = f"remote-batch-worker/default/{batch_job_id}"
    final = "SUCCEEDED" if succeeded else "FAILED"
    code = exit_code if exit_code is not None else (0 if succeeded else 1)
    attempt = {
        "container": {"exitCode": code, "logStreamName": stream},
        "startedAt": started_at,
        "stoppedAt": stopped_at,
        "statusReason": "Essential container in task exited",
    }
    return [
        batch_event(job_name, batch_job_id, "PENDING", created_at=created_at),
        batch_event(job_name, batch_job_id, "RUNNABLE", created_at=created_at),
        batch_event(job_name, batch_job_id, "STARTING", created_at=created_at),
        batch_event(
            job_name,
            batch_job_id,
            "RUNNING",
            created_at=created_at,
            started_at=started_at,
            log_stream_name=stream,
        ),
        batch_event(
            job_name,
            batch_job_id,
            final,
            created_at=created_at,
            started_at=started_at,
            stopped_at=stopped_at,
            exit_code=code,
            status_reason=status_reason or "Essential container in task exited",
            attempts=[attempt],
            log_stream_name=stream,
        ),
    ]


def array_child_lifecycle(
    job_name: str,
    span_batch_id: str,
    index: int,
    *,
    created_at: int,
    started_at: int,
    stopped_at: int,
    succeeded: bool = True,
    status_reason: str | None = None,
) -> list[dict[str, Any]]:
    """The events of one child of an AWS Batch array job, in the order Batch emits them: its job id
    is ``<span id>:<index>``, its name the array job's, and it carries ``arrayProperties.index``
    (a child starts PENDING: AWS Batch's children never show SUBMITTED)."""
    child = f"{span_batch_id}:{index}"
    events = job_lifecycle(
        job_name,
        child,
        created_at=created_at,
        started_at=started_at,
        stopped_at=stopped_at,
        succeeded=succeeded,
        status_reason=status_reason,
    )
    for envelope in events:
        envelope["detail"]["arrayProperties"] = {"index": index}
    return events


def api_event(
    method: str,
    path: str,
    *,
    account_id: str | None = "dev",
    body: Any = None,
    raw_body: str | None = None,
    query: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    groups: str = "",
) -> dict[str, Any]:
    """An API Gateway REST proxy event as a Cognito-authorized request would produce."""
    text = raw_body if raw_body is not None else (json.dumps(body) if body is not None else None)
    all_headers = {"Content-Type": "application/json", **(headers or {})}
    claims = {"sub": account_id, "cognito:groups": groups} if account_id else None
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": method,
        "headers": all_headers,
        "multiValueHeaders": {k: [v] for k, v in all_headers.items()},
        "queryStringParameters": query,
        "multiValueQueryStringParameters": {k: [v] for k, v in query.items()} if query else None,
        "pathParameters": {"proxy": path.lstrip("/")},
        "stageVariables": None,
        "body": text,
        "isBase64Encoded": False,
        "requestContext": {
            "resourcePath": "/{proxy+}",
            "httpMethod": method,
            "path": f"/v1{path}",
            "stage": "v1",
            "requestId": str(uuid.uuid4()),
            "requestTimeEpoch": 1_764_000_000_000,
            "accountId": ACCOUNT,
            "identity": {"sourceIp": "127.0.0.1", "userAgent": "pytest"},
            "authorizer": {"claims": claims} if claims else None,
        },
    }


def scheduled_event() -> dict[str, Any]:
    """The EventBridge schedule's event to the meter."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": ACCOUNT,
        "time": "2026-11-29T17:20:00Z",
        "region": REGION,
        "resources": [f"arn:aws:events:{REGION}:{ACCOUNT}:rule/remote-batch-meter"],
        "detail": {},
    }
