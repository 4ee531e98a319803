"""Daily compute schedules across every daylight-saving change of 2026 in several zones (issue 22
item 12): a skipped wall-clock time falls at the next valid instant (the change), a repeated one
fires once (its first occurrence), and a start and a stop never swap; at one instant the later of the
day wins. The reference here is brute force: the first UTC minute whose wall clock reads the time."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from functools import cache
from itertools import pairwise
from zoneinfo import ZoneInfo, available_timezones

import pytest

from functions.domain.computes import ComputeRequest, DailySchedule, Schedules, scheduled_request
from functions.domain.wall_clock import wall_instant

YEAR = 2026
# A 1-hour change each way (Europe, North America), a 30-minute one (Lord Howe), the southern
# hemisphere's, and zones without daylight saving time.
ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Pacific/Apia",
    "Asia/Kolkata",
    "UTC",
]
AVAILABLE = [zone for zone in ZONES if zone in available_timezones() or zone == "UTC"]
NO_DST = ["Asia/Kolkata", "UTC"]


def _wall(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


@cache
def transitions(name: str) -> list[datetime]:
    """Every instant of ``YEAR`` at which ``name``'s UTC offset changes (to the second; changes are
    months apart, so a day's step finds each)."""
    zone = ZoneInfo(name)
    found = []
    moment = datetime(YEAR, 1, 1, tzinfo=UTC)
    end = datetime(YEAR + 1, 1, 1, tzinfo=UTC)
    while moment < end:
        after = moment + timedelta(days=1)
        if moment.astimezone(zone).utcoffset() != after.astimezone(zone).utcoffset():
            before = moment.astimezone(zone).utcoffset()
            low, high = int(moment.timestamp()), int(after.timestamp())
            while high - low > 1:
                middle = (low + high) // 2
                if datetime.fromtimestamp(middle, UTC).astimezone(zone).utcoffset() == before:
                    low = middle
                else:
                    high = middle
            found.append(datetime.fromtimestamp(high, UTC))
        moment = after
    return found


CHANGES = [(name, change) for name in AVAILABLE for change in transitions(name)]


def test_the_zones_tried_have_changes_of_each_kind() -> None:
    # Berlin, New York, Lord Howe and Santiago each change twice a year; the others never.
    counts = {name: len(transitions(name)) for name in AVAILABLE}
    for name in ("Europe/Berlin", "America/New_York", "Australia/Lord_Howe"):
        assert counts[name] == 2
    for name in NO_DST:
        assert counts[name] == 0


@cache
def reference(name: str, day: date) -> dict[time, datetime]:
    """Each whole minute of ``day``'s wall clock in ``name`` → the first UTC minute at which the wall
    clock reads it or later (a skipped time: the change; a repeated one: its first occurrence)."""
    zone = ZoneInfo(name)
    start = datetime.combine(day, time(0), tzinfo=UTC) - timedelta(days=1)
    minutes = [start + timedelta(minutes=i) for i in range(3 * 24 * 60)]
    walls = [_wall(m, zone) for m in minutes]
    mapping: dict[time, datetime] = {}
    i = 0  # the first minute reading a time or later moves forward as the time does
    for minute_of_day in range(24 * 60):
        wanted = datetime.combine(day, time(minute_of_day // 60, minute_of_day % 60))
        while walls[i] < wanted:
            i += 1
        mapping[wanted.time()] = minutes[i]
    return mapping


def change_day(name: str, change: datetime) -> date:
    """The local day whose wall clock the change skips or repeats (the wall clock read at the change:
    after a skip, the first valid time; after a fall back, the first repeated one)."""
    return _wall(change, ZoneInfo(name)).date()


@pytest.mark.parametrize(("name", "change"), CHANGES, ids=[f"{n}-{c:%m%d}" for n, c in CHANGES])
def test_every_wall_time_of_a_change_day_falls_at_the_next_valid_instant(name: str, change: datetime) -> None:
    zone = ZoneInfo(name)
    day = change_day(name, change)
    expected = reference(name, day)
    previous = None
    for at, instant in expected.items():
        got = wall_instant(day, at, zone)
        assert got == instant, at
        # never earlier than a wall-clock time before it: a start and a stop keep their order
        assert previous is None or got >= previous
        previous = got


def fired(schedules: Schedules, ticks: list[datetime]) -> list[tuple[datetime, ComputeRequest]]:
    """What the meter's ticks would apply: at each tick, the request of ``(previous tick, tick]``."""
    out = []
    for since, now in pairwise(ticks):
        request = scheduled_request(schedules, since, now)
        if request is not None:
            out.append((now, request))
    return out


def slots(name: str, change: datetime) -> list[time]:
    """Wall-clock times of the change's day every 30 minutes, from 90 minutes before the wall clock
    at the change to 90 after (skipped and repeated ones among them)."""
    local = _wall(change, ZoneInfo(name))
    centre = local.replace(minute=(local.minute // 30) * 30, second=0)
    around = [centre + timedelta(minutes=30 * i) for i in range(-3, 4)]
    return [moment.time() for moment in around if moment.date() == local.date()]


@pytest.mark.parametrize(("name", "change"), CHANGES, ids=[f"{n}-{c:%m%d}" for n, c in CHANGES])
def test_a_start_and_a_stop_never_swap_and_each_fires_once(name: str, change: datetime) -> None:
    day = change_day(name, change)
    expected = reference(name, day)
    ticks = [change - timedelta(hours=4) + timedelta(minutes=5 * i) for i in range(8 * 12 + 1)]
    times = slots(name, change)
    for start in times:
        for stop in times:
            if start == stop:
                continue
            schedules = Schedules(daily=(DailySchedule(start, stop, name),))

            got = fired(schedules, ticks)

            last_of_day = ComputeRequest.STOP if stop > start else ComputeRequest.START
            requests = [request for _, request in got]
            # each boundary fires at most once, the day's last one last
            assert requests.count(ComputeRequest.START) <= 1 and requests.count(ComputeRequest.STOP) <= 1
            assert requests[-1] == last_of_day, (start, stop, got)
            if expected[start] != expected[stop]:
                assert sorted(requests) == [ComputeRequest.START, ComputeRequest.STOP], (start, stop, got)
                first = ComputeRequest.START if start < stop else ComputeRequest.STOP
                assert requests[0] == first
            else:
                # both fall at the change: the later of the day wins, the other is moot
                assert requests == [last_of_day]


def test_berlin_spring_start_at_the_skipped_two_oclock_and_stop_at_three_leaves_it_stopped() -> None:
    # 2026-03-29: 02:00 does not exist in Europe/Berlin; 03:00 CEST is 01:00Z.
    schedules = Schedules(daily=(DailySchedule(time(2, 0), time(3, 0), "Europe/Berlin"),))
    change = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)

    assert wall_instant(date(2026, 3, 29), time(2, 0), ZoneInfo("Europe/Berlin")) == change
    assert scheduled_request(schedules, change - timedelta(minutes=1), change) == ComputeRequest.STOP
    assert scheduled_request(schedules, change, change + timedelta(hours=22)) is None  # until 02:00Z


def test_a_repeated_autumn_time_fires_once() -> None:
    # 2026-10-25: 02:30 happens twice in Europe/Berlin (00:30Z in CEST, 01:30Z in CET).
    schedules = Schedules(daily=(DailySchedule(time(2, 30), None, "Europe/Berlin"),))
    first = datetime(2026, 10, 25, 0, 30, tzinfo=UTC)
    ticks = [first - timedelta(hours=1) + timedelta(minutes=i) for i in range(4 * 60)]

    assert fired(schedules, ticks) == [(first, ComputeRequest.START)]


@pytest.mark.parametrize("name", NO_DST)
@pytest.mark.parametrize("day", [date(YEAR, 3, 29), date(YEAR, 10, 25), date(YEAR, 11, 1)])
def test_a_zone_without_daylight_saving_fires_both_at_their_wall_times(name: str, day: date) -> None:
    zone = ZoneInfo(name)
    schedules = Schedules(daily=(DailySchedule(time(2, 0), time(3, 0), name),))
    start = datetime.combine(day, time(2, 0), tzinfo=zone).astimezone(UTC)
    ticks = [start - timedelta(minutes=30) + timedelta(minutes=5 * i) for i in range(25)]

    assert fired(schedules, ticks) == [
        (start, ComputeRequest.START),
        (start + timedelta(hours=1), ComputeRequest.STOP),
    ]
