"""Members of an account through the api handler on moto: the founder, adding and removing members,
the last-owner rule, acting in another account with X-Account-Id, tenant isolation, who submitted a
job, and what a request's authorization costs in DynamoDB requests."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from functions.domain.errors import ConditionFailed
from functions.domain.roles import Member, Role
from tests.integration.conftest import Stack

LAB = {"X-Account-Id": "lab"}


def _put(stack: Stack, user: str, role: str, by: str = "lab", headers: dict[str, str] | None = None) -> Any:
    status, body = stack.api(
        "PUT", f"/account/members/{user}", account_id=by, body={"role": role}, headers=headers
    )
    assert status == 200, body
    return body


@pytest.fixture
def lab(stack: Stack) -> Stack:
    """Account lab (1000 credits): founder lab, owen owner, cora contributor, rita reader."""
    stack.add_account("lab", "1000")
    _put(stack, "owen", "owner")
    _put(stack, "cora", "contributor")
    _put(stack, "rita", "reader")
    return stack


def test_a_founder_owns_their_account_until_the_members_change(stack: Stack) -> None:
    # Given a user who never touched members, When they read their access and members
    status, access = stack.api("GET", "/account/access")
    assert (status, access["accountId"], access["userId"], access["role"]) == (200, "dev", "dev", "owner")
    assert "members/write" in access["actions"] and "credits/grant/action" not in access["actions"]
    status, listed = stack.api("GET", "/account/members")
    assert (status, listed) == (
        200,
        {
            "accountId": "dev",
            "members": [{"userId": "dev", "role": "owner", "updatedAt": None, "updatedBy": None}],
        },
    )
    # a brand-new user's first request makes their account, as version 1 did
    status, access = stack.api("GET", "/account/access", account_id="newcomer")
    assert (status, access["role"]) == (200, "owner")


def test_members_are_listed_owners_first_with_who_set_them(lab: Stack) -> None:
    status, listed = lab.api("GET", "/account/members", account_id="rita", headers=LAB)
    assert status == 200
    assert [(m["userId"], m["role"]) for m in listed["members"]] == [
        ("lab", "owner"),
        ("owen", "owner"),
        ("cora", "contributor"),
        ("rita", "reader"),
    ]
    rita = listed["members"][3]
    assert rita["updatedBy"] == "lab" and rita["updatedAt"].endswith("Z")
    status, one = lab.api("GET", "/account/members/cora", account_id="rita", headers=LAB)
    assert (status, one["role"]) == (200, "contributor")
    status, missing = lab.api("GET", "/account/members/zed", account_id="rita", headers=LAB)
    assert (status, missing["error"]["code"], missing["error"]["field"]) == (404, "NotFound", "userId")


def test_an_owner_changes_roles_and_the_change_takes_effect_at_once(lab: Stack) -> None:
    status, _ = lab.api("POST", "/jobs", account_id="rita", headers=LAB, body={"code": "1"})
    assert status == 403
    changed = _put(lab, "rita", "contributor", by="owen", headers=LAB)
    assert (changed["userId"], changed["role"], changed["updatedBy"]) == ("rita", "contributor", "owen")
    status, job = lab.api("POST", "/jobs", account_id="rita", headers=LAB, body={"code": "1"})
    assert status == 202, job
    # removed: the account is no longer hers to see
    status, _ = lab.api("DELETE", "/account/members/rita", account_id="owen", headers=LAB)
    assert status == 204
    status, body = lab.api("GET", f"/jobs/{job['jobId']}", account_id="rita", headers=LAB)
    assert (status, body["error"]["code"], body["error"]["field"]) == (404, "NotFound", "X-Account-Id")


def test_the_last_owner_cannot_be_removed_or_demoted(lab: Stack) -> None:
    # the founder leaves: owen is then the only owner
    status, _ = lab.api("DELETE", "/account/members/lab", account_id="owen", headers=LAB)
    assert status == 204
    status, body = lab.api("DELETE", "/account/members/owen", account_id="owen", headers=LAB)
    assert (status, body["error"]["code"], body["error"]["field"]) == (409, "Conflict", "userId")
    assert "last owner" in body["error"]["message"]
    status, body = lab.api(
        "PUT", "/account/members/owen", account_id="owen", headers=LAB, body={"role": "reader"}
    )
    assert (status, body["error"]["code"]) == (409, "Conflict")
    # the founder, removed, is a stranger to the account that bears their id
    status, body = lab.api("GET", "/jobs", account_id="lab")
    assert (status, body["error"]["code"]) == (404, "NotFound")
    # with a second owner, the first may go
    _put(lab, "cora", "owner", by="owen", headers=LAB)
    status, _ = lab.api("DELETE", "/account/members/owen", account_id="owen", headers=LAB)
    assert status == 204
    status, listed = lab.api("GET", "/account/members", account_id="cora", headers=LAB)
    assert [(m["userId"], m["role"]) for m in listed["members"]] == [("cora", "owner"), ("rita", "reader")]


def test_member_requests_are_validated(lab: Stack) -> None:
    status, body = lab.api(
        "PUT", "/account/members/zed", account_id="owen", headers=LAB, body={"role": "admin"}
    )
    assert (status, body["error"]["code"], body["error"]["field"]) == (400, "ValidationError", "role")
    status, body = lab.api(
        "PUT", "/account/members/a%20b", account_id="owen", headers=LAB, body={"role": "reader"}
    )
    assert (status, body["error"]["field"]) == (400, "userId")
    status, body = lab.api("DELETE", "/account/members/zed", account_id="owen", headers=LAB)
    assert (status, body["error"]["code"], body["error"]["field"]) == (404, "NotFound", "userId")
    status, body = lab.api("GET", "/jobs", account_id="owen", headers={"X-Account-Id": "no spaces"})
    assert (status, body["error"]["code"], body["error"]["field"]) == (400, "ValidationError", "X-Account-Id")


def test_other_accounts_stay_404_whether_they_exist_or_not(lab: Stack) -> None:
    status, dev_job = lab.api("POST", "/jobs", body={"code": "1"})
    assert status == 202
    # a member of lab asking for dev's job in lab: no such job there
    status, body = lab.api("GET", f"/jobs/{dev_job['jobId']}", account_id="owen", headers=LAB)
    assert (status, body["error"]["code"]) == (404, "NotFound")
    # acting in dev, an account owen is no member of, answers as an account that does not exist does
    existing = lab.api("GET", "/jobs", account_id="owen", headers={"X-Account-Id": "dev"})
    absent = lab.api("GET", "/jobs", account_id="owen", headers={"X-Account-Id": "no-such-account"})
    assert existing[0] == absent[0] == 404
    assert existing[1]["error"]["code"] == absent[1]["error"]["code"] == "NotFound"
    # the service admin acts in existing accounts only
    status, _ = lab.api("GET", "/jobs", account_id="admin", groups="admin", headers=LAB)
    assert status == 200
    status, _ = lab.api(
        "GET", "/account", account_id="admin", groups="admin", headers={"X-Account-Id": "nope"}
    )
    assert status == 404


def test_jobs_record_who_submitted_them_and_the_account_sees_them(lab: Stack) -> None:
    status, job = lab.api("POST", "/jobs", account_id="cora", headers=LAB, body={"code": "1"})
    assert status == 202
    assert job["submittedBy"] == "cora"
    status, array = lab.api(
        "POST", "/jobs", account_id="owen", headers=LAB, body={"code": "item", "arrayItems": [1, 2]}
    )
    assert status == 202 and array["submittedBy"] == "owen"
    status, listed = lab.api("GET", "/jobs", account_id="rita", headers=LAB)
    assert status == 200
    assert {j["jobId"]: j["submittedBy"] for j in listed["jobs"]} == {
        job["jobId"]: "cora",
        array["jobId"]: "owen",
    }
    stored = lab.services.store.get_job(job["jobId"])
    assert stored is not None and stored.account_id == "lab" and stored.submitted_by == "cora"
    # the job is lab's: cora's own account does not have it
    status, _ = lab.api("GET", f"/jobs/{job['jobId']}", account_id="cora")
    assert status == 404


def test_an_idempotent_submit_acts_in_the_header_account(lab: Stack) -> None:
    headers = {**LAB, "Idempotency-Key": "k-1"}
    first = lab.api("POST", "/jobs", account_id="cora", headers=headers, body={"code": "1"})
    again = lab.api("POST", "/jobs", account_id="cora", headers=headers, body={"code": "1"})
    assert first[0] == again[0] == 202
    assert first[1]["jobId"] == again[1]["jobId"]
    assert first[1]["submittedBy"] == "cora"
    stored = lab.services.store.get_job(first[1]["jobId"])
    assert stored is not None and stored.account_id == "lab"


@contextmanager
def _dynamodb_calls(stack: Stack) -> Iterator[Counter[str]]:
    """Count the DynamoDB operations the handlers' client makes."""
    client = stack.services.store._db  # type: ignore[attr-defined]
    calls: Counter[str] = Counter()

    def count(model: Any, **_: Any) -> None:
        calls[model.name] += 1

    client.meta.events.register("before-call.dynamodb.*", count)
    try:
        yield calls
    finally:
        client.meta.events.unregister("before-call.dynamodb.*", count)


def test_authorization_costs_one_get_item(lab: Stack) -> None:
    status, job = lab.api("POST", "/jobs", account_id="cora", headers=LAB, body={"code": "1"})
    assert status == 202
    with _dynamodb_calls(lab) as calls:
        status, _ = lab.api("GET", f"/jobs/{job['jobId']}", account_id="rita", headers=LAB)
    assert status == 200
    assert calls == Counter({"GetItem": 2})  # the member's entry, then the job
    with _dynamodb_calls(lab) as calls:
        status, _ = lab.api("GET", "/machine-classes", account_id="rita", headers=LAB)
    assert status == 200 and calls == Counter()  # service actions read no account


def test_a_member_write_loses_to_a_concurrent_change(lab: Stack) -> None:
    # Given the stored members at some version, When another change lands first, Then a write computed
    # from the old version is refused (the logic re-reads and re-checks the last-owner rule)
    stored = lab.services.store.get_members("lab")
    lab.services.store.save_members("lab", {"owen": Member("owen", Role.OWNER)}, stored.version)
    with pytest.raises(ConditionFailed):
        lab.services.store.save_members("lab", {"cora": Member("cora", Role.OWNER)}, stored.version)
    after = lab.services.store.get_members("lab")
    assert after.version == stored.version + 1
    assert dict(after.members or {}) == {"owen": Member("owen", Role.OWNER)}
