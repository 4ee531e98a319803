"""Delivery on moto: refused-for-good publishes are recorded failed and never retried, transient
failures are retried with backoff a bounded number of times, the per-account SMS ceiling, and a tiny
``JobCreditsUsed`` threshold that must not flood (issue 8 "Notifications at scale", issue 9 item 11)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any, cast

import boto3
import pytest
from botocore.exceptions import ClientError

from functions import bootstrap
from functions.adapters.sns import SnsNotifier
from functions.domain.errors import DeliveryRefused, DependencyFailed
from functions.domain.notification_schedule import MAX_PUBLISH_ATTEMPTS
from functions.ports import OutgoingNotification
from tests.events import batch_event

EMAIL = "ana@example.com"
PHONE = "+15555550100"
AT = datetime(2026, 1, 1, tzinfo=UTC)


def use_services(stack, **changes: Any) -> None:
    """Install the stack's services with ``changes`` (a real SNS notifier, another SMS ceiling)."""
    stack.services = dataclasses.replace(stack.services, **changes)
    bootstrap.install(stack.services)


def sns_notifier(stack) -> SnsNotifier:
    return SnsNotifier(boto3.client("sns", region_name="us-east-1"), stack.settings.email_topic_arn_prefix)


def log_of(stack, job_id):
    job = stack.services.store.get_job(job_id)
    return [(r.event, r.method, r.outcome, r.detail) for r in job.notification_log]


def deliver(stack, job_id, status, **times):
    batch_id = stack.services.store.get_job(job_id).batch_job_id
    now_ms = int(stack.clock().timestamp() * 1000)
    return stack.deliver(batch_event(job_id, batch_id, status, created_at=now_ms, **times))


def submit(stack, notifications, account_id="ana"):
    status, job = stack.api(
        "POST", "/jobs", body={"code": "1", "notifications": notifications}, account_id=account_id
    )
    assert status == 202, job
    return job["jobId"]


# -- refused for good -------------------------------------------------------------------------------------
def test_a_publish_refused_for_good_is_recorded_failed_and_never_retried(stack):
    # Given ana's email stored without its topic (deleted behind the service's back): SNS answers NotFound
    stack.add_account("ana", "100", email=EMAIL)
    use_services(stack, notifier=sns_notifier(stack))
    job_id = submit(stack, [{"events": ["JobStarting"], "methods": ["Email"]}])

    # When the job starts, and the meter ticks every minute for 20 minutes
    deliver(stack, job_id, "STARTING")
    for _ in range(20):
        stack.clock.advance(60)
        stack.tick()

    # Then one failed line, refused for good; the key stays claimed and nothing is owed again
    assert log_of(stack, job_id) == [
        (
            "JobStarting",
            "Email",
            "failed",
            "Email failed: SNS refused the Email notification (NotFound). Not retried.",
        )
    ]
    job = stack.services.store.get_job(job_id)
    assert job.sent_notifications == {"JobStarting#1/Email"}
    assert job.retry_notifications == frozenset()
    assert list(stack.services.store.list_notification_retries()) == []


class RefusingSns:
    """An SNS client whose Publish answers one error code."""

    def __init__(self, code: str) -> None:
        self.code = code
        self.calls = 0

    def publish(self, **_: Any) -> None:
        self.calls += 1
        raise ClientError({"Error": {"Code": self.code, "Message": self.code}}, "Publish")


@pytest.mark.parametrize(
    "code",
    ["InvalidParameter", "InvalidParameterValue", "EndpointDisabled", "NotFound", "OptedOut"],
)
@pytest.mark.parametrize("method", ["Email", "SMS"])
def test_sns_codes_that_can_never_succeed_are_refused_for_good(code, method):
    notifier = SnsNotifier(cast(Any, RefusingSns(code)), "arn:aws:sns:us-east-1:123456789012:test-email-")
    notification = OutgoingNotification(
        "j", "ana", "JobStarting", method, EMAIL if method == "Email" else PHONE, "s", "m", AT
    )
    with pytest.raises(DeliveryRefused):
        notifier.send(notification)


@pytest.mark.parametrize("code", ["Throttled", "ThrottlingException", "InternalError", "KMSThrottling"])
def test_sns_codes_that_may_pass_are_transient(code):
    notifier = SnsNotifier(cast(Any, RefusingSns(code)), "arn:aws:sns:us-east-1:123456789012:test-email-")
    notification = OutgoingNotification("j", "ana", "JobStarting", "SMS", PHONE, "s", "m", AT)
    with pytest.raises(DependencyFailed) as raised:
        notifier.send(notification)
    assert not isinstance(raised.value, DeliveryRefused)


# -- transient: bounded retries with backoff ---------------------------------------------------------------
def test_a_transient_failure_is_retried_with_backoff_at_most_five_times_then_failed_for_good(stack):
    stack.add_account("ana", "100", email=EMAIL)
    job_id = submit(stack, [{"events": ["JobStarting"], "methods": ["Email"]}])
    stack.notifier.fail_next = 100  # SNS keeps throttling

    deliver(stack, job_id, "STARTING")  # attempt 1 (the event's delivery)
    failed_at = [stack.clock()]
    for _ in range(40):  # the meter, every minute for 40 minutes
        stack.clock.advance(60)
        before = len(log_of(stack, job_id))
        stack.tick()
        if len(log_of(stack, job_id)) > before:
            failed_at.append(stack.clock())

    log = log_of(stack, job_id)
    assert len(log) == MAX_PUBLISH_ATTEMPTS == 5
    assert [detail.split(": ", 1)[1] for *_, detail in log] == [
        "SNS refused. Attempt 1 of 5; next at 2026-11-29T17:21:00Z.",
        "SNS refused. Attempt 2 of 5; next at 2026-11-29T17:23:00Z.",
        "SNS refused. Attempt 3 of 5; next at 2026-11-29T17:27:00Z.",
        "SNS refused. Attempt 4 of 5; next at 2026-11-29T17:35:00Z.",
        "SNS refused. Gave up after 5 attempts.",
    ]
    # 1, 2, 4, then 8 minutes apart
    assert [int((b - a).total_seconds()) for a, b in pairwise(failed_at)] == [
        60,
        120,
        240,
        480,
    ]
    assert stack.notifier.sent == []
    job = stack.services.store.get_job(job_id)
    assert (job.sent_notifications, job.retry_notifications) == ({"JobStarting#1/Email"}, frozenset())
    assert stack.notifier.fail_next == 100 - 5


# -- SMS ceiling ------------------------------------------------------------------------------------------
def test_sms_over_the_accounts_hourly_ceiling_is_recorded_skipped(stack):
    stack.add_account("ana", "100", email=EMAIL, phone=PHONE)
    use_services(stack, sms_per_account_per_hour=2)
    jobs = [submit(stack, [{"events": ["JobStarting"], "methods": ["SMS"]}]) for _ in range(3)]

    for job_id in jobs:
        deliver(stack, job_id, "STARTING")

    assert [n.method for n in stack.notifier.sent] == ["SMS", "SMS"]
    assert log_of(stack, jobs[2]) == [
        ("JobStarting", "SMS", "skipped", "SMS skipped: the account's ceiling of 2 SMS per hour was reached")
    ]
    # The next clock hour has its own allowance
    stack.clock.advance(3600)
    fourth = submit(stack, [{"events": ["JobStarting"], "methods": ["SMS"]}])
    deliver(stack, fourth, "STARTING")
    assert len(stack.notifier.sent) == 3


# -- issue 9 item 11: a tiny threshold -------------------------------------------------------------------
def test_an_8_second_job_with_a_tiny_job_credits_used_sends_one_message_per_tick_and_none_after(stack):
    # {"code": "import time\ntime.sleep(8)\n1", "notifications": [{"events": [{"JobCreditsUsed": 0.0001}],
    # "methods": ["Email"]}]}: Running at t0, a meter tick at 5 s, Succeeded at 8 s
    stack.add_account("ana", "100", email=EMAIL)
    rules = [{"events": [{"JobCreditsUsed": 0.0001}], "methods": ["Email"]}]
    job_id, _, started = stack.start_running(
        {"code": "import time\ntime.sleep(8)\n1", "notifications": rules}, "ana"
    )
    stack.clock.advance(5)
    stack.tick()
    stack.tick()  # the same tick twice: nothing more
    progress = [n for n in stack.notifier.sent if n.job_id == job_id]
    assert [(n.event, n.subject) for n in progress] == [
        (
            "JobCreditsUsed:0.0001",
            f"remote-batch: job {job_id} has spent 0.0833 credits "
            "(833 thresholds since the last message) (Running)",
        )
    ]

    stack.clock.advance(3)
    deliver(stack, job_id, "SUCCEEDED", started_at=started, stopped_at=started + 8000)
    for _ in range(10):
        stack.clock.advance(60)
        stack.tick()

    job = stack.services.store.get_job(job_id)
    assert job.status.value == "Succeeded"
    assert [n.event for n in stack.notifier.sent if n.job_id == job_id] == ["JobCreditsUsed:0.0001"]
    assert [(r.event, r.outcome) for r in job.notification_log] == [("JobCreditsUsed:0.0001", "sent")]
