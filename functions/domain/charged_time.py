"""The rule every charge's time obeys: a job's charged interval lies inside its own life.

A job lives from its submission to the arrival of the event that reports its end (or, for a running
job, to the meter's tick; for a job a crashed local stack left unfinished, to the crash). AWS Batch
sends ``startedAt`` and ``stoppedAt`` from its own clocks, and a time can be wrong: before the job
was submitted, after the event that carries it arrived, a stop before its start, or missing. Such a
time is never trusted: it is clamped into the window ``[submission, arrival]`` and reported as a
``TimeCorrection`` (the caller logs it), so a charge can never cover time outside the job's life.

Times are milliseconds since the epoch, as AWS Batch sends them. Pure: the window's ends are passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def epoch_ms(moment: datetime) -> int:
    """``moment`` in whole milliseconds since the epoch, rounded down (exact: no float on the way, so
    a time stored at millisecond precision reads back as the same number)."""
    return (moment - _EPOCH) // _MS


class Cause(StrEnum):
    """Why a time was not taken as sent."""

    BEFORE_SUBMISSION = "before the job's submission"
    AFTER_ARRIVAL = "after the event's arrival"
    STOP_BEFORE_START = "stop before start"
    MISSING = "missing"


@dataclass(frozen=True, slots=True)
class TimeCorrection:
    """One time that was not taken as sent: ``field`` (``startedAt``, ``stoppedAt``), what was sent
    (None: nothing), what is used instead, and why."""

    field: str
    given_ms: int | None
    used_ms: int
    cause: Cause


@dataclass(frozen=True, slots=True)
class Window:
    """A job's life in ms: from ``opens_ms`` (its submission) to ``closes_ms`` (the event's arrival,
    never before the opening: a clock that puts the arrival first leaves a window of no length)."""

    opens_ms: int
    closes_ms: int

    @classmethod
    def of(cls, submitted_at: datetime, arrived_at: datetime) -> Window:
        """The window from ``submitted_at`` to ``arrived_at``."""
        return cls.from_ms(epoch_ms(submitted_at), epoch_ms(arrived_at))

    @classmethod
    def from_ms(cls, submitted_ms: int, arrived_ms: int) -> Window:
        """The window from ``submitted_ms`` to ``arrived_ms`` (ms since the epoch)."""
        return cls(submitted_ms, max(submitted_ms, arrived_ms))

    def clamp(self, field: str, ms: int) -> tuple[int, TimeCorrection | None]:
        """``ms`` moved into the window, with the correction when it had to move."""
        if ms < self.opens_ms:
            return self.opens_ms, TimeCorrection(field, ms, self.opens_ms, Cause.BEFORE_SUBMISSION)
        if ms > self.closes_ms:
            return self.closes_ms, TimeCorrection(field, ms, self.closes_ms, Cause.AFTER_ARRIVAL)
        return ms, None


@dataclass(frozen=True, slots=True)
class AttemptTimes:
    """An attempt's start and stop in ms, both inside the window and the stop never before the start
    (``started_ms`` None: the attempt never ran; ``stopped_ms`` None: it has not ended), and the
    corrections made to reach them."""

    started_ms: int | None
    stopped_ms: int | None
    corrections: tuple[TimeCorrection, ...] = ()

    @property
    def running_ms(self) -> int | None:
        """The charged Running time (``stopped - started``), None unless the attempt ran and ended."""
        if self.started_ms is None or self.stopped_ms is None:
            return None
        return self.stopped_ms - self.started_ms


def running_start(window: Window, started_ms: int | None) -> AttemptTimes:
    """The start of a running attempt (a RUNNING event's ``startedAt``), clamped into ``window``."""
    if started_ms is None:
        return AttemptTimes(None, None)
    started, correction = window.clamp("startedAt", started_ms)
    return AttemptTimes(started, None, (correction,) if correction else ())


def ended_attempt(submitted_ms: int, started_ms: int | None, ended_ms: int) -> AttemptTimes:
    """An attempt that ended by ``ended_ms`` (a crash, as last recorded), for the event that settles
    it: from its start, never before the submission, to ``ended_ms``, never before the start (a
    record of the crash can predate a start by the second it is rewritten in). No start, no run.
    The event's handler then clamps both into ``[submission, arrival]`` (``final_attempt_times``)."""
    if started_ms is None:
        return AttemptTimes(None, None)
    window = Window.from_ms(submitted_ms, max(ended_ms, started_ms))
    return final_attempt_times(window, started_ms, ended_ms)


def final_attempt_times(
    window: Window,
    started_ms: int | None,
    stopped_ms: int | None,
    *,
    known_start_ms: int | None = None,
    observed_ms: int | None = None,
) -> AttemptTimes:
    """The start and stop of an attempt that ended, inside ``window``.

    Parameters
    ----------
    window : Window
        The job's life: submission to the arrival of the final event.
    started_ms, stopped_ms : int | None
        The event's ``startedAt`` / ``stoppedAt`` (None: missing).
    known_start_ms : int | None
        The start of this attempt the job already knows (its RUNNING event's), if any.
    observed_ms : int | None
        The event's own time (EventBridge's ``time``, or when DescribeJobs answered).

    Returns
    -------
    AttemptTimes
        The start is the event's, else the known one (None: the attempt never ran, nothing to
        charge); the stop is the event's, else the event's time, else the arrival. A stop before the
        start takes the known start when that is not after the stop (the RUNNING event agrees with
        the stop: the final event's start is off), else the event's time when that is not before
        the start, else the start. Then both are clamped into the window: never negative, never
        outside the job's life.
    """
    corrections: list[TimeCorrection] = []
    start = started_ms if started_ms is not None else known_start_ms
    if start is None:
        return AttemptTimes(None, None)
    if stopped_ms is not None:
        stop = stopped_ms
    else:
        stop = observed_ms if observed_ms is not None else window.closes_ms
        corrections.append(TimeCorrection("stoppedAt", None, stop, Cause.MISSING))
    if stop < start:
        if known_start_ms is not None and known_start_ms <= stop:
            corrections.append(TimeCorrection("startedAt", start, known_start_ms, Cause.STOP_BEFORE_START))
            start = known_start_ms
        else:
            used = observed_ms if observed_ms is not None and observed_ms >= start else start
            corrections.append(TimeCorrection("stoppedAt", stop, used, Cause.STOP_BEFORE_START))
            stop = used
    # Clamping keeps the order (start <= stop), and the window holds both.
    start, start_correction = window.clamp("startedAt", start)
    stop, stop_correction = window.clamp("stoppedAt", stop)
    corrections.extend(c for c in (start_correction, stop_correction) if c is not None)
    return AttemptTimes(start, stop, tuple(corrections))


def running_ms_at(started_at: datetime | None, submitted_at: datetime, now: datetime) -> int:
    """A running job's Running time at ``now`` for the meter's charges and caps: from its start
    clamped into ``[submitted_at, now]``, never negative (0 when it has no start)."""
    if started_at is None:
        return 0
    window = Window.of(submitted_at, now)
    started, _ = window.clamp("startedAt", epoch_ms(started_at))
    return window.closes_ms - started


def clamp_moment(moment: datetime, opens: datetime, closes: datetime) -> datetime:
    """``moment`` moved into ``[opens, closes]`` (``closes`` before ``opens`` counts as ``opens``): the
    same rule for the times of a dedicated compute's settlements, which the service's own clock gives."""
    return max(opens, min(moment, max(opens, closes)))
