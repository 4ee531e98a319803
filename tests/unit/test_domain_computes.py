"""Dedicated compute's pure rules: the lifecycle state machine (hypothesis: no illegal transition
from any order of requests and events, duplicated start/stop are no-ops), exact settlements,
schedules, the quota it holds, names."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime, time, timedelta
from decimal import ROUND_HALF_UP, Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from functions.domain.computes import (
    BILLED,
    LEGAL_EDGES,
    TRANSIENT,
    Compute,
    ComputeEvent,
    ComputeRequest,
    ComputeStatus,
    DailySchedule,
    Schedules,
    apply_event,
    apply_request,
    check_schedules,
    compute_cost,
    compute_entry_id,
    ends_jobs,
    holds_reservation,
    idle_expired,
    jobs_end_reason,
    new_compute,
    released_reservation,
    reservation_of,
    resource_name,
    scheduled_request,
    settlement,
    stray_job_reason,
)
from functions.domain.errors import Conflict, ValidationFailed
from functions.domain.machine_classes import MACHINE_CLASSES, GeoZone

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def _compute(**changes: object) -> Compute:
    compute = new_compute("acct", "lab", machine="Basic1x8", zone=GeoZone.UNITED_STATES, count=1, now=T0)

    return replace(compute, **changes)  # type: ignore[arg-type]


class ComputeLifecycle(RuleBasedStateMachine):
    """Any interleaving of user requests and AWS Batch poll findings."""

    def __init__(self) -> None:
        super().__init__()
        self.compute: Compute | None = _compute()
        self.now = T0
        self.deleted = False

    def _apply(self, step_of: object, event: ComputeEvent | None = None) -> None:
        assert self.compute is not None
        before = self.compute
        step = step_of(before)  # type: ignore[operator]
        after = step.after
        if after is None:
            assert before.status == ComputeStatus.DELETING
            self.deleted = True
        elif after.status != before.status:
            assert (before.status, after.status) in LEGAL_EDGES
        # Settled exactly when leaving a billed status (Starting or Running) by a request, or Running
        # by a failure: a failure while Starting is not charged. A restart's capacity down bills anew.
        left_billed = before.status in BILLED and (after is None or after.status not in BILLED)
        if event == ComputeEvent.BROKEN and before.status == ComputeStatus.STARTING:
            left_billed = False
        assert (step.settle is not None) == left_billed
        if after is not None and after.status in BILLED and before.status not in BILLED:
            assert after.running_since == after.settled_until == self.now
        self.compute = after

    @rule(request=st.sampled_from(list(ComputeRequest)), seconds=st.integers(0, 5000))
    def request(self, request: ComputeRequest, seconds: int) -> None:
        if self.compute is None:
            return
        self.now += timedelta(seconds=seconds)
        try:
            self._apply(lambda c: apply_request(c, request, self.now))
        except Conflict as exc:
            refusal = exc.message
        else:
            return
        assert self.compute is not None and self.compute.status.value in refusal

    @rule(event=st.sampled_from(list(ComputeEvent)), seconds=st.integers(0, 5000))
    def event(self, event: ComputeEvent, seconds: int) -> None:
        if self.compute is None:
            return
        self.now += timedelta(seconds=seconds)
        self._apply(lambda c: apply_event(c, event, self.now, "CLIENT_ERROR"), event)

    @rule(request=st.sampled_from([ComputeRequest.START, ComputeRequest.STOP]))
    def duplicated(self, request: ComputeRequest) -> None:
        """A start (or stop) sent twice: the second changes nothing."""
        if self.compute is None:
            return
        try:
            first = apply_request(self.compute, request, self.now)
        except Conflict:
            return
        if first.after is not None:
            second = apply_request(first.after, request, self.now)
            assert not second.changed and second.settle is None
            self.compute = first.after

    @invariant()
    def consistent(self) -> None:
        compute = self.compute
        if compute is None:
            return
        billed = compute.status in BILLED
        assert (compute.running_since is not None) == billed
        assert (compute.settled_until is not None) == billed
        assert not compute.start_pending or compute.status in (ComputeStatus.STOPPING, ComputeStatus.CREATING)
        if compute.status == ComputeStatus.FAILED:
            assert compute.status_reason


TestComputeLifecycle = ComputeLifecycle.TestCase
TestComputeLifecycle.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)


S = ComputeStatus
R = ComputeRequest
NOOP = "no-op"
# Every request a user can send while the compute passes through a transient status (and, for the
# waiting ones, with a start already pending): the status it leads to and whether a start then
# waits, "no-op", or the Conflict's hint. The table of ``functions.domain.computes``'s docstring.
WHILE_TRANSIENT = [
    (S.CREATING, False, R.START, (S.CREATING, True)),
    (S.CREATING, True, R.START, NOOP),
    (S.CREATING, False, R.STOP, NOOP),
    (S.CREATING, True, R.STOP, (S.CREATING, False)),
    (S.CREATING, False, R.RESTART, "start it instead"),
    (S.CREATING, True, R.DELETE, (S.DELETING, False)),
    (S.STARTING, False, R.START, NOOP),
    (S.STARTING, False, R.STOP, (S.STOPPING, False)),
    (S.STARTING, False, R.RESTART, (S.STOPPING, True)),
    (S.STARTING, False, R.DELETE, (S.DELETING, False)),
    (S.STOPPING, False, R.START, (S.STOPPING, True)),
    (S.STOPPING, True, R.START, NOOP),
    (S.STOPPING, False, R.STOP, NOOP),
    (S.STOPPING, True, R.STOP, (S.STOPPING, False)),
    (S.STOPPING, False, R.RESTART, (S.STOPPING, True)),
    (S.STOPPING, True, R.RESTART, NOOP),
    (S.STOPPING, True, R.DELETE, (S.DELETING, False)),
    (S.DELETING, False, R.START, "it is being deleted"),
    (S.DELETING, False, R.STOP, "it is being deleted"),
    (S.DELETING, False, R.RESTART, "it is being deleted"),
    (S.DELETING, False, R.DELETE, NOOP),
]


def test_the_table_covers_every_request_in_every_transient_status() -> None:
    assert {(status, request) for status, _, request, _ in WHILE_TRANSIENT} == {
        (status, request) for status in TRANSIENT for request in ComputeRequest
    }


@pytest.mark.parametrize(
    ("status", "pending", "asked", "expected"),
    WHILE_TRANSIENT,
    ids=[f"{s.value}{'+pending' if p else ''}-{r.value}" for s, p, r, _ in WHILE_TRANSIENT],
)
def test_every_request_during_a_transient_status(status, pending, asked, expected) -> None:
    billed = status in BILLED
    compute = _compute(
        status=status,
        start_pending=pending,
        running_since=T0 if billed else None,
        settled_until=T0 if billed else None,
    )
    at = T0 + timedelta(seconds=30)

    if isinstance(expected, str) and expected != NOOP:
        with pytest.raises(Conflict, match=expected):
            apply_request(compute, asked, at)
        return
    step = apply_request(compute, asked, at)

    if expected == NOOP:
        assert not step.changed
        return
    assert step.after is not None
    assert (step.after.status, step.after.start_pending) == expected
    assert step.settle == (at if billed else None)


@pytest.mark.parametrize("waiting", [S.CREATING, S.STOPPING])
def test_a_start_that_waits_takes_effect_when_the_compute_can_run_billed_from_then(waiting) -> None:
    # Given a start sent while the compute is created (or stopped)
    compute = _compute(status=waiting)
    sent = apply_request(compute, R.START, T0).after
    assert sent is not None and sent.start_pending and sent.running_since is None
    ready = ComputeEvent.READY if waiting == S.CREATING else ComputeEvent.CAPACITY_DOWN
    later = T0 + timedelta(minutes=3)

    # When AWS Batch reports it ready (or scaled down)
    step = apply_event(sent, ready, later)

    # Then it is Starting, billed from that moment, not from the request
    assert step.after is not None
    assert (step.after.status, step.after.start_pending) == (S.STARTING, False)
    assert step.after.running_since == step.after.settled_until == later
    assert step.settle is None


def test_the_happy_path_and_its_no_ops() -> None:
    compute = _compute()
    stopped = apply_event(compute, ComputeEvent.READY, T0).after
    assert stopped is not None and stopped.status == ComputeStatus.STOPPED
    starting = apply_request(stopped, ComputeRequest.START, T0).after
    assert starting is not None and starting.status == ComputeStatus.STARTING
    running = apply_event(starting, ComputeEvent.CAPACITY_UP, T0).after
    assert running is not None and running.running_since == T0 and running.settled_until == T0
    assert not apply_request(running, ComputeRequest.START, T0).changed
    stop = apply_request(running, ComputeRequest.STOP, T0 + timedelta(seconds=9))
    assert stop.settle == T0 + timedelta(seconds=9) and stop.after is not None
    assert stop.after.status == ComputeStatus.STOPPING and stop.after.running_since is None
    assert not apply_request(stop.after, ComputeRequest.STOP, T0).changed
    restarted = apply_request(running, ComputeRequest.RESTART, T0).after
    assert restarted is not None and restarted.start_pending
    again = apply_event(restarted, ComputeEvent.CAPACITY_DOWN, T0).after
    assert again is not None and again.status == ComputeStatus.STARTING and not again.start_pending


def test_billing_starts_at_the_start_request_so_a_job_on_a_starting_compute_is_billed() -> None:
    # The trial's case: started at 09:57:43, capacity seen up at 09:58:17, stopped at 09:59:03.
    start_at = datetime(2026, 12, 1, 9, 57, 43, tzinfo=UTC)
    stopped = _compute(status=ComputeStatus.STOPPED)
    starting = apply_request(stopped, ComputeRequest.START, start_at).after
    assert starting is not None and starting.status == ComputeStatus.STARTING
    assert starting.running_since == starting.settled_until == start_at
    running = apply_event(starting, ComputeEvent.CAPACITY_UP, start_at + timedelta(seconds=34)).after
    assert running is not None and running.running_since == start_at  # not reset by the poll
    assert running.last_activity_at == start_at + timedelta(seconds=34)  # the idle timer's floor
    stop = apply_request(running, ComputeRequest.STOP, start_at + timedelta(seconds=80))
    assert stop.settle == start_at + timedelta(seconds=80)
    bill = settlement(running, start_at, stop.settle, final=True)
    # 80 s (not the 46 s since the poll saw it Running) at 60 credits/hour.
    assert bill is not None and bill.seconds == 80 and bill.cost == Decimal("1.3333")


def test_a_stop_while_starting_settles_and_a_failure_while_starting_does_not() -> None:
    starting = apply_request(_compute(status=ComputeStatus.STOPPED), ComputeRequest.START, T0).after
    assert starting is not None
    stop = apply_request(starting, ComputeRequest.STOP, T0 + timedelta(seconds=12.5))
    assert stop.settle == T0 + timedelta(seconds=12.5)
    bill = settlement(starting, T0, T0 + timedelta(seconds=12.5), final=True)
    assert bill is not None and (bill.seconds, bill.cost) == (13, Decimal("0.2167"))
    broken = apply_event(starting, ComputeEvent.BROKEN, T0 + timedelta(seconds=30), "CLIENT_ERROR")
    assert broken.after is not None and broken.after.status == ComputeStatus.FAILED
    assert broken.settle is None and broken.after.running_since is None


def test_a_restart_bills_its_new_start_from_the_capacity_down() -> None:
    running = _compute(status=ComputeStatus.RUNNING, running_since=T0, settled_until=T0)
    restart = apply_request(running, ComputeRequest.RESTART, T0 + timedelta(seconds=60))
    assert restart.settle == T0 + timedelta(seconds=60) and restart.after is not None
    down_at = T0 + timedelta(seconds=95)
    again = apply_event(restart.after, ComputeEvent.CAPACITY_DOWN, down_at).after
    assert again is not None and again.status == ComputeStatus.STARTING
    assert again.running_since == again.settled_until == down_at


@pytest.mark.parametrize(
    ("status", "request_", "ends"),
    [
        (ComputeStatus.RUNNING, ComputeRequest.STOP, True),
        (ComputeStatus.STARTING, ComputeRequest.STOP, True),
        (ComputeStatus.RUNNING, ComputeRequest.RESTART, True),
        (ComputeStatus.RUNNING, ComputeRequest.DELETE, True),
        (ComputeStatus.STOPPING, ComputeRequest.DELETE, False),  # its stop ended them already
        (ComputeStatus.STOPPED, ComputeRequest.DELETE, False),  # the queue's deletion fails its jobs
    ],
)
def test_which_requests_end_the_jobs_on_a_compute(
    status: ComputeStatus, request_: ComputeRequest, ends: bool
) -> None:
    billed = status in BILLED
    compute = _compute(
        status=status, running_since=T0 if billed else None, settled_until=T0 if billed else None
    )
    assert ends_jobs(apply_request(compute, request_, T0 + timedelta(seconds=5))) is ends


def test_the_reasons_jobs_on_a_compute_end_with() -> None:
    assert jobs_end_reason("lab", ComputeRequest.STOP) == "Dedicated compute lab stopped"
    assert jobs_end_reason("lab", ComputeRequest.RESTART) == "Dedicated compute lab restarted"
    assert jobs_end_reason("lab", ComputeRequest.DELETE) == "Dedicated compute lab deleted"
    assert (
        jobs_end_reason("lab", ComputeRequest.STOP, "Stopped: account out of credits")
        == "Dedicated compute lab stopped: account out of credits"
    )
    assert (
        jobs_end_reason("lab", ComputeRequest.STOP, "Stopped by its daily schedule")
        == "Dedicated compute lab stopped: stopped by its daily schedule"
    )
    assert stray_job_reason(_compute(status=ComputeStatus.STARTING), "lab") is None
    assert stray_job_reason(_compute(status=ComputeStatus.RUNNING), "lab") is None
    assert stray_job_reason(_compute(status=ComputeStatus.STOPPED), "lab") == "Dedicated compute lab stopped"
    assert stray_job_reason(_compute(status=ComputeStatus.FAILED), "lab") == "Dedicated compute lab failed"
    assert stray_job_reason(None, "lab") == "Dedicated compute lab deleted"


@pytest.mark.parametrize(
    ("status", "request_", "words"),
    [
        (ComputeStatus.CREATING, ComputeRequest.RESTART, "start it instead"),
        (ComputeStatus.FAILED, ComputeRequest.STOP, "delete it and create it again"),
        (ComputeStatus.STOPPED, ComputeRequest.RESTART, "start it instead"),
        (ComputeStatus.DELETING, ComputeRequest.START, "being deleted"),
    ],
)
def test_refused_requests_name_the_status(
    status: ComputeStatus, request_: ComputeRequest, words: str
) -> None:
    with pytest.raises(Conflict, match=words) as raised:
        apply_request(_compute(status=status), request_, T0)
    assert status.value in raised.value.message


@given(
    running_ms=st.integers(0, 10 * 3600 * 1000),
    machine=st.sampled_from(sorted(MACHINE_CLASSES)),
    count=st.integers(1, 64),
    hourly=st.lists(st.integers(1, 3 * 3600 * 1000), max_size=4),
)
def test_settlements_bill_every_started_second_exactly_once(
    running_ms: int, machine: str, count: int, hourly: list[int]
) -> None:
    compute = _compute(machine_class=machine, count=count)
    rate = MACHINE_CLASSES[machine].credits_per_hour * count
    settled, billed, total = T0, 0, Decimal(0)
    elapsed = 0
    for ms in hourly:  # hourly settlements: whole seconds, the rest carried
        elapsed += ms
        bill = settlement(compute, settled, T0 + timedelta(milliseconds=elapsed), final=False)
        if bill is not None:
            assert bill.seconds == math.floor(
                (T0 + timedelta(milliseconds=elapsed) - settled).total_seconds()
            )
            settled, billed, total = bill.until, billed + bill.seconds, total + bill.cost
    end = T0 + timedelta(milliseconds=elapsed + running_ms)
    final = settlement(compute, settled, end, final=True)
    if final is not None:
        billed, total = billed + final.seconds, total + final.cost
        expected = (Decimal(final.seconds) * rate / 3600).quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP)
        assert final.cost == expected
    assert billed == math.ceil((elapsed + running_ms) / 1000)


def test_compute_cost_examples() -> None:
    assert compute_cost(11, Decimal(60)) == Decimal("0.1833")
    assert compute_cost(3600, Decimal(90) * 2) == Decimal(180)
    assert compute_cost(1, Decimal(2300)) == Decimal("0.6389")
    assert compute_entry_id("lab", T0) == "compute#lab#2026-12-01T08:00:00.000000Z"


def test_daily_schedule_fires_the_latest_boundary_in_its_time_zone() -> None:
    # Europe/Berlin is UTC+1 in December: 08:00 there is 07:00 UTC, 20:00 is 19:00 UTC.
    schedules = Schedules(daily=(DailySchedule(time(8, 0), time(20, 0), "Europe/Berlin"),))
    day = datetime(2026, 12, 1, tzinfo=UTC)
    assert scheduled_request(schedules, day + timedelta(hours=6, minutes=59), day + timedelta(hours=7)) == (
        ComputeRequest.START
    )
    assert scheduled_request(schedules, day + timedelta(hours=7), day + timedelta(hours=7, minutes=1)) is None
    assert scheduled_request(schedules, day + timedelta(hours=6), day + timedelta(hours=19, minutes=5)) == (
        ComputeRequest.STOP
    )
    assert scheduled_request(schedules, None, day + timedelta(hours=7)) is None


def test_idle_stop_counts_from_the_last_job_or_the_start() -> None:
    running = _compute(
        status=ComputeStatus.RUNNING,
        running_since=T0,
        settled_until=T0,
        last_activity_at=T0 + timedelta(minutes=3),
        schedules=Schedules(idle_stop_minutes=5),
    )
    assert not idle_expired(running, T0 + timedelta(minutes=7, seconds=59))
    assert idle_expired(running, T0 + timedelta(minutes=8))
    assert not idle_expired(_compute(schedules=Schedules(idle_stop_minutes=1)), T0 + timedelta(hours=1))


def test_an_idle_stop_counts_minutes_of_the_given_length() -> None:
    # A local stack's end-to-end tests make a minute 4 s long (REMOTE_BATCH_IDLE_STOP_MINUTE_SECONDS).
    running = _compute(
        status=ComputeStatus.RUNNING,
        running_since=T0,
        settled_until=T0,
        schedules=Schedules(idle_stop_minutes=2),
    )
    minute = timedelta(seconds=4)
    assert not idle_expired(running, T0 + timedelta(seconds=7, microseconds=999_999), minute)
    assert idle_expired(running, T0 + timedelta(seconds=8), minute)
    assert not idle_expired(running, T0 + timedelta(minutes=1, seconds=59))


def test_the_quota_a_compute_holds() -> None:
    gpu = reservation_of(_compute(machine_class="GPU4xL4", count=2, geo_zone=GeoZone.EUROPEAN_UNION))
    assert (gpu.key.name, gpu.units, gpu.vcpus) == ("GPU#EuropeanUnion", 8, 96)
    basic = reservation_of(_compute(machine_class="Basic2x8", count=3))
    assert (basic.key.name, basic.units, basic.vcpus) == ("Basic#UnitedStates", 6, 6)


@pytest.mark.parametrize("status", [s for s in ComputeStatus if s != ComputeStatus.FAILED])
def test_a_compute_holds_its_reservation_in_every_status_but_failed(status: ComputeStatus) -> None:
    compute = _compute(machine_class="Basic2x8", count=3, status=status)
    assert holds_reservation(compute)
    # Moving between holding statuses (a stop, a start) gives nothing back; a deletion gives it all.
    assert released_reservation(compute, _compute(status=ComputeStatus.STOPPED)) is None
    assert released_reservation(compute, None) == reservation_of(compute)


@pytest.mark.parametrize("status", [ComputeStatus.CREATING, ComputeStatus.RUNNING])
def test_a_failure_gives_the_reservation_back_once(status: ComputeStatus) -> None:
    # Given a compute failing while it is created, or while it runs
    compute = _compute(machine_class="Basic2x8", count=3, status=status)
    if status == ComputeStatus.RUNNING:
        compute = replace(compute, running_since=T0, settled_until=T0)
    failed = apply_event(compute, ComputeEvent.BROKEN, T0, "INVALID").after
    assert failed is not None and failed.status == ComputeStatus.FAILED
    assert not holds_reservation(failed)
    assert released_reservation(compute, failed) == reservation_of(compute)
    # Deleting the Failed compute later gives nothing back a second time.
    deleting = apply_request(failed, ComputeRequest.DELETE, T0).after
    assert deleting is not None and not holds_reservation(deleting)
    assert released_reservation(failed, deleting) is None
    assert released_reservation(deleting, None) is None


@pytest.mark.parametrize(
    ("idle", "daily", "field"),
    [
        (0, [], "idleStopMinutes"),
        (None, [(None, None, "UTC")], "daily[0]"),
        (None, [("25:00", None, "UTC")], "daily[0].start"),
        (None, [("08:00", None, "Mars/Olympus")], "daily[0].timeZone"),
    ],
)
def test_bad_schedules_name_the_field(
    idle: int | None, daily: list[tuple[str | None, str | None, str]], field: str
) -> None:
    with pytest.raises(ValidationFailed) as raised:
        check_schedules(idle, daily)
    assert raised.value.field == field


@pytest.mark.parametrize("name", ["x", "1lab", "lab_1", "a" * 33, "lab!"])
def test_bad_names_are_refused(name: str) -> None:
    with pytest.raises(ValidationFailed) as raised:
        new_compute("acct", name, machine="Basic1x8", zone=GeoZone.UNITED_STATES, count=1, now=T0)
    assert raised.value.field == "name"


def test_batch_names_carry_the_prefix_and_stay_within_aws_limits() -> None:
    name = resource_name("remote-batch-prod", "a" * 64, "l" * 32)
    assert name.startswith("remote-batch-prod-cmp-") and len(name) <= 128
    assert resource_name("p", "acct-1", "lab") != resource_name("p", "acct-2", "lab")
