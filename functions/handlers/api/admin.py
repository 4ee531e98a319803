"""Routes for operators (the ``admin`` role): granting credits."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

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
from functions.logic import accounts

router = APIGatewayRouter()


@router.post(
    "/admin/accounts/<accountId>/credits",
    summary="Grant credits to an account (admin)",
    responses=_responses(200, _json(AccountView), 400, 403, 404, 413),
)
def grant_credits(
    accountId: str,
    body: Annotated[GrantCreditsBody, Body()],
    services: ServicesDep,
    admin: Annotated[Caller, Depends(require("credits/grant/action"))],
) -> AccountView:
    account = accounts.grant_credits(services, accountId, body.credits, body.reason, services.clock())
    return account_view(account, accounts.email_status(services, account))
