"""Routes for operators (the ``admin`` role): granting credits (audited, with an ``Idempotency-Key``)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from functions.handlers.api.admin_once import IdempotencyKeyHeader, run_once
from functions.handlers.api.app import (
    Caller,
    ServicesDep,
    require,
)
from functions.handlers.api.models import (
    AccountView,
    GrantCreditsBody,
    account_view,
)
from functions.handlers.api.openapi import _json, _responses
from functions.logic import accounts, audit

router: APIGatewayRouter = APIGatewayRouter()


@router.post(
    "/admin/accounts/<accountId>/credits",
    summary="Grant credits to an account (admin)",
    description=(
        "With an Idempotency-Key, a retried grant credits once: the same key and body answer the first "
        "answer, a different body 409 Conflict. Every grant is in the audit log (GET /admin/audit)."
    ),
    responses=_responses(200, _json(AccountView), 400, 403, 404, 409, 413),
)
def grant_credits(
    accountId: str,
    body: Annotated[GrantCreditsBody, Body()],
    services: ServicesDep,
    admin: Annotated[Caller, Depends(require("credits/grant/action"))],
    idempotency_key: IdempotencyKeyHeader = None,
) -> AccountView:
    def action() -> dict[str, object]:
        account = audit.grant_credits(
            services,
            actor=admin.account_id,
            account_id=accountId,
            credits=body.credits,
            reason=body.reason,
            now=services.clock(),
            idempotency_key=idempotency_key,
        )
        return account_view(account, accounts.email_status(services, account)).model_dump(mode="json")

    canonical = {
        "accountId": accountId,
        "credits": format(body.credits.normalize(), "f"),
        "reason": body.reason,
    }
    answer = run_once(
        services,
        action_name="grant",
        actor=admin.account_id,
        idempotency_key=idempotency_key,
        canonical=canonical,
        action=action,
    )
    return AccountView.model_validate(answer)
