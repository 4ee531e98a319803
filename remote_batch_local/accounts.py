"""Accounts of the local stack: the built-in ``dev`` and ``admin``, and those ``POST /admin/accounts`` adds.

Deployed, accounts come from Cognito sign-ups; locally an account is a row in the accounts table
plus a token minted by ``TokenStore``.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from functions.domain.credits import parse_credits, quantize_credits
from functions.domain.errors import Conflict, ValidationFailed
from functions.domain.fleet import AuditAction, AuditEntry, account_target
from functions.domain.jobs import Account
from functions.domain.text import ACCOUNT_ID_PATTERN, EMAIL_PATTERN, full_match
from functions.logic.accounts import set_contacts
from functions.ports import Clock, Services
from remote_batch_local.files import read_json, write_json_atomic
from remote_batch_local.tokens import PRIVATE, TokenStore


@dataclass(frozen=True, slots=True)
class NewAccount:
    """An account to create: id, starting credits, email (or None) and roles."""

    account_id: str
    credits: Decimal
    email: str | None
    roles: tuple[str, ...] = ("user",)


BUILT_IN_ACCOUNTS = (
    NewAccount("dev", Decimal(10000), "dev@example.com", ("user",)),
    NewAccount("admin", Decimal(0), None, ("admin",)),
)


def parse_new_account(body: Any) -> NewAccount:
    """Validate a ``POST /admin/accounts`` body.

    ``{"accountId": str, "email": str | null (optional), "credits": number >= 0 (optional, 0)}``.

    Raises
    ------
    ValidationFailed
        Naming the offending field.
    """
    if not isinstance(body, dict):
        raise ValidationFailed("The request body must be a JSON object.", field=None)
    unknown = sorted(set(body) - {"accountId", "email", "credits"})
    if unknown:
        raise ValidationFailed(
            f"Unknown field {unknown[0]!r}; this route takes accountId, email, credits.", unknown[0]
        )
    account_id = body.get("accountId")
    if not isinstance(account_id, str) or not full_match(ACCOUNT_ID_PATTERN, account_id):
        raise ValidationFailed(
            "accountId must be 1 to 128 letters, digits or . _ @ - (starting with a letter or digit).",
            field="accountId",
        )
    email = body.get("email")
    if email is not None and (not isinstance(email, str) or not full_match(EMAIL_PATTERN, email)):
        raise ValidationFailed("email must be an email address like a@example.com, or null.", field="email")
    return NewAccount(account_id, _parse_credits(body.get("credits", 0)), email)


def _parse_credits(value: Any) -> Decimal:
    """0, or a positive amount as ``parse_credits`` accepts it (JSON numbers only)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationFailed("credits must be a number of credits, 0 or more.", field="credits")
    if value == 0:
        return quantize_credits(Decimal(0))
    return parse_credits(Decimal(str(value)), "credits")


class LocalAccounts:
    """Creates accounts and their tokens.

    Parameters
    ----------
    store : JobRepository
        Where accounts live (the accounts table).
    tokens : TokenStore
        Where tokens are minted.
    clock : Clock
        Time of the accounts' creation.
    credentials_path : Path
        ``<home>/credentials.json``: the endpoint and the built-in accounts' tokens.
    """

    def __init__(self, services: Services, tokens: TokenStore, clock: Clock, credentials_path: Path) -> None:
        self._services = services
        self._store = services.store
        self._tokens = tokens
        self._clock = clock
        self._credentials_path = credentials_path

    def ensure_built_in(self) -> dict[str, str]:
        """Create ``dev`` and ``admin`` unless they exist; returns their tokens by account id, the
        ones of earlier runs (from ``credentials.json``) when they are still known."""
        previous = (read_json(self._credentials_path) or {}).get("tokens", {})
        tokens: dict[str, str] = {}
        for new in BUILT_IN_ACCOUNTS:
            self._create(new)
            token = previous.get(new.account_id)
            principal = self._tokens.lookup(token) if isinstance(token, str) else None
            if principal is None or principal.account_id != new.account_id:
                token = self._tokens.mint(new.account_id, new.roles)
            tokens[new.account_id] = token
        return tokens

    def write_credentials(self, endpoint: str, tokens: dict[str, str]) -> None:
        """Write ``credentials.json`` (0600): ``{"endpoint": ..., "tokens": {"dev": ..., "admin": ...}}``."""
        write_json_atomic(self._credentials_path, {"endpoint": endpoint, "tokens": tokens}, mode=PRIVATE)

    def register(self, new: NewAccount, actor: str) -> str:
        """Create ``new``, mint its token (shown once) and add a ``CreateAccount`` entry by ``actor``
        (the operator's account id) to the audit log (``GET /admin/audit``: target ``accounts/<id>``,
        after the starting credits, email and roles; the token is never written there).

        Raises
        ------
        Conflict
            When the account exists.
        """
        if self._store.get_account(new.account_id) is not None:
            raise Conflict(f"Account {new.account_id!r} exists; choose another accountId.", field="accountId")
        self._create(new)
        token = self._tokens.mint(new.account_id, new.roles)
        if self._services.operations is not None:
            self._services.operations.record(
                AuditEntry(
                    entry_id=secrets.token_hex(16),
                    at=self._clock(),
                    actor=actor,
                    action=AuditAction.CREATE_ACCOUNT,
                    target=account_target(new.account_id),
                    before={},
                    after={
                        "creditBalance": format(new.credits, "f"),
                        "email": new.email,
                        "roles": list(new.roles),
                    },
                    reason=None,
                )
            )
        return token

    def _create(self, new: NewAccount) -> None:
        """Create the account if absent; an email gets its SNS subscription, as PUT /account/contacts does."""
        now = self._clock()
        account = self._store.create_account(
            Account(new.account_id, new.credits, email=new.email, roles=new.roles), now
        )
        if account.email and not account.email_subscription:
            set_contacts(self._services, account.account_id, now=now, email=account.email)
