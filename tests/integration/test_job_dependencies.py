"""Jobs that depend on other jobs (``dependsOn``), on moto through the handlers: a child waits Queued
holding no quota and no credits; a parent's final event releases it into the admission, once,
whatever the duplication or order of the events; a condition that can no longer hold ends it
Terminated, free (0 credits, no ledger entry), with its notifications, down the chain; the meter's
backstop settles what a lost release missed; bad input is a 400 on its field."""

from __future__ import annotations

import json
from collections import Counter
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.capacity import RequestRecorder
from functions.domain.dependencies import data_gone_reason
from functions.domain.errors import BatchRefused
from functions.domain.jobs import DispatchState
from functions.domain.machine_classes import GeoZone
from functions.logic import waits
from functions.logic.dispatch_rules import REFUSED_REASON
from functions.ports import BatchSubmission
from tests.events import batch_event
from tests.integration.conftest import Stack, finish, limit_basic_us

NEEDED = "Dependency {parent} ended {ended}; this job needed {needed}"


def _submit(stack: Stack, **body: Any) -> dict[str, Any]:
    status, job = stack.api("POST", "/jobs", body={"code": "1", **body})
    assert status == 202, job
    return dict(job)


def _after(*parents: str, condition: str | None = None) -> list[dict[str, str]]:
    return [{"jobId": p, **({"condition": condition} if condition else {})} for p in parents]


def _sent(stack: Stack) -> list[str]:
    return [s.job_name for s in stack.batch[GeoZone.UNITED_STATES].submissions]


def _job(stack: Stack, job_id: str) -> dict[str, Any]:
    status, job = stack.api("GET", f"/jobs/{job_id}")
    assert status == 200, job
    return dict(job)


def _fail(stack: Stack, job_id: str) -> None:
    """Deliver the FAILED event of a job sent to AWS Batch (its code raised)."""
    stored = stack.services.store.get_job(job_id)
    assert stored is not None and stored.batch_job_id is not None
    stack.deliver(
        batch_event(
            job_id,
            stored.batch_job_id,
            "FAILED",
            started_at=1_764_000_001_000,
            stopped_at=1_764_000_002_000,
            exit_code=1,
            status_reason="Essential container in task exited",
        )
    )


def _job_entries(stack: Stack, job_id: str) -> list[Any]:
    return [e for e in stack.services.store.list_ledger("dev", None, None) if e.job_id == job_id]


def _basic_quota(stack: Stack) -> dict[str, Any]:
    _, body = stack.api("GET", "/account/quotas")
    return next(q for q in body["quotas"] if q["family"] == "Basic" and q["geoZone"] == "UnitedStates")


def test_a_child_waits_for_its_running_parent_then_runs_once_it_succeeded(stack: Stack) -> None:
    parent = _submit(stack)
    # Given a child of a parent AWS Batch has
    child = _submit(stack, dependsOn=_after(parent["jobId"]))
    # Then it waits Queued with the parent's status, holding no quota, not sent
    assert (child["status"], child["statusReason"]) == ("Queued", f"Waiting for {parent['jobId']} (Queued)")
    assert child["dependsOn"] == [{"jobId": parent["jobId"], "condition": "Succeeded"}]
    assert child["waitingFor"] == [f"job|{parent['jobId']}"]
    assert _sent(stack) == [parent["jobId"]]
    stored = stack.services.store.get_job(child["jobId"])
    assert stored is not None and stored.dispatch_state is DispatchState.WAITING
    assert Decimal(child["creditsSpent"]) == Decimal("0")
    # When the parent succeeds
    finish(stack, parent["jobId"])
    # Then the child is admitted and sent, once
    assert _sent(stack) == [parent["jobId"], child["jobId"]]
    released = _job(stack, child["jobId"])
    assert released["statusReason"] is None and released["waitingFor"] == []
    assert released["dependsOn"] == [{"jobId": parent["jobId"], "condition": "Succeeded"}]
    # And it pays only for its own running time
    finish(stack, child["jobId"])
    [entry] = _job_entries(stack, child["jobId"])
    assert Decimal(_job(stack, child["jobId"])["creditsSpent"]) == entry.credits > Decimal("0")


def test_a_failed_parent_ends_its_succeeded_children_and_grandchildren_free_and_runs_its_terminated_child(
    stack: Stack,
) -> None:
    parent = _submit(stack)["jobId"]
    child = _submit(stack, dependsOn=_after(parent), notifications="JobTerminated")["jobId"]
    grandchild = _submit(stack, dependsOn=_after(child), notifications="JobTerminated")["jobId"]
    cleanup = _submit(stack, dependsOn=_after(parent, condition="Terminated"))["jobId"]
    either = _submit(stack, dependsOn=_after(parent, condition="Completed"))["jobId"]
    assert _job(stack, grandchild)["statusReason"] == f"Waiting for {child} (Queued)"
    balance = stack.balance("dev")
    # When the parent fails
    _fail(stack, parent)
    # Then its Succeeded-child and its grandchild end Terminated, free, saying why
    ended = _job(stack, child)
    assert (ended["status"], ended["statusReason"]) == (
        "Terminated",
        NEEDED.format(parent=parent, ended="Terminated", needed="Succeeded"),
    )
    down = _job(stack, grandchild)
    assert (down["status"], down["statusReason"]) == (
        "Terminated",
        NEEDED.format(parent=child, ended="Terminated", needed="Succeeded"),
    )
    for job_id in (child, grandchild):
        assert Decimal(_job(stack, job_id)["creditsSpent"]) == Decimal("0")
        assert _job_entries(stack, job_id) == []
        terminated = [n for n in stack.notifier.sent if n.job_id == job_id and n.event == "JobTerminated"]
        assert len(terminated) == 1
    # And the Terminated-child and the Completed-child run
    assert _sent(stack) == [parent, cleanup, either]
    # Nothing was charged for the ended ones; the parent's own charge is its own
    [parent_entry] = _job_entries(stack, parent)
    assert stack.balance("dev") == balance - parent_entry.credits
    assert _basic_quota(stack)["queued"] == 0


def test_a_succeeded_parent_ends_a_child_that_needed_it_terminated(stack: Stack) -> None:
    parent = _submit(stack)["jobId"]
    finish(stack, parent)
    # A child submitted after its parent ended is judged at once
    child = _submit(stack, dependsOn=_after(parent, condition="Terminated"))
    assert (child["status"], child["statusReason"]) == (
        "Terminated",
        NEEDED.format(parent=parent, ended="Succeeded", needed="Terminated"),
    )
    assert Decimal(child["creditsSpent"]) == Decimal("0")
    assert _job_entries(stack, child["jobId"]) == []
    # And one whose parent already succeeded runs at once
    runs = _submit(stack, dependsOn=_after(parent))
    assert runs["statusReason"] is None
    assert _sent(stack) == [parent, runs["jobId"]]


def test_a_diamond_releases_its_last_job_once_after_both_of_its_parents(stack: Stack) -> None:
    a = _submit(stack)["jobId"]
    b = _submit(stack, dependsOn=_after(a))["jobId"]
    c = _submit(stack, dependsOn=_after(a))["jobId"]
    d = _submit(stack, dependsOn=_after(b, c))["jobId"]
    assert _job(stack, d)["statusReason"] == f"Waiting for {b} (Queued) and 1 more"
    finish(stack, a)
    assert _sent(stack) == [a, b, c]
    finish(stack, b)
    # (b's settlement counted itself on d without reading c: the reason names c, its status unread)
    assert _job(stack, d)["statusReason"] == f"Waiting for {c}"
    finish(stack, b)  # delivered again: nothing more
    finish(stack, c)
    finish(stack, c)
    assert _sent(stack) == [a, b, c, d]


def test_a_hundred_parents_release_their_child_once_the_last_one_succeeded_at_two_requests_an_edge(
    stack: Stack,
) -> None:
    # Given a child of 100 parents (a quota that admits them all)
    status, body = stack.api(
        "PUT",
        "/admin/accounts/dev/quotas",
        body={"quotas": [{"family": "Basic", "geoZone": "UnitedStates", "limit": 1000}]},
        account_id="admin",
        groups="admin",
    )
    assert status == 200, body
    parents = [_submit(stack, notifications="None")["jobId"] for _ in range(100)]
    submitted: list[dict[str, Any]] = []
    at_submit = _dynamodb_requests(
        lambda: submitted.append(_submit(stack, dependsOn=_after(*parents), notifications="None"))
    )
    child = submitted[0]["jobId"]
    assert submitted[0]["statusReason"] == f"Waiting for {parents[0]} (Queued) and 99 more"
    assert len(submitted[0]["waitingFor"]) == 100
    # (its 100 parents' marks, one UpdateItem each; and the submit's own reads: the caller's, and the
    # waiting job's judgement, one BatchGetItem of all 100)
    assert at_submit["UpdateItem"] == 100 and at_submit["BatchGetItem"] == 2
    assert "BatchWriteItem" not in at_submit  # no wait items: each parent lists its children
    # When 99 of them end (written final straight to the table, then their settlement of their
    # children, in reverse order)
    store = stack.services.store
    for parent in parents[1:]:
        store._db.update_item(  # type: ignore[attr-defined]
            TableName=stack.settings.jobs_table,
            Key={"jobId": {"S": parent}},
            UpdateExpression="SET #s = :s",
            ExpressionAttributeNames={"#s": "status"},
            ExpressionAttributeValues={":s": {"S": "Succeeded"}},
        )
    finals = [store.get_job(p) for p in reversed(parents[1:])]

    def settle_all() -> None:
        for final in finals:
            assert final is not None
            waits.settle_dependents(stack.services, final, stack.clock())

    settled = _dynamodb_requests(settle_all)
    # Then each settlement was one UpdateItem on the child (no Query, no read of the other parents),
    # and the child waits for the last one
    assert settled == Counter({"UpdateItem": 99})
    assert child not in _sent(stack)
    assert _job(stack, child)["statusReason"] == f"Waiting for {parents[0]}"
    # When the last parent ends by its event (delivered twice), against a parent without children
    lone = _submit(stack, notifications="None")["jobId"]
    lone_end = _dynamodb_requests(lambda: finish(stack, lone))
    last = _dynamodb_requests(lambda: finish(stack, parents[0]))
    finish(stack, parents[0])
    # Then the child is released once; its edge's settlement is one UpdateItem; the rest is the
    # child's own: its judgement (one BatchGetItem of its 100 parents), its release into the quota
    # (the quota's read, the release's transaction), its admission (the held queue's Queries, the
    # admitting transaction) and dispatch: what any held job costs
    assert _sent(stack).count(child) == 1
    assert last - lone_end == Counter(
        {"UpdateItem": 3, "BatchGetItem": 2, "TransactWriteItems": 2, "Query": 3, "GetItem": 1}
    )
    assert "Query" not in lone_end
    # Over the child's life its 100 edges cost 200 requests: a mark and a settlement each
    edges = at_submit["UpdateItem"] + settled["UpdateItem"] + 1
    assert edges == 200


def test_an_array_parent_counts_once_the_whole_array_is_final(stack: Stack) -> None:
    array = _submit(stack, arrayItems=[1, 2])["jobId"]
    child = _submit(stack, dependsOn=_after(array))["jobId"]
    stored = stack.services.store.get_job(array)
    assert stored is not None and stored.batch_job_id is not None
    for index in range(2):
        stack.deliver(
            batch_event(
                array,
                f"{stored.batch_job_id}:{index}",
                "SUCCEEDED",
                started_at=1_764_000_001_000,
                stopped_at=1_764_000_002_000,
                array_index=index,
            )
        )
        if index == 0:
            assert child not in _sent(stack)
    assert _job(stack, array)["status"] == "Succeeded"
    assert _sent(stack).count(child) == 1


def test_aborting_a_queued_parent_ends_its_waiting_children_by_their_condition(stack: Stack) -> None:
    # Given a parent held for quota (AWS Batch never had it)
    limit_basic_us(stack, 1)
    _submit(stack)
    parent = _submit(stack)["jobId"]
    child = _submit(stack, dependsOn=_after(parent))["jobId"]
    cleanup = _submit(stack, dependsOn=_after(parent, condition="Terminated"))["jobId"]
    assert stack.api("POST", f"/jobs/{parent}/abort")[0] == 202
    assert _job(stack, child)["statusReason"] == NEEDED.format(
        parent=parent, ended="Terminated", needed="Succeeded"
    )
    # The cleanup child is released into the quota's admission (held behind the running job)
    stored = stack.services.store.get_job(cleanup)
    assert stored is not None and stored.dispatch_state is DispatchState.HELD


@pytest.mark.parametrize("parent_body", [{}, {"arrayItems": [1, 2]}], ids=["single", "array"])
def test_a_parent_aws_batch_refuses_ends_its_children_at_once_not_at_the_backstop(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, parent_body: dict[str, Any]
) -> None:
    # Given a parent held for quota behind a running job, and a child waiting for it
    limit_basic_us(stack, 1)
    running = _submit(stack)["jobId"]
    parent = _submit(stack, **parent_body)["jobId"]
    child = _submit(stack, dependsOn=_after(parent))["jobId"]

    # When the running job ends and AWS Batch refuses the parent the admission sends
    def refuse(submission: BatchSubmission) -> str:
        raise BatchRefused("AWS Batch refused to accept the job")

    monkeypatch.setattr(stack.batch[GeoZone.UNITED_STATES], "submit_job", refuse)
    finish(stack, running)

    # Then the dispatcher's ending settles the child in the same call: Terminated, free, saying why
    ended_parent = _job(stack, parent)
    assert ended_parent["status"] == "Terminated"
    if not parent_body:
        assert ended_parent["statusReason"] == REFUSED_REASON
    ended = _job(stack, child)
    assert (ended["status"], ended["statusReason"]) == (
        "Terminated",
        NEEDED.format(parent=parent, ended="Terminated", needed="Succeeded"),
    )
    assert Decimal(str(ended["creditsSpent"])) == Decimal("0") and _job_entries(stack, child) == []


def test_aborting_a_waiting_child_ends_it_and_its_parents_end_leaves_it(stack: Stack) -> None:
    parent = _submit(stack)["jobId"]
    child = _submit(stack, dependsOn=_after(parent))["jobId"]
    status, aborted = stack.api("POST", f"/jobs/{child}/abort")
    assert status == 202, aborted
    assert (aborted["status"], aborted["statusReason"]) == ("Terminated", "Aborted by user")
    finish(stack, parent)
    assert _sent(stack) == [parent]
    assert Decimal(_job(stack, child)["creditsSpent"]) == Decimal("0")
    assert _job_entries(stack, child) == []


def test_the_meter_backstop_releases_a_child_whose_release_was_lost(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from functions.logic import waits

    parent = _submit(stack)["jobId"]
    child = _submit(stack, dependsOn=_after(parent))["jobId"]
    # The parent's final event lands but its children are never settled (a crash after the write)
    monkeypatch.setattr(waits, "settle_dependents", lambda *args, **kwargs: 0)
    finish(stack, parent)
    monkeypatch.undo()
    assert child not in _sent(stack)
    stack.clock.advance(timedelta(minutes=11).total_seconds())
    stack.tick()
    assert _sent(stack).count(child) == 1


@pytest.mark.parametrize("children_before", [0, 1])
def test_a_parent_that_settles_as_a_child_marks_it_is_settled_again_and_finds_the_child(
    stack: Stack, monkeypatch: pytest.MonkeyPatch, children_before: int
) -> None:
    # Given a parent with no child or one already (the settlement then holds on its list's size)
    parent = _submit(stack)["jobId"]
    store = stack.services.store
    read = store.get_job
    child: list[str] = [_submit(stack, dependsOn=_after(parent))["jobId"] for _ in range(children_before)]
    started: list[bool] = []

    def read_then_submit(job_id: str) -> Any:
        # The event's read of the parent, then a child submitted (marking the parent) before the
        # settlement is written.
        job = read(job_id)
        if job_id == parent and not started:
            started.append(True)
            child.append(_submit(stack, dependsOn=_after(parent))["jobId"])
        return job

    monkeypatch.setattr(store, "get_job", read_then_submit)
    finish(stack, parent)
    monkeypatch.undo()
    # The settlement lost its condition to the mark, was computed again, and released every child.
    after = store.get_job(parent)
    assert after is not None and after.status.value == "Succeeded" and after.dependents == tuple(child)
    assert len(child) == children_before + 1
    assert [_sent(stack).count(c) for c in child] == [1] * len(child)


def test_children_waiting_lists_the_jobs_submitted_on_a_running_parent_until_it_ends(stack: Stack) -> None:
    # Given a parent and two children submitted on it
    parent = _submit(stack)["jobId"]
    children = [_submit(stack, dependsOn=_after(parent))["jobId"] for _ in range(2)]
    # Then the parent lists them while it runs, and none once it ended (they were released)
    assert _job(stack, parent)["childrenWaiting"] == children
    assert _job(stack, children[0])["childrenWaiting"] == []
    finish(stack, parent)
    assert _job(stack, parent)["childrenWaiting"] == []
    assert [_sent(stack).count(c) for c in children] == [1, 1]


def test_a_settlement_a_crash_cut_short_is_judged_again_when_its_event_comes_again(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from functions.domain.errors import DependencyFailed

    # Given a child whose parent's settlement was counted on it, then DynamoDB failed before its release
    parent = _submit(stack)["jobId"]
    child = _submit(stack, dependsOn=_after(parent))["jobId"]

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise DependencyFailed("DynamoDB is unavailable")

    monkeypatch.setattr(waits, "settle", failing)
    finish(stack, parent)
    monkeypatch.undo()
    stored = stack.services.store.get_job(child)
    assert stored is not None and stored.is_waiting and stored.settled_parents == {parent}
    # When the parent's final event is delivered again
    finish(stack, parent)
    # Then the child (already counted) is judged again and released, once
    assert _sent(stack).count(child) == 1
    finish(stack, parent)
    assert _sent(stack).count(child) == 1


def test_a_parent_that_the_most_jobs_wait_for_already_is_a_400_on_its_field(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from functions.adapters.dynamodb import dependencies as records

    # Given a parent two jobs wait for, the most allowed (lowered from 1,000 for the test)
    monkeypatch.setattr(records, "MAX_DEPENDENTS", 2)
    parent = _submit(stack)["jobId"]
    for _ in range(2):
        _submit(stack, dependsOn=_after(parent))
    # When a third is submitted on it
    status, refused = stack.api("POST", "/jobs", body={"code": "1", "dependsOn": _after(parent)})
    # Then it is refused on its field and nothing of it is written
    assert status == 400, refused
    assert refused["error"]["field"] == "dependsOn[0].jobId"
    assert len(_job(stack, parent)["childrenWaiting"]) == 2
    assert len(stack.api("GET", "/jobs")[1]["jobs"]) == 3


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (
            {"dependsOn": [{"jobId": "PARENT"}, {"jobId": "PARENT", "condition": "Completed"}]},
            "dependsOn[1].jobId",
        ),
        ({"dependsOn": [{"jobId": "PARENT", "condition": "Failed"}]}, "dependsOn[0].condition"),
        ({"dependsOn": [{"jobId": f"job-{i}"} for i in range(101)]}, "dependsOn"),
        ({"inputsFrom": [{"jobId": "PARENT"}]}, "inputsFrom[0].jobId"),
        (
            {"dependsOn": [{"jobId": "PARENT"}], "inputsFrom": [{"jobId": "PARENT", "files": ["../x"]}]},
            "inputsFrom[0].files[0]",
        ),
        (
            {"dependsOn": [{"jobId": "PARENT"}], "inputsFrom": [{"jobId": "PARENT", "files": ["/etc/x"]}]},
            "inputsFrom[0].files[0]",
        ),
        ({"dependsOn": [{"jobId": "PARENT"}], "geoZone": "EuropeanUnion"}, "dependsOn[0].jobId"),
        ({"dependsOn": [{"jobId": "PARENT:0"}]}, "dependsOn[0].jobId"),
    ],
)
def test_bad_dependencies_are_a_400_on_their_field_and_write_no_job(
    stack: Stack, body: dict[str, Any], field: str
) -> None:
    parent = _submit(stack)["jobId"]
    raw = repr(body).replace("PARENT", parent)
    status, refused = stack.api("POST", "/jobs", body={"code": "1", **eval(raw)})
    assert status == 400, refused
    assert refused["error"]["field"] == field
    assert [j["jobId"] for j in stack.api("GET", "/jobs")[1]["jobs"]] == [parent]


def test_a_parent_of_another_account_or_unknown_is_a_404(stack: Stack) -> None:
    stack.add_account("other", "100")
    theirs = stack.api("POST", "/jobs", body={"code": "1"}, account_id="other")
    assert theirs[0] == 202, theirs
    for parent in (theirs[1]["jobId"], "job-01JAAAAAAAAAAAAAAAAAAAAAAA"):
        status, refused = stack.api("POST", "/jobs", body={"code": "1", "dependsOn": _after(parent)})
        assert status == 404, refused
        assert refused["error"]["code"] == "NotFound"


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    order=st.permutations(["a", "b", "c"]),
    repeats=st.lists(st.sampled_from(["a", "b", "c"]), max_size=3),
)
def test_replayed_duplicated_and_reversed_events_release_every_child_once(
    stack: Stack, order: list[str], repeats: list[str]
) -> None:
    # Given three parents and three children on them: one on all three, one on a, one on c
    # needing Completed
    parents = {name: _submit(stack)["jobId"] for name in "abc"}
    children = [
        _submit(stack, dependsOn=_after(*parents.values()))["jobId"],
        _submit(stack, dependsOn=_after(parents["a"]))["jobId"],
        _submit(stack, dependsOn=_after(parents["c"], condition="Completed"))["jobId"],
    ]
    # When their final events arrive in any order, some delivered again (before or after the others)
    for name in [*repeats[:2], *order, *repeats[2:]]:
        finish(stack, parents[name])
    # Then every child was sent to AWS Batch exactly once
    sent = _sent(stack)
    assert [sent.count(child) for child in children] == [1, 1, 1]
    assert _basic_quota(stack)["queued"] == 0
    for child in children:  # their quota back for the next example
        finish(stack, child)


def _dynamodb_requests(call: Any) -> Counter[str]:
    with RequestRecorder(units=False) as recorder:
        call()
    return Counter(
        {k.split(":", 1)[1]: v for k, v in recorder.usage.requests.items() if k.startswith("dynamodb:")}
    )


def test_the_requests_an_edge_costs_at_the_childs_submit_and_at_its_parents_end(stack: Stack) -> None:
    # A parent nobody depends on ends as before: no Query of waiters (test_request_counts pins it)
    lone = _submit(stack, notifications="None")["jobId"]
    alone = _dynamodb_requests(lambda: finish(stack, lone))
    assert "Query" not in alone
    assert alone == Counter({"GetItem": 3, "TransactWriteItems": 1})
    parent = _submit(stack, notifications="None")["jobId"]
    # At the child's submit, the edge costs the parent's mark (1 UpdateItem, which lists the child on
    # the parent: no wait item) and the child's judgement (1 BatchGetItem, the child's own)
    counts = _dynamodb_requests(lambda: _submit(stack, dependsOn=_after(parent), notifications="None"))
    # (the rest: the account and quota read, the caller's read, the waiting job's transaction)
    assert counts == Counter({"UpdateItem": 1, "BatchGetItem": 2, "GetItem": 1, "TransactWriteItems": 1})
    # At the parent's end, over a lone parent's: the edge's 1 UpdateItem counting the parent on the
    # child (which answers the child: no Query of waiters, no GetItem of it, no wait item to delete);
    # the rest is the child's own judgement (1 BatchGetItem), release and admission into the quota
    # and its dispatch (what any held job costs).
    ended = _dynamodb_requests(lambda: finish(stack, parent))
    assert ended == Counter(
        {"GetItem": 4, "TransactWriteItems": 3, "Query": 3, "BatchGetItem": 2, "UpdateItem": 3}
    )


def _outputs(stack: Stack, job_id: str, objects: dict[str, bytes]) -> None:
    """What a parent's worker left in its zone's bucket."""
    blobs = stack.services.zones[GeoZone.UNITED_STATES].blobs
    for name, body in objects.items():
        blobs.put(f"outputs/{job_id}/{name}", body, "application/octet-stream")


def _inputs(stack: Stack, job_id: str) -> dict[str, bytes]:
    blobs = stack.services.zones[GeoZone.UNITED_STATES].blobs
    prefix = f"inputs/{job_id}/"
    return {o.key.removeprefix(prefix): blobs.get(o.key) or b"" for o in blobs.list(prefix)}


def test_a_childs_release_copies_its_parents_matching_outputs_under_its_own_inputs(stack: Stack) -> None:
    # Given a running parent and a child taking its *.csv outputs
    parent = _submit(stack, notifications="None")["jobId"]
    child = _submit(
        stack,
        dependsOn=_after(parent),
        inputsFrom=[{"jobId": parent, "files": ["*.csv"]}],
        notifications="None",
    )["jobId"]
    outcome = b'{"format": "remote-batch.outcome/1", "result": 4}'
    _outputs(stack, parent, {"files/a.csv": b"x,y", "files/notes.txt": b"no", "outcome.json": outcome})
    # Then nothing is copied while it waits, and its input document names the parent, no prefix
    assert set(_inputs(stack, child)) == {"input.json"}
    document = json.loads(_inputs(stack, child)["input.json"])
    assert document["inputsFrom"] == [{"jobId": parent, "files": ["*.csv"]}]

    # When the parent succeeds (batch_events releases the child)
    finish(stack, parent)

    # Then the matching output and the outcome were copied, with the manifest, before its dispatch
    assert _sent(stack).count(child) == 1
    copied = _inputs(stack, child)
    base = f"from/{parent}/"
    assert sorted(copied) == [
        f"{base}files/a.csv",
        f"{base}manifest.json",
        f"{base}outcome.json",
        "input.json",
    ]
    assert (copied[f"{base}files/a.csv"], copied[f"{base}outcome.json"]) == (b"x,y", outcome)
    assert json.loads(copied[f"{base}manifest.json"])["objects"] == ["files/a.csv", "outcome.json"]
    # And a replayed final event of the parent neither copies into a released child nor sends it again
    finish(stack, parent)
    assert _inputs(stack, child) == copied and _sent(stack).count(child) == 1


def test_a_child_over_the_copy_limit_ends_terminated_free_naming_the_limit(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from functions.domain import parent_inputs as layout
    from functions.logic import parent_inputs

    # Given a limit of 1 object a child copies, and a parent that leaves 2 matching outputs
    monkeypatch.setattr(layout, "MAX_INPUT_OBJECTS", 1)
    monkeypatch.setattr(parent_inputs, "MAX_INPUT_OBJECTS", 1)
    parent = _submit(stack, notifications="None")["jobId"]
    child = _submit(stack, dependsOn=_after(parent), inputsFrom=[{"jobId": parent}], notifications="None")
    _outputs(stack, parent, {"files/a": b"1", "files/b": b"2"})

    # When the parent succeeds
    finish(stack, parent)

    # Then the child ends Terminated, free, saying which limit, never sent, nothing copied
    ended = _job(stack, child["jobId"])
    assert (ended["status"], ended["statusReason"]) == (
        "Terminated",
        "The inputs from this job's dependencies are more than 1 objects (the most a job copies); "
        "narrow inputsFrom's files patterns",
    )
    assert Decimal(ended["creditsSpent"]) == Decimal("0") and _job_entries(stack, child["jobId"]) == []
    assert child["jobId"] not in _sent(stack)
    assert set(_inputs(stack, child["jobId"])) == {"input.json"}


def test_a_child_whose_parents_data_was_deleted_while_it_waited_ends_terminated_free_saying_so(
    stack: Stack,
) -> None:
    # Given a child taking the outputs of a parent, and waiting for a second one
    parent, other = (_submit(stack, notifications="None")["jobId"] for _ in range(2))
    child = _submit(
        stack, dependsOn=_after(parent, other), inputsFrom=[{"jobId": parent}], notifications="None"
    )["jobId"]
    _outputs(stack, parent, {"files/a": b"1"})
    # And the first parent succeeded, then its owner deleted its data
    finish(stack, parent)
    status, _ = stack.api("DELETE", f"/jobs/{parent}")
    assert status == 204

    # When the second parent succeeds
    finish(stack, other)

    # Then the child ends Terminated, free, saying the parent's outputs are gone, nothing copied
    ended = _job(stack, child)
    assert (ended["status"], ended["statusReason"]) == ("Terminated", data_gone_reason(parent))
    assert Decimal(ended["creditsSpent"]) == Decimal("0") and child not in _sent(stack)
    assert set(_inputs(stack, child)) == {"input.json"}


def test_the_meter_backstop_copies_the_inputs_of_a_child_whose_release_was_lost(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    from functions.logic import waits

    # Given a child taking a parent's outputs, whose release at the parent's end was lost
    parent = _submit(stack, notifications="None")["jobId"]
    child = _submit(stack, dependsOn=_after(parent), inputsFrom=[{"jobId": parent}], notifications="None")
    _outputs(stack, parent, {"files/model.pt": b"w"})
    monkeypatch.setattr(waits, "settle_dependents", lambda *args, **kwargs: 0)
    finish(stack, parent)
    monkeypatch.undo()
    assert set(_inputs(stack, child["jobId"])) == {"input.json"}

    # When the meter's backstop runs a while later
    stack.clock.advance(timedelta(minutes=11).total_seconds())
    stack.tick()

    # Then it copied the outputs and released the child, once
    assert _inputs(stack, child["jobId"])[f"from/{parent}/files/model.pt"] == b"w"
    assert _sent(stack).count(child["jobId"]) == 1
