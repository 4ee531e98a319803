"""Roles and actions: who may do what, in one table.

A token names a **user**; a request acts in one **account** (the ``X-Account-Id`` header, else the
user's own account, whose id is the user's id). In that account the user has at most one built-in
role; the service ``admin`` role comes from the token (the Cognito ``admin`` group) and holds every
action in every account. Every route checks exactly one named action (``jobs/write``); the table
below says which roles hold it. The names follow Azure RBAC's ``<resource>/<verb>`` and
``<resource>/<operation>/action`` forms (Azure ML's ``computes/start/action``, in the
Microsoft.MachineLearningServices resource provider operations), and the built-in roles follow
Azure's Reader, Contributor and Owner: each holds everything the one before it holds.

No boto3 and no clock here: ``GET /roles`` serves this table as it is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum


class Role(StrEnum):
    """A role: the three an account grants its members, and the service's ``admin``."""

    READER = "reader"
    CONTRIBUTOR = "contributor"
    OWNER = "owner"
    ADMIN = "admin"


# The roles a member of an account can be given (admin is the service's, given by the token).
MEMBER_ROLES: tuple[Role, ...] = (Role.READER, Role.CONTRIBUTOR, Role.OWNER)

ROLE_DESCRIPTIONS: Mapping[Role, str] = {
    Role.READER: "Reads the account's jobs, logs, results, usage, quotas, members and dedicated compute.",
    Role.CONTRIBUTOR: "A reader who also submits, aborts and deletes jobs and starts, stops and restarts "
    "dedicated compute.",
    Role.OWNER: "A contributor who also manages members, contacts, dedicated compute and its schedules.",
    Role.ADMIN: "The service's operators: every action in every account, and the admin routes.",
}


class Scope(StrEnum):
    """Where an action applies.

    ``public``: no token (``/health``); ``service``: any valid token, no account (the catalog);
    ``account``: the account the request acts in (membership decides); ``admin``: the service admin only.
    """

    PUBLIC = "public"
    SERVICE = "service"
    ACCOUNT = "account"
    ADMIN = "admin"


@dataclass(frozen=True, slots=True)
class Action:
    """A named permission: ``name`` (``jobs/write``), where it applies, the least role that holds it
    (every role above holds it too; None for public and service actions, which every token holds),
    and what it allows, for people."""

    name: str
    scope: Scope
    least_role: Role | None
    description: str


_ORDER = {Role.READER: 0, Role.CONTRIBUTOR: 1, Role.OWNER: 2, Role.ADMIN: 3}

_R, _C, _O, _A = Role.READER, Role.CONTRIBUTOR, Role.OWNER, Role.ADMIN
_ACC, _ADM = Scope.ACCOUNT, Scope.ADMIN

# THE table. A route names one of these; `GET /roles` serves it; docs/http-api.md lists each route's action.
ACTIONS: Mapping[str, Action] = {
    a.name: a
    for a in (
        Action("health/read", Scope.PUBLIC, None, "Ask whether the service takes jobs (no token)."),
        Action(
            "service/read",
            Scope.SERVICE,
            None,
            "Read the catalog: machine classes, runtime, estimates, the roles table, the API document.",
        ),
        Action("account/read", _ACC, _R, "Read the account: balance, contacts, the caller's role."),
        Action("usage/read", _ACC, _R, "Read the account's ledger (usage)."),
        Action("quotas/read", _ACC, _R, "Read the account's quotas and their use."),
        Action("jobs/read", _ACC, _R, "Read jobs, their children, results, logs, outputs and previews."),
        Action("jobs/write", _ACC, _C, "Submit jobs and upload their inputs."),
        Action("jobs/abort/action", _ACC, _C, "Abort jobs that are not final."),
        Action("jobs/delete", _ACC, _C, "Delete a final job's inputs, outputs and log."),
        Action("computes/read", _ACC, _R, "Read the account's dedicated compute."),
        Action("computes/start/action", _ACC, _C, "Start dedicated compute."),
        Action("computes/stop/action", _ACC, _C, "Stop dedicated compute."),
        Action("computes/restart/action", _ACC, _C, "Restart dedicated compute."),
        Action("computes/write", _ACC, _O, "Create dedicated compute."),
        Action("computes/delete", _ACC, _O, "Delete dedicated compute."),
        Action("computes/updateSchedules/action", _ACC, _O, "Set dedicated compute's schedules."),
        Action("environments/read", _ACC, _R, "Read the account's environments and their build logs."),
        Action("environments/write", _ACC, _C, "Create and delete environments."),
        Action("members/read", _ACC, _R, "Read the account's members and their roles."),
        Action("members/write", _ACC, _O, "Add members and change their roles."),
        Action("members/delete", _ACC, _O, "Remove members."),
        Action("contacts/write", _ACC, _O, "Set the account's email, phone and webhook."),
        Action("credits/grant/action", _ADM, _A, "Grant credits to any account."),
        Action("accounts/create/action", _ADM, _A, "Create accounts and their tokens (local stack)."),
        Action("quotas/write", _ADM, _A, "Set any account's quotas."),
        Action("fleet/read", _ADM, _A, "Read machine classes' zones, capacity and state."),
        Action("fleet/write", _ADM, _A, "Disable and enable classes in zones, set their capacity."),
        Action("audit/read", _ADM, _A, "Read the audit log of admin actions."),
        Action("batchEvents/read", _ADM, _A, "Read the Batch events the local executor emitted (local)."),
        Action("batchEvents/replay/action", _ADM, _A, "Deliver Batch events again (local stack)."),
    )
}


def action(name: str) -> Action:
    """The action called ``name``. Raises ``KeyError`` for a name the table does not have (a route
    that names an unknown action fails at import, not at request time)."""
    return ACTIONS[name]


def holds(role: Role | None, name: str) -> bool:
    """True when ``role`` holds the action ``name``: public and service actions are held by every
    caller, account and admin actions by ``least_role`` and every role above it.

    Raises ``KeyError`` for an unknown action.
    """
    wanted = ACTIONS[name]
    if wanted.least_role is None:
        return True
    return role is not None and _ORDER[role] >= _ORDER[wanted.least_role]


def actions_of(role: Role) -> tuple[str, ...]:
    """Every action ``role`` holds, in the table's order."""
    return tuple(name for name in ACTIONS if holds(role, name))


def roles_holding(name: str) -> tuple[Role, ...]:
    """The roles that hold action ``name``, least first. Raises ``KeyError`` for an unknown action."""
    return tuple(role for role in Role if holds(role, name))


def parse_member_role(value: str) -> Role:
    """``value`` as a role a member can be given. Raises ``ValueError`` for ``admin`` or an unknown name."""
    role = Role(value)
    if role not in MEMBER_ROLES:
        raise ValueError(f"{value} is the service's role, not one an account gives")
    return role


def denial_message(name: str, role: Role | None, account_id: str | None) -> str:
    """The sentence of a 403: which action was missing and what the caller has.

    ``role`` is the caller's role in ``account_id`` (None where the action is the admin's alone and the
    caller is no admin: no account was read).
    """
    wanted = ACTIONS[name]
    if wanted.scope is Scope.ADMIN:
        return (
            f"This request needs {name}, which only the service admin role has; your token is not an admin's."
        )
    holders = ", ".join(r.value for r in roles_holding(name))
    return (
        f"This request needs {name}; your role {role.value if role else 'none'} in account {account_id} "
        f"does not have it (roles that do: {holders})."
    )


# -- members -------------------------------------------------------------------------------------------
MAX_MEMBERS = 500
"""Members an account holds at most: the member map lives on the account's item (DynamoDB's 400 KB
item limit; 500 members of ~150 bytes is under 80 KB)."""


@dataclass(frozen=True, slots=True)
class Member:
    """One user's membership of an account: the role, and who set it when (None for an account's
    founder, who is its owner from the start)."""

    user_id: str
    role: Role
    updated_at: datetime | None = None
    updated_by: str | None = None


@dataclass(frozen=True, slots=True)
class AccountMembers:
    """An account's members as stored.

    ``exists`` False: no such account. ``members`` None: the members were never changed, so the
    account's founder (the user whose id is the account's id, the Cognito ``sub`` that made it) is its
    only member, an owner. ``version`` counts the changes (0 before the first), the condition of the
    next write.
    """

    account_id: str
    exists: bool
    members: Mapping[str, Member] | None
    version: int = 0

    def effective(self) -> dict[str, Member]:
        """The members, the founder's implicit ownership written out; {} for no account."""
        if not self.exists:
            return {}
        if self.members is None:
            return {self.account_id: Member(self.account_id, Role.OWNER)}
        return dict(self.members)


def role_in_account(stored: AccountMembers, user_id: str) -> Role | None:
    """The role of ``user_id`` in the account, or None when they are no member.

    An account not created yet is its founder's: a first request of a new user (a new Cognito user)
    acts in their own account as its owner, and the account is made by the routes that need it (as
    version 1 did).
    """
    if not stored.exists:
        return Role.OWNER if user_id == stored.account_id else None
    member = stored.effective().get(user_id)
    return member.role if member else None


def owners(members: Mapping[str, Member]) -> list[str]:
    """The user ids of the owners among ``members``, sorted."""
    return sorted(u for u, m in members.items() if m.role is Role.OWNER)
