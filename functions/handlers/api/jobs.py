"""Routes that make and find jobs: submit (with an ``Idempotency-Key``), upload a large input, list,
get, abort.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any, Protocol

from aws_lambda_powertools.event_handler import Depends, Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Body, Header, Query
from aws_lambda_powertools.event_handler.router import APIGatewayRouter
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from pydantic import BeforeValidator
from pydantic import ValidationError as PydanticValidationError

from functions.bootstrap import get_services
from functions.domain.dependencies import (
    Condition,
    Dependency,
    DependencyMode,
    InputsFrom,
    check_dependencies,
    check_inputs_from,
)
from functions.domain.environments import EnvironmentSpec
from functions.domain.errors import ValidationFailed
from functions.domain.jobs import PayloadKind
from functions.domain.limits import RESPONSE_BUDGET_BYTES, wire_bytes
from functions.domain.machine_classes import machine_class, resolve_geo_zone
from functions.domain.notifications import normalize_notifications, rules_to_json
from functions.domain.status import JobStatus
from functions.domain.text import check_argv
from functions.domain.timefmt import to_api_time
from functions.handlers.api.admin_once import IDEMPOTENT_RUNNERS, idempotency_conflicts
from functions.handlers.api.app import (
    IDEMPOTENCY_SECONDS,
    Caller,
    ServicesDep,
    app,
    ascii_whole_number,
    require,
)
from functions.handlers.api.models import (
    JobListView,
    JobView,
    SubmitJobBody,
    UploadBody,
    UploadView,
    job_view,
)
from functions.handlers.api.models.environments import EnvironmentSpecBody
from functions.handlers.api.openapi import _json, _responses
from functions.logic import arrays, submission, uploads
from functions.ports import Services

router: APIGatewayRouter = APIGatewayRouter()


def _environment(value: str | dict[str, Any] | None) -> str | EnvironmentSpec | None:
    """``environment`` as the request gives it: a name, or an inline spec read as ``PUT
    /environments/{name}``'s body (its bad fields are 400s on ``environment.<field>``)."""
    if not isinstance(value, dict):
        return value
    try:
        return EnvironmentSpecBody.model_validate(value).to_spec()
    except PydanticValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first.get("loc", ()))
        field = f"environment.{where}" if where else "environment"
        raise ValidationFailed(f"{field}: {first.get('msg', 'invalid')}", field=field) from None


def _job_request(body: SubmitJobBody, submitted_by: str | None = None) -> submission.JobRequest:
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
    depends_on = check_dependencies(
        [Dependency(d.jobId, Condition(d.condition), DependencyMode(d.mode)) for d in body.dependsOn or []],
        is_array=body.arrayItems is not None or body.arrayItemsKey is not None,
    )
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
        python_version=body.pythonVersion,
        environment=_environment(body.environment),
        array_items=body.arrayItems,
        array_items_key=body.arrayItemsKey,
        parallelism=body.parallelism,
        compute=body.compute,
        machine_class_given="machineClass" in body.model_fields_set,
        submitted_by=submitted_by,
        depends_on=depends_on,
        inputs_from=check_inputs_from(
            [InputsFrom(i.jobId, tuple(i.files)) for i in body.inputsFrom or []], depends_on
        ),
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
        # On a compute, an unnamed class is the compute's (not the default).
        "machineClass": machine_class(request.machine_class).name
        if request.machine_class_given or request.compute is None
        else None,
        "geoZone": resolve_geo_zone(request.geo_zone).value,
        "compute": request.compute,
        "creditConstraint": None if credit is None else format(credit.normalize(), "f"),
        "timeConstraint": request.time_constraint,
        "notifications": rules_to_json(normalize_notifications(request.notifications)),
        "pythonVersion": request.python_version,
        # An inline spec as given (its lines are checked by the submit, not here).
        "environment": asdict(request.environment)
        if isinstance(request.environment, EnvironmentSpec)
        else request.environment,
        "arrayItems": request.array_items,
        "arrayItemsKey": request.array_items_key,
        "dependsOn": [[d.job_id, d.condition.value, d.mode.value] for d in request.depends_on],
        "inputsFrom": [[i.job_id, list(i.files)] for i in request.inputs_from],
    }


class SubmitOnce(Protocol):
    """``submit`` as powertools idempotency wraps it: the request (``key``, ``accountId``, ``canonical``,
    ``body``) by keyword only; answers ``{"jobId": ...}``, the first answer again for a repeated key."""

    def __call__(self, *, request: dict[str, Any]) -> dict[str, str]: ...


def _idempotent_submit(services: Services) -> tuple[SubmitOnce, IdempotencyConfig]:
    """``submit`` wrapped by powertools idempotency (one persistence layer per table)."""
    table = services.idempotency_table or ""
    if table not in IDEMPOTENT_RUNNERS:
        persistence = DynamoDBPersistenceLayer(table_name=table)
        config = IdempotencyConfig(
            event_key_jmespath="key",
            payload_validation_jmespath="canonical",
            expires_after_seconds=IDEMPOTENCY_SECONDS,
            raise_on_no_idempotency_key=True,
        )

        def submit_once(request: dict[str, Any]) -> dict[str, str]:
            body: SubmitJobBody = request["body"]
            job = arrays.submit(
                get_services(),
                request["accountId"],
                _job_request(body, request["userId"]),
                get_services().clock(),
            )
            return {"jobId": job.job_id}

        # idempotent_function is typed to return Any; its wrapper takes the request by keyword only. Keep
        # the name submit_once: stored records' keys carry the function's module and qualified name.
        wrapped: SubmitOnce = idempotent_function(
            submit_once, data_keyword_argument="request", persistence_store=persistence, config=config
        )
        IDEMPOTENT_RUNNERS[table] = (wrapped, config)
    submitter: tuple[SubmitOnce, IdempotencyConfig] = IDEMPOTENT_RUNNERS[table]
    return submitter


@router.post(
    "/jobs",
    summary="Submit a job",
    description=(
        "The job is stored and answered at once; it is sent to AWS Batch when its account's quota "
        "admits it (until then it is Queued with statusReason `Waiting for quota: ...`). An array job "
        "(arrayItems, arrayItemsKey) is admitted span by span, each span sized to the quota's free room, "
        "and keeps that statusReason while children of it wait. A job (an array's child) that alone "
        "exceeds its machine family's quota answers 400 `QuotaExceeded`."
    ),
    responses=_responses(202, _json(JobView, "Accepted"), 400, 402, 409, 413, 503),
)
def submit_job(
    body: Annotated[SubmitJobBody, Body()],
    services: ServicesDep,
    caller: Annotated[Caller, Depends(require("jobs/write"))],
    idempotency_key: Annotated[
        str | None, Header(alias="Idempotency-Key", min_length=1, max_length=128, pattern=r"^[\x21-\x7e]+$")
    ] = None,
) -> Response[JobView]:
    now = services.clock()
    if idempotency_key is None:
        job = arrays.submit(services, caller.account_id, _job_request(body, caller.user_id), now)
        return Response(202, content_types.APPLICATION_JSON, job_view(job))
    canonical = canonical_submit(body)  # refuses what can never run before recording the key
    submit_once, config = _idempotent_submit(services)
    config.register_lambda_context(app.lambda_context)
    request = {
        "key": f"{caller.account_id}#{idempotency_key}",
        "accountId": caller.account_id,
        "userId": caller.user_id,
        "canonical": canonical,
        # The validated model itself: only "key" and "canonical" are hashed, and a JSON round trip
        # would turn creditConstraint's Decimal into a string the model refuses.
        "body": body,
    }
    with idempotency_conflicts():
        outcome = submit_once(request=request)
    job = submission.get_owned_job(services, caller.account_id, outcome["jobId"])
    return Response(202, content_types.APPLICATION_JSON, job_view(job))


@router.post(
    "/jobs/uploads",
    summary="Sign an upload of a large input (presigned SigV4 PUT, 15 min); submit it with inputKey",
    responses=_responses(201, _json(UploadView, "Created"), 400, 413),
)
def create_upload(
    body: Annotated[UploadBody, Body()],
    services: ServicesDep,
    caller: Annotated[Caller, Depends(require("jobs/write"))],
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


@router.get(
    "/jobs",
    summary="This account's jobs, newest first",
    description=(
        "A page holds at most `limit` jobs and may hold fewer, even none, while `nextToken` is set: "
        "jobs past their record retention (400 days) and, with `status`, jobs in other statuses are "
        "left out after the index is read, and a page ends before its views pass 4 MiB. Follow "
        "`nextToken` until it is null."
    ),
    responses=_responses(200, _json(JobListView), 400),
)
def list_jobs(
    services: ServicesDep,
    caller: Annotated[Caller, Depends(require("jobs/read"))],
    status: Annotated[JobStatus | None, Query()] = None,
    limit: Annotated[int, BeforeValidator(ascii_whole_number), Query(ge=1, le=100)] = 50,
    nextToken: Annotated[str | None, Query()] = None,
) -> JobListView:
    jobs, token = services.store.list_jobs(caller.account_id, status, limit, nextToken)
    views = [job_view(j) for j in jobs]
    # A page stays under the response budget whatever its jobs hold (a job view is at most about
    # 600 KB: 100 parents with 20 patterns each): past it the page ends and its token goes on after.
    spent = 0
    for index, view in enumerate(views):
        spent += wire_bytes(view.model_dump_json()) + 1
        if spent > RESPONSE_BUDGET_BYTES and index > 0:
            return JobListView(jobs=views[:index], nextToken=services.store.list_token_after(jobs[index - 1]))
    return JobListView(jobs=views, nextToken=token)


@router.get("/jobs/<jobId>", summary="One job", responses=_responses(200, _json(JobView), 404))
def get_job(
    jobId: str, services: ServicesDep, caller: Annotated[Caller, Depends(require("jobs/read"))]
) -> JobView:
    return job_view(submission.get_owned_job(services, caller.account_id, jobId))


@router.post(
    "/jobs/<jobId>/abort",
    summary="Abort a job that is not final",
    responses=_responses(202, _json(JobView, "Accepted"), 404, 409),
)
def abort_job(
    jobId: str, services: ServicesDep, caller: Annotated[Caller, Depends(require("jobs/abort/action"))]
) -> Response[JobView]:
    job = submission.abort_job(services, caller.account_id, jobId)
    return Response(202, content_types.APPLICATION_JSON, job_view(job))


@router.get(
    "/jobs/<jobId>/children",
    summary="An array job's children, in arrayIndex order",
    description=(
        "A child that had no event yet is shown Queued. With `status`, a page reads at most 1,000 "
        "children, so it may hold fewer than `limit` (even none) while `nextToken` is set. A job that "
        "is no array has no children."
    ),
    responses=_responses(200, _json(JobListView), 400, 404),
)
def list_children(
    jobId: str,
    *,
    services: ServicesDep,
    caller: Annotated[Caller, Depends(require("jobs/read"))],
    status: Annotated[JobStatus | None, Query()] = None,
    limit: Annotated[int, BeforeValidator(ascii_whole_number), Query(ge=1, le=100)] = 50,
    nextToken: Annotated[str | None, Query()] = None,
) -> JobListView:
    page = arrays.list_children(
        services, caller.account_id, jobId, status=status, limit=limit, next_token=nextToken
    )
    return JobListView(jobs=[job_view(j) for j in page.jobs], nextToken=page.next_token)
