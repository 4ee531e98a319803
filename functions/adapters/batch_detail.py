"""AWS Batch's ``JobDetail`` (what DescribeJobs returns, and what a ``Batch Job State Change`` event
carries as ``detail``) read into the domain's ``BatchJobState``.

Schema: AWS Batch API reference, ``JobDetail``; the event is described in the AWS Batch user guide,
"Job state change events" (the ``detail`` "resembles the JobDetail object"). Unknown fields are kept
and ignored, as AWS asks of event consumers.

The models are built on their first use (``defer_build``): batch_events and DescribeJobs read them,
while every function imports this module through the Batch adapter.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from functions.domain.images import SUPERVISOR_CONTAINER
from functions.domain.jobs import BatchJobState

FINAL_BATCH_STATUSES = ("SUCCEEDED", "FAILED")


class BatchContainerDetail(BaseModel):
    """``detail.container``: what the service reads of it."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)

    exit_code: int | None = Field(default=None, alias="exitCode")
    log_stream_name: str | None = Field(default=None, alias="logStreamName")
    reason: str | None = None


class BatchArrayProperties(BaseModel):
    """``detail.arrayProperties``: ``index`` for an array's child, ``size`` and ``statusSummary``
    for the array job itself (AWS Batch API reference, ``ArrayPropertiesDetail``)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)

    index: int | None = None
    size: int | None = None
    status_summary: dict[str, int] | None = Field(default=None, alias="statusSummary")


class BatchJobDetail(BaseModel):
    """A job's ``JobDetail`` (times: milliseconds since the epoch)."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)

    job_id: str = Field(alias="jobId")
    job_name: str = Field(alias="jobName")
    status: str
    status_reason: str | None = Field(default=None, alias="statusReason")
    created_at: int | None = Field(default=None, alias="createdAt")
    started_at: int | None = Field(default=None, alias="startedAt")
    stopped_at: int | None = Field(default=None, alias="stoppedAt")
    attempts: list[dict[str, Any]] = Field(default_factory=list)
    container: BatchContainerDetail | None = None
    ecs_properties: dict[str, Any] | None = Field(default=None, alias="ecsProperties")
    array_properties: BatchArrayProperties | None = Field(default=None, alias="arrayProperties")
    tags: dict[str, Any] = Field(default_factory=dict)


# The tag the submit gives every Batch job with its account (``logic.batch_submission.batch_submission``).
ACCOUNT_TAG = "remote-batch:accountId"


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value.strip() else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _task_containers(detail: BatchJobDetail) -> tuple[BatchContainerDetail | None, list[str]]:
    """A multi-container job's (an image environment's, ``batch_definitions``) supervisor container,
    whose exit code, log stream and reason are the job's, and the other containers' reasons (the job
    container's ``OutOfMemoryError``); (None, []) for a single-container job."""
    tasks = (detail.ecs_properties or {}).get("taskProperties")
    if not isinstance(tasks, list) or not tasks or not isinstance(tasks[0], dict):
        return None, []
    containers = [c for c in tasks[0].get("containers", []) if isinstance(c, dict)]
    supervisor = next((c for c in containers if c.get("name") == SUPERVISOR_CONTAINER), None)
    reasons = [r for c in containers if c is not supervisor and (r := _text(c.get("reason")))]
    if supervisor is None:
        return None, reasons
    return BatchContainerDetail.model_validate(supervisor), reasons


def to_state(detail: BatchJobDetail, observed_at_ms: int) -> BatchJobState:
    """The domain's view of a ``JobDetail``.

    Reasons are read where AWS Batch puts them, most specific first: ``container.reason``
    (``OutOfMemoryError: Container killed due to memory usage``), the last attempt's
    ``container.reason`` and ``statusReason`` (``Host EC2 (instance i-…) terminated.``); the job's
    ``statusReason`` stays ``status_reason``. A final detail without ``startedAt``/``stoppedAt``
    takes the last attempt's; ``observed_at_ms`` is kept for the domain to use when a time is
    still missing or runs backwards.

    Parameters
    ----------
    detail : BatchJobDetail
        The parsed detail.
    observed_at_ms : int
        When it was observed (the event's time, or the DescribeJobs call's): stands in for a final
        detail's missing ``stoppedAt``.
    """
    task_container, task_reasons = _task_containers(detail)
    container = detail.container or task_container or BatchContainerDetail()
    last: dict[str, Any] = (
        detail.attempts[-1] if detail.attempts and isinstance(detail.attempts[-1], dict) else {}
    )
    raw_container = last.get("container")
    last_container: dict[str, Any] = raw_container if isinstance(raw_container, dict) else {}
    final = detail.status in FINAL_BATCH_STATUSES
    started_at = detail.started_at
    stopped_at = detail.stopped_at
    # The last attempt's times stand in for missing ones, when they are plausible (AWS Batch shows 0
    # or nothing for an attempt whose container never started).
    floor = max(detail.created_at or 0, 1)
    attempt_start, attempt_stop = _int(last.get("startedAt")), _int(last.get("stoppedAt"))
    if final and started_at is None and attempt_start is not None and attempt_start >= floor:
        started_at = attempt_start
    if final and stopped_at is None and attempt_stop is not None and attempt_stop >= floor:
        stopped_at = attempt_stop
    if stopped_at is None and final and started_at is not None:
        stopped_at = observed_at_ms
    reasons = [
        container.reason,
        *task_reasons,
        _text(last_container.get("reason")),
        _text(last.get("statusReason")),
    ]
    exit_code = (
        container.exit_code if container.exit_code is not None else _int(last_container.get("exitCode"))
    )
    return BatchJobState(
        batch_job_id=detail.job_id,
        job_name=detail.job_name,
        status=detail.status,
        status_reason=detail.status_reason,
        created_at_ms=detail.created_at,
        started_at_ms=started_at,
        stopped_at_ms=stopped_at,
        exit_code=exit_code,
        log_stream_name=container.log_stream_name or _text(last_container.get("logStreamName")),
        attempt_count=len(detail.attempts),
        container_reasons=tuple(r for r in reasons if r and r.strip()) if final else (),
        observed_at_ms=observed_at_ms,
        array_index=detail.array_properties.index if detail.array_properties else None,
        array_size=detail.array_properties.size if detail.array_properties else None,
        account_id=_text(detail.tags.get(ACCOUNT_TAG)),
    )
