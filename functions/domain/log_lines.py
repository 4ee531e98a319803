"""A job's console lines as CloudWatch Logs holds them, and back as the lines the job wrote.

How a long line reaches CloudWatch Logs (the source of the rules below):

- AWS Batch ships a container's stdout/stderr with Docker's ``awslogs`` driver. Docker hands the
  driver lines of up to 262,118 bytes whole (moby #34888, "sized loggers", for moby issue #34887);
  the driver cuts a longer line into events of at most ``maximumBytesPerEvent`` = 262,144 − 26 =
  262,118 bytes, at a UTF-8 character boundary (so a part may be up to 3 bytes shorter), each with
  the line's timestamp (``processEvent``/``findValidSplit`` in moby's
  ``daemon/logger/awslogs/cloudwatchlogs.go``). CloudWatch keeps no marker: the parts are plain events.
- The local stack's executor ships lines the same way (``remote_batch_local.executor``).

So a part that is continued is recognisable: it is 262,115..262,118 bytes of UTF-8 and the next
event has the same millisecond. The reader joins such runs back into one line. A line that is only
*exactly* that long and happens to be followed by another line in the same millisecond would be
joined with it; that is the one ambiguity the driver leaves, and it needs a 256 KiB line.

The service's own limit: a joined line keeps at most ``MAX_LINE_BYTES`` (1 MiB) and, whatever its
characters, costs at most ``MAX_LINE_WIRE_BYTES`` in a response; a longer one is cut at a character
boundary and ends with ``CUT_MARKER``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from functions.domain.limits import RESPONSE_BUDGET_BYTES, wire_bytes

#: The awslogs driver's largest event (bytes of UTF-8): 262,144 minus CloudWatch's 26-byte overhead.
AWSLOGS_PART_BYTES = 262_144 - 26
#: A continued part ends at a UTF-8 boundary: up to 3 bytes short of ``AWSLOGS_PART_BYTES``.
AWSLOGS_PART_MIN_BYTES = AWSLOGS_PART_BYTES - 3
#: The longest line (bytes of UTF-8) the log routes return whole.
MAX_LINE_BYTES = 1024 * 1024
#: What one line may cost in a response (see ``event_cost``): a line of control characters is 7
#: times longer escaped, so 1 MiB of them is cut further.
MAX_LINE_WIRE_BYTES = RESPONSE_BUDGET_BYTES // 2
#: Appended to a line cut at the service's limit.
CUT_MARKER = f" [remote-batch: line cut, lines keep at most {MAX_LINE_BYTES} bytes]"
#: JSON of an event besides its message, as it travels: ``{"timestamp": "...Z", "message": }``.
EVENT_OVERHEAD_BYTES = 96
#: The most wire bytes of a character once escaped twice (a non-BMP character: ``\\ud83d\\ude00``).
_MAX_CHAR_WIRE_BYTES = 14


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line the job wrote: its timestamp, text, how many CloudWatch events it came from
    (``parts``), and whether the service cut it (``cut``; the text then ends with ``CUT_MARKER``)."""

    timestamp: datetime
    message: str
    parts: int = 1
    cut: bool = False


def is_continued_part(message: str) -> bool:
    """True when ``message`` has the length of an awslogs part that the next event continues."""
    return AWSLOGS_PART_MIN_BYTES <= len(message.encode("utf-8")) <= AWSLOGS_PART_BYTES


def event_cost(message: str) -> int:
    """Bytes a log event with ``message`` takes in the api Lambda's response, escaped as JSON in the
    body and again in the invoke response; the text and csv forms cost less."""
    return wire_bytes(json.dumps(message)) + EVENT_OVERHEAD_BYTES


def cut_line(message: str) -> tuple[str, bool]:
    """``message`` within the service's limits: ``(text, cut)``; a cut text ends with ``CUT_MARKER``."""
    encoded = message.encode("utf-8")
    cut = False
    if len(encoded) > MAX_LINE_BYTES:
        message, cut = encoded[:MAX_LINE_BYTES].decode("utf-8", "ignore"), True
    if event_cost(message) > MAX_LINE_WIRE_BYTES:
        budget = (MAX_LINE_WIRE_BYTES - EVENT_OVERHEAD_BYTES - event_cost(CUT_MARKER)) // _MAX_CHAR_WIRE_BYTES
        message, cut = message[:budget], True
    return (message + CUT_MARKER, True) if cut else (message, False)


class TimedMessage(Protocol):
    """A CloudWatch event as the log reader gives it."""

    @property
    def timestamp(self) -> datetime: ...

    @property
    def message(self) -> str: ...


class PartJoiner:
    """Joins the awslogs parts of each line from an iterator of events, lazily.

    Parameters
    ----------
    events : Iterable[TimedMessage]
        A stream's events, oldest first.
    dropping : bool
        The first events continue a line already cut and returned (a page that starts inside one).

    Attributes
    ----------
    consumed : int
        Events taken from ``events`` so far.
    dropping : bool
        Some parts of the last line, cut at the service's limit, are still unread.
    """

    def __init__(self, events: Iterable[TimedMessage], *, dropping: bool = False) -> None:
        self._events: Iterator[TimedMessage] = iter(events)
        self._peeked: TimedMessage | None = None
        self._last: TimedMessage | None = None
        self.dropping = dropping
        self.consumed = 0

    def _peek(self) -> TimedMessage | None:
        if self._peeked is None:
            self._peeked = next(self._events, None)
        return self._peeked

    def _take(self) -> TimedMessage:
        event = self._peek()
        assert event is not None  # callers peek first
        self._peeked = None
        self.consumed += 1
        self._last = event
        return event

    def _continues(self, previous: TimedMessage) -> bool:
        following = self._peek()
        return (
            following is not None
            and following.timestamp == previous.timestamp
            and is_continued_part(previous.message)
        )

    def has_more(self) -> bool:
        """Whether an event is left."""
        return self._peek() is not None

    def drop_continuation(self, max_parts: int) -> bool:
        """Read and drop the rest of a cut line, at most ``max_parts`` events (bounded work per
        request). Returns True when nothing of it is left (``dropping`` is then False)."""
        if not self.dropping:
            return True
        previous = self._last
        dropped = 0
        while self._peek() is not None and (previous is None or self._continues(previous)):
            if dropped >= max_parts:
                return False
            previous = self._take()
            dropped += 1
        self.dropping = False
        return True

    def next_line(self, max_dropped_parts: int) -> LogLine | None:
        """The next line, joined from its parts and cut at the service's limit; None at the end.

        Reads at most ``max_dropped_parts`` events past the limit of a cut line; ``dropping`` then
        says whether some are left for ``drop_continuation``.
        """
        if self._peek() is None:
            return None
        first = previous = self._take()
        pieces = [first.message]
        size = len(first.message.encode("utf-8"))
        while size <= MAX_LINE_BYTES and self._continues(previous):
            previous = self._take()
            pieces.append(previous.message)
            size += len(previous.message.encode("utf-8"))
        parts = len(pieces)
        message, cut = cut_line("".join(pieces))
        if self._continues(previous):
            before = self.consumed
            self.dropping = True
            self.drop_continuation(max_dropped_parts)
            parts += self.consumed - before
        return LogLine(first.timestamp, message, parts, cut)
