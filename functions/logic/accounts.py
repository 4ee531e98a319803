"""Accounts: usage from the ledger, and credit grants by an admin."""

from __future__ import annotations

import random
import secrets
import time
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal
from urllib.parse import urlsplit

from aws_lambda_powertools import Logger

from functions.domain.credits import MAX_CREDITS, ZERO, quantize_credits
from functions.domain.errors import ConditionFailed, DependencyFailed, NotFound, ValidationFailed
from functions.domain.jobs import Account, LedgerEntry, LedgerKind
from functions.domain.text import E164_PATTERN, EMAIL_PATTERN, full_match
from functions.domain.webhook_addresses import is_this_machine, non_public_reason
from functions.domain.webhook_signing import SECRET_BYTES, new_secret
from functions.ports import HostResolver, Services

logger = Logger(child=True)

MAX_GRANT_ATTEMPTS = 20
NOT_GIVEN = object()


def validate_phone(phone: str) -> str:
    """Return ``phone`` if it is E.164 (``+15555550100``). Raises ``ValidationFailed`` (field phone)."""
    if not full_match(E164_PATTERN, phone):
        raise ValidationFailed(
            f"phone must be E.164: a + then the country code and number, 15 digits at most (got {phone!r}).",
            field="phone",
        )
    return phone


def validate_email(email: str) -> str:
    """Return ``email`` if it looks like an address. Raises ``ValidationFailed`` (field email)."""
    if len(email) > 254 or not full_match(EMAIL_PATTERN, email):
        raise ValidationFailed(f"email is not an email address: {email!r}.", field="email")
    return email


LOCAL_HOST_SUFFIXES = (".localhost", ".internal", ".local", ".localdomain", ".home.arpa")


def validate_webhook_url(url: str, allow_http: bool, resolver: HostResolver | None) -> str:
    """Return ``url`` if it is an absolute HTTPS URL without credentials whose host resolves only to
    public addresses (http:// to this machine only where ``allow_http``: the local stack).

    The host is resolved, so every spelling of a private address is refused by what it IS, not by
    how it is written: ``https://2852039166/``, ``https://0xa9.0xfe.0xa9.0xfe/``,
    ``https://0251.0376.0251.0376/``, ``https://[::ffff:169.254.169.254]/``, ``https://0.0.0.0/``,
    ``https://localhost./`` and a DNS name resolving to a private, loopback, link-local, multicast
    or reserved address (``functions.domain.webhook_addresses``). Delivery checks again.

    Raises
    ------
    ValidationFailed
        Field ``webhookUrl``.
    """
    parsed = urlsplit(url)
    schemes = ("https", "http") if allow_http else ("https",)
    host = (parsed.hostname or "").lower().rstrip(".")
    if parsed.scheme not in schemes or not host or len(url) > 2048 or parsed.username or parsed.password:
        raise ValidationFailed(
            f"webhookUrl must be an https:// URL without credentials, got {url!r}.", field="webhookUrl"
        )
    if any(ord(c) <= 32 or ord(c) == 127 for c in url):
        raise ValidationFailed(
            "webhookUrl must not contain spaces or control characters.", field="webhookUrl"
        )
    try:
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
    except ValueError:
        raise ValidationFailed(f"webhookUrl has an invalid port: {url!r}.", field="webhookUrl") from None
    if not allow_http and (host == "localhost" or host.endswith(LOCAL_HOST_SUFFIXES)):
        raise ValidationFailed(f"webhookUrl must reach a public host; {host!r} is local.", field="webhookUrl")
    addresses = resolver.resolve(host, port) if resolver is not None else []
    if not addresses:
        raise ValidationFailed(f"webhookUrl's host {host!r} does not resolve.", field="webhookUrl")
    for address in addresses:
        if allow_http:
            if not is_this_machine(address):
                raise ValidationFailed(
                    "The local stack only posts webhooks to this machine.", field="webhookUrl"
                )
        elif (problem := non_public_reason(address)) is not None:
            raise ValidationFailed(
                f"webhookUrl must reach a public host; {host!r} resolves to {problem}.", field="webhookUrl"
            )
    return url


def set_contacts(
    services: Services,
    account_id: str,
    *,
    now: datetime,
    email: object = NOT_GIVEN,
    phone: object = NOT_GIVEN,
    webhook_url: object = NOT_GIVEN,
) -> Account:
    """``PUT /account/contacts``: set or clear the email, phone and webhook URL (``NOT_GIVEN`` leaves
    one as it is).

    A new email gets its own SNS topic with one email subscription (pending until its owner
    confirms); the replaced or cleared address's topic is deleted with its subscription
    (``functions.adapters.sns`` says why a topic per account). A new webhook URL gets a new signing
    secret (``webhook_secret`` on the returned account: shown once, by the route that set it).

    Raises
    ------
    ValidationFailed
        A phone that is not E.164, an email that is not an address, a webhook URL that is not HTTPS.
    """
    account = services.store.get_account(account_id) or services.store.create_account(
        Account(account_id=account_id, credit_balance=ZERO), now
    )
    new_email = account.email if email is NOT_GIVEN else (validate_email(str(email)) if email else None)
    new_phone = account.phone if phone is NOT_GIVEN else (validate_phone(str(phone)) if phone else None)
    new_webhook = (
        account.webhook_url
        if webhook_url is NOT_GIVEN
        else (
            validate_webhook_url(str(webhook_url), services.allow_http_webhooks, services.resolver)
            if webhook_url
            else None
        )
    )
    secret = account.webhook_secret if new_webhook == account.webhook_url else None
    if new_webhook and not secret:
        secret = new_secret(secrets.token_bytes(SECRET_BYTES))
    subscription = account.email_subscription
    if new_email != account.email or (new_email and not subscription):
        # The new address first: when SNS refuses it, the old one still gets the account's mail.
        subscription = services.subscriptions.subscribe(account_id, new_email) if new_email else None
        if account.email and new_email != account.email:
            # Deleting the old address's topic also removes its subscription if still pending.
            services.subscriptions.remove(account_id, account.email)
    changed = replace(
        account,
        email=new_email,
        phone=new_phone,
        email_subscription=subscription,
        webhook_url=new_webhook,
        webhook_secret=secret,
    )
    try:
        updated = services.store.update_contacts(changed)
    except ConditionFailed:
        raise NotFound(f"No account {account_id}.") from None
    logger.info(
        "contacts updated", account_id=account_id, email_set=bool(new_email), phone_set=bool(new_phone)
    )
    return updated


def email_status(services: Services, account: Account) -> str:
    """``none`` without an email, else ``pending`` or ``confirmed`` (the SNS subscription's state)."""
    if not account.email:
        return "none"
    if not account.email_subscription:
        return "pending"
    return services.subscriptions.status(account.account_id, account.email)


@dataclass(frozen=True, slots=True)
class Usage:
    """A page of an account's ledger entries in a window, newest first, the credits charged in them,
    and the token of the next page (or None)."""

    entries: list[LedgerEntry]
    total_charged: Decimal
    next_token: str | None = None


#: Most ledger entries a page of ``GET /account/usage`` holds. An entry's view is a few hundred
#: bytes (its note is the service's own sentence), so a full page stays far under the 5 MiB cap.
MAX_USAGE_PAGE = 1000


def account_usage(
    services: Services,
    account_id: str,
    start: datetime | None,
    end: datetime | None,
    *,
    limit: int = MAX_USAGE_PAGE,
    next_token: str | None = None,
) -> Usage:
    """``GET /account/usage``: a page of the ledger entries with ``start <= at < end``, newest first.

    ``total_charged`` is what the page's charges add up to; the period's total is the sum over its
    pages (follow ``next_token`` until it is None).

    Raises ``ValidationFailed``: ``field="from"`` when ``start`` is after ``end``, ``field="nextToken"``
    for a token this API did not issue for this account.
    """
    if start is not None and end is not None and start > end:
        raise ValidationFailed("from must not be after to.", field="from")
    entries, token = services.store.list_ledger_page(account_id, start, end, limit, next_token)
    charged = sum((e.credits for e in entries if e.kind in (LedgerKind.CHARGE, LedgerKind.COMPUTE)), ZERO)
    return Usage(entries=entries, total_charged=quantize_credits(charged), next_token=token)


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
        if account.credit_balance + credits >= MAX_CREDITS:
            raise ValidationFailed(
                f"The balance would reach {MAX_CREDITS:,} credits or more.", field="credits"
            )
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
