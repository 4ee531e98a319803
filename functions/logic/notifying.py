"""Sending what a job owes, each (job, event occurrence, method) at most once.

A key per notification is added to the job by a conditional update before publishing; only the
writer that added it publishes (DESIGN.md "Notifications"). A publish that fails releases the key
and re-raises, so the event's redelivery (EventBridge retries the Lambda) sends it then.
"""

from __future__ import annotations

from datetime import datetime

from aws_lambda_powertools import Logger

from functions.domain.errors import DependencyFailed
from functions.domain.jobs import Job
from functions.domain.messages import compose_status_message
from functions.domain.notifications import due_status_notifications
from functions.ports import OutgoingNotification, Services

logger = Logger(child=True)


def mask_address(address: str) -> str:
    """``dev@example.com`` → ``d***@example.com``; ``+15555550100`` → ``+1******0100``."""
    if "@" in address:
        local, _, domain = address.partition("@")
        return f"{local[:1]}***@{domain}"
    return address[:2] + "*" * max(0, len(address) - 6) + address[-4:]


def deliver_status_notifications(services: Services, job: Job, now: datetime) -> int:
    """Publish the status notifications ``job`` owes and has not sent.

    Returns
    -------
    int
        How many were published by this call.

    Raises
    ------
    DependencyFailed
        When SNS refused one (its key is released first, so a retry sends it).
    """
    pending = [
        d
        for d in due_status_notifications(job.notifications, job.status_history)
        if d.key not in job.sent_notifications
    ]
    if not pending:
        return 0
    account = services.store.get_account(job.account_id)
    sent = 0
    for due in pending:
        address = None
        if account is not None:
            address = account.email if due.method == "Email" else account.phone
        if not services.store.claim_notification(job.job_id, due.key):
            continue
        if not address:
            logger.info("notification skipped", job_id=job.job_id, key=due.key, why="no contact for method")
            continue
        subject, message = compose_status_message(job, due, now)
        notification = OutgoingNotification(
            job_id=job.job_id,
            account_id=job.account_id,
            event=due.event,
            method=due.method,
            to=address,
            subject=subject,
            message=message,
            at=now,
        )
        try:
            services.notifier.send(notification)
        except DependencyFailed:
            services.store.release_notification(job.job_id, due.key)
            logger.exception("notification failed", job_id=job.job_id, key=due.key, to=mask_address(address))
            raise
        logger.info("notification sent", job_id=job.job_id, key=due.key, to=mask_address(address))
        sent += 1
    return sent
