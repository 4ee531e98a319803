"""The member changes of ``functions.logic.members`` on an in-memory store: whatever owners ask in
whatever order, an account always keeps an owner, and a write computed from a stale read is re-done
from a fresh one (the last-owner rule is checked against what is stored, not what was read first)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.bootstrap import inline_dispatch
from functions.domain.errors import ConditionFailed, Conflict, NotFound
from functions.domain.jobs import Account
from functions.domain.roles import AccountMembers, Member, Role, owners
from functions.logic import members
from functions.ports import Services

NOW = datetime(2026, 12, 1, 7, 0, tzinfo=UTC)
USERS = ("lab", "owen", "cora", "rita")


@dataclass
class MemoryStore:
    """The accounts and member maps of ``JobRepository``, in memory, with the same version rule.

    ``interleave`` maps runs before the next ``save_members``: another writer's change landing
    between a read and the write computed from it."""

    accounts: dict[str, Account] = field(default_factory=dict)
    maps: dict[str, tuple[dict[str, Member], int]] = field(default_factory=dict)
    interleave: list[dict[str, Member]] = field(default_factory=list)
    saves: int = 0

    def get_account(self, account_id: str) -> Account | None:
        return self.accounts.get(account_id)

    def create_account(self, account: Account, now: datetime) -> Account:
        return self.accounts.setdefault(account.account_id, account)

    def get_members(self, account_id: str, user_id: str | None = None) -> AccountMembers:
        if account_id not in self.accounts:
            return AccountMembers(account_id, exists=False, members=None)
        stored = self.maps.get(account_id)
        if stored is None:
            return AccountMembers(account_id, exists=True, members=None)
        return AccountMembers(account_id, exists=True, members=dict(stored[0]), version=stored[1])

    def save_members(self, account_id: str, new: Mapping[str, Member], expected_version: int) -> None:
        self.saves += 1
        if self.interleave:
            self.maps[account_id] = (self.interleave.pop(0), self.maps.get(account_id, ({}, 0))[1] + 1)
        version = self.maps.get(account_id, ({}, 0))[1]
        if account_id not in self.accounts or version != expected_version:
            raise ConditionFailed("membersVersion moved")
        self.maps[account_id] = (dict(new), version + 1)


def _services(store: MemoryStore) -> Services:
    none = cast(Any, None)
    return Services(
        store=cast(Any, store),
        notifier=none,
        subscriptions=none,
        zones={},
        clock=lambda: NOW,
        events=none,
        dispatch=inline_dispatch(),
    )


def _apply(services: Services, user: str, role: Role | None) -> None:
    change = members.MemberChange(user_id=user, role=role, by="lab", at=NOW)
    if role is None:
        members.remove_member(services, "lab", change)
    else:
        members.set_member_role(services, "lab", change)


changes = st.lists(
    st.tuples(st.sampled_from(USERS), st.sampled_from([None, Role.READER, Role.CONTRIBUTOR, Role.OWNER])),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(changes)
def test_an_account_always_keeps_an_owner(sequence: list[tuple[str, Role | None]]) -> None:
    store = MemoryStore()
    store.create_account(Account("lab", Decimal(0)), NOW)
    services = _services(store)
    for user, role in sequence:
        before = store.get_members("lab").effective()
        try:
            _apply(services, user, role)
        except (Conflict, NotFound):
            # refused changes change nothing
            assert store.get_members("lab").effective() == before
            refused_last_owner = owners(before) == [user] and role is not Role.OWNER
            refused_absent = role is None and user not in before
            assert refused_last_owner or refused_absent
        after = store.get_members("lab").effective()
        assert owners(after), after
        if role is not None and user in after:
            assert after[user].role is role or owners(before) == [user]


def test_a_stale_read_is_redone_and_the_last_owner_kept() -> None:
    # Given lab and owen, both owners
    store = MemoryStore()
    store.create_account(Account("lab", Decimal(0)), NOW)
    services = _services(store)
    _apply(services, "owen", Role.OWNER)
    # When owen is removed while, between the read and the write, lab was removed by someone else
    store.interleave.append({"owen": Member("owen", Role.OWNER)})
    with pytest.raises(Conflict, match="last owner"):
        _apply(services, "owen", None)
    # Then the write computed from the stale read lost, the re-read saw owen alone, and refused
    assert store.get_members("lab").effective() == {"owen": Member("owen", Role.OWNER)}
    assert store.saves == 2
