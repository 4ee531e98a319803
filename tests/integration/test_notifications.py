"""Notifications on moto: progress notifications from the meter, exactly once per key; failed and
skipped sends in ``notificationLog``; ``PUT /account/contacts`` and the email subscription; bad
notification specs at submit."""

from __future__ import annotations

import json
from collections import Counter
from decimal import Decimal

import boto3
import pytest

from functions.adapters.sns import email_topic_arn
from functions.domain.jobs import BatchJobState
from functions.domain.machine_classes import GeoZone
from tests.events import job_lifecycle

PHONE = "+15555550100"
EMAIL = "ana@example.com"
ISSUE_RULES = [
    {"events": ["Hourly", {"HoursElapsed": 2}, {"JobCreditsUsed": 20000}], "methods": ["Email", "SMS"]}
]
FIVE_MINUTES = 300


def start_running(stack, body, account_id):
    """Submit ``body`` and deliver RUNNING at the clock's now; returns the job id."""
    return stack.start_running(body, account_id)[0]


def sent_counts(stack, job_id):
    return Counter((n.event, n.method) for n in stack.notifier.sent if n.job_id == job_id)


def job_view(stack, job_id, account_id):
    status, job = stack.api("GET", f"/jobs/{job_id}", account_id=account_id)
    assert status == 200, job
    return job


# -- progress notifications through the meter ---------------------------------------------------------
def test_meter_sends_each_progress_occurrence_once_per_method(stack):
    # Given an account with email and phone, and a Memory192x1536 job Running from t0
    stack.add_account("ana", "100000", email=EMAIL, phone=PHONE)
    job_id = start_running(
        stack, {"code": "1", "machineClass": "Memory192x1536", "notifications": ISSUE_RULES}, "ana"
    )

    # When the meter ticks every 5 minutes up to 5 h 10 min, some instants twice or three times
    for step in range(1, 62 + 1):
        stack.clock.advance(FIVE_MINUTES)
        for _ in range(3 if step % 12 == 0 else 2 if step % 5 == 0 else 1):
            stack.tick()

    # Then 5 Hourly, 2 HoursElapsed:2 and floor(creditsSpent / 20000) JobCreditsUsed per method
    spent = stack.services.store.get_job(job_id).credits_spent
    assert spent == Decimal("59416.6667")  # 11,500 credits/h × 31/6 h
    credit_multiples = int(spent // 20000)
    assert credit_multiples == 2
    assert sent_counts(stack, job_id) == {
        ("Hourly", "Email"): 5,
        ("Hourly", "SMS"): 5,
        ("HoursElapsed:2", "Email"): 2,
        ("HoursElapsed:2", "SMS"): 2,
        ("JobCreditsUsed:20000", "Email"): credit_multiples,
        ("JobCreditsUsed:20000", "SMS"): credit_multiples,
    }
    assert {(n.method, n.to) for n in stack.notifier.sent} == {("Email", EMAIL), ("SMS", PHONE)}
    job = job_view(stack, job_id, "ana")
    assert len(job["notificationLog"]) == 18
    assert {entry["outcome"] for entry in job["notificationLog"]} == {"sent"}
    assert {(entry["method"], entry["to"]) for entry in job["notificationLog"]} == {
        ("Email", "a***@example.com"),
        ("SMS", "+1******0100"),
    }
    # and a tick at the same instant again sends nothing more
    stack.tick()
    assert len(stack.notifier.sent) == 18


def test_failed_send_is_logged_released_and_sent_by_the_next_tick_once(stack):
    stack.add_account("ana", "100000", email=EMAIL, phone=PHONE)
    rules = [{"events": ["Hourly"], "methods": ["Email", "SMS"]}]
    job_id = start_running(stack, {"code": "1", "notifications": rules}, "ana")
    # A tick at 55 min reconciles the quiet job, so the ticks at 60 and 65 min only meter it.
    stack.clock.advance(55 * 60)
    stack.tick()
    stack.clock.advance(FIVE_MINUTES)

    # When SNS refuses the first of the two Hourly#1 sends
    stack.notifier.fail_next = 1
    assert stack.tick()["reconciled"] == 0

    # Then the email is logged as failed and its key released; the SMS went out
    assert [(n.event, n.method) for n in stack.notifier.sent] == [("Hourly", "SMS")]
    job = job_view(stack, job_id, "ana")
    assert [(e["event"], e["method"], e["outcome"], e["to"]) for e in job["notificationLog"]] == [
        ("Hourly", "Email", "failed", "a***@example.com"),
        ("Hourly", "SMS", "sent", "+1******0100"),
    ]
    assert job["notificationLog"][0]["detail"].startswith("Email failed:")
    assert stack.services.store.get_job(job_id).sent_notifications == {"Hourly#1/SMS"}

    # When the meter ticks again, twice
    stack.clock.advance(FIVE_MINUTES)
    stack.tick()
    stack.tick()

    # Then the email went out exactly once
    assert [(n.event, n.method) for n in stack.notifier.sent] == [("Hourly", "SMS"), ("Hourly", "Email")]
    job = job_view(stack, job_id, "ana")
    assert [(e["method"], e["outcome"]) for e in job["notificationLog"]] == [
        ("Email", "failed"),
        ("SMS", "sent"),
        ("Email", "sent"),
    ]
    assert stack.services.store.get_job(job_id).sent_notifications == {"Hourly#1/SMS", "Hourly#1/Email"}


def test_failed_sends_on_a_reconciling_tick_are_left_to_the_next_tick(stack):
    # Given a quiet job (no event for an hour: this tick reconciles it) that owes Hourly#1 twice,
    # and another quiet job of the same account
    stack.add_account("ana", "100000", email=EMAIL, phone=PHONE)
    rules = [{"events": ["Hourly"], "methods": ["Email", "SMS"]}]
    job_id = start_running(stack, {"code": "1", "notifications": rules}, "ana")
    other_id = start_running(stack, {"code": "1", "notifications": "None"}, "ana")
    stack.clock.advance(3600)

    # When SNS refuses the meter's two sends
    stack.notifier.fail_next = 2
    report = stack.tick()

    # Then the tick still completes and reconciles both jobs; the reconciliation does not send the
    # failed ones again at once (they wait their backoff, 1 minute): the next tick sends them
    assert report["reconciled"] == 2
    assert stack.notifier.sent == []
    assert stack.services.store.get_job(other_id).last_event_at == stack.clock()
    stack.clock.advance(FIVE_MINUTES)
    stack.tick()
    assert sorted((n.event, n.method) for n in stack.notifier.sent) == [
        ("Hourly", "Email"),
        ("Hourly", "SMS"),
    ]
    assert stack.services.store.get_job(job_id).sent_notifications == {"Hourly#1/SMS", "Hourly#1/Email"}


def test_notifications_none_sends_nothing_for_a_whole_lifecycle(stack):
    stack.add_account("ana", "100000", email=EMAIL, phone=PHONE)
    status, job = stack.api(
        "POST",
        "/jobs",
        body={"code": "1", "machineClass": "Memory192x1536", "notifications": "None"},
        account_id="ana",
    )
    assert status == 202, job
    assert job["notifications"] == []
    job_id = job["jobId"]
    batch_id = stack.services.store.get_job(job_id).batch_job_id
    t0 = int(stack.clock().timestamp() * 1000)
    stopped = t0 + 3 * 3600 * 1000
    *until_running, final = job_lifecycle(job_id, batch_id, created_at=t0, started_at=t0, stopped_at=stopped)
    for event in until_running:
        stack.deliver(event)
    stack.batch[GeoZone.UNITED_STATES].known[batch_id] = BatchJobState(
        batch_job_id=batch_id,
        job_name=job_id,
        status="RUNNING",
        status_reason=None,
        created_at_ms=t0,
        started_at_ms=t0,
        stopped_at_ms=None,
        exit_code=None,
        log_stream_name="s",
        attempt_count=0,
    )
    for _ in range(3 * 4):
        stack.clock.advance(15 * 60)
        stack.tick()
    stack.deliver(final)
    stack.tick()

    done = job_view(stack, job_id, "ana")
    assert done["status"] == "Succeeded"
    assert Decimal(str(done["creditsSpent"])) == Decimal("34500")  # crossed 20,000: Automatic would tell
    assert stack.notifier.sent == []
    assert done["notificationLog"] == []


def test_missing_phone_skips_sms_and_records_it(stack):
    # Given dev, who has an email and no phone
    job_id = start_running(
        stack,
        {"code": "1", "notifications": [{"events": ["JobStarted"], "methods": ["Email", "SMS"]}]},
        "dev",
    )

    job = job_view(stack, job_id, "dev")

    assert [(n.event, n.method, n.to) for n in stack.notifier.sent] == [
        ("JobStarted", "Email", "dev@example.com")
    ]
    assert [
        (e["event"], e["method"], e["outcome"], e["to"], e["detail"]) for e in job["notificationLog"]
    ] == [
        ("JobStarted", "Email", "sent", "d***@example.com", "Email sent"),
        ("JobStarted", "SMS", "skipped", None, "SMS skipped: no phone"),
    ]


# -- contacts ---------------------------------------------------------------------------------------------
def email_subscriptions(stack, account_id):
    """The account's email topics (one per address) and their subscriptions: (protocol, endpoint,
    filter policy) triples, from every topic under the deployment's prefix whose name is the account's."""
    sns = boto3.client("sns", region_name=stack.settings.home_region)
    prefix = stack.settings.email_topic_arn_prefix
    found = []
    for page in sns.get_paginator("list_topics").paginate():
        for topic in page["Topics"]:
            arn = topic["TopicArn"]
            if not arn.startswith(prefix):
                continue
            listed = sns.list_subscriptions_by_topic(TopicArn=arn)["Subscriptions"]
            for subscription in listed:
                if arn != email_topic_arn(prefix, account_id, subscription["Endpoint"]):
                    continue
                attributes = sns.get_subscription_attributes(SubscriptionArn=subscription["SubscriptionArn"])
                policy = json.loads(attributes["Attributes"].get("FilterPolicy", "{}"))
                found.append((subscription["Protocol"], subscription["Endpoint"], policy))
    return found


@pytest.mark.parametrize("phone", ["5555550100", "+0123", "+1234567890123456", "+1 555"])
def test_contacts_reject_a_phone_that_is_not_e164(stack, phone):
    status, error = stack.api("PUT", "/account/contacts", body={"phone": phone})
    assert status == 400, error
    assert error["error"]["field"] == "phone"


@pytest.mark.parametrize("email", ["not-an-email", "a@b", "two@@example.com", "a b@example.com"])
def test_contacts_reject_a_bad_email(stack, email):
    status, error = stack.api("PUT", "/account/contacts", body={"email": email})
    assert status == 400, error
    assert error["error"]["field"] == "email"


def test_contacts_set_keep_and_clear_with_the_email_subscription(stack):
    stack.add_account("ana", "10")

    # When ana sets an email and a phone
    status, account = stack.api(
        "PUT", "/account/contacts", body={"email": EMAIL, "phone": PHONE}, account_id="ana"
    )

    # Then the account says so, and its own topic has one email subscription, with no filter policy
    assert status == 200, account
    assert (account["accountId"], account["email"], account["phone"]) == ("ana", EMAIL, PHONE)
    assert account["emailStatus"] in ("pending", "confirmed")
    assert email_subscriptions(stack, "ana") == [("email", EMAIL, {})]
    status, shown = stack.api("GET", "/account", account_id="ana")
    assert status == 200
    assert (shown["email"], shown["phone"]) == (EMAIL, PHONE)
    assert shown["emailStatus"] in ("pending", "confirmed")

    # A key left out keeps its value
    status, account = stack.api("PUT", "/account/contacts", body={"phone": "+447700900123"}, account_id="ana")
    assert status == 200, account
    assert (account["email"], account["phone"]) == (EMAIL, "+447700900123")
    assert email_subscriptions(stack, "ana") == [("email", EMAIL, {})]
    status, account = stack.api("PUT", "/account/contacts", body={}, account_id="ana")
    assert (account["email"], account["phone"]) == (EMAIL, "+447700900123")

    # Clearing the email clears its status and removes the subscription; the phone stays
    status, account = stack.api("PUT", "/account/contacts", body={"email": None}, account_id="ana")
    assert status == 200, account
    assert (account["email"], account["phone"], account["emailStatus"]) == (None, "+447700900123", "none")
    status, shown = stack.api("GET", "/account", account_id="ana")
    assert (shown["email"], shown["emailStatus"]) == (None, "none")
    assert email_subscriptions(stack, "ana") == []


# -- bad specs at submit ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("notifications", "field"),
    [
        ([{"events": ["Weekly"], "methods": ["Email"]}], "notifications[0].events[0]"),
        ([{"events": ["Hourly"], "methods": ["Email", "Pigeon"]}], "notifications[0].methods[1]"),
        ([{"events": ["Hourly", {"HoursElapsed": 0}]}], "notifications[0].events[1].HoursElapsed"),
        (
            [{"events": ["Hourly"]}, {"events": [{"JobCreditsUsed": -5}], "methods": ["SMS"]}],
            "notifications[1].events[0].JobCreditsUsed",
        ),
    ],
)
def test_bad_notification_spec_is_400_pointing_into_it(stack, notifications, field):
    status, error = stack.api("POST", "/jobs", body={"code": "1", "notifications": notifications})
    assert status == 400, error
    assert error["error"]["code"] == "ValidationError"
    assert error["error"]["field"] == field
    assert stack.batch[GeoZone.UNITED_STATES].submissions == []


# -- email at scale: a topic per account ------------------------------------------------------------------
def test_email_contacts_of_more_accounts_than_a_topic_has_filter_policies_need_none(stack):
    # SNS allows 200 filter policies per topic by default; 250 accounts set an email
    from functions.logic.accounts import set_contacts

    accounts = [f"user{i:03d}" for i in range(250)]
    for account_id in accounts:
        set_contacts(stack.services, account_id, now=stack.clock(), email=f"{account_id}@example.com")

    # Then each account has its own topic under the prefix with exactly its one address, and no
    # subscription anywhere carries a filter policy
    sns = boto3.client("sns", region_name=stack.settings.home_region)
    prefix = stack.settings.email_topic_arn_prefix
    topics = [
        t["TopicArn"]
        for page in sns.get_paginator("list_topics").paginate()
        for t in page["Topics"]
        if t["TopicArn"].startswith(prefix)
    ]
    assert sorted(topics) == sorted(email_topic_arn(prefix, a, f"{a}@example.com") for a in accounts)
    endpoints = []
    for arn in topics:
        listed = sns.list_subscriptions_by_topic(TopicArn=arn)["Subscriptions"]
        assert len(listed) == 1
        attributes = sns.get_subscription_attributes(SubscriptionArn=listed[0]["SubscriptionArn"])[
            "Attributes"
        ]
        assert "FilterPolicy" not in attributes
        endpoints.append(listed[0]["Endpoint"])
    assert sorted(endpoints) == sorted(f"{a}@example.com" for a in accounts)


def test_email_goes_only_to_the_accounts_own_topic_and_a_replaced_address_loses_its_topic(stack):
    from moto.sns.models import sns_backends

    from functions.adapters.sns import SnsNotifier
    from functions.logic.accounts import set_contacts
    from functions.ports import OutgoingNotification

    prefix = stack.settings.email_topic_arn_prefix
    set_contacts(stack.services, "ana", now=stack.clock(), email="ana@example.com")
    set_contacts(stack.services, "bob", now=stack.clock(), email="bob@example.com")
    notifier = SnsNotifier(boto3.client("sns", region_name="us-east-1"), prefix)
    notifier.send(
        OutgoingNotification("j1", "ana", "JobStarted", "Email", "ana@example.com", "s", "m", stack.clock())
    )
    backend = sns_backends["123456789012"]["us-east-1"]
    ana_topic = email_topic_arn(prefix, "ana", "ana@example.com")
    bob_topic = email_topic_arn(prefix, "bob", "bob@example.com")
    assert len(backend.topics[ana_topic].sent_notifications) == 1
    assert backend.topics[bob_topic].sent_notifications == []

    # When ana replaces her address, the old topic (and any pending subscription on it) is gone
    set_contacts(stack.services, "ana", now=stack.clock(), email="ana2@example.com")
    assert ana_topic not in backend.topics
    assert email_subscriptions(stack, "ana") == [("email", "ana2@example.com", {})]
    # Clearing it removes the new one too
    set_contacts(stack.services, "ana", now=stack.clock(), email=None)
    assert email_topic_arn(prefix, "ana", "ana2@example.com") not in backend.topics
    assert email_subscriptions(stack, "bob") == [("email", "bob@example.com", {})]
