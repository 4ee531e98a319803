"""The money code's edges on moto: the out-of-credits boundary, the settlement's job-row condition,
and every failure branch of settling and metering (account missing, writes that keep losing, Batch
refusing TerminateJob or DescribeJobs, one reconciled job failing among many). Each failure must leave
the books exact: no charge without its ledger entry, no job charged twice, nothing half-written."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

import boto3
import pytest
from botocore.exceptions import ClientError

from functions.domain.credits import ZERO, Charge
from functions.domain.errors import ConditionFailed, DependencyFailed
from functions.domain.jobs import BatchJobState, apply_batch_event
from functions.domain.machine_classes import GeoZone
from functions.domain.status import JobStatus
from functions.logic import job_events
from tests.events import batch_event

US = GeoZone.UNITED_STATES
SLEEPER = {"code": "import time; time.sleep(600)"}


def succeeded(job_id, batch_id, started, seconds=90):
    """SUCCEEDED after ``seconds`` of Running time (Basic1x8: 90 s cost 1.5 credits)."""
    return batch_event(
        job_id,
        batch_id,
        "SUCCEEDED",
        created_at=started,
        started_at=started,
        stopped_at=started + seconds * 1000,
        exit_code=0,
        status_reason="Essential container in task exited",
    )


def succeeded_state(job_id, batch_id, started, seconds=90):
    return BatchJobState(
        batch_job_id=batch_id,
        job_name=job_id,
        status="SUCCEEDED",
        status_reason="Essential container in task exited",
        created_at_ms=started,
        started_at_ms=started,
        stopped_at_ms=started + seconds * 1000,
        exit_code=0,
        log_stream_name="s",
        attempt_count=1,
    )


def charges(stack, account_id):
    return [
        (e.job_id, e.credits, e.unbilled)
        for e in stack.services.store.list_ledger(account_id, None, None)
        if e.kind.value == "charge"
    ]


def delete_account(stack, account_id):
    boto3.client("dynamodb", region_name="us-east-1").delete_item(
        TableName=stack.settings.accounts_table, Key={"accountId": {"S": account_id}}
    )


def client_error(code, operation):
    return ClientError({"Error": {"Code": code, "Message": "simulated"}}, operation)


# -- the out-of-credits boundary -----------------------------------------------------------------


@pytest.mark.parametrize(("balance", "terminated"), [("0.0334", 2), ("0.0335", 0)])
def test_running_jobs_that_spent_exactly_the_balance_are_stopped_out_of_credits(stack, balance, terminated):
    stack.add_account("exact", balance, email="exact@example.com")
    first = stack.start_running(SLEEPER, account_id="exact")
    second = stack.start_running(SLEEPER, account_id="exact")
    stack.clock.advance(1)  # each Basic1x8 job has spent 0.0167: 0.0334 together
    assert stack.tick()["terminated"] == terminated
    expected = [(first[1], "Account out of credits"), (second[1], "Account out of credits")]
    assert sorted(stack.batch[US].terminations) == (sorted(expected) if terminated else [])


# -- the settlement transaction's job-row condition ----------------------------------------------


def test_a_stale_settlement_cannot_overwrite_a_settled_job(stack):
    job_id, batch_id, started = stack.start_running({"code": "1"})
    stale = stack.services.store.get_job(job_id)  # read while Running, before the settlement
    stack.deliver(succeeded(job_id, batch_id, started))
    settled = stack.services.store.get_job(job_id)
    assert (settled.status, settled.credits_spent) == (JobStatus.SUCCEEDED, Decimal("1.5000"))
    assert stack.balance("dev") == Decimal("9998.5000")

    # A settlement computed from the stale read: a FAILED that never ran, so it charges nothing and
    # carries no ledger entry; only the job row's condition stands between it and the settled job.
    never_ran = replace(succeeded_state(job_id, batch_id, started), status="FAILED", started_at_ms=None)
    transition = apply_batch_event(stale, never_ran, "Exited with code 1", arrived_at=stack.clock())
    assert transition is not None and transition.settles
    with pytest.raises(ConditionFailed):
        stack.services.store.settle(transition, Charge(ZERO, ZERO, ZERO), None, stack.clock())

    after = stack.services.store.get_job(job_id)
    assert (after.status, after.status_reason, after.credits_spent) == (
        JobStatus.SUCCEEDED,
        settled.status_reason,
        Decimal("1.5000"),
    )
    assert after.event_position == settled.event_position
    assert stack.balance("dev") == Decimal("9998.5000")
    assert charges(stack, "dev") == [(job_id, Decimal("1.5000"), Decimal("0.0000"))]


# -- settlement failures -------------------------------------------------------------------------


def test_settlement_of_a_job_whose_account_is_missing_fails_and_writes_nothing(stack):
    stack.add_account("gone", "100", email="gone@example.com")
    job_id, batch_id, started = stack.start_running({"code": "1"}, account_id="gone")
    delete_account(stack, "gone")
    with pytest.raises(DependencyFailed, match="account gone of job"):
        stack.deliver(succeeded(job_id, batch_id, started))
    job = stack.services.store.get_job(job_id)
    assert (job.status, job.credits_spent, job.completed_at) == (JobStatus.RUNNING, Decimal("0"), None)
    assert charges(stack, "gone") == []


@pytest.mark.parametrize("code", ["TransactionCanceledException", "ConditionalCheckFailedException"])
def test_settlement_that_keeps_losing_its_write_gives_up_for_a_retry_then_charges_once(
    stack, monkeypatch, code
):
    job_id, batch_id, started = stack.start_running({"code": "1"})
    client = stack.services.store._db
    real = client.transact_write_items
    calls = []

    def always_cancelled(**kwargs):
        calls.append(kwargs)
        raise client_error(code, "TransactWriteItems")

    monkeypatch.setattr(client, "transact_write_items", always_cancelled)
    monkeypatch.setattr("functions.logic.job_events.time.sleep", lambda _seconds: None)
    with pytest.raises(DependencyFailed, match="kept changing"):
        stack.deliver(succeeded(job_id, batch_id, started))
    assert len(calls) == job_events.MAX_WRITE_ATTEMPTS
    job = stack.services.store.get_job(job_id)
    assert (job.status, job.credits_spent) == (JobStatus.RUNNING, Decimal("0"))
    assert stack.balance("dev") == Decimal("10000")
    assert charges(stack, "dev") == []

    # EventBridge's retry of the same event, once DynamoDB lets it through: charged exactly once.
    monkeypatch.setattr(client, "transact_write_items", real)
    stack.deliver(succeeded(job_id, batch_id, started))
    stack.deliver(succeeded(job_id, batch_id, started))
    assert stack.services.store.get_job(job_id).status == JobStatus.SUCCEEDED
    assert stack.balance("dev") == Decimal("9998.5000")
    assert charges(stack, "dev") == [(job_id, Decimal("1.5000"), Decimal("0.0000"))]


def test_a_status_write_that_keeps_losing_gives_up_and_leaves_the_job_unchanged(stack, monkeypatch):
    status, created = stack.api("POST", "/jobs", body={"code": "1"})
    assert status == 202
    job_id = created["jobId"]
    batch_id = stack.services.store.get_job(job_id).batch_job_id
    client = stack.services.store._db
    real = client.update_item
    refused = []

    def refuse_transitions(**kwargs):
        if "#eventPosition = :before" in kwargs.get("ConditionExpression", ""):
            refused.append(kwargs["Key"])
            raise client_error("ConditionalCheckFailedException", "UpdateItem")
        return real(**kwargs)

    monkeypatch.setattr(client, "update_item", refuse_transitions)
    monkeypatch.setattr("functions.logic.job_events.time.sleep", lambda _seconds: None)
    with pytest.raises(DependencyFailed, match="kept changing"):
        stack.deliver(batch_event(job_id, batch_id, "STARTING"))
    assert len(refused) == job_events.MAX_WRITE_ATTEMPTS
    assert stack.services.store.get_job(job_id).status == JobStatus.QUEUED


# -- the meter when Batch refuses ----------------------------------------------------------------


def test_a_terminate_batch_refuses_is_recorded_and_sent_again_next_tick(stack, monkeypatch):
    gateway = stack.batch[US]
    job_id, batch_id, _ = stack.start_running({"code": "1", "timeConstraint": 1})
    other_id, other_batch, _ = stack.start_running({"code": "1", "timeConstraint": 1})
    real = gateway.terminate_job
    refused = []

    def refuse_first(batch_job_id, reason):
        if batch_job_id == batch_id:
            refused.append((batch_job_id, reason))
            raise DependencyFailed("AWS Batch did not accept the termination; try again.")
        real(batch_job_id, reason)

    monkeypatch.setattr(gateway, "terminate_job", refuse_first)
    stack.clock.advance(2)
    report = stack.tick()
    assert report["terminated"] == 1  # the other job's TerminateJob went through
    assert refused == [(batch_id, "TimeConstraint of 1 s reached")]
    assert gateway.terminations == [(other_batch, "TimeConstraint of 1 s reached")]
    job = stack.services.store.get_job(job_id)
    assert (job.status, job.termination_reason) == (JobStatus.RUNNING, "TimeConstraint of 1 s reached")
    assert stack.services.store.get_job(other_id).termination_reason == "TimeConstraint of 1 s reached"

    monkeypatch.setattr(gateway, "terminate_job", real)
    # Only the refused one is sent again: TerminateJob goes once per job (issue 9 item 4).
    assert stack.tick()["terminated"] == 1
    assert gateway.terminations == [
        (other_batch, "TimeConstraint of 1 s reached"),
        (batch_id, "TimeConstraint of 1 s reached"),
    ]


def test_describe_jobs_failing_skips_reconciliation_until_batch_answers(stack, monkeypatch):
    gateway = stack.batch[US]
    job_id, batch_id, started = stack.start_running({"code": "1"})
    gateway.known[batch_id] = succeeded_state(job_id, batch_id, started)
    real = gateway.describe_jobs
    asked = []

    def refuse(batch_job_ids, observed_at_ms):
        asked.append(list(batch_job_ids))
        raise DependencyFailed("AWS Batch did not describe the jobs; the meter retries.")

    monkeypatch.setattr(gateway, "describe_jobs", refuse)
    stack.clock.advance(11 * 60)
    stack.tick()
    assert asked == [[batch_id]]
    assert stack.services.store.get_job(job_id).status == JobStatus.RUNNING
    assert stack.balance("dev") == Decimal("10000")
    assert charges(stack, "dev") == []

    monkeypatch.setattr(gateway, "describe_jobs", real)
    assert stack.tick()["reconciled"] == 1  # still stale: not marked reconciled by the failed tick
    job = stack.services.store.get_job(job_id)
    assert (job.status, job.credits_spent) == (JobStatus.SUCCEEDED, Decimal("1.5000"))
    assert charges(stack, "dev") == [(job_id, Decimal("1.5000"), Decimal("0.0000"))]


def test_one_reconciled_job_failing_does_not_stop_the_others(stack):
    gateway = stack.batch[US]
    stack.add_account("gone", "100", email="gone@example.com")
    jobs = [
        stack.start_running({"code": "1"}, account_id="gone"),
        stack.start_running({"code": "1"}),
        stack.start_running({"code": "1"}),
    ]
    for job_id, batch_id, started in jobs:
        gateway.known[batch_id] = succeeded_state(job_id, batch_id, started)
    delete_account(stack, "gone")  # the first job's settlement fails: its account is missing
    stack.clock.advance(11 * 60)
    assert stack.tick()["reconciled"] == 3
    statuses = [stack.services.store.get_job(job_id).status for job_id, _, _ in jobs]
    assert statuses == [JobStatus.RUNNING, JobStatus.SUCCEEDED, JobStatus.SUCCEEDED]
    assert stack.balance("dev") == Decimal("9997.0000")
    assert sorted(charges(stack, "dev")) == sorted(
        (job_id, Decimal("1.5000"), Decimal("0.0000")) for job_id, _, _ in jobs[1:]
    )
    assert charges(stack, "gone") == []
