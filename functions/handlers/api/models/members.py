"""Models of the members and roles routes: an account's members, a role to give, the role table."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from functions.domain.roles import (
    ACTIONS,
    MEMBER_ROLES,
    ROLE_DESCRIPTIONS,
    Member,
    Role,
    actions_of,
    roles_holding,
)
from functions.domain.timefmt import to_api_time
from functions.handlers.api.models.common import ApiModel

MemberRoleName = Literal["reader", "contributor", "owner"]
RoleName = Literal["reader", "contributor", "owner", "admin"]


class MemberView(ApiModel):
    """One member of an account: the user, their role, who set it when (null for the founder)."""

    userId: str
    role: MemberRoleName
    updatedAt: str | None
    updatedBy: str | None


class AccessView(ApiModel):
    """``GET /account/access``: who the caller is in the account the request acts in."""

    accountId: str
    userId: str
    role: RoleName
    actions: list[str] = Field(description="Every action the role holds (GET /roles has the table)")


class MembersView(ApiModel):
    """``GET /account/members``: the account's members, owners first."""

    accountId: str
    members: list[MemberView]


class MemberBody(ApiModel):
    """``PUT /account/members/{userId}`` body: the role to give (the service's ``admin`` is no account's)."""

    model_config = ConfigDict(extra="forbid")

    role: MemberRoleName = Field(description="reader, contributor or owner (GET /roles lists their actions)")


class RoleView(ApiModel):
    """A role and every action it holds."""

    name: RoleName
    description: str
    assignable: bool = Field(description="True for the roles an owner gives members; admin is the service's")
    actions: list[str]


class ActionView(ApiModel):
    """An action: where it applies (public, service, account, admin), the roles that hold it."""

    name: str
    scope: Literal["public", "service", "account", "admin"]
    description: str
    roles: list[RoleName]


class RolesView(ApiModel):
    """``GET /roles``: the one action → role table every route is checked against."""

    roles: list[RoleView]
    actions: list[ActionView]


def member_view(member: Member) -> MemberView:
    """Map a member."""
    return MemberView(
        userId=member.user_id,
        role=member.role.value,  # type: ignore[arg-type]
        updatedAt=to_api_time(member.updated_at),
        updatedBy=member.updated_by,
    )


def roles_view() -> RolesView:
    """The role table of ``functions.domain.roles`` as the API shows it."""
    return RolesView(
        roles=[
            RoleView(
                name=role.value,
                description=ROLE_DESCRIPTIONS[role],
                assignable=role in MEMBER_ROLES,
                actions=list(actions_of(role)),
            )
            for role in Role
        ],
        actions=[
            ActionView(
                name=a.name,
                scope=a.scope.value,
                description=a.description,
                roles=[r.value for r in roles_holding(a.name)],
            )
            for a in ACTIONS.values()
        ],
    )
