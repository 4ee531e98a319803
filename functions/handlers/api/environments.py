"""Routes over the account's environments (``/environments``): create (idempotent), list, read, the
build log, delete. Each route declares its one action (``environments/read``, ``environments/write``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Depends, Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query
from aws_lambda_powertools.event_handler.router import APIGatewayRouter
from pydantic import BeforeValidator

from functions.domain.environments import NAME_PATTERN
from functions.domain.timefmt import parse_query_time
from functions.handlers.api.app import Caller, ServicesDep, ascii_whole_number, require
from functions.handlers.api.models.environments import (
    EnvironmentListView,
    EnvironmentLogView,
    EnvironmentSpecBody,
    EnvironmentView,
    environment_summary_view,
    environment_view,
)
from functions.handlers.api.models.job_data import log_event_view
from functions.handlers.api.openapi import _TIME, _json, _responses
from functions.logic import environments

router = APIGatewayRouter()

EnvironmentName = Annotated[
    str, Path(min_length=2, max_length=64, pattern=NAME_PATTERN, description="The environment's name.")
]
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _action(name: str) -> str:
    return f"Action: `{name}`."


@router.get(
    "/environments",
    summary="The caller's environments, by name",
    description=_action("environments/read")
    + " Each without its requirement and package lists (`GET /environments/{name}` has them). A page "
    "holds at most `limit` environments; follow `nextToken` until it is null.",
    responses=_responses(200, _json(EnvironmentListView), 400),
)
def list_environments(
    services: ServicesDep,
    caller: Annotated[Caller, Depends(require("environments/read"))],
    limit: Annotated[int, BeforeValidator(ascii_whole_number), Query(ge=1, le=100)] = 50,
    nextToken: Annotated[str | None, Query()] = None,
) -> EnvironmentListView:
    found, token = environments.list_environments(services, caller.account_id, limit, nextToken)
    return EnvironmentListView(environments=[environment_summary_view(e) for e in found], nextToken=token)


@router.get(
    "/environments/<name>",
    summary="One environment: its spec, build status and resolved packages",
    description=_action("environments/read"),
    responses=_responses(200, _json(EnvironmentView), 400, 404),
)
def get_environment(
    name: EnvironmentName,
    services: ServicesDep,
    caller: Annotated[Caller, Depends(require("environments/read"))],
) -> EnvironmentView:
    return environment_view(environments.get_environment(services, caller.account_id, name))


def _put_responses() -> dict[int, Any]:
    declared = _responses(201, _json(EnvironmentView, "Created (Building)"), 400, 404, 409, 413, 501)
    declared[200] = _json(EnvironmentView, "The existing environment (same spec)")
    return declared


@router.put(
    "/environments/<name>",
    summary="Create an environment (idempotent: the same spec returns the existing one)",
    description=_action("environments/write")
    + " 201 Building when created: its requirements are resolved to a lock and installed once per "
    "(python, lock, platform), shared by every name and account asking the same; 200 with the existing "
    "environment when it has this spec, 409 when it has another. 400 naming the field for an unknown "
    "Python version, a line that is not a PEP 508 requirement, an index that is not https, more than "
    "500 requirements, an image that is not an image reference; 400 `QuotaExceeded` while the account "
    "builds 3 environments already. Builds are not charged; one fails after 30 minutes or 10 GiB "
    "unpacked, saying which.",
    responses=_put_responses(),
)
def put_environment(
    name: EnvironmentName,
    body: Annotated[EnvironmentSpecBody, Body()],
    services: ServicesDep,
    caller: Annotated[Caller, Depends(require("environments/write"))],
) -> Response[Any]:
    environment, created = environments.put_environment(
        services, caller.account_id, name, body.to_spec(), services.clock()
    )
    return Response(201 if created else 200, content_types.APPLICATION_JSON, environment_view(environment))


@router.get(
    "/environments/<name>/log",
    summary="The environment's build log (the resolver's and installer's output)",
    description=_action("environments/read") + " Paged as a job's log: pass nextToken back for more.",
    responses=_responses(200, _json(EnvironmentLogView), 400, 404, 501),
)
def get_build_log(
    name: EnvironmentName,
    *,
    services: ServicesDep,
    caller: Annotated[Caller, Depends(require("environments/read"))],
    since: Annotated[str | None, Query(description="ISO 8601 time", json_schema_extra=_TIME)] = None,
    nextToken: Annotated[str | None, Query(description="From the previous page")] = None,
) -> EnvironmentLogView:
    start = max(parse_query_time(since, "since"), _EPOCH) if since is not None else None
    page = environments.get_build_log(services, caller.account_id, name, start, nextToken)
    return EnvironmentLogView(
        name=name, events=[log_event_view(e) for e in page.events], nextToken=page.next_token
    )


@router.delete(
    "/environments/<name>",
    summary="Delete an environment",
    description=_action("environments/write")
    + " Jobs already submitted in it keep the build they were given; jobs still waiting for its build "
    "end Terminated, free, saying it was deleted; its name is free again.",
    responses=_responses(200, _json(EnvironmentView), 400, 404),
)
def delete_environment(
    name: EnvironmentName,
    services: ServicesDep,
    caller: Annotated[Caller, Depends(require("environments/write"))],
) -> EnvironmentView:
    return environment_view(
        environments.delete_environment(services, caller.account_id, name, services.clock())
    )
