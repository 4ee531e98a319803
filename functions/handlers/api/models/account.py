"""Models of the account and admin routes: the account, contacts, the ledger, granted credits."""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

from pydantic import (
    ConfigDict,
    Field,
)

from functions.domain.credits import MAX_CREDITS
from functions.domain.jobs import Account, LedgerEntry, LedgerKind
from functions.domain.text import (
    E164_PATTERN,
    EMAIL_PATTERN,
    LABEL_PATTERN,
    URL_CHARS_PATTERN,
)
from functions.domain.timefmt import to_api_time
from functions.handlers.api.models.common import ApiModel, Credits, CreditsIn


class AccountView(ApiModel):
    """``GET /account``; ``emailStatus`` (``pending`` | ``confirmed`` | ``none``) is an extension."""

    accountId: str
    creditBalance: Credits
    email: str | None
    phone: str | None
    roles: list[str]
    emailStatus: Literal["pending", "confirmed", "none"]
    webhookUrl: str | None = None


class ContactsView(AccountView):
    """``PUT /account/contacts``: the account, and the webhook signing secret when this request set a
    new webhook URL (shown only here, once)."""

    webhookSecret: str | None = None


class ContactsBody(ApiModel):
    """``PUT /account/contacts``: a key set to null clears it; a key left out is left as it is."""

    model_config = ConfigDict(extra="forbid")

    email: str | None = Field(default=None, max_length=254, pattern=EMAIL_PATTERN)
    phone: str | None = Field(
        default=None, max_length=16, pattern=E164_PATTERN, description="E.164, e.g. +15555550100"
    )
    webhookUrl: str | None = Field(
        default=None,
        max_length=2048,
        pattern=URL_CHARS_PATTERN,
        description="https:// endpoint (extension); visible ASCII (an internationalized host as xn--)",
    )


class LedgerEntryView(ApiModel):
    """One ledger entry of ``GET /account/usage``."""

    at: str
    kind: Literal["charge", "grant", "refund", "compute"]
    credits: Credits
    jobId: str | None
    balanceAfter: Credits
    unbilled: Credits = Field(
        default=Decimal(0), description="Extension: cost the balance could not cover (charges only)."
    )
    compute: str | None = Field(
        default=None,
        description="Extension: the dedicated compute a `compute` entry charges, or the one a job ran on.",
    )
    note: str | None = Field(
        default=None,
        description="Extension: what a `compute` entry bills (seconds, rate) or why a job's charge is 0.",
    )


class UsageView(ApiModel):
    """``GET /account/usage``: a page of entries and what its charges add up to."""

    entries: list[LedgerEntryView]
    totalCharged: Credits
    nextToken: str | None = Field(default=None, description="More entries follow; pass it back.")


class GrantCreditsBody(ApiModel):
    """``POST /admin/accounts/{accountId}/credits`` body."""

    model_config = ConfigDict(extra="forbid")

    credits: CreditsIn = Field(gt=0, lt=MAX_CREDITS, decimal_places=4, description="Credits to add.")
    reason: str = Field(
        min_length=1, max_length=500, pattern=LABEL_PATTERN, description="Why, for the ledger (one line)."
    )


def account_view(account: Account, email_status: str) -> AccountView:
    """Map an account to the API's account body."""
    return AccountView(
        accountId=account.account_id,
        creditBalance=account.credit_balance,
        email=account.email,
        phone=account.phone,
        roles=list(account.roles),
        emailStatus=email_status,  # type: ignore[arg-type]
        webhookUrl=account.webhook_url,
    )


def ledger_entry_view(entry: LedgerEntry) -> LedgerEntryView:
    """Map a ledger entry."""
    return LedgerEntryView(
        at=to_api_time(entry.at) or "",
        kind=entry.kind.value,
        credits=entry.credits,
        jobId=entry.job_id,
        balanceAfter=entry.balance_after,
        unbilled=entry.unbilled,
        compute=entry.compute,
        note=entry.reason if entry.kind in (LedgerKind.COMPUTE, LedgerKind.CHARGE) else None,
    )
