"""Credits acceptance: constraints, running out of credits, usage and grants, over HTTP (meter tick 1 s)."""

from __future__ import annotations

import time
import uuid
from datetime import datetime
from decimal import Decimal
from typing import Any

import psutil
import pytest
import requests

from tests.e2e.conftest import Client, LocalStackProcess, wait_for

SLEEPER = "import time; time.sleep(600)"
# docs/http-api.md's fields, and `unbilled` (this service's extension, CHANGELOG.md).
# docs/http-api.md's fields, plus the extensions: unbilled (issue 4), compute and note (dedicated compute,
# issue 16).
LEDGER_FIELDS = {"at", "kind", "credits", "jobId", "balanceAfter", "unbilled", "compute", "note"}


def _credits(value: Any) -> Decimal:
    """A credits amount from a body parsed with ``parse_float=Decimal``: a JSON number, never a string."""
    assert isinstance(value, int | Decimal) and not isinstance(value, bool), f"not a JSON number: {value!r}"
    return Decimal(value)


def _assert_error(response: requests.Response, status: int, code: str, field: Any = ...) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = Client.body(response)
    assert set(body) == {"error"}, body
    assert set(body["error"]) == {"code", "message", "field"}, body
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"], body
    if field is not ...:
        assert body["error"]["field"] == field, body
    error: dict[str, Any] = body["error"]
    return error


def _job_processes(job_id: str) -> list[psutil.Process]:
    """Every process whose environment has ``REMOTE_BATCH_JOB_ID=<job_id>``."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("REMOTE_BATCH_JOB_ID") == job_id:
                found.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def _new_account(stack: LocalStackProcess, admin: Client, credits: int) -> Client:
    account_id = f"credits-{uuid.uuid4().hex[:12]}"
    response = admin.post(
        "/admin/accounts", json={"accountId": account_id, "email": None, "credits": credits}
    )
    assert response.status_code == 201, response.text
    body = Client.body(response)
    assert body["accountId"] == account_id, body
    assert isinstance(body["token"], str) and body["token"], body
    return Client(stack.endpoint, body["token"])


def _usage(client: Client, **params: str) -> dict[str, Any]:
    response = client.get("/account/usage", params=params)
    assert response.status_code == 200, response.text
    usage: dict[str, Any] = Client.body(response)
    return usage


def _at(entry: dict[str, Any]) -> datetime:
    assert isinstance(entry["at"], str) and entry["at"].endswith("Z"), entry
    return datetime.fromisoformat(entry["at"])


def _run_to_termination(client: Client, body: dict[str, Any], within: float) -> dict[str, Any]:
    """Submit, see its worker process, wait for ``Terminated`` within ``within`` s of submission."""
    submitted = time.monotonic()
    job = client.submit(body)
    job_id = job["jobId"]
    wait_for(lambda: _job_processes(job_id), within, f"a process of job {job_id}")
    remaining = within - (time.monotonic() - submitted)
    done = client.wait_status(job_id, timeout=max(remaining, 0.1))
    assert done["status"] == "Terminated", done
    wait_for(lambda: not _job_processes(job_id), 5, f"no process of job {job_id} left", interval=0.5)
    return done


def test_credit_constraint_terminates_and_caps_the_charge(stack: LocalStackProcess, admin: Client) -> None:
    # Given an account with 100 credits
    client = _new_account(stack, admin, 100)
    before = client.balance()
    assert before == Decimal("100")

    # When a Basic1x8 sleeper may spend 0.05 credits (3 s at 60 credits/h)
    done = _run_to_termination(
        client, {"code": SLEEPER, "machineClass": "Basic1x8", "creditConstraint": 0.05}, within=15
    )

    # Then it ends at the cap, without output, and exactly the cap is charged
    assert done["statusReason"] == "CreditConstraint of 0.05 credits reached", done
    assert _credits(done["creditsSpent"]) == Decimal("0.05"), done
    assert _credits(done["creditConstraint"]) == Decimal("0.05"), done
    _assert_error(client.get(f"/jobs/{done['jobId']}/result"), 409, "NoOutput")
    assert client.balance() == before - Decimal("0.05")
    charges = [e for e in _usage(client)["entries"] if e["kind"] == "charge"]
    assert [(e["jobId"], _credits(e["credits"])) for e in charges] == [(done["jobId"], Decimal("0.05"))]


def test_time_constraint_terminates_and_charges_the_minimum(stack: LocalStackProcess, admin: Client) -> None:
    client = _new_account(stack, admin, 100)
    before = client.balance()

    done = _run_to_termination(
        client, {"code": SLEEPER, "machineClass": "Basic1x8", "timeConstraint": 3}, within=10
    )

    assert done["statusReason"] == "TimeConstraint of 3 s reached", done
    assert _credits(done["creditsSpent"]) == Decimal("1"), done
    assert client.balance() == before - Decimal("1")
    charges = [e for e in _usage(client)["entries"] if e["kind"] == "charge"]
    assert [(e["jobId"], _credits(e["credits"])) for e in charges] == [(done["jobId"], Decimal("1"))]


@pytest.mark.slow
def test_account_out_of_credits_then_top_up(stack: LocalStackProcess, admin: Client) -> None:
    # Given an account with 0.02 credits running two sleepers
    account_id = f"credits-{uuid.uuid4().hex[:12]}"
    created = admin.post("/admin/accounts", json={"accountId": account_id, "email": None, "credits": 0.02})
    assert created.status_code == 201, created.text
    assert Client.body(created)["accountId"] == account_id
    client = Client(stack.endpoint, Client.body(created)["token"])
    assert client.balance() == Decimal("0.02")
    jobs = [client.submit({"code": SLEEPER}) for _ in range(2)]
    ids = [job["jobId"] for job in jobs]

    # Then both end "Account out of credits" and the balance never goes below 0
    seen: list[Decimal] = []

    def all_final() -> list[dict[str, Any]] | None:
        seen.append(client.balance())
        states = [client.job(job_id) for job_id in ids]
        return states if all(s["status"] in ("Succeeded", "Terminated") for s in states) else None

    finals = wait_for(all_final, 15, "both jobs of the 0.02-credit account to be final")
    for final in finals:
        assert final["status"] == "Terminated", final
        assert final["statusReason"] == "Account out of credits", final
    seen.append(client.balance())
    assert all(balance >= 0 for balance in seen), seen
    assert seen[-1] == Decimal("0"), seen
    assert sum(_credits(f["creditsSpent"]) for f in finals) == Decimal("0.02"), finals
    for job_id in ids:  # wait_for polls before the loop moves on: the lambda sees this job_id
        wait_for(lambda: not _job_processes(job_id), 5, f"no process of job {job_id} left")

    usage = _usage(client)
    assert all(set(e) == LEDGER_FIELDS for e in usage["entries"]), usage
    assert all(_credits(e["balanceAfter"]) >= 0 for e in usage["entries"]), usage
    charges = [e for e in usage["entries"] if e["kind"] == "charge"]
    assert {e["jobId"] for e in charges} <= set(ids), usage
    assert sum(_credits(e["credits"]) for e in charges) == Decimal("0.02"), usage
    assert _credits(usage["totalCharged"]) == Decimal("0.02"), usage

    # And a third submit is refused
    _assert_error(client.post("/jobs", json={"code": SLEEPER}), 402, "InsufficientCredits", None)

    # When an admin grants 5 credits
    granted = admin.post(f"/admin/accounts/{account_id}/credits", json={"credits": 5, "reason": "top-up"})

    # Then the balance is exactly 5 and submits are accepted again
    assert granted.status_code == 200, granted.text
    assert _credits(Client.body(granted)["creditBalance"]) == Decimal("5"), granted.text
    assert client.balance() == Decimal("5")
    grant = _usage(client)["entries"][0]
    assert grant["kind"] == "grant" and grant["jobId"] is None, grant
    assert _credits(grant["credits"]) == Decimal("5") and _credits(grant["balanceAfter"]) == Decimal("5"), (
        grant
    )
    accepted = client.post("/jobs", json={"code": SLEEPER})
    assert accepted.status_code == 202, accepted.text
    job_id = Client.body(accepted)["jobId"]
    aborted = client.post(f"/jobs/{job_id}/abort")
    assert aborted.status_code == 202, aborted.text
    assert client.wait_status(job_id, timeout=15)["statusReason"] == "Aborted by user"


def test_dev_usage_newest_first_with_total(dev: Client) -> None:
    # Given two finished jobs of the dev account
    first = dev.submit({"code": "2 + 2"})
    second = dev.submit({"code": "3 + 3"})
    for job in (first, second):
        assert dev.wait_status(job["jobId"], timeout=30)["status"] == "Succeeded"

    # Then the usage lists their charges, newest first, each entry per docs/http-api.md
    usage = _usage(dev)
    # nextToken: the usage is paged (docs/http-api.md); these two charges fit one page.
    assert set(usage) == {"entries", "totalCharged", "nextToken"}, usage
    assert usage["nextToken"] is None
    entries = usage["entries"]
    for entry in entries:
        assert set(entry) == LEDGER_FIELDS, entry
        assert entry["kind"] in ("charge", "grant", "refund"), entry
        assert _credits(entry["credits"]) > 0, entry
        _credits(entry["balanceAfter"])
        assert entry["jobId"] is None or isinstance(entry["jobId"], str), entry
        if entry["kind"] == "charge":
            assert entry["jobId"], entry
    times = [_at(e) for e in entries]
    assert times == sorted(times, reverse=True), times
    mine = {e["jobId"]: e for e in entries if e["jobId"] in (first["jobId"], second["jobId"])}
    assert set(mine) == {first["jobId"], second["jobId"]}, entries
    assert all(e["kind"] == "charge" and _credits(e["credits"]) == Decimal("1") for e in mine.values()), mine
    charged = sum(_credits(e["credits"]) for e in entries if e["kind"] == "charge")
    if not any(e["kind"] == "refund" for e in entries):
        assert _credits(usage["totalCharged"]) == charged, usage

    # And `from` filters by time: from the first submission on, both charges and nothing older
    recent = _usage(dev, **{"from": first["submittedAt"]})
    assert {first["jobId"], second["jobId"]} <= {e["jobId"] for e in recent["entries"]}, recent
    assert all(_at(e) >= datetime.fromisoformat(first["submittedAt"]) for e in recent["entries"]), recent

    # And a malformed `from` is a validation error naming it
    _assert_error(dev.get("/account/usage", params={"from": "garbage"}), 400, "ValidationError", "from")


def test_granting_credits_needs_the_admin_role(dev: Client) -> None:
    before = dev.balance()

    response = dev.post("/admin/accounts/dev/credits", json={"credits": 5, "reason": "self-service"})

    _assert_error(response, 403, "Forbidden")
    assert dev.balance() == before
