"""The operators' audit log, and credit grants recorded in it.

A grant writes its ledger entry, the balance and its audit entry in ONE DynamoDB transaction. A grant
made with an ``Idempotency-Key`` has a ledger id derived from (operator, account, key), written only
if absent: a retried request credits once whenever it comes (also after the 24 h the api replays
answers for, and also when the first attempt's answer was lost mid-way).
"""

from __future__ import annotations

import random
import secrets
import time
from datetime import datetime
from decimal import Decimal

from aws_lambda_powertools import Logger

from functions.domain.credits import MAX_CREDITS, quantize_credits
from functions.domain.errors import ConditionFailed, DependencyFailed, NotFound, ValidationFailed
from functions.domain.fleet import AuditAction, AuditEntry, account_target, request_digest
from functions.domain.jobs import Account, LedgerEntry, LedgerKind
from functions.ports import OperationsStore, Services

logger = Logger(child=True)

MAX_GRANT_ATTEMPTS = 20


def _operations(services: Services) -> OperationsStore:
    if services.operations is None:
        raise DependencyFailed("the operations store is not configured")
    return services.operations


def audit_entry_id(actor: str, action: AuditAction, target: str, idempotency_key: str | None) -> str:
    """An audit entry's id: with an ``Idempotency-Key``, a digest of (operator, action, target, key),
    the same for every retry of the request; without one, random (every request its own entry)."""
    if idempotency_key is None:
        return secrets.token_hex(16)
    return request_digest(actor, action.value, target, idempotency_key)


def grant_entry_id(actor: str, account_id: str, idempotency_key: str | None, now: datetime) -> str:
    """The grant's ledger id: ``grant#key#<digest of operator, account, key>`` with a key (the same
    for every retry), else ``grant#<time>#<random>`` (every request its own grant)."""
    if idempotency_key is not None:
        return f"grant#key#{request_digest(actor, account_id, idempotency_key)}"
    return f"grant#{now.strftime('%Y%m%dT%H%M%S')}#{secrets.token_hex(6)}"


def grant_credits(
    services: Services,
    *,
    actor: str,
    account_id: str,
    credits: Decimal,
    reason: str,
    now: datetime,
    idempotency_key: str | None = None,
) -> Account:
    """Add ``credits`` to an account: a ``grant`` ledger entry, the balance and an audit entry
    (``GrantCredits``, balance before and after) in one transaction.

    With ``idempotency_key``, a grant already made under it changes nothing and the account is
    returned as it is now.

    Raises
    ------
    NotFound
        No such account.
    ValidationFailed
        The balance would reach ``MAX_CREDITS`` (``field="credits"``).
    DependencyFailed
        The balance kept changing under the grant (retried first), or DynamoDB failed.
    """
    operations = _operations(services)
    entry_id = grant_entry_id(actor, account_id, idempotency_key, now)
    for _ in range(MAX_GRANT_ATTEMPTS):
        account = services.store.get_account(account_id)
        if account is None:
            raise NotFound(f"No account {account_id}.")
        if account.credit_balance + credits >= MAX_CREDITS:
            raise ValidationFailed(f"The balance would reach {MAX_CREDITS} credits or more.", field="credits")
        after = quantize_credits(account.credit_balance + credits)
        entry = LedgerEntry(
            entry_id=entry_id,
            account_id=account_id,
            at=now,
            kind=LedgerKind.GRANT,
            credits=credits,
            balance_after=after,
            reason=reason,
        )
        audit = AuditEntry(
            entry_id=request_digest(entry_id, account_id),
            at=now,
            actor=actor,
            action=AuditAction.GRANT_CREDITS,
            target=account_target(account_id),
            before={"creditBalance": format(quantize_credits(account.credit_balance), "f")},
            after={"creditBalance": format(after, "f"), "credits": format(quantize_credits(credits), "f")},
            reason=reason,
        )
        try:
            made = operations.grant_credits(entry, audit)
        except ConditionFailed:
            time.sleep(random.uniform(0, 0.02))  # noqa: S311 - jitter, not cryptography
            continue
        stored = services.store.get_account(account_id)
        if stored is None:
            raise DependencyFailed("The account vanished during the grant.")
        logger.info("credits granted", account_id=account_id, credits=str(credits), repeated=not made)
        return stored
    raise DependencyFailed(f"the balance of {account_id} kept changing; the grant was not made")


def list_audit(services: Services, limit: int, next_token: str | None) -> tuple[list[AuditEntry], str | None]:
    """``GET /admin/audit``: entries newest first, at most ``limit``, and the next page's token.

    A page may hold fewer than ``limit`` entries while the token is set (entries past their
    retention are left out after the read). Raises ``ValidationFailed`` (``nextToken``).
    """
    return _operations(services).list_audit(limit, next_token)
