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
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from typing import Annotated, Any, Literal

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Depends, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer
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
from pydantic import BeforeValidator

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
from functions.domain.limits import BODY_TOO_LARGE_MESSAGE, MAX_BODY_BYTES
from functions.domain.machine_classes import MACHINE_CLASSES, machine_class, resolve_geo_zone
from functions.domain.notifications import normalize_notifications, rules_to_json
from functions.domain.status import JobStatus
from functions.domain.text import check_argv, first_surrogate_path, is_ascii_digits
from functions.domain.timefmt import parse_query_time, to_api_time
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
    PreviewLinkView,
    SubmitJobBody,
    UploadBody,
    UploadView,
    UsageView,
    account_view,
    job_view,
    ledger_entry_view,
    log_event_view,
    machine_class_view,
)
from functions.logic import accounts, queries, submission, uploads
from functions.ports import Services

logger = Logger(service="remote-batch")
tracer = Tracer(service="remote-batch")
metrics = Metrics(namespace="RemoteBatch", service="remote-batch")
app = APIGatewayRestResolver(enable_validation=True)

MAX_INLINE_BODY_BYTES = MAX_BODY_BYTES
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


# What a value that fails a field's pattern must look like, by the field's last name.
_PATTERN_RULES = {
    "phone": "must be E.164: a + then the country code and number, 15 ASCII digits at most (+15555550100)",
    "email": "must be an email address in ASCII, like a@example.com",
    "webhookUrl": "must be an https:// URL of visible ASCII characters (an internationalized host as xn--)",
    "name": "must be one line of visible text: no control or bidirectional formatting characters",
    "reason": "must be one line of visible text: no control or bidirectional formatting characters",
    "pickle": "must be base64 (standard alphabet, padded)",
    "Idempotency-Key": "must be 1 to 128 visible ASCII characters (letters, digits, punctuation)",
}


def _validation_message(error: dict[str, Any], field: str | None) -> str:
    kind = error.get("type", "")
    if kind == "json_invalid":
        return "The request body is not valid JSON."
    if kind == "string_pattern_mismatch" and field:
        name = re.sub(r"\[[0-9]+\]$", "", field).rsplit(".", 1)[-1]
        rule = _PATTERN_RULES.get(name, "holds a character this field does not take (a NUL)")
        return f"{field} {rule}; got {error.get('input')!r}."
    if kind == "extra_forbidden":
        return f"Unknown field {field!r}; see API.md for the fields this route takes."
    if kind == "missing":
        return f"{field} is required." if field else "A JSON body is required."
    message = str(error.get("msg", "invalid value"))
    message = message.removeprefix("Value error, ")
    message = message[0].upper() + message[1:] if message else message
    return f"{field}: {message}." if field else f"{message}."


@app.exception_handler(RequestValidationError)
def _on_request_validation(exc: RequestValidationError) -> Response[str]:
    first = exc.errors()[0] if exc.errors() else {}
    field = None if first.get("type") == "json_invalid" else _field_path(first.get("loc", ()))
    return error_response(400, "ValidationError", _validation_message(first, field), field)


@app.exception_handler(RequestUnsupportedContentType)
def _on_unsupported_content_type(exc: RequestUnsupportedContentType) -> Response[str]:
    return error_response(
        400, "ValidationError", "The request body must be JSON (Content-Type: application/json)."
    )


@app.exception_handler(ServiceError)
def _on_service_error(exc: ServiceError) -> Response[str]:
    if exc.status >= 500:
        logger.exception("request failed", code=exc.code)
        return error_response(exc.status, exc.code, "The service failed to answer; try again shortly.")
    return error_response(exc.status, exc.code, exc.message, exc.field)


@app.not_found
def _on_not_found(exc: NotFoundError) -> Response[str]:
    event = app.current_event
    allowed = allowed_methods(event.path)
    # A path a route has for this very method did not route (an id no route takes): no such thing.
    if allowed and event.http_method.upper() not in allowed:
        # RFC 9110 section 15.5.6: the resource exists, the method does not; Allow lists those that do.
        response = error_response(
            405,
            "MethodNotAllowed",
            f"{event.http_method} is not a method of {event.path}; use {', '.join(allowed)}.",
        )
        response.headers["Allow"] = ", ".join(allowed)
        return response
    return error_response(404, "NotFound", f"No route {event.http_method} {event.path}.")


@cache
def _route_table() -> tuple[tuple[re.Pattern[str], tuple[str, ...]], ...]:
    """Each path of the OpenAPI document (``/jobs/{jobId}``) as a pattern, with its methods."""
    document = app.get_openapi_schema(title=API_TITLE, version=API_VERSION)
    table = []
    for path, item in (document.paths or {}).items():
        pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(path))
        methods = tuple(m.upper() for m in ("get", "put", "post", "delete", "patch") if getattr(item, m))
        table.append((re.compile(pattern), methods))
    return tuple(table)


def allowed_methods(path: str) -> list[str]:
    """The methods some route takes at ``path`` (sorted), or [] when no route has that path."""
    methods = {m for pattern, ms in _route_table() if pattern.fullmatch(path) for m in ms}
    return sorted(methods)


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


# -- the OpenAPI document's responses ------------------------------------------------------------------
_ERROR_CONTENT: dict[str, Any] = {"application/json": {"model": ErrorBody}}
_ERROR_WHEN = {
    400: "ValidationError: the body, a query parameter or a header is invalid; field names it",
    401: "Unauthorized: missing, malformed, expired or unknown token",
    402: "InsufficientCredits: the account's credit balance is not positive",
    403: "Forbidden: the caller's role lacks the permission",
    404: "NotFound: no such job or account for this caller",
    409: "JobNotFinished, NoOutput or Conflict (idempotency key reused with another body; job not final)",
    410: "Expired: the job's inputs and outputs passed their retention",
    413: "PayloadTooLarge: the body is over 5 MiB",
    429: "Throttled: request rate limit",
    500: "InternalError: a bug or a failed dependency; no details",
}
# Every route that needs a token can answer these (the authorizer, the throttle, a bug).
_ALWAYS = (401, 429, 500)


def _json(model: Any, description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"model": model}}}


def _responses(
    status: int, success: dict[str, Any] | None, *errors: int, auth: bool = True
) -> dict[int, Any]:
    """Responses of one route for ``responses=``: ``success`` at ``status`` (None: no body), and
    API.md's error body at each error status, plus 401/429/500 when the route needs a token."""
    declared: dict[int, Any] = {status: success or {"description": "No content"}}
    for code in sorted({*errors, *(_ALWAYS if auth else (500,))}):
        declared[code] = {"description": _ERROR_WHEN[code], "content": _ERROR_CONTENT}
    return declared


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_TEXT = {"type": "string"}
_TIME: dict[str, Any] = {"format": "date-time"}
_LOG: dict[str, Any] = {
    "description": "JobLogData (json), lines (text) or timestamp,message rows (csv); X-Next-Token: more",
    "content": {
        "application/json": {"model": JobLogView},
        "text/plain": {"schema": _TEXT},
        "text/csv": {"schema": _TEXT},
    },
}


# -- routes ------------------------------------------------------------------------------------------
@app.get(
    "/health",
    summary="Liveness: 200 once the stack takes jobs (no auth)",
    responses=_responses(200, _json(HealthView), auth=False),
)
def health() -> HealthView:
    return HealthView(status="ok")


@app.get(
    "/openapi.json",
    summary="This API's OpenAPI 3.1 document",
    responses=_responses(
        200, {"description": "OpenAPI 3.1", "content": {"application/json": {"schema": {"type": "object"}}}}
    ),
)
def openapi_document() -> Response[str]:
    return Response(200, content_types.APPLICATION_JSON, openapi_json())


def openapi_json() -> str:
    """The OpenAPI 3.1 document, with validation failures as this API answers them: 400 and the
    one error body (powertools documents its own 422 default), the bearer token every route but
    ``/health`` needs, and parameter bounds in JSON Schema's words (powertools writes pydantic's
    ``ge``/``le``, which no JSON Schema tool reads)."""
    document = json.loads(
        app.get_openapi_json_schema(
            title=API_TITLE,
            version=API_VERSION,
            security_schemes={"bearer": HTTPBearer(bearerFormat="JWT (Cognito); rb_... locally")},
            security=[{"bearer": []}],
        )
    )
    error_schema = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    components = document.setdefault("components", {}).setdefault("schemas", {})
    components.update(error_schema.pop("$defs", {}))
    components["ErrorBody"] = error_schema
    for path in document.get("paths", {}).values():
        for operation in path.values():
            responses = operation.get("responses", {})
            if "204" in responses:
                responses["204"].pop("content", None)  # powertools adds the return annotation's
            if responses.pop("422", None) is not None and "400" not in responses:
                responses["400"] = {
                    "description": "ValidationError (or another API.md error) in the one error body",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
                }
    document["paths"]["/health"]["get"]["security"] = []
    _json_schema_bounds(document)
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    return json.dumps(document)


_BOUNDS = {"ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum", "lt": "exclusiveMaximum"}


def _json_schema_bounds(node: Any) -> None:
    """Rewrite, in every number schema of ``node``, pydantic's ``ge``/``le``/``gt``/``lt`` (which
    powertools copies where pydantic could not say them: a validator before the type) as JSON
    Schema's ``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum``."""
    if isinstance(node, list):
        for item in node:
            _json_schema_bounds(item)
    elif isinstance(node, dict):
        if node.get("type") in ("integer", "number"):
            for short, keyword in _BOUNDS.items():
                if short in node:
                    value = node.pop(short)
                    node.setdefault(keyword, float(value) if isinstance(value, str) else value)
            node.pop("decimal_places", None)
        for value in node.values():
            _json_schema_bounds(value)


@app.get(
    "/machine-classes",
    summary="Machine classes with their credits per hour",
    responses=_responses(200, _json(MachineClassesView)),
)
def list_machine_classes(caller: CallerDep) -> MachineClassesView:
    return MachineClassesView(machineClasses=[machine_class_view(m) for m in MACHINE_CLASSES.values()])


def _job_request(body: SubmitJobBody) -> submission.JobRequest:
    if body.arrayItems is not None:
        raise ValidationFailed(
            "Array jobs are not supported yet; submit one job per item.", field="arrayItems"
        )
    payload: str | list[str]
    kind: PayloadKind | None
    if body.inputKey is not None:
        kind, payload = None, ""  # the upload's Content-Type tells its kind (read at submit)
    elif body.code is not None:
        kind, payload = PayloadKind.CODE, body.code
    elif body.command is not None:
        check_argv(body.command)  # what the worker could not hand to execve is refused here
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
        input_key=body.inputKey,
    )


def canonical_submit(body: SubmitJobBody) -> dict[str, Any]:
    """The request as the job it makes, for idempotency: defaults written out, names resolved
    (``Automatic`` zone, notification shorthands), numbers in one spelling (``1`` = ``1.0``).

    Two bodies with the same canonical form make the same job; JSON key order and whitespace never
    reach it. Raises ``ValidationFailed`` for what ``submit_job`` would refuse (unknown class, zone,
    notification spec), so no key is recorded for a request that cannot run.
    """
    request = _job_request(body)
    credit = request.credit_constraint
    return {
        "kind": None if request.payload_kind is None else request.payload_kind.value,
        "payload": request.payload,
        "inputKey": request.input_key,
        "name": request.name,
        "machineClass": machine_class(request.machine_class).name,
        "geoZone": resolve_geo_zone(request.geo_zone).value,
        "creditConstraint": None if credit is None else format(credit.normalize(), "f"),
        "timeConstraint": request.time_constraint,
        "notifications": rules_to_json(normalize_notifications(request.notifications)),
    }


_idempotent_submitters: dict[str, Any] = {}


def _idempotent_submit(services: Services) -> Any:
    """``submit`` wrapped by powertools idempotency (one persistence layer per table)."""
    table = services.idempotency_table or ""
    if table not in _idempotent_submitters:
        persistence = DynamoDBPersistenceLayer(table_name=table)
        config = IdempotencyConfig(
            event_key_jmespath="key",
            payload_validation_jmespath="canonical",
            expires_after_seconds=IDEMPOTENCY_SECONDS,
            raise_on_no_idempotency_key=True,
        )

        @idempotent_function(data_keyword_argument="request", persistence_store=persistence, config=config)
        def submit_once(request: dict[str, Any]) -> dict[str, str]:
            body: SubmitJobBody = request["body"]
            job = submission.submit_job(
                get_services(), request["accountId"], _job_request(body), get_services().clock()
            )
            return {"jobId": job.job_id}

        _idempotent_submitters[table] = (submit_once, config)
    return _idempotent_submitters[table]


@app.post(
    "/jobs", summary="Submit a job", responses=_responses(202, _json(JobView, "Accepted"), 400, 402, 409, 413)
)
def submit_job(
    body: Annotated[SubmitJobBody, Body()],
    services: ServicesDep,
    caller: CallerDep,
    idempotency_key: Annotated[
        str | None, Header(alias="Idempotency-Key", min_length=1, max_length=128, pattern=r"^[\x21-\x7e]+$")
    ] = None,
) -> Response[JobView]:
    now = services.clock()
    if idempotency_key is None:
        job = submission.submit_job(services, caller.account_id, _job_request(body), now)
        return Response(202, content_types.APPLICATION_JSON, job_view(job))
    canonical = canonical_submit(body)  # refuses what can never run before recording the key
    submit_once, config = _idempotent_submit(services)
    config.register_lambda_context(app.lambda_context)
    request = {
        "key": f"{caller.account_id}#{idempotency_key}",
        "accountId": caller.account_id,
        "canonical": canonical,
        # The validated model itself: only "key" and "canonical" are hashed, and a JSON round trip
        # would turn creditConstraint's Decimal into a string the model refuses.
        "body": body,
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


def ascii_whole_number(value: Any) -> Any:
    """A query string's whole number as ASCII digits only: pydantic alone would read ``" 2\n"``,
    ``"+2"``, ``"1_0"`` as numbers (and Python's int() reads Arabic-Indic or full-width digits)."""
    if isinstance(value, str) and not is_ascii_digits(value):
        raise ValueError("must be a whole number written with the digits 0-9")
    return value


@app.post(
    "/jobs/uploads",
    summary="Sign an upload of a large input (presigned SigV4 PUT, 15 min); submit it with inputKey",
    responses=_responses(201, _json(UploadView, "Created"), 400, 413),
)
def create_upload(
    body: Annotated[UploadBody, Body()], services: ServicesDep, caller: CallerDep
) -> Response[UploadView]:
    now = services.clock()
    upload = uploads.create_upload(
        services,
        caller.account_id,
        size=body.size,
        content_type=body.contentType,
        geo_zone=body.geoZone,
        now=now,
    )
    view = UploadView(
        inputKey=upload.input_key,
        uploadUrl=upload.upload_url,
        expiresAt=to_api_time(upload.expires_at) or "",
        headers=upload.headers,
        geoZone=upload.geo_zone.value,
    )
    return Response(201, content_types.APPLICATION_JSON, view)


@app.get(
    "/jobs",
    summary="This account's jobs, newest first",
    description=(
        "A page holds at most `limit` jobs and may hold fewer, even none, while `nextToken` is set: "
        "jobs past their record retention (400 days) and, with `status`, jobs in other statuses are "
        "left out after the index is read. Follow `nextToken` until it is null."
    ),
    responses=_responses(200, _json(JobListView), 400),
)
def list_jobs(
    services: ServicesDep,
    caller: CallerDep,
    status: Annotated[JobStatus | None, Query()] = None,
    limit: Annotated[int, BeforeValidator(ascii_whole_number), Query(ge=1, le=100)] = 50,
    nextToken: Annotated[str | None, Query()] = None,
) -> JobListView:
    jobs, token = services.store.list_jobs(caller.account_id, status, limit, nextToken)
    return JobListView(jobs=[job_view(j) for j in jobs], nextToken=token)


@app.get("/jobs/<jobId>", summary="One job", responses=_responses(200, _json(JobView), 404))
def get_job(jobId: str, services: ServicesDep, caller: CallerDep) -> JobView:
    return job_view(submission.get_owned_job(services, caller.account_id, jobId))


@app.post(
    "/jobs/<jobId>/abort",
    summary="Abort a job that is not final",
    responses=_responses(202, _json(JobView, "Accepted"), 404, 409),
)
def abort_job(jobId: str, services: ServicesDep, caller: CallerDep) -> Response[JobView]:
    job = submission.abort_job(services, caller.account_id, jobId)
    return Response(202, content_types.APPLICATION_JSON, job_view(job))


@app.get(
    "/jobs/<jobId>/result",
    summary="A final job's result (EvaluationResult)",
    responses=_responses(200, _json(JobResultView, "EvaluationResult"), 400, 404, 409, 410),
)
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
        if result.messages_url is not None:
            view["messagesUrl"] = result.messages_url
    return Response(200, content_types.APPLICATION_JSON, json.dumps(view))


@app.get(
    "/jobs/<jobId>/log",
    summary="The job container's console log (json, text or csv)",
    responses=_responses(200, _LOG, 400, 404, 409, 410),
)
def get_log(
    jobId: str,
    *,
    services: ServicesDep,
    caller: CallerDep,
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


@app.get(
    "/jobs/<jobId>/outputs",
    summary="The job's output files with presigned URLs (15 min)",
    responses=_responses(200, _json(OutputsView), 404, 409, 410),
)
def get_outputs(jobId: str, services: ServicesDep, caller: CallerDep) -> OutputsView:
    files = queries.list_outputs(services, caller.account_id, jobId, services.clock())
    return OutputsView(files=[OutputFileView(name=f.name, size=f.size, url=f.url) for f in files])


_PREVIEW: dict[int, Any] = {
    **_responses(303, None, 404, 409, 410),
    303: {
        "description": "See Other: the PNG (OutputPreviewImage) at a presigned S3 URL in Location "
        "(SigV4, at most 15 min, never past expiresAt); the JSON body carries the same link",
        "headers": {"Location": {"description": "The presigned GET URL", "schema": {"type": "string"}}},
        "content": {"application/json": {"model": PreviewLinkView}},
    },
}


@app.get(
    "/jobs/<jobId>/preview.png",
    summary="A picture of the result (OutputPreviewImage): 303 to its presigned URL",
    responses=_PREVIEW,
)
def get_preview(jobId: str, services: ServicesDep, caller: CallerDep) -> Response[Any]:
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


@app.delete(
    "/jobs/<jobId>",
    summary="Delete a final job's inputs, outputs and log now",
    responses=_responses(204, None, 404, 409, 410),
)
def delete_job(jobId: str, services: ServicesDep, caller: CallerDep) -> Response[Any]:
    queries.delete_job_data(services, caller.account_id, jobId, services.clock())
    return Response(204, None, "")


@app.get(
    "/account",
    summary="The caller's account and credit balance",
    responses=_responses(200, _json(AccountView)),
)
def get_account(services: ServicesDep, caller: CallerDep) -> AccountView:
    account = queries.get_or_create_account(
        services, caller.account_id, caller.email, caller.roles, services.clock()
    )
    return account_view(account, accounts.email_status(services, account))


@app.put(
    "/account/contacts",
    summary="Set the caller's email and phone (null clears; absent keeps)",
    responses=_responses(200, _json(ContactsView), 400, 413),
)
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


@app.get(
    "/account/usage",
    summary="Ledger entries of the caller's account, newest first",
    responses=_responses(200, _json(UsageView), 400),
)
def get_usage(
    services: ServicesDep,
    caller: CallerDep,
    start: Annotated[
        str | None, Query(alias="from", description="ISO 8601 time, inclusive", json_schema_extra=_TIME)
    ] = None,
    end: Annotated[
        str | None, Query(alias="to", description="ISO 8601 time, exclusive", json_schema_extra=_TIME)
    ] = None,
) -> UsageView:
    usage = accounts.account_usage(
        services,
        caller.account_id,
        parse_query_time(start, "from") if start is not None else None,
        parse_query_time(end, "to") if end is not None else None,
    )
    return UsageView(entries=[ledger_entry_view(e) for e in usage.entries], totalCharged=usage.total_charged)


def require_admin(caller: CallerDep) -> Caller:
    """The caller, if it has the admin role. Raises ``Forbidden`` otherwise."""
    if "admin" not in caller.roles:
        raise Forbidden("This route needs the admin role.")
    return caller


@app.post(
    "/admin/accounts/<accountId>/credits",
    summary="Grant credits to an account (admin)",
    responses=_responses(200, _json(AccountView), 400, 403, 404, 413),
)
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
        exc = PayloadTooLarge(BODY_TOO_LARGE_MESSAGE)
        return _proxy_error(
            exc.status, ErrorBody(error=ErrorDetail(code=exc.code, message=exc.message, field=None))
        )
    path = str(event.get("path") or "")
    if not path.isprintable():
        # No route has a control character in its path; powertools' "$" would match before a
        # trailing newline and serve /jobs/<id>%0A as /jobs/<id>.
        body = ErrorBody(error=ErrorDetail(code="NotFound", message="No route for this path.", field=None))
        return _proxy_error(404, body)
    resolved = _json_body(single_valued(event))
    if isinstance(resolved, ErrorBody):
        return _proxy_error(400, resolved)
    return app.resolve(resolved, context)


def single_valued(event: dict[str, Any]) -> dict[str, Any]:
    """Each query parameter and header once, with its last value, as API Gateway REST puts it in
    ``queryStringParameters`` / ``headers`` ("the last value wins", AWS docs: "Set up a proxy
    integration with a proxy resource", multi-value parameters).

    powertools validates from ``multiValueQueryStringParameters`` when it is set, where
    ``?limit=500&limit=2`` is the list ``["500", "2"]`` a scalar parameter cannot take; every route
    takes scalars, so both views are made to say what ``queryStringParameters`` says.
    """
    multi_query = event.get("multiValueQueryStringParameters") or {}
    query = {**(event.get("queryStringParameters") or {})}
    query.update({name: values[-1] for name, values in multi_query.items() if values})
    multi_headers = event.get("multiValueHeaders") or {}
    headers = {**(event.get("headers") or {})}
    headers.update({name: values[-1] for name, values in multi_headers.items() if values})
    return {
        **event,
        "queryStringParameters": query or None,
        "multiValueQueryStringParameters": {k: [v] for k, v in query.items()} or None,
        "headers": headers or None,
        "multiValueHeaders": {k: [v] for k, v in headers.items()} or None,
    }


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
    """Bodies are JSON whatever the Content-Type says (curl -d sends form encoding by default), an
    empty body too: the Content-Type is set to JSON on every request, so no route ever answers an
    unsupported media type with a 500.

    Returns the event to resolve, or the error for a body that is not UTF-8, nests too deeply or
    holds a lone surrogate (what the JSON parser itself cannot report as a validation error).
    """
    raw = event.get("body") or ""
    try:
        text = base64.b64decode(raw).decode("utf-8") if event.get("isBase64Encoded") else raw
        document = json.loads(text) if text else None
    except (UnicodeDecodeError, binascii.Error):
        return _error_body("The request body is not UTF-8 text.")
    except RecursionError:
        return _error_body("The request body nests JSON too deeply.")
    except ValueError:
        pass  # not JSON (or empty): the resolver's validation answers that, with its field
    else:
        # JSON's "\ud800" escape makes a lone surrogate, which no store, process or message carries.
        where = first_surrogate_path(document)
        if where is not None:
            return ErrorBody(
                error=ErrorDetail(
                    code="ValidationError",
                    message=f"{where or 'The body'} holds a lone surrogate (\\ud800..\\udfff), which is "
                    "not text; send UTF-8 text.",
                    field=where or None,
                )
            )
        event = {**event, "body": text, "isBase64Encoded": False}
    headers = {k: v for k, v in (event.get("headers") or {}).items() if k.lower() != "content-type"}
    multi = {k: v for k, v in (event.get("multiValueHeaders") or {}).items() if k.lower() != "content-type"}
    headers["Content-Type"] = content_types.APPLICATION_JSON
    multi["Content-Type"] = [content_types.APPLICATION_JSON]
    return {**event, "headers": headers, "multiValueHeaders": multi}
