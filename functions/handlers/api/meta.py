"""Routes about the service itself: ``/health``, ``/openapi.json``, ``/machine-classes``."""

from __future__ import annotations

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from functions.domain.machine_classes import MACHINE_CLASSES
from functions.handlers.api.app import (
    CallerDep,
)
from functions.handlers.api.models import (
    HealthView,
    MachineClassesView,
    machine_class_view,
)
from functions.handlers.api.openapi import _json, _responses, openapi_json

router = APIGatewayRouter()


@router.get(
    "/health",
    summary="Liveness: 200 once the stack takes jobs (no auth)",
    responses=_responses(200, _json(HealthView), auth=False),
)
def health() -> HealthView:
    return HealthView(status="ok")


@router.get(
    "/openapi.json",
    summary="This API's OpenAPI 3.1 document",
    responses=_responses(
        200, {"description": "OpenAPI 3.1", "content": {"application/json": {"schema": {"type": "object"}}}}
    ),
)
def openapi_document() -> Response[str]:
    return Response(200, content_types.APPLICATION_JSON, openapi_json())


@router.get(
    "/machine-classes",
    summary="Machine classes with their credits per hour",
    responses=_responses(200, _json(MachineClassesView)),
)
def list_machine_classes(caller: CallerDep) -> MachineClassesView:
    return MachineClassesView(machineClasses=[machine_class_view(m) for m in MACHINE_CLASSES.values()])
