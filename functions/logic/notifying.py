"""Sending what a job owes, each (job, event occurrence, method) at most once.

A key per notification is added to the job by a conditional update before publishing; only the
writer that added it publishes (DESIGN.md "Notifications"). A publish that fails releases the key
and is recorded as failed in the job's ``notificationLog``: the event's redelivery (EventBridge
retries the batch_events Lambda) or the meter's next tick sends it then. A method whose contact is
missing is skipped and recorded, never an error.
"""

from __future__ import annotations

from datetime import datetime

from aws_lambda_powertools import Logger

from functions.domain.errors import DependencyFailed
from functions.domain.jobs import Account, Job, NotificationRecord
from functions.domain.messages import compose_message
from functions.domain.notification_schedule import due_notifications
from functions.domain.notifications import DueNotification
from functions.ports import OutgoingNotification, Services

logger = Logger(child=True)

MAX_SENDS_PER_DELIVERY = 25
MISSING_CONTACT = {"Email": "no email", "SMS": "no phone", "Webhook": "no webhook URL"}


def mask_address(address: str) -> str:
    """``dev@example.com`` → ``d***@example.com``; ``+15555550100`` → ``+1******0100``;
    ``https://hooks.example.com/x/y`` → ``https://hooks.example.com/…``."""
    if "://" in address:
        scheme, _, rest = address.partition("://")
        return f"{scheme}://{rest.split('/', 1)[0]}/…"
    if "@" in address:
        local, _, domain = address.partition("@")
        return f"{local[:1]}***@{domain}"
    return address[:2] + "*" * max(0, len(address) - 6) + address[-4:]


def contact_for(account: Account | None, method: str) -> str | None:
    """The account's address for ``method`` (email, E.164 phone or webhook URL), or None."""
    if account is None:
        return None
    return {"Email": account.email, "SMS": account.phone, "Webhook": account.webhook_url}.get(method)


def _record(
    services: Services,
    *,
    job: Job,
    due: DueNotification,
    outcome: str,
    to: str | None,
    detail: str,
    now: datetime,
) -> None:
    record = NotificationRecord(
        at=now,
        event=due.event,
        method=due.method,
        outcome=outcome,
        to=mask_address(to) if to else None,
        detail=detail,
    )
    try:
        services.store.append_notification_record(job.job_id, record)
    except DependencyFailed:
        logger.exception("notification log not written", job_id=job.job_id, key=due.key)


def deliver_due_notifications(
    services: Services, job: Job, now: datetime, raise_on_failure: bool = True
) -> int:
    """Publish what ``job`` owes at ``now`` (status and progress notifications) and has not sent.

    Parameters
    ----------
    services : Services
        Ports.
    job : Job
        The job as just read or written.
    now : datetime
        Time of the delivery (progress events are due relative to it).
    raise_on_failure : bool
        Re-raise a failed publish (batch_events: EventBridge retries) or leave it to the next
        meter tick (meter).

    Returns
    -------
    int
        How many were published by this call.

    Raises
    ------
    DependencyFailed
        When SNS refused one and ``raise_on_failure`` (after the rest were attempted).
    """
    pending = due_notifications(job, now)
    if not pending:
        return 0
    if len(pending) > MAX_SENDS_PER_DELIVERY:
        # A burst (a tick crossing many JobCreditsUsed multiples) goes out over several ticks: the
        # meter comes back for the rest, so one job never holds up the others for long.
        pending = pending[:MAX_SENDS_PER_DELIVERY]
        services.store.request_notification_retry(job.job_id)
    account = services.store.get_account(job.account_id)
    sent = 0
    failure: DependencyFailed | None = None
    for due in pending:
        if not services.store.claim_notification(job.job_id, due.key):
            continue
        address = contact_for(account, due.method)
        if not address:
            detail = f"{due.method} skipped: {MISSING_CONTACT.get(due.method, 'no contact')}"
            _record(services, job=job, due=due, outcome="skipped", to=None, detail=detail, now=now)
            logger.info("notification skipped", job_id=job.job_id, key=due.key, why=detail)
            continue
        subject, message = compose_message(job, due, now)
        notification = OutgoingNotification(
            job_id=job.job_id,
            account_id=job.account_id,
            event=due.event,
            method=due.method,
            to=address,
            subject=subject,
            message=message,
            at=now,
            secret=account.webhook_secret if account is not None and due.method == "Webhook" else None,
        )
        try:
            services.notifier.send(notification)
        except DependencyFailed as exc:
            services.store.release_notification(job.job_id, due.key)
            detail = f"{due.method} failed: {exc.message} (will retry)"
            _record(services, job=job, due=due, outcome="failed", to=address, detail=detail, now=now)
            logger.exception("notification failed", job_id=job.job_id, key=due.key, to=mask_address(address))
            failure = exc
            continue
        _record(services, job=job, due=due, outcome="sent", to=address, detail=f"{due.method} sent", now=now)
        logger.info("notification sent", job_id=job.job_id, key=due.key, to=mask_address(address))
        sent += 1
    if failure is not None and raise_on_failure:
        raise failure
    return sent
