"""batch_events Lambda: ``Batch Job State Change`` events from EventBridge → job status and charge.

The event's shape is AWS Batch's (https://docs.aws.amazon.com/batch/latest/userguide/batch_job_events.html):
``detail`` resembles DescribeJobs' ``JobDetail``. Unknown detail-types and statuses are logged and
ignored; a failure raises so EventBridge retries (then the rule's DLQ keeps it).
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import EventBridgeModel
from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import ValidationError

from functions.adapters.batch_detail import BatchJobDetail, to_state
from functions.bootstrap import get_services
from functions.logic.job_events import apply_job_state_change
from functions.observability import EVENT_BRIDGE_EVENT_ID, lambda_entry, logger, metrics

DETAIL_TYPE = "Batch Job State Change"


class BatchJobStateChange(EventBridgeModel):
    """The EventBridge envelope with a typed Batch ``detail``."""

    detail: BatchJobDetail


@lambda_entry(EVENT_BRIDGE_EVENT_ID)
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
    state = to_state(parsed.detail, int(parsed.time.timestamp() * 1000))
    job = apply_job_state_change(services, state, services.clock())
    metrics.add_metric(name="BatchEvents", unit=MetricUnit.Count, value=1)
    if job is None:
        return {"applied": False}
    return {"applied": True, "jobId": job.job_id, "status": job.status.value}
