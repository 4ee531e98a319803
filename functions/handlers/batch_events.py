"""batch_events Lambda: ``Batch Job State Change`` events from EventBridge → job status and charge.

The event's shape is AWS Batch's (https://docs.aws.amazon.com/batch/latest/userguide/batch_job_events.html):
``detail`` resembles DescribeJobs' ``JobDetail``. Unknown detail-types and statuses are logged and
ignored; a failure raises so EventBridge retries (then the rule's DLQ keeps it).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from functions.bootstrap import get_services
from functions.domain.jobs import BatchJobState
from functions.logic.job_events import apply_job_state_change

logger = Logger(service="remote-batch")
tracer = Tracer(service="remote-batch")
metrics = Metrics(namespace="RemoteBatch", service="remote-batch")

DETAIL_TYPE = "Batch Job State Change"


class BatchContainerDetail(BaseModel):
    """``detail.container``: what the service reads of it."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    exit_code: int | None = Field(default=None, alias="exitCode")
    log_stream_name: str | None = Field(default=None, alias="logStreamName")


class BatchJobStateChangeDetail(BaseModel):
    """``detail`` of a ``Batch Job State Change`` event (times: ms since the epoch)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    job_id: str = Field(alias="jobId")
    job_name: str = Field(alias="jobName")
    status: str
    status_reason: str | None = Field(default=None, alias="statusReason")
    created_at: int | None = Field(default=None, alias="createdAt")
    started_at: int | None = Field(default=None, alias="startedAt")
    stopped_at: int | None = Field(default=None, alias="stoppedAt")
    attempts: list[dict[str, Any]] = Field(default_factory=list)
    container: BatchContainerDetail | None = None


class BatchJobStateChange(EventBridgeModel):  # type: ignore[misc]
    """The EventBridge envelope with a typed Batch ``detail``."""

    detail: BatchJobStateChangeDetail


def to_state(event: BatchJobStateChange) -> BatchJobState:
    """The domain's view of the event. A final event without ``stoppedAt`` uses the envelope time."""
    detail = event.detail
    container = detail.container or BatchContainerDetail()
    stopped_at = detail.stopped_at
    if stopped_at is None and detail.status in ("SUCCEEDED", "FAILED") and detail.started_at is not None:
        stopped_at = int(event.time.timestamp() * 1000)
    last_attempt = (detail.attempts or [{}])[-1].get("container", {}) if detail.attempts else {}
    return BatchJobState(
        batch_job_id=detail.job_id,
        job_name=detail.job_name,
        status=detail.status,
        status_reason=detail.status_reason,
        created_at_ms=detail.created_at,
        started_at_ms=detail.started_at,
        stopped_at_ms=stopped_at,
        exit_code=container.exit_code if container.exit_code is not None else last_attempt.get("exitCode"),
        log_stream_name=container.log_stream_name or last_attempt.get("logStreamName"),
        attempt_count=len(detail.attempts),
    )


@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Apply one EventBridge event. Returns a small summary (for logs and tests)."""
    if event.get("detail-type") != DETAIL_TYPE or event.get("source") != "aws.batch":
        logger.warning("event ignored", detail_type=event.get("detail-type"), source=event.get("source"))
        return {"applied": False}
    try:
        parsed = parse(event=event, model=BatchJobStateChange)
    except ValidationError:
        logger.exception("malformed batch event ignored", event_id=event.get("id"))
        return {"applied": False}
    services = get_services()
    job = apply_job_state_change(services, to_state(parsed), services.clock())
    metrics.add_metric(name="BatchEvents", unit=MetricUnit.Count, value=1)
    if job is None:
        return {"applied": False}
    return {"applied": True, "jobId": job.job_id, "status": job.status.value}
