"""Routes over the members of the account a request acts in: list, read, give a role, remove."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Depends, Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Path
from aws_lambda_powertools.event_handler.router import APIGatewayRouter

from functions.domain.errors import Forbidden
from functions.domain.roles import actions_of, denial_message, parse_member_role
from functions.domain.text import ACCOUNT_ID_PATTERN
from functions.handlers.api.app import Caller, ServicesDep, require
from functions.handlers.api.models import AccessView, MemberBody, MembersView, MemberView, member_view
from functions.handlers.api.openapi import _json, _responses
from functions.logic import members

router = APIGatewayRouter()


# The member's user id, as the path gives it (a Cognito sub, or a local stack's id); the pattern is
# in the OpenAPI document, and a value outside it is 400 naming userId.
UserId = Annotated[str, Path(pattern=ACCOUNT_ID_PATTERN, description="The user's id (their Cognito sub).")]


@router.get(
    "/account/access",
    summary="The caller in this account: their user id, role and every action it holds",
    responses=_responses(200, _json(AccessView), 400, 403, 404),
)
def get_access(caller: Annotated[Caller, Depends(require("account/read"))]) -> AccessView:
    if caller.role is None:  # an account action always resolved one; never answer without it
        raise Forbidden(denial_message("account/read", None, caller.account_id))
    return AccessView(
        accountId=caller.account_id,
        userId=caller.user_id,
        role=caller.role.value,
        actions=list(actions_of(caller.role)),
    )


@router.get(
    "/account/members",
    summary="The account's members and their roles, owners first",
    responses=_responses(200, _json(MembersView), 400, 403, 404),
)
def list_members(
    services: ServicesDep, caller: Annotated[Caller, Depends(require("members/read"))]
) -> MembersView:
    found = members.list_members(services, caller.account_id)
    return MembersView(accountId=caller.account_id, members=[member_view(m) for m in found])


@router.get(
    "/account/members/<userId>",
    summary="One member of the account",
    responses=_responses(200, _json(MemberView), 400, 403, 404),
)
def get_member(
    userId: UserId, services: ServicesDep, caller: Annotated[Caller, Depends(require("members/read"))]
) -> MemberView:
    return member_view(members.get_member(services, caller.account_id, userId))


@router.put(
    "/account/members/<userId>",
    summary="Give a user a role in the account (adds them, or changes their role)",
    description=(
        "The user id is the user's Cognito `sub` (locally, the id the token was minted for). "
        "Demoting the last owner is 409 `Conflict`."
    ),
    responses=_responses(200, _json(MemberView), 400, 403, 404, 409, 413),
)
def put_member(
    userId: UserId,
    body: Annotated[MemberBody, Body()],
    services: ServicesDep,
    caller: Annotated[Caller, Depends(require("members/write"))],
) -> MemberView:
    change = members.MemberChange(
        user_id=userId, role=parse_member_role(body.role), by=caller.user_id, at=services.clock()
    )
    return member_view(members.set_member_role(services, caller.account_id, change))


@router.delete(
    "/account/members/<userId>",
    summary="Remove a member from the account (not its last owner)",
    responses=_responses(204, None, 400, 403, 404, 409),
)
def delete_member(
    userId: UserId, services: ServicesDep, caller: Annotated[Caller, Depends(require("members/delete"))]
) -> Response[Any]:
    change = members.MemberChange(user_id=userId, role=None, by=caller.user_id, at=services.clock())
    members.remove_member(services, caller.account_id, change)
    return Response(204, None, "")
