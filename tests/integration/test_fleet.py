"""Fleet control on moto: the Operations store (class states, audit log, grants once), the AWS Batch
fleet adapter (moto's Batch for queues; a Stubber where moto ignores maxvCpus), and the admin routes
in-process (issue 15 item 3)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from functions.adapters.batch_fleet import AwsBatchFleet
from functions.adapters.dynamodb.operations import DynamoOperationsStore
from functions.adapters.tables import IDEMPOTENCY, create_table_request
from functions.domain.errors import BatchRefused, ConditionFailed, DependencyFailed, ValidationFailed
from functions.domain.fleet import AuditAction, AuditEntry, ClassAvailability, disabled, enabled
from functions.domain.jobs import DispatchState, LedgerEntry, LedgerKind
from functions.domain.machine_classes import GeoZone
from functions.handlers.api.admin_once import IDEMPOTENT_RUNNERS
from tests.events import QUEUE_ARN
from tests.fakes import FakeLambdaContext
from tests.integration.conftest import RecordingQueue, Stack, sqs_event

ADMIN = {"account_id": "admin", "groups": "admin"}
NOW = datetime(2026, 11, 29, 17, 20, tzinfo=UTC)
QUEUE_NAME = QUEUE_ARN.rsplit("/", 1)[-1]


def _store(stack: Stack) -> DynamoOperationsStore:
    store = stack.services.operations
    assert isinstance(store, DynamoOperationsStore)
    return store


def _audit(at: datetime, entry_id: str, action: AuditAction = AuditAction.DISABLE_CLASS) -> AuditEntry:
    return AuditEntry(entry_id=entry_id, at=at, actor="admin", action=action, target="t", before={"a": 1})


# -- the Operations store ---------------------------------------------------------------------------------
def test_class_state_writes_are_versioned_and_audited_in_one_transaction(stack: Stack) -> None:
    store = _store(stack)
    start = store.get_class_state("Basic2x8", GeoZone.EUROPEAN_UNION)
    assert (start.disabled, start.version) == (False, 0)

    off = disabled(start, "maintenance", "admin", NOW)
    store.save_class_state(off, _audit(NOW, "e1"))
    stored = store.get_class_state("Basic2x8", GeoZone.EUROPEAN_UNION)
    assert stored == off

    # A writer that read version 0 loses, and writes no audit entry either.
    with pytest.raises(ConditionFailed):
        store.save_class_state(disabled(start, "other", "admin", NOW), _audit(NOW, "e2"))
    assert [e.entry_id for e in store.list_audit(10, None)[0]] == ["e1"]

    store.save_class_state(enabled(stored, "admin", NOW), _audit(NOW + timedelta(seconds=1), "e3"))
    assert store.get_class_state("Basic2x8", GeoZone.EUROPEAN_UNION).version == 2


def test_class_states_are_cached_for_the_age_given_and_forgotten_on_a_local_change(stack: Stack) -> None:
    ticks = iter([0.0, 1.0, 100.0])
    store = DynamoOperationsStore(
        boto3.client("dynamodb", region_name="us-east-1"),
        stack.settings.operations_table,
        stack.settings.jobs_table,
        stack.settings.accounts_table,
        stack.settings.ledger_table,
        monotonic=lambda: next(ticks),
    )
    assert store.class_states(10) == {}
    # Another environment's change is not seen while the cache is fresh...
    other = _store(stack)
    other.save_class_state(
        disabled(ClassAvailability("Basic1x8", GeoZone.UNITED_STATES), "x", "a", NOW), _audit(NOW, "o1")
    )
    assert store.class_states(10) == {}
    # ...and is once it is older than the age given.
    states = store.class_states(10)
    assert states[("Basic1x8", GeoZone.UNITED_STATES)].reason == "x"


def test_audit_pages_newest_first_and_refuses_foreign_tokens(stack: Stack) -> None:
    store = _store(stack)
    for i in range(5):
        store.record(_audit(NOW + timedelta(seconds=i), f"e{i}"))
    store.record(_audit(NOW + timedelta(seconds=4), "e4"))  # the same entry again: stored once

    first, token = store.list_audit(3, None)
    assert [e.entry_id for e in first] == ["e4", "e3", "e2"]
    assert token is not None
    rest, last = store.list_audit(3, token)
    assert [e.entry_id for e in rest] == ["e1", "e0"]
    assert last is None
    assert first[0].before == {"a": 1} and first[0].at == NOW + timedelta(seconds=4)
    with pytest.raises(ValidationFailed) as raised:
        store.list_audit(3, "bm90LWEtdG9rZW4=")
    assert raised.value.field == "nextToken"


def test_a_grant_entry_is_written_once_with_its_audit_entry(stack: Stack) -> None:
    store = _store(stack)
    entry = LedgerEntry(
        entry_id="grant#key#abc",
        account_id="dev",
        at=NOW,
        kind=LedgerKind.GRANT,
        credits=Decimal("2.5"),
        balance_after=Decimal("10002.5"),
        reason="r",
    )
    assert store.grant_credits(entry, _audit(NOW, "g1", AuditAction.GRANT_CREDITS)) is True
    assert stack.balance("dev") == Decimal("10002.5")
    # The same entry again: nothing written (not a race: False, not ConditionFailed).
    replay = LedgerEntry(
        entry_id=entry.entry_id,
        account_id="dev",
        at=NOW,
        kind=LedgerKind.GRANT,
        credits=Decimal("2.5"),
        balance_after=Decimal("10005.0"),
        reason="r",
    )
    assert store.grant_credits(replay, _audit(NOW, "g2", AuditAction.GRANT_CREDITS)) is False
    assert stack.balance("dev") == Decimal("10002.5")
    # A stale balance is a race: ConditionFailed, nothing written.
    stale = LedgerEntry(
        entry_id="grant#other",
        account_id="dev",
        at=NOW,
        kind=LedgerKind.GRANT,
        credits=Decimal("1"),
        balance_after=Decimal("10001"),
        reason="r",
    )
    with pytest.raises(ConditionFailed):
        store.grant_credits(stale, _audit(NOW, "g3", AuditAction.GRANT_CREDITS))
    assert [e.entry_id for e in store.list_audit(10, None)[0]] == ["g1"]


def test_unfinished_jobs_are_counted_per_class_and_zone(stack: Stack) -> None:
    queued = stack.api(
        "POST", "/jobs", body={"code": "1", "machineClass": "Basic2x8", "geoZone": "EuropeanUnion"}
    )
    assert queued[0] == 202
    stack.start_running({"code": "2", "machineClass": "Basic2x8", "geoZone": "EuropeanUnion"})
    stack.start_running({"code": "3"})

    loads = _store(stack).count_unfinished()

    assert (
        loads[("Basic2x8", GeoZone.EUROPEAN_UNION)].queued,
        loads[("Basic2x8", GeoZone.EUROPEAN_UNION)].running,
    ) == (1, 1)
    assert loads[("Basic1x8", GeoZone.UNITED_STATES)].running == 1


# -- the AWS Batch adapter ---------------------------------------------------------------------------------
def test_the_adapter_describes_and_switches_a_queue_on_moto(fleet_stack: Stack) -> None:
    fleet = AwsBatchFleet(boto3.client("batch", region_name="eu-central-1"))
    (queue,) = fleet.describe_job_queues([QUEUE_ARN.replace("us-east-1", "eu-central-1")])
    assert (queue.name, queue.state) == (QUEUE_NAME, "ENABLED")
    (environment,) = fleet.describe_compute_environments(list(queue.compute_environments))
    assert (environment.name, environment.max_vcpus) == ("remote-batch-General-Spot", 64)

    fleet.set_job_queue_state(QUEUE_NAME, "DISABLED")

    assert fleet.describe_job_queues([QUEUE_NAME])[0].state == "DISABLED"
    assert fleet.describe_job_queues(["no-such-queue"]) == []


def test_the_adapter_sends_max_vcpus_as_update_compute_environment_takes_it() -> None:
    # moto accepts UpdateComputeEnvironment but ignores computeResources: the request is what matters.
    client = boto3.client(
        "batch", region_name="eu-central-1", aws_access_key_id="k", aws_secret_access_key="s"
    )
    with Stubber(client) as stubber:
        stubber.add_response(
            "update_compute_environment",
            {
                "computeEnvironmentName": "ce",
                "computeEnvironmentArn": "arn:aws:batch:eu-central-1:1:compute-environment/ce",
            },
            {
                "computeEnvironment": "arn:aws:batch:eu-central-1:1:compute-environment/ce",
                "computeResources": {"maxvCpus": 16},
            },
        )
        stubber.add_client_error("update_compute_environment", "ClientException", "no such environment")
        fleet = AwsBatchFleet(client)
        fleet.set_max_vcpus("arn:aws:batch:eu-central-1:1:compute-environment/ce", 16)
        with pytest.raises(DependencyFailed) as raised:
            fleet.set_max_vcpus("gone", 1)
        stubber.assert_no_pending_responses()
    assert "refused" in raised.value.message


# -- the admin routes ---------------------------------------------------------------------------------------
def test_disable_refuses_submits_with_the_reason_and_enable_restores_them(fleet_stack: Stack) -> None:
    fleet_stack.add_account("admin", "0")
    body = {"code": "1", "machineClass": "Basic2x8", "geoZone": "UnitedStates"}

    status, state = fleet_stack.api(
        "POST",
        "/admin/machine-classes/Basic2x8/zones/UnitedStates/disable",
        body={"reason": "host repairs"},
        **ADMIN,
    )

    assert status == 200, state
    assert (state["state"], state["reason"], state["queueState"], state["maxVcpus"]) == (
        "DISABLED",
        "host repairs",
        "DISABLED",
        64,
    )
    refused = fleet_stack.api("POST", "/jobs", body=body)
    assert refused == (
        503,
        {
            "error": {
                "code": "ClassUnavailable",
                "message": "Basic2x8 is not taking new jobs in UnitedStates: host repairs",
                "field": "machineClass",
            }
        },
    )
    assert fleet_stack.batch[GeoZone.UNITED_STATES].submissions == []

    # The audit log is ordered by time; two actions at the very same instant have no order.
    fleet_stack.clock.advance(1)
    status, state = fleet_stack.api(
        "POST", "/admin/machine-classes/Basic2x8/zones/UnitedStates/enable", **ADMIN
    )
    assert status == 200 and state["state"] == "ENABLED" and state["queueState"] == "ENABLED", state
    assert fleet_stack.api("POST", "/jobs", body=body)[0] == 202
    status, audit = fleet_stack.api("GET", "/admin/audit", **ADMIN)
    assert [e["action"] for e in audit["entries"]] == ["EnableMachineClass", "DisableMachineClass"]


def test_a_keyed_disable_replays_its_answer_and_a_changed_body_is_409(fleet_stack: Stack) -> None:
    path = "/admin/machine-classes/GPU4xL4/zones/UnitedStates/disable"
    key = {"Idempotency-Key": "op-1"}
    first = fleet_stack.api("POST", path, body={"reason": "driver update"}, headers=key, **ADMIN)
    second = fleet_stack.api("POST", path, body={"reason": "driver update"}, headers=key, **ADMIN)
    assert first[0] == second[0] == 200 and first[1] == second[1]
    changed = fleet_stack.api("POST", path, body={"reason": "another"}, headers=key, **ADMIN)
    assert changed[0] == 409 and changed[1]["error"]["field"] == "Idempotency-Key"
    status, audit = fleet_stack.api("GET", "/admin/audit", **ADMIN)
    assert len(audit["entries"]) == 1


def test_a_keyed_grant_credits_once_with_one_audit_entry(stack: Stack) -> None:
    key = {"Idempotency-Key": "grant-1"}
    answers = [
        stack.api(
            "POST",
            "/admin/accounts/dev/credits",
            body={"credits": 0.0001, "reason": "r"},
            headers=key,
            **ADMIN,
        )
        for _ in range(2)
    ]
    assert [a[0] for a in answers] == [200, 200] and answers[0][1] == answers[1][1]
    assert stack.balance("dev") == Decimal("10000.0001")
    # Even once the api's replay records are gone (after 24 h), the same key never credits again: the
    # grant's ledger id is derived from (admin, account, key).
    IDEMPOTENT_RUNNERS.clear()
    boto3.client("dynamodb", region_name="us-east-1").delete_table(TableName=stack.settings.idempotency_table)
    boto3.client("dynamodb", region_name="us-east-1").create_table(
        **create_table_request(IDEMPOTENCY, stack.settings.idempotency_table)
    )
    late = stack.api(
        "POST", "/admin/accounts/dev/credits", body={"credits": 0.0001, "reason": "r"}, headers=key, **ADMIN
    )
    assert late[0] == 200 and stack.balance("dev") == Decimal("10000.0001")
    status, audit = stack.api("GET", "/admin/audit", **ADMIN)
    grants = [e for e in audit["entries"] if e["action"] == "GrantCredits"]
    assert len(grants) == 1
    assert grants[0]["before"] == {"creditBalance": "10000.0000"}
    assert grants[0]["after"] == {"creditBalance": "10000.0001", "credits": "0.0001"}


def test_capacity_and_listing_need_batch_and_answer_in_its_terms(fleet_stack: Stack) -> None:
    status, listed = fleet_stack.api("GET", "/admin/machine-classes", **ADMIN)
    assert status == 200
    assert len(listed["machineClasses"]) == 20
    basic = next(
        c
        for c in listed["machineClasses"]
        if (c["machineClass"], c["geoZone"]) == ("Basic1x8", "UnitedStates")
    )
    assert basic["computeEnvironments"] == [
        {"name": "remote-batch-General-Spot", "state": "ENABLED", "maxVcpus": 64}
    ]
    assert "Basic2x8" in basic["sharedWith"] and basic["state"] == "ENABLED"
    for wrong in (-1, "2", True, 2.5):
        bad = fleet_stack.api(
            "PUT",
            "/admin/machine-classes/Basic1x8/zones/UnitedStates/capacity",
            body={"maxVcpus": wrong},
            **ADMIN,
        )
        assert bad[0] == 400 and bad[1]["error"]["field"] == "maxVcpus", (wrong, bad)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/admin/machine-classes"),
        ("GET", "/admin/audit"),
        ("POST", "/admin/machine-classes/Basic1x8/zones/UnitedStates/enable"),
    ],
)
def test_fleet_routes_need_the_admin_role(stack: Stack, method: str, path: str) -> None:
    status, error = stack.api(method, path, body={} if method == "POST" else None)
    assert status == 403 and error["error"]["code"] == "Forbidden"


def test_an_admitted_job_of_a_disabled_class_waits_queued_and_runs_once_enabled(
    fleet_stack: Stack, queued: RecordingQueue
) -> None:
    from functions.handlers import dispatcher

    # Given a job admitted and on the dispatch queue, then its class taken out of service
    fleet_stack.add_account("admin", "0")
    body = {"code": "1", "machineClass": "Basic2x8", "geoZone": "UnitedStates"}
    status, job = fleet_stack.api("POST", "/jobs", body=body)
    assert status == 202 and queued.sent == [job["jobId"]]
    path = "/admin/machine-classes/Basic2x8/zones/UnitedStates"
    assert fleet_stack.api("POST", f"{path}/disable", body={"reason": "host repairs"}, **ADMIN)[0] == 200

    # When the dispatcher gets its message: nothing goes to AWS Batch, the job stays Queued, admitted
    # (its quota held), saying why (issue 15: queued jobs stay queued)
    assert dispatcher.handler(sqs_event([job["jobId"]]), FakeLambdaContext()) == {"batchItemFailures": []}
    assert fleet_stack.batch[GeoZone.UNITED_STATES].submissions == []
    _, waiting = fleet_stack.api("GET", f"/jobs/{job['jobId']}")
    assert (waiting["status"], waiting["statusReason"]) == (
        "Queued",
        "Waiting: Basic2x8 is out of service in UnitedStates: host repairs",
    )
    stored = fleet_stack.services.store.get_job(job["jobId"])
    assert stored is not None and stored.dispatch_state == DispatchState.ADMITTED

    # When the class is enabled: the job is sent again, submitted once, its reason gone
    fleet_stack.clock.advance(1)
    assert fleet_stack.api("POST", f"{path}/enable", **ADMIN)[0] == 200
    assert queued.sent == [job["jobId"], job["jobId"]]
    assert dispatcher.handler(sqs_event([job["jobId"]]), FakeLambdaContext()) == {"batchItemFailures": []}
    assert [s.job_name for s in fleet_stack.batch[GeoZone.UNITED_STATES].submissions] == [job["jobId"]]
    _, sent = fleet_stack.api("GET", f"/jobs/{job['jobId']}")
    assert (sent["status"], sent.get("statusReason")) == ("Queued", None)


def test_a_class_disabled_after_the_dispatchers_read_parks_the_job_aws_batch_refuses(
    fleet_stack: Stack, queued: RecordingQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from functions.handlers import dispatcher

    # Given the dispatcher's cached view of the class states says "in service" while an operator has
    # just disabled it (another environment's change: the cache lives 10 s), so SubmitJob is refused
    status, job = fleet_stack.api("POST", "/jobs", body={"code": "1", "machineClass": "Basic2x8"})
    assert status == 202
    operations = _store(fleet_stack)
    current = operations.get_class_state("Basic2x8", GeoZone.UNITED_STATES)
    operations.save_class_state(disabled(current, "spot shortage", "admin", NOW), _audit(NOW, "d1"))
    monkeypatch.setattr(type(operations), "class_states", lambda self, max_age: {})

    def refuse(submission: Any) -> str:
        raise BatchRefused("AWS Batch refused to accept the job: Job queue is DISABLED")

    monkeypatch.setattr(fleet_stack.batch[GeoZone.UNITED_STATES], "submit_job", refuse)

    # Then the refusal parks the job (a fresh read of the state) instead of ending it
    assert dispatcher.handler(sqs_event([job["jobId"]]), FakeLambdaContext()) == {"batchItemFailures": []}
    _, waiting = fleet_stack.api("GET", f"/jobs/{job['jobId']}")
    assert (waiting["status"], waiting["statusReason"]) == (
        "Queued",
        "Waiting: Basic2x8 is out of service in UnitedStates: spot shortage",
    )


def test_an_admitted_array_span_of_a_disabled_class_waits_and_goes_once_enabled(
    fleet_stack: Stack, queued: RecordingQueue
) -> None:
    from functions.handlers import dispatcher

    # Given an array whose span the quota admitted (the dispatcher's admission message)
    fleet_stack.add_account("admin", "0")
    body = {"code": "item", "arrayItems": [1, 2], "machineClass": "Basic2x8", "geoZone": "UnitedStates"}
    status, job = fleet_stack.api("POST", "/jobs", body=body)
    assert status == 202, job
    admission = sqs_event(["x"])
    admission["Records"][0]["body"] = json.dumps({"accountId": "dev"})
    assert dispatcher.handler(admission, FakeLambdaContext()) == {"batchItemFailures": []}
    spans = [m for m in queued.sent if m.startswith(job["jobId"] + "#")]
    assert len(spans) == 1, queued.sent

    # When its class is taken out of service before the span's message is read: nothing goes to Batch
    path = "/admin/machine-classes/Basic2x8/zones/UnitedStates"
    assert fleet_stack.api("POST", f"{path}/disable", body={"reason": "host repairs"}, **ADMIN)[0] == 200
    assert dispatcher.handler(sqs_event(spans), FakeLambdaContext()) == {"batchItemFailures": []}
    assert fleet_stack.batch[GeoZone.UNITED_STATES].submissions == []
    _, waiting = fleet_stack.api("GET", f"/jobs/{job['jobId']}")
    assert waiting["status"] == "Queued", waiting

    # Then enabling sends the span again, and it is submitted once, as one array job of 2
    fleet_stack.clock.advance(1)
    assert fleet_stack.api("POST", f"{path}/enable", **ADMIN)[0] == 200
    assert queued.sent.count(spans[0]) == 2, queued.sent
    assert dispatcher.handler(sqs_event(spans), FakeLambdaContext()) == {"batchItemFailures": []}
    (submitted,) = fleet_stack.batch[GeoZone.UNITED_STATES].submissions
    assert submitted.array_size == 2
