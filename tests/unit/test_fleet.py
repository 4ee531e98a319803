"""Fleet control's rules without AWS: class availability, the order of the two writes and their
convergence on retry, the local stack's job queues and compute environments, the per-account rate
limit (issue 15 item 3)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError
from hypothesis import given
from hypothesis import strategies as st

from functions.bootstrap import inline_dispatch
from functions.domain.errors import BatchRefused, ConditionFailed, DependencyFailed, ValidationFailed
from functions.domain.fleet import (
    AuditEntry,
    ClassAvailability,
    ClassUnavailable,
    check_geo_zone,
    check_machine_class,
    disabled,
    ensure_available,
    machine_family,
    request_digest,
)
from functions.domain.machine_classes import MACHINE_CLASSES, GeoZone
from functions.domain.rate_limits import TokenBucket, retry_after_header
from functions.logic import fleet
from functions.ports import ClassLoad, ComputeEnvironmentInfo, JobQueueInfo, Services
from remote_batch_local.executor.fleet import LocalFleet
from remote_batch_local.rate_limit import AccountRateLimiter

NOW = datetime(2026, 11, 29, 17, 20, tzinfo=UTC)
US = GeoZone.UNITED_STATES


# -- domain --------------------------------------------------------------------------------------------
def test_a_disabled_class_is_refused_with_the_operators_reason() -> None:
    state = disabled(ClassAvailability("Basic2x8", GeoZone.EUROPEAN_UNION), "repairs until 18:00", "op", NOW)

    with pytest.raises(ClassUnavailable) as raised:
        ensure_available(state)

    assert raised.value.status == 503 and raised.value.shown_to_client
    assert raised.value.message == "Basic2x8 is not taking new jobs in EuropeanUnion: repairs until 18:00"
    assert raised.value.field == "machineClass"
    ensure_available(None)
    ensure_available(ClassAvailability("Basic2x8", US))


@pytest.mark.parametrize(
    ("name", "family"),
    [("Basic1x8", "Basic"), ("Memory192x1536", "Memory"), ("Compute64x128", "Compute"), ("GPU4xL4", "GPU")],
)
def test_machine_families(name: str, family: str) -> None:
    assert machine_family(name) == family


def test_paths_name_a_class_and_a_deployed_zone() -> None:
    assert check_machine_class("GPU1xL40S") == "GPU1xL40S"
    with pytest.raises(ValidationFailed) as bad_class:
        check_machine_class("Basic1x9")
    assert bad_class.value.field == "machineClass"
    assert check_geo_zone("UnitedStates", [US]) == US
    for name in ("Automatic", "EuropeanUnion", "unitedstates"):
        with pytest.raises(ValidationFailed) as bad_zone:
            check_geo_zone(name, [US])
        assert bad_zone.value.field == "geoZone"


def test_request_digests_are_stable_and_tell_requests_apart() -> None:
    assert request_digest("admin", "alice", "k1") == request_digest("admin", "alice", "k1")
    assert request_digest("admin", "alice", "k1") != request_digest("admin", "alice1", "k")
    assert len(request_digest("a")) == 32


# -- the logic, on fakes: write order and convergence ---------------------------------------------------
@dataclass
class FakeFleet:
    """Batch with one queue per class on one environment; ``fail`` refuses the next state change."""

    states: dict[str, str] = field(default_factory=dict)
    max_vcpus: int = 64
    fail: bool = False
    calls: list[tuple[str, Any]] = field(default_factory=list)

    def describe_job_queues(self, job_queues: Sequence[str]) -> list[JobQueueInfo]:
        return [
            JobQueueInfo(q, f"arn:{q}", self.states.get(q, "ENABLED"), "VALID", ("arn:ce",))
            for q in job_queues
        ]

    def set_job_queue_state(self, job_queue: str, state: str) -> None:
        self.calls.append(("state", state))
        if self.fail:
            self.fail = False
            raise DependencyFailed("AWS Batch is busy")
        self.states[job_queue] = state

    def describe_compute_environments(self, environments: Sequence[str]) -> list[ComputeEnvironmentInfo]:
        return [ComputeEnvironmentInfo("ce", "arn:ce", "ENABLED", "VALID", self.max_vcpus)]

    def set_max_vcpus(self, environment: str, max_vcpus: int) -> None:
        self.calls.append(("max", max_vcpus))
        self.max_vcpus = max_vcpus


@dataclass
class FakeOperations:
    stored: dict[tuple[str, GeoZone], ClassAvailability] = field(default_factory=dict)
    audit: list[AuditEntry] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)

    def class_states(self, max_age_seconds: float) -> Mapping[tuple[str, GeoZone], ClassAvailability]:
        return dict(self.stored)

    def get_class_state(self, machine_class: str, geo_zone: GeoZone) -> ClassAvailability:
        return self.stored.get((machine_class, geo_zone), ClassAvailability(machine_class, geo_zone))

    def save_class_state(self, state: ClassAvailability, audit: AuditEntry) -> None:
        current = self.get_class_state(state.machine_class, state.geo_zone)
        if current.version != state.version - 1:
            raise ConditionFailed("version")
        self.calls.append("save")
        self.stored[(state.machine_class, state.geo_zone)] = state
        self.audit.append(audit)

    def record(self, audit: AuditEntry) -> None:
        self.audit.append(audit)

    def count_unfinished(self) -> Mapping[tuple[str, GeoZone], ClassLoad]:
        return {("Basic2x8", US): ClassLoad(queued=2, running=1)}


class QueuedJobs:
    """The job store's part that enabling a class reads: the queued jobs of a class and zone (none
    here); it records what was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, GeoZone]] = []

    def list_waiting_job_ids(self, machine_class: str, geo_zone: GeoZone) -> tuple[list[str], list[str]]:
        self.asked.append((machine_class, geo_zone))
        return [], []


def _services(batch: FakeFleet, operations: FakeOperations) -> Services:
    from functions.ports import BatchRoute, ZoneServices

    zone = ZoneServices(
        blobs=None,  # type: ignore[arg-type]
        batch=None,  # type: ignore[arg-type]
        logs=None,  # type: ignore[arg-type]
        routes={name: BatchRoute(job_queue=f"q-{name}", job_definition="d") for name in MACHINE_CLASSES},
        bucket="b",
        region="us-east-1",
        fleet=batch,
    )
    return Services(
        store=QueuedJobs(),  # type: ignore[arg-type]
        notifier=None,  # type: ignore[arg-type]
        subscriptions=None,  # type: ignore[arg-type]
        zones={US: zone},
        clock=lambda: NOW,
        events=None,  # type: ignore[arg-type]
        dispatch=inline_dispatch(),
        operations=operations,  # type: ignore[arg-type]
    )


def _set(services: Services, *, disable: bool, reason: str | None = "repairs") -> fleet.MachineClassStatus:
    return fleet.set_class_availability(
        services, actor="op", machine_class="Basic2x8", zone=US, disable=disable, reason=reason, now=NOW
    )


def test_disable_stores_the_state_before_batch_and_a_retry_finishes_what_a_failure_left() -> None:
    batch, operations = FakeFleet(fail=True), FakeOperations()
    services = _services(batch, operations)

    # The Batch call fails after the state is stored: submits are refused already.
    with pytest.raises(DependencyFailed):
        _set(services, disable=True)
    with pytest.raises(ClassUnavailable):
        fleet.ensure_class_available(services, "Basic2x8", US)
    assert batch.states == {}

    # The retry changes nothing stored, records nothing more, and sets the queue.
    status = _set(services, disable=True)
    assert batch.states == {"q-Basic2x8": "DISABLED"}
    assert len(operations.audit) == 1 and operations.audit[0].before == {"state": "ENABLED", "reason": None}
    assert (status.queue_state, status.availability.reason, status.load) == (
        "DISABLED",
        "repairs",
        ClassLoad(2, 1),
    )
    assert status.shared_with == tuple(sorted(set(MACHINE_CLASSES) - {"Basic2x8"}))


def test_enable_sets_batch_before_the_state_so_no_submit_meets_a_disabled_queue() -> None:
    batch, operations = FakeFleet(), FakeOperations()
    services = _services(batch, operations)
    _set(services, disable=True)
    batch.fail = True

    with pytest.raises(DependencyFailed):
        _set(services, disable=False)
    with pytest.raises(ClassUnavailable):  # still refused: Batch's queue is still DISABLED
        fleet.ensure_class_available(services, "Basic2x8", US)

    _set(services, disable=False)
    fleet.ensure_class_available(services, "Basic2x8", US)
    assert [e.action.value for e in operations.audit] == ["DisableMachineClass", "EnableMachineClass"]
    # The jobs parked while it was out of service are looked for once, when it comes back.
    assert isinstance(services.store, QueuedJobs) and services.store.asked == [("Basic2x8", US)]
    # Enabling what is enabled records nothing and resumes nothing.
    _set(services, disable=False)
    assert len(operations.audit) == 2
    assert services.store.asked == [("Basic2x8", US)]


def test_a_new_reason_for_a_disabled_class_is_a_change_the_same_one_is_not() -> None:
    batch, operations = FakeFleet(), FakeOperations()
    services = _services(batch, operations)
    _set(services, disable=True, reason="a")
    _set(services, disable=True, reason="a")
    _set(services, disable=True, reason="b")
    assert [(e.before["reason"], e.after["reason"]) for e in operations.audit] == [(None, "a"), ("a", "b")]


def test_capacity_updates_only_what_changes_and_audits_before_and_after() -> None:
    batch, operations = FakeFleet(), FakeOperations()
    services = _services(batch, operations)

    fleet.set_capacity(services, actor="op", machine_class="Basic2x8", zone=US, max_vcpus=16, now=NOW)
    fleet.set_capacity(services, actor="op", machine_class="Basic2x8", zone=US, max_vcpus=16, now=NOW)

    assert batch.calls == [("max", 16)]
    assert [(e.before, e.after) for e in operations.audit] == [
        ({"maxVcpus": {"ce": 64}}, {"maxVcpus": {"ce": 16}})
    ]
    with pytest.raises(ValidationFailed) as raised:
        fleet.set_capacity(
            services, actor="op", machine_class="Basic2x8", zone=US, max_vcpus=100_001, now=NOW
        )
    assert raised.value.field == "maxVcpus"


# -- the local stack's queues and environments ------------------------------------------------------------
def _local() -> LocalFleet:
    local = LocalFleet("000000000000", host_vcpus=8)
    local.add_zone("eu-central-1", {name: f"remote-batch-local-{name}" for name in MACHINE_CLASSES})
    return local


def test_local_queues_sit_on_their_familys_environment_and_describe_like_batch() -> None:
    local = _local()
    (queue,) = local.describe_job_queues("eu-central-1", ["remote-batch-local-Basic2x8"])
    assert queue.arn == "arn:aws:batch:eu-central-1:000000000000:job-queue/remote-batch-local-Basic2x8"
    (environment,) = local.describe_compute_environments("eu-central-1", list(queue.compute_environments))
    assert (environment.name, environment.max_vcpus) == ("remote-batch-local-Basic", 8)
    assert local.describe_job_queues("eu-central-1", ["nope"]) == []
    assert local.describe_job_queues("us-east-1", ["remote-batch-local-Basic2x8"]) == []


def test_a_disabled_local_queue_refuses_submit_job_with_a_client_exception() -> None:
    local = _local()
    local.check_submit("eu-central-1", "remote-batch-local-Basic2x8", "acct1")
    local.set_job_queue_state("eu-central-1", "remote-batch-local-Basic2x8", "DISABLED")

    with pytest.raises(BatchRefused) as raised:
        local.check_submit("eu-central-1", "remote-batch-local-Basic2x8", "acct1")

    cause = raised.value.__cause__
    assert isinstance(cause, ClientError) and cause.response["Error"]["Code"] == "ClientException"
    # other queues still take jobs
    local.check_submit("eu-central-1", "remote-batch-local-Basic1x8", "acct1")
    with pytest.raises(BatchRefused):
        local.check_submit("eu-central-1", "no-such-queue", "acct1")
    # the fleet's queues schedule by fair share: a job without a share identifier is refused
    with pytest.raises(BatchRefused, match="shareIdentifier is required"):
        local.check_submit("eu-central-1", "remote-batch-local-Basic1x8")
    with pytest.raises(DependencyFailed):
        local.set_job_queue_state("eu-central-1", "remote-batch-local-Basic2x8", "PAUSED")


def test_local_max_vcpus_bounds_what_runs_at_once_on_the_environment() -> None:
    local = _local()
    (queue,) = local.describe_job_queues("eu-central-1", ["remote-batch-local-Basic4x16"])
    environment = queue.compute_environments[0]
    local.set_max_vcpus("eu-central-1", environment, 4)

    assert local.has_room(environment, 4)
    local.claim(environment, 4)
    assert not local.has_room(environment, 1)
    local.release(environment, 4)
    assert local.in_use(environment) == 0 and local.has_room(environment, 4)
    assert LocalFleet("0", 2).has_room(None, 100)  # no queues configured: no limit


# -- the per-account rate limit ---------------------------------------------------------------------------
def test_a_token_bucket_lets_the_burst_through_then_the_rate() -> None:
    bucket = TokenBucket(rate=2, capacity=3)
    assert [bucket.take(0.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(0.0) == pytest.approx(0.5)
    assert bucket.take(0.5) == 0.0
    assert bucket.take(0.5) == pytest.approx(0.5)
    assert retry_after_header(0.5) == "1" and retry_after_header(1.01) == "2"


@given(st.lists(st.floats(min_value=0, max_value=0.3), min_size=1, max_size=200))
def test_a_token_bucket_never_admits_more_than_burst_plus_rate_times_time(gaps: list[float]) -> None:
    bucket = TokenBucket(rate=5, capacity=4)
    now, admitted = 0.0, 0
    for gap in gaps:
        now += gap
        admitted += bucket.take(now) == 0.0
    assert admitted <= 4 + 5 * now + 1e-9


def test_the_local_limiter_counts_each_account_apart_and_can_be_off() -> None:
    clock = [0.0]
    limiter = AccountRateLimiter(rate=1, burst=1, monotonic=lambda: clock[0])
    assert limiter.take("a") == 0.0
    assert limiter.take("a") == pytest.approx(1.0)
    assert limiter.take("b") == 0.0
    clock[0] = 1.0
    assert limiter.take("a") == 0.0
    off = AccountRateLimiter(rate=0, burst=1)
    assert all(off.take("a") == 0.0 for _ in range(1000))
