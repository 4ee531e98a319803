"""Quotas and the dispatcher on moto: held jobs, admission as usage frees, 400 QuotaExceeded, abort of a
job never sent, the dispatcher Lambda's partial batch answers, and concurrent submits and completions
that never admit past a limit nor leave a job held while its capacity is free."""

from __future__ import annotations

import json
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from decimal import Decimal
from typing import Any

import pytest

from functions import bootstrap
from functions.domain.errors import BatchRefused, DependencyFailed
from functions.domain.jobs import ABORTED_BY_USER, BatchJobState, DispatchState, JobType, PayloadKind
from functions.domain.machine_classes import GeoZone
from functions.domain.quotas import Family, QuotaKey, QuotaLimits
from functions.domain.status import JobStatus
from functions.logic import dispatch_rules, endings, submission
from functions.logic.dispatch_rules import MAX_RECEIVES, SUBMIT_ATTEMPTS
from functions.logic.job_events import apply_job_state_change
from functions.ports import BatchSubmission
from remote_batch_local.dispatch_queue import LocalDispatchQueue
from tests.fakes import FakeLambdaContext
from tests.integration.conftest import RecordingQueue, Stack, finish, sqs_event

US = GeoZone.UNITED_STATES
BASIC_US = QuotaKey(Family.BASIC, US)
ADMIN = {"account_id": "admin", "groups": "admin"}
SLEEPER = {"code": "import time\ntime.sleep(1)", "machineClass": "Basic1x8", "geoZone": "UnitedStates"}


def set_basic_us(stack: Stack, limit: int) -> None:
    status, body = stack.api(
        "PUT",
        "/admin/accounts/dev/quotas",
        body={"quotas": [{"family": "Basic", "geoZone": "UnitedStates", "limit": limit}]},
        **ADMIN,
    )
    assert status == 200, body


def basic_us_line(stack: Stack) -> dict[str, Any]:
    status, body = stack.api("GET", "/account/quotas")
    assert status == 200
    return next(q for q in body["quotas"] if q["family"] == "Basic" and q["geoZone"] == "UnitedStates")


def test_jobs_over_the_quota_wait_with_the_reason_and_go_oldest_first_as_usage_frees(stack: Stack) -> None:
    set_basic_us(stack, 2)
    ids = []
    for _ in range(4):
        status, job = stack.api("POST", "/jobs", body=SLEEPER)
        assert status == 202
        ids.append(job["jobId"])
    # Two were sent to AWS Batch; two wait with the reason.
    assert [s.job_name for s in stack.batch[US].submissions] == ids[:2]
    for job_id in ids[2:]:
        _, job = stack.api("GET", f"/jobs/{job_id}")
        assert job["status"] == "Queued"
        assert job["statusReason"] == "Waiting for quota: Basic vCPUs in UnitedStates (2 of 2 in use)"
    assert basic_us_line(stack) == {
        "family": "Basic",
        "geoZone": "UnitedStates",
        "unit": "vCPU",
        "limit": 2,
        "inUse": 2,
        "queued": 2,
        "reserved": 0,
    }
    # One ends: the oldest waiting job is sent, in the same event's handling.
    finish(stack, ids[0])
    assert [s.job_name for s in stack.batch[US].submissions] == ids[:3]
    _, third = stack.api("GET", f"/jobs/{ids[2]}")
    assert third["statusReason"] is None
    assert basic_us_line(stack)["inUse"] == 2 and basic_us_line(stack)["queued"] == 1
    for job_id in ids[1:3]:
        finish(stack, job_id)
    finish(stack, ids[3])
    assert [s.job_name for s in stack.batch[US].submissions] == ids
    assert basic_us_line(stack) | {"limit": 0} == {
        **basic_us_line(stack),
        "limit": 0,
        "inUse": 0,
        "queued": 0,
    }
    _, total = stack.api("GET", "/account/quotas")
    assert total["total"] == {"unit": "vCPU", "limit": 768, "inUse": 0, "queued": 0, "reserved": 0}


def test_a_job_alone_over_its_family_quota_is_400_quota_exceeded(stack: Stack) -> None:
    status, _ = stack.api(
        "PUT",
        "/admin/accounts/dev/quotas",
        body={"quotas": [{"family": "Compute", "geoZone": "UnitedStates", "limit": 32}]},
        **ADMIN,
    )
    assert status == 200
    status, body = stack.api("POST", "/jobs", body={"code": "1", "machineClass": "Compute64x128"})
    assert status == 400
    assert body["error"] == {
        "code": "QuotaExceeded",
        "message": "Compute64x128 needs 64 vCPUs but the account's Compute quota in UnitedStates is 32 "
        "vCPUs; ask an operator for a higher quota.",
        "field": "machineClass",
    }
    assert stack.batch[US].submissions == []
    assert stack.count_items(stack.settings.jobs_table) == 0


def test_only_an_admin_sets_quotas_and_unknown_accounts_are_404(stack: Stack) -> None:
    body = {"quotas": [{"family": "GPU", "geoZone": "EuropeanUnion", "limit": 1}]}
    status, answer = stack.api("PUT", "/admin/accounts/dev/quotas", body=body)
    assert (status, answer["error"]["code"]) == (403, "Forbidden")
    status, answer = stack.api("PUT", "/admin/accounts/nobody/quotas", body=body, **ADMIN)
    assert (status, answer["error"]["code"]) == (404, "NotFound")
    status, answer = stack.api(
        "PUT",
        "/admin/accounts/dev/quotas",
        body={"quotas": [{"family": "Tiny", "geoZone": "EuropeanUnion", "limit": 1}]},
        **ADMIN,
    )
    assert status == 400 and answer["error"]["field"] == "quotas[0].family"


def test_raising_a_quota_admits_the_held_jobs_at_once(stack: Stack) -> None:
    set_basic_us(stack, 1)
    ids = [stack.api("POST", "/jobs", body=SLEEPER)[1]["jobId"] for _ in range(3)]
    assert len(stack.batch[US].submissions) == 1
    set_basic_us(stack, 3)
    assert [s.job_name for s in stack.batch[US].submissions] == ids


def test_aborting_a_held_job_ends_it_free_without_aws_batch(stack: Stack) -> None:
    set_basic_us(stack, 1)
    first = stack.api("POST", "/jobs", body=SLEEPER)[1]["jobId"]
    held = stack.api("POST", "/jobs", body=SLEEPER)[1]["jobId"]
    balance = stack.balance("dev")
    status, job = stack.api("POST", f"/jobs/{held}/abort")
    assert status == 202
    assert (job["status"], job["statusReason"], job["creditsSpent"]) == ("Terminated", "Aborted by user", 0)
    assert [s.job_name for s in stack.batch[US].submissions] == [first]
    assert stack.batch[US].terminations == []
    assert stack.balance("dev") == balance
    assert basic_us_line(stack)["queued"] == 0
    # Ending the running one leaves nothing waiting or held.
    finish(stack, first)
    assert basic_us_line(stack) | {"limit": 1} == {**basic_us_line(stack), "inUse": 0, "queued": 0}
    status, _ = stack.api("DELETE", f"/jobs/{held}")
    assert status == 204


def test_post_answers_without_aws_batch_and_the_dispatcher_submits_once(
    stack: Stack, queued: RecordingQueue
) -> None:
    from functions.handlers import dispatcher

    status, job = stack.api("POST", "/jobs", body=SLEEPER)
    assert status == 202
    assert stack.batch[US].submissions == []
    assert queued.sent == [job["jobId"]]
    # A duplicate delivery submits once.
    answer = dispatcher.handler(sqs_event([job["jobId"], job["jobId"]]), FakeLambdaContext())
    assert answer == {"batchItemFailures": []}
    assert [s.job_name for s in stack.batch[US].submissions] == [job["jobId"]]
    stored = stack.services.store.get_job(job["jobId"])
    assert stored is not None and stored.dispatch_state == DispatchState.DISPATCHED and stored.batch_job_id


def test_a_job_aborted_before_its_turn_is_never_submitted(stack: Stack, queued: RecordingQueue) -> None:
    from functions.handlers import dispatcher

    job_id = stack.api("POST", "/jobs", body=SLEEPER)[1]["jobId"]
    status, job = stack.api("POST", f"/jobs/{job_id}/abort")
    assert (status, job["status"]) == (202, "Terminated")
    assert dispatcher.handler(sqs_event([job_id]), FakeLambdaContext()) == {"batchItemFailures": []}
    assert stack.batch[US].submissions == []
    assert basic_us_line(stack)["inUse"] == 0


def test_a_job_an_abort_ends_while_its_submit_job_is_in_flight_is_terminated_in_aws_batch(
    stack: Stack, queued: RecordingQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from functions.handlers import dispatcher

    # Given an abort that read the job admitted, and ends it while the dispatcher's SubmitJob is in
    # flight (the dispatcher claimed it between the abort's read and its write)
    job_id = stack.api("POST", "/jobs", body=SLEEPER)[1]["jobId"]
    as_read = stack.services.store.get_job(job_id)
    assert as_read is not None and as_read.dispatch_state == DispatchState.ADMITTED
    fake = stack.batch[US]
    submit = fake.submit_job

    def submit_while_aborted(submission: Any) -> str:
        batch_job_id = submit(submission)
        endings.end_undispatched(stack.services, as_read, ABORTED_BY_USER, stack.clock())
        return batch_job_id

    monkeypatch.setattr(fake, "submit_job", submit_while_aborted)

    # When the dispatcher records SubmitJob's answer
    assert dispatcher.handler(sqs_event([job_id]), FakeLambdaContext()) == {"batchItemFailures": []}

    # Then the job stays Terminated and free, and AWS Batch is told to terminate what it took: left
    # running, its events would be ignored for a final job (work never billed)
    _, job = stack.api("GET", f"/jobs/{job_id}")
    assert (job["status"], job["statusReason"]) == ("Terminated", ABORTED_BY_USER)
    assert Decimal(str(job["creditsSpent"])) == Decimal("0.0000")
    assert fake.terminations == [(fake.submitted_ids[0], ABORTED_BY_USER)]
    assert basic_us_line(stack)["inUse"] == 0


def test_throttling_is_retried_then_the_job_ends_terminated_free(
    stack: Stack, queued: RecordingQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from functions.handlers import dispatcher

    monkeypatch.setattr(dispatch_rules, "backoff_seconds", lambda attempt: 0.0)
    job_id = stack.api("POST", "/jobs", body=SLEEPER)[1]["jobId"]
    stack.batch[US].fail = True
    answer = dispatcher.handler(sqs_event([job_id]), FakeLambdaContext())
    assert answer == {"batchItemFailures": [{"itemIdentifier": "m0"}]}
    stored = stack.services.store.get_job(job_id)
    assert stored is not None and stored.dispatch_state == DispatchState.ADMITTED and not stored.is_final
    # The last delivery the dispatcher allows ends it.
    answer = dispatcher.handler(sqs_event([job_id], receive_count=MAX_RECEIVES), FakeLambdaContext())
    assert answer == {"batchItemFailures": []}
    _, job = stack.api("GET", f"/jobs/{job_id}")
    assert job["status"] == "Terminated"
    assert job["statusReason"] == (
        f"AWS Batch did not accept the job after {MAX_RECEIVES * SUBMIT_ATTEMPTS} "
        "attempts; nothing was charged"
    )
    assert job["creditsSpent"] == 0
    assert basic_us_line(stack)["inUse"] == 0


def test_a_job_aws_batch_refuses_ends_at_once(
    stack: Stack, queued: RecordingQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    from functions.handlers import dispatcher

    job_id = stack.api("POST", "/jobs", body=SLEEPER)[1]["jobId"]

    def refuse(submission: BatchSubmission) -> str:
        raise BatchRefused("AWS Batch refused to accept the job")

    monkeypatch.setattr(stack.batch[US], "submit_job", refuse)
    assert dispatcher.handler(sqs_event([job_id]), FakeLambdaContext()) == {"batchItemFailures": []}
    _, job = stack.api("GET", f"/jobs/{job_id}")
    assert (job["status"], job["statusReason"]) == ("Terminated", dispatch_rules.REFUSED_REASON)


# -- concurrency ---------------------------------------------------------------------------------------


LIMIT = 3
JOBS = 36


@pytest.mark.parametrize("admission", ["inline", "dispatcher"])
def test_concurrent_submits_and_completions_never_exceed_the_limit_nor_leave_a_job_held(
    stack: Stack, one_request_at_a_time: None, admission: str
) -> None:
    # "dispatcher": as deployed and in the local stack, submits and endings ask the dispatcher (the
    # local queue delivering to the dispatcher Lambda on its own thread) to admit; "inline": no queue.
    local_queue: LocalDispatchQueue | None = None
    if admission == "dispatcher":
        from functions.handlers import dispatcher

        local_queue = LocalDispatchQueue(
            lambda event: dispatcher.handler(event, FakeLambdaContext()), region="us-east-1", account="1"
        )
        bootstrap.install(replace(stack.services, dispatch=local_queue))
        stack.services = bootstrap.get_services()
        local_queue.start()
    services = stack.services
    services.store.put_quota_limits("dev", QuotaLimits({BASIC_US: LIMIT}))
    gateway = stack.batch[US]
    submitted: queue.Queue[BatchSubmission] = queue.Queue()
    lock = threading.Lock()
    running = {"now": 0, "peak": 0}
    record = gateway.submit_job

    def submit_job(job: BatchSubmission) -> str:
        with lock:
            running["now"] += 1
            running["peak"] = max(running["peak"], running["now"])
        batch_id = record(job)
        submitted.put(replace(job, tags={**job.tags, "batch": batch_id}))
        return batch_id

    gateway.submit_job = submit_job  # type: ignore[method-assign,assignment]
    request = submission.JobRequest(payload_kind=PayloadKind.CODE, payload="1", geo_zone="UnitedStates")

    def submit(_: int) -> str:
        return submission.submit_job(services, "dev", request, stack.clock()).job_id

    def complete(_: int) -> int:
        done = 0
        while True:
            try:
                job = submitted.get(timeout=3)
            except queue.Empty:
                return done
            with lock:
                running["now"] -= 1
            state = BatchJobState(
                batch_job_id=job.tags["batch"],
                job_name=job.job_name,
                status="SUCCEEDED",
                status_reason=None,
                created_at_ms=1_764_000_000_000,
                started_at_ms=1_764_000_001_000,
                stopped_at_ms=1_764_000_002_000,
                exit_code=0,
                log_stream_name="s",
                attempt_count=0,
            )
            for _attempt in range(5):
                try:
                    apply_job_state_change(services, state, stack.clock())
                    break
                except DependencyFailed:
                    continue  # kept losing races: EventBridge would deliver it again
            done += 1

    with ThreadPoolExecutor(max_workers=9) as pool:
        completers = [pool.submit(complete, i) for i in range(3)]
        ids = list(pool.map(submit, range(JOBS)))
        completed = sum(c.result() for c in completers)
    if local_queue is not None:
        assert local_queue.wait_idle(30)
        local_queue.stop(5)
        assert local_queue.stats().dead_letters == 0

    # Never more than the limit at once (the counter lags the store: it is at most what the store holds).
    assert running["peak"] <= LIMIT
    assert completed == JOBS
    # Every job was sent exactly once and ended; nothing holds or waits.
    assert sorted(s.job_name for s in gateway.submissions) == sorted(ids)
    jobs = services.store.get_jobs(ids)
    assert {j.status for j in jobs} == {JobStatus.SUCCEEDED}
    assert all(j.type == JobType.SINGLE for j in jobs)
    usage = services.store.get_quota_usage("dev")
    assert (usage.used(BASIC_US), usage.waiting(BASIC_US), usage.total_in_use, usage.total_queued) == (
        0,
        0,
        0,
        0,
    )
    assert services.store.list_held_jobs("dev") == []
    assert stack.balance("dev") == Decimal(10000) - JOBS * Decimal(1)


def test_an_admission_request_admits_the_accounts_held_jobs_once_per_delivered_batch(
    stack: Stack, queued: RecordingQueue
) -> None:
    from functions.handlers import dispatcher

    set_basic_us(stack, 1)
    first = stack.api("POST", "/jobs", body=SLEEPER)[1]["jobId"]
    held = [stack.api("POST", "/jobs", body=SLEEPER)[1]["jobId"] for _ in range(2)]
    assert queued.sent == [first]
    answer = dispatcher.handler(sqs_event([first]), FakeLambdaContext())
    assert answer == {"batchItemFailures": []}
    # The first ends: batch_events asks for an admission instead of scanning the held jobs itself.
    finish(stack, first)
    assert queued.admissions == ["dev"]
    assert queued.sent == [first]
    scans: list[str] = []
    list_held = stack.services.store.list_held_jobs

    def counted(account_id: str, *args: Any, **kwargs: Any) -> Any:
        scans.append(account_id)
        return list_held(account_id, *args, **kwargs)

    stack.services.store.list_held_jobs = counted  # type: ignore[method-assign]
    # Three requests of the account in one delivered batch (and a malformed one): one scan, the
    # oldest held job admitted and enqueued, the next still held.
    event = sqs_event([])
    event["Records"] = [
        {**record, "messageId": f"a{i}", "body": body}
        for i, (record, body) in enumerate(
            zip(
                sqs_event(["x"] * 4)["Records"],
                [json.dumps({"accountId": "dev"})] * 3 + [json.dumps({"accountId": 7})],
                strict=True,
            )
        )
    ]
    answer = dispatcher.handler(event, FakeLambdaContext())
    assert answer == {"batchItemFailures": []}
    assert scans == ["dev"]
    assert queued.sent == [first, held[0]]
    states = {j.job_id: j.dispatch_state for j in stack.services.store.get_jobs(held)}
    assert states == {held[0]: DispatchState.ADMITTED, held[1]: DispatchState.HELD}


def test_held_jobs_of_an_account_out_of_credits_end_instead_of_running_unpaid(stack: Stack) -> None:
    # Given carol with 1 credit and a Basic quota of 1 vCPU: one job admitted, a job and an array held
    stack.add_account("carol", "1")
    status, body = stack.api(
        "PUT",
        "/admin/accounts/carol/quotas",
        body={"quotas": [{"family": "Basic", "geoZone": "UnitedStates", "limit": 1}]},
        **ADMIN,
    )
    assert status == 200, body
    carol = {"account_id": "carol"}
    first = stack.api("POST", "/jobs", body={"code": "1"}, **carol)[1]["jobId"]
    held = stack.api("POST", "/jobs", body={"code": "2"}, **carol)[1]["jobId"]
    array = stack.api("POST", "/jobs", body={"code": "item", "arrayItems": [1, 2, 3]}, **carol)[1]["jobId"]
    for job_id in (held, array):
        stored = stack.services.store.get_job(job_id)
        assert stored is not None and stored.dispatch_state == DispatchState.HELD

    # When the first job's charge (its 60 s minimum: 1 credit) leaves the balance at 0
    finish(stack, first)
    assert stack.balance("carol") == Decimal("0.0000")

    # Then nothing more is admitted to run unpaid: the held job and the array's children end
    # Terminated, free, out of credits (as the meter ends running jobs), and nothing is left queued
    reasons = {
        held: "Account out of credits",
        array: "3 of 3 children terminated (first: index 0, Account out of credits)",
    }
    for job_id, reason in reasons.items():
        _, job = stack.api("GET", f"/jobs/{job_id}", **carol)
        assert (job["status"], job["statusReason"]) == ("Terminated", reason), job
        assert Decimal(str(job["creditsSpent"])) == Decimal("0.0000")
    assert [s.job_name for s in stack.batch[US].submissions] == [first]
    _, quotas = stack.api("GET", "/account/quotas", **carol)
    line = next(q for q in quotas["quotas"] if (q["family"], q["geoZone"]) == ("Basic", "UnitedStates"))
    assert (line["inUse"], line["queued"]) == (0, 0)
