"""Array jobs' pure rules: spans, ids, the items layout, the roll-up, the array's credit cap."""

from __future__ import annotations

import codecs
import json
import struct
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.domain.arrays import (
    ChildEvent,
    Span,
    all_final,
    array_outcome,
    array_spent,
    child_job_id,
    child_template,
    children_terminated_reason,
    encode_items,
    initial_counts,
    item_range,
    job_data_path,
    locate_array_event,
    move_count,
    parse_child_job_id,
    parse_items_jsonl,
    parse_span_job_name,
    plan_spans,
    remaining_cap,
    result_document,
    span_job_name,
    visible_counts,
)
from functions.domain.credits import settle_charge
from functions.domain.errors import ValidationFailed
from functions.domain.jobs import BatchJobState, Job, JobType, PayloadKind, apply_batch_event
from functions.domain.machine_classes import GeoZone
from functions.domain.status import JobStatus

PARENT = "job-01JDXYZ0000000000000000000"
SUBMITTED = datetime(2026, 11, 29, 17, 20, tzinfo=UTC)
T0 = int(SUBMITTED.timestamp() * 1000)
ARRIVED = SUBMITTED + timedelta(days=30)  # after every time these tests send
RATE = Decimal(60)  # Basic1x8


def parent_job(size: int, credit_constraint: Decimal | None = None) -> Job:
    return Job(
        job_id=PARENT,
        account_id="alice",
        name=None,
        type=JobType.ARRAY,
        payload_kind=PayloadKind.CODE,
        machine_class="Basic1x8",
        geo_zone=GeoZone.UNITED_STATES,
        credit_constraint=credit_constraint,
        time_constraint=None,
        notifications=(),
        submitted_at=SUBMITTED,
        array_size=size,
        child_status_counts=initial_counts(size),
    )


# -- spans and ids -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("size", "span_size", "spans"),
    [
        (1, 10_000, [Span(0, 1)]),
        (100, 10_000, [Span(0, 100)]),
        (250, 100, [Span(0, 100), Span(100, 100), Span(200, 50)]),
        (201, 100, [Span(0, 100), Span(100, 100), Span(200, 1)]),
        (100_000, 10_000, [Span(i * 10_000, 10_000) for i in range(10)]),
    ],
)
def test_plan_spans_cuts_the_items_into_batch_jobs_of_at_most_the_span_size(size, span_size, spans):
    assert plan_spans(size, span_size) == spans
    assert sum(s.count for s in spans) == size


def test_a_span_of_one_item_is_a_plain_job_because_aws_arrays_have_two_children_or_more():
    assert [s.is_batch_array for s in plan_spans(201, 100)] == [True, True, False]


@pytest.mark.parametrize(("size", "span_size"), [(0, 100), (10, 0), (10, 10_001)])
def test_plan_spans_refuses_what_aws_batch_cannot_run(size, span_size):
    with pytest.raises(ValueError, match=r"an array has at least one item|span size must be 1\.\.10000"):
        plan_spans(size, span_size)


def test_span_names_route_back_to_the_parent_and_the_offset():
    assert span_job_name(PARENT, 0) == PARENT
    assert span_job_name(PARENT, 10_000) == f"{PARENT}_10000"
    assert parse_span_job_name(f"{PARENT}_10000") == (PARENT, 10_000)
    assert parse_span_job_name(PARENT) == (PARENT, 0)
    assert parse_span_job_name(f"{PARENT}:7") == (PARENT, 0)
    assert parse_span_job_name("someone-else") is None
    assert parse_span_job_name(f"{PARENT}_0") is None


def test_child_ids_and_data_paths():
    assert child_job_id(PARENT, 17) == f"{PARENT}:17"
    assert parse_child_job_id(f"{PARENT}:17") == (PARENT, 17)
    assert parse_child_job_id(f"{PARENT}:017") is None
    assert parse_child_job_id(PARENT) is None
    assert job_data_path(f"{PARENT}:17") == f"{PARENT}/17"
    assert job_data_path(PARENT) == PARENT


@pytest.mark.parametrize(
    ("batch_job_id", "job_name", "index", "size", "expected"),
    [
        ("abc:3", PARENT, 3, None, ChildEvent(PARENT, 3)),  # a child of the first span
        ("abc:3", f"{PARENT}_200", 3, None, ChildEvent(PARENT, 203)),  # of a later span
        ("abc:5", PARENT, None, None, ChildEvent(PARENT, 5)),  # the index from the id alone
        ("abc", PARENT, None, 100, ChildEvent(PARENT, None)),  # the span's array job itself
        ("abc", f"{PARENT}_200", None, None, ChildEvent(PARENT, 200)),  # a one-item span
        ("abc:x", PARENT, None, None, None),
        ("abc:1", "not-ours", 1, None, None),
    ],
)
def test_locate_array_event(batch_job_id, job_name, index, size, expected):
    assert locate_array_event(batch_job_id, job_name, index, size) == expected


# -- items ------------------------------------------------------------------------------------------
@given(st.lists(st.recursive(st.none() | st.booleans() | st.integers() | st.text(), st.lists), min_size=1))
def test_any_item_is_read_back_from_its_index_entry_and_its_line(items):
    data, index = encode_items(items)
    assert len(index) == 8 * (len(items) + 1)
    for i, item in enumerate(items):
        first, last = item_range(index[8 * i : 8 * i + 16])
        assert json.loads(data[first : last + 1]) == item


def test_items_parse_one_json_value_a_line():
    assert parse_items_jsonl(b'1\n"two"\r\n{"x": [3]}\nnull') == [1, "two", {"x": [3]}, None]


@pytest.mark.parametrize(
    "saved_as",
    [
        lambda data: data,
        lambda data: data.replace(b"\n", b"\r\n"),
        lambda data: codecs.BOM_UTF8 + data,
        lambda data: codecs.BOM_UTF8 + data.replace(b"\n", b"\r\n"),
    ],
    ids=["LF", "CRLF", "UTF-8 BOM", "UTF-8 BOM and CRLF"],
)
def test_items_saved_on_any_platform_parse_alike(saved_as):
    # Given the items as Windows and Unix editors save a JSON Lines file; json.loads of the bytes is
    # the oracle (it ignores a byte-order mark, RFC 8259 section 8.1)
    items = [1, "two", {"x": [3]}, None, "\ufeff is data inside a string"]
    data = saved_as(b"".join(json.dumps(item).encode() + b"\n" for item in items))

    assert json.loads(data.splitlines()[0]) == items[0]
    assert parse_items_jsonl(data) == items


@pytest.mark.parametrize(
    ("data", "line"),
    [(b"1\n{oops\n3\n", 2), (b"1\n\n3\n", 2), (b"NaN\n", 1), (b"1\n2\n\xff\n", 3), (b"1 2\n", 1)],
)
def test_a_bad_line_is_named(data, line):
    with pytest.raises(ValidationFailed) as caught:
        parse_items_jsonl(data)
    assert caught.value.field == "arrayItemsKey"
    assert f"line {line} " in caught.value.message


def test_no_items_or_too_many_are_refused():
    with pytest.raises(ValidationFailed, match="no items"):
        parse_items_jsonl(b"")
    with pytest.raises(ValidationFailed, match="3 items"):
        parse_items_jsonl(b"1\n2\n3\n", max_items=2)


def test_item_range_refuses_a_damaged_entry():
    with pytest.raises(ValueError, match="do not describe a line"):
        item_range(struct.pack(">2Q", 10, 10))
    with pytest.raises(ValueError, match="16 bytes, not 8"):
        item_range(b"\x00" * 8)


# -- roll-up ----------------------------------------------------------------------------------------
def test_counts_move_one_child_and_always_sum_to_the_size():
    counts = move_count(initial_counts(3), JobStatus.QUEUED, JobStatus.RUNNING)
    counts = move_count(counts, JobStatus.RUNNING, JobStatus.SUCCEEDED)
    assert counts == {"Queued": 2, "Running": 0, "Succeeded": 1}
    assert visible_counts(counts) == {"Queued": 2, "Succeeded": 1}
    assert not all_final(counts, 3)


def test_the_reason_names_how_many_and_the_first_index():
    assert (
        children_terminated_reason(3, 1000, 17, "ZeroDivisionError: division by zero")
        == "3 of 1000 children terminated (first: index 17, ZeroDivisionError: division by zero)"
    )


def test_outcome_waits_for_every_child_then_succeeds_only_if_all_did():
    assert array_outcome(2, {"Succeeded": 1, "Running": 1}, None, None) is None
    succeeded = array_outcome(2, {"Succeeded": 2}, None, None)
    assert succeeded is not None and succeeded.status == JobStatus.SUCCEEDED
    ended = array_outcome(
        3, {"Succeeded": 2, "Terminated": 1}, (1, "ZeroDivisionError: division by zero"), None
    )
    assert ended is not None
    assert (ended.status, ended.reason) == (
        JobStatus.TERMINATED,
        "1 of 3 children terminated (first: index 1, ZeroDivisionError: division by zero)",
    )
    aborted = array_outcome(3, {"Succeeded": 1, "Terminated": 2}, (0, "Aborted by user"), "Aborted by user")
    assert aborted is not None and aborted.reason == "Aborted by user"


def test_the_array_cap_leaves_what_is_not_settled_yet():
    assert remaining_cap(Decimal("2.0"), Decimal("1.5")) == Decimal("0.5000")
    assert remaining_cap(Decimal("2.0"), Decimal("2.5")) == Decimal("0.0000")
    assert remaining_cap(None, Decimal("2.5")) is None
    assert array_spent(Decimal("1.0"), [Decimal("0.4"), Decimal("0.7")], Decimal("2")) == Decimal("2")
    assert array_spent(Decimal("1.0"), [Decimal("0.4")], None) == Decimal("1.4000")


def test_the_result_document_lists_children_in_index_order_with_errors():
    body = json.loads(
        result_document([1.0, None, 0.5], ["1.0", "None", "0.5"], [(1, "ZeroDivisionError: x")])
    )
    assert body == {
        "result": [1.0, None, 0.5],
        "resultRepr": "[1.0, None, 0.5]",
        "errors": [{"index": 1, "message": "ZeroDivisionError: x"}],
    }


# -- any order, any duplication: the roll-up of a store that applies each child's events forward only
@dataclass
class ArrayModel:
    """What the store keeps of an array, moved by the domain's rules exactly as ``array_events``
    moves DynamoDB: a child's write, its parent's counters and its charge together, only when the
    child's own forward-only rule applies the event."""

    parent: Job
    balance: Decimal
    children: dict[int, Job] = field(default_factory=dict)
    ledger: dict[str, Decimal] = field(default_factory=dict)

    def deliver(self, index: int | None, state: BatchJobState) -> None:
        if index is None:
            return  # the span's own event decides nothing
        child = self.children.get(index) or child_template(self.parent, index)
        transition = apply_batch_event(child, state, "Exited with code 1", arrived_at=ARRIVED)
        if transition is None:
            return
        after = transition.after
        counts = move_count(self.parent.child_status_counts or {}, child.status, after.status)
        settled = self.parent.credits_settled
        if transition.settles:
            cap = remaining_cap(self.parent.credit_constraint, settled)
            charge = settle_charge(transition.running_ms, RATE, cap, self.balance)
            if charge.credits > 0:
                self.ledger[after.job_id] = charge.credits
                self.balance -= charge.credits
                settled += charge.credits
            after = replace(after, credits_spent=charge.credits)
        self.children[index] = after
        self.parent = replace(self.parent, child_status_counts=counts, credits_settled=settled)

    def outcome(self) -> tuple[Any, ...]:
        size = self.parent.array_size or 0
        terminated = sorted(i for i, c in self.children.items() if c.status == JobStatus.TERMINATED)
        first = (terminated[0], self.children[terminated[0]].status_reason) if terminated else None
        result = array_outcome(size, self.parent.child_status_counts or {}, first, None)
        return (
            result,
            visible_counts(self.parent.child_status_counts),
            self.parent.credits_settled,
            dict(self.ledger),
            self.balance,
        )


def child_events(index: int, seconds: int, succeeded: bool) -> list[tuple[int | None, BatchJobState]]:
    started, stopped = T0 + 1000 * index, T0 + 1000 * index + 1000 * seconds
    events: list[tuple[int | None, BatchJobState]] = []
    for status in ("RUNNABLE", "STARTING", "RUNNING", "SUCCEEDED" if succeeded else "FAILED"):
        final = status in ("SUCCEEDED", "FAILED")
        events.append(
            (
                index,
                BatchJobState(
                    batch_job_id=f"span:{index}",
                    job_name=PARENT,
                    status=status,
                    status_reason=None,
                    created_at_ms=T0,
                    started_at_ms=started if status in ("RUNNING", "SUCCEEDED", "FAILED") else None,
                    stopped_at_ms=stopped if final else None,
                    exit_code=(0 if succeeded else 1) if final else None,
                    log_stream_name="s",
                    attempt_count=1 if final else 0,
                    array_index=index,
                ),
            )
        )
    return events


def span_events(size: int) -> list[tuple[int | None, BatchJobState]]:
    return [
        (
            None,
            BatchJobState("span", PARENT, status, None, T0, None, None, None, None, 0, array_size=size),
        )
        for status in ("SUBMITTED", "PENDING", "RUNNING", "SUCCEEDED")
    ]


@settings(max_examples=150, deadline=None)
@given(
    runs=st.lists(st.tuples(st.integers(1, 200), st.booleans()), min_size=1, max_size=6),
    cap=st.none() | st.decimals(min_value=Decimal("0.5"), max_value=Decimal("8"), places=4),
    data=st.data(),
)
def test_any_order_and_duplication_of_child_and_span_events_ends_as_one_in_order_delivery(runs, cap, data):
    size = len(runs)
    in_order = [e for i, (seconds, ok) in enumerate(runs) for e in child_events(i, seconds, ok)]
    in_order = span_events(size)[:2] + in_order + span_events(size)[2:]
    expected = ArrayModel(parent_job(size, cap), Decimal(10_000))
    for index, state in in_order:
        expected.deliver(index, state)

    duplicated = in_order + data.draw(st.lists(st.sampled_from(in_order), max_size=len(in_order)))
    shuffled = data.draw(st.permutations(duplicated))
    # Each child's own events still arrive in their order often enough to count: the roll-up only
    # promises the same end once every child's final event arrived, whatever came before it.
    delivered = ArrayModel(parent_job(size, cap), Decimal(10_000))
    for index, state in shuffled:
        delivered.deliver(index, state)

    assert delivered.outcome()[0] == expected.outcome()[0]
    assert delivered.outcome()[1] == expected.outcome()[1]
    assert sum(delivered.outcome()[1].values()) == size
    if cap is None:
        # Without a cap each child's charge is its own: the same whatever the order.
        assert delivered.outcome()[2:] == expected.outcome()[2:]
    else:
        # With a cap the order decides which child is cut, never the total: min(sum, cap), exactly.
        uncapped = sum(
            (settle_charge(1000 * s, RATE, None, Decimal(10_000)).credits for s, _ in runs), Decimal(0)
        )
        assert delivered.parent.credits_settled == min(uncapped, cap)
        assert sum(delivered.ledger.values(), Decimal(0)) == delivered.parent.credits_settled
        assert delivered.balance == Decimal(10_000) - delivered.parent.credits_settled


def test_unsent_runs_are_from_the_front_or_a_per_item_arrays_neither_admitted_nor_ended() -> None:
    from functions.domain.arrays import unsent_runs, withdrawn_reason
    from functions.domain.dependencies import Condition, Dependency, DependencyMode, item_unmet_reason

    # An array admitted from the front: what follows arrayAdmitted
    assert unsent_runs(replace(parent_job(10), array_admitted=4)) == [(4, 6)]
    assert unsent_runs(replace(parent_job(10), array_admitted=10)) == []
    # A perItem array: items 5 and 1 released (only 5 admitted), 3 ended: the others, in runs
    other = "job-01JBBBBBBBBBBBBBBBBBBBBBBB"
    per_item = replace(
        parent_job(7),
        depends_on=(Dependency(other, Condition.SUCCEEDED, DependencyMode.PER_ITEM),),
        array_released=(5, 1),
        array_admitted=1,
        array_ended_items=frozenset({3}),
    )
    assert unsent_runs(per_item) == [(0, 3), (4, 1), (6, 1)]
    # An ended item shows its parent item's reason
    assert withdrawn_reason(per_item, 3) == item_unmet_reason(f"{other}:3", JobStatus.TERMINATED)
    assert withdrawn_reason(per_item, 4) is None
