"""Routes over what a job left: its result, console log, output files, preview picture, and deleting
them.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import UTC, datetime
from typing import Annotated, Any, Literal

from aws_lambda_powertools.event_handler import Depends, Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Query
from aws_lambda_powertools.event_handler.router import APIGatewayRouter
from pydantic import BeforeValidator

from functions.domain.timefmt import parse_query_time
from functions.handlers.api.app import (
    Caller,
    ServicesDep,
    ascii_whole_number,
    require,
)
from functions.handlers.api.models import (
    JobLogView,
    JobResultView,
    OutputFileView,
    OutputsView,
    PreviewLinkView,
    log_event_view,
)
from functions.handlers.api.openapi import _TIME, _json, _responses
from functions.logic import queries

router = APIGatewayRouter()


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TEXT = {"type": "string"}
_LOG: dict[str, Any] = {
    "description": "JobLogData (json), lines (text) or timestamp,message rows (csv); X-Next-Token: more",
    "content": {
        "application/json": {"model": JobLogView},
        "text/plain": {"schema": _TEXT},
        "text/csv": {"schema": _TEXT},
    },
}


@router.get(
    "/jobs/<jobId>/result",
    summary="A final job's result (EvaluationResult)",
    responses=_responses(200, _json(JobResultView, "EvaluationResult"), 400, 404, 409, 410),
)
def get_result(
    jobId: str,
    services: ServicesDep,
    caller: Annotated[Caller, Depends(require("jobs/read"))],
    format: Annotated[Literal["json", "pickle"], Query()] = "json",
) -> Response[Any]:
    result = queries.get_result(services, caller.account_id, jobId, services.clock(), format == "pickle")
    # Built by hand: a result over 5 MiB has resultUrl *instead of* result, which a model would fill.
    view: dict[str, Any] = {"jobId": jobId}
    if format == "pickle":
        view.update(
            {"pickle": result.pickle} if result.pickle is not None else {"resultUrl": result.result_url}
        )
    else:
        view.update({"result": result.result} if result.inline else {"resultUrl": result.result_url})
        view.update({"resultRepr": result.result_repr, "messages": list(result.messages)})
        if result.messages_url is not None:
            view["messagesUrl"] = result.messages_url
        if result.errors is not None:
            view["errors"] = [{"index": e.index, "message": e.message} for e in result.errors]
    return Response(200, content_types.APPLICATION_JSON, json.dumps(view))


@router.get(
    "/jobs/<jobId>/log",
    summary="The job container's console log (json, text or csv)",
    responses=_responses(200, _LOG, 400, 404, 409, 410),
)
def get_log(
    jobId: str,
    *,
    services: ServicesDep,
    caller: Annotated[Caller, Depends(require("jobs/read"))],
    format: Annotated[Literal["json", "text", "csv"], Query()] = "json",
    since: Annotated[str | None, Query(description="ISO 8601 time", json_schema_extra=_TIME)] = None,
    nextToken: Annotated[str | None, Query(description="From the previous page (extension)")] = None,
) -> Response[Any]:
    # An empty since= is a malformed time, not an absent one; a time before 1970 reads from the start.
    start = max(parse_query_time(since, "since"), _EPOCH) if since is not None else None
    page = queries.get_log(services, caller.account_id, jobId, start, services.clock(), next_token=nextToken)
    events = [log_event_view(e) for e in page.events]
    # More than one page: the token is in the JSON body, and in a header for text and csv.
    headers = {"X-Next-Token": page.next_token} if page.next_token else None
    if format == "text":
        text = "\n".join(e.message for e in events) + ("\n" if events else "")
        return Response(200, "text/plain; charset=utf-8", text, headers=headers)
    if format == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(["timestamp", "message"])
        writer.writerows([e.timestamp, e.message] for e in events)
        return Response(200, "text/csv; charset=utf-8", out.getvalue(), headers=headers)
    view = JobLogView(jobId=jobId, events=events, nextToken=page.next_token)
    return Response(200, content_types.APPLICATION_JSON, view, headers=headers)


@router.get(
    "/jobs/<jobId>/outputs",
    summary="The job's output files with presigned URLs (15 min), by name",
    description=(
        "A page holds at most `limit` files and stays under the 5 MiB of any answer, so it may hold "
        "fewer while `nextToken` is set. Follow `nextToken` until it is null."
    ),
    responses=_responses(200, _json(OutputsView), 400, 404, 409, 410),
)
def get_outputs(
    jobId: str,
    *,
    services: ServicesDep,
    caller: Annotated[Caller, Depends(require("jobs/read"))],
    limit: Annotated[
        int, BeforeValidator(ascii_whole_number), Query(ge=1, le=queries.MAX_OUTPUTS_PAGE)
    ] = queries.MAX_OUTPUTS_PAGE,
    nextToken: Annotated[str | None, Query()] = None,
) -> OutputsView:
    page = queries.list_outputs(
        services, caller.account_id, jobId, services.clock(), limit=limit, next_token=nextToken
    )
    files = [OutputFileView(name=f.name, size=f.size, url=f.url) for f in page.files]
    return OutputsView(files=files, nextToken=page.next_token)


_PREVIEW: dict[int, Any] = {
    **_responses(303, None, 404, 409, 410),
    303: {
        "description": "See Other: the PNG (OutputPreviewImage) at a presigned S3 URL in Location "
        "(SigV4, at most 15 min, never past expiresAt); the JSON body carries the same link",
        "headers": {"Location": {"description": "The presigned GET URL", "schema": {"type": "string"}}},
        "content": {"application/json": {"model": PreviewLinkView}},
    },
}


@router.get(
    "/jobs/<jobId>/preview.png",
    summary="A picture of the result (OutputPreviewImage): 303 to its presigned URL",
    responses=_PREVIEW,
)
def get_preview(
    jobId: str, services: ServicesDep, caller: Annotated[Caller, Depends(require("jobs/read"))]
) -> Response[Any]:
    link = queries.get_preview(services, caller.account_id, jobId, services.clock())
    # Always a link: the PNG never passes through API Gateway (no binary media type to negotiate,
    # no 6 MB Lambda limit). Clients that follow redirects get the image; others read the body.
    view = PreviewLinkView(jobId=jobId, url=link.url, size=link.size, expiresIn=link.expires_seconds)
    return Response(
        303,
        content_types.APPLICATION_JSON,
        view.model_dump_json(),
        headers={"Location": link.url, "Cache-Control": "no-store"},
    )


@router.delete(
    "/jobs/<jobId>",
    summary="Delete a final job's inputs, outputs and log now",
    responses=_responses(204, None, 404, 409, 410),
)
def delete_job(
    jobId: str, services: ServicesDep, caller: Annotated[Caller, Depends(require("jobs/delete"))]
) -> Response[Any]:
    queries.delete_job_data(services, caller.account_id, jobId, services.clock())
    return Response(204, None, "")
