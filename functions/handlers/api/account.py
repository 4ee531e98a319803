"""Routes over the caller's own account: balance, contacts, usage (the ledger)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Depends
from aws_lambda_powertools.event_handler.openapi.params import Body, Query
from aws_lambda_powertools.event_handler.router import APIGatewayRouter
from pydantic import BeforeValidator

from functions.domain.timefmt import parse_query_time
from functions.handlers.api.app import (
    Caller,
    ServicesDep,
    ascii_whole_number,
    require,
)
from functions.handlers.api.models import (
    AccountView,
    ContactsBody,
    ContactsView,
    UsageView,
    account_view,
    ledger_entry_view,
)
from functions.handlers.api.openapi import _TIME, _json, _responses
from functions.logic import accounts, queries

router = APIGatewayRouter()


@router.get(
    "/account",
    summary="The caller's account and credit balance",
    responses=_responses(200, _json(AccountView)),
)
def get_account(
    services: ServicesDep, caller: Annotated[Caller, Depends(require("account/read"))]
) -> AccountView:
    account = queries.get_or_create_account(
        services, caller.account_id, caller.email, caller.roles, services.clock()
    )
    return account_view(account, accounts.email_status(services, account))


@router.put(
    "/account/contacts",
    summary="Set the caller's email and phone (null clears; absent keeps)",
    responses=_responses(200, _json(ContactsView), 400, 413),
)
def put_contacts(
    body: Annotated[ContactsBody, Body()],
    services: ServicesDep,
    caller: Annotated[Caller, Depends(require("contacts/write"))],
) -> ContactsView:
    given = body.model_fields_set
    before = services.store.get_account(caller.account_id)
    account = accounts.set_contacts(
        services,
        caller.account_id,
        now=services.clock(),
        email=body.email if "email" in given else accounts.NOT_GIVEN,
        phone=body.phone if "phone" in given else accounts.NOT_GIVEN,
        webhook_url=body.webhookUrl if "webhookUrl" in given else accounts.NOT_GIVEN,
    )
    view = account_view(account, accounts.email_status(services, account)).model_dump()
    fresh = before is None or before.webhook_secret != account.webhook_secret
    return ContactsView(**view, webhookSecret=account.webhook_secret if fresh else None)


@router.get(
    "/account/usage",
    summary="Ledger entries of the caller's account, newest first",
    description=(
        "A page holds at most `limit` entries and may hold fewer while `nextToken` is set; "
        "`totalCharged` is what the page's charges add up to (the period's total is the sum over its "
        "pages). Follow `nextToken` until it is null."
    ),
    responses=_responses(200, _json(UsageView), 400),
)
def get_usage(
    *,
    services: ServicesDep,
    caller: Annotated[Caller, Depends(require("usage/read"))],
    start: Annotated[
        str | None, Query(alias="from", description="ISO 8601 time, inclusive", json_schema_extra=_TIME)
    ] = None,
    end: Annotated[
        str | None, Query(alias="to", description="ISO 8601 time, exclusive", json_schema_extra=_TIME)
    ] = None,
    limit: Annotated[
        int, BeforeValidator(ascii_whole_number), Query(ge=1, le=accounts.MAX_USAGE_PAGE)
    ] = accounts.MAX_USAGE_PAGE,
    nextToken: Annotated[str | None, Query()] = None,
) -> UsageView:
    usage = accounts.account_usage(
        services,
        caller.account_id,
        parse_query_time(start, "from") if start is not None else None,
        parse_query_time(end, "to") if end is not None else None,
        limit=limit,
        next_token=nextToken,
    )
    entries = [ledger_entry_view(e) for e in usage.entries]
    return UsageView(entries=entries, totalCharged=usage.total_charged, nextToken=usage.next_token)
