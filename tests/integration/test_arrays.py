"""Array jobs on moto: submit, child events and the parent's roll-up, credits and the array's cap,
results, abort, delete, notifications, replays, spans (issue 12)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from functions import bootstrap
from functions.domain.errors import BatchRefused, NotFound, ServiceError, ValidationFailed
from functions.domain.jobs import BatchJobState, Job, JobType, PayloadKind
from functions.domain.machine_classes import GeoZone
from functions.domain.quotas import Family, QuotaKey, QuotaLimits
from functions.domain.status import JobStatus
from functions.logic import arrays, dispatch_rules, queries
from functions.logic.submission import JobRequest, abort_job, get_owned_job
from functions.ports import BatchSubmission
from tests.events import array_child_lifecycle, batch_event

US = GeoZone.UNITED_STATES
T0 = 1_764_436_800_000  # 2025-11-29T17:20:00Z


@pytest.fixture(autouse=True)
def _submitted_before_the_events(request: pytest.FixtureRequest) -> None:
    """Jobs here are submitted at T0, before the times their events carry: a charge lies inside
    the job's life (``functions.domain.charged_time``), and the stack's clock starts a year later."""
    if "stack" in request.fixturenames:
        request.getfixturevalue("stack").clock.now = datetime(2025, 11, 29, 17, 20, tzinfo=UTC)


def submit(stack: Any, items: list[Any] | None = None, *, items_key: str | None = None, **fields: Any) -> Job:
    """Submit an array for dev (code ``item`` unless given)."""
    request = JobRequest(
        payload_kind=fields.pop("payload_kind", PayloadKind.CODE),
        payload=fields.pop("payload", "item"),
        array_items=items,
        array_items_key=items_key,
        **fields,
    )
    return arrays.submit(stack.services, "dev", request, stack.clock())


def with_span_size(stack: Any, size: int) -> None:
    """The service with ``REMOTE_BATCH_ARRAY_SPAN_SIZE`` = ``size``."""
    stack.services = replace(stack.services, array_span_size=size)
    bootstrap.install(stack.services)


def with_room(stack: Any) -> None:
    """Give dev a Basic quota in UnitedStates far above the default (64 vCPUs), so an array's spans
    are cut at the span size only (arrays are admitted span by span into the quota's free room)."""
    stack.services.store.put_quota_limits("dev", QuotaLimits({QuotaKey(Family.BASIC, US): 1_000}))


def span_submissions(stack: Any) -> list[BatchSubmission]:
    submissions: list[BatchSubmission] = stack.batch[US].submissions
    return submissions


def child_result(stack: Any, parent: Job, index: int, value: Any) -> None:
    """What a child's worker writes: its result.json under the parent's prefix."""
    body = json.dumps({"result": value, "resultRepr": repr(value)}).encode()
    stack.services.zones[US].blobs.put(
        f"outputs/{parent.job_id}/{index}/result.json", body, "application/json"
    )


def child_error(stack: Any, parent: Job, index: int, kind: str, message: str) -> None:
    body = json.dumps(
        {"messages": [f"{kind}: {message}"], "error": {"type": kind, "message": message}}
    ).encode()
    stack.services.zones[US].blobs.put(
        f"outputs/{parent.job_id}/{index}/messages.json", body, "application/json"
    )


def run_children(
    stack: Any, parent: Job, seconds: dict[int, int], failed: frozenset[int] = frozenset()
) -> list[dict[str, Any]]:
    """Every event of the given children (index → seconds of Running), in Batch's order per child."""
    span = parent.array_spans[0]
    events: list[dict[str, Any]] = []
    for index, run in seconds.items():
        start = T0 + 10_000
        events += array_child_lifecycle(
            parent.job_id,
            span,
            index,
            created_at=T0,
            started_at=start,
            stopped_at=start + run * 1000,
            succeeded=index not in failed,
        )
    return events


def span_event(parent: Job, status: str, size: int, summary: dict[str, int]) -> dict[str, Any]:
    return batch_event(
        parent.job_id, parent.array_spans[0], status, created_at=T0, array_size=size, status_summary=summary
    )


def charges(stack: Any) -> dict[str, Decimal]:
    return {
        e.job_id: e.credits
        for e in stack.services.store.list_ledger("dev", None, None)
        if e.kind.value == "charge"
    }


# -- submit ------------------------------------------------------------------------------------------
def test_submit_stores_the_items_once_and_runs_one_batch_array_job(stack):
    parent = submit(stack, [1, 2, 3])

    [submission] = span_submissions(stack)
    assert (submission.job_name, submission.array_size) == (parent.job_id, 3)
    assert submission.environment["REMOTE_BATCH_ARRAY_OFFSET"] == "0"
    stored = stack.services.store.get_job(parent.job_id)
    assert (stored.type, stored.array_size, stored.child_status_counts) == (JobType.ARRAY, 3, {"Queued": 3})
    assert stored.array_spans == parent.array_spans and stored.batch_job_id == parent.array_spans[0]
    blobs = stack.services.zones[US].blobs
    assert blobs.get(f"inputs/{parent.job_id}/items.jsonl") == b"1\n2\n3\n"
    assert blobs.size(f"inputs/{parent.job_id}/items.idx") == 8 * 4
    document = json.loads(blobs.get(f"inputs/{parent.job_id}/input.json"))
    assert document["arraySize"] == 3 and document["code"] == "item"
    # No child record before its first event.
    assert stack.services.store.get_job(f"{parent.job_id}:0") is None


def test_a_map_past_the_span_size_runs_as_several_batch_jobs_behind_one_parent(stack):
    with_span_size(stack, 100)
    with_room(stack)
    parent = submit(stack, list(range(250)))

    assert [
        (s.job_name, s.array_size, s.environment["REMOTE_BATCH_ARRAY_OFFSET"])
        for s in span_submissions(stack)
    ] == [
        (parent.job_id, 100, "0"),
        (f"{parent.job_id}_100", 100, "100"),
        (f"{parent.job_id}_200", 50, "200"),
    ]
    assert len(parent.array_spans) == 3


def test_a_last_span_of_one_item_is_a_plain_batch_job(stack):
    with_span_size(stack, 2)
    submit(stack, [1, 2, 3])
    assert [s.array_size for s in span_submissions(stack)] == [2, None]


def test_a_refused_span_leaves_nothing_behind(stack):
    # The array is accepted without AWS Batch (POST /jobs answers 202 before any SubmitJob); a span AWS
    # Batch refuses for good ends its children, and every child not submitted yet, Terminated with the
    # reason and free, while the span it took runs on.
    with_span_size(stack, 2)
    gateway = stack.batch[US]
    original = gateway.submit_job
    calls: list[str] = []

    def refuse_second(submission: BatchSubmission) -> str:
        calls.append(submission.job_name)
        if len(calls) == 2:
            raise BatchRefused("AWS Batch refused")
        batch_job_id: str = original(submission)
        return batch_job_id

    gateway.submit_job = refuse_second
    parent = submit(stack, [1, 2, 3, 4])
    assert calls == [parent.job_id, f"{parent.job_id}_2"]
    stored = stack.services.store.get_job(parent.job_id)
    assert stored.array_spans == (gateway.submitted_ids[0],)
    assert stored.child_status_counts == {"Queued": 2, "Terminated": 2}
    assert gateway.terminations == []
    page = arrays.list_children(stack.services, "dev", parent.job_id, status=None, limit=10, next_token=None)
    assert [(c.status, c.status_reason, c.credits_spent) for c in page.jobs[2:]] == [
        (JobStatus.TERMINATED, dispatch_rules.REFUSED_REASON, Decimal(0))
    ] * 2
    # The first span's children end: the array ends with the refusal as its first terminated child's.
    for event in run_children(stack, stored, {0: 30, 1: 30}):
        stack.deliver(event)
    final = stack.services.store.get_job(parent.job_id)
    assert (final.status, final.status_reason) == (
        JobStatus.TERMINATED,
        f"2 of 4 children terminated (first: index 2, {dispatch_rules.REFUSED_REASON})",
    )
    assert sorted(charges(stack)) == [f"{parent.job_id}:0", f"{parent.job_id}:1"]
    usage = stack.services.store.get_quota_usage("dev")
    assert (usage.total_in_use, usage.total_queued) == (0, 0)


# -- roll-up -----------------------------------------------------------------------------------------
def test_children_roll_up_into_the_parent_results_and_credits(stack):
    parent = submit(stack, [1, 0, 2], payload="1 / item")
    child_result(stack, parent, 0, 1.0)
    child_result(stack, parent, 2, 0.5)
    child_error(stack, parent, 1, "ZeroDivisionError", "division by zero")
    events = run_children(stack, parent, {0: 30, 1: 5, 2: 90}, failed=frozenset({1}))
    running = [e for e in events if e["detail"]["status"] == "RUNNING"]
    stack.deliver(running[0])
    assert stack.services.store.get_job(parent.job_id).status == JobStatus.RUNNING
    for event in events:
        stack.deliver(event)

    stored = stack.services.store.get_job(parent.job_id)
    assert stored.status == JobStatus.TERMINATED
    assert (
        stored.status_reason
        == "1 of 3 children terminated (first: index 1, ZeroDivisionError: division by zero)"
    )
    assert stored.child_status_counts == {
        "Queued": 0,
        "Starting": 0,
        "Running": 0,
        "Succeeded": 2,
        "Terminated": 1,
    }
    # Per child: 60 s minimum (1 credit) for 30 s and 5 s, 90 s = 1.5 credits; the parent is the sum.
    assert charges(stack) == {
        f"{parent.job_id}:0": Decimal("1.0000"),
        f"{parent.job_id}:1": Decimal("1.0000"),
        f"{parent.job_id}:2": Decimal("1.5000"),
    }
    assert (stored.credits_spent, stored.credits_settled) == (Decimal("3.5000"), Decimal("3.5000"))
    assert stack.balance("dev") == Decimal("9996.5000")
    child = stack.services.store.get_job(f"{parent.job_id}:2")
    assert (child.type, child.parent_job_id, child.array_index, child.array_size) == (
        JobType.ARRAY_CHILD,
        parent.job_id,
        2,
        3,
    )
    result = queries.get_result(stack.services, "dev", parent.job_id, stack.clock(), as_pickle=False)
    assert result.result == [1.0, None, 0.5]
    assert result.errors is not None
    assert [(e.index, e.message) for e in result.errors] == [(1, "ZeroDivisionError: division by zero")]


def test_the_parent_ends_succeeded_with_one_completion_notice_that_counts_the_children(stack):
    parent = submit(stack, [1, 2], notifications="JobCompleted")
    for event in run_children(stack, parent, {0: 1, 1: 1}):
        stack.deliver(event)

    stored = stack.services.store.get_job(parent.job_id)
    assert (stored.status, stored.status_reason) == (JobStatus.SUCCEEDED, None)
    [notice] = stack.notifier.sent
    assert (notice.job_id, notice.event) == (parent.job_id, "JobCompleted")
    assert "Children: 2 of 2 succeeded" in notice.message


def test_the_span_array_jobs_own_events_never_decide_the_parent(stack):
    parent = submit(stack, [1, 2])
    stack.deliver(span_event(parent, "SUCCEEDED", 2, {"SUCCEEDED": 2}))
    stack.deliver(span_event(parent, "FAILED", 2, {"FAILED": 2}))
    stored = stack.services.store.get_job(parent.job_id)
    assert (stored.status, stored.child_status_counts) == (JobStatus.QUEUED, {"Queued": 2})


@pytest.mark.slow
def test_every_event_replayed_duplicated_and_reversed_changes_nothing(stack):
    parent = submit(stack, list(range(20)))
    for i in range(20):
        child_result(stack, parent, i, i)
    events = [span_event(parent, "PENDING", 20, {"PENDING": 20})]
    events += run_children(stack, parent, {i: 10 + i * 7 for i in range(20)})
    events += [span_event(parent, "SUCCEEDED", 20, {"SUCCEEDED": 20})]
    for event in events:
        stack.deliver(event)
    before = (
        stack.services.store.get_job(parent.job_id),
        charges(stack),
        stack.balance("dev"),
        len(stack.notifier.sent),
    )

    for event in reversed(events + events):
        stack.deliver(event)

    after = (
        stack.services.store.get_job(parent.job_id),
        charges(stack),
        stack.balance("dev"),
        len(stack.notifier.sent),
    )
    assert after[0].status == before[0].status == JobStatus.SUCCEEDED
    assert after[0].child_status_counts == before[0].child_status_counts
    assert after[0].credits_spent == before[0].credits_spent == sum(before[1].values())
    assert after[1:] == before[1:]
    assert len(before[1]) == 20


def test_out_of_order_child_events_settle_once(stack):
    parent = submit(stack, [1, 2])
    events = run_children(stack, parent, {0: 120, 1: 120})
    for event in reversed(events):  # each child's final event first, then its older ones
        stack.deliver(event)
    stored = stack.services.store.get_job(parent.job_id)
    assert (stored.status, stored.credits_spent) == (JobStatus.SUCCEEDED, Decimal("4.0000"))
    assert stored.child_status_counts["Succeeded"] == 2


# -- children as jobs -------------------------------------------------------------------------------
def test_children_are_jobs_of_their_owner_only(stack):
    stack.add_account("mallory", "100")
    parent = submit(stack, [1, 2, 3])
    stack.deliver(run_children(stack, parent, {1: 5})[0])

    assert get_owned_job(stack.services, "dev", f"{parent.job_id}:1").status == JobStatus.QUEUED
    waiting = get_owned_job(stack.services, "dev", f"{parent.job_id}:2")  # no event yet
    assert (waiting.status, waiting.array_index, waiting.parent_job_id) == (
        JobStatus.QUEUED,
        2,
        parent.job_id,
    )
    for job_id, account in ((f"{parent.job_id}:1", "mallory"), (f"{parent.job_id}:3", "dev")):
        with pytest.raises(NotFound):
            get_owned_job(stack.services, account, job_id)


def test_children_page_in_index_order_and_by_status(stack):
    parent = submit(stack, list(range(5)))
    for event in run_children(stack, parent, {3: 5, 1: 5}, failed=frozenset({3})):
        stack.deliver(event)

    page = arrays.list_children(stack.services, "dev", parent.job_id, status=None, limit=2, next_token=None)
    assert [(c.array_index, c.status) for c in page.jobs] == [(0, JobStatus.QUEUED), (1, JobStatus.SUCCEEDED)]
    rest = arrays.list_children(
        stack.services, "dev", parent.job_id, status=None, limit=10, next_token=page.next_token
    )
    assert [c.array_index for c in rest.jobs] == [2, 3, 4] and rest.next_token is None
    failed = arrays.list_children(
        stack.services, "dev", parent.job_id, status=JobStatus.TERMINATED, limit=10, next_token=None
    )
    assert [c.array_index for c in failed.jobs] == [3]


def test_the_parent_has_no_log_and_shows_its_first_childs_preview(stack):
    parent = submit(stack, [1, 2])
    for event in run_children(stack, parent, {0: 1, 1: 1}):
        stack.deliver(event)
    stack.services.zones[US].blobs.put(f"outputs/{parent.job_id}/0/preview.png", b"\x89PNG", "image/png")

    with pytest.raises(ServiceError, match="ask a child") as caught:
        queries.get_log(stack.services, "dev", parent.job_id, None, stack.clock())
    assert caught.value.status == 400
    preview = queries.get_preview(stack.services, "dev", parent.job_id, stack.clock())
    assert preview.size == 4 and f"outputs/{parent.job_id}/0/preview.png" in preview.url


# -- abort and delete -------------------------------------------------------------------------------
def test_abort_terminates_each_span_once_and_the_children_end_the_parent(stack):
    with_span_size(stack, 2)
    parent = submit(stack, [1, 2, 3])
    aborted = abort_job(stack.services, "dev", parent.job_id)
    abort_job(stack.services, "dev", parent.job_id)

    assert sorted(stack.batch[US].terminations) == sorted((s, "Aborted by user") for s in parent.array_spans)
    assert aborted.status == JobStatus.QUEUED  # final once its children's events say so
    never_ran = [
        batch_event(
            parent.job_id,
            f"{parent.array_spans[0]}:{i}",
            "FAILED",
            created_at=T0,
            status_reason="Aborted by user",
            array_index=i,
        )
        for i in (0, 1)
    ] + [
        batch_event(
            f"{parent.job_id}_2",
            parent.array_spans[1],
            "FAILED",
            created_at=T0,
            status_reason="Aborted by user",
        )
    ]
    for event in never_ran:
        stack.deliver(event)

    stored = stack.services.store.get_job(parent.job_id)
    assert (stored.status, stored.status_reason, stored.credits_spent) == (
        JobStatus.TERMINATED,
        "Aborted by user",
        Decimal("0"),
    )
    assert charges(stack) == {}


def test_delete_of_a_final_array_removes_its_childrens_data(stack):
    parent = submit(stack, [1, 2])
    for i in range(2):
        child_result(stack, parent, i, i)
    for event in run_children(stack, parent, {0: 1, 1: 1}):
        stack.deliver(event)
    queries.get_result(stack.services, "dev", parent.job_id, stack.clock(), as_pickle=False)

    queries.delete_job_data(stack.services, "dev", parent.job_id, stack.clock())

    assert stack.count_objects() == 0
    with pytest.raises(ServiceError, match="gone") as caught:
        queries.get_result(stack.services, "dev", f"{parent.job_id}:0", stack.clock(), as_pickle=False)
    assert caught.value.status == 410


# -- credits ----------------------------------------------------------------------------------------
def test_the_array_cap_terminates_the_array_and_charges_never_pass_it(stack):
    parent = submit(stack, list(range(5)), credit_constraint=Decimal("2.0"))
    span = parent.array_spans[0]
    start = int(stack.clock().timestamp() * 1000)
    for i in range(3):  # three run, two never start
        stack.deliver(
            batch_event(
                parent.job_id, f"{span}:{i}", "RUNNING", created_at=start, started_at=start, array_index=i
            )
        )
    stack.clock.advance(30)
    assert stack.tick()["terminated"] == 0  # 3 × 30 s = 1.5 credits
    assert stack.services.store.get_job(parent.job_id).credits_spent == Decimal("1.5000")
    stack.clock.advance(10)  # 3 × 40 s = 2.0 credits: the cap
    stack.tick()
    assert stack.batch[US].terminations == [(span, "CreditConstraint of 2 credits reached")]

    stop = start + 45_000
    for i in range(3):
        stack.deliver(
            batch_event(
                parent.job_id,
                f"{span}:{i}",
                "FAILED",
                created_at=start,
                started_at=start,
                stopped_at=stop,
                exit_code=143,
                status_reason="CreditConstraint of 2 credits reached",
                array_index=i,
            )
        )
    for i in (3, 4):
        stack.deliver(
            batch_event(
                parent.job_id,
                f"{span}:{i}",
                "FAILED",
                created_at=start,
                status_reason="CreditConstraint of 2 credits reached",
                array_index=i,
            )
        )

    stored = stack.services.store.get_job(parent.job_id)
    assert (stored.status, stored.status_reason) == (
        JobStatus.TERMINATED,
        "CreditConstraint of 2 credits reached",
    )
    # Each ran 45 s, billed 60 s = 1 credit: the first two settled take the cap, the third nothing.
    assert sum(charges(stack).values()) == stored.credits_spent == Decimal("2.0000")
    assert stack.balance("dev") == Decimal("9998.0000")
    assert f"{parent.job_id}:3" not in charges(stack) and f"{parent.job_id}:4" not in charges(stack)


def count_requests(stack: Any) -> list[str]:
    calls: list[str] = []
    client = stack.services.store._db
    client.meta.events.register("before-call.dynamodb.*", lambda model, **_: calls.append(model.name))
    return calls


@pytest.mark.slow
def test_a_meter_tick_costs_the_same_with_or_without_finished_children(stack):
    parent = submit(stack, list(range(30)))
    span = parent.array_spans[0]
    start = int(stack.clock().timestamp() * 1000)
    for i in range(3):
        stack.deliver(
            batch_event(
                parent.job_id, f"{span}:{i}", "RUNNING", created_at=start, started_at=start, array_index=i
            )
        )
    stack.clock.advance(30)
    calls = count_requests(stack)
    stack.tick()
    running_only = list(calls)

    for event in run_children(stack, parent, dict.fromkeys(range(3, 30), 5)):
        stack.deliver(event)
    stack.clock.advance(30)
    calls.clear()
    stack.tick()
    assert calls == running_only
    assert len(running_only) > 0


# -- reconciliation ---------------------------------------------------------------------------------
def described(batch_job_id: str, job_name: str, status: str, **fields: Any) -> BatchJobState:
    values: dict[str, Any] = {
        "status_reason": None,
        "created_at_ms": T0,
        "started_at_ms": None,
        "stopped_at_ms": None,
        "exit_code": None,
        "log_stream_name": None,
        "attempt_count": 0,
    }
    return BatchJobState(batch_job_id=batch_job_id, job_name=job_name, status=status, **(values | fields))


def test_a_quiet_array_is_reconciled_with_what_batch_describes_of_its_spans_and_children(stack):
    with_span_size(stack, 2)
    parent = submit(stack, [1, 2, 3])
    first, single = parent.array_spans
    start = int(stack.clock().timestamp() * 1000)
    # Child 0 ran and its events came; the others' events were all lost.
    for event in array_child_lifecycle(
        parent.job_id, first, 0, created_at=start, started_at=start, stopped_at=start + 5_000
    ):
        stack.deliver(event)
    known = stack.batch[US].known
    known[first] = described(first, parent.job_id, "FAILED", array_size=2)
    known[f"{first}:1"] = described(
        f"{first}:1",
        parent.job_id,
        "SUCCEEDED",
        started_at_ms=start,
        stopped_at_ms=start + 90_000,
        exit_code=0,
        attempt_count=1,
        array_index=1,
    )
    known[single] = described(
        single,
        f"{parent.job_id}_2",
        "SUCCEEDED",
        started_at_ms=start,
        stopped_at_ms=start + 30_000,
        exit_code=0,
        attempt_count=1,
    )

    stack.clock.advance(11 * 60)
    stack.tick()

    stored = stack.services.store.get_job(parent.job_id)
    assert (stored.status, stored.child_status_counts["Succeeded"]) == (JobStatus.SUCCEEDED, 3)
    assert charges(stack) == {
        f"{parent.job_id}:0": Decimal("1.0000"),
        f"{parent.job_id}:1": Decimal("1.5000"),
        f"{parent.job_id}:2": Decimal("1.0000"),
    }
    assert stored.credits_spent == Decimal("3.5000")


def test_children_batch_has_no_record_of_end_terminated_without_charge(stack):
    parent = submit(stack, [1, 2])
    span = parent.array_spans[0]
    stack.batch[US].known[span] = described(span, parent.job_id, "FAILED", array_size=2)
    stack.clock.advance(11 * 60)
    stack.tick()
    stored = stack.services.store.get_job(parent.job_id)
    assert stored.status == JobStatus.TERMINATED
    assert (
        stored.status_reason
        == "2 of 2 children terminated (first: index 0, AWS Batch has no record of the job)"
    )
    assert charges(stack) == {}


# -- arrayItemsKey ----------------------------------------------------------------------------------
def upload_items(stack: Any, data: bytes, content_type: str = "application/jsonl") -> str:
    key = "inputs/uploads/dev/upl-01JDXYZ0000000000000000000"
    stack.services.zones[US].blobs.put(key, data, content_type)
    return key


def test_an_uploaded_json_lines_map_runs_in_spans_with_every_item_in_order(stack):
    with_span_size(stack, 100)
    with_room(stack)
    key = upload_items(stack, b"".join(f'{{"n": {i}}}\n'.encode() for i in range(250)))
    parent = submit(stack, items_key=key, payload="item['n'] + 1")

    assert [s.array_size for s in span_submissions(stack)] == [100, 100, 50]
    assert stack.services.store.get_job(parent.job_id).array_size == 250
    items = stack.services.zones[US].blobs.get(f"inputs/{parent.job_id}/items.jsonl")
    assert items.splitlines()[249] == b'{"n":249}'


@pytest.mark.parametrize(
    ("data", "content_type", "message"),
    [
        (b'1\n2\n{"broken": \n4\n', "application/jsonl", "line 3 is not JSON"),
        (b"1\n\n3\n", "application/x-ndjson", "line 2 is empty"),
        (b"1\n2\n", "text/x-python", "not JSON Lines"),
    ],
)
def test_a_bad_items_upload_is_refused_naming_the_line_and_nothing_is_written(
    stack, data, content_type, message
):
    key = upload_items(stack, data, content_type)
    with pytest.raises(ValidationFailed, match=message) as caught:
        submit(stack, items_key=key)
    assert caught.value.field == "arrayItemsKey"
    assert stack.count_items("test-jobs") == 0
    assert stack.count_objects() == 1  # the upload only
    assert span_submissions(stack) == []


def test_another_accounts_upload_is_not_an_items_key(stack):
    with pytest.raises(ValidationFailed, match="arrayItemsKey must be an inputKey") as caught:
        submit(stack, items_key="inputs/uploads/mallory/upl-01JDXYZ0000000000000000000")
    assert caught.value.field == "arrayItemsKey"


@pytest.mark.parametrize("count", [0, 10_001])
def test_inline_items_take_one_to_ten_thousand(stack, count):
    with pytest.raises(ValidationFailed, match=f"not {count}"):
        submit(stack, list(range(count)))


# -- over HTTP (the api Lambda) ---------------------------------------------------------------------
def test_the_api_submits_an_array_and_serves_parent_children_and_result(stack):
    status, job = stack.api("POST", "/jobs", body={"code": "1 / item", "arrayItems": [1, 0, 2]})
    assert status == 202, job
    assert (job["type"], job["arraySize"], job["childStatusCounts"], job["parentJobId"]) == (
        "Array",
        3,
        {"Queued": 3},
        None,
    )
    parent = stack.services.store.get_job(job["jobId"])
    child_result(stack, parent, 0, 1.0)
    child_result(stack, parent, 2, 0.5)
    child_error(stack, parent, 1, "ZeroDivisionError", "division by zero")
    for event in run_children(stack, parent, {0: 1, 1: 1, 2: 1}, failed=frozenset({1})):
        stack.deliver(event)

    status, view = stack.api("GET", f"/jobs/{parent.job_id}")
    assert (view["status"], view["childStatusCounts"], view["creditsSpent"]) == (
        "Terminated",
        {"Succeeded": 2, "Terminated": 1},
        Decimal("3"),
    )
    assert (
        view["statusReason"]
        == "1 of 3 children terminated (first: index 1, ZeroDivisionError: division by zero)"
    )
    status, child = stack.api("GET", f"/jobs/{parent.job_id}:1")
    assert status == 200
    assert (
        child["type"],
        child["parentJobId"],
        child["arrayIndex"],
        child["arraySize"],
        child["status"],
    ) == (
        "ArrayChild",
        parent.job_id,
        1,
        3,
        "Terminated",
    )
    status, result = stack.api("GET", f"/jobs/{parent.job_id}/result")
    assert status == 200
    assert result["result"] == [Decimal("1.0"), None, Decimal("0.5")]
    assert result["errors"] == [{"index": 1, "message": "ZeroDivisionError: division by zero"}]
    status, page = stack.api("GET", f"/jobs/{parent.job_id}/children", query={"status": "Succeeded"})
    assert [c["arrayIndex"] for c in page["jobs"]] == [0, 2]
    status, error = stack.api("GET", f"/jobs/{parent.job_id}/log")
    assert (status, error["error"]["field"]) == (400, "jobId")
    status, listing = stack.api("GET", "/jobs")
    assert [j["jobId"] for j in listing["jobs"]] == [parent.job_id]  # parents only


def test_another_accounts_array_child_is_404_over_http(stack):
    stack.add_account("mallory", "100")
    status, job = stack.api("POST", "/jobs", body={"code": "item", "arrayItems": [1, 2]})
    assert status == 202
    for path in (
        f"/jobs/{job['jobId']}:0",
        f"/jobs/{job['jobId']}:0/result",
        f"/jobs/{job['jobId']}/children",
    ):
        status, error = stack.api("GET", path, account_id="mallory")
        assert (status, error["error"]["code"]) == (404, "NotFound"), path


def test_an_idempotent_array_submit_makes_one_array(stack):
    body = {"code": "item", "arrayItems": [1, 2, 3]}
    first = stack.api("POST", "/jobs", body=body, headers={"Idempotency-Key": "map-1"})
    again = stack.api("POST", "/jobs", body=body, headers={"Idempotency-Key": "map-1"})
    other = stack.api(
        "POST", "/jobs", body={**body, "arrayItems": [1, 2]}, headers={"Idempotency-Key": "map-1"}
    )
    assert first[1]["jobId"] == again[1]["jobId"]
    assert len(span_submissions(stack)) == 1
    assert other[0] == 409


def test_a_json_lines_upload_is_signed_for_arrays(stack):
    status, upload = stack.api("POST", "/jobs/uploads", body={"size": 12, "contentType": "application/jsonl"})
    assert status == 201, upload
    assert upload["headers"]["Content-Type"] == "application/jsonl"


def test_credits_used_notifications_count_the_arrays_sum_not_each_child(stack):
    parent = submit(
        stack, list(range(4)), notifications=[{"events": [{"JobCreditsUsed": 1}], "methods": ["Email"]}]
    )
    span = parent.array_spans[0]
    start = int(stack.clock().timestamp() * 1000)
    for i in range(4):
        stack.deliver(
            batch_event(
                parent.job_id, f"{span}:{i}", "RUNNING", created_at=start, started_at=start, array_index=i
            )
        )
    stack.clock.advance(20)  # 4 children × 20 s of Basic1x8, 0.3333 each: one threshold of 1 credit
    stack.tick()
    sent = [(n.job_id, n.event) for n in stack.notifier.sent]
    assert sent == [(parent.job_id, "JobCreditsUsed:1")]
    assert stack.services.store.get_job(parent.job_id).credits_spent == Decimal("1.3332")


def test_children_that_settle_up_to_the_cap_stop_the_array_without_waiting_for_the_meter(stack):
    parent = submit(stack, list(range(5)), credit_constraint=Decimal("2"))
    events = run_children(stack, parent, {0: 1, 1: 1})  # 1 s each: the 60 s minimum, 1 credit each
    for event in events[:5]:
        stack.deliver(event)
    assert stack.batch[US].terminations == []  # 1 credit settled: under the cap
    for event in events[5:]:
        stack.deliver(event)
    assert stack.batch[US].terminations == [(parent.array_spans[0], "CreditConstraint of 2 credits reached")]
    assert sum(charges(stack).values()) == Decimal("2.0000")


def test_a_started_child_is_aborted_alone_and_one_not_started_is_a_conflict(stack):
    parent = submit(stack, [1, 2])
    stack.deliver(run_children(stack, parent, {0: 5})[3])  # child 0 RUNNING
    status, child = stack.api("POST", f"/jobs/{parent.job_id}:0/abort")
    assert (status, child["status"]) == (202, "Running")
    assert stack.batch[US].terminations == [(f"{parent.array_spans[0]}:0", "Aborted by user")]
    status, error = stack.api("POST", f"/jobs/{parent.job_id}:1/abort")
    assert (status, error["error"]["code"]) == (409, "Conflict")


def test_an_array_result_over_the_inline_limit_is_one_document_behind_a_link(stack):
    parent = submit(stack, list(range(6)))
    big = "x" * 400_000  # with its repr, 800 kB a child: 4.8 MB in all, over the 3.5 MiB inlined
    for i in range(6):
        child_result(stack, parent, i, big)
    for event in run_children(stack, parent, dict.fromkeys(range(6), 1)):
        stack.deliver(event)

    status, result = stack.api("GET", f"/jobs/{parent.job_id}/result")
    assert status == 200
    assert "result" not in result and result["resultUrl"]
    document = json.loads(stack.services.zones[US].blobs.get(f"outputs/{parent.job_id}/result.json"))
    assert document["result"] == [big] * 6 and document["errors"] == []


def test_a_child_result_over_1_mib_is_left_to_the_child_in_the_arrays_document(stack):
    parent = submit(stack, [1, 2])
    child_result(stack, parent, 0, "y" * 600_000)  # 1.2 MB with its repr
    child_result(stack, parent, 1, 2)
    for event in run_children(stack, parent, {0: 1, 1: 1}):
        stack.deliver(event)
    status, result = stack.api("GET", f"/jobs/{parent.job_id}/result")
    assert result["result"] == [None, 2]
    assert f"GET /jobs/{parent.job_id}:0/result" in result["resultRepr"]


def test_a_running_child_batch_forgot_ends_terminated_in_its_own_span(stack):
    with_span_size(stack, 2)
    parent = submit(stack, [1, 2, 3, 4])
    second = parent.array_spans[1]
    start = int(stack.clock().timestamp() * 1000)
    stack.deliver(
        batch_event(
            f"{parent.job_id}_2", f"{second}:1", "RUNNING", created_at=start, started_at=start, array_index=1
        )
    )
    assert stack.services.store.get_job(f"{parent.job_id}:3").status == JobStatus.RUNNING

    stack.clock.advance(11 * 60)
    stack.tick()

    child = stack.services.store.get_job(f"{parent.job_id}:3")
    assert (child.status, child.status_reason) == (JobStatus.TERMINATED, "AWS Batch has no record of the job")
    assert stack.services.store.get_job(f"{parent.job_id}:1") is None  # no other child was touched
    counts = stack.services.store.get_job(parent.job_id).child_status_counts
    assert (counts["Terminated"], counts["Queued"]) == (1, 3)


def test_an_event_for_a_child_of_a_deleted_array_writes_nothing(stack):
    parent = submit(stack, [1, 2])
    events = run_children(stack, parent, {0: 5})
    stack.services.store.delete_job(parent.job_id)
    assert stack.deliver(events[3]) == {"applied": False}
    assert stack.count_items("test-jobs") == 0


def test_a_running_arrays_credits_spent_shows_what_its_ended_children_were_charged(stack):
    """The parent's own creditsSpent is written when the array ends; while it runs, GET /jobs/{id} must
    still show the charges its ended children's ledger entries already hold (a tester saw 0.0 at 56 of
    100 children settled)."""
    parent = submit(stack, [1, 2, 3])
    events = run_children(stack, parent, {0: 90, 1: 30, 2: 30})
    ended_first = [e for e in events if e["detail"]["jobId"].endswith(":0")]
    started_second = [
        e for e in events if e["detail"]["jobId"].endswith(":1") and e["detail"]["status"] != "SUCCEEDED"
    ]
    for event in ended_first + started_second:
        stack.deliver(event)

    status, view = stack.api("GET", f"/jobs/{parent.job_id}")
    assert status == 200
    assert view["status"] == "Running"
    assert view["creditsSpent"] == Decimal("1.5")  # child 0: 90 s of Basic1x8 at 60 credits an hour
    assert charges(stack) == {f"{parent.job_id}:0": Decimal("1.5000")}
