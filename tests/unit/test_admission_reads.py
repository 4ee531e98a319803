"""Admission that reads held jobs per family and zone (``functions.logic.quotas.admit_waiting`` over
``functions.domain.quotas.AdmissionPlan``): on a store that keeps each key's held jobs oldest first, it
admits exactly what ``plan_admissions`` admits from all held jobs at once, reads no key without room
beyond its oldest job, and gives the oldest job left in each key its reason, written only when it
changes."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.domain.jobs import Account
from functions.domain.machine_classes import MACHINE_CLASSES, GeoZone
from functions.domain.quotas import (
    ALL_KEYS,
    AdmissionPlan,
    Demand,
    Family,
    HeldJob,
    QuotaKey,
    QuotaLimits,
    Usage,
    demand_of,
    fits,
    plan_admissions,
    smallest_demand,
)
from functions.logic import quotas
from functions.ports import Services

US = GeoZone.UNITED_STATES
BASIC_US = QuotaKey(Family.BASIC, US)
GPU_US = QuotaKey(Family.GPU, US)


class HeldStore:
    """The store's part an admission uses, in memory: each key's held jobs oldest first."""

    def __init__(self, held: list[HeldJob], usage: Usage, limits: QuotaLimits) -> None:
        self.held = {job.job_id: job for job in held}
        self.usage = usage
        self.limits = limits
        self.reads: list[tuple[QuotaKey | None, int, int]] = []  # (key, limit, jobs returned)
        self.reasons: dict[str, str] = {}

    def get_quota_usage(self, account_id: str) -> Usage:
        return self.usage

    def get_account(self, account_id: str) -> Account:
        """An account with credits (one out of credits has its held jobs ended, not admitted)."""
        return Account(account_id, Decimal(100))

    def get_account_and_quota_limits(self, account_id: str) -> tuple[Account, QuotaLimits]:
        """The account (with credits) and its limits, as one read."""
        return self.get_account(account_id), self.limits

    def get_job(self, job_id: str) -> None:
        """No job records in this model: a held job that can never fit its limit stays held here, as
        ``plan_admissions`` rules (its ending is tests/integration/test_admin_quotas.py's)."""
        return None

    def get_quota_limits(self, account_id: str) -> QuotaLimits:
        return self.limits

    def list_held_jobs(
        self, account_id: str, key: QuotaKey | None = None, *, limit: int = 200, after: str | None = None
    ) -> list[HeldJob]:
        jobs = sorted(
            (j for j in self.held.values() if key is None or j.demand.key == key),
            key=lambda j: (j.demand.key.name, j.job_id),
        )
        page = [j for j in jobs if after is None or j.job_id > after][:limit]
        self.reads.append((key, limit, len(page)))
        return page

    def admit_job(self, account_id: str, held: HeldJob, limits: QuotaLimits) -> bool:
        assert fits(held.demand, self.usage, limits)
        plan = AdmissionPlan(self.usage, limits)
        assert plan.admit(held)
        self.usage = plan.usage
        del self.held[held.job_id]
        return True

    def set_waiting_reason(self, job_id: str, reason: str) -> None:
        self.reasons[job_id] = reason
        self.held[job_id] = replace(self.held[job_id], reason=reason)


def admit(store: HeldStore) -> list[str]:
    services = cast(Services, cast(Any, type("S", (), {"store": store})()))
    return quotas.admit_waiting(services, "dev")


CLASSES = sorted(MACHINE_CLASSES)


@st.composite
def accounts(draw: st.DrawFn) -> tuple[list[HeldJob], Usage, QuotaLimits]:
    keys = draw(st.lists(st.sampled_from(ALL_KEYS), min_size=1, max_size=3, unique=True))
    held = []
    for index in range(draw(st.integers(min_value=0, max_value=25))):
        key = draw(st.sampled_from(keys))
        names = [n for n in CLASSES if n.startswith(key.family.value)]
        demand = demand_of(MACHINE_CLASSES[draw(st.sampled_from(names))], key.zone)
        held.append(
            HeldJob(f"job-{index:04d}", demand, draw(st.sampled_from([None, "Waiting for quota: x"])))
        )
    limits = QuotaLimits(
        {k: draw(st.integers(min_value=0, max_value=400)) for k in keys},
        total=draw(st.integers(min_value=0, max_value=800)),
    )
    in_use = {k: draw(st.integers(min_value=0, max_value=limits.limit(k))) for k in keys}
    queued = {k: sum(j.demand.units for j in held if j.demand.key == k) for k in keys}
    total = draw(st.integers(min_value=0, max_value=limits.total_limit))
    return held, Usage(in_use, queued, total, sum(j.demand.vcpus for j in held)), limits


@settings(max_examples=300, deadline=None)
@given(account=accounts(), cap=st.integers(min_value=1, max_value=4))
def test_per_key_reads_admit_exactly_what_the_plan_of_all_held_jobs_admits(
    account: tuple[list[HeldJob], Usage, QuotaLimits], cap: int
) -> None:
    held, usage, limits = account
    store = HeldStore(held, usage, limits)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(quotas, "HELD_READ_CAP", cap)  # small pages: a key is read page after page
        admitted = admit(store)

    plan = [j.job_id for j in plan_admissions(held, usage, limits)]
    assert admitted == plan
    # Every read is one key's, at most a page; a key without room for its family's smallest job is
    # read only for its oldest job.
    at_start = AdmissionPlan(usage, limits)
    for key, limit, _ in store.reads:
        assert key is not None and 1 <= limit <= cap
        if at_start.admissible(key, 1) == 0:
            assert limit == 1
    # A key is read again only after a whole page of it was admitted.
    for key in {k for k, _, _ in store.reads}:
        pages = [(limit, returned) for k, limit, returned in store.reads if k == key]
        admitted_of_key = sum(1 for i in admitted if next(j for j in held if j.job_id == i).demand.key == key)
        assert sum(limit for limit, _ in pages[:-1]) <= admitted_of_key
    # The oldest job left of each key got a reason (unless it had that one), and no other job did.
    oldest_left: dict[QuotaKey, HeldJob] = {}
    for job in sorted(store.held.values(), key=lambda j: j.job_id):
        oldest_left.setdefault(job.demand.key, job)
    assert set(store.reasons) <= {j.job_id for j in oldest_left.values()}
    for job in oldest_left.values():
        assert job.reason is not None and job.reason.startswith("Waiting for quota: ")


def test_a_second_pass_with_nothing_changed_writes_no_reason() -> None:
    held = [HeldJob(f"job-{i}", Demand(BASIC_US, 1, 1)) for i in range(5)]
    store = HeldStore(held, Usage({BASIC_US: 2}, {BASIC_US: 5}, 2, 5), QuotaLimits({BASIC_US: 2}))
    assert admit(store) == []
    assert store.reasons == {"job-0": "Waiting for quota: Basic vCPUs in UnitedStates (2 of 2 in use)"}
    store.reasons.clear()
    assert admit(store) == []
    assert store.reasons == {}
    assert store.reads == [(BASIC_US, 1, 1), (BASIC_US, 1, 1)]


def test_nothing_queued_reads_neither_limits_nor_held_jobs() -> None:
    store = HeldStore([], Usage({BASIC_US: 1}, {BASIC_US: 0}, 1, 0), QuotaLimits())
    store.get_quota_limits = None  # type: ignore[assignment,method-assign]  # never called
    assert admit(store) == []
    assert store.reads == []


def test_a_page_holds_what_the_room_could_admit_and_the_job_that_stops_the_key() -> None:
    # Basic 5 vCPUs free: at most 5 Basic1x8 jobs, so 6 are read (the 6th stops the key).
    held = [HeldJob(f"job-{i:02d}", Demand(BASIC_US, 1, 1)) for i in range(40)]
    store = HeldStore(held, Usage({BASIC_US: 3}, {BASIC_US: 40}, 3, 40), QuotaLimits({BASIC_US: 8}))
    assert admit(store) == [f"job-{i:02d}" for i in range(5)]
    assert store.reads == [(BASIC_US, 6, 6)]


def test_the_smallest_demand_of_a_family_is_its_smallest_class() -> None:
    assert smallest_demand(BASIC_US) == Demand(BASIC_US, 1, 1)
    assert smallest_demand(GPU_US) == Demand(GPU_US, 1, 8)
    assert AdmissionPlan(Usage({GPU_US: 7}), QuotaLimits({GPU_US: 8})).admissible(GPU_US, 100) == 1
    assert AdmissionPlan(Usage({GPU_US: 8}), QuotaLimits({GPU_US: 8})).admissible(GPU_US, 100) == 0
    assert AdmissionPlan(Usage({BASIC_US: 8}), QuotaLimits({BASIC_US: 1000})).admissible(BASIC_US, 100) == 100
