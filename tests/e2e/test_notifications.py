"""Issue 4 acceptance on a local stack whose bus delivers every Batch event twice: each (job, event
occurrence, method) reaches the outbox once; ``"None"`` sends nothing; a missing phone is skipped and
recorded while the email still goes out."""

from __future__ import annotations

import re
import time
from collections import Counter
from typing import Any

import pytest

from tests.e2e.conftest import Client, LocalStackProcess, wait_for

PHONE = "+15555550100"
IDLE_SECONDS = 2.0
STATUS_IN_SUBJECT = re.compile(r"\((\w+)\)$")


def new_account(stack: LocalStackProcess, account_id: str, email: str, phone: str | None) -> Client:
    """An account made with the admin token, its contacts set with its own token."""
    admin = stack.client("admin")
    created = admin.post("/admin/accounts", json={"accountId": account_id, "email": None, "credits": 1000})
    assert created.status_code == 201, created.text
    client = Client(stack.endpoint, created.json()["token"])
    contacts = {"email": email, "phone": phone}
    response = client.request("PUT", "/account/contacts", json=contacts)
    assert response.status_code == 200, response.text
    assert (response.json()["email"], response.json()["phone"]) == (email, phone)
    return client


def settled_outbox(stack: LocalStackProcess, job_id: str) -> list[dict[str, Any]]:
    """The job's outbox lines once they have not changed for ``IDLE_SECONDS`` (the bus is idle)."""
    last = stack.outbox(job_id)
    quiet_since = time.monotonic()
    deadline = quiet_since + 20
    while time.monotonic() - quiet_since < IDLE_SECONDS:
        assert time.monotonic() < deadline, "the outbox kept changing for 20 s"
        time.sleep(0.2)
        lines = stack.outbox(job_id)
        if lines != last:
            last, quiet_since = lines, time.monotonic()
    return last


@pytest.fixture(scope="module")
def ana(duplicating_stack: LocalStackProcess) -> Client:
    """An account with an email and a phone on the duplicating stack."""
    return new_account(duplicating_stack, "ana", "ana@example.com", PHONE)


def test_every_status_change_once_per_method_despite_duplicate_events(
    duplicating_stack: LocalStackProcess, ana: Client
) -> None:
    # Given events delivered twice, when ana's job asks for every status change by email and SMS
    rules = [{"events": ["JobStatusChanged"], "methods": ["Email", "SMS"]}]
    job = ana.submit({"code": "2 + 2", "notifications": rules})

    done = ana.wait_status(job["jobId"], timeout=30)
    lines = settled_outbox(duplicating_stack, job["jobId"])

    # Then the outbox holds Starting, Running and Succeeded once per method, and nothing else
    assert done["status"] == "Succeeded", done
    seen = Counter(
        (line["event"], line["method"], STATUS_IN_SUBJECT.search(line["subject"]).group(1))  # type: ignore[union-attr]
        for line in lines
    )
    assert seen == {
        ("JobStatusChanged", method, status): 1
        for method in ("Email", "SMS")
        for status in ("Starting", "Running", "Succeeded")
    }
    assert len(lines) == 6
    assert {(line["method"], line["to"]) for line in lines} == {("Email", "ana@example.com"), ("SMS", PHONE)}
    log = ana.job(job["jobId"])["notificationLog"]
    assert Counter((e["method"], e["outcome"]) for e in log) == {("Email", "sent"): 3, ("SMS", "sent"): 3}


def test_notifications_none_sends_nothing(duplicating_stack: LocalStackProcess, ana: Client) -> None:
    job = ana.submit({"code": "2 + 2", "notifications": "None"})

    done = ana.wait_status(job["jobId"], timeout=30)

    assert done["status"] == "Succeeded", done
    assert settled_outbox(duplicating_stack, job["jobId"]) == []
    assert ana.job(job["jobId"])["notificationLog"] == []


def test_account_without_phone_gets_email_and_sms_is_skipped(duplicating_stack: LocalStackProcess) -> None:
    bo = new_account(duplicating_stack, "bo", "bo@example.com", None)
    rules = [{"events": ["JobCompleted"], "methods": ["Email", "SMS"]}]
    job = bo.submit({"code": "2 + 2", "notifications": rules})

    done = bo.wait_status(job["jobId"], timeout=30)
    lines = settled_outbox(duplicating_stack, job["jobId"])

    assert done["status"] == "Succeeded", done
    assert [(line["event"], line["method"], line["to"]) for line in lines] == [
        ("JobCompleted", "Email", "bo@example.com")
    ]
    log = wait_for(lambda: bo.job(job["jobId"])["notificationLog"], 5, "the job's notificationLog")
    assert sorted((e["event"], e["method"], e["outcome"], e["to"], e["detail"]) for e in log) == [
        ("JobCompleted", "Email", "sent", "b***@example.com", "Email sent"),
        ("JobCompleted", "SMS", "skipped", None, "SMS skipped: no phone"),
    ]


@pytest.mark.slow
def test_a_tiny_job_credits_used_threshold_does_not_flood(
    duplicating_stack: LocalStackProcess, ana: Client
) -> None:
    # Issue 9 item 11: an 8-second job with {"JobCreditsUsed": 0.0001} (10,000 thresholds per credit)
    # on a stack whose meter ticks every second
    rules = [{"events": [{"JobCreditsUsed": 0.0001}], "methods": ["Email"]}]
    job = ana.submit({"code": "import time\ntime.sleep(8)\n1", "notifications": rules})

    done = ana.wait_status(job["jobId"], timeout=60)
    lines = settled_outbox(duplicating_stack, job["jobId"])
    time.sleep(3)  # a few more meter ticks after the end

    # Then at most one message per meter tick while it ran (each saying how many thresholds it
    # covers), none stamped after the job completed, and nothing more later
    assert done["status"] == "Succeeded", done
    assert 1 <= len(lines) <= 12, [line["subject"] for line in lines]
    assert all(
        "thresholds since the last message" in line["subject"] for line in lines if line is not lines[0]
    )
    assert all(line["at"] <= done["completedAt"] for line in lines), (lines, done["completedAt"])
    assert duplicating_stack.outbox(job["jobId"]) == lines
    log = ana.job(job["jobId"])["notificationLog"]
    assert {(e["event"], e["outcome"]) for e in log} == {("JobCreditsUsed:0.0001", "sent")}
    assert len(log) == len(lines)
