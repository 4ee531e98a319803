"""The credit charge rule (docs/architecture.md "Credits"): exact Decimal money, half-up to 4 places."""

import math
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from functions.domain.credits import (
    billable_seconds,
    parse_credits,
    quantize_credits,
    running_cost,
    settle_charge,
    spent_so_far,
)
from functions.domain.errors import ValidationFailed
from functions.domain.machine_classes import MACHINE_CLASSES

BASIC1X8 = MACHINE_CLASSES["Basic1x8"].credits_per_hour
RATES = [mc.credits_per_hour for mc in MACHINE_CLASSES.values()]

rates = st.sampled_from(RATES)
running_ms = st.integers(min_value=0, max_value=10**12)  # up to ~31 years of Running time
# Credit amounts as the API accepts them: at most 4 decimal places.
amounts = st.integers(min_value=0, max_value=10**12).map(lambda n: Decimal(n).scaleb(-4))
positive_amounts = st.integers(min_value=1, max_value=10**12).map(lambda n: Decimal(n).scaleb(-4))


def reference_cost(ms: int, rate: Decimal) -> Decimal:
    """The rule computed independently, in exact fractions, rounded half-up to 4 places."""
    seconds = max(math.ceil(Fraction(ms, 1000)), 60)
    exact = Fraction(seconds) * Fraction(rate) / 3600
    ten_thousandths = math.floor(exact * 10000 + Fraction(1, 2))
    return Decimal(ten_thousandths).scaleb(-4)


def assert_money(value: Decimal, expected: str) -> None:
    assert isinstance(value, Decimal)
    assert value == Decimal(expected)
    assert value.as_tuple().exponent == -4


@pytest.mark.parametrize(
    ("ms", "expected"),
    [
        (0, "1.0000"),
        (1, "1.0000"),
        (59_001, "1.0000"),
        (60_000, "1.0000"),
        (60_001, "1.0167"),  # ceil to 61 s
        (61_000, "1.0167"),  # 61 × 60 / 3600 = 1.01666… → 1.0167
        (3_600_000, "60.0000"),
    ],
)
def test_basic1x8_cost(ms, expected):
    assert_money(running_cost(ms, BASIC1X8), expected)


def test_shortest_basic1x8_job_costs_exactly_one_credit():
    charge = settle_charge(1, BASIC1X8, None, Decimal("100.0000"))

    assert_money(charge.credits, "1.0000")
    assert_money(charge.cost, "1.0000")
    assert_money(charge.unbilled, "0.0000")


@pytest.mark.parametrize(
    ("ms", "seconds"),
    [(-5_000, 60), (0, 60), (1, 60), (59_999, 60), (60_000, 60), (60_001, 61), (61_000, 61), (61_001, 62)],
)
def test_billable_seconds_round_up_with_a_60_second_minimum(ms, seconds):
    assert billable_seconds(ms) == seconds


def test_basic2x8_90_seconds_is_exact():
    # 90 s × 90 / 3600 = 2.25; 61 s = 1.525, both exact at 4 places.
    assert_money(running_cost(90_000, MACHINE_CLASSES["Basic2x8"].credits_per_hour), "2.2500")
    assert_money(running_cost(61_000, MACHINE_CLASSES["Basic2x8"].credits_per_hour), "1.5250")


def test_a_fifth_decimal_of_5_rounds_up_on_a_real_class():
    # Given the first (class, seconds) whose exact cost has 5 in the 5th decimal place
    found = None
    for name, mc in MACHINE_CLASSES.items():
        for seconds in range(60, 4000):
            exact = Fraction(seconds) * Fraction(mc.credits_per_hour) / 3600
            if math.floor(exact * 100_000) % 10 == 5:
                found = (name, seconds, exact)
                break
        if found:
            break
    assert found is not None
    name, seconds, exact = found
    # When it is charged
    cost = running_cost(seconds * 1000, MACHINE_CLASSES[name].credits_per_hour)
    # Then it rounds up at the 4th place (not truncated)
    truncated = Decimal(math.floor(exact * 10_000)).scaleb(-4)
    assert cost == truncated + Decimal("0.0001")
    assert cost.as_tuple().exponent == -4


def test_exact_half_rounds_up_not_to_even():
    # 60 s at 60.003 credits/hour = 1.00005 exactly: half-even would give 1.0000.
    assert_money(running_cost(60_000, Decimal("60.003")), "1.0001")
    # 60 s at 60.009/h = 1.00015: half-down would give 1.0001.
    assert_money(running_cost(60_000, Decimal("60.009")), "1.0002")


@pytest.mark.parametrize(
    ("amount", "expected"),
    [
        ("0.00005", "0.0001"),
        ("0.00004999", "0.0000"),
        ("2.50025", "2.5003"),
        ("2.50015", "2.5002"),
        ("1", "1.0000"),
        ("1.23456", "1.2346"),
    ],
)
def test_quantize_credits_half_up(amount, expected):
    assert_money(quantize_credits(Decimal(amount)), expected)


@given(running_ms, rates)
@example(61_000, BASIC1X8)
def test_running_cost_matches_exact_reference(ms, rate):
    cost = running_cost(ms, rate)

    assert cost == reference_cost(ms, rate)
    assert cost.as_tuple().exponent == -4


def test_cost_of_one_second_of_memory192x1536_is_the_minute_minimum():
    # 60 s × 11500 / 3600 = 191.666… → 191.6667
    assert_money(running_cost(1_000, MACHINE_CLASSES["Memory192x1536"].credits_per_hour), "191.6667")


def test_settle_charge_is_capped_by_credit_constraint():
    # Given one hour of Basic1x8 (60 credits) and a cap of 50
    charge = settle_charge(3_600_000, BASIC1X8, Decimal("50.0000"), Decimal("1000.0000"))

    assert_money(charge.credits, "50.0000")
    assert_money(charge.cost, "60.0000")
    # The cap is what the user asked for: nothing is unbilled.
    assert_money(charge.unbilled, "0.0000")


def test_settle_charge_is_capped_by_balance_and_records_unbilled():
    charge = settle_charge(3_600_000, BASIC1X8, None, Decimal("12.3456"))

    assert_money(charge.credits, "12.3456")
    assert_money(charge.cost, "60.0000")
    assert_money(charge.unbilled, "47.6544")


def test_settle_charge_with_both_caps_takes_the_smaller():
    charge = settle_charge(3_600_000, BASIC1X8, Decimal("50"), Decimal("20"))

    assert_money(charge.credits, "20.0000")
    assert_money(charge.unbilled, "30.0000")


@pytest.mark.parametrize("balance", ["0", "0.0000", "-5.0000"])
def test_settle_charge_never_negative(balance):
    charge = settle_charge(3_600_000, BASIC1X8, None, Decimal(balance))

    assert_money(charge.credits, "0.0000")
    assert_money(charge.unbilled, "60.0000")


@pytest.mark.parametrize("constraint", [None, Decimal("0.5000")])
def test_settle_charge_is_zero_when_never_ran(constraint):
    charge = settle_charge(None, MACHINE_CLASSES["GPU4xL4"].credits_per_hour, constraint, Decimal("100"))

    assert_money(charge.credits, "0.0000")
    assert_money(charge.cost, "0.0000")
    assert_money(charge.unbilled, "0.0000")


@given(running_ms, rates, st.none() | positive_amounts, amounts)
def test_settle_charge_property(ms, rate, cap, balance):
    charge = settle_charge(ms, rate, cap, balance)

    cost = reference_cost(ms, rate)
    capped = cost if cap is None else min(cost, cap)
    assert charge.cost == cost
    assert charge.credits == min(capped, balance)
    assert Decimal(0) <= charge.credits <= balance
    if cap is not None:
        assert charge.credits <= cap
    assert charge.credits.as_tuple().exponent == -4
    assert charge.unbilled == capped - charge.credits
    assert charge.unbilled >= 0


@given(running_ms, running_ms, rates, st.none() | positive_amounts)
def test_spent_so_far_is_monotone_and_capped(a, b, rate, cap):
    earlier, later = sorted((a, b))

    spent_earlier = spent_so_far(earlier, rate, cap)
    spent_later = spent_so_far(later, rate, cap)

    assert spent_earlier <= spent_later
    if cap is not None:
        assert spent_later <= cap
    else:
        # In flight there is no 60-second minimum: ceil(seconds) × rate / 3600, half-up.
        exact = Decimal(math.ceil(later / 1000)) * rate / Decimal(3600)
        assert spent_later == exact.quantize(Decimal("0.0001"), rounding=ROUND_HALF_UP)


def test_spent_so_far_reaches_the_cap_exactly():
    assert spent_so_far(3_600_000, BASIC1X8, Decimal("50.0000")) == Decimal("50.0000")
    assert_money(spent_so_far(61_000, BASIC1X8, Decimal("50.0000")), "1.0167")


def test_spent_so_far_has_no_60_second_minimum():
    # 3 s of Basic1x8 is 0.05 credits: a 0.05 creditConstraint is reached 3 s in, not at once.
    assert_money(spent_so_far(2_001, BASIC1X8, None), "0.0500")
    assert_money(spent_so_far(3_000, BASIC1X8, None), "0.0500")
    assert_money(spent_so_far(1, BASIC1X8, None), "0.0167")
    assert_money(spent_so_far(0, BASIC1X8, None), "0.0000")


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1, "1.0000"), ("0.0001", "0.0001"), (Decimal("20000"), "20000.0000"), ("12.5", "12.5000")],
)
def test_parse_credits_accepts_positive_amounts(value, expected):
    assert_money(parse_credits(value, "credits"), expected)


@pytest.mark.parametrize(
    "value",
    [
        0,
        "0",
        "0.0000",
        -1,
        "-1",
        "-0.0001",
        "NaN",
        "sNaN",
        "Infinity",
        "-Infinity",
        "1.00001",
        "0.00001",
        "abc",
        "",
    ],
)
def test_parse_credits_rejects_bad_amounts_naming_the_field(value):
    with pytest.raises(ValidationFailed) as caught:
        parse_credits(value, "creditConstraint")

    assert caught.value.field == "creditConstraint"
