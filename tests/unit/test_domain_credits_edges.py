"""``parse_credits`` at its edges and in its words (mutants `make mutation` found surviving)."""

from decimal import Decimal

import pytest

from functions.domain.credits import MAX_CREDITS, parse_credits
from functions.domain.errors import ValidationFailed


def test_the_largest_amount_is_just_below_10_to_the_11():
    assert parse_credits("99999999999.9999", "credits") == Decimal("99999999999.9999")
    with pytest.raises(ValidationFailed) as caught:
        parse_credits(MAX_CREDITS, "credits")
    assert str(caught.value) == "credits must be less than 100,000,000,000 credits, got 100000000000."
    with pytest.raises(ValidationFailed) as caught:
        parse_credits(Decimal("1E+12"), "credits")
    assert str(caught.value) == "credits must be less than 100,000,000,000 credits, got 1000000000000."


def test_a_bad_amount_is_told_with_the_field_and_the_value():
    with pytest.raises(ValidationFailed) as caught:
        parse_credits("-1", "creditConstraint")
    assert str(caught.value) == "creditConstraint must be a positive number of credits, got '-1'."
    assert caught.value.field == "creditConstraint"


def test_a_bad_decimal_amount_is_told_as_credits_not_as_a_repr():
    with pytest.raises(ValidationFailed) as caught:
        parse_credits(Decimal("-2.50"), "credits")
    assert str(caught.value) == "credits must be a positive number of credits, got -2.5."


def test_too_many_decimal_places_are_told_with_the_value():
    with pytest.raises(ValidationFailed) as caught:
        parse_credits("1.00001", "credits")
    assert str(caught.value) == "credits has more than 4 decimal places: 1.00001."
    assert caught.value.field == "credits"
