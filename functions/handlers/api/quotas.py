"""Routes of quotas: the caller's own (``GET /account/quotas``) and an operator's override
(``PUT /admin/accounts/{accountId}/quotas``, admin role)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from functions.handlers.api.app import Caller, ServicesDep, require
from functions.handlers.api.models.quotas import QuotasBody, QuotasView, quotas_view
from functions.handlers.api.openapi import _json, _responses
from functions.logic import quotas

router = APIGatewayRouter()


@router.get(
    "/account/quotas",
    summary="The caller's quotas: each machine family's limit per geo zone, in use and queued",
    responses=_responses(200, _json(QuotasView)),
)
def get_quotas(
    services: ServicesDep, caller: Annotated[Caller, Depends(require("quotas/read"))]
) -> QuotasView:
    return quotas_view(quotas.account_quotas(services, caller.account_id))


@router.put(
    "/admin/accounts/<accountId>/quotas",
    summary="Set an account's quota limits (admin); listed entries replace those limits",
    responses=_responses(200, _json(QuotasView), 400, 403, 404, 413),
)
def put_quotas(
    accountId: str,
    body: Annotated[QuotasBody, Body()],
    services: ServicesDep,
    admin: Annotated[Caller, Depends(require("quotas/write"))],
) -> QuotasView:
    changes = [(q.family, q.geoZone, q.limit) for q in body.quotas]
    report = quotas.set_account_quotas(
        services, accountId, changes, body.total, "total" in body.model_fields_set
    )
    return quotas_view(report)
