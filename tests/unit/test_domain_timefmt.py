"""API times (ISO 8601 UTC with Z), the sortable stored form, and query-string times."""

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from functions.domain.errors import ValidationFailed
from functions.domain.timefmt import from_sortable, parse_query_time, to_api_time, to_sortable

# Aware datetimes in any fixed offset, kept in years where job times live.
aware_times = st.builds(
    lambda naive, minutes: naive.replace(tzinfo=timezone(timedelta(minutes=minutes))),
    st.datetimes(min_value=datetime(2000, 1, 2), max_value=datetime(2199, 12, 30)),
    st.integers(min_value=-14 * 60, max_value=14 * 60),
)


def test_to_api_time_is_utc_with_z_and_seconds():
    value = datetime(2026, 11, 29, 19, 20, 5, 987654, tzinfo=timezone(timedelta(hours=2)))

    assert to_api_time(value) == "2026-11-29T17:20:05Z"


def test_to_api_time_of_none_is_none():
    assert to_api_time(None) is None


def test_to_sortable_has_milliseconds_and_z():
    value = datetime(2026, 11, 29, 17, 20, 0, 7000, tzinfo=UTC)

    assert to_sortable(value) == "2026-11-29T17:20:00.007Z"


@given(aware_times, aware_times)
def test_sortable_strings_sort_like_times(a, b):
    if a <= b:
        assert to_sortable(a) <= to_sortable(b)
    if to_sortable(a) < to_sortable(b):
        assert a < b
    assert len(to_sortable(a)) == len(to_sortable(b)) == 24


@given(aware_times)
def test_sortable_round_trip_keeps_milliseconds(value):
    back = from_sortable(to_sortable(value))

    assert back.tzinfo is not None
    assert back.utcoffset() == timedelta(0)
    assert back == value.replace(microsecond=value.microsecond // 1000 * 1000)


@given(aware_times)
def test_api_time_round_trip_keeps_seconds(value):
    text = to_api_time(value)

    assert text is not None
    assert text.endswith("Z")
    assert from_sortable(text) == value.replace(microsecond=0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-29T17:20:00Z", datetime(2026, 11, 29, 17, 20, tzinfo=UTC)),
        ("2026-11-29T17:20:00.250Z", datetime(2026, 11, 29, 17, 20, 0, 250000, tzinfo=UTC)),
        ("2026-11-29T17:20:00+00:00", datetime(2026, 11, 29, 17, 20, tzinfo=UTC)),
        ("2026-11-29T19:20:00+02:00", datetime(2026, 11, 29, 17, 20, tzinfo=UTC)),
        ("2026-11-29T12:20:00-05:00", datetime(2026, 11, 29, 17, 20, tzinfo=UTC)),
        # A "+" in a query string arrives decoded as a space.
        ("2026-11-29T19:20:00 02:00", datetime(2026, 11, 29, 17, 20, tzinfo=UTC)),
        ("2026-11-29T17:20:00", datetime(2026, 11, 29, 17, 20, tzinfo=UTC)),
        ("2026-11-29", datetime(2026, 11, 29, tzinfo=UTC)),
        ("  2026-11-29T17:20:00Z  ", datetime(2026, 11, 29, 17, 20, tzinfo=UTC)),
    ],
)
def test_parse_query_time_accepts_iso_forms(text, expected):
    parsed = parse_query_time(text, "since")

    assert parsed == expected
    assert parsed.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "text", ["", "yesterday", "Zulu", "2026-13-01T00:00:00Z", "2026-11-31", "17:20", "1764436800", "now"]
)
def test_parse_query_time_rejects_junk_naming_the_field(text):
    with pytest.raises(ValidationFailed) as caught:
        parse_query_time(text, "from")

    assert caught.value.field == "from"
    assert "from" in caught.value.message


@pytest.mark.parametrize("text", ["0001-01-01T00:01:47.398+13:42", "9999-12-31T23:59:59-05:00"])
def test_a_time_whose_offset_leaves_the_years_1_to_9999_in_utc_is_refused_naming_the_field(text):
    with pytest.raises(ValidationFailed, match="since is out of range") as raised:
        parse_query_time(text, "since")
    assert raised.value.field == "since"
