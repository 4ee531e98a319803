"""api Lambda: the HTTP API of API.md behind API Gateway (REST, proxy integration).

Routes parse and validate (powertools ``APIGatewayRestResolver`` with pydantic models), call one
logic function, and answer with the API's models. Every failure, whatever its source, answers
API.md's one error body; the mapping lives here, in the exception handlers.
"""

from __future__ import annotations

import base64
import binascii
import csv
import io
import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Depends, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Query
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyValidationError,
)
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.bootstrap import get_services
from functions.domain.errors import (
    Conflict,
    Forbidden,
    PayloadTooLarge,
    ServiceError,
    Unauthorized,
    ValidationFailed,
)
from functions.domain.jobs import PayloadKind
from functions.domain.machine_classes import MACHINE_CLASSES
from functions.domain.status import JobStatus
from functions.domain.timefmt import parse_query_time
from functions.handlers.api_models import (
    AccountView,
    ContactsBody,
    ContactsView,
    ErrorBody,
    ErrorDetail,
    GrantCreditsBody,
    HealthView,
    JobListView,
    JobLogView,
    JobResultView,
    JobView,
    MachineClassesView,
    OutputFileView,
    OutputsView,
    SubmitJobBody,
    UsageView,
    account_view,
    job_view,
    ledger_entry_view,
    log_event_view,
    machine_class_view,
)
from functions.logic import accounts, queries, submission
from functions.ports import Services

logger = Logger(service="remote-batch")
tracer = Tracer(service="remote-batch")
metrics = Metrics(namespace="RemoteBatch", service="remote-batch")
app = APIGatewayRestResolver(enable_validation=True)

MAX_INLINE_BODY_BYTES = 5 * 1024 * 1024
IDEMPOTENCY_SECONDS = 24 * 3600
API_TITLE = "remote-batch"
API_VERSION = "1"


# -- errors: one body for every failure ---------------------------------------------------------------
def error_response(status: int, code: str, message: str, field: str | None = None) -> Response[str]:
    """API.md's error body ``{"error": {"code", "message", "field"}}`` with ``status``."""
    body = ErrorBody(error=ErrorDetail(code=code, message=message, field=field))
    return Response(status, content_types.APPLICATION_JSON, body.model_dump_json())


# Header parameters come back lower-cased from validation; errors name them as clients send them.
_HEADER_NAMES = {"idempotency-key": "Idempotency-Key"}


def _field_path(location: tuple[Any, ...] | list[Any]) -> str | None:
    parts = list(location)
    if parts and parts[0] == "header" and len(parts) > 1:
        return _HEADER_NAMES.get(str(parts[1]).lower(), str(parts[1]))
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    path = ""
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or None


def _validation_message(error: dict[str, Any], field: str | None) -> str:
    kind = error.get("type", "")
    if kind == "json_invalid":
        return "The request body is not valid JSON."
    if kind == "extra_forbidden":
        return f"Unknown field {field!r}; see API.md for the fields this route takes."
    if kind == "missing":
        return f"{field} is required."
    message = str(error.get("msg", "invalid value"))
    message = message.removeprefix("Value error, ")
    message = message[0].upper() + message[1:] if message else message
    return f"{field}: {message}." if field else f"{message}."


@app.exception_handler(RequestValidationError)
def _on_request_validation(exc: RequestValidationError) -> Response[str]:
    first = exc.errors()[0] if exc.errors() else {}
    field = None if first.get("type") == "json_invalid" else _field_path(first.get("loc", ()))
    return error_response(400, "ValidationError", _validation_message(first, field), field)


@app.exception_handler(ServiceError)
def _on_service_error(exc: ServiceError) -> Response[str]:
    if exc.status >= 500:
        logger.exception("request failed", code=exc.code)
        return error_response(exc.status, exc.code, "The service failed to answer; try again shortly.")
    return error_response(exc.status, exc.code, exc.message, exc.field)


@app.not_found
def _on_not_found(exc: NotFoundError) -> Response[str]:
    event = app.current_event
    return error_response(404, "NotFound", f"No route {event.http_method} {event.path}.")


@app.exception_handler(Exception)
def _on_bug(exc: Exception) -> Response[str]:
    logger.exception("unhandled error")
    return error_response(500, "InternalError", "The service failed to answer; try again shortly.")


# -- identity ----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling: the account (Cognito ``sub``), its roles and email claim."""

    account_id: str
    roles: tuple[str, ...]
    email: str | None


def current_caller() -> Caller:
    """The caller from the authorizer's claims (Cognito; the local gateway mints the same shape).

    Raises
    ------
    Unauthorized
        No authorizer claims: the request did not pass an authorizer.
    """
    claims = app.current_event.request_context.authorizer.claims or {}
    account_id = claims.get("sub")
    if not account_id:
        raise Unauthorized("A valid Authorization: Bearer <token> header is required.")
    raw_groups = str(claims.get("cognito:groups") or "")
    groups = [g for g in raw_groups.strip("[]").replace(",", " ").split() if g]
    return Caller(account_id=str(account_id), roles=("user", *groups), email=claims.get("email"))


ServicesDep = Annotated[Services, Depends(get_services)]
CallerDep = Annotated[Caller, Depends(current_caller)]


# -- routes ------------------------------------------------------------------------------------------
@app.get("/health", summary="Liveness: 200 once the stack takes jobs (no auth)")
def health() -> HealthView:
    return HealthView(status="ok")


@app.get("/openapi.json", summary="This API's OpenAPI 3.1 document")
def openapi_document() -> Response[str]:
    return Response(200, content_types.APPLICATION_JSON, openapi_json())


def openapi_json() -> str:
    """The OpenAPI 3.1 document, with validation failures as this API answers them: 400 and the
    one error body (powertools documents its own 422 default)."""
    document = json.loads(app.get_openapi_json_schema(title=API_TITLE, version=API_VERSION))
    error_schema = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    components = document.setdefault("components", {}).setdefault("schemas", {})
    components.update(error_schema.pop("$defs", {}))
    components["ErrorBody"] = error_schema
    for path in document.get("paths", {}).values():
        for operation in path.values():
            responses = operation.get("responses", {})
            if responses.pop("422", None) is not None:
                responses["400"] = {
                    "description": "ValidationError (or another API.md error) in the one error body",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
                }
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    return json.dumps(document)


@app.get("/machine-classes", summary="Machine classes with their credits per hour")
def list_machine_classes(caller: CallerDep) -> MachineClassesView:
    return MachineClassesView(machineClasses=[machine_class_view(m) for m in MACHINE_CLASSES.values()])


def _job_request(body: SubmitJobBody) -> submission.JobRequest:
    if body.arrayItems is not None:
        raise ValidationFailed(
            "Array jobs are not supported yet; submit one job per item.", field="arrayItems"
        )
    payload: str | list[str]
    if body.code is not None:
        kind, payload = PayloadKind.CODE, body.code
    elif body.command is not None:
        kind, payload = PayloadKind.COMMAND, body.command
    else:
        kind, payload = PayloadKind.PICKLE, body.pickle or ""
    return submission.JobRequest(
        payload_kind=kind,
        payload=payload,
        name=body.name,
        machine_class=body.machineClass,
        geo_zone=body.geoZone,
        credit_constraint=body.creditConstraint,
        time_constraint=body.timeConstraint,
        notifications=body.notifications,
    )


_idempotent_submitters: dict[str, Any] = {}


def _idempotent_submit(services: Services) -> Any:
    """``submit`` wrapped by powertools idempotency (one persistence layer per table)."""
    table = services.idempotency_table or ""
    if table not in _idempotent_submitters:
        persistence = DynamoDBPersistenceLayer(table_name=table)
        config = IdempotencyConfig(
            event_key_jmespath="key",
            payload_validation_jmespath="body",
            expires_after_seconds=IDEMPOTENCY_SECONDS,
            raise_on_no_idempotency_key=True,
        )

        @idempotent_function(data_keyword_argument="request", persistence_store=persistence, config=config)
        def submit_once(request: dict[str, Any]) -> dict[str, str]:
            body = SubmitJobBody.model_validate(request["body"])
            job = submission.submit_job(
                get_services(), request["accountId"], _job_request(body), get_services().clock()
            )
            return {"jobId": job.job_id}

        _idempotent_submitters[table] = (submit_once, config)
    return _idempotent_submitters[table]


_ACCEPTED_JOB: dict[int, Any] = {
    202: {"description": "Accepted", "content": {"application/json": {"model": JobView}}}
}


@app.post("/jobs", summary="Submit a job", responses=_ACCEPTED_JOB)
def submit_job(
    body: Annotated[SubmitJobBody, Body()],
    services: ServicesDep,
    caller: CallerDep,
    idempotency_key: Annotated[
        str | None, Header(alias="Idempotency-Key", min_length=1, max_length=128)
    ] = None,
) -> Response[JobView]:
    now = services.clock()
    if idempotency_key is None:
        job = submission.submit_job(services, caller.account_id, _job_request(body), now)
        return Response(202, content_types.APPLICATION_JSON, job_view(job))
    _job_request(body)  # refuse what can never run before recording the key
    submit_once, config = _idempotent_submit(services)
    config.register_lambda_context(app.lambda_context)
    request = {
        "key": f"{caller.account_id}#{idempotency_key}",
        "accountId": caller.account_id,
        "body": json.loads(body.model_dump_json(exclude_unset=True)),
    }
    try:
        outcome = submit_once(request=request)
    except IdempotencyValidationError:
        raise Conflict(
            "This Idempotency-Key was used with a different body in the last 24 h; use a new key.",
            field="Idempotency-Key",
        ) from None
    except IdempotencyAlreadyInProgressError:
        raise Conflict(
            "A request with this Idempotency-Key is still being processed; retry shortly."
        ) from None
    job = submission.get_owned_job(services, caller.account_id, outcome["jobId"])
    return Response(202, content_types.APPLICATION_JSON, job_view(job))


@app.get(
    "/jobs",
    summary="This account's jobs, newest first",
    description=(
        "A page holds at most `limit` jobs and may hold fewer, even none, while `nextToken` is set: "
        "jobs past their record retention (400 days) and, with `status`, jobs in other statuses are "
        "left out after the index is read. Follow `nextToken` until it is null."
    ),
)
def list_jobs(
    services: ServicesDep,
    caller: CallerDep,
    status: Annotated[JobStatus | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    nextToken: Annotated[str | None, Query()] = None,
) -> JobListView:
    jobs, token = services.store.list_jobs(caller.account_id, status, limit, nextToken)
    return JobListView(jobs=[job_view(j) for j in jobs], nextToken=token)


@app.get("/jobs/<jobId>", summary="One job")
def get_job(jobId: str, services: ServicesDep, caller: CallerDep) -> JobView:
    return job_view(submission.get_owned_job(services, caller.account_id, jobId))


@app.post("/jobs/<jobId>/abort", summary="Abort a job that is not final", responses=_ACCEPTED_JOB)
def abort_job(jobId: str, services: ServicesDep, caller: CallerDep) -> Response[JobView]:
    job = submission.abort_job(services, caller.account_id, jobId)
    return Response(202, content_types.APPLICATION_JSON, job_view(job))


_RESULT: dict[int, Any] = {
    200: {"description": "EvaluationResult", "content": {"application/json": {"model": JobResultView}}}
}


@app.get("/jobs/<jobId>/result", summary="A final job's result (EvaluationResult)", responses=_RESULT)
def get_result(
    jobId: str,
    services: ServicesDep,
    caller: CallerDep,
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
    return Response(200, content_types.APPLICATION_JSON, json.dumps(view))


@app.get("/jobs/<jobId>/log", summary="The job container's console log (json, text or csv)")
def get_log(
    jobId: str,
    *,
    services: ServicesDep,
    caller: CallerDep,
    format: Annotated[Literal["json", "text", "csv"], Query()] = "json",
    since: Annotated[str | None, Query(description="ISO 8601 time")] = None,
    nextToken: Annotated[str | None, Query(description="From the previous page (extension)")] = None,
) -> Response[Any]:
    start = parse_query_time(since, "since") if since else None
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


@app.get("/jobs/<jobId>/outputs", summary="The job's output files with presigned URLs (15 min)")
def get_outputs(jobId: str, services: ServicesDep, caller: CallerDep) -> OutputsView:
    files = queries.list_outputs(services, caller.account_id, jobId, services.clock())
    return OutputsView(files=[OutputFileView(name=f.name, size=f.size, url=f.url) for f in files])


@app.get("/jobs/<jobId>/preview.png", summary="A picture of the result (OutputPreviewImage)")
def get_preview(jobId: str, services: ServicesDep, caller: CallerDep) -> Response[Any]:
    png = queries.get_preview(services, caller.account_id, jobId, services.clock())
    # Base64 with isBase64Encoded: API Gateway turns it back into bytes (binary media type image/png).
    response: Response[Any] = Response(200, "image/png", base64.b64encode(png).decode())
    response.base64_encoded = True
    return response


@app.delete("/jobs/<jobId>", summary="Delete a final job's inputs, outputs and log now")
def delete_job(jobId: str, services: ServicesDep, caller: CallerDep) -> Response[Any]:
    queries.delete_job_data(services, caller.account_id, jobId, services.clock())
    return Response(204, content_types.TEXT_PLAIN, "")


@app.get("/account", summary="The caller's account and credit balance")
def get_account(services: ServicesDep, caller: CallerDep) -> AccountView:
    account = queries.get_or_create_account(
        services, caller.account_id, caller.email, caller.roles, services.clock()
    )
    return account_view(account, accounts.email_status(services, account))


@app.put("/account/contacts", summary="Set the caller's email and phone (null clears; absent keeps)")
def put_contacts(
    body: Annotated[ContactsBody, Body()], services: ServicesDep, caller: CallerDep
) -> ContactsView:
    given = body.model_fields_set
    before = services.store.get_account(caller.account_id)
    account = accounts.set_contacts(
        services,
        caller.account_id,
        now=services.clock(),
        email=body.email if "email" in given else accounts.NOT_GIVEN,
        phone=body.phone if "phone" in given else accounts.NOT_GIVEN,
        webhook_url=body.webhookUrl if "webhookUrl" in given else accounts.NOT_GIVEN,
    )
    view = account_view(account, accounts.email_status(services, account)).model_dump()
    fresh = before is None or before.webhook_secret != account.webhook_secret
    return ContactsView(**view, webhookSecret=account.webhook_secret if fresh else None)


@app.get("/account/usage", summary="Ledger entries of the caller's account, newest first")
def get_usage(
    services: ServicesDep,
    caller: CallerDep,
    start: Annotated[str | None, Query(alias="from", description="ISO 8601 time, inclusive")] = None,
    end: Annotated[str | None, Query(alias="to", description="ISO 8601 time, exclusive")] = None,
) -> UsageView:
    usage = accounts.account_usage(
        services,
        caller.account_id,
        parse_query_time(start, "from") if start else None,
        parse_query_time(end, "to") if end else None,
    )
    return UsageView(entries=[ledger_entry_view(e) for e in usage.entries], totalCharged=usage.total_charged)


def require_admin(caller: CallerDep) -> Caller:
    """The caller, if it has the admin role. Raises ``Forbidden`` otherwise."""
    if "admin" not in caller.roles:
        raise Forbidden("This route needs the admin role.")
    return caller


@app.post("/admin/accounts/<accountId>/credits", summary="Grant credits to an account (admin)")
def grant_credits(
    accountId: str,
    body: Annotated[GrantCreditsBody, Body()],
    services: ServicesDep,
    admin: Annotated[Caller, Depends(require_admin)],
) -> AccountView:
    account = accounts.grant_credits(services, accountId, body.credits, body.reason, services.clock())
    return account_view(account, accounts.email_status(services, account))


# -- entry point -------------------------------------------------------------------------------------
@metrics.log_metrics
@tracer.capture_lambda_handler
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """API Gateway REST proxy event → proxy response."""
    body = event.get("body") or ""
    size = len(body) * 3 // 4 if event.get("isBase64Encoded") else len(body.encode())
    if size > MAX_INLINE_BODY_BYTES:
        exc = PayloadTooLarge("The request body is over 5 MiB; upload large inputs through an upload URL.")
        return _proxy_error(
            exc.status, ErrorBody(error=ErrorDetail(code=exc.code, message=exc.message, field=None))
        )
    resolved = _json_body(event)
    if isinstance(resolved, ErrorBody):
        return _proxy_error(400, resolved)
    return app.resolve(resolved, context)


def _error_body(message: str) -> ErrorBody:
    return ErrorBody(error=ErrorDetail(code="ValidationError", message=message, field=None))


def _proxy_error(status: int, body: ErrorBody) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"Content-Type": content_types.APPLICATION_JSON},
        "body": body.model_dump_json(),
        "isBase64Encoded": False,
    }


def _json_body(event: dict[str, Any]) -> dict[str, Any] | ErrorBody:
    """Bodies are JSON whatever the Content-Type says (curl -d sends form encoding by default).

    Returns the event to resolve, or the error for a body that is not UTF-8 or nests too deeply
    (what the JSON parser itself cannot report as a validation error).
    """
    if not event.get("body"):
        return event
    raw = event["body"]
    try:
        text = base64.b64decode(raw).decode("utf-8") if event.get("isBase64Encoded") else raw
        json.loads(text)
    except (UnicodeDecodeError, binascii.Error):
        return _error_body("The request body is not UTF-8 text.")
    except RecursionError:
        return _error_body("The request body nests JSON too deeply.")
    except ValueError:
        pass  # not JSON: the resolver's validation answers that, with its field
    else:
        event = {**event, "body": text, "isBase64Encoded": False}
    headers = {k: v for k, v in (event.get("headers") or {}).items() if k.lower() != "content-type"}
    multi = {k: v for k, v in (event.get("multiValueHeaders") or {}).items() if k.lower() != "content-type"}
    headers["Content-Type"] = content_types.APPLICATION_JSON
    multi["Content-Type"] = [content_types.APPLICATION_JSON]
    return {**event, "headers": headers, "multiValueHeaders": multi}
