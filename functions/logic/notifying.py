"""Sending what a job owes, each (job, event occurrence, method) at most once.

A key per notification is added to the job by a conditional update before publishing; only the
writer that added it publishes (docs/architecture.md "Notifications"). Every outcome is a line of the job's
``notificationLog``:

- ``sent``;
- ``skipped``: no contact for the method, the account's hourly SMS ceiling reached, or a failed
  progress message superseded by a newer one or outlived by its job;
- ``failed`` for good (the key stays claimed, never sent again): the provider refused it for good
  (``DeliveryRefused``: SNS ``InvalidParameter``, ``EndpointDisabled``, ``NotFound``, an opted-out
  phone, a webhook 4xx or a non-public webhook address), or ``MAX_PUBLISH_ATTEMPTS`` transient
  failures;
- ``failed`` and retried: a transient failure releases the key with its attempt count and the time
  of the next attempt (1, 2, 4, 8 minutes later, ``notification_schedule.next_attempt_at``); the
  meter's ticks (or the event's redelivery) send it then.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from aws_lambda_powertools import Logger

from functions.domain.errors import DeliveryRefused, DependencyFailed
from functions.domain.jobs import Account, Job, NotificationRecord
from functions.domain.messages import compose_message
from functions.domain.notification_schedule import (
    MAX_PUBLISH_ATTEMPTS,
    PublishAttempts,
    abandoned_retries,
    due_notifications,
    failure_record,
    is_progress,
    next_attempt_at,
    publish_attempts,
)
from functions.domain.notifications import DueNotification
from functions.domain.webhook_signing import delivery_id
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


# The operator's metric of each delivery outcome (a "failed" attempt that will be retried counts too).
_COUNTED_OUTCOMES = {"sent": "NotificationsSent", "failed": "NotificationsFailed"}


def _sentence(text: str) -> str:
    """``text`` ending as a sentence (a provider's reason is written into a log line before more)."""
    return text if text.endswith((".", "!", "?")) else f"{text}."


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
    if outcome in _COUNTED_OUTCOMES:
        services.events.count(_COUNTED_OUTCOMES[outcome])
    try:
        services.store.append_notification_record(job.job_id, record)
    except DependencyFailed:
        logger.exception("notification log not written", job_id=job.job_id, key=due.key)


def _drop_abandoned(services: Services, job: Job, now: datetime) -> None:
    """Claim, without sending, failed progress messages that a newer one supersedes or whose job ended."""
    for due in abandoned_retries(job, now):
        if not services.store.claim_notification(job.job_id, due.key):
            continue
        why = "the job ended" if job.is_final else "a later message covers it"
        detail = f"{due.method} skipped: not sent again, {why}"
        _record(services, job=job, due=due, outcome="skipped", to=None, detail=detail, now=now)


def status_claims(job: Job, now: datetime) -> frozenset[str]:
    """Keys of the status notifications ``job`` (as about to be written) owes at ``now``, for the
    write that makes them due to claim (docs/architecture.md "Notifications": only the writer that added a key
    publishes it; a status write conditional on the job's event position has one writer). Progress
    notifications are claimed on their own (only while the job is open); none when more are owed
    than one delivery sends (those go out over the meter's ticks)."""
    pending = due_notifications(job, now)
    if len(pending) > MAX_SENDS_PER_DELIVERY:
        return frozenset()
    return frozenset(due.key for due in pending if not is_progress(due.event))


def deliver_due_notifications(
    services: Services,
    job: Job,
    now: datetime,
    raise_on_failure: bool = True,
    *,
    account: Account | None = None,
    claimed: frozenset[str] = frozenset(),
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
        Re-raise a transient publish failure (batch_events: EventBridge retries) or leave it to the
        meter's ticks (meter).
    account : Account | None
        The job's account as the caller just read it (its contacts); None reads it (once).
    claimed : frozenset[str]
        Keys the caller already claimed in the write that made them due (``status_claims``); they
        are sent without a claim of their own. ``job`` is the job without them in
        ``sent_notifications``.

    Returns
    -------
    int
        How many were published by this call.

    Raises
    ------
    DependencyFailed
        When a publish failed transiently and ``raise_on_failure`` (after the rest were attempted).
        A publish refused for good is recorded, never raised.
    """
    _drop_abandoned(services, job, now)
    pending = due_notifications(job, now)
    if not pending:
        return 0
    if len(pending) > MAX_SENDS_PER_DELIVERY:
        # Many owed at once (a status burst, many rules): the rest go out over the next ticks, so
        # one job never holds up the others for long.
        pending = pending[:MAX_SENDS_PER_DELIVERY]
        services.store.request_notification_retry(job.job_id)
    if account is None:
        account = services.store.get_account(job.account_id)
    attempts = publish_attempts(job)
    sent = 0
    failure: DependencyFailed | None = None
    # A contact that failed transiently in this delivery (a webhook receiver that did not answer in
    # time) is not tried again in it: its other notifications wait for their next attempt, so one
    # slow receiver costs a delivery one timeout, not one per notification.
    unanswered: dict[tuple[str, str], DependencyFailed] = {}
    for due in pending:
        if due.key not in claimed and not services.store.claim_notification(
            job.job_id, due.key, while_open=is_progress(due.event)
        ):
            continue
        address = contact_for(account, due.method)
        if not address:
            detail = f"{due.method} skipped: {MISSING_CONTACT.get(due.method, 'no contact')}"
            _record(services, job=job, due=due, outcome="skipped", to=None, detail=detail, now=now)
            logger.info("notification skipped", job_id=job.job_id, key=due.key, why=detail)
            continue
        if due.method == "SMS" and not _sms_allowed(services, job.account_id, now):
            limit = services.sms_per_account_per_hour
            detail = f"SMS skipped: the account's ceiling of {limit} SMS per hour was reached"
            _record(services, job=job, due=due, outcome="skipped", to=address, detail=detail, now=now)
            logger.warning("sms ceiling reached", job_id=job.job_id, key=due.key, account_id=job.account_id)
            continue
        earlier = unanswered.get((due.method, address))
        outcome = _publish(
            services,
            job,
            due=due,
            account=account,
            address=address,
            attempts=attempts,
            now=now,
            earlier=earlier,
        )
        if isinstance(outcome, DependencyFailed):
            failure = outcome
            unanswered.setdefault((due.method, address), outcome)
        elif outcome:
            sent += 1
    if failure is not None and raise_on_failure:
        raise failure
    return sent


def _sms_allowed(services: Services, account_id: str, now: datetime) -> bool:
    """One SMS counted against the account's hourly ceiling; False when the hour's ceiling is reached."""
    return services.store.take_sms_allowance(
        account_id, now.strftime("%Y-%m-%dT%H"), services.sms_per_account_per_hour
    )


def _publish(
    services: Services,
    job: Job,
    *,
    due: DueNotification,
    account: Account | None,
    address: str,
    attempts: Mapping[str, PublishAttempts],
    now: datetime,
    earlier: DependencyFailed | None = None,
) -> bool | DependencyFailed:
    """Send one claimed notification and record the outcome: True when sent, False when refused or
    given up (the key stays claimed), the failure when it will be tried again (the key released).
    ``earlier``: the transient failure of this contact earlier in the same delivery; the
    notification is then not sent now but counted and rescheduled as failed with it."""
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
        delivery_id=delivery_id(job.job_id, due.key),
    )
    try:
        if earlier is not None:
            raise DependencyFailed(f"{earlier.message.rstrip('.')}, not tried again in this delivery.")
        services.notifier.send(notification)
    except DeliveryRefused as exc:
        # The key stays claimed: the same message can never succeed.
        detail = f"{due.method} failed: {_sentence(exc.message)} Not retried."
        _record(services, job=job, due=due, outcome="failed", to=address, detail=detail, now=now)
        logger.warning("notification refused", job_id=job.job_id, key=due.key, to=mask_address(address))
        return False
    except DependencyFailed as exc:
        previous = attempts.get(due.key)
        failures = (previous.failures if previous else 0) + 1
        retry_at = next_attempt_at(failures, now)
        if retry_at is None:
            detail = (
                f"{due.method} failed: {_sentence(exc.message)} "
                f"Gave up after {MAX_PUBLISH_ATTEMPTS} attempts."
            )
            _record(services, job=job, due=due, outcome="failed", to=address, detail=detail, now=now)
            logger.error("notification given up", job_id=job.job_id, key=due.key, attempts=failures)
            return False
        services.store.release_notification(job.job_id, due.key, failure_record(due.key, failures, retry_at))
        detail = (
            f"{due.method} failed: {_sentence(exc.message)} Attempt {failures} of {MAX_PUBLISH_ATTEMPTS}; "
            f"next at {retry_at.strftime('%Y-%m-%dT%H:%M:%SZ')}."
        )
        _record(services, job=job, due=due, outcome="failed", to=address, detail=detail, now=now)
        logger.exception("notification failed", job_id=job.job_id, key=due.key, to=mask_address(address))
        return exc
    _record(services, job=job, due=due, outcome="sent", to=address, detail=f"{due.method} sent", now=now)
    logger.info("notification sent", job_id=job.job_id, key=due.key, to=mask_address(address))
    return True
