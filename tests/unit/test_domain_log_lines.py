"""Joining the awslogs driver's parts of a long line, and the service's own line limit."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from functions.domain.limits import base64_bytes, presigned_seconds, wire_bytes
from functions.domain.log_lines import (
    AWSLOGS_PART_BYTES,
    CUT_MARKER,
    MAX_LINE_BYTES,
    MAX_LINE_WIRE_BYTES,
    PartJoiner,
    cut_line,
    event_cost,
    is_continued_part,
)

T = datetime(2026, 11, 29, 17, 20, tzinfo=UTC)


@dataclass(frozen=True)
class Event:
    timestamp: datetime
    message: str


def split(line: str, at: datetime) -> list[Event]:
    data = line.encode()
    parts, start = [], 0
    while start < len(data):
        end = min(start + AWSLOGS_PART_BYTES, len(data))
        while end < len(data) and (data[end] & 0xC0) == 0x80:  # a UTF-8 boundary, as awslogs cuts
            end -= 1
        parts.append(Event(at, data[start:end].decode()))
        start = end
    return parts


def lines(events, **kwargs):
    joiner = PartJoiner(events, **kwargs)
    return list(iter(lambda: joiner.next_line(64), None))


def test_parts_of_one_line_are_joined_and_other_lines_stay_apart():
    long = "B" * 300_000
    accented = "€" * 100_000  # 300,000 bytes: awslogs cuts before a character, 2 bytes short
    events = [Event(T, "a"), *split(long, T), *split(accented, T), Event(T, "b")]
    assert len(split(accented, T)[0].message.encode()) == AWSLOGS_PART_BYTES - 2
    got = lines(events)
    assert [(line.message, line.parts, line.cut) for line in got] == [
        ("a", 1, False),
        (long, 2, False),
        (accented, 2, False),
        ("b", 1, False),
    ]


def test_a_full_size_line_followed_in_another_millisecond_is_not_joined():
    full = "F" * AWSLOGS_PART_BYTES
    got = lines([Event(T, full), Event(T + timedelta(milliseconds=1), "next")])
    assert [line.message for line in got] == [full, "next"]


@pytest.mark.parametrize(
    ("size", "continued"),
    [
        (AWSLOGS_PART_BYTES, True),
        (AWSLOGS_PART_BYTES - 3, True),
        (AWSLOGS_PART_BYTES - 4, False),
        (10, False),
    ],
)
def test_continued_part_sizes(size, continued):
    assert is_continued_part("x" * size) is continued


def test_a_line_over_1_mib_is_cut_marked_and_its_other_parts_dropped():
    huge = "H" * (3 * 1024 * 1024)
    got = lines([*split(huge, T), Event(T, "same ms")])
    assert got[0].message == "H" * MAX_LINE_BYTES + CUT_MARKER
    assert got[0].cut is True
    assert got[0].parts == len(split(huge, T))
    assert got[1].message == "same ms"


def test_dropping_is_bounded_and_resumes():
    huge = "H" * (3 * 1024 * 1024)  # 13 parts: 5 kept, 8 to drop
    events = [*split(huge, T), Event(T, "after")]
    joiner = PartJoiner(events)
    first = joiner.next_line(3)
    assert first is not None and first.cut and joiner.dropping
    assert joiner.consumed == 8
    assert joiner.drop_continuation(3) is False
    assert joiner.drop_continuation(3) is True
    assert joiner.consumed == 13
    after = joiner.next_line(3)
    assert after is not None and after.message == "after"
    # A new reader that starts inside the cut line (a page's token) drops the rest first.
    resumed = PartJoiner(events[10:], dropping=True)
    assert resumed.drop_continuation(64) is True
    assert [line.message for line in iter(lambda: resumed.next_line(64), None)] == ["after"]


def test_a_line_of_control_characters_is_cut_to_its_wire_budget():
    text, cut = cut_line("\x01" * (900 * 1024))
    assert cut and text.endswith(CUT_MARKER)
    assert event_cost(text) <= MAX_LINE_WIRE_BYTES
    assert cut_line("plain") == ("plain", False)


def test_wire_bytes_is_what_json_escaping_makes_of_a_string():
    assert wire_bytes("ab") == 4
    assert wire_bytes('"') == 4
    assert wire_bytes("é") == len(json.dumps("é")) == 8
    assert event_cost('"') == wire_bytes(json.dumps('"')) + 96
    assert base64_bytes(0) == 0
    assert base64_bytes(4) == 8


@pytest.mark.parametrize(
    ("left", "expected"),
    [
        (timedelta(days=14), 900),
        (timedelta(seconds=901), 900),
        (timedelta(seconds=300), 300),
        (timedelta(seconds=300, milliseconds=999), 300),
        (timedelta(milliseconds=10), 1),
    ],
)
def test_a_presigned_url_never_outlives_expires_at(left, expected):
    assert presigned_seconds(T + left, T) == expected
