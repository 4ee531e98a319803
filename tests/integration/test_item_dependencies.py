"""Arrays that depend on arrays per item (``dependsOn`` ``mode`` ``perItem``, AWS Batch's N_TO_N), on
moto through the handlers: child item i is released once parent item i succeeded, each pair on its
own and through the quota; a parent item that failed ends only its child item, Terminated, free (0
credits, no ledger entry); replayed, duplicated and reversed parent item events release each child
item once; the parent array's end withdraws the items never released; bad input is a 400 on
``dependsOn[i].mode``."""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from functions.domain.arrays import child_job_id, span_job_name
from functions.domain.dependencies import item_unmet_reason
from functions.domain.machine_classes import GeoZone
from functions.domain.status import JobStatus
from tests.integration.conftest import Stack
from tests.integration.test_array_quotas import (
    Child,
    basic_us_line,
    child_events,
    job_of,
    new_children,
    set_quota,
)

US = GeoZone.UNITED_STATES


def _array(stack: Stack, size: int, **body: Any) -> str:
    status, job = stack.api("POST", "/jobs", body={"code": "item", "arrayItems": list(range(size)), **body})
    assert status == 202, job
    return str(job["jobId"])


def _per_item(parent: str) -> list[dict[str, str]]:
    return [{"jobId": parent, "condition": "Succeeded", "mode": "perItem"}]


def _children_of(stack: Stack, array_id: str, seen: int) -> tuple[dict[int, Child], int]:
    """The children of ``array_id`` among the spans submitted after the first ``seen``, by index."""
    children, count = new_children(stack, seen)
    return {c[3]: c for c in children if c[0].split("_")[0] == array_id}, count


def _run(stack: Stack, child: Child, *, succeeded: bool = True) -> None:
    for event in child_events(child, succeeded=succeeded):
        stack.deliver(event)


def _item(stack: Stack, array_id: str, index: int) -> dict[str, Any]:
    status, job = stack.api("GET", f"/jobs/{child_job_id(array_id, index)}")
    assert status == 200, job
    return dict(job)


def _ledger_jobs(stack: Stack) -> list[str | None]:
    return [e.job_id for e in stack.services.store.list_ledger("dev", None, None)]


def test_each_item_goes_once_its_parent_item_succeeded_and_a_failed_parent_item_ends_only_its_own(
    stack: Stack,
) -> None:
    # Given a parent array of 4 items all in AWS Batch, and an array of 4 depending on it per item
    set_quota(stack, "Basic", 8)
    parent = _array(stack, 4)
    parents, seen = _children_of(stack, parent, 0)
    assert sorted(parents) == [0, 1, 2, 3]
    child = _array(stack, 4, dependsOn=_per_item(parent))
    shown = stack.api("GET", f"/jobs/{child}")[1]
    assert (shown["status"], shown["statusReason"]) == (
        "Queued",
        f"Waiting for {parent}'s items (0 of 4 released)",
    )
    assert shown["dependsOn"] == [{"jobId": parent, "condition": "Succeeded", "mode": "perItem"}]
    assert _children_of(stack, child, seen)[0] == {}
    assert basic_us_line(stack) == (4, 0)  # the waiting items hold nothing
    assert stack.api("GET", f"/jobs/{parent}")[1]["childrenWaiting"] == [child]

    # When parent item 3 succeeds first
    _run(stack, parents[3])
    # Then child item 3 alone is sent, as a plain job at its own index, and runs to its end while
    # parent item 0 has not even started
    sent, seen = _children_of(stack, child, seen)
    assert list(sent) == [3]
    submission = stack.batch[US].submissions[-1]
    assert submission.job_name == span_job_name(child, 3)
    assert (submission.array_size, submission.environment["REMOTE_BATCH_ARRAY_OFFSET"]) == (None, "3")
    assert job_of(stack, child).status_reason == f"Waiting for {parent}'s items (1 of 4 released)"
    _run(stack, sent[3])
    assert _item(stack, child, 3)["status"] == "Succeeded"
    assert _item(stack, parent, 0)["status"] == "Queued"

    # When parent item 1 fails
    _run(stack, parents[1], succeeded=False)
    # Then child item 1 ends Terminated, free, naming the parent item; nothing of it reached AWS Batch
    ended = _item(stack, child, 1)
    assert ended["status"] == "Terminated"
    assert ended["statusReason"] == f"Dependency {parent}:1 ended Terminated; this item needed Succeeded"
    assert ended["statusReason"] == item_unmet_reason(child_job_id(parent, 1), JobStatus.TERMINATED)
    assert Decimal(str(ended["creditsSpent"])) == Decimal(0)
    assert _children_of(stack, child, seen)[0] == {}
    assert child_job_id(child, 1) not in _ledger_jobs(stack)
    assert job_of(stack, child).status is JobStatus.RUNNING  # its other items go on

    # When parent items 2 and 0 succeed, in that order, and the child's items run
    for index in (2, 0):
        _run(stack, parents[index])
        sent, seen = _children_of(stack, child, seen)
        assert list(sent) == [index]
        _run(stack, sent[index])

    # Then the child array ends Terminated (one item did not run), charged exactly its three items
    stored = job_of(stack, child)
    assert stored.status is JobStatus.TERMINATED
    assert stored.status_reason == (
        f"1 of 4 children terminated (first: index 1, Dependency {parent}:1 ended Terminated; this item "
        "needed Succeeded)"
    )
    spent = [Decimal(str(_item(stack, child, i)["creditsSpent"])) for i in range(4)]
    assert spent[1] == Decimal(0) and all(s > 0 for s in spent[:1] + spent[2:])
    assert stored.credits_spent == sum(spent, Decimal(0))
    assert sorted(j for j in _ledger_jobs(stack) if j and j.startswith(child)) == [
        child_job_id(child, i) for i in (0, 2, 3)
    ]
    assert basic_us_line(stack) == (0, 0)
    assert stack.services.store.list_held_jobs("dev") == []


def test_released_items_wait_for_quota_like_any_child_and_never_go_past_it(stack: Stack) -> None:
    # Given a Basic quota of 2 and a parent array of 3: two of its items run, one is held
    set_quota(stack, "Basic", 2)
    parent = _array(stack, 3)
    parents, seen = _children_of(stack, parent, 0)
    assert sorted(parents) == [0, 1]
    child = _array(stack, 3, dependsOn=_per_item(parent))
    assert basic_us_line(stack) == (2, 1)
    # When parent item 1 succeeds
    _run(stack, parents[1])
    # Then its unit goes to the older array's held item 2 first, and child item 1 waits counted queued
    fresh, seen = _children_of(stack, parent, seen)
    assert list(fresh) == [2]
    assert _children_of(stack, child, seen)[0] == {}
    assert basic_us_line(stack) == (2, 1)
    assert (
        job_of(stack, child).status_reason == "Waiting for quota: Basic vCPUs in UnitedStates (2 of 2 in use)"
    )
    parents.update(fresh)
    # When parent items 0 and 2 succeed
    _run(stack, parents[0])
    sent, seen = _children_of(stack, child, seen)
    assert list(sent) == [1]  # released first, admitted first
    assert basic_us_line(stack) == (2, 1)  # child item 0 released, waiting for the one unit in use
    _run(stack, parents[2])
    more, seen = _children_of(stack, child, seen)
    assert list(more) == [0]
    assert basic_us_line(stack) == (2, 1)
    # Then the child's items run two at a time at most, and every unit comes back
    _run(stack, sent[1])
    last, seen = _children_of(stack, child, seen)
    assert list(last) == [2]
    assert basic_us_line(stack) == (2, 0)
    _run(stack, more[0])
    _run(stack, last[2])
    assert job_of(stack, child).status is JobStatus.SUCCEEDED
    assert basic_us_line(stack) == (0, 0)
    assert stack.services.store.list_held_jobs("dev") == []


def test_items_whose_parent_items_ended_before_the_submit_settle_at_the_submit(stack: Stack) -> None:
    # Given a parent array whose item 0 succeeded and item 1 failed, item 2 still running
    set_quota(stack, "Basic", 8)
    parent = _array(stack, 3)
    parents, seen = _children_of(stack, parent, 0)
    _run(stack, parents[0])
    _run(stack, parents[1], succeeded=False)
    # When an array is submitted on it per item
    child = _array(stack, 3, dependsOn=_per_item(parent))
    # Then item 0 is sent at once, item 1 is Terminated, item 2 waits
    sent, seen = _children_of(stack, child, seen)
    assert list(sent) == [0]
    assert _item(stack, child, 1)["status"] == "Terminated"
    assert _item(stack, child, 2)["status"] == "Queued"
    assert job_of(stack, child).array_released == (0,)


def test_the_parent_arrays_end_withdraws_the_items_it_never_released(stack: Stack) -> None:
    # Given a parent array of 3 under a quota of 1 (item 0 running, 1 and 2 held) and an array on it
    set_quota(stack, "Basic", 1)
    parent = _array(stack, 3)
    parents, seen = _children_of(stack, parent, 0)
    child = _array(stack, 3, dependsOn=_per_item(parent))
    # When the parent is aborted: its held items are withdrawn, its running item ends Terminated
    assert stack.api("POST", f"/jobs/{parent}/abort")[0] == 202
    _run(stack, parents[0], succeeded=False)
    assert job_of(stack, parent).status is JobStatus.TERMINATED
    # Then every child item ends Terminated, free, naming its parent item, and the array with them
    stored = job_of(stack, child)
    assert stored.status is JobStatus.TERMINATED
    assert stored.credits_spent == Decimal(0)
    for index in range(3):
        item = _item(stack, child, index)
        assert item["status"] == "Terminated"
        assert item["statusReason"] == item_unmet_reason(child_job_id(parent, index), JobStatus.TERMINATED)
    assert _children_of(stack, child, seen)[0] == {}
    assert not [j for j in _ledger_jobs(stack) if j and j.startswith(child)]
    assert basic_us_line(stack) == (0, 0)


def test_aborting_an_array_that_depends_per_item_withdraws_its_unreleased_and_held_items(
    stack: Stack,
) -> None:
    # Given a parent of 3 under a quota of 1 whose item 0 succeeded (child item 0 released, held)
    set_quota(stack, "Basic", 1)
    parent = _array(stack, 3)
    parents, seen = _children_of(stack, parent, 0)
    child = _array(stack, 3, dependsOn=_per_item(parent))
    _run(stack, parents[0])
    fresh, seen = _children_of(stack, parent, seen)
    assert list(fresh) == [1]  # the older array's item took the unit; child item 0 is held
    assert basic_us_line(stack) == (1, 2)
    # When the child is aborted
    assert stack.api("POST", f"/jobs/{child}/abort")[0] == 202
    # Then all its items end Terminated, free, its queued unit given back, and later parent items
    # release nothing
    assert job_of(stack, child).status is JobStatus.TERMINATED
    assert basic_us_line(stack) == (1, 1)
    _run(stack, fresh[1])
    assert _children_of(stack, child, seen)[0] == {}
    assert job_of(stack, child).credits_spent == Decimal(0)


def test_the_meter_backstop_releases_an_item_whose_release_was_lost(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import timedelta

    from functions.logic import item_dependencies

    set_quota(stack, "Basic", 8)
    parent = _array(stack, 2)
    parents, seen = _children_of(stack, parent, 0)
    child = _array(stack, 2, dependsOn=_per_item(parent))
    # Parent item 1's final event lands but the child's item is never settled (a crash after the write)
    monkeypatch.setattr(item_dependencies, "item_ended", lambda *args, **kwargs: [])
    _run(stack, parents[1])
    monkeypatch.undo()
    assert _children_of(stack, child, seen)[0] == {}
    stack.clock.advance(timedelta(minutes=11).total_seconds())
    stack.tick()
    assert list(_children_of(stack, child, seen)[0]) == [1]


@pytest.mark.slow
@settings(
    max_examples=6, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    order=st.permutations([0, 1, 2]),
    repeats=st.lists(st.sampled_from([0, 1, 2]), max_size=3),
    failed=st.sampled_from([None, 0, 2]),
)
def test_replayed_duplicated_and_reversed_parent_item_events_release_each_item_once(
    stack: Stack, order: list[int], repeats: list[int], failed: int | None
) -> None:
    # Given a parent array of 3 in AWS Batch and an array on it per item
    set_quota(stack, "Basic", 64)  # the child items sent hold theirs: 3 an example at most
    before = len(stack.batch[US].submissions)
    parent = _array(stack, 3)
    parents, seen = _children_of(stack, parent, before)
    child = _array(stack, 3, dependsOn=_per_item(parent))
    # When its items' events arrive in any order, some final events delivered again, before or after
    for index in order:
        events = child_events(parents[index], succeeded=index != failed)
        for again in repeats[:2]:
            if again == index:
                stack.deliver(events[-1])  # its final event first, then its whole life
        for event in events:
            stack.deliver(event)
    for index in repeats[2:]:
        stack.deliver(child_events(parents[index], succeeded=index != failed)[-1])
    # Then each child item whose parent item succeeded was sent exactly once, the failed one never
    names = [s.job_name for s in stack.batch[US].submissions]
    expected = [0 if i == failed else 1 for i in range(3)]
    assert [names.count(span_job_name(child, i)) for i in range(3)] == expected
    stored = job_of(stack, child)
    assert sorted(stored.array_released) == [i for i in range(3) if i != failed]
    assert stored.array_ended_items == (frozenset() if failed is None else frozenset({failed}))
    assert stack.services.store.get_quota_usage("dev").total_queued == 0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"code": "1", "dependsOn": "PER_ITEM"}, "is for an array"),
        ({"code": "1", "arrayItems": [1, 2], "dependsOn": "PER_ITEM_FAILED"}, "takes condition Succeeded"),
        ({"code": "1", "arrayItems": [1, 2], "dependsOn": "UNKNOWN_MODE"}, None),
        ({"code": "1", "arrayItems": [1, 2, 3], "dependsOn": "PER_ITEM"}, "has 2 items and this array 3"),
        ({"code": "1", "arrayItems": [1, 2], "dependsOn": "PER_ITEM_SINGLE"}, "is no array"),
        ({"code": "1", "arrayItems": [1, 2], "dependsOn": "PER_ITEM_AND_WHOLE"}, "only dependsOn entry"),
    ],
)
def test_bad_per_item_input_is_a_400_on_the_mode(
    stack: Stack, body: dict[str, Any], message: str | None
) -> None:
    # Given a parent array of 2 and a single job
    parent = _array(stack, 2)
    single = stack.api("POST", "/jobs", body={"code": "1"})[1]["jobId"]
    entries = {
        "PER_ITEM": _per_item(parent),
        "PER_ITEM_FAILED": [{"jobId": parent, "condition": "Terminated", "mode": "perItem"}],
        "UNKNOWN_MODE": [{"jobId": parent, "mode": "eachItem"}],
        "PER_ITEM_SINGLE": _per_item(single),
        "PER_ITEM_AND_WHOLE": [*_per_item(parent), {"jobId": single}],
    }
    jobs_before = len(stack.api("GET", "/jobs")[1]["jobs"])
    # When a submit asks for it
    status, refused = stack.api("POST", "/jobs", body={**body, "dependsOn": entries[body["dependsOn"]]})
    # Then it is a 400 naming dependsOn[i].mode, and nothing of it is written
    assert status == 400, refused
    assert refused["error"]["field"] == "dependsOn[0].mode"
    if message is not None:
        assert message in refused["error"]["message"]
    assert len(stack.api("GET", "/jobs")[1]["jobs"]) == jobs_before


def test_a_pair_costs_its_childs_read_and_one_write_at_its_parent_items_end(stack: Stack) -> None:
    from tests.integration.test_job_dependencies import _dynamodb_requests

    # Given two parent arrays of 2 in AWS Batch, an array on the first per item, none on the second
    set_quota(stack, "Basic", 8)
    lone = _array(stack, 2, notifications="None")
    lone_items, seen = _children_of(stack, lone, 0)
    parent = _array(stack, 2, notifications="None")
    parent_items, seen = _children_of(stack, parent, seen)
    _array(stack, 2, dependsOn=_per_item(parent), notifications="None")
    # When item 0 of each fails (every event but the final one delivered first)
    costs = []
    for item in (lone_items[0], parent_items[0]):
        events = child_events(item, succeeded=False)
        for event in events[:-1]:
            stack.deliver(event)
        costs.append(_dynamodb_requests(lambda final=events[-1]: stack.deliver(final)))
    # Then the pair cost the child's read, its one conditional write and the read that may finish it
    assert costs[1] - costs[0] == Counter({"GetItem": 2, "UpdateItem": 1})
    assert not costs[0] - costs[1]
