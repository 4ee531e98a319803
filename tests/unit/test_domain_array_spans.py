"""Arrays through the quota (pure rules): a span is sized to the free room, at most the span size, at
least one child; arrays and single jobs share a key's queue oldest first; a withdrawn child shows
Terminated; a span's dispatch name round-trips."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from functions.domain.arrays import (
    child_template,
    parse_span_dispatch_id,
    span_dispatch_id,
    withdrawn_reason,
)
from functions.domain.jobs import DispatchState, Job, JobType, PayloadKind, WithdrawnSpan
from functions.domain.machine_classes import MACHINE_CLASSES, GeoZone
from functions.domain.quotas import (
    AdmissionPlan,
    Demand,
    Family,
    HeldJob,
    QuotaKey,
    QuotaLimits,
    Usage,
    demand_of,
    span_size_for,
)
from functions.domain.status import JobStatus

US = GeoZone.UNITED_STATES
BASIC_US = QuotaKey(Family.BASIC, US)
ONE_VCPU = demand_of(MACHINE_CLASSES["Basic1x8"], US)  # Basic1x8: 1 vCPU
TWO_VCPUS = demand_of(MACHINE_CLASSES["Basic2x8"], US)  # Basic2x8: 2 vCPUs


def held_array(job_id: str, child: Demand, children: int) -> HeldJob:
    return HeldJob(job_id, Demand(child.key, child.units * children, child.vcpus * children), child=child)


def usage(in_use: int = 0, queued: int = 0, total: int | None = None) -> Usage:
    return Usage({BASIC_US: in_use}, {BASIC_US: queued}, in_use if total is None else total, queued)


def test_a_span_takes_the_room_divided_by_one_childs_units() -> None:
    limits = QuotaLimits({BASIC_US: 7})
    assert span_size_for(TWO_VCPUS, 100, usage(in_use=1), limits, 10_000) == 3  # 6 of 6 free vCPUs
    assert span_size_for(ONE_VCPU, 100, usage(in_use=1), limits, 10_000) == 6


def test_a_span_is_at_most_the_span_size_and_the_children_left() -> None:
    limits = QuotaLimits({BASIC_US: 64})
    assert span_size_for(ONE_VCPU, 100, usage(), limits, 10) == 10
    assert span_size_for(ONE_VCPU, 4, usage(), limits, 10) == 4


def test_no_span_while_not_one_child_fits_and_one_as_soon_as_one_does() -> None:
    limits = QuotaLimits({BASIC_US: 2})
    assert span_size_for(TWO_VCPUS, 5, usage(in_use=1), limits, 10) == 0
    assert span_size_for(ONE_VCPU, 5, usage(in_use=1), limits, 10) == 1


def test_the_total_limit_bounds_a_span_too() -> None:
    limits = QuotaLimits({BASIC_US: 64}, total=5)
    assert span_size_for(ONE_VCPU, 100, usage(total=2), limits, 10_000) == 3


@given(
    limit=st.integers(0, 40),
    in_use=st.integers(0, 40),
    children=st.integers(1, 50),
    span_size=st.integers(1, 20),
    per_child=st.sampled_from([ONE_VCPU, TWO_VCPUS]),
)
def test_a_span_never_takes_more_than_is_free_and_takes_one_whenever_one_fits(
    limit: int, in_use: int, children: int, span_size: int, per_child: Demand
) -> None:
    limits = QuotaLimits({BASIC_US: limit})
    count = span_size_for(per_child, children, usage(in_use=in_use), limits, span_size)
    assert 0 <= count <= min(children, span_size)
    assert in_use + count * per_child.units <= max(limit, in_use)
    one_fits = in_use + per_child.units <= limit
    assert (count >= 1) == one_fits
    # Room for more is only left when the span size or the children left stopped it.
    if count < min(children, span_size):
        assert in_use + (count + 1) * per_child.units > limit


def test_a_plan_admits_an_array_span_by_span_then_blocks_its_key() -> None:
    plan = AdmissionPlan(usage(queued=10), QuotaLimits({BASIC_US: 4}))
    array = held_array("job-1", ONE_VCPU, 10)
    assert array.children == 10
    assert plan.admit_span(array, 3) == 3
    left = held_array("job-1", ONE_VCPU, 7)
    assert plan.admit_span(left, 3) == 1  # 1 vCPU left of 4
    assert plan.usage.used(BASIC_US) == 4 and plan.usage.waiting(BASIC_US) == 6
    assert plan.admit_span(held_array("job-1", ONE_VCPU, 6), 3) == 0
    assert plan.is_blocked(BASIC_US)
    # No overtaking: a younger single job of the key waits behind the array.
    assert not plan.admit(HeldJob("job-2", ONE_VCPU))


def test_an_older_single_job_goes_before_a_younger_array() -> None:
    plan = AdmissionPlan(usage(queued=4), QuotaLimits({BASIC_US: 2}))
    assert plan.admit(HeldJob("job-1", ONE_VCPU))
    assert plan.admit_span(held_array("job-2", ONE_VCPU, 3), 10) == 1
    assert plan.usage.used(BASIC_US) == 2


def test_a_held_arrays_reason_is_about_its_next_child() -> None:
    array = held_array("job-1", TWO_VCPUS, 40)
    assert array.next_demand == TWO_VCPUS
    assert HeldJob("job-2", ONE_VCPU).next_demand == ONE_VCPU


def test_a_spans_dispatch_name_round_trips_and_is_no_job_id() -> None:
    parent = "job-01KB0000000000000000000000"
    assert parse_span_dispatch_id(span_dispatch_id(parent, 0)) == (parent, 0)
    assert parse_span_dispatch_id(span_dispatch_id(parent, 9_990)) == (parent, 9_990)
    assert parse_span_dispatch_id(parent) is None
    assert parse_span_dispatch_id(f"{parent}:3") is None


def test_a_withdrawn_child_shows_terminated_with_its_reason_and_others_queued() -> None:
    parent = Job(
        job_id="job-01KB0000000000000000000000",
        account_id="dev",
        name=None,
        type=JobType.ARRAY,
        payload_kind=PayloadKind.CODE,
        machine_class="Basic1x8",
        geo_zone=US,
        credit_constraint=None,
        time_constraint=None,
        notifications=(),
        submitted_at=datetime(2026, 12, 1, tzinfo=UTC),
        array_size=10,
        dispatch_state=DispatchState.HELD,
        array_withdrawn=(WithdrawnSpan(4, 6, "Aborted by user"),),
    )
    assert withdrawn_reason(parent, 3) is None
    assert withdrawn_reason(parent, 4) == withdrawn_reason(parent, 9) == "Aborted by user"
    kept, withdrawn = child_template(parent, 3), child_template(parent, 4)
    assert (kept.status, kept.dispatch_state) == (JobStatus.QUEUED, DispatchState.DISPATCHED)
    assert (withdrawn.status, withdrawn.status_reason, withdrawn.status_history) == (
        JobStatus.TERMINATED,
        "Aborted by user",
        (JobStatus.QUEUED, JobStatus.TERMINATED),
    )
    assert kept.holds_quota
