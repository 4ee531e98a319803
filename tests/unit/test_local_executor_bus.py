"""The local stack's in-process EventBridge → Lambda bus."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from remote_batch_local.bus import EventBus, worker_of
from remote_batch_local.events import batch_job_state_change


def _envelope(job_name: str, status: str = "RUNNABLE") -> dict[str, Any]:
    return batch_job_state_change(
        region="us-east-1",
        account="000000000000",
        job_id="4c7599ae-0a82-49aa-ba5a-4727fcce14a8",
        job_name=job_name,
        job_queue="q",
        job_definition="d",
        status=status,
        created_at_ms=1,
        vcpus=1,
        memory_mib=512,
    )


class Collector:
    """A fake Lambda target: records what it is given; fails the first ``fail`` calls."""

    def __init__(self, fail: int = 0) -> None:
        self.delivered: list[dict[str, Any]] = []
        self.calls = 0
        self.fail = fail
        self.threads: set[str] = set()

    def __call__(self, envelope: dict[str, Any]) -> None:
        self.calls += 1
        self.threads.add(threading.current_thread().name)
        if self.calls <= self.fail:
            raise RuntimeError("handler failed")
        self.delivered.append(envelope)


@pytest.fixture
def make_bus(tmp_path) -> Iterator[Callable[..., EventBus]]:
    buses: list[EventBus] = []

    def make(deliver, **kwargs) -> EventBus:
        bus = EventBus(deliver, tmp_path / "events.jsonl", retry_delay=0.01, **kwargs)
        bus.start()
        buses.append(bus)
        return bus

    yield make
    for bus in buses:
        bus.stop(drain=False, timeout=2)


def test_delivers_in_order_on_one_thread(make_bus):
    collector = Collector()
    bus = make_bus(collector)
    envelopes = [_envelope("job-a", status) for status in ("PENDING", "RUNNABLE", "STARTING", "RUNNING")]

    for envelope in envelopes:
        bus.publish(envelope)

    assert bus.wait_idle(5)
    assert [e["id"] for e in collector.delivered] == [e["id"] for e in envelopes]
    assert collector.delivered == envelopes
    assert len(collector.threads) == 1


def test_duplicate_mode_delivers_every_event_twice_in_a_row(make_bus):
    collector = Collector()
    bus = make_bus(collector, duplicate=True)
    first, second = _envelope("job-a", "PENDING"), _envelope("job-a", "RUNNABLE")

    bus.publish(first)
    bus.publish(second)

    assert bus.wait_idle(5)
    assert [e["id"] for e in collector.delivered] == [first["id"], first["id"], second["id"], second["id"]]
    assert len(bus.emitted_for("job-a")) == 2


def test_failing_delivery_is_retried_then_succeeds(make_bus):
    collector = Collector(fail=2)
    bus = make_bus(collector, max_attempts=3)

    bus.publish(_envelope("job-a"))

    assert bus.wait_idle(5)
    assert collector.calls == 3
    assert len(collector.delivered) == 1
    assert bus.dead_letters == []


def test_exhausted_delivery_goes_to_dead_letters_and_the_bus_goes_on(make_bus):
    collector = Collector(fail=3)
    bus = make_bus(collector, max_attempts=3)
    lost, kept = _envelope("job-a", "PENDING"), _envelope("job-a", "RUNNABLE")

    bus.publish(lost)
    bus.publish(kept)

    assert bus.wait_idle(5)
    assert [e["id"] for e in bus.dead_letters] == [lost["id"]]
    assert [e["id"] for e in collector.delivered] == [kept["id"]]


def test_emitted_for_covers_array_children_in_emission_order(make_bus):
    bus = make_bus(Collector())
    parent, child0, other, child1 = (
        _envelope("job-a"),
        _envelope("job-a:0"),
        _envelope("job-ab"),
        _envelope("job-a:1"),
    )

    for envelope in (parent, child0, other, child1):
        bus.publish(envelope)

    assert [e["id"] for e in bus.emitted_for("job-a")] == [parent["id"], child0["id"], child1["id"]]
    assert [e["id"] for e in bus.emitted_for("job-ab")] == [other["id"]]
    assert bus.emitted_for("nobody") == []


def test_journal_survives_a_restart(tmp_path):
    journal = tmp_path / "state" / "events.jsonl"
    first = EventBus(Collector(), journal)
    envelope = _envelope("job-a")
    first.publish(envelope)
    first.stop(drain=False, timeout=1)

    # Given a new bus on the same journal (a restarted stack), with a stray torn line at the end
    with journal.open("a") as handle:
        handle.write('{"torn":\n')
    collector = Collector()
    second = EventBus(collector, journal)
    second.start()

    assert second.emitted_for("job-a") == [envelope]
    assert second.wait_idle(2)
    assert collector.delivered == []  # recorded events are not redelivered
    second.stop(timeout=1)
    assert json.loads(journal.read_text().splitlines()[0]) == envelope


def test_replay_delivers_without_recording(make_bus):
    collector = Collector()
    bus = make_bus(collector)
    envelope = _envelope("job-a", "SUCCEEDED")

    bus.replay([envelope, envelope])

    assert bus.wait_idle(5)
    assert collector.delivered == [envelope, envelope]
    assert bus.emitted_for("job-a") == []


def test_events_published_before_start_are_delivered_at_start(tmp_path):
    collector = Collector()
    bus = EventBus(collector, tmp_path / "events.jsonl")
    envelope = _envelope("job-a")
    bus.publish(envelope)

    bus.start()

    assert bus.wait_idle(5)
    assert collector.delivered == [envelope]
    bus.stop()


def test_stop_without_drain_drops_queued_events_to_dead_letters(tmp_path):
    entered, gate = threading.Event(), threading.Event()
    delivered: list[dict[str, Any]] = []

    def slow(envelope: dict[str, Any]) -> None:
        entered.set()
        gate.wait(5)
        delivered.append(envelope)

    bus = EventBus(slow, tmp_path / "events.jsonl")
    bus.start()
    first, second = _envelope("job-a", "PENDING"), _envelope("job-a", "RUNNABLE")
    bus.publish(first)
    bus.publish(second)
    assert entered.wait(5)

    stopper = threading.Thread(target=bus.stop, kwargs={"drain": False, "timeout": 5})
    stopper.start()
    gate.set()
    stopper.join(5)

    assert [e["id"] for e in delivered] == [first["id"]]  # the delivery in flight completes
    assert [e["id"] for e in bus.dead_letters] == [second["id"]]


def test_emitted_for_gathers_every_span_of_an_array_by_the_service_job_id_in_the_environment(make_bus):
    bus = make_bus(Collector())
    spans = [
        batch_job_state_change(
            region="us-east-1",
            account="000000000000",
            job_id=batch_job_id,
            job_name=job_name,
            job_queue="q",
            job_definition="d",
            status="RUNNABLE",
            created_at_ms=1,
            vcpus=1,
            memory_mib=512,
            environment={"REMOTE_BATCH_JOB_ID": "job-a"},
        )
        for batch_job_id, job_name in (
            ("span-0:3", "job-a"),
            ("span-1:0", "job-a_100"),
            ("span-2", "job-a_200"),
        )
    ]

    for envelope in spans:
        bus.publish(envelope)

    assert [e["id"] for e in bus.emitted_for("job-a")] == [e["id"] for e in spans]
    assert bus.emitted_for("job-a_100") == []


def test_events_of_different_jobs_are_delivered_at_the_same_time(make_bus) -> None:
    # Given two jobs whose events go to different delivery workers, and a target that returns only
    # once both events are in it at once (a barrier: it breaks if the bus delivers one at a time)
    first = "job-a"
    second = next(
        f"job-{n}"
        for n in range(100)
        if worker_of(_envelope(f"job-{n}"), 8) != worker_of(_envelope(first), 8)
    )
    barrier = threading.Barrier(2, timeout=30)
    met: list[str] = []

    def deliver(envelope: dict[str, Any]) -> None:
        barrier.wait()
        met.append(envelope["detail"]["jobName"])

    bus = make_bus(deliver, max_attempts=1, workers=8)

    # When one event of each is published
    bus.publish(_envelope(first))
    bus.publish(_envelope(second))

    # Then both were in the target together: delivered, none dead-lettered
    assert bus.wait_idle(30)
    assert sorted(met) == sorted([first, second])
    assert bus.dead_letters == []


def test_each_jobs_events_keep_their_order_among_many_concurrent_jobs(make_bus) -> None:
    # Given a target that records what it is given, from several workers at once
    delivered: list[tuple[str, str]] = []
    lock = threading.Lock()
    threads: set[str] = set()

    def deliver(envelope: dict[str, Any]) -> None:
        with lock:
            threads.add(threading.current_thread().name)
            delivered.append((envelope["detail"]["jobName"], envelope["detail"]["status"]))

    bus = make_bus(deliver, workers=8)
    statuses = ("PENDING", "RUNNABLE", "STARTING", "RUNNING", "SUCCEEDED")

    # When 60 jobs publish their five events interleaved (each job's in its order)
    for status in statuses:
        for job in range(60):
            bus.publish(_envelope(f"job-{job}", status))

    # Then every job's events reached the target in the order they were published, by more than one
    # worker
    assert bus.wait_idle(60)
    assert len(delivered) == 300
    for job in range(60):
        assert [s for name, s in delivered if name == f"job-{job}"] == list(statuses)
    assert len(threads) > 1


def test_an_arrays_children_go_to_the_worker_of_the_array() -> None:
    # The events of an array's children name the array's job id in their environment
    parent = "7d6f3c2e-8a5b-4c1d-9e0f-1a2b3c4d5e6f"
    child = _envelope(f"{parent}:3")
    assert worker_of(child, 8) == worker_of(_envelope(parent), 8)
    assert worker_of({"detail": "not a job"}, 8) == 0
