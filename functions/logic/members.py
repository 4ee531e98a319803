"""Who acts in which account with which role, and the account's member list.

A request's account is the ``X-Account-Id`` header's, else the user's own (its id is the user's id).
``resolve_role`` reads the user's entry of that account once (one strongly consistent GetItem); the
routes over members change the account's member map with a conditional write, re-read and retried
when another change came first, so two owners demoting each other at once cannot leave none.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, replace
from datetime import datetime

from aws_lambda_powertools import Logger

from functions.domain.errors import ConditionFailed, Conflict, DependencyFailed, NotFound, ValidationFailed
from functions.domain.roles import MAX_MEMBERS, AccountMembers, Member, Role, owners, role_in_account
from functions.logic.queries import get_or_create_account
from functions.ports import Services

logger = Logger(child=True)

MAX_MEMBER_WRITE_ATTEMPTS = 10


def no_such_account(account_id: str) -> NotFound:
    """The 404 of an account the caller is no member of: the same whether it exists or not, so a
    token cannot probe which accounts exist (tenant isolation, as another account's job is 404)."""
    return NotFound(f"No account {account_id} for this user; check X-Account-Id.", field="X-Account-Id")


def resolve_role(services: Services, account_id: str, user_id: str, admin: bool) -> Role:
    """The role ``user_id`` acts with in ``account_id``.

    The service admin acts as ``admin`` in every existing account (and in their own without a
    read); anyone else has their member role, read with one GetItem of their entry.

    Raises
    ------
    NotFound
        The user is no member of the account, or it does not exist (the same answer).
    """
    if admin:
        if account_id != user_id and not services.store.get_members(account_id, user_id).exists:
            raise no_such_account(account_id)
        return Role.ADMIN
    role = role_in_account(services.store.get_members(account_id, user_id), user_id)
    if role is None:
        raise no_such_account(account_id)
    return role


def list_members(services: Services, account_id: str) -> list[Member]:
    """``GET /account/members``: the members, owners first, then by user id."""
    members = services.store.get_members(account_id).effective()
    if not members:  # the founder's first request, before the account was made
        members = {account_id: Member(account_id, Role.OWNER)}
    order = {Role.OWNER: 0, Role.CONTRIBUTOR: 1, Role.READER: 2, Role.ADMIN: 3}
    return sorted(members.values(), key=lambda m: (order[m.role], m.user_id))


def get_member(services: Services, account_id: str, user_id: str) -> Member:
    """``GET /account/members/{userId}``. Raises ``NotFound`` when the user is no member."""
    for member in list_members(services, account_id):
        if member.user_id == user_id:
            return member
    raise NotFound(f"{user_id} is no member of account {account_id}.", field="userId")


@dataclass(frozen=True, slots=True)
class MemberChange:
    """What a member route asks: ``role`` for ``user_id`` (None removes them), by ``by`` at ``at``."""

    user_id: str
    role: Role | None
    by: str
    at: datetime


def _apply(stored: AccountMembers, change: MemberChange) -> dict[str, Member]:
    """The member map after ``change``.

    Raises ``NotFound`` when removing a user who is no member, ``Conflict`` when the change would leave
    the account without an owner, ``ValidationFailed`` when it would hold more than ``MAX_MEMBERS``.
    """
    members = stored.effective()
    current = members.get(change.user_id)
    if change.role is None and current is None:
        raise NotFound(f"{change.user_id} is no member of account {stored.account_id}.", field="userId")
    demoted = current is not None and current.role is Role.OWNER and change.role is not Role.OWNER
    if demoted and owners(members) == [change.user_id]:
        raise Conflict(
            f"{change.user_id} is the last owner of account {stored.account_id}; make another member "
            "owner first.",
            field="userId",
        )
    if change.role is None:
        del members[change.user_id]
        return members
    if current is None and len(members) >= MAX_MEMBERS:
        raise ValidationFailed(
            f"Account {stored.account_id} has {len(members)} members, the most an account holds.",
            field="userId",
        )
    members[change.user_id] = Member(change.user_id, change.role, updated_at=change.at, updated_by=change.by)
    return members


def set_member_role(services: Services, account_id: str, change: MemberChange) -> Member:
    """``PUT /account/members/{userId}``: give ``change.user_id`` the role ``change.role`` (adds them,
    or changes their role; the same role again records who set it and when). An owner may demote
    themselves while another owner remains.

    Raises
    ------
    Conflict
        The change would leave the account without an owner.
    ValidationFailed
        ``change.role`` is None, or the account holds ``MAX_MEMBERS`` already.
    DependencyFailed
        The members kept changing under the write (retried first), or DynamoDB failed.
    """
    if change.role is None:
        raise ValidationFailed("role is required.", field="role")
    return _change(services, account_id, change)[change.user_id]


def remove_member(services: Services, account_id: str, change: MemberChange) -> None:
    """``DELETE /account/members/{userId}`` (``change.role`` is ignored: the user is removed).

    Raises
    ------
    NotFound
        The user is no member.
    Conflict
        They are the account's last owner.
    DependencyFailed
        The members kept changing under the write (retried first), or DynamoDB failed.
    """
    _change(services, account_id, replace(change, role=None))


def _change(services: Services, account_id: str, change: MemberChange) -> dict[str, Member]:
    """Apply ``change`` with a conditional write, re-read and retried when another change came first;
    the account is made first when this is its founder's first request. Returns the members after."""
    get_or_create_account(services, account_id, None, ("user",), change.at)
    for _ in range(MAX_MEMBER_WRITE_ATTEMPTS):
        stored = services.store.get_members(account_id)
        members = _apply(stored, change)
        try:
            services.store.save_members(account_id, members, stored.version)
        except ConditionFailed:
            time.sleep(random.uniform(0, 0.02))  # noqa: S311 - jitter, not cryptography
            continue
        logger.info(
            "members changed",
            account_id=account_id,
            user_id=change.user_id,
            role=change.role.value if change.role else None,
            by=change.by,
        )
        return members
    raise DependencyFailed(f"the members of {account_id} kept changing; nothing was changed")
