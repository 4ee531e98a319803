"""Fleet control, audited and idempotent admin actions, and the per-account request limit, against
the local stack over HTTP (issue 15 item 3)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest

from tests.e2e.conftest import Client, LocalStackProcess, _free_port, wait_for

SLEEP_CODE = "import time\ntime.sleep({seconds})\n{value}"
CLASS_PATH = "/admin/machine-classes/Basic2x8/zones/EuropeanUnion"
REASON = "Spot capacity short in eu-central-1: back at 18:00 UTC"


def _class_state(admin: Client, machine_class: str, zone: str) -> dict[str, Any]:
    response = admin.get("/admin/machine-classes")
    assert response.status_code == 200, response.text
    found = [
        c
        for c in Client.body(response)["machineClasses"]
        if c["machineClass"] == machine_class and c["geoZone"] == zone
    ]
    assert len(found) == 1, found
    state: dict[str, Any] = found[0]
    return state


def _audit(admin: Client, limit: int = 20) -> list[dict[str, Any]]:
    response = admin.get("/admin/audit", params={"limit": str(limit)})
    assert response.status_code == 200, response.text
    entries: list[dict[str, Any]] = Client.body(response)["entries"]
    return entries


def test_a_disabled_class_refuses_submits_with_the_reason_lets_running_jobs_finish_and_comes_back(
    dev: Client, admin: Client
) -> None:
    # Given a Basic2x8 job running in EuropeanUnion
    body = {
        "code": SLEEP_CODE.format(seconds=4, value=7),
        "machineClass": "Basic2x8",
        "geoZone": "EuropeanUnion",
    }
    running = dev.submit(body)
    dev.wait_status(running["jobId"], ("Running",), timeout=60)

    # When an operator takes Basic2x8 out of service in EuropeanUnion
    disabled = admin.post(f"{CLASS_PATH}/disable", json={"reason": REASON})

    # Then the class shows DISABLED with the reason, its Batch queue too
    assert disabled.status_code == 200, disabled.text
    state = Client.body(disabled)
    assert (state["state"], state["reason"], state["queueState"]) == ("DISABLED", REASON, "DISABLED"), state
    assert state["changedBy"] == "admin", state
    listed = _class_state(admin, "Basic2x8", "EuropeanUnion")
    assert (listed["state"], listed["reason"]) == ("DISABLED", REASON), listed
    assert listed["runningJobs"] >= 1, listed

    # And a submit for it answers 503 ClassUnavailable with the operator's reason
    refused = dev.post("/jobs", json=body)
    assert refused.status_code == 503, refused.text
    error = Client.body(refused)["error"]
    assert error["code"] == "ClassUnavailable", error
    assert error["message"] == f"Basic2x8 is not taking new jobs in EuropeanUnion: {REASON}", error
    assert error["field"] == "machineClass", error
    # (the same class in the other zone, and other classes in this zone, still take jobs)
    elsewhere = dev.post("/jobs", json={**body, "geoZone": "UnitedStates", "code": "1"})
    assert elsewhere.status_code == 202, elsewhere.text

    # And the job that was running finishes
    finished = dev.wait_status(running["jobId"], timeout=60)
    assert finished["status"] == "Succeeded", finished

    # When the operator puts it back in service
    enabled = admin.post(f"{CLASS_PATH}/enable", json={"reason": "capacity back"})
    assert enabled.status_code == 200, enabled.text
    state = Client.body(enabled)
    assert (state["state"], state["reason"], state["queueState"]) == ("ENABLED", None, "ENABLED"), state

    # Then submits work again
    again = dev.submit({**body, "code": "6 * 7"})
    assert dev.wait_status(again["jobId"], timeout=60)["status"] == "Succeeded"

    # And the audit log shows both actions, newest first, with who, when, before and after
    entries = [e for e in _audit(admin) if e["target"] == "machine-classes/Basic2x8/zones/EuropeanUnion"]
    assert [e["action"] for e in entries[:2]] == ["EnableMachineClass", "DisableMachineClass"], entries
    enable, disable = entries[0], entries[1]
    assert disable["actor"] == enable["actor"] == "admin"
    assert disable["before"] == {"state": "ENABLED", "reason": None}, disable
    assert disable["after"] == {"state": "DISABLED", "reason": REASON}, disable
    assert disable["reason"] == REASON
    assert enable["before"] == {"state": "DISABLED", "reason": REASON}, enable
    assert enable["after"] == {"state": "ENABLED", "reason": None}, enable
    assert enable["at"] >= disable["at"]


def test_a_retried_disable_changes_nothing_twice(admin: Client) -> None:
    path = "/admin/machine-classes/Memory8x64/zones/UnitedStates"
    before = len(_audit(admin, 100))
    try:
        for _ in range(2):
            response = admin.post(f"{path}/disable", json={"reason": "maintenance"})
            assert response.status_code == 200, response.text
        after = _audit(admin, 100)
        assert len(after) == before + 1, after[:3]
        assert after[0]["action"] == "DisableMachineClass" and after[0]["target"].endswith(
            "Memory8x64/zones/UnitedStates"
        )
    finally:
        assert admin.post(f"{path}/enable", json={}).status_code == 200


def test_a_grant_retried_with_the_same_idempotency_key_credits_once(
    stack: LocalStackProcess, admin: Client
) -> None:
    # Given an account with 5 credits
    account_id = f"grantee-{uuid.uuid4().hex[:12]}"
    created = admin.post("/admin/accounts", json={"accountId": account_id, "email": None, "credits": 5})
    assert created.status_code == 201, created.text
    grantee = Client(stack.endpoint, Client.body(created)["token"])
    key = {"Idempotency-Key": f"grant-{uuid.uuid4().hex}"}
    grant = {"credits": 12.3456, "reason": "support ticket 4711"}

    # When the same grant is sent three times with one Idempotency-Key
    answers = [admin.post(f"/admin/accounts/{account_id}/credits", json=grant, headers=key) for _ in range(3)]

    # Then every answer is the first one and the account was credited once: exactly 17.3456
    assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
    balances = {Decimal(str(Client.body(a)["creditBalance"])) for a in answers}
    assert balances == {Decimal("17.3456")}, balances
    assert grantee.balance() == Decimal("17.3456")
    usage = Client.body(grantee.get("/account/usage"))
    grants = [
        e
        for e in usage["entries"]
        if e["kind"] == "grant" and Decimal(str(e["credits"])) == Decimal("12.3456")
    ]
    assert len(grants) == 1, usage

    # And the same key with another body is a 409 Conflict that credits nothing
    other = admin.post(f"/admin/accounts/{account_id}/credits", json={**grant, "credits": 1}, headers=key)
    assert other.status_code == 409, other.text
    assert Client.body(other)["error"]["field"] == "Idempotency-Key"
    assert grantee.balance() == Decimal("17.3456")

    # And the audit log has one GrantCredits entry for the account (after its CreateAccount, newest
    # first), with the balance before and after
    entries = [e for e in _audit(admin, 100) if e["target"] == f"accounts/{account_id}"]
    assert [e["action"] for e in entries] == ["GrantCredits", "CreateAccount"], entries
    assert entries[0]["actor"] == "admin"
    assert entries[0]["before"] == {"creditBalance": "5.0000"}, entries[0]
    assert entries[0]["after"] == {"creditBalance": "17.3456", "credits": "12.3456"}, entries[0]


def test_capacity_limits_how_many_jobs_run_at_once(dev: Client, admin: Client) -> None:
    path = "/admin/machine-classes/Basic1x8/zones/UnitedStates"
    state = _class_state(admin, "Basic1x8", "UnitedStates")
    original = {ce["name"]: ce["maxVcpus"] for ce in state["computeEnvironments"]}
    assert len(original) == 1, state
    try:
        # When an operator sets the Basic environment to 1 vCPU
        response = admin.request("PUT", f"{path}/capacity", json={"maxVcpus": 1})
        assert response.status_code == 200, response.text
        updated = Client.body(response)
        assert [ce["maxVcpus"] for ce in updated["computeEnvironments"]] == [1], updated
        assert updated["maxVcpus"] == 1 and "Basic2x8" in updated["sharedWith"], updated

        # Then two 1-vCPU jobs run one after the other
        jobs = [dev.submit({"code": SLEEP_CODE.format(seconds=2, value=i)}) for i in range(2)]
        done = [dev.wait_status(job["jobId"], timeout=60) for job in jobs]
        assert [d["status"] for d in done] == ["Succeeded", "Succeeded"], done
        first, second = sorted(done, key=lambda d: d["startedAt"])
        assert second["startedAt"] >= first["completedAt"], done
    finally:
        (value,) = original.values()
        restored = admin.request("PUT", f"{path}/capacity", json={"maxVcpus": value})
        assert restored.status_code == 200, restored.text
    entries = [e for e in _audit(admin) if e["action"] == "SetCapacity"]
    assert entries[0]["after"] == {"maxVcpus": original}, entries[0]
    assert entries[1]["after"] == {"maxVcpus": dict.fromkeys(original, 1)}, entries[1]


def test_admin_fleet_routes_need_the_admin_role(dev: Client) -> None:
    assert dev.get("/admin/machine-classes").status_code == 403
    assert dev.get("/admin/audit").status_code == 403
    assert dev.post(f"{CLASS_PATH}/disable", json={"reason": "x"}).status_code == 403


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/admin/machine-classes/Nope/zones/EuropeanUnion/disable", {"reason": "x"}, "machineClass"),
        ("/admin/machine-classes/Basic2x8/zones/Mars/disable", {"reason": "x"}, "geoZone"),
        (f"{CLASS_PATH}/disable", {}, "reason"),
        (f"{CLASS_PATH}/disable", {"reason": "a\nb"}, "reason"),
    ],
)
def test_bad_fleet_requests_are_400_naming_the_field(
    admin: Client, path: str, body: dict[str, Any], field: str
) -> None:
    response = admin.post(path, json=body)
    assert response.status_code == 400, response.text
    assert Client.body(response)["error"]["field"] == field


@pytest.fixture(scope="module")
def limited_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackProcess]:
    """A local stack whose gateway lets each account make 2 requests a second, 3 at once."""
    root = tmp_path_factory.mktemp("limited-stack")
    process = LocalStackProcess(
        root / "home", _free_port(), {"REMOTE_BATCH_RATE_LIMIT": "2", "REMOTE_BATCH_RATE_BURST": "3"}
    )
    process.start()
    yield process
    assert process.stop() == 0


def test_an_account_past_its_request_rate_gets_429_with_retry_after(limited_stack: LocalStackProcess) -> None:
    dev, admin = limited_stack.client("dev"), limited_stack.client("admin")

    # When dev sends 6 requests at once
    statuses = [dev.get("/account") for _ in range(6)]

    # Then the burst (3) passes and the rest are 429 RateLimited with Retry-After
    codes = [r.status_code for r in statuses]
    assert codes[:3] == [200, 200, 200] and 429 in codes[3:], codes
    limited = next(r for r in statuses if r.status_code == 429)
    assert Client.body(limited)["error"]["code"] == "RateLimited"
    retry_after = int(limited.headers["Retry-After"])
    assert retry_after >= 1
    # And another account is not held back by dev's rate
    assert admin.get("/admin/audit").status_code == 200
    # And after Retry-After seconds dev is served again
    time.sleep(retry_after)
    wait_for(lambda: dev.get("/account").status_code == 200, 5, "dev to be served again")


def test_an_account_created_locally_is_in_the_audit_log_without_its_token(admin: Client) -> None:
    # When an operator creates an account on the local stack
    account_id = f"audited-{uuid.uuid4().hex[:8]}"
    created = admin.post("/admin/accounts", json={"accountId": account_id, "credits": 25})
    assert created.status_code == 201, created.text
    token = Client.body(created)["token"]

    # Then the audit log shows who created it and what it started with, never its token
    entries = [e for e in _audit(admin, limit=50) if e["target"] == f"accounts/{account_id}"]
    assert len(entries) == 1, entries
    entry = entries[0]
    assert (entry["action"], entry["actor"]) == ("CreateAccount", "admin"), entry
    assert entry["after"] == {"creditBalance": "25.0000", "email": None, "roles": ["user"]}, entry
    assert token not in str(entry)
