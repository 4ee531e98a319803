"""Local wall-clock times as instants, across daylight-saving changes (the daily schedules' rule).

A wall-clock time of a day in an IANA zone is one of three kinds:

- it exists once: that instant;
- it is skipped (spring forward, ``Europe/Berlin`` 2026-03-29 02:00-02:59): the next valid instant,
  which is the change itself (03:00 CEST there), so every skipped time of the day falls at the same
  instant and no skipped time lands after a later valid one (``zoneinfo``'s ``fold=0`` shifts a
  skipped time forward by the gap: 02:30 would become 03:30 CEST, after a 03:15 of the same day);
- it is repeated (fall back, 02:00-02:59 twice in October): its first occurrence only (``fold=0``),
  so a boundary fires once.

So ``wall_instant`` never decreases as the wall-clock time grows within a day (a property the tests
check over every change of a year in several zones): a start and a stop keep their order. Two
boundaries at the same instant are ordered by their wall-clock time (``WallBoundary``), so a skipped
02:00 start and a 03:00 stop never swap: the stop comes last.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time
from zoneinfo import ZoneInfo


def _wall(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


def wall_instant(day: date, at: time, zone: ZoneInfo) -> datetime:
    """The UTC instant of wall-clock ``at`` on ``day`` in ``zone``: itself, the change's instant
    when the change skips it, the first occurrence when the change repeats it."""
    naive = datetime.combine(day, at)
    first = naive.replace(tzinfo=zone, fold=0).astimezone(UTC)
    if _wall(first, zone) == naive:
        return first
    # Skipped: the change lies between the two readings of the time (fold=1 reads it with the offset
    # after the change, the earlier instant; fold=0 with the offset before it, the later one). The
    # change is the first whole second from which the wall clock reads ``naive`` or later.
    low = int(naive.replace(tzinfo=zone, fold=1).timestamp())
    high = int(first.timestamp())
    while high - low > 1:  # whole seconds since the epoch: wall(low) < naive <= wall(high)
        middle = (low + high) // 2
        if _wall(datetime.fromtimestamp(middle, UTC), zone) >= naive:
            high = middle
        else:
            low = middle
    return datetime.fromtimestamp(high, UTC)
