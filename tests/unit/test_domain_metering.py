"""The meter's rules on one job and one account (functions/domain/metering.py): what a running job
has spent, which cap it reached, and when the account is out of credits."""

from datetime import timedelta
from decimal import Decimal

import pytest

from functions.domain.jobs import JobType
from functions.domain.metering import balance_exhausted, read_array_meter, read_meter
from functions.domain.status import JobStatus
from tests.unit.test_domain_jobs import SUBMITTED_AT, make_job

STARTED = SUBMITTED_AT + timedelta(seconds=30)


def running(**overrides):
    return make_job(status=JobStatus.RUNNING, started_at=STARTED, **overrides)


def reading_after(seconds, **overrides):
    return read_meter(running(**overrides), STARTED + timedelta(seconds=seconds))


def test_running_jobs_that_spent_exactly_the_balance_leave_the_account_out_of_credits():
    # Basic1x8 costs 60 credits an hour: 1 s is 0.0167, 2 s 0.0333; 0.0167 + 0.0333 = 0.0500.
    readings = [reading_after(1), reading_after(2)]
    assert [r.spent for r in readings] == [Decimal("0.0167"), Decimal("0.0333")]
    assert balance_exhausted(Decimal("0.0500"), readings) is True


def test_one_ten_thousandth_of_a_credit_left_is_still_in_credit():
    readings = [reading_after(1), reading_after(2)]
    assert balance_exhausted(Decimal("0.0501"), readings) is False


def test_a_balance_already_below_zero_is_exhausted_with_no_running_jobs():
    assert balance_exhausted(Decimal("-0.0001"), []) is True
    assert balance_exhausted(Decimal("0"), []) is True
    assert balance_exhausted(Decimal("0.0001"), []) is False


def test_a_starting_job_has_spent_nothing_new_and_reached_no_cap():
    job = make_job(status=JobStatus.STARTING, credits_spent=Decimal("0"))
    reading = read_meter(job, STARTED + timedelta(hours=5))
    assert (reading.running_ms, reading.spent, reading.cap_reached) == (0, Decimal("0"), None)


def test_spent_never_goes_below_what_the_job_already_shows():
    reading = reading_after(1, credits_spent=Decimal("0.5000"))
    assert reading.spent == Decimal("0.5000")
    assert reading.running_ms == 1000


@pytest.mark.parametrize(
    ("seconds", "cap"),
    [(59, None), (60, "CreditConstraint of 1 credits reached")],
)
def test_credit_constraint_is_reached_when_spent_equals_it(seconds, cap):
    assert reading_after(seconds, credit_constraint=Decimal("1")).cap_reached == cap


@pytest.mark.parametrize(
    ("seconds", "cap"),
    [(9.999, None), (10, "TimeConstraint of 10 s reached")],
)
def test_time_constraint_is_reached_at_exactly_its_seconds(seconds, cap):
    assert reading_after(seconds, time_constraint=10).cap_reached == cap


def test_the_credit_constraint_is_reported_before_the_time_constraint():
    reading = reading_after(120, credit_constraint=Decimal("1"), time_constraint=10)
    assert reading.cap_reached == "CreditConstraint of 1 credits reached"


# Mutants the mutation run (`make mutation`) found surviving, killed here.


def test_a_job_read_at_its_start_has_run_0_ms():
    assert reading_after(0).running_ms == 0
    assert reading_after(0).spent == Decimal("0.0000")


def test_spent_is_capped_by_the_credit_constraint():
    # 120 s of Basic1x8 cost 2 credits; the job's cap is 1.
    assert reading_after(120, credit_constraint=Decimal("1")).spent == Decimal("1")


def test_a_job_not_running_is_read_as_it_is():
    job = make_job(status=JobStatus.STARTING, credits_spent=Decimal("0.2500"))
    reading = read_meter(job, STARTED)
    assert reading.job is job
    assert reading.spent == Decimal("0.2500")


def test_a_running_job_whose_start_time_is_unknown_has_spent_nothing_new():
    job = make_job(status=JobStatus.RUNNING, started_at=None, credits_spent=Decimal("0.1000"))
    reading = read_meter(job, STARTED + timedelta(hours=1))
    assert (reading.job, reading.running_ms, reading.spent, reading.cap_reached) == (
        job,
        0,
        Decimal("0.1000"),
        None,
    )


# -- arrays -------------------------------------------------------------------------------------------
def array_parent(**overrides):
    fields = {
        "type": JobType.ARRAY,
        "status": JobStatus.RUNNING,
        "started_at": STARTED,
        "array_size": 10,
        "credits_settled": Decimal("3.0000"),
        "credits_spent": Decimal("3.0000"),
    }
    return make_job(**(fields | overrides))


def child_reading(seconds, **overrides):
    return reading_after(
        seconds, type=JobType.ARRAY_CHILD, parent_job_id="job-01JDXYZ0000000000000000000", **overrides
    )


def test_an_array_spends_its_settled_children_plus_its_running_ones():
    reading = read_array_meter(array_parent(), [child_reading(30), child_reading(60)])
    # 30 s and 60 s of Basic1x8: 0.5 + 1.0 credits on top of the 3 settled.
    assert (reading.spent, reading.cap_reached) == (Decimal("4.5000"), None)


def test_an_array_at_its_cap_is_stopped_as_a_whole_and_its_spend_never_shows_past_it():
    reading = read_array_meter(
        array_parent(credit_constraint=Decimal("4")), [child_reading(60), child_reading(60)]
    )
    assert (reading.spent, reading.cap_reached) == (Decimal("4"), "CreditConstraint of 4 credits reached")


def test_a_childs_own_reading_ignores_the_arrays_cap_but_keeps_its_time_cap():
    child = child_reading(600, credit_constraint=Decimal("1"), time_constraint=300)
    assert (child.spent, child.cap_reached) == (Decimal("10.0000"), "TimeConstraint of 300 s reached")


def test_the_balance_counts_running_children_not_their_parent():
    parent = read_meter(array_parent(credits_spent=Decimal("100")), STARTED + timedelta(seconds=60))
    assert parent.spent == Decimal("100")
    assert balance_exhausted(Decimal("1.5"), [parent, child_reading(60)]) is False
    assert balance_exhausted(Decimal("1.0"), [parent, child_reading(60)]) is True
