"""Array jobs through the quota and the dispatcher on moto (issue 15): spans sized to the free room,
children giving their units back as they end, oldest first among arrays and single jobs, 400 for a
child over its family's limit, abort and refusal of a partly dispatched array, a dead dispatcher's
span, and concurrent arrays and single jobs that never admit past a limit nor leave anything held."""

from __future__ import annotations

import queue
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from decimal import Decimal
from typing import Any

import boto3
import pytest

from functions import bootstrap
from functions.domain.arrays import span_dispatch_id
from functions.domain.computes import resource_name
from functions.domain.errors import BatchRefused, DependencyFailed
from functions.domain.jobs import BatchJobState, DispatchState, Job, PayloadKind
from functions.domain.machine_classes import GeoZone
from functions.domain.quotas import Demand, Family, QuotaKey, QuotaLimits
from functions.domain.status import JobStatus
from functions.logic import dispatch, dispatch_rules, submission
from functions.logic.array_dispatch import nudge_array
from functions.logic.arrays import submit
from functions.logic.dispatch_rules import DispatchOutcome
from functions.logic.job_events import apply_job_state_change
from functions.logic.quotas import admit_and_enqueue
from functions.ports import BatchSubmission
from remote_batch_local.dispatch_queue import LocalDispatchQueue
from tests.events import array_child_lifecycle, job_lifecycle
from tests.fakes import FakeComputeEnvironments, FakeLambdaContext
from tests.integration.conftest import RecordingQueue, Stack, finish

US = GeoZone.UNITED_STATES
BASIC_US = QuotaKey(Family.BASIC, US)
ADMIN = {"account_id": "admin", "groups": "admin"}
COMPUTE = {"machineClass": "Basic2x8", "geoZone": "UnitedStates", "count": 2}  # 4 vCPUs
T0 = 1_764_436_800_000


def job_of(stack: Stack, job_id: str) -> Job:
    """The job as stored (it must exist)."""
    job = stack.services.store.get_job(job_id)
    assert job is not None
    return job


def set_quota(stack: Stack, family: str, limit: int) -> None:
    status, body = stack.api(
        "PUT",
        "/admin/accounts/dev/quotas",
        body={"quotas": [{"family": family, "geoZone": "UnitedStates", "limit": limit}]},
        **ADMIN,
    )
    assert status == 200, body


def array_body(size: int, machine: str = "Basic1x8") -> dict[str, Any]:
    return {
        "code": "item",
        "arrayItems": list(range(size)),
        "machineClass": machine,
        "geoZone": "UnitedStates",
    }


def basic_us_line(stack: Stack) -> tuple[int, int]:
    status, body = stack.api("GET", "/account/quotas")
    assert status == 200
    line = next(q for q in body["quotas"] if q["family"] == "Basic" and q["geoZone"] == "UnitedStates")
    return line["inUse"], line["queued"]


Child = tuple[str, str, int, int, bool]  # job name, span's Batch id, index in span, global index, plain


def new_children(stack: Stack, seen: int) -> tuple[list[Child], int]:
    """The children of the spans submitted after the first ``seen`` submissions, and the new count."""
    gateway = stack.batch[US]
    children: list[Child] = []
    pairs = list(zip(gateway.submissions, gateway.submitted_ids, strict=True))
    for submitted, batch_id in pairs[seen:]:
        offset = int(submitted.environment["REMOTE_BATCH_ARRAY_OFFSET"])
        count = submitted.array_size or 1
        children += [
            (submitted.job_name, batch_id, local, offset + local, submitted.array_size is None)
            for local in range(count)
        ]
    return children, len(pairs)


def child_events(child: Child, *, succeeded: bool = True) -> list[dict[str, Any]]:
    """A child's events: an array span's child (``<span>:<index>``), or a one-item span's plain job."""
    name, batch_id, local, _, plain = child
    if plain:
        return job_lifecycle(
            name, batch_id, created_at=T0, started_at=T0 + 1_000, stopped_at=T0 + 61_000, succeeded=succeeded
        )
    return array_child_lifecycle(
        name,
        batch_id,
        local,
        created_at=T0,
        started_at=T0 + 1_000,
        stopped_at=T0 + 61_000,
        succeeded=succeeded,
    )


@pytest.mark.slow
def test_an_array_under_a_quota_of_two_runs_two_children_at_a_time_and_gives_every_unit_back(
    stack: Stack,
) -> None:
    set_quota(stack, "Basic", 2)
    status, parent = stack.api("POST", "/jobs", body=array_body(10))
    assert status == 202, parent
    job_id = parent["jobId"]
    _, shown = stack.api("GET", f"/jobs/{job_id}")
    assert shown["status"] == "Queued"
    assert shown["statusReason"] == "Waiting for quota: Basic vCPUs in UnitedStates (2 of 2 in use)"
    assert basic_us_line(stack) == (2, 8)

    running, seen = new_children(stack, 0)
    assert [c[3] for c in running] == [0, 1]
    started: list[int] = []
    moments = []
    while running:
        child = running.pop(0)
        index = child[3]
        started.append(index)
        for event in child_events(child):
            stack.deliver(event)
        fresh, seen = new_children(stack, seen)
        running += fresh
        assert len(running) <= 2  # never more children in AWS Batch's hands than the quota's 2 vCPUs
        assert stack.services.store.get_quota_usage("dev").used(BASIC_US) == len(running)
        if index == 4:
            moments.append(basic_us_line(stack))
    assert started == list(range(10))  # in submission order
    assert moments == [(2, 3)]
    stored = job_of(stack, job_id)
    assert stored.status == JobStatus.SUCCEEDED
    assert {k: v for k, v in (stored.child_status_counts or {}).items() if v} == {"Succeeded": 10}
    assert basic_us_line(stack) == (0, 0)
    usage = stack.services.store.get_quota_usage("dev")
    assert (usage.total_in_use, usage.total_queued) == (0, 0)
    assert stack.services.store.list_held_jobs("dev") == []
    # Every span after the first went as a child ended, sized to the one vCPU it gave back.
    assert [s.array_size for s in stack.batch[US].submissions] == [2] + [None] * 8


def test_a_child_over_its_family_limit_is_refused_and_nothing_is_written(stack: Stack) -> None:
    set_quota(stack, "Compute", 32)
    status, body = stack.api("POST", "/jobs", body=array_body(3, "Compute64x128"))
    assert status == 400
    assert body["error"] == {
        "code": "QuotaExceeded",
        "message": "Compute64x128 needs 64 vCPUs but the account's Compute quota in UnitedStates is "
        "32 vCPUs; ask an operator for a higher quota.",
        "field": "machineClass",
    }
    assert stack.count_items("test-jobs") == 0
    assert stack.count_objects() == 0
    assert stack.batch[US].submissions == []


def test_arrays_and_single_jobs_are_admitted_oldest_first(stack: Stack) -> None:
    set_quota(stack, "Basic", 2)
    single = {"code": "1", "machineClass": "Basic1x8", "geoZone": "UnitedStates"}
    first = stack.api("POST", "/jobs", body=single)[1]["jobId"]
    array = stack.api("POST", "/jobs", body=array_body(3))[1]["jobId"]
    last = stack.api("POST", "/jobs", body=single)[1]["jobId"]
    names = lambda: [s.job_name for s in stack.batch[US].submissions]  # noqa: E731
    assert names() == [first, array]  # the array's first span took the vCPU left
    _, held = stack.api("GET", f"/jobs/{last}")
    assert held["statusReason"] == "Waiting for quota: Basic vCPUs in UnitedStates (2 of 2 in use)"
    finish(stack, first)
    assert names() == [first, array, f"{array}_1"]  # the older array before the younger job
    _, still = stack.api("GET", f"/jobs/{last}")
    assert still["status"] == "Queued" and still["statusReason"] is not None
    gateway = stack.batch[US]
    for event in job_lifecycle(
        array, gateway.submitted_ids[1], created_at=T0, started_at=T0, stopped_at=T0 + 1
    ):
        stack.deliver(event)
    assert names() == [first, array, f"{array}_1", f"{array}_2"]
    for event in job_lifecycle(
        f"{array}_1", gateway.submitted_ids[2], created_at=T0, started_at=T0, stopped_at=T0 + 1
    ):
        stack.deliver(event)
    assert names()[-1] == last
    assert job_of(stack, array).dispatch_state == DispatchState.ADMITTED


def test_aborting_a_partly_dispatched_array_ends_its_held_children_free_and_terminates_its_span(
    stack: Stack,
) -> None:
    set_quota(stack, "Basic", 2)
    job_id = stack.api("POST", "/jobs", body=array_body(6))[1]["jobId"]
    gateway = stack.batch[US]
    [span_id] = gateway.submitted_ids
    assert basic_us_line(stack) == (2, 4)

    status, aborted = stack.api("POST", f"/jobs/{job_id}/abort")
    assert status == 202, aborted
    assert gateway.terminations == [(span_id, "Aborted by user")]
    stored = job_of(stack, job_id)
    assert stored.child_status_counts == {"Queued": 2, "Terminated": 4}
    assert basic_us_line(stack) == (2, 0)  # the held remainder gave its units back at once
    assert stack.services.store.list_held_jobs("dev") == []
    _, page = stack.api("GET", f"/jobs/{job_id}/children", query={"status": "Terminated"})
    assert [(c["arrayIndex"], c["statusReason"]) for c in page["jobs"]] == [
        (i, "Aborted by user") for i in range(2, 6)
    ]
    # AWS Batch ends the span's children: the array ends Terminated, the withdrawn children free.
    for local in (0, 1):
        for event in array_child_lifecycle(
            job_id,
            span_id,
            local,
            created_at=T0,
            started_at=T0 + 1_000,
            stopped_at=T0 + 31_000,
            succeeded=False,
        ):
            stack.deliver(event)
    final = job_of(stack, job_id)
    assert (final.status, final.status_reason) == (JobStatus.TERMINATED, "Aborted by user")
    charged = {
        e.job_id for e in stack.services.store.list_ledger("dev", None, None) if e.kind.value == "charge"
    }
    assert charged == {f"{job_id}:0", f"{job_id}:1"}
    assert basic_us_line(stack) == (0, 0)
    assert len(gateway.submissions) == 1


def test_a_post_with_a_queue_answers_202_without_aws_batch_and_an_abort_before_dispatch_is_free(
    stack: Stack, queued: RecordingQueue
) -> None:
    status, parent = stack.api("POST", "/jobs", body=array_body(4))
    assert status == 202
    assert stack.batch[US].submissions == []
    assert queued.admissions == ["dev"]
    assert (parent["status"], parent["statusReason"]) == ("Queued", None)
    job_id = parent["jobId"]
    # The dispatcher admits the whole array (64 vCPUs free) as one span and enqueues it.
    assert admit_and_enqueue(stack.services, "dev") == [span_dispatch_id(job_id, 0)]
    assert queued.sent == [span_dispatch_id(job_id, 0)]
    assert basic_us_line(stack) == (4, 0)
    # Aborted before the dispatcher's turn: every child ends free, AWS Batch never called.
    status, _ = stack.api("POST", f"/jobs/{job_id}/abort")
    assert status == 202
    stored = job_of(stack, job_id)
    assert (stored.status, stored.status_reason, stored.credits_spent) == (
        JobStatus.TERMINATED,
        "Aborted by user",
        Decimal(0),
    )
    assert basic_us_line(stack) == (0, 0)
    assert dispatch.dispatch_job(stack.services, span_dispatch_id(job_id, 0)) == DispatchOutcome.SKIPPED
    assert stack.batch[US].submissions == []


def test_a_span_claimed_by_a_dead_dispatcher_is_found_or_given_back_never_sent_twice(
    stack: Stack, queued: RecordingQueue
) -> None:
    services = stack.services
    first = stack.api("POST", "/jobs", body=array_body(2))[1]["jobId"]
    second = stack.api("POST", "/jobs", body=array_body(3))[1]["jobId"]
    admit_and_enqueue(services, "dev")
    # The first's dispatcher died after SubmitJob (its record lost); the second's before it.
    claimed = services.store.claim_span(first, 0, stack.clock())
    assert claimed is not None
    stack.batch[US].submit_job(dispatch_submission_of(stack, first))
    assert services.store.claim_span(second, 0, stack.clock()) is not None
    queued.sent.clear()
    stack.clock.advance(dispatch_rules.CLAIM_TIMEOUT.total_seconds() + 1)
    for job_id in (first, second):
        parent = job_of(stack, job_id)
        nudge_array(services, parent, stack.clock())
    recorded = job_of(stack, first)
    assert recorded.array_spans == (stack.batch[US].submitted_ids[0],) and recorded.array_queue == ()
    assert queued.sent == [span_dispatch_id(second, 0)]
    assert dispatch.dispatch_job(services, span_dispatch_id(second, 0)) == DispatchOutcome.SUBMITTED
    assert [s.job_name for s in stack.batch[US].submissions] == [first, second]


def dispatch_submission_of(stack: Stack, job_id: str) -> BatchSubmission:
    """The SubmitJob a dispatcher would send for the array's span at 0."""
    from functions.logic.batch_submission import span_submission

    parent = job_of(stack, job_id)
    return span_submission(stack.services, parent, parent.array_queue[0])


def test_a_span_aws_batch_refuses_ends_the_children_not_submitted_and_frees_their_units(
    stack: Stack, queued: RecordingQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    set_quota(stack, "Basic", 2)
    job_id = stack.api("POST", "/jobs", body=array_body(5))[1]["jobId"]
    admit_and_enqueue(stack.services, "dev")
    assert basic_us_line(stack) == (2, 3)

    def refuse(submission: BatchSubmission) -> str:
        raise BatchRefused("AWS Batch refused to accept the job")

    monkeypatch.setattr(stack.batch[US], "submit_job", refuse)
    outcome = dispatch.dispatch_job(stack.services, span_dispatch_id(job_id, 0))
    assert outcome == DispatchOutcome.ENDED
    stored = job_of(stack, job_id)
    assert (stored.status, stored.status_reason) == (
        JobStatus.TERMINATED,
        f"5 of 5 children terminated (first: index 0, {dispatch_rules.REFUSED_REASON})",
    )
    assert stored.credits_spent == Decimal(0)
    assert basic_us_line(stack) == (0, 0)
    assert stack.services.store.list_held_jobs("dev") == []


# -- concurrency ---------------------------------------------------------------------------------------
LIMIT = 3
ARRAYS = 8
SINGLES = 12


@pytest.mark.slow
@pytest.mark.parametrize("admission", ["inline", "dispatcher"])
def test_concurrent_arrays_and_single_jobs_never_exceed_the_limit_nor_leave_anything_held(
    stack: Stack, one_request_at_a_time: None, admission: str
) -> None:
    # "dispatcher": submits and endings ask the local dispatch queue (delivering to the dispatcher
    # Lambda on its own thread) to admit, and spans go through it; "inline": no queue.
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
    children: queue.Queue[tuple[str, str, int, bool]] = queue.Queue()
    lock = threading.Lock()
    running = {"now": 0, "peak": 0}
    record = gateway.submit_job

    def submit_job(job: BatchSubmission) -> str:
        count = job.array_size or 1
        with lock:
            running["now"] += count
            running["peak"] = max(running["peak"], running["now"])
        batch_id = record(job)
        for local in range(count):
            children.put((job.job_name, batch_id, local, job.array_size is None))
        return batch_id

    gateway.submit_job = submit_job  # type: ignore[method-assign,assignment]
    rng = random.Random(15)
    plan = ["array"] * ARRAYS + ["single"] * SINGLES
    rng.shuffle(plan)
    sizes = [rng.randint(1, 5) for _ in plan]

    def submit_one(n: int) -> str:
        kind, size = plan[n], sizes[n]
        request = submission.JobRequest(
            payload_kind=PayloadKind.CODE,
            payload="1",
            geo_zone="UnitedStates",
            array_items=list(range(size)) if kind == "array" else None,
        )
        return submit(services, "dev", request, stack.clock()).job_id

    def complete(_: int) -> int:
        done = 0
        while True:
            try:
                name, batch_id, local, plain = children.get(timeout=3)
            except queue.Empty:
                return done
            with lock:
                running["now"] -= 1
            state = BatchJobState(
                batch_job_id=batch_id if plain else f"{batch_id}:{local}",
                job_name=name,
                status="SUCCEEDED",
                status_reason=None,
                created_at_ms=T0,
                started_at_ms=T0 + 1_000,
                stopped_at_ms=T0 + 2_000,
                exit_code=0,
                log_stream_name="s",
                attempt_count=0,
                array_index=None if plain else local,
            )
            for _attempt in range(10):
                try:
                    apply_job_state_change(services, state, stack.clock())
                    break
                except DependencyFailed:
                    continue  # kept losing races: EventBridge would deliver it again
            done += 1

    with ThreadPoolExecutor(max_workers=8) as pool:
        completers = [pool.submit(complete, i) for i in range(3)]
        ids = list(pool.map(submit_one, range(len(plan))))
        completed = sum(c.result() for c in completers)

    if local_queue is not None:
        assert local_queue.wait_idle(30)
        local_queue.stop(5)
        assert local_queue.stats().dead_letters == 0
    assert running["peak"] <= LIMIT
    expected = sum(size if kind == "array" else 1 for kind, size in zip(plan, sizes, strict=True))
    assert completed == expected
    jobs = services.store.get_jobs(ids)
    assert {j.status for j in jobs} == {JobStatus.SUCCEEDED}
    usage = services.store.get_quota_usage("dev")
    assert (usage.used(BASIC_US), usage.waiting(BASIC_US), usage.total_in_use, usage.total_queued) == (
        0,
        0,
        0,
        0,
    )
    assert services.store.list_held_jobs("dev") == []
    # Each child ran once: one child per item of every array across its spans.
    for job in jobs:
        if job.array_size:
            assert job.array_admitted == job.array_size and job.array_queue == ()


def test_an_array_on_a_dedicated_compute_takes_no_quota_and_goes_to_its_queue_at_once(
    stack: Stack, computes: FakeComputeEnvironments
) -> None:
    # Given Basic 4, all of it reserved by a Running compute of 4
    stack.services = replace(stack.services, array_span_size=2)
    bootstrap.install(stack.services)
    set_quota(stack, "Basic", 4)
    assert stack.api("PUT", "/account/computes/lab", body=COMPUTE)[0] == 201
    for _ in range(6):
        stack.tick()
    assert stack.api("POST", "/account/computes/lab/start")[0] == 202
    for _ in range(3):
        stack.tick()
    assert stack.api("GET", "/account/computes/lab")[1]["status"] == "Running"
    # When an array of 5 is submitted to it: every span goes to its queue at once, counted nowhere
    status, parent = stack.api(
        "POST", "/jobs", body={"code": "item", "arrayItems": list(range(5)), "compute": "lab"}
    )
    assert status == 202, parent
    job_id = parent["jobId"]
    submitted = stack.batch[US].submissions
    assert [(s.job_name, s.array_size) for s in submitted] == [
        (job_id, 2),
        (f"{job_id}_2", 2),
        (f"{job_id}_4", None),
    ]
    assert {s.job_queue for s in submitted} == {resource_name("remote-batch-test", "dev", "lab")}
    assert basic_us_line(stack) == (0, 0)
    # Its children's ends give nothing back (they took nothing).
    children, _ = new_children(stack, 0)
    for child in children:
        for event in child_events(child):
            stack.deliver(event)
    assert job_of(stack, job_id).status == JobStatus.SUCCEEDED
    usage = stack.services.store.get_quota_usage("dev")
    assert (usage.used(BASIC_US), usage.reserved_of(BASIC_US), usage.total_queued) == (0, 4, 0)


# -- the store's conditions (DynamoDB on moto) -----------------------------------------------------------
def test_a_span_is_admitted_once_per_read_and_never_past_the_limit(stack: Stack) -> None:
    store = stack.services.store
    store.put_quota_limits("dev", QuotaLimits({BASIC_US: 3}))
    stack.services = replace(stack.services, dispatch=RecordingQueue())  # admissions wait for the test
    bootstrap.install(stack.services)
    job_id = stack.api("POST", "/jobs", body=array_body(5))[1]["jobId"]
    [held] = store.list_held_jobs("dev")
    assert (held.job_id, held.children, held.child) == (job_id, 5, Demand(BASIC_US, 1, 1))
    limits = store.get_quota_limits("dev")
    assert not store.admit_span("dev", held, 5, 4, limits)  # 4 vCPUs past a limit of 3: nothing written
    assert store.admit_span("dev", held, 5, 2, limits)
    assert not store.admit_span("dev", held, 5, 2, limits)  # the same read again: the array moved
    [left] = store.list_held_jobs("dev")
    assert left.children == 3
    assert not store.admit_span("dev", left, 5, 2, limits)  # 2 more would make 4 of 3
    assert store.admit_span("dev", left, 5, 1, limits)
    parent = job_of(stack, job_id)
    assert (parent.array_admitted, parent.dispatch_state) == (3, DispatchState.HELD)
    assert [(s.offset, s.count, s.state) for s in parent.array_queue] == [
        (0, 2, DispatchState.ADMITTED),
        (2, 1, DispatchState.ADMITTED),
    ]
    usage = store.get_quota_usage("dev")
    assert (usage.used(BASIC_US), usage.waiting(BASIC_US)) == (3, 2)
    # A withdrawal from a stale read changes nothing; from a fresh one it ends the rest at once.
    stale = replace(parent, array_admitted=2)
    assert not store.withdraw_spans(stale, [], "Aborted by user", stack.clock())
    assert store.withdraw_spans(parent, list(parent.array_queue), "Aborted by user", stack.clock())
    after = job_of(stack, job_id)
    assert after.child_status_counts == {"Queued": 0, "Terminated": 5}
    assert [(w.offset, w.count) for w in after.array_withdrawn] == [(0, 2), (2, 1), (3, 2)]
    usage = store.get_quota_usage("dev")
    assert (usage.used(BASIC_US), usage.waiting(BASIC_US), usage.total_in_use, usage.total_queued) == (
        0,
        0,
        0,
        0,
    )
    assert store.list_held_jobs("dev") == []


def test_a_held_array_whose_record_is_gone_does_not_hold_back_its_key(stack: Stack) -> None:
    stack.services.store.put_quota_limits("dev", QuotaLimits({BASIC_US: 2}))
    stack.services = replace(stack.services, dispatch=RecordingQueue())  # admissions wait for the test
    bootstrap.install(stack.services)
    array = stack.api("POST", "/jobs", body=array_body(3))[1]["jobId"]
    single = stack.api("POST", "/jobs", body={"code": "1", "machineClass": "Basic1x8"})[1]["jobId"]
    boto3.client("dynamodb", region_name="us-east-1").delete_item(
        TableName="test-jobs", Key={"jobId": {"S": array}}
    )
    assert admit_and_enqueue(stack.services, "dev") == [single]


def test_the_meters_backstop_admits_and_enqueues_an_array_whose_admission_request_was_lost(
    stack: Stack, queued: RecordingQueue
) -> None:
    job_id = stack.api("POST", "/jobs", body=array_body(3))[1]["jobId"]
    assert queued.admissions == ["dev"] and queued.sent == []
    queued.admissions.clear()  # the request is lost (the local queue's memory died with its process)
    stack.clock.advance(11 * 60)
    stack.tick()
    assert queued.sent == [span_dispatch_id(job_id, 0)]
    assert job_of(stack, job_id).dispatch_state == DispatchState.ADMITTED
    assert basic_us_line(stack) == (3, 0)
    # The message is delivered: the span goes to AWS Batch once, even if delivered twice.
    for _ in range(2):
        dispatch.dispatch_job(stack.services, span_dispatch_id(job_id, 0))
    assert [(s.job_name, s.array_size) for s in stack.batch[US].submissions] == [(job_id, 3)]
