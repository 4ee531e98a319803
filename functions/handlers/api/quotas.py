"""Routes of quotas: the caller's own (``GET /account/quotas``) and an operator's override
(``PUT /admin/accounts/{accountId}/quotas``, admin role: audited, once per ``Idempotency-Key``,
``admin_once``)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from functions.handlers.api.admin_once import IdempotencyKeyHeader, run_once
from functions.handlers.api.app import Caller, ServicesDep, require
from functions.handlers.api.models.quotas import QuotasBody, QuotasView, quotas_view
from functions.handlers.api.openapi import _json, _responses
from functions.logic import quotas

router: APIGatewayRouter = APIGatewayRouter()


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
    description=(
        "With an Idempotency-Key, a retried request changes the limits once: the same key and body "
        "answer the first answer, a different body 409 Conflict. Every change is in the audit log "
        "(GET /admin/audit, action SetQuotas, every limit before and after)."
    ),
    responses=_responses(200, _json(QuotasView), 400, 403, 404, 409, 413),
)
def put_quotas(
    accountId: str,
    body: Annotated[QuotasBody, Body()],
    services: ServicesDep,
    admin: Annotated[Caller, Depends(require("quotas/write"))],
    idempotency_key: IdempotencyKeyHeader = None,
) -> QuotasView:
    changes = [(q.family, q.geoZone, q.limit) for q in body.quotas]
    set_total = "total" in body.model_fields_set

    def action() -> dict[str, object]:
        report = quotas.set_account_quotas(
            services,
            accountId,
            changes,
            body.total,
            set_total,
            actor=admin.account_id,
            now=services.clock(),
            idempotency_key=idempotency_key,
        )
        return quotas_view(report).model_dump(mode="json")

    canonical = {
        "accountId": accountId,
        "quotas": [{"family": f, "geoZone": z, "limit": limit} for f, z, limit in changes],
        "total": body.total,
        "setTotal": set_total,
    }
    answer = run_once(
        services,
        action_name="quotas",
        actor=admin.account_id,
        idempotency_key=idempotency_key,
        canonical=canonical,
        action=action,
    )
    return QuotasView.model_validate(answer)
