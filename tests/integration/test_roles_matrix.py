"""The role table as a matrix: every route × every role, allowed exactly where
``functions.domain.roles`` says, through the api handler on moto.

Account ``lab`` has its founder ``lab`` (owner), ``owen`` (owner), ``cora`` (contributor) and
``rita`` (reader); ``admin`` is the service admin (no member); ``mallory`` is a user of no role in
``lab``. Each request acts in ``lab`` with ``X-Account-Id`` and a body the route takes, so what
decides the answer is the role: 403 ``Forbidden`` naming the action where the role lacks it, the
membership 404 for the outsider on account actions, anything else (200, 202, 204, 409, ...) where
the request passed its authorization.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from functions import bootstrap
from functions.domain.roles import ACTIONS, Role, Scope, holds
from functions.handlers.api.openapi import route_actions
from tests.fakes import RecordingEnvironmentBuilder
from tests.integration.conftest import Stack

ACCOUNT = "lab"
TEMP_USER = "temp-user"
USERS = {"owen": "owner", "cora": "contributor", "rita": "reader"}
# Caller name → (token user id, Cognito groups, the role the table is read with; None: no member).
CALLERS: dict[str, tuple[str, str, Role | None]] = {
    "reader": ("rita", "", Role.READER),
    "contributor": ("cora", "", Role.CONTRIBUTOR),
    "owner": ("owen", "", Role.OWNER),
    "admin": ("admin", "admin", Role.ADMIN),
    "outsider": ("mallory", "", None),
}

# One request per route: the concrete path ({job} is lab's job), and a body/query the route takes.
REQUESTS: dict[tuple[str, str], dict[str, Any]] = {
    ("GET", "/health"): {},
    ("GET", "/openapi.json"): {},
    ("GET", "/machine-classes"): {},
    ("GET", "/runtime"): {},
    ("GET", "/roles"): {},
    ("POST", "/estimate"): {"body": {"code": "1", "seconds": 60}},
    ("GET", "/account"): {},
    ("GET", "/account/access"): {},
    ("PUT", "/account/contacts"): {"body": {"phone": "+15555550100"}},
    ("GET", "/account/usage"): {},
    ("GET", "/account/members"): {},
    ("GET", "/account/members/{userId}"): {"path": f"/account/members/{TEMP_USER}"},
    ("PUT", "/account/members/{userId}"): {
        "path": f"/account/members/{TEMP_USER}",
        "body": {"role": "reader"},
    },
    ("DELETE", "/account/members/{userId}"): {"path": f"/account/members/{TEMP_USER}"},
    ("POST", "/jobs"): {"body": {"code": "1 + 1"}},
    ("POST", "/jobs/uploads"): {"body": {"size": 10, "contentType": "text/x-python"}},
    ("GET", "/jobs"): {},
    ("GET", "/jobs/{jobId}"): {},
    ("DELETE", "/jobs/{jobId}"): {},
    ("POST", "/jobs/{jobId}/abort"): {},
    ("GET", "/jobs/{jobId}/children"): {},
    ("GET", "/jobs/{jobId}/result"): {},
    ("GET", "/jobs/{jobId}/log"): {},
    ("GET", "/jobs/{jobId}/outputs"): {},
    ("GET", "/jobs/{jobId}/preview.png"): {},
    ("GET", "/account/computes"): {},
    ("GET", "/account/computes/{name}"): {"path": "/account/computes/lab"},
    ("PUT", "/account/computes/{name}"): {
        "path": "/account/computes/lab",
        "body": {"machineClass": "Basic1x8"},
    },
    ("DELETE", "/account/computes/{name}"): {"path": "/account/computes/lab"},
    ("POST", "/account/computes/{name}/start"): {"path": "/account/computes/lab/start"},
    ("POST", "/account/computes/{name}/stop"): {"path": "/account/computes/lab/stop"},
    ("POST", "/account/computes/{name}/restart"): {"path": "/account/computes/lab/restart"},
    ("PUT", "/account/computes/{name}/schedules"): {
        "path": "/account/computes/lab/schedules",
        "body": {"idleStopMinutes": 30},
    },
    ("GET", "/environments"): {},
    ("GET", "/environments/{name}"): {"path": "/environments/ml"},
    ("GET", "/environments/{name}/log"): {"path": "/environments/ml/log"},
    ("PUT", "/environments/{name}"): {"path": "/environments/ml", "body": {"python": "3.12"}},
    ("DELETE", "/environments/{name}"): {"path": "/environments/ml"},
    ("POST", "/admin/accounts/{accountId}/credits"): {
        "path": f"/admin/accounts/{ACCOUNT}/credits",
        "body": {"credits": 1, "reason": "matrix"},
    },
    ("GET", "/account/quotas"): {},
    ("PUT", "/admin/accounts/{accountId}/quotas"): {
        "path": f"/admin/accounts/{ACCOUNT}/quotas",
        "body": {"quotas": [{"family": "Memory", "geoZone": "UnitedStates", "limit": 384}]},
    },
    ("GET", "/admin/machine-classes"): {},
    ("GET", "/admin/audit"): {},
    # A class the matrix's jobs do not use, so taking it out of service changes no other row.
    ("POST", "/admin/machine-classes/{machineClass}/zones/{geoZone}/disable"): {
        "path": "/admin/machine-classes/Memory192x1536/zones/UnitedStates/disable",
        "body": {"reason": "matrix"},
    },
    ("POST", "/admin/machine-classes/{machineClass}/zones/{geoZone}/enable"): {
        "path": "/admin/machine-classes/Memory192x1536/zones/UnitedStates/enable",
    },
    ("PUT", "/admin/machine-classes/{machineClass}/zones/{geoZone}/capacity"): {
        "path": "/admin/machine-classes/Memory192x1536/zones/UnitedStates/capacity",
        "body": {"maxVcpus": 384},
    },
}


def _lab(stack: Stack) -> str:
    """Account lab with its members and one Queued job; returns the job's id."""
    stack.add_account(ACCOUNT, "1000")
    for user, role in {**USERS, TEMP_USER: "reader"}.items():
        status, body = stack.api("PUT", f"/account/members/{user}", account_id=ACCOUNT, body={"role": role})
        assert status == 200, body
    status, job = stack.api("POST", "/jobs", account_id=ACCOUNT, body={"code": "2 + 2"})
    assert status == 202, job
    return str(job["jobId"])


def _outcome(status: int, body: Any) -> str:
    """``denied`` (403 Forbidden), ``hidden`` (the membership 404: no such account for this user) or
    ``allowed`` (the request passed its authorization, whatever the route answered then)."""
    error = body.get("error") if isinstance(body, dict) else None
    if status == 403 and error and error["code"] == "Forbidden":
        return "denied"
    if status == 404 and error and error.get("field") == "X-Account-Id":
        return "hidden"
    return "allowed"


def _expected(action: str, role: Role | None) -> str:
    scope = ACTIONS[action].scope
    if role is None and scope is Scope.ACCOUNT:
        return "hidden"  # tenant isolation: a non-member cannot tell the account exists
    return "allowed" if holds(role, action) else "denied"


def test_every_route_declares_exactly_one_known_action() -> None:
    # Given the app's routes, When their dependencies are read, Then each names one action of the table
    actions = route_actions()
    assert actions, "no routes found"
    wrong = {route: names for route, names in actions.items() if len(names) != 1 or names[0] not in ACTIONS}
    assert wrong == {}
    # and the matrix below exercises every one of them
    assert set(actions) == set(REQUESTS)


def test_role_matrix(fleet_stack: Stack, capsys: pytest.CaptureFixture[str]) -> None:
    stack = fleet_stack  # the service's job queues exist in moto: fleet routes switch them
    stack.services = replace(stack.services, environment_builder=RecordingEnvironmentBuilder())
    bootstrap.install(stack.services)
    job_id = _lab(stack)
    actions = route_actions()
    counts: Counter[tuple[str, str]] = Counter()
    mismatches = []
    for (method, template), names in sorted(actions.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        action = names[0]
        spec = REQUESTS[(method, template)]
        for caller, (user, groups, role) in CALLERS.items():
            if template == "/account/members/{userId}" and method == "DELETE":
                # the member a DELETE removes is back for the next caller
                stack.api("PUT", f"/account/members/{TEMP_USER}", account_id=ACCOUNT, body={"role": "reader"})
            path = spec.get("path", template.replace("{jobId}", job_id))
            status, body = stack.api(
                method,
                path,
                account_id=user,
                groups=groups,
                headers={"X-Account-Id": ACCOUNT},
                body=spec.get("body"),
            )
            assert status < 500, (method, path, caller, body)
            got, want = _outcome(status, body), _expected(action, role)
            counts[(caller, got)] += 1
            if got != want:
                mismatches.append((method, template, caller, action, want, got, status, body))
            if got == "denied":
                assert action in body["error"]["message"], body
    assert mismatches == []
    routes = len(actions)
    with capsys.disabled():
        print(f"\nrole matrix: {routes} routes x {len(CALLERS)} callers = {routes * len(CALLERS)} requests")
        for caller in CALLERS:
            print(
                f"  {caller:<12} allowed {counts[(caller, 'allowed')]:>2}  denied (403) "
                f"{counts[(caller, 'denied')]:>2}  hidden (404) {counts[(caller, 'hidden')]:>2}"
            )
    # The counts the table implies, spelled out: a route added without its action fails above first.
    by_action = Counter(names[0] for names in actions.values())

    def allowed_for(role: Role | None) -> int:
        return sum(n for a, n in by_action.items() if _expected(a, role) == "allowed")

    for caller, (_, _, role) in CALLERS.items():
        assert counts[(caller, "allowed")] == allowed_for(role)
    assert counts[("admin", "denied")] == 0 and counts[("admin", "hidden")] == 0
    assert counts[("reader", "allowed")] < counts[("contributor", "allowed")] < counts[("owner", "allowed")]


def test_reader_submit_is_403_naming_jobs_write(stack: Stack) -> None:
    _lab(stack)
    status, body = stack.api(
        "POST", "/jobs", account_id="rita", headers={"X-Account-Id": ACCOUNT}, body={"code": "1"}
    )
    assert status == 403
    assert body["error"]["code"] == "Forbidden"
    assert body["error"]["message"] == (
        "This request needs jobs/write; your role reader in account lab does not have it "
        "(roles that do: contributor, owner, admin)."
    )
