"""Per-item reports of containers that take many items (untrusted) and the exact charge split."""

import json
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.domain.item_reports import (
    MAX_LOG_LINES,
    MAX_REASON_CHARS,
    ReportRejected,
    parse_item_report,
    settle_container,
    split_charge,
)

START, STOP = 1_764_676_800_000, 1_764_676_900_000


def _report(**changes: object) -> bytes:
    document = {
        "index": 3,
        "startedAt": START + 1_000,
        "stoppedAt": START + 2_500,
        "exitCode": 0,
        "status": "Succeeded",
        "reason": None,
        "logFirst": 10,
        "logCount": 2,
        **changes,
    }
    return json.dumps(document).encode()


def _parse(raw: bytes):
    return parse_item_report(raw, array_size=10, container_started_ms=START, container_stopped_ms=STOP)


def test_a_good_report_is_taken_as_written() -> None:
    report = _parse(_report())
    assert (report.index, report.ran_ms, report.succeeded, report.reason) == (3, 1_500, True, None)
    assert (report.log_first, report.log_count) == (10, 2)


def test_times_are_clamped_into_the_containers_life() -> None:
    # Given a report claiming to have run from long before the container started to long after it ended
    report = _parse(_report(startedAt=0, stoppedAt=STOP + 10**9))
    # Then its time is the container's whole life, no more
    assert (report.started_at_ms, report.stopped_at_ms) == (START, STOP)
    backwards = _parse(_report(startedAt=START + 5_000, stoppedAt=START + 1_000))
    assert backwards.ran_ms == 0


def test_a_failed_items_reason_is_kept_on_one_line_and_cut() -> None:
    report = _parse(_report(status="Failed", exitCode=1, reason="boom\n" + "x" * 2000))
    assert report.succeeded is False
    assert report.reason is not None and report.reason.startswith("boom x")
    assert len(report.reason) == MAX_REASON_CHARS


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff",
        b"[]",
        b"{" + b" " * 9000 + b"}",
        _report(index=10),
        _report(index=-1),
        _report(index=True),
        _report(exitCode=256),
        _report(startedAt="soon"),
        _report(status="Running"),
        _report(status="Succeeded", exitCode=1),
        _report(reason=7),
        _report(extra=1),
        json.dumps({"index": 1}).encode(),
    ],
)
def test_bad_reports_are_rejected(raw: bytes) -> None:
    with pytest.raises(ReportRejected):
        _parse(raw)


def test_the_split_follows_the_times_and_the_remainder_rule() -> None:
    # 1 credit over three equal items: 0.3333 each; the quantum left goes to the first (ties: lower position)
    assert split_charge(Decimal("1.0000"), [5, 5, 5]) == [
        Decimal("0.3334"),
        Decimal("0.3333"),
        Decimal("0.3333"),
    ]
    assert split_charge(Decimal("1.0000"), [3_000, 1_000]) == [Decimal("0.7500"), Decimal("0.2500")]
    # Items that all report 0 ms share equally
    assert split_charge(Decimal("0.0002"), [0, 0, 0]) == [
        Decimal("0.0001"),
        Decimal("0.0001"),
        Decimal("0.0000"),
    ]


@pytest.mark.parametrize(
    ("charge", "weights"),
    [(Decimal("1.00001"), [1]), (Decimal("-1"), [1]), (Decimal(1), []), (Decimal(1), [-1])],
)
def test_bad_splits_are_refused(charge: Decimal, weights: list[int]) -> None:
    with pytest.raises(ValueError, match=r"charge|item"):
        split_charge(charge, weights)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=0, max_value=10**9).map(lambda q: Decimal(q) * Decimal("0.0001")),
    st.lists(st.integers(min_value=0, max_value=10**8), min_size=1, max_size=50),
)
def test_the_parts_sum_to_the_charge_exactly(charge: Decimal, weights: list[int]) -> None:
    parts = split_charge(charge, weights)
    assert sum(parts, Decimal(0)) == charge
    assert all(p >= 0 and p == p.quantize(Decimal("0.0001")) for p in parts)
    total = sum(weights) or len(weights)
    for part, weight in zip(parts, weights if sum(weights) else [1] * len(weights), strict=True):
        # Each part is within one quantum of its exact proportional share
        assert abs(part - charge * weight / total) < Decimal("0.0001")


def test_a_dead_containers_held_item_fails_with_its_reason_and_shares_the_charge() -> None:
    # Given a container that reported items 0 and 2, then died (memory) holding item 4
    reports = [
        _report(index=0, startedAt=START, stoppedAt=START + 1_000, logFirst=0, logCount=1),
        _report(index=2, startedAt=START + 1_000, stoppedAt=START + 2_000, logFirst=1, logCount=1),
        _report(index=2, startedAt=START, stoppedAt=STOP),  # a second report of item 2: refused
        b"not json",
    ]
    settled = settle_container(
        reports,
        [4],
        array_size=10,
        started_ms=START,
        stopped_ms=START + 4_000,
        charge=Decimal("1.0000"),
        end_reason="Memory limit of 8 GiB exceeded",
    )
    # Then the held item failed with the container's reason and ran from the last report to its end
    assert [(i.index, i.succeeded, i.reason) for i in settled.items] == [
        (0, True, None),
        (2, True, None),
        (4, False, "Memory limit of 8 GiB exceeded"),
    ]
    assert [i.credits for i in settled.items] == [Decimal("0.2500"), Decimal("0.2500"), Decimal("0.5000")]
    assert settled.rejected == 2
    assert (settled.items[2].log_first, settled.items[2].log_count) == (2, MAX_LOG_LINES)


def test_forged_times_cannot_change_the_containers_total() -> None:
    reports = [_report(index=i, startedAt=0, stoppedAt=2**53) for i in range(3)]
    settled = settle_container(
        reports,
        [],
        array_size=10,
        started_ms=START,
        stopped_ms=STOP,
        charge=Decimal("2.0000"),
        end_reason="x",
    )
    assert sum(i.credits for i in settled.items) == Decimal("2.0000")
    assert all(i.stopped_at_ms - i.started_at_ms == STOP - START for i in settled.items)


def test_a_container_that_ran_nothing_settles_no_item() -> None:
    settled = settle_container(
        [], [], array_size=3, started_ms=START, stopped_ms=STOP, charge=Decimal("1.0000"), end_reason="x"
    )
    assert settled.items == ()
