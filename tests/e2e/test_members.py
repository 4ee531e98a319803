"""A team over HTTP on the local stack: an owner makes an account's members (a contributor and a
reader, each a user with their own token); the contributor's job runs in the team's account and
records who submitted it; the reader reads it but is refused a submit with 403 naming jobs/write;
a stranger sees no account at all (404)."""

from __future__ import annotations

import uuid
from typing import Any

import remote_batch as rb
from tests.e2e.conftest import Client, LocalStackProcess


def _user(stack: LocalStackProcess, admin: Client, prefix: str, credits: int = 0) -> tuple[str, Client]:
    """A new user (and their own account), made by the admin; their id and client."""
    user_id = f"{prefix}-{uuid.uuid4().hex[:8]}"
    created = admin.post("/admin/accounts", json={"accountId": user_id, "email": None, "credits": credits})
    assert created.status_code == 201, created.text
    return user_id, Client(stack.endpoint, created.json()["token"])


def _error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["code"] == code, error
    return error


def test_owner_contributor_and_reader_over_http(stack: LocalStackProcess, admin: Client) -> None:
    # Given a team account owned by its founder, with a contributor and a reader
    team, owner = _user(stack, admin, "team", credits=100)
    cora_id, cora = _user(stack, admin, "cora")
    rita_id, rita = _user(stack, admin, "rita")
    _, stranger = _user(stack, admin, "mallory")
    in_team = {"X-Account-Id": team}
    for user_id, role in ((cora_id, "contributor"), (rita_id, "reader")):
        added = owner.request("PUT", f"/account/members/{user_id}", json={"role": role})
        assert added.status_code == 200, added.text
        assert (added.json()["role"], added.json()["updatedBy"]) == (role, team)
    listed = rita.get("/account/members", headers=in_team)
    assert listed.status_code == 200, listed.text
    assert [(m["userId"], m["role"]) for m in listed.json()["members"]] == [
        (team, "owner"),
        (cora_id, "contributor"),
        (rita_id, "reader"),
    ]

    # When the reader submits: 403 naming the missing action
    refused = rita.post("/jobs", json={"code": "1 + 1"}, headers=in_team)
    error = _error(refused, 403, "Forbidden")
    assert "jobs/write" in error["message"] and "reader" in error["message"] and team in error["message"]

    # and the contributor submits in the team's account (its credits), recorded as theirs
    submitted = cora.post("/jobs", json={"code": "6 * 7"}, headers=in_team)
    assert submitted.status_code == 202, submitted.text
    job = submitted.json()
    assert job["submittedBy"] == cora_id
    finished = Client(stack.endpoint, owner.token).wait_status(job["jobId"])
    assert finished["status"] == "Succeeded"

    # Then the reader reads it, its result and the team's usage; aborting and deleting are not theirs
    seen = rita.get(f"/jobs/{job['jobId']}", headers=in_team)
    assert (seen.status_code, seen.json()["submittedBy"]) == (200, cora_id)
    result = rita.get(f"/jobs/{job['jobId']}/result", headers=in_team)
    assert (result.status_code, result.json()["result"]) == (200, 42)
    assert rita.get("/account/usage", headers=in_team).status_code == 200
    _error(rita.request("DELETE", f"/jobs/{job['jobId']}", headers=in_team), 403, "Forbidden")
    _error(
        rita.request("PUT", f"/account/members/{rita_id}", json={"role": "owner"}, headers=in_team),
        403,
        "Forbidden",
    )
    # the job is the team's, not the contributor's own account's
    _error(cora.get(f"/jobs/{job['jobId']}"), 404, "NotFound")
    # and a stranger cannot tell the team's account exists
    _error(stranger.get("/jobs", headers=in_team), 404, "NotFound")
    _error(stranger.get(f"/jobs/{job['jobId']}", headers=in_team), 404, "NotFound")

    # The contributor may delete the finished job's data; the owner removes the reader, who is then out
    deleted = cora.request("DELETE", f"/jobs/{job['jobId']}", headers=in_team)
    assert deleted.status_code == 204, deleted.text
    assert owner.request("DELETE", f"/account/members/{rita_id}").status_code == 204
    _error(rita.get("/jobs", headers=in_team), 404, "NotFound")
    # and the founder, the last owner, cannot remove themselves
    _error(owner.request("DELETE", f"/account/members/{team}"), 409, "Conflict")


def test_the_sdk_acts_in_a_team_account(stack: LocalStackProcess, admin: Client) -> None:
    team, owner = _user(stack, admin, "sdkteam", credits=100)
    cora_id, cora = _user(stack, admin, "sdkcora")
    client = rb.Client(rb.Profile(endpoint=stack.endpoint, token=owner.token))
    rb.set_member(cora_id, "contributor", client=client)
    as_cora = rb.Client(rb.Profile(endpoint=stack.endpoint, token=cora.token), account=team)
    assert [m.user_id for m in rb.members(client=as_cora)] == [team, cora_id]
    job = rb.submit("3 * 3", client=as_cora)
    assert job.result() == 9
    assert rb.job(job.id, client=client).submitted_by == cora_id
    table = rb.roles(client=as_cora)
    assert {a["name"] for a in table["actions"]} >= {"jobs/write", "members/write", "computes/start/action"}
