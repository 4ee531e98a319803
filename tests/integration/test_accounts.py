"""Account routes on moto: usage from the ledger, admin credit grants."""

from __future__ import annotations

import base64
import json
from decimal import Decimal

import pytest

from tests.events import job_lifecycle

T0 = 1_796_000_000_000


def run_job(stack, seconds):
    _, job = stack.api("POST", "/jobs", body={"code": "1"})
    batch_id = stack.services.store.get_job(job["jobId"]).batch_job_id
    stack.clock.advance(60)
    for event in job_lifecycle(
        job["jobId"], batch_id, created_at=T0, started_at=T0, stopped_at=T0 + seconds * 1000
    ):
        stack.deliver(event)
    return job["jobId"]


def test_usage_lists_entries_newest_first_with_balance_after_and_total(stack):
    first = run_job(stack, 30)  # 1 credit (minimum)
    second = run_job(stack, 90)  # 1.5 credits
    status, usage = stack.api("GET", "/account/usage")
    assert status == 200
    assert [(e["kind"], e["jobId"], e["credits"], e["balanceAfter"]) for e in usage["entries"]] == [
        ("charge", second, Decimal("1.5"), Decimal("9997.5")),
        ("charge", first, Decimal("1"), Decimal("9999")),
        ("grant", None, Decimal("10000"), Decimal("10000")),
    ]
    assert usage["totalCharged"] == Decimal("2.5")
    assert [e["unbilled"] for e in usage["entries"]] == [Decimal(0)] * 3
    assert usage["entries"][0]["at"] == "2026-11-30T00:54:50Z"  # the charge is dated by stoppedAt


def test_usage_window_and_bad_times(stack):
    run_job(stack, 30)
    status, usage = stack.api("GET", "/account/usage", query={"from": "2026-11-30T00:00:00Z"})
    assert status == 200
    assert [e["kind"] for e in usage["entries"]] == ["charge"]
    status, usage = stack.api("GET", "/account/usage", query={"to": "2026-11-30T00:00:00Z"})
    assert [e["kind"] for e in usage["entries"]] == ["grant"]
    assert usage["totalCharged"] == Decimal("0")
    for query, field in [
        ({"from": "soon"}, "from"),
        ({"to": "2026-13-01"}, "to"),
        ({"from": "2026-12-01T00:00:00Z", "to": "2026-11-01T00:00:00Z"}, "from"),
    ]:
        status, error = stack.api("GET", "/account/usage", query=query)
        assert status == 400, query
        assert error["error"]["field"] == field


def test_usage_pages_by_limit_and_their_totals_add_up_to_the_period(stack):
    # Given charges and grants in the ledger, read back two entries a page
    jobs = [run_job(stack, seconds) for seconds in (30, 90, 120, 45)]
    everything = stack.services.store.list_ledger("dev", None, None)
    pages, token = [], None
    while True:
        status, page = stack.api(
            "GET", "/account/usage", query={"limit": "2", **({"nextToken": token} if token else {})}
        )
        assert status == 200, page
        assert len(page["entries"]) <= 2
        pages.append(page)
        token = page["nextToken"]
        if token is None:
            break

    listed = [e["jobId"] for page in pages for e in page["entries"]]
    assert listed == [e.job_id for e in everything]
    assert set(jobs) <= set(listed)
    assert sum((page["totalCharged"] for page in pages), Decimal(0)) == Decimal("5.5")
    key = {"accountId": "dev", "entryId": "\ud800", "at": "0"}  # a lone surrogate DynamoDB cannot take
    for token in ("e30=", base64.urlsafe_b64encode(json.dumps(key).encode()).decode()):
        status, error = stack.api("GET", "/account/usage", query={"nextToken": token})
        assert (status, error["error"]["field"]) == (400, "nextToken")


def test_a_usage_token_of_another_account_is_refused(stack):
    stack.add_account("other", "5")
    run_job(stack, 30)
    _, page = stack.api("GET", "/account/usage", query={"limit": "1"})
    assert page["nextToken"]

    status, error = stack.api(
        "GET", "/account/usage", account_id="other", query={"nextToken": page["nextToken"]}
    )

    assert (status, error["error"]["field"]) == (400, "nextToken")


def test_admin_grants_credits_with_a_grant_entry(stack):
    stack.add_account("admin", "0")
    stack.add_account("alice", "0")
    status, account = stack.api(
        "POST",
        "/admin/accounts/alice/credits",
        body={"credits": 12.5, "reason": "welcome"},
        account_id="admin",
        groups="admin",
    )
    assert status == 200
    assert account["creditBalance"] == Decimal("12.5")
    status, usage = stack.api("GET", "/account/usage", account_id="alice")
    assert [(e["kind"], e["credits"], e["balanceAfter"]) for e in usage["entries"]] == [
        ("grant", Decimal("12.5"), Decimal("12.5"))
    ]
    # The account that had 0 can submit again.
    assert stack.api("POST", "/jobs", body={"code": "1"}, account_id="alice")[0] == 202


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"credits": 0, "reason": "x"}, "credits"),
        ({"credits": -1, "reason": "x"}, "credits"),
        ({"credits": 1.00001, "reason": "x"}, "credits"),
        ({"credits": 1}, "reason"),
        ({"credits": 1, "reason": ""}, "reason"),
    ],
)
def test_bad_grants_are_400(stack, body, field):
    stack.add_account("admin", "0")
    status, error = stack.api(
        "POST", "/admin/accounts/dev/credits", body=body, account_id="admin", groups="admin"
    )
    assert status == 400
    assert error["error"]["field"] == field
    assert stack.balance("dev") == Decimal("10000")


def test_grants_need_the_admin_role_and_an_existing_account(stack):
    status, error = stack.api("POST", "/admin/accounts/dev/credits", body={"credits": 5, "reason": "me"})
    assert status == 403
    assert error["error"]["code"] == "Forbidden"
    assert stack.balance("dev") == Decimal("10000")
    stack.add_account("admin", "0")
    status, error = stack.api(
        "POST",
        "/admin/accounts/nobody/credits",
        body={"credits": 5, "reason": "x"},
        account_id="admin",
        groups="admin",
    )
    assert status == 404
