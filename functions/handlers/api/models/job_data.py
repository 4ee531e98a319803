"""Models of what a job left: its result, console log, output files, preview link."""

from __future__ import annotations

from typing import Any

from pydantic import (
    ConfigDict,
    Field,
)

from functions.handlers.api.models.common import ApiModel
from functions.ports import LogEvent


class JobResultView(ApiModel):
    """``GET /jobs/{jobId}/result`` (``EvaluationResult``)."""

    model_config = ConfigDict(extra="allow")

    jobId: str
    result: Any = None
    resultRepr: str | None = None
    messages: list[str] = Field(default_factory=list)
    resultUrl: str | None = Field(
        default=None,
        description="Instead of result when inlining it would take the body over 5 MiB: a presigned "
        "GET of a JSON document whose result and resultRepr are the result's (with format=pickle: of "
        "the raw pickle), at most 15 min and never past expiresAt.",
    )
    messagesUrl: str | None = Field(
        default=None,
        description="Extension: instead of messages when they are over 512 KiB, a presigned GET of "
        "a JSON document whose messages field holds them.",
    )
    errors: list[ChildErrorView] | None = Field(
        default=None,
        description="An Array job's children that have no result (null in result), in index order.",
    )


class ChildErrorView(ApiModel):
    """Why an array's child has no result."""

    index: int
    message: str


class PreviewLinkView(ApiModel):
    """``GET /jobs/{jobId}/preview.png``'s 303 body (extension): the link its ``Location`` holds."""

    jobId: str
    url: str = Field(description="Presigned SigV4 GET of the PNG.")
    size: int = Field(description="The PNG's size in bytes.")
    expiresIn: int = Field(description="Seconds the URL stays valid (≤ 900, never past expiresAt).")


class OutputFileView(ApiModel):
    """One output file: name under ``$REMOTE_BATCH_OUTPUT_DIR``, size in bytes, presigned URL (15 min)."""

    name: str
    size: int
    url: str


class OutputsView(ApiModel):
    """``GET /jobs/{jobId}/outputs``: a page of the files, by name."""

    files: list[OutputFileView]
    nextToken: str | None = Field(default=None, description="More files follow; pass it back.")


class LogEventView(ApiModel):
    """One line of a job's log."""

    timestamp: str
    message: str


class JobLogView(ApiModel):
    """``GET /jobs/{jobId}/log?format=json`` (``JobLogData``)."""

    jobId: str
    events: list[LogEventView]
    nextToken: str | None = Field(default=None, description="Extension: more lines follow; pass it back.")


def log_event_view(event: LogEvent) -> LogEventView:
    """Map a log line; timestamps keep milliseconds (``...T17:20:00.123Z``) to order lines."""
    stamp = event.timestamp
    text = stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"
    return LogEventView(timestamp=text, message=event.message)
