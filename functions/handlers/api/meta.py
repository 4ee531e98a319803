"""Routes about the service itself: ``/health``, ``/openapi.json``, ``/machine-classes``, ``/runtime``,
``/estimate``, ``/roles``."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Depends, Response, content_types
from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from functions.domain.credits import MINIMUM_CHARGED_SECONDS, estimate_credits
from functions.domain.errors import ValidationFailed
from functions.domain.machine_classes import MACHINE_CLASSES, machine_class, resolve_geo_zone
from functions.handlers.api.app import (
    Caller,
    ServicesDep,
    require,
)
from functions.handlers.api.models import (
    EstimateBody,
    EstimateView,
    HealthView,
    MachineClassesView,
    RolesView,
    RuntimeView,
    machine_class_view,
    roles_view,
)
from functions.handlers.api.openapi import _json, _responses, openapi_json

router = APIGatewayRouter()


@router.get(
    "/health",
    summary="Liveness: 200 once the stack takes jobs (no auth)",
    responses=_responses(200, _json(HealthView), auth=False),
)
def health(public: Annotated[None, Depends(require("health/read"))]) -> HealthView:
    return HealthView(status="ok")


@router.get(
    "/openapi.json",
    summary="This API's OpenAPI 3.1 document",
    responses=_responses(
        200, {"description": "OpenAPI 3.1", "content": {"application/json": {"schema": {"type": "object"}}}}
    ),
)
def openapi_document(caller: Annotated[Caller, Depends(require("service/read"))]) -> Response[str]:
    return Response(200, content_types.APPLICATION_JSON, openapi_json())


@router.get(
    "/machine-classes",
    summary="Machine classes with their credits per hour",
    responses=_responses(200, _json(MachineClassesView)),
)
def list_machine_classes(caller: Annotated[Caller, Depends(require("service/read"))]) -> MachineClassesView:
    return MachineClassesView(machineClasses=[machine_class_view(m) for m in MACHINE_CLASSES.values()])


@router.get(
    "/runtime",
    summary="What jobs run with: the Python versions and the default (extension)",
    responses=_responses(200, _json(RuntimeView)),
)
def get_runtime(
    services: ServicesDep, caller: Annotated[Caller, Depends(require("service/read"))]
) -> RuntimeView:
    python = services.python
    return RuntimeView(
        pythonVersion=python.default, pythonVersions=list(python.versions), interpreters=python.interpreters
    )


@router.post(
    "/estimate",
    summary="Credits a run would be charged (the settlement's rules and the 60-second minimum)",
    responses=_responses(200, _json(EstimateView), 400, 413),
)
def estimate(
    body: Annotated[EstimateBody, Body()], caller: Annotated[Caller, Depends(require("service/read"))]
) -> EstimateView:
    for field in ("arrayItems", "arrayItemsKey"):
        if getattr(body, field) is not None:
            raise ValidationFailed(
                "Estimate one charge of an array (without arrayItems): each item is charged as one job; "
                "with parallelism each container is, once, for the items it ran one after another.",
                field=field,
            )
    machine = machine_class(body.machineClass)
    resolve_geo_zone(body.geoZone)  # an unknown zone is refused, as at submit
    credits, billed = estimate_credits(
        body.seconds, machine.credits_per_hour, body.creditConstraint, body.timeConstraint
    )
    return EstimateView(
        credits=credits,
        creditsPerHour=machine.credits_per_hour,
        minimumSeconds=MINIMUM_CHARGED_SECONDS,
        billedSeconds=billed,
    )


@router.get(
    "/roles",
    summary="The roles and the action each route checks (the one action -> role table)",
    responses=_responses(200, _json(RolesView)),
)
def list_roles(caller: Annotated[Caller, Depends(require("service/read"))]) -> RolesView:
    return roles_view()
