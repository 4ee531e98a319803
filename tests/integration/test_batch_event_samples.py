"""AWS Batch events as AWS documents them (tests/samples/, see its README), read through the production
path: the batch_events handler's powertools parser model, ``to_state``, then the handler itself on moto.
None of these events comes from tests/events.py's builder."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from aws_lambda_powertools.utilities.parser import parse

from functions.adapters.batch_detail import to_state
from functions.domain.jobs import BatchJobState, ms_to_datetime
from functions.domain.status import JobStatus
from functions.handlers.batch_events import BatchJobStateChange

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


@pytest.fixture(autouse=True)
def _submitted_before_the_events(request: pytest.FixtureRequest) -> None:
    """Jobs here are submitted at the samples' creation (2025-11-29T17:20:00Z), before the times
    their events carry: a charge lies inside the job's life (``functions.domain.charged_time``), and
    the stack's clock starts a year later."""
    if "stack" in request.fixturenames:
        request.getfixturevalue("stack").clock.now = datetime(2025, 11, 29, 17, 20, tzinfo=UTC)


def sample(name):
    return json.loads((SAMPLES / f"{name}.json").read_text())


def parsed_state(event):
    model = parse(event=event, model=BatchJobStateChange)
    return to_state(model.detail, int(model.time.timestamp() * 1000))


EXPECTED = {
    "succeeded": BatchJobState(
        batch_job_id="5c3f1e0a-7b2d-4c8e-9f1a-2b3c4d5e6f70",
        job_name="job-01JDXYZ0000000000000000000",
        status="SUCCEEDED",
        status_reason="Essential container in task exited",
        created_at_ms=1_764_436_800_000,
        started_at_ms=1_764_436_830_250,
        stopped_at_ms=1_764_436_920_500,
        exit_code=0,
        log_stream_name="remote-batch/default/0a1b2c3d4e5f60718293a4b5c6d7e8f9",
        attempt_count=1,
        # the last attempt's statusReason
        container_reasons=("Essential container in task exited",),
        observed_at_ms=1_764_436_920_000,  # the envelope's time
    ),
    "failed_with_attempts": BatchJobState(
        batch_job_id="8d2e4f6a-1b3c-4d5e-8f70-9a1b2c3d4e5f",
        job_name="job-01JDXYZ0000000000000000000",
        status="FAILED",
        status_reason="Essential container in task exited",
        created_at_ms=1_764_436_800_000,
        started_at_ms=1_764_436_870_000,
        stopped_at_ms=1_764_436_915_000,
        exit_code=1,
        log_stream_name="remote-batch/default/22222222222222222222222222222222",
        attempt_count=2,
        # the last attempt's statusReason
        container_reasons=("Essential container in task exited",),
        observed_at_ms=1_764_436_916_000,  # the envelope's time
    ),
    "array_child": BatchJobState(
        batch_job_id="3e4f5a6b-7c8d-4e9f-a0b1-c2d3e4f5a6b7:3",
        job_name="job-01JDXYZ0000000000000000000",
        status="SUCCEEDED",
        status_reason="Essential container in task exited",
        created_at_ms=1_764_436_800_000,
        started_at_ms=1_764_436_830_250,
        stopped_at_ms=1_764_436_920_500,
        exit_code=0,
        log_stream_name="remote-batch/default/33333333333333333333333333333333",
        attempt_count=1,
        # the last attempt's statusReason
        container_reasons=("Essential container in task exited",),
        observed_at_ms=1_764_436_920_000,  # the envelope's time
        array_index=3,  # arrayProperties.index
    ),
    "array_parent": BatchJobState(
        batch_job_id="3e4f5a6b-7c8d-4e9f-a0b1-c2d3e4f5a6b7",
        job_name="job-01JDXYZ0000000000000000000",
        status="SUCCEEDED",
        status_reason=None,
        created_at_ms=1_764_436_800_000,
        started_at_ms=1_764_436_830_250,
        stopped_at_ms=1_764_436_980_000,
        exit_code=None,
        log_stream_name=None,
        attempt_count=0,
        observed_at_ms=1_764_436_980_000,  # the envelope's time
        array_size=4,  # arrayProperties.size (statusSummary is read by nobody)
    ),
    "never_started": BatchJobState(
        batch_job_id="6f7a8b9c-0d1e-4f2a-b3c4-d5e6f7a8b9c0",
        job_name="job-01JDXYZ0000000000000000000",
        status="FAILED",
        status_reason="Account out of credits",
        created_at_ms=1_764_436_800_000,
        started_at_ms=None,
        stopped_at_ms=1_764_437_100_000,
        exit_code=None,
        log_stream_name=None,
        attempt_count=0,
        observed_at_ms=1_764_437_100_000,  # the envelope's time
    ),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_documented_event_parses_into_the_state_the_service_applies(name):
    assert parsed_state(sample(name)) == EXPECTED[name]


def test_the_samples_are_every_file_in_the_folder():
    assert sorted(p.stem for p in SAMPLES.glob("*.json")) == sorted(EXPECTED)


def retarget(event, job_id, batch_id):
    """The sample aimed at one of this test's jobs: its service job id as ``jobName`` and its Batch
    id (the array child keeps its ``:index`` suffix). Every other field stays as AWS sends it."""
    detail = event["detail"]
    suffix = detail["jobId"].partition(":")[2]
    detail["jobName"] = job_id
    detail["jobId"] = f"{batch_id}:{suffix}" if suffix else batch_id
    return event


def submitted(stack):
    status, job = stack.api("POST", "/jobs", body={"code": "1"})
    assert status == 202, job
    stored = stack.services.store.get_job(job["jobId"])
    return stored.job_id, stored.batch_job_id


def test_a_documented_succeeded_event_settles_the_job_through_the_handler(stack):
    job_id, batch_id = submitted(stack)
    stack.clock.advance(121)  # the event arrives after its stoppedAt (17:22:00.500)
    assert stack.deliver(retarget(sample("succeeded"), job_id, batch_id)) == {
        "applied": True,
        "jobId": job_id,
        "status": "Succeeded",
    }
    job = stack.services.store.get_job(job_id)
    # 90.25 s of Running time: 91 s billed at Basic1x8's 60 credits an hour.
    assert (job.exit_code, job.credits_spent) == (0, Decimal("1.5167"))
    assert job.last_event_at == stack.clock()  # the handler's clock, written with the settlement
    assert stack.balance("dev") == Decimal("9998.4833")
    [entry] = [e for e in stack.services.store.list_ledger("dev", None, None) if e.kind.value == "charge"]
    # The charge is dated when the job stopped (the event's stoppedAt), not when the event arrived.
    assert (entry.job_id, entry.credits, entry.at) == (
        job_id,
        Decimal("1.5167"),
        ms_to_datetime(1_764_436_920_500),
    )


def test_a_documented_failure_after_a_retry_bills_the_final_attempt(stack):
    job_id, batch_id = submitted(stack)
    assert stack.deliver(retarget(sample("failed_with_attempts"), job_id, batch_id))["status"] == "Terminated"
    job = stack.services.store.get_job(job_id)
    # The final attempt ran 45 s: the 60-second minimum, 1 credit.
    assert (job.exit_code, job.credits_spent) == (1, Decimal("1.0000"))
    assert job.status_reason == "Exited with code 1"
    assert stack.balance("dev") == Decimal("9999.0000")


def test_an_array_child_event_does_not_settle_the_job(stack):
    job_id, batch_id = submitted(stack)
    assert stack.deliver(retarget(sample("array_child"), job_id, batch_id))["status"] == "Queued"
    job = stack.services.store.get_job(job_id)
    assert (job.status, job.credits_spent) == (JobStatus.QUEUED, Decimal("0"))
    assert stack.balance("dev") == Decimal("10000")


def test_a_documented_job_that_never_started_ends_without_charge(stack):
    job_id, batch_id = submitted(stack)
    stack.deliver(retarget(sample("never_started"), job_id, batch_id))
    job = stack.services.store.get_job(job_id)
    assert (job.status, job.started_at, job.credits_spent) == (JobStatus.TERMINATED, None, Decimal("0"))
    assert job.status_reason == "Account out of credits"
    assert stack.balance("dev") == Decimal("10000")
    assert [e for e in stack.services.store.list_ledger("dev", None, None) if e.kind.value == "charge"] == []


def test_documented_array_events_roll_a_child_into_its_array_and_the_array_jobs_own_decides_nothing(stack):
    status, job = stack.api("POST", "/jobs", body={"code": "item", "arrayItems": [1, 2, 3, 4]})
    assert status == 202, job
    span = stack.services.store.get_job(job["jobId"]).array_spans[0]
    assert stack.deliver(retarget(sample("array_child"), job["jobId"], span)) == {
        "applied": True,
        "jobId": f"{job['jobId']}:3",
        "status": "Succeeded",
    }
    stack.deliver(retarget(sample("array_parent"), job["jobId"], span))

    parent = stack.services.store.get_job(job["jobId"])
    assert (parent.status, parent.child_status_counts["Succeeded"], parent.credits_settled) == (
        JobStatus.RUNNING,  # a child ran (its startedAt): the array started; 3 children to go
        1,
        Decimal("1.5167"),  # 90.25 s of Basic1x8, billed 91 s
    )
    child = stack.services.store.get_job(f"{job['jobId']}:3")
    assert (child.array_index, child.credits_spent, child.batch_job_id) == (3, Decimal("1.5167"), f"{span}:3")
