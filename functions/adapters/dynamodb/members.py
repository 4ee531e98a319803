"""An account's members, on the account's own item in the accounts table.

The item carries ``members`` (a map: user id → ``{"role", "updatedAt", "updatedBy"}``) and
``membersVersion`` (the number of changes). Both are absent until the members are first changed:
then the account's founder is its only member, an owner (``functions.domain.roles.AccountMembers``).
Keeping members on the account's item makes a request's membership one strongly consistent GetItem
(projected to the caller's entry) and the last-owner rule a single conditional write: a change
rewrites the map only while ``membersVersion`` is the one it was computed from.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from functions.adapters.dynamodb.base import StoreBase, store_errors
from functions.adapters.dynamodb.items import deserialize_item, serialize_item, serialize_value
from functions.domain.roles import AccountMembers, Member, Role
from functions.domain.timefmt import from_sortable, to_sortable


def _member_from_item(user_id: str, item: Mapping[str, Any]) -> Member:
    updated = item.get("updatedAt")
    return Member(
        user_id=user_id,
        role=Role(item["role"]),
        updated_at=from_sortable(updated) if updated else None,
        updated_by=item.get("updatedBy"),
    )


def _member_to_item(member: Member) -> dict[str, Any]:
    values = {
        "role": member.role.value,
        "updatedAt": to_sortable(member.updated_at) if member.updated_at else None,
        "updatedBy": member.updated_by,
    }
    return {k: v for k, v in values.items() if v is not None}


class MemberRecords(StoreBase):
    """Members of accounts (``MemberRepository``)."""

    def get_members(self, account_id: str, user_id: str | None = None) -> AccountMembers:
        """The account's members, read strongly consistent; with ``user_id``, only that user's entry
        is read (the per-request check: its read units do not grow with the member map's size).

        Raises ``DependencyFailed`` when DynamoDB fails.
        """
        kwargs: dict[str, Any] = {
            "TableName": self._accounts,
            "Key": serialize_item({"accountId": account_id}),
            "ConsistentRead": True,
        }
        if user_id is None:
            kwargs["ProjectionExpression"] = "accountId, membersVersion, members"
        else:
            kwargs["ProjectionExpression"] = "accountId, membersVersion, members.#u"
            kwargs["ExpressionAttributeNames"] = {"#u": user_id}
        with store_errors("GetItem"):
            response = self._db.get_item(**kwargs)
        raw = response.get("Item")
        if not raw:
            return AccountMembers(account_id=account_id, exists=False, members=None)
        item = deserialize_item(raw)
        if "membersVersion" not in item:
            return AccountMembers(account_id=account_id, exists=True, members=None)
        members = {
            user: _member_from_item(user, entry) for user, entry in (item.get("members") or {}).items()
        }
        return AccountMembers(
            account_id=account_id, exists=True, members=members, version=int(item["membersVersion"])
        )

    def save_members(self, account_id: str, members: Mapping[str, Member], expected_version: int) -> None:
        """Replace the account's member map, only while its ``membersVersion`` is ``expected_version``
        (0: never changed) and the account exists.

        Raises ``ConditionFailed`` when another change came first or the account is gone (re-read),
        ``DependencyFailed`` when DynamoDB fails.
        """
        condition = "attribute_exists(accountId) AND " + (
            "attribute_not_exists(membersVersion)" if expected_version == 0 else "membersVersion = :expected"
        )
        values = {
            ":members": serialize_value({u: _member_to_item(m) for u, m in members.items()}),
            ":next": serialize_value(expected_version + 1),
        }
        if expected_version:
            values[":expected"] = serialize_value(expected_version)
        with store_errors("UpdateItem"):
            self._db.update_item(
                TableName=self._accounts,
                Key=serialize_item({"accountId": account_id}),
                UpdateExpression="SET members = :members, membersVersion = :next",
                ConditionExpression=condition,
                ExpressionAttributeValues=values,
            )
