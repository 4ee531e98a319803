"""Accounts and the ledger: money moves only inside one ``TransactWriteItems`` with a
deterministic ledger id (``charge#<jobId>``, ``grant#...``) and an exact-balance condition; the
settlement adds the job's final transition, conditional on the position it was computed from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from functions.adapters.dynamodb.base import QUEUED_NONE, StoreBase, cancelled_by, logger, store_errors
from functions.adapters.dynamodb.items import (
    account_from_item,
    deserialize_item,
    entry_from_item,
    entry_to_item,
    serialize_item,
    serialize_value,
)
from functions.adapters.dynamodb.page_tokens import decode_token, encode_token
from functions.domain.credits import Charge, quantize_credits
from functions.domain.errors import ConditionFailed, DependencyFailed, RecordMissing
from functions.domain.jobs import Account, Job, LedgerEntry, LedgerKind, Transition
from functions.domain.timefmt import to_sortable

if TYPE_CHECKING:  # the stubs are a dev dependency; the Lambda runtime has no need of them
    from mypy_boto3_dynamodb.type_defs import TransactWriteItemTypeDef


def _queued_condition(item: TransactWriteItemTypeDef) -> bool:
    """True for the release item that carries the nothing-queued condition (``QUEUED_NONE``)."""
    update = item.get("Update")
    return update is not None and QUEUED_NONE in str(update.get("ConditionExpression", ""))


class AccountsAndLedger(StoreBase):
    """The account and ledger half of ``JobRepository``, and the settlement of a job."""

    def settle(
        self,
        transition: Transition,
        charge: Charge,
        entry: LedgerEntry | None,
        now: datetime,
        claims: frozenset[str] = frozenset(),
    ) -> bool:
        """The final transition, the ledger entry and the balance change in one transaction; the
        notification keys ``claims`` are claimed in the job's update (added to ``sentNotifications``).

        The job's units in use are given back in it too (``release_items``), on the condition that
        the account has no units queued: when that holds, the write itself proves no held job waits
        for what it gave back (a job held later reads the counters after its hold, and sees the
        release), and the caller need not look. When units are queued, the transaction is written
        again without that condition.

        Returns
        -------
        bool
            False when the release proved nothing of the account was queued as it gave its units
            back; True when held jobs may wait for them (or the job held none in use).

        Raises ``RecordMissing`` when the job is gone, ``ConditionFailed`` on any other lost race.
        """
        final = replace(transition, after=replace(transition.after, credits_spent=charge.credits))
        update = self._transition_update(final, now)
        if claims:
            update["UpdateExpression"] += " ADD #sentNotifications :claims DELETE #retryNotifications :claims"
            update["ExpressionAttributeNames"] = {
                **update["ExpressionAttributeNames"],
                "#sentNotifications": "sentNotifications",
                "#retryNotifications": "retryNotifications",
            }
            update["ExpressionAttributeValues"] = {
                **update["ExpressionAttributeValues"],
                ":claims": serialize_value(set(claims)),
            }
        items: list[TransactWriteItemTypeDef] = [{"Update": update}]
        if entry is not None:
            items += self._charge_items(entry)
        # The job's quota, given back as it ends; while nothing is queued, says so by its condition.
        release = self.release_items(transition.before, unless_queued=True)
        quiet = next((len(items) + i for i, item in enumerate(release) if _queued_condition(item)), None)
        try:
            self._transact(items + release, transition.after.job_id, self._missing)
        except ConditionFailed as exc:
            if quiet is None or cancelled_by(exc) != {quiet}:
                raise
            # Units are queued: give these back unconditionally; the caller admits what now fits.
            self._transact(
                items + self.release_items(transition.before), transition.after.job_id, self._missing
            )
            return True
        return quiet is None

    def _transact(
        self, items: list[TransactWriteItemTypeDef], job_id: str, missing: Callable[[ConditionFailed], bool]
    ) -> None:
        """Write ``items`` in one ``TransactWriteItems``. Raises ``RecordMissing`` (job ``job_id``)
        when ``missing`` says the cancellation was that job's absence, ``ConditionFailed`` on any
        other lost race, ``DependencyFailed`` when DynamoDB fails."""
        try:
            with store_errors("TransactWriteItems"):
                self._db.transact_write_items(TransactItems=items)
        except ConditionFailed as exc:
            if missing(exc):
                raise RecordMissing(f"Job {job_id} no longer exists.") from None
            raise

    def _charge_items(self, entry: LedgerEntry) -> list[TransactWriteItemTypeDef]:
        """The transaction items that record a charge: its ledger entry, put only if absent (its id is
        deterministic, so a replay cancels the transaction), and, for positive credits, the balance
        change from ``balance_after + credits`` to ``balance_after``."""
        items: list[TransactWriteItemTypeDef] = [
            {
                "Put": {
                    "TableName": self._ledger,
                    "Item": serialize_item(entry_to_item(entry)),
                    "ConditionExpression": "attribute_not_exists(entryId)",
                }
            }
        ]
        if entry.credits > 0:
            items.append(self._balance_change(entry, quantize_credits(entry.balance_after + entry.credits)))
        return items

    def _balance_change(self, entry: LedgerEntry, before: Decimal) -> TransactWriteItemTypeDef:
        """The transaction item that sets the account's balance to ``entry.balance_after`` (credits)
        only while it is exactly ``before``: a concurrent change cancels the whole transaction."""
        return {
            "Update": {
                "TableName": self._accounts,
                "Key": serialize_item({"accountId": entry.account_id}),
                "UpdateExpression": "SET creditBalance = :after",
                "ConditionExpression": "attribute_exists(accountId) AND creditBalance = :before",
                "ExpressionAttributeValues": {
                    ":after": serialize_value(entry.balance_after),
                    ":before": serialize_value(before),
                },
            }
        }

    def get_job_and_account(self, job_id: str, account_id: str) -> tuple[Job | None, Account | None]:
        """The job (None when absent or past its TTL) and the account (None when absent), read
        strongly consistent in one BatchGetItem. Raises ``UnreadableRecord`` for a job item that is
        not a whole job."""
        request: dict[str, Any] = {
            self._jobs: {"Keys": [serialize_item({"jobId": job_id})], "ConsistentRead": True},
            self._accounts: {"Keys": [serialize_item({"accountId": account_id})], "ConsistentRead": True},
        }
        found = self._batch_get(request)
        job = self._live_job(found[self._jobs][0], "get") if found[self._jobs] else None
        account = account_from_item(found[self._accounts][0]) if found[self._accounts] else None
        return job, account

    def get_account(self, account_id: str) -> Account | None:
        """The account, read strongly consistent, or None."""
        with store_errors("GetItem"):
            response = self._db.get_item(
                TableName=self._accounts, Key=serialize_item({"accountId": account_id}), ConsistentRead=True
            )
        item = response.get("Item")
        return account_from_item(deserialize_item(item)) if item else None

    def create_account(self, account: Account, now: datetime) -> Account:
        """Create the account if absent, with a ``grant#initial`` entry for a positive balance."""
        balance = quantize_credits(account.credit_balance)
        values = {
            "accountId": account.account_id,
            "creditBalance": balance,
            "email": account.email,
            "phone": account.phone,
            "roles": list(account.roles),
            "createdAt": to_sortable(now),
        }
        items: list[TransactWriteItemTypeDef] = [
            {
                "Put": {
                    "TableName": self._accounts,
                    "Item": serialize_item(values),
                    "ConditionExpression": "attribute_not_exists(accountId)",
                }
            }
        ]
        if balance > 0:
            grant = LedgerEntry(
                entry_id="grant#initial",
                account_id=account.account_id,
                at=now,
                kind=LedgerKind.GRANT,
                credits=balance,
                balance_after=balance,
                reason="Initial credits",
            )
            items.append({"Put": {"TableName": self._ledger, "Item": serialize_item(entry_to_item(grant))}})
        try:
            with store_errors("TransactWriteItems"):
                self._db.transact_write_items(TransactItems=items)
        except ConditionFailed:
            logger.debug("account exists", account_id=account.account_id)
        stored = self.get_account(account.account_id)
        if stored is None:
            raise DependencyFailed("The account could not be created; try again.")
        return stored

    def take_sms_allowance(self, account_id: str, hour: str, limit: int) -> bool:
        """Count one SMS against the account's ``limit`` for the clock hour ``hour``
        (``2026-11-29T17``); False, counting nothing, once ``limit`` were sent in that hour."""
        key = serialize_item({"accountId": account_id})
        values = {":h": serialize_value(hour), ":one": serialize_value(1), ":limit": serialize_value(limit)}
        if limit <= 0:
            return False
        try:
            # The hour's first SMS starts a new count.
            with store_errors("UpdateItem"):
                self._db.update_item(
                    TableName=self._accounts,
                    Key=key,
                    UpdateExpression="SET smsHour = :h, smsCount = :one",
                    ConditionExpression=(
                        "attribute_exists(accountId) AND (attribute_not_exists(smsHour) OR smsHour <> :h)"
                    ),
                    ExpressionAttributeValues={":h": values[":h"], ":one": values[":one"]},
                )
            return True
        except ConditionFailed:
            pass
        try:
            with store_errors("UpdateItem"):
                self._db.update_item(
                    TableName=self._accounts,
                    Key=key,
                    UpdateExpression="ADD smsCount :one",
                    ConditionExpression="smsHour = :h AND smsCount < :limit",
                    ExpressionAttributeValues=values,
                )
        except ConditionFailed:
            return False
        return True

    def update_contacts(self, account: Account) -> Account:
        """Store the account's contacts: email, phone, email subscription, webhook URL and secret
        (None removes each).

        Raises ``RecordMissing`` (a ``ConditionFailed``) when the account does not exist: the update
        never creates one.
        """
        account_id = account.account_id
        values = {
            "email": account.email,
            "phone": account.phone,
            "emailSubscription": account.email_subscription,
            "webhookUrl": account.webhook_url,
            "webhookSecret": account.webhook_secret,
        }
        sets = [f"{k} = :{k}" for k, v in values.items() if v is not None]
        removes = [k for k, v in values.items() if v is None]
        expression = ("SET " + ", ".join(sets) if sets else "") + (
            " REMOVE " + ", ".join(removes) if removes else ""
        )
        kwargs: dict[str, Any] = {
            "TableName": self._accounts,
            "Key": serialize_item({"accountId": account_id}),
            "UpdateExpression": expression.strip(),
            "ConditionExpression": "attribute_exists(accountId)",
            "ReturnValues": "ALL_NEW",
        }
        if sets:
            kwargs["ExpressionAttributeValues"] = {
                f":{k}": serialize_value(v) for k, v in values.items() if v is not None
            }
        kwargs["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        try:
            with store_errors("UpdateItem"):
                response = self._db.update_item(**kwargs)
        except ConditionFailed as exc:
            raise RecordMissing(f"No account {account_id}.") from exc
        return account_from_item(deserialize_item(response["Attributes"]))

    def grant_credits(self, entry: LedgerEntry) -> Account:
        """Add ``entry.credits`` to the balance with its ``grant`` entry, in one transaction.

        ``entry.balance_after`` must be the balance read before plus the credits: the write is
        conditional on that balance, so a concurrent change raises ``ConditionFailed`` (re-read, retry).
        """
        before = quantize_credits(entry.balance_after - entry.credits)
        with store_errors("TransactWriteItems"):
            self._db.transact_write_items(
                TransactItems=[
                    {
                        "Put": {
                            "TableName": self._ledger,
                            "Item": serialize_item(entry_to_item(entry)),
                            "ConditionExpression": "attribute_not_exists(entryId)",
                        }
                    },
                    self._balance_change(entry, before),
                ],
            )
        stored = self.get_account(entry.account_id)
        if stored is None:
            raise DependencyFailed("The account vanished during the grant.")
        return stored

    def get_ledger_entry(self, account_id: str, entry_id: str) -> LedgerEntry | None:
        """The entry ``entry_id`` of the account (one GetItem, strongly consistent), or None."""
        with store_errors("GetItem"):
            response = self._db.get_item(
                TableName=self._ledger,
                Key=serialize_item({"accountId": account_id, "entryId": entry_id}),
                ConsistentRead=True,
            )
        item = response.get("Item")
        return entry_from_item(deserialize_item(item)) if item else None

    def list_ledger(self, account_id: str, start: datetime | None, end: datetime | None) -> list[LedgerEntry]:
        """Entries with ``start <= at < end``, newest first, through the ``byTime`` index."""
        entries = [
            entry_from_item(item)
            for item in self._query(**_ledger_query(self._ledger, account_id, start, end))
        ]
        return [e for e in entries if end is None or e.at < end]

    def list_ledger_page(
        self,
        account_id: str,
        start: datetime | None,
        end: datetime | None,
        limit: int,
        next_token: str | None,
    ) -> tuple[list[LedgerEntry], str | None]:
        """At most ``limit`` entries with ``start <= at < end``, newest first (one Query of the
        ``byTime`` index), and the token of the next page: an entry at ``end`` exactly is left out
        after the read, so a page may hold fewer while its token is set.

        Raises ``ValidationFailed`` (``field="nextToken"``) for a token not issued for this account.
        """
        kwargs = _ledger_query(self._ledger, account_id, start, end)
        kwargs["Limit"] = limit
        if next_token:
            kwargs["ExclusiveStartKey"] = serialize_item(
                decode_token(next_token, _LEDGER_KEY, {"accountId": account_id})
            )
        with store_errors("Query"):
            page = self._db.query(**kwargs)
        entries = [entry_from_item(deserialize_item(item)) for item in page.get("Items", [])]
        last_key = page.get("LastEvaluatedKey")
        token = encode_token(deserialize_item(last_key)) if last_key else None
        return [e for e in entries if end is None or e.at < end], token


def _ledger_query(
    table: str, account_id: str, start: datetime | None, end: datetime | None
) -> dict[str, Any]:
    """The Query of an account's entries with ``start <= at <= end`` on ``byTime``, newest first."""
    return {
        "TableName": table,
        "IndexName": "byTime",
        "KeyConditionExpression": "accountId = :a AND #at BETWEEN :low AND :high",
        "ExpressionAttributeNames": {"#at": "at"},
        "ExpressionAttributeValues": {
            ":a": serialize_value(account_id),
            ":low": serialize_value(to_sortable(start) if start else "0"),
            ":high": serialize_value(to_sortable(end) if end else "9"),
        },
        "ScanIndexForward": False,
    }


#: The attributes of a ``byTime`` key (the index's and the table's), all strings.
_LEDGER_KEY = frozenset({"accountId", "entryId", "at"})
