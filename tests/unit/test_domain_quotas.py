"""Quota arithmetic, admission order and fairness (``functions.domain.quotas``): pure, no store."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from functions.domain.errors import QuotaExceeded, ValidationFailed
from functions.domain.machine_classes import MACHINE_CLASSES, GeoZone
from functions.domain.quotas import (
    DEFAULT_FAMILY_LIMITS,
    DEFAULT_TOTAL_LIMIT,
    Demand,
    Family,
    HeldJob,
    QuotaKey,
    QuotaLimits,
    Unit,
    Usage,
    check_fits_alone,
    check_limit,
    check_reservation,
    demand_of,
    family_of,
    fits,
    plan_admissions,
    quota_lines,
    waiting_reason,
)

US, EU = GeoZone.UNITED_STATES, GeoZone.EUROPEAN_UNION
BASIC_US = QuotaKey(Family.BASIC, US)
MEMORY_EU = QuotaKey(Family.MEMORY, EU)


@pytest.mark.parametrize(
    ("name", "family", "units", "vcpus"),
    [
        ("Basic1x8", Family.BASIC, 1, 1),
        ("Basic4x16", Family.BASIC, 4, 4),
        ("Memory192x1536", Family.MEMORY, 192, 192),
        ("Compute64x128", Family.COMPUTE, 64, 64),
        ("GPU1xL40S", Family.GPU, 1, 8),
        ("GPU4xL4", Family.GPU, 4, 48),
    ],
)
def test_a_job_holds_its_class_vcpus_or_gpus(name: str, family: Family, units: int, vcpus: int) -> None:
    machine = MACHINE_CLASSES[name]
    assert family_of(machine) == family
    assert demand_of(machine, EU) == Demand(QuotaKey(family, EU), units, vcpus)


def test_an_array_holds_its_size_times_one_child() -> None:
    assert demand_of(MACHINE_CLASSES["Basic2x8"], US, array_size=5) == Demand(BASIC_US, 10, 10)


def test_every_class_fits_its_family_default_alone() -> None:
    for machine in MACHINE_CLASSES.values():
        check_fits_alone(demand_of(machine, US), QuotaLimits(), machine.name)


def test_a_job_over_its_family_limit_is_refused_naming_family_zone_limit_and_request() -> None:
    limits = QuotaLimits({QuotaKey(Family.COMPUTE, US): 32})
    with pytest.raises(QuotaExceeded) as caught:
        check_fits_alone(demand_of(MACHINE_CLASSES["Compute64x128"], US), limits, "Compute64x128")
    assert caught.value.status == 400
    assert caught.value.field == "machineClass"
    assert caught.value.message == (
        "Compute64x128 needs 64 vCPUs but the account's Compute quota in UnitedStates is 32 vCPUs; "
        "ask an operator for a higher quota."
    )


def test_a_job_over_the_total_is_refused() -> None:
    with pytest.raises(QuotaExceeded, match=r"needs 16 vCPUs but the account's total quota is 15 vCPUs"):
        check_fits_alone(
            demand_of(MACHINE_CLASSES["Memory16x128"], US), QuotaLimits(total=15), "Memory16x128"
        )


def test_the_waiting_reason_names_the_family_zone_and_numbers() -> None:
    limits = QuotaLimits({MEMORY_EU: 64})
    usage = Usage({MEMORY_EU: 64}, total_in_use=64)
    demand = demand_of(MACHINE_CLASSES["Memory8x64"], EU)
    assert not fits(demand, usage, limits)
    assert waiting_reason(demand, usage, limits) == (
        "Waiting for quota: Memory vCPUs in EuropeanUnion (64 of 64 in use)"
    )


def test_the_waiting_reason_names_the_total_when_it_blocks() -> None:
    limits = QuotaLimits(total=10)
    usage = Usage({BASIC_US: 1}, total_in_use=10)
    demand = demand_of(MACHINE_CLASSES["Basic1x8"], US)
    assert waiting_reason(demand, usage, limits) == "Waiting for quota: total vCPUs (10 of 10 in use)"


def test_a_job_queued_behind_older_ones_names_its_family_even_with_room() -> None:
    # The family has room (1 of 2) but older jobs of it wait: the reason names the family's numbers.
    usage = Usage({BASIC_US: 1}, {BASIC_US: 3}, total_in_use=1)
    demand = demand_of(MACHINE_CLASSES["Basic1x8"], US)
    reason = waiting_reason(demand, usage, QuotaLimits({BASIC_US: 2}))
    assert reason == "Waiting for quota: Basic vCPUs in UnitedStates (1 of 2 in use)"


def test_limits_keep_unlisted_entries_and_reset_the_total_to_the_default() -> None:
    limits = QuotaLimits({BASIC_US: 2}, total=100).with_changes({MEMORY_EU: 8}, None, set_total=True)
    assert limits.limit(BASIC_US) == 2
    assert limits.limit(MEMORY_EU) == 8
    assert limits.limit(QuotaKey(Family.GPU, US)) == DEFAULT_FAMILY_LIMITS[Family.GPU]
    assert limits.total_limit == DEFAULT_TOTAL_LIMIT


@pytest.mark.parametrize("value", [-1, 1_000_001])
def test_a_limit_out_of_range_is_a_validation_error(value: int) -> None:
    with pytest.raises(ValidationFailed) as caught:
        check_limit(value, "quotas[0].limit")
    assert caught.value.field == "quotas[0].limit"


def test_report_lines_cover_every_family_in_every_zone_with_units() -> None:
    lines = quota_lines(Usage({BASIC_US: 2}, {BASIC_US: 8}), QuotaLimits({BASIC_US: 2}))
    assert len(lines) == len(Family) * len(GeoZone)
    basic = next(line for line in lines if line.key == BASIC_US)
    assert (basic.limit, basic.in_use, basic.queued, basic.unit) == (2, 2, 8, Unit.VCPU)
    gpu = next(line for line in lines if line.key.family == Family.GPU)
    assert gpu.unit == Unit.GPU


def _held(index: int, key: QuotaKey = BASIC_US, units: int = 1) -> HeldJob:
    return HeldJob(f"job-{index:04d}", Demand(key, units, units))


def test_admissions_go_oldest_first_and_never_overtake_within_a_family() -> None:
    # Given Basic 4 vCPUs: a 1, then a 4 that does not fit after it, then a 1.
    held = [_held(3), _held(1), _held(2, units=4)]
    plan = plan_admissions(held, Usage(), QuotaLimits({BASIC_US: 4}))
    # The 4 blocks the key: the younger 1 does not overtake it.
    assert [h.job_id for h in plan] == ["job-0001"]


def test_a_blocked_family_does_not_hold_back_another() -> None:
    held = [_held(1, units=2), _held(2, MEMORY_EU, 8), _held(3)]
    plan = plan_admissions(held, Usage({BASIC_US: 2}), QuotaLimits({BASIC_US: 2}))
    assert [h.job_id for h in plan] == ["job-0002"]


@given(
    limit=st.integers(min_value=0, max_value=20),
    total=st.integers(min_value=0, max_value=30),
    in_use=st.integers(min_value=0, max_value=20),
    sizes=st.lists(st.integers(min_value=1, max_value=6), max_size=30),
)
def test_a_plan_never_exceeds_a_limit_and_stops_only_at_a_job_that_does_not_fit(
    limit: int, total: int, in_use: int, sizes: list[int]
) -> None:
    limits = QuotaLimits({BASIC_US: limit}, total=total)
    start = min(in_use, limit, total)
    usage = Usage({BASIC_US: start}, total_in_use=start)
    held = [_held(i, units=size) for i, size in enumerate(sizes)]
    plan = plan_admissions(held, usage, limits)
    used = start + sum(h.demand.units for h in plan)
    assert used <= limit and used <= total
    # Oldest first, a prefix of the queue: what was left waits behind a job that did not fit.
    assert plan == held[: len(plan)]
    if len(plan) < len(held):
        assert not fits(held[len(plan)].demand, Usage({BASIC_US: used}, total_in_use=used), limits)


# -- what dedicated computes reserve ---------------------------------------------------------------------
def test_reserved_units_are_not_free_for_jobs() -> None:
    # Given Basic 64 in UnitedStates: jobs hold 48, a compute reserves 16
    usage = Usage({BASIC_US: 48}, total_in_use=48, reserved={BASIC_US: 16}, total_reserved=16)
    one = demand_of(MACHINE_CLASSES["Basic1x8"], US)
    assert usage.committed(BASIC_US) == 64 and usage.total_committed == 64
    assert not fits(one, usage, QuotaLimits())
    # The same 48 in use without the reservation leaves room.
    assert fits(one, Usage({BASIC_US: 48}, total_in_use=48), QuotaLimits())


def test_the_waiting_reason_says_what_dedicated_compute_reserves() -> None:
    usage = Usage({BASIC_US: 48}, total_in_use=48, reserved={BASIC_US: 16}, total_reserved=16)
    demand = demand_of(MACHINE_CLASSES["Basic1x8"], US)
    assert waiting_reason(demand, usage, QuotaLimits()) == (
        "Waiting for quota: Basic vCPUs in UnitedStates "
        "(64 of 64 in use, 16 of them reserved by dedicated compute)"
    )
    # The total alone blocks: its numbers count the reservations too.
    total = Usage({BASIC_US: 2}, total_in_use=2, reserved={MEMORY_EU: 8}, total_reserved=8)
    assert waiting_reason(demand, total, QuotaLimits(total=10)) == (
        "Waiting for quota: total vCPUs (10 of 10 in use, 8 of them reserved by dedicated compute)"
    )


def test_a_compute_that_fits_in_what_is_left_is_accepted() -> None:
    usage = Usage({BASIC_US: 2}, total_in_use=2, reserved={BASIC_US: 2}, total_reserved=2)
    check_reservation(Demand(BASIC_US, 4, 4), usage, QuotaLimits({BASIC_US: 8}), "Basic2x8 x 2")


def test_a_compute_over_what_jobs_and_computes_leave_is_refused_with_the_numbers() -> None:
    usage = Usage({BASIC_US: 2}, total_in_use=2, reserved={BASIC_US: 4}, total_reserved=4)
    with pytest.raises(QuotaExceeded) as caught:
        check_reservation(Demand(BASIC_US, 4, 4), usage, QuotaLimits({BASIC_US: 8}), "Basic2x8 x 2")
    assert (caught.value.status, caught.value.field) == (400, "machineClass")
    assert caught.value.message == (
        "Basic2x8 x 2 needs 4 vCPUs but the account's Basic quota in UnitedStates is 8 vCPUs, 6 of them "
        "in use (4 reserved by dedicated compute); wait for jobs to end, delete a compute or ask an "
        "operator for a higher quota."
    )


def test_a_compute_over_the_total_left_is_refused() -> None:
    usage = Usage({MEMORY_EU: 8}, total_in_use=8, reserved={MEMORY_EU: 8}, total_reserved=8)
    with pytest.raises(QuotaExceeded) as caught:
        check_reservation(Demand(BASIC_US, 4, 4), usage, QuotaLimits(total=18), "Basic2x8 x 2")
    assert caught.value.message == (
        "Basic2x8 x 2 needs 4 vCPUs but the account's total quota is 18 vCPUs, 16 of them in use "
        "(8 reserved by dedicated compute); wait for jobs to end, delete a compute or ask an operator "
        "for a higher quota."
    )


def test_a_compute_alone_over_its_family_limit_is_refused_as_a_job_is() -> None:
    with pytest.raises(QuotaExceeded) as caught:
        check_reservation(Demand(BASIC_US, 96, 96), Usage(), QuotaLimits(), "Basic4x16 x 24")
    assert caught.value.message == (
        "Basic4x16 x 24 needs 96 vCPUs but the account's Basic quota in UnitedStates is 64 vCPUs; "
        "ask an operator for a higher quota."
    )


def test_report_lines_show_what_computes_reserve() -> None:
    lines = quota_lines(Usage({BASIC_US: 2}, reserved={BASIC_US: 4}), QuotaLimits({BASIC_US: 8}))
    basic = next(line for line in lines if line.key == BASIC_US)
    assert (basic.limit, basic.in_use, basic.queued, basic.reserved) == (8, 2, 0, 4)
    assert all(line.reserved == 0 for line in lines if line.key != BASIC_US)


@given(
    limit=st.integers(min_value=0, max_value=20),
    reserved=st.integers(min_value=0, max_value=20),
    sizes=st.lists(st.integers(min_value=1, max_value=6), max_size=30),
)
def test_a_plan_never_admits_into_reserved_units(limit: int, reserved: int, sizes: list[int]) -> None:
    limits = QuotaLimits({BASIC_US: limit}, total=limit)
    held_back = min(reserved, limit)
    usage = Usage(reserved={BASIC_US: held_back}, total_reserved=held_back)
    held = [_held(i, units=size) for i, size in enumerate(sizes)]
    plan = plan_admissions(held, usage, limits)
    used = sum(h.demand.units for h in plan)
    assert used + held_back <= limit
    assert plan == held[: len(plan)]
    if len(plan) < len(held):
        after = Usage(
            {BASIC_US: used}, total_in_use=used, reserved={BASIC_US: held_back}, total_reserved=held_back
        )
        assert not fits(held[len(plan)].demand, after, limits)
