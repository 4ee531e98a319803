"""The text rules every validated field shares: anchored, ASCII digits, no control characters."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from functions.domain.errors import ValidationFailed
from functions.domain.text import (
    E164_PATTERN,
    EMAIL_PATTERN,
    JOB_ID_PATTERN,
    MAX_ARG_BYTES,
    check_argv,
    first_surrogate_path,
    full_match,
    is_ascii_digits,
)

# Digits that are not 0-9 but that \d, str.isdigit and int() take: Arabic-Indic, full-width, Devanagari.
UNICODE_DIGITS = "٠١٢٣٤٥٦٧٨٩０１２３４５６７８９०१२"


@pytest.mark.parametrize(
    ("text", "valid"),
    [("+15555550100", True), ("+1٥٥٥٥٥٥٠١٠٠", False), ("+15555550100\n", False), ("+1５５５5550100", False)],
)
def test_phone_is_e164_in_ascii_digits_only(text, valid):
    assert full_match(E164_PATTERN, text) is valid


@given(st.text(alphabet=UNICODE_DIGITS, min_size=1, max_size=14))
def test_no_unicode_digit_passes_a_digit_rule(digits):
    assert not is_ascii_digits(digits)
    assert not full_match(E164_PATTERN, "+1" + digits)


@given(st.sampled_from(["\n", "\r\n", "\x00", "\x1f", "\x85", "\u2028"]))
def test_a_trailing_line_break_or_control_never_passes(tail):
    for pattern, good in [
        (E164_PATTERN, "+15555550100"),
        (EMAIL_PATTERN, "a@example.com"),
        (JOB_ID_PATTERN, "job-01M8QHWTTNJ243SKQ4SRSXXQFN"),
    ]:
        assert full_match(pattern, good)
        assert not full_match(pattern, good + tail)
    assert not is_ascii_digits("12" + tail)


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["echo", "a\x00b"], "command[1]"),
        (["echo", "a\ud800b"], "command[1]"),
        (["echo", "x" * (MAX_ARG_BYTES + 1)], "command[1]"),
        (["echo", "é" * (MAX_ARG_BYTES // 2 + 1)], "command[1]"),  # bytes, not characters
        ([""], "command[0]"),
        ([], "command"),
        (["echo", *(["x" * 100_000] * 11)], "command"),  # over 1 MiB in all
    ],
)
def test_argv_a_process_cannot_take_is_refused_naming_the_argument(argv, field):
    with pytest.raises(ValidationFailed) as caught:
        check_argv(argv)
    assert caught.value.field == field


def test_argv_with_newlines_tabs_and_any_script_is_a_valid_argv():
    check_argv(["python3", "-c", "import sys\n\tprint(sys.argv)", "٥", "日本語", "x" * MAX_ARG_BYTES])


def test_the_first_lone_surrogate_is_found_by_its_json_path():
    document = {"code": "1", "command": ["ok", "a\udc80"], "notifications": [{"events": ["\ud800"]}]}
    assert first_surrogate_path(document) == "command[1]"
    assert (
        first_surrogate_path({"notifications": [{"events": ["x", "\ud800"]}]}) == "notifications[0].events[1]"
    )
    assert first_surrogate_path({"a\udfff": 1}) == "a\udfff"
    assert first_surrogate_path({"code": "😀 (a pair, not a lone surrogate)"}) is None
