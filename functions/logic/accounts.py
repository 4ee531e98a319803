"""Accounts: usage from the ledger, and credit grants by an admin."""

from __future__ import annotations

import random
import secrets
import time
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from aws_lambda_powertools import Logger

from functions.domain.credits import ZERO, quantize_credits
from functions.domain.errors import ConditionFailed, DependencyFailed, NotFound, ValidationFailed
from functions.domain.jobs import Account, LedgerEntry, LedgerKind
from functions.ports import Services

logger = Logger(child=True)

MAX_GRANT_ATTEMPTS = 20


@dataclass(frozen=True, slots=True)
class Usage:
    """An account's ledger entries in a window, newest first, and the credits charged in it."""

    entries: list[LedgerEntry]
    total_charged: Decimal


def account_usage(services: Services, account_id: str, start: datetime | None, end: datetime | None) -> Usage:
    """``GET /account/usage``: ledger entries with ``start <= at < end``, newest first.

    Raises ``ValidationFailed`` (``field="from"``) when ``start`` is after ``end``.
    """
    if start is not None and end is not None and start > end:
        raise ValidationFailed("from must not be after to.", field="from")
    entries = services.store.list_ledger(account_id, start, end)
    charged = sum((e.credits for e in entries if e.kind == LedgerKind.CHARGE), ZERO)
    return Usage(entries=entries, total_charged=quantize_credits(charged))


def grant_credits(
    services: Services, account_id: str, credits: Decimal, reason: str, now: datetime
) -> Account:
    """Add ``credits`` to an account with a ``grant`` ledger entry (one transaction).

    Raises
    ------
    NotFound
        No such account.
    DependencyFailed
        The balance kept changing under the grant (retried first).
    """
    entry_id = f"grant#{now.strftime('%Y%m%dT%H%M%S')}#{secrets.token_hex(6)}"
    for _ in range(MAX_GRANT_ATTEMPTS):
        account = services.store.get_account(account_id)
        if account is None:
            raise NotFound(f"No account {account_id}.")
        entry = LedgerEntry(
            entry_id=entry_id,
            account_id=account_id,
            at=now,
            kind=LedgerKind.GRANT,
            credits=credits,
            balance_after=quantize_credits(account.credit_balance + credits),
            reason=reason,
        )
        try:
            granted = services.store.grant_credits(entry)
        except ConditionFailed:
            time.sleep(random.uniform(0, 0.02))  # noqa: S311 - jitter, not cryptography
            continue
        logger.info("credits granted", account_id=account_id, credits=str(credits))
        return granted
    raise DependencyFailed(f"the balance of {account_id} kept changing; the grant was not made")
