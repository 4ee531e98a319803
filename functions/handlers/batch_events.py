"""batch_events Lambda: ``Batch Job State Change`` events from EventBridge → job status and charge,
or, for an environment's build job (its tags), the environment Ready or Failed.

The event's shape is AWS Batch's (https://docs.aws.amazon.com/batch/latest/userguide/batch_job_events.html):
``detail`` resembles DescribeJobs' ``JobDetail``. Unknown detail-types and statuses are logged and
ignored; a failure raises so EventBridge retries (then the rule's DLQ keeps it).

The envelope is validated with pydantic against ``BatchJobStateChange``, the fields of powertools'
``EventBridgeModel`` declared here: importing ``aws_lambda_powertools.utilities.parser`` builds every
AWS event model it ships (SQS, S3, Kinesis, ...), about 60 ms of each cold start for one envelope;
``tests/unit/test_batch_event_envelope.py`` checks both accept and refuse the same events.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from functions.adapters.batch_detail import BatchJobDetail, to_state
from functions.bootstrap import get_services
from functions.domain.environment_builds import build_tags
from functions.logic.environment_builds import apply_build_state_change
from functions.logic.job_events import apply_job_state_change
from functions.observability import EVENT_BRIDGE_EVENT_ID, lambda_entry, logger, metrics

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.typing import LambdaContext

DETAIL_TYPE = "Batch Job State Change"


class BatchJobStateChange(BaseModel):
    """The EventBridge envelope with a typed Batch ``detail``: the fields, aliases and types of
    powertools' ``EventBridgeModel`` (``aws_lambda_powertools.utilities.parser.models``), after the
    EventBridge event structure reference (Amazon EventBridge user guide, "Events": ``version``,
    ``id``, ``detail-type``, ``source``, ``account``, ``time``, ``region``, ``resources``, ``detail``;
    ``replay-name`` on replayed events)."""

    model_config = ConfigDict(populate_by_name=True)

    version: str
    id: str
    source: str
    account: str
    time: datetime
    region: str
    resources: list[str]
    detail_type: str = Field(alias="detail-type")
    detail: BatchJobDetail
    replay_name: str | None = Field(default=None, alias="replay-name")


@lambda_entry(EVENT_BRIDGE_EVENT_ID)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Apply one EventBridge event. Returns a small summary (for logs and tests)."""
    if event.get("detail-type") != DETAIL_TYPE or event.get("source") != "aws.batch":
        logger.warning("event ignored", detail_type=event.get("detail-type"), source=event.get("source"))
        return {"applied": False}
    try:
        parsed = BatchJobStateChange.model_validate(event)
    except ValidationError:
        logger.exception("malformed batch event ignored", event_id=event.get("id"))
        return {"applied": False}
    services = get_services()
    build = build_tags(parsed.detail.tags)
    if build is not None:  # an environment's build job, not a user's job
        environment = apply_build_state_change(
            services, build, parsed.detail.status, parsed.detail.status_reason
        )
        if environment is None:
            return {"applied": False}
        return {"applied": True, "environment": environment.name, "status": environment.status.value}
    state = to_state(parsed.detail, int(parsed.time.timestamp() * 1000))
    job = apply_job_state_change(services, state, services.clock())
    metrics.add_metric(name="BatchEvents", unit=MetricUnit.Count, value=1)
    if job is None:
        return {"applied": False}
    return {"applied": True, "jobId": job.job_id, "status": job.status.value}
