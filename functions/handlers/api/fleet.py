"""Routes for operators (the ``admin`` role): machine classes per geo zone (out of service and back,
capacity) and the audit log. Every change takes an optional ``Idempotency-Key`` (``admin_once``)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body, Query
from aws_lambda_powertools.event_handler.router import APIGatewayRouter
from pydantic import BeforeValidator

from functions.handlers.api.admin_once import IdempotencyKeyHeader, run_once
from functions.handlers.api.app import Caller, ServicesDep, ascii_whole_number, require
from functions.handlers.api.models.fleet import (
    AuditListView,
    CapacityBody,
    DisableClassBody,
    EnableClassBody,
    MachineClassStatesView,
    MachineClassStateView,
    audit_entry_view,
    machine_class_state_view,
)
from functions.handlers.api.openapi import _json, _responses
from functions.logic import audit, fleet

router: APIGatewayRouter = APIGatewayRouter()

FleetReader = Annotated[Caller, Depends(require("fleet/read"))]
FleetWriter = Annotated[Caller, Depends(require("fleet/write"))]
AuditReader = Annotated[Caller, Depends(require("audit/read"))]
_CLASS_PATH = "/admin/machine-classes/<machineClass>/zones/<geoZone>"


@router.get(
    "/admin/machine-classes",
    summary="Every machine class per geo zone: state, jobs, capacity (admin)",
    responses=_responses(200, _json(MachineClassStatesView), 403),
)
def list_machine_classes(services: ServicesDep, admin: FleetReader) -> MachineClassStatesView:
    statuses = fleet.list_machine_classes(services)
    return MachineClassStatesView(machineClasses=[machine_class_state_view(s) for s in statuses])


@router.post(
    f"{_CLASS_PATH}/disable",
    summary="Take a machine class out of service in a geo zone (admin)",
    description=(
        "New submits for it answer 503 ClassUnavailable with the reason; jobs already queued or "
        "running in AWS Batch go on (its job queue is DISABLED: it takes no new job, runs those in it)."
    ),
    responses=_responses(200, _json(MachineClassStateView), 400, 403, 404, 409),
)
def disable_machine_class(
    machineClass: str,
    geoZone: str,
    *,
    body: Annotated[DisableClassBody, Body()],
    services: ServicesDep,
    admin: FleetWriter,
    idempotency_key: IdempotencyKeyHeader = None,
) -> MachineClassStateView:
    name, zone = fleet.locate(services, machineClass, geoZone)

    def action() -> dict[str, object]:
        status = fleet.set_class_availability(
            services,
            actor=admin.account_id,
            machine_class=name,
            zone=zone,
            disable=True,
            reason=body.reason,
            now=services.clock(),
            idempotency_key=idempotency_key,
        )
        return machine_class_state_view(status).model_dump(mode="json")

    canonical = {"class": name, "zone": zone.value, "reason": body.reason}
    answer = run_once(
        services,
        action_name="disable",
        actor=admin.account_id,
        idempotency_key=idempotency_key,
        canonical=canonical,
        action=action,
    )
    return MachineClassStateView.model_validate(answer)


@router.post(
    f"{_CLASS_PATH}/enable",
    summary="Put a machine class back in service in a geo zone (admin)",
    responses=_responses(200, _json(MachineClassStateView), 400, 403, 404, 409),
)
def enable_machine_class(
    machineClass: str,
    geoZone: str,
    *,
    services: ServicesDep,
    admin: FleetWriter,
    body: Annotated[EnableClassBody | None, Body()] = None,
    idempotency_key: IdempotencyKeyHeader = None,
) -> MachineClassStateView:
    name, zone = fleet.locate(services, machineClass, geoZone)
    reason = body.reason if body is not None else None

    def action() -> dict[str, object]:
        status = fleet.set_class_availability(
            services,
            actor=admin.account_id,
            machine_class=name,
            zone=zone,
            disable=False,
            reason=reason,
            now=services.clock(),
            idempotency_key=idempotency_key,
        )
        return machine_class_state_view(status).model_dump(mode="json")

    answer = run_once(
        services,
        action_name="enable",
        actor=admin.account_id,
        idempotency_key=idempotency_key,
        canonical={"class": name, "zone": zone.value, "reason": reason},
        action=action,
    )
    return MachineClassStateView.model_validate(answer)


@router.put(
    f"{_CLASS_PATH}/capacity",
    summary="Set maxvCpus of a machine class's compute environments in a geo zone (admin)",
    description="The compute environments may be shared with other classes (sharedWith): they get it too.",
    responses=_responses(200, _json(MachineClassStateView), 400, 403, 404),
)
def set_capacity(
    machineClass: str,
    geoZone: str,
    *,
    body: Annotated[CapacityBody, Body()],
    services: ServicesDep,
    admin: FleetWriter,
    idempotency_key: IdempotencyKeyHeader = None,
) -> MachineClassStateView:
    name, zone = fleet.locate(services, machineClass, geoZone)

    def action() -> dict[str, object]:
        status = fleet.set_capacity(
            services,
            actor=admin.account_id,
            machine_class=name,
            zone=zone,
            max_vcpus=body.maxVcpus,
            now=services.clock(),
            idempotency_key=idempotency_key,
        )
        return machine_class_state_view(status).model_dump(mode="json")

    answer = run_once(
        services,
        action_name="capacity",
        actor=admin.account_id,
        idempotency_key=idempotency_key,
        canonical={"class": name, "zone": zone.value, "maxVcpus": body.maxVcpus},
        action=action,
    )
    return MachineClassStateView.model_validate(answer)


@router.get(
    "/admin/audit",
    summary="What operators changed, newest first (admin)",
    description=(
        "Who (actor), what (action, target), when (at), the state before and after. A page may hold "
        "fewer than `limit` entries while `nextToken` is set; follow it until it is null."
    ),
    responses=_responses(200, _json(AuditListView), 400, 403),
)
def list_audit(
    services: ServicesDep,
    admin: AuditReader,
    limit: Annotated[int, BeforeValidator(ascii_whole_number), Query(ge=1, le=100)] = 50,
    nextToken: Annotated[str | None, Query()] = None,
) -> AuditListView:
    entries, token = audit.list_audit(services, limit, nextToken)
    return AuditListView(entries=[audit_entry_view(e) for e in entries], nextToken=token)
