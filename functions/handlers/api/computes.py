"""Routes over the account's dedicated computes (``/account/computes``): create (idempotent), read,
start, stop, restart, delete, schedules. Each route declares its one action (``require``: the role
table's ``computes/read``, ``computes/write``, ...), also named in its description."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Depends, Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Body, Path
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from functions.domain.computes import NAME_PATTERN, ComputeRequest, check_schedules
from functions.handlers.api.app import Caller, ServicesDep, require
from functions.handlers.api.models.computes import (
    ComputeListView,
    ComputeView,
    PutComputeBody,
    SchedulesBody,
    compute_view,
)
from functions.handlers.api.openapi import _json, _responses
from functions.logic import computes
from functions.ports import Services

router = APIGatewayRouter()

ComputeName = Annotated[
    str, Path(min_length=2, max_length=32, pattern=NAME_PATTERN, description="The compute's name.")
]


def _action(name: str) -> str:
    return f"Action: `{name}`."


@router.get(
    "/account/computes",
    summary="The caller's dedicated computes",
    description=_action("computes/read"),
    responses=_responses(200, _json(ComputeListView)),
)
def list_computes(
    services: ServicesDep, caller: Annotated[Caller, Depends(require("computes/read"))]
) -> ComputeListView:
    return ComputeListView(
        computes=[compute_view(c) for c in computes.list_computes(services, caller.account_id)]
    )


@router.get(
    "/account/computes/<name>",
    summary="One dedicated compute",
    description=_action("computes/read"),
    responses=_responses(200, _json(ComputeView), 400, 404),
)
def get_compute(
    name: ComputeName, services: ServicesDep, caller: Annotated[Caller, Depends(require("computes/read"))]
) -> ComputeView:
    return compute_view(computes.get_compute(services, caller.account_id, name))


def _put_responses() -> dict[int, Any]:
    # 404: a path no route takes (e.g. a name with control characters never reaches the route).
    declared = _responses(201, _json(ComputeView, "Created"), 400, 404, 409, 413)
    declared[200] = _json(ComputeView, "The existing compute (same spec)")
    return declared


@router.put(
    "/account/computes/<name>",
    summary="Create a dedicated compute (idempotent: the same spec returns the existing one)",
    description=_action("computes/write")
    + " 201 when created (Creating, then Stopped once AWS Batch made its compute environment and "
    "queue), 200 with the existing compute when it has this spec, 409 when it has another. A compute "
    "reserves `count` x its class's vCPUs (GPUs for a GPU class) of the account's quota of its family "
    "in its zone, and their vCPUs of the total, until it is deleted (Stopped too) or fails: 400 "
    "`QuotaExceeded` when they do not fit in what the account's jobs and other computes leave "
    "(`GET /account/quotas`: `inUse + reserved`).",
    responses=_put_responses(),
)
def put_compute(
    name: ComputeName,
    body: Annotated[PutComputeBody, Body()],
    services: ServicesDep,
    caller: Annotated[Caller, Depends(require("computes/write"))],
) -> Response[Any]:
    compute, created = computes.put_compute(
        services,
        caller.account_id,
        name,
        machine=body.machineClass,
        zone_name=body.geoZone,
        count=body.count,
        now=services.clock(),
    )
    return Response(201 if created else 200, content_types.APPLICATION_JSON, compute_view(compute))


def _request(services: Services, caller: Caller, name: str, request: ComputeRequest) -> Response[Any]:
    compute = computes.request_compute(services, caller.account_id, name, request, now=services.clock())
    return Response(202, content_types.APPLICATION_JSON, compute_view(compute))


@router.post(
    "/account/computes/<name>/start",
    summary="Start a Stopped compute (a no-op while Starting or Running)",
    description=_action("computes/start/action")
    + " Charged per second from this request (Starting) until it stops.",
    responses=_responses(202, _json(ComputeView, "Accepted"), 400, 404, 409),
)
def start_compute(
    name: ComputeName,
    services: ServicesDep,
    caller: Annotated[Caller, Depends(require("computes/start/action"))],
) -> Response[Any]:
    return _request(services, caller, name, ComputeRequest.START)


@router.post(
    "/account/computes/<name>/stop",
    summary="Stop a compute (a no-op while Stopping or Stopped); its running time is settled",
    description=_action("computes/stop/action")
    + " Its jobs that are not final are terminated (`Dedicated compute <name> stopped`, charged 0);"
    " its quota stays reserved while Stopped.",
    responses=_responses(202, _json(ComputeView, "Accepted"), 400, 404, 409),
)
def stop_compute(
    name: ComputeName,
    services: ServicesDep,
    caller: Annotated[Caller, Depends(require("computes/stop/action"))],
) -> Response[Any]:
    return _request(services, caller, name, ComputeRequest.STOP)


@router.post(
    "/account/computes/<name>/restart",
    summary="Restart a Starting or Running compute (stop, then start)",
    description=_action("computes/restart/action") + " Its jobs are terminated, as by a stop.",
    responses=_responses(202, _json(ComputeView, "Accepted"), 400, 404, 409),
)
def restart_compute(
    name: ComputeName,
    services: ServicesDep,
    caller: Annotated[Caller, Depends(require("computes/restart/action"))],
) -> Response[Any]:
    return _request(services, caller, name, ComputeRequest.RESTART)


@router.delete(
    "/account/computes/<name>",
    summary="Delete a compute: its queue and compute environment are removed, its quota released",
    description=_action("computes/delete") + " 202 with the compute Deleting; it disappears once AWS "
    "Batch deleted its queue and compute environment.",
    responses=_responses(202, _json(ComputeView, "Accepted"), 400, 404),
)
def delete_compute(
    name: ComputeName, services: ServicesDep, caller: Annotated[Caller, Depends(require("computes/delete"))]
) -> Response[Any]:
    return _request(services, caller, name, ComputeRequest.DELETE)


@router.put(
    "/account/computes/<name>/schedules",
    summary="Set a compute's schedules: idle stop and daily start/stop times",
    description=_action("computes/updateSchedules/action"),
    responses=_responses(200, _json(ComputeView), 400, 404, 409, 413),
)
def put_schedules(
    name: ComputeName,
    body: Annotated[SchedulesBody, Body()],
    services: ServicesDep,
    caller: Annotated[Caller, Depends(require("computes/updateSchedules/action"))],
) -> ComputeView:
    schedules = check_schedules(body.idleStopMinutes, [(d.start, d.stop, d.timeZone) for d in body.daily])
    compute = computes.set_schedules(services, caller.account_id, name, schedules, services.clock())
    return compute_view(compute)
