"""The role table: each built-in role holds what the one before holds and more, the actions the
issue names sit with the roles it names, and the admin's own actions are the admin's alone."""

from __future__ import annotations

import pytest

from functions.domain.roles import (
    ACTIONS,
    MEMBER_ROLES,
    AccountMembers,
    Member,
    Role,
    Scope,
    action,
    actions_of,
    denial_message,
    holds,
    parse_member_role,
    role_in_account,
    roles_holding,
)

READER_ACTIONS = {
    "jobs/read",
    "usage/read",
    "account/read",
    "members/read",
    "computes/read",
    "quotas/read",
    "environments/read",
}
CONTRIBUTOR_ADDS = {
    "jobs/write",
    "jobs/abort/action",
    "jobs/delete",
    "computes/start/action",
    "computes/stop/action",
    "computes/restart/action",
    "environments/write",
}
OWNER_ADDS = {
    "members/write",
    "members/delete",
    "contacts/write",
    "computes/write",
    "computes/delete",
    "computes/updateSchedules/action",
}
ADMIN_ONLY = {
    "credits/grant/action",
    "accounts/create/action",
    "quotas/write",
    "fleet/read",
    "fleet/write",
    "audit/read",
    "batchEvents/read",
    "batchEvents/replay/action",
}
EVERYONE = {"health/read", "service/read"}


def test_each_role_holds_exactly_what_the_issue_gives_it() -> None:
    assert set(actions_of(Role.READER)) == EVERYONE | READER_ACTIONS
    assert set(actions_of(Role.CONTRIBUTOR)) == EVERYONE | READER_ACTIONS | CONTRIBUTOR_ADDS
    assert set(actions_of(Role.OWNER)) == EVERYONE | READER_ACTIONS | CONTRIBUTOR_ADDS | OWNER_ADDS
    assert set(actions_of(Role.ADMIN)) == set(ACTIONS)
    assert {a.name for a in ACTIONS.values() if a.scope is Scope.ADMIN} == ADMIN_ONLY


@pytest.mark.parametrize("name", sorted(ADMIN_ONLY))
def test_admin_actions_are_held_by_admin_alone(name: str) -> None:
    assert roles_holding(name) == (Role.ADMIN,)
    assert not holds(None, name)


@pytest.mark.parametrize("name", sorted(EVERYONE))
def test_public_and_service_actions_need_no_role(name: str) -> None:
    assert holds(None, name)
    assert roles_holding(name) == tuple(Role)


def test_roles_nest() -> None:
    for lower, higher in zip(tuple(Role), tuple(Role)[1:], strict=False):
        assert set(actions_of(lower)) < set(actions_of(higher)), (lower, higher)


def test_an_unknown_action_fails_loudly() -> None:
    with pytest.raises(KeyError):
        action("jobs/readd")
    with pytest.raises(KeyError):
        holds(Role.OWNER, "jobs/readd")


def test_member_roles_exclude_admin() -> None:
    assert MEMBER_ROLES == (Role.READER, Role.CONTRIBUTOR, Role.OWNER)
    assert parse_member_role("contributor") is Role.CONTRIBUTOR
    with pytest.raises(ValueError, match="service"):
        parse_member_role("admin")
    with pytest.raises(ValueError, match="Owner"):
        parse_member_role("Owner")


def test_denial_names_the_action_the_role_and_the_account() -> None:
    assert denial_message("jobs/write", Role.READER, "lab") == (
        "This request needs jobs/write; your role reader in account lab does not have it "
        "(roles that do: contributor, owner, admin)."
    )
    assert "credits/grant/action" in denial_message("credits/grant/action", None, None)
    assert "only the service admin" in denial_message("credits/grant/action", None, None)


def test_role_in_account_founder_members_and_strangers() -> None:
    # an account not made yet is its founder's (a new Cognito user's first request)
    assert role_in_account(AccountMembers("u1", exists=False, members=None), "u1") is Role.OWNER
    assert role_in_account(AccountMembers("u1", exists=False, members=None), "u2") is None
    # members never changed: the founder alone, an owner
    never = AccountMembers("lab", exists=True, members=None)
    assert role_in_account(never, "lab") is Role.OWNER
    assert role_in_account(never, "rita") is None
    assert never.effective() == {"lab": Member("lab", Role.OWNER)}
    # once changed, the stored map is the whole truth: a removed founder is no member
    changed = AccountMembers(
        "lab",
        exists=True,
        members={"owen": Member("owen", Role.OWNER), "rita": Member("rita", Role.READER)},
        version=3,
    )
    assert role_in_account(changed, "lab") is None
    assert role_in_account(changed, "rita") is Role.READER
