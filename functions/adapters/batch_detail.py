"""AWS Batch's ``JobDetail`` (what DescribeJobs returns, and what a ``Batch Job State Change`` event
carries as ``detail``) read into the domain's ``BatchJobState``.

Schema: AWS Batch API reference, ``JobDetail``; the event is described in the AWS Batch user guide,
"Job state change events" (the ``detail`` "resembles the JobDetail object"). Unknown fields are kept
and ignored, as AWS asks of event consumers.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from functions.domain.jobs import BatchJobState

FINAL_BATCH_STATUSES = ("SUCCEEDED", "FAILED")


class BatchContainerDetail(BaseModel):
    """``detail.container``: what the service reads of it."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    exit_code: int | None = Field(default=None, alias="exitCode")
    log_stream_name: str | None = Field(default=None, alias="logStreamName")


class BatchJobDetail(BaseModel):
    """A job's ``JobDetail`` (times: milliseconds since the epoch)."""

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


def to_state(detail: BatchJobDetail, observed_at_ms: int) -> BatchJobState:
    """The domain's view of a ``JobDetail``.

    Parameters
    ----------
    detail : BatchJobDetail
        The parsed detail.
    observed_at_ms : int
        When it was observed (the event's time, or the DescribeJobs call's): stands in for a final
        detail's missing ``stoppedAt``.
    """
    container = detail.container or BatchContainerDetail()
    stopped_at = detail.stopped_at
    if stopped_at is None and detail.status in FINAL_BATCH_STATUSES and detail.started_at is not None:
        stopped_at = observed_at_ms
    last_attempt: dict[str, Any] = detail.attempts[-1].get("container", {}) if detail.attempts else {}
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
