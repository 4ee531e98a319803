"""The admin quota override on moto (issue 15): ``PUT /admin/accounts/{accountId}/quotas`` runs once per
``Idempotency-Key`` (``admin_once``, as the fleet actions and credit grants) and writes an audit entry
(``SetQuotas``, every limit before and after) in the transaction that changes the limits."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import boto3
import pytest

from functions.adapters.dynamodb.operations import DynamoOperationsStore
from functions.adapters.tables import IDEMPOTENCY, create_table_request
from functions.domain.errors import ConditionFailed
from functions.domain.fleet import AuditAction, AuditEntry
from functions.domain.jobs import DispatchState
from functions.domain.machine_classes import GeoZone
from functions.domain.quotas import Family, QuotaKey, QuotaLimits
from functions.handlers.api.admin_once import IDEMPOTENT_RUNNERS
from tests.integration.conftest import Stack, finish

ADMIN = {"account_id": "admin", "groups": "admin"}
PATH = "/admin/accounts/dev/quotas"
BASIC_US = QuotaKey(Family.BASIC, GeoZone.UNITED_STATES)
# Every limit in force for an account without overrides (functions/domain/quotas.py defaults), in the
# audit log's order: each zone's Basic, Memory, Compute, GPU.
DEFAULT_VIEW = {
    "quotas": [
        {"family": family, "geoZone": zone, "limit": limit}
        for zone in ("UnitedStates", "EuropeanUnion")
        for family, limit in (("Basic", 64), ("Memory", 384), ("Compute", 384), ("GPU", 8))
    ],
    "total": 768,
}


def with_limit(view: dict[str, Any], family: str, zone: str, limit: int) -> dict[str, Any]:
    """``view`` with one family's limit in one zone changed."""
    quotas = [
        {**q, "limit": limit} if (q["family"], q["geoZone"]) == (family, zone) else q for q in view["quotas"]
    ]
    return {**view, "quotas": quotas}


def audit_entries(stack: Stack) -> list[dict[str, Any]]:
    status, body = stack.api("GET", "/admin/audit", **ADMIN)
    assert status == 200, body
    return [e for e in body["entries"] if e["action"] == "SetQuotas"]


def basic_us_limit(answer: dict[str, Any]) -> int:
    line = next(q for q in answer["quotas"] if (q["family"], q["geoZone"]) == ("Basic", "UnitedStates"))
    return int(line["limit"])


def test_a_keyed_quota_change_retried_changes_once_with_one_audit_entry(stack: Stack) -> None:
    key = {"Idempotency-Key": "quota-1"}
    body = {"quotas": [{"family": "Basic", "geoZone": "UnitedStates", "limit": 2}], "total": 100}

    answers = [stack.api("PUT", PATH, body=body, headers=key, **ADMIN) for _ in range(2)]

    assert [a[0] for a in answers] == [200, 200] and answers[0][1] == answers[1][1]
    assert basic_us_limit(answers[0][1]) == 2 and answers[0][1]["total"]["limit"] == 100
    # One change: the limits' version moved once, and one audit entry says what it was.
    limits = stack.services.store.get_quota_limits("dev")
    assert (limits.limit(BASIC_US), limits.total, limits.version) == (2, 100, 1)
    [entry] = audit_entries(stack)
    assert entry["actor"] == "admin"
    assert entry["target"] == "accounts/dev"
    assert entry["at"] == "2026-11-29T17:20:00Z"
    assert entry["before"] == DEFAULT_VIEW
    assert entry["after"] == {**with_limit(DEFAULT_VIEW, "Basic", "UnitedStates", 2), "total": 100}

    # Even once the api's replay records are gone (after 24 h), the same request changes nothing again:
    # it finds the limits it asks for.
    IDEMPOTENT_RUNNERS.clear()
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    dynamodb.delete_table(TableName=stack.settings.idempotency_table)
    dynamodb.create_table(**create_table_request(IDEMPOTENCY, stack.settings.idempotency_table))
    stack.clock.advance(86_400)
    late = stack.api("PUT", PATH, body=body, headers=key, **ADMIN)
    assert late[0] == 200 and basic_us_limit(late[1]) == 2
    assert stack.services.store.get_quota_limits("dev").version == 1
    assert len(audit_entries(stack)) == 1


def test_the_same_key_with_another_body_is_409_and_changes_nothing(stack: Stack) -> None:
    key = {"Idempotency-Key": "quota-2"}
    first = {"quotas": [{"family": "GPU", "geoZone": "EuropeanUnion", "limit": 4}]}
    assert stack.api("PUT", PATH, body=first, headers=key, **ADMIN)[0] == 200

    other = {"quotas": [{"family": "GPU", "geoZone": "EuropeanUnion", "limit": 16}]}
    status, answer = stack.api("PUT", PATH, body=other, headers=key, **ADMIN)

    assert status == 409
    assert answer["error"]["code"] == "Conflict" and answer["error"]["field"] == "Idempotency-Key"
    assert (
        stack.services.store.get_quota_limits("dev").limit(QuotaKey(Family.GPU, GeoZone.EUROPEAN_UNION)) == 4
    )
    # Setting the total back to the default is another body too (``total: null`` is not "absent").
    status, _ = stack.api("PUT", PATH, body={**first, "total": None}, headers=key, **ADMIN)
    assert status == 409
    assert len(audit_entries(stack)) == 1


def test_a_change_without_a_key_works_and_is_audited_each_time_it_changes_something(stack: Stack) -> None:
    body = {"quotas": [{"family": "Memory", "geoZone": "EuropeanUnion", "limit": 64}]}
    status, answer = stack.api("PUT", PATH, body=body, **ADMIN)
    assert status == 200
    memory_eu = next(
        q for q in answer["quotas"] if (q["family"], q["geoZone"]) == ("Memory", "EuropeanUnion")
    )
    assert memory_eu["limit"] == 64

    # The same request again finds the limits it asks for: nothing written, nothing recorded.
    stack.clock.advance(1)
    assert stack.api("PUT", PATH, body=body, **ADMIN)[0] == 200
    # Another change is a second entry, newest first, whose "before" is the first one's "after".
    stack.clock.advance(1)
    assert stack.api("PUT", PATH, body={"quotas": [], "total": 512}, **ADMIN)[0] == 200

    entries = audit_entries(stack)
    assert [e["at"] for e in entries] == ["2026-11-29T17:20:02Z", "2026-11-29T17:20:00Z"]
    after_first = with_limit(DEFAULT_VIEW, "Memory", "EuropeanUnion", 64)
    assert (entries[1]["before"], entries[1]["after"]) == (DEFAULT_VIEW, after_first)
    assert (entries[0]["before"], entries[0]["after"]) == (after_first, {**after_first, "total": 512})
    assert stack.services.store.get_quota_limits("dev").version == 2


def test_a_refused_change_records_nothing(stack: Stack) -> None:
    body = {"quotas": [{"family": "Basic", "geoZone": "UnitedStates", "limit": 2}]}
    status, _ = stack.api("PUT", "/admin/accounts/nobody/quotas", body=body, **ADMIN)
    assert status == 404
    status, _ = stack.api("PUT", PATH, body=body, headers={"Idempotency-Key": "k"})  # not an admin
    assert status == 403
    assert audit_entries(stack) == []
    assert stack.services.store.get_quota_limits("dev").version == 0


# -- the store: limits and audit entry in one transaction, over the version read ---------------------------
def _store(stack: Stack) -> DynamoOperationsStore:
    store = stack.services.operations
    assert isinstance(store, DynamoOperationsStore)
    return store


def _entry(stack: Stack, entry_id: str) -> AuditEntry:
    return AuditEntry(
        entry_id=entry_id,
        at=stack.clock(),
        actor="admin",
        action=AuditAction.SET_QUOTAS,
        target="accounts/dev",
    )


def test_two_changes_from_one_read_write_once_and_the_loser_records_nothing(stack: Stack) -> None:
    read = stack.services.store.get_quota_limits("dev")
    assert read.version == 0
    store = _store(stack)
    store.save_quota_limits("dev", read.with_changes({BASIC_US: 2}, None, False), _entry(stack, "q1"))

    with pytest.raises(ConditionFailed):
        store.save_quota_limits("dev", read.with_changes({BASIC_US: 8}, None, False), _entry(stack, "q2"))

    stored = stack.services.store.get_quota_limits("dev")
    assert (stored.limit(BASIC_US), stored.version) == (2, 1)
    assert [e.entry_id for e in store.list_audit(10, None)[0]] == ["q1"]
    # The next change is written over version 1.
    store.save_quota_limits("dev", stored.with_changes({BASIC_US: 8}, None, False), _entry(stack, "q3"))
    assert stack.services.store.get_quota_limits("dev").version == 2


def test_a_concurrent_change_answers_409_conflict(stack: Stack, monkeypatch: pytest.MonkeyPatch) -> None:
    # Another operator's change lands between this request's read and its write.
    store = stack.services.store
    read_limits = store.get_quota_limits

    def read_then_lose(account_id: str) -> Any:
        limits = read_limits(account_id)
        if limits.version == 0:
            _store(stack).save_quota_limits(
                account_id, limits.with_changes({BASIC_US: 5}, None, False), _entry(stack, "other")
            )
        return limits

    monkeypatch.setattr(store, "get_quota_limits", read_then_lose)
    body = {"quotas": [{"family": "Basic", "geoZone": "UnitedStates", "limit": 2}]}
    status, answer = stack.api("PUT", PATH, body=body, **ADMIN)
    assert status == 409 and answer["error"]["code"] == "Conflict"
    monkeypatch.undo()
    assert store.get_quota_limits("dev").limit(BASIC_US) == 5
    [entry] = audit_entries(stack)  # the other operator's; the loser recorded nothing
    assert entry["entryId"] == "other"


def test_quota_limits_written_before_versions_existed_are_changed_over_no_version(stack: Stack) -> None:
    stack.services.store.put_quota_limits("dev", QuotaLimits({BASIC_US: 3}))
    legacy = stack.services.store.get_quota_limits("dev")
    assert (legacy.limit(BASIC_US), legacy.version) == (3, 0)
    _store(stack).save_quota_limits("dev", legacy.with_changes({}, 50, True), _entry(stack, "q"))
    stored = stack.services.store.get_quota_limits("dev")
    assert (stored.limit(BASIC_US), stored.total, stored.version) == (3, 50, 1)


def test_a_family_and_zone_listed_twice_is_400_and_changes_nothing(stack: Stack) -> None:
    twice = [
        {"family": "Basic", "geoZone": "UnitedStates", "limit": 2},
        {"family": "Basic", "geoZone": "UnitedStates", "limit": 8},
    ]
    status, answer = stack.api("PUT", PATH, body={"quotas": twice}, **ADMIN)

    assert status == 400
    assert answer["error"]["field"] == "quotas[1]"
    assert answer["error"]["message"] == (
        "quotas lists Basic in UnitedStates twice; give each family and zone once."
    )
    assert stack.services.store.get_quota_limits("dev").limit(BASIC_US) == 64
    assert audit_entries(stack) == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"quotas": [{"family": "Basic", "geoZone": "UnitedStates", "limit": True}]}, "quotas[0].limit"),
        ({"quotas": [{"family": "Basic", "geoZone": "UnitedStates", "limit": "2"}]}, "quotas[0].limit"),
        ({"quotas": [{"family": "Basic", "geoZone": "UnitedStates", "limit": 2.5}]}, "quotas[0].limit"),
        ({"quotas": [], "total": "100"}, "total"),
    ],
)
def test_a_limit_that_is_not_a_whole_json_number_is_400_and_changes_nothing(
    stack: Stack, body: dict[str, Any], field: str
) -> None:
    status, answer = stack.api("PUT", PATH, body=body, **ADMIN)

    assert status == 400, answer
    assert answer["error"]["field"] == field
    assert stack.services.store.get_quota_limits("dev").limit(BASIC_US) == 64
    assert audit_entries(stack) == []


def test_a_held_job_the_lowered_quota_can_never_admit_ends_and_holds_nothing_back(stack: Stack) -> None:
    # Given Basic in UnitedStates at 4 vCPUs: one Basic4x16 job admitted, a second held behind it
    four = [{"family": "Basic", "geoZone": "UnitedStates", "limit": 4}]
    assert stack.api("PUT", PATH, body={"quotas": four}, **ADMIN)[0] == 200
    big = {"code": "1", "machineClass": "Basic4x16", "geoZone": "UnitedStates"}
    first = stack.api("POST", "/jobs", body=big)[1]["jobId"]
    held = stack.api("POST", "/jobs", body=big)[1]["jobId"]
    waiting = stack.services.store.get_job(held)
    assert waiting is not None and waiting.dispatch_state == DispatchState.HELD
    balance = stack.balance("dev")

    # When an operator lowers it to 2: the held job could never go (4 vCPUs alone)
    two = [{"family": "Basic", "geoZone": "UnitedStates", "limit": 2}]
    assert stack.api("PUT", PATH, body={"quotas": two}, **ADMIN)[0] == 200

    # Then it ends Terminated, free, saying why, and gives back what it queued
    _, ended = stack.api("GET", f"/jobs/{held}")
    assert ended["status"] == "Terminated", ended
    assert ended["statusReason"] == (
        "The account's quota was lowered while it waited: Basic4x16 needs 4 vCPUs but the account's Basic "
        "quota in UnitedStates is 2 vCPUs; ask an operator for a higher quota"
    ), ended["statusReason"]
    assert Decimal(str(ended["creditsSpent"])) == Decimal("0.0000")
    # And once the first ends, a job that fits goes at once: nothing stays held in front of it
    finish(stack, first)
    small = stack.api("POST", "/jobs", body={"code": "1", "machineClass": "Basic1x8"})[1]
    stored = stack.services.store.get_job(small["jobId"])
    assert stored is not None and stored.batch_job_id is not None and stored.status_reason is None
    _, quotas = stack.api("GET", "/account/quotas")
    line = next(q for q in quotas["quotas"] if (q["family"], q["geoZone"]) == ("Basic", "UnitedStates"))
    assert (line["inUse"], line["queued"]) == (1, 0)
    # The first job's minute (60 s billed at least; Basic4x16 at 180 credits/hour), nothing for the held.
    settled = stack.services.store.get_job(first)
    assert settled is not None and settled.credits_spent == Decimal("3.0000")
    assert stack.balance("dev") == balance - Decimal("3.0000")


def test_a_limit_written_as_a_whole_float_is_that_integer(stack: Stack) -> None:
    # JSON has one number type and JSON Schema's "integer" is any number without a fraction: 2.0 is 2
    body = {"quotas": [{"family": "Basic", "geoZone": "UnitedStates", "limit": 2.0}]}
    status, answer = stack.api("PUT", PATH, body=body, **ADMIN)

    assert status == 200, answer
    assert stack.services.store.get_quota_limits("dev").limit(BASIC_US) == 2
