"""A dispatcher that dies between its claim (``Dispatching``) and the record of SubmitJob's answer, on moto
(issue 15): the meter's backstop leaves the claim alone for ``dispatch_rules.CLAIM_TIMEOUT``, then looks the
job up in AWS Batch by name (ListJobs, ``JOB_NAME`` filter, on moto's Batch through the boto3 adapter)
before anything else: found, its Batch id is recorded; not found, the claim is given back and the job
enqueued again. Never a second SubmitJob."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import boto3
import pytest
from moto.core.config import default_user_config

from functions import bootstrap
from functions.adapters.batch import AwsBatchGateway
from functions.domain.jobs import BatchJobState, DispatchState, Job
from functions.domain.machine_classes import GeoZone
from functions.domain.runtime import DEFAULT_PYTHON_VERSION, job_definition_name
from functions.logic.batch_submission import job_submission
from functions.ports import BatchSubmission
from tests.events import JOB_DEFINITION_ARN, QUEUE_ARN
from tests.fakes import FakeLambdaContext
from tests.integration.conftest import RecordingQueue, Stack, sqs_event

US = GeoZone.UNITED_STATES
JOB = {"code": "print(1)", "machineClass": "Basic1x8", "geoZone": "UnitedStates", "notifications": "None"}
# The meter checks a quiet job once its last event (or last check) is 10 minutes old.
QUIET_SECONDS = 11 * 60


@dataclass
class CountingGateway:
    """The boto3 ``BatchGateway`` on moto, counting SubmitJob and ListJobs-by-name calls."""

    inner: AwsBatchGateway
    submitted: list[str] = field(default_factory=list)
    looked_up: list[str] = field(default_factory=list)

    def submit_job(self, submission: BatchSubmission) -> str:
        self.submitted.append(submission.job_name)
        return self.inner.submit_job(submission)

    def terminate_job(self, batch_job_id: str, reason: str) -> None:
        self.inner.terminate_job(batch_job_id, reason)

    def describe_jobs(self, batch_job_ids: Sequence[str], observed_at_ms: int) -> list[BatchJobState]:
        return self.inner.describe_jobs(batch_job_ids, observed_at_ms)

    def find_job_by_name(self, job_queue: str, job_name: str) -> str | None:
        self.looked_up.append(job_name)
        return self.inner.find_job_by_name(job_queue, job_name)


@dataclass
class Crash:
    """The moto stack with moto's Batch behind the US zone and a recording dispatch queue."""

    stack: Stack
    batch: CountingGateway
    queue: RecordingQueue

    def job(self, job_id: str) -> Job:
        stored = self.stack.services.store.get_job(job_id)
        assert stored is not None
        return stored

    def in_batch(self, job_id: str) -> list[str]:
        """The ids of the jobs named ``job_id`` in the class's queue, as AWS Batch lists them."""
        listed = boto3.client("batch", region_name="us-east-1").list_jobs(
            jobQueue=QUEUE_ARN, filters=[{"name": "JOB_NAME", "values": [job_id]}]
        )
        return [s["jobId"] for s in listed["jobSummaryList"]]

    def admitted_then_claimed(self) -> str:
        """A job submitted, admitted and claimed by a dispatcher (its message is then lost with it)."""
        status, job = self.stack.api("POST", "/jobs", body=JOB)
        assert status == 202, job
        job_id = str(job["jobId"])
        assert self.queue.sent == [job_id]
        claimed = self.stack.services.store.claim_dispatch(job_id, self.stack.clock())
        assert claimed is not None and claimed.dispatch_state == DispatchState.DISPATCHING
        self.queue.sent.clear()
        return job_id

    def dispatch_sent(self) -> None:
        """The dispatcher Lambda takes what is on the queue."""
        from functions.handlers import dispatcher

        answer = dispatcher.handler(sqs_event(list(self.queue.sent)), FakeLambdaContext())
        assert answer == {"batchItemFailures": []}


@pytest.fixture
def crash(fleet_stack: Stack, monkeypatch: pytest.MonkeyPatch) -> Crash:
    # moto's Batch without Docker: a submitted job is SUCCEEDED at once (docs/TOOLCHAIN.md, moto 5).
    monkeypatch.setitem(default_user_config, "batch", {"use_docker": False})
    client: Any = boto3.client("batch", region_name="us-east-1")
    registered = client.register_job_definition(
        jobDefinitionName="remote-batch-worker-py312",  # the default Python's (job_definition_name)
        type="container",
        containerProperties={"image": "remote-batch-worker", "vcpus": 1, "memory": 512},
    )
    assert registered["jobDefinitionArn"] == job_definition_name(JOB_DEFINITION_ARN, DEFAULT_PYTHON_VERSION)
    counting = CountingGateway(AwsBatchGateway(client))
    queue = RecordingQueue()
    services = fleet_stack.services
    zones = {**services.zones, US: replace(services.zones[US], batch=counting)}
    bootstrap.install(replace(services, zones=zones, dispatch=queue))
    fleet_stack.services = bootstrap.get_services()
    return Crash(fleet_stack, counting, queue)


def test_a_claim_whose_dispatcher_died_before_submit_job_is_enqueued_again_and_submitted_once(
    crash: Crash,
) -> None:
    job_id = crash.admitted_then_claimed()

    # Quiet for 11 minutes: the meter checks it, but the claim is younger than the bound.
    crash.stack.clock.advance(QUIET_SECONDS)
    crash.stack.tick()
    assert crash.job(job_id).dispatch_state == DispatchState.DISPATCHING
    assert crash.batch.looked_up == [] and crash.queue.sent == []

    # 22 minutes after the claim (past CLAIM_TIMEOUT): AWS Batch has no job of that name, so the claim
    # is given back and the job enqueued again.
    crash.stack.clock.advance(QUIET_SECONDS)
    crash.stack.tick()
    assert crash.batch.looked_up == [job_id]
    assert crash.batch.submitted == []
    assert crash.queue.sent == [job_id]
    released = crash.job(job_id)
    assert (released.dispatch_state, released.dispatch_claimed_at) == (DispatchState.ADMITTED, None)

    # The dispatcher submits it, once; the message delivered twice changes nothing.
    crash.dispatch_sent()
    crash.dispatch_sent()
    assert crash.batch.submitted == [job_id]
    sent = crash.job(job_id)
    assert sent.dispatch_state == DispatchState.DISPATCHED
    assert crash.in_batch(job_id) == [sent.batch_job_id]

    # Later ticks reconcile it from AWS Batch (moto ran it) and submit nothing more.
    crash.stack.clock.advance(QUIET_SECONDS)
    crash.stack.tick()
    assert crash.batch.submitted == [job_id] and crash.in_batch(job_id) == [sent.batch_job_id]
    assert crash.job(job_id).status.value == "Succeeded"


def test_a_claim_whose_dispatcher_died_after_submit_job_is_recorded_never_submitted_again(
    crash: Crash,
) -> None:
    job_id = crash.admitted_then_claimed()
    # The dispatcher's SubmitJob went through; it died before recording the answer.
    batch_job_id = crash.batch.submit_job(job_submission(crash.stack.services, crash.job(job_id)))
    assert crash.job(job_id).batch_job_id is None

    crash.stack.clock.advance(QUIET_SECONDS)
    crash.stack.tick()
    assert crash.batch.looked_up == []
    crash.stack.clock.advance(QUIET_SECONDS)
    crash.stack.tick()

    assert crash.batch.looked_up == [job_id]
    recorded = crash.job(job_id)
    assert (recorded.dispatch_state, recorded.batch_job_id) == (DispatchState.DISPATCHED, batch_job_id)
    assert crash.queue.sent == []
    assert crash.batch.submitted == [job_id]  # the dead dispatcher's call only
    assert crash.in_batch(job_id) == [batch_job_id]

    # Its state follows from AWS Batch (the reconciliation, as events were lost): Succeeded, no resubmit.
    crash.stack.clock.advance(QUIET_SECONDS)
    crash.stack.tick()
    assert crash.job(job_id).status.value == "Succeeded"
    assert crash.batch.submitted == [job_id] and crash.in_batch(job_id) == [batch_job_id]


def test_a_stranded_claim_of_a_job_aborted_meanwhile_ends_it_free_without_aws_batch(crash: Crash) -> None:
    job_id = crash.admitted_then_claimed()
    balance = crash.stack.balance("dev")
    # Aborted while its (dead) dispatcher held the claim: the abort records the reason for it.
    status, _ = crash.stack.api("POST", f"/jobs/{job_id}/abort")
    assert status == 202
    assert crash.job(job_id).termination_reason == "Aborted by user"

    for _ in range(2):
        crash.stack.clock.advance(QUIET_SECONDS)
        crash.stack.tick()

    ended = crash.job(job_id)
    assert (ended.status.value, ended.status_reason) == ("Terminated", "Aborted by user")
    assert crash.batch.submitted == [] and crash.queue.sent == []
    assert crash.stack.balance("dev") == balance
    status, quotas = crash.stack.api("GET", "/account/quotas")
    assert status == 200 and quotas["total"]["inUse"] == 0
