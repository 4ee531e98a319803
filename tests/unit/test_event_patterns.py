"""The Batch events the rule (and the local bus) deliver: only those that can change a job."""

from __future__ import annotations

import json
from typing import Any

import pytest
from moto.events.models import EventPattern

from functions.adapters.event_patterns import as_event_ruler_sees, job_changing_detail_pattern
from remote_batch_local.bus import EventBus, matches_rule
from tests.events import array_child_lifecycle, batch_event, job_lifecycle

CREATED, STARTED, STOPPED = 1_764_000_000_000, 1_764_000_005_000, 1_764_000_065_000


def _statuses(envelopes: list[dict[str, Any]]) -> list[str]:
    return [e["detail"]["status"] for e in envelopes if matches_rule(e)]


def test_a_first_attempts_pending_and_runnable_are_left_out() -> None:
    events = job_lifecycle("job-1", "b-1", created_at=CREATED, started_at=STARTED, stopped_at=STOPPED)

    assert [e["detail"]["status"] for e in events] == [
        "PENDING",
        "RUNNABLE",
        "STARTING",
        "RUNNING",
        "SUCCEEDED",
    ]
    assert _statuses(events) == ["STARTING", "RUNNING", "SUCCEEDED"]


def test_a_runnable_that_says_why_the_job_waits_is_delivered() -> None:
    waiting = batch_event("job-1", "b-1", "RUNNABLE", status_reason="Waiting for 2 vCPUs")

    assert matches_rule(waiting)


def test_a_retrys_runnable_is_delivered() -> None:
    # Given an attempt lost to the host, AWS Batch retries: RUNNABLE with the first attempt listed
    lost = {"startedAt": STARTED, "stoppedAt": STOPPED, "statusReason": "Host EC2 terminated."}
    retry = batch_event("job-1", "b-1", "RUNNABLE", attempts=[lost])

    assert "statusReason" not in retry["detail"]
    assert matches_rule(retry)


def test_every_event_of_an_array_and_its_children_is_delivered() -> None:
    parent = batch_event("job-a", "span-1", "PENDING", array_size=3, status_summary={"PENDING": 3})
    children = array_child_lifecycle(
        "job-a", "span-1", 2, created_at=CREATED, started_at=STARTED, stopped_at=STOPPED
    )

    assert matches_rule(parent)
    assert _statuses(children) == ["PENDING", "RUNNABLE", "STARTING", "RUNNING", "SUCCEEDED"]


@pytest.mark.parametrize("status", ["STARTING", "RUNNING", "SUCCEEDED", "FAILED"])
def test_other_statuses_are_delivered(status: str) -> None:
    assert matches_rule(batch_event("job-1", "b-1", status))


def test_arrays_of_objects_are_matched_by_any_element_as_eventbridge_does() -> None:
    event = {"attempts": [{"container": {"exitCode": 1}}, {"startedAt": 5}], "empty": [], "tags": ["a"]}

    assert as_event_ruler_sees(event) == {
        "attempts": {"container": {"exitCode": [1]}, "startedAt": [5]},
        "empty": [],
        "tags": ["a"],
    }
    pattern = EventPattern.load(json.dumps({"attempts": {"startedAt": [{"exists": True}]}}))
    assert pattern.matches_event(as_event_ruler_sees(event))
    assert not pattern.matches_event(as_event_ruler_sees({"attempts": []}))


def test_the_pattern_is_one_eventbridge_accepts() -> None:
    # moto validates a rule's pattern as EventBridge does (PutRule); $or needs two or more branches.
    detail = job_changing_detail_pattern()

    assert len(detail["$or"]) >= 2
    EventPattern.load(json.dumps({"detail": detail}))


def test_the_bus_records_a_filtered_event_but_does_not_deliver_it(tmp_path) -> None:
    delivered: list[str] = []
    bus = EventBus(
        lambda e: delivered.append(e["detail"]["status"]), tmp_path / "events.jsonl", rule=matches_rule
    )
    events = job_lifecycle("job-1", "b-1", created_at=CREATED, started_at=STARTED, stopped_at=STOPPED)
    bus.start()
    try:
        for envelope in events:
            bus.publish(envelope)
        assert bus.wait_idle(10)
    finally:
        bus.stop()

    assert delivered == ["STARTING", "RUNNING", "SUCCEEDED"]
    assert [e["detail"]["status"] for e in bus.emitted_for("job-1")] == [
        "PENDING",
        "RUNNABLE",
        "STARTING",
        "RUNNING",
        "SUCCEEDED",
    ]
