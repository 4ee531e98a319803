"""Arrays that depend on arrays per item (``dependsOn`` ``mode`` ``perItem``, AWS Batch's N_TO_N), on
moto through the handlers: child item i is released once parent item i succeeded, each pair on its
own and through the quota; a parent item that failed ends only its child item, Terminated, free (0
credits, no ledger entry); replayed, duplicated and reversed parent item events release each child
item once; the parent array's end withdraws the items never released; bad input is a 400 on
``dependsOn[i].mode``."""

from __future__ import annotations

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
from tests.integration.test_array_quotas import Child, basic_us_line, child_events, job_of, new_children, set_quota

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
    assert (shown["status"], shown["statusReason"]) == ("Queued", f"Waiting for {parent}'s items (0 of 4 released)")
    assert shown["dependsOn"] == [{"jobId": parent, "condition": "Succeeded", "mode": "perItem"}]
    assert _children_of(stack, child, seen)[0] == {}
    assert basic_us_line(stack) == (4, 0)  # the waiting items hold nothing

    # When parent item 3 succeeds first
    _run(stack, parents[3])
    # Then child item 3 alone is sent, as a plain job at its own index, and runs to its end while
    # parent item 0 has not even started
    sent, seen = _children_of(stack, child, seen)
    assert list(sent) == [3]
    submission = stack.batch[US].submissions[-1]
    assert submission.job_name == span_job_name(child, 3)
    assert (submission.array_size, submission.environment["REMOTE_BATCH_ARRAY_OFFSET"]) == (None, "3")
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
