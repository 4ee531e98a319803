"""AWS Batch's SubmitJob rate limit, as the local Batch gateway enforces it.

AWS Batch allows about 50 SubmitJob requests per second per account and region and answers more with
``TooManyRequestsException`` (HTTP 429; AWS Batch API reference, "Common errors"; service quotas
"SubmitJob API TPS"). The local gateway refuses the same way: a call that would make more than
``tps`` calls in any sliding second is refused, so a client that passes here never exceeds the limit
in any second, calendar-aligned or not. It also keeps the numbers an operator or a test reads.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from botocore.exceptions import ClientError

from functions.adapters.batch import translated_errors

WINDOW_SECONDS = 1.0
DEFAULT_SUBMIT_TPS = 50


@dataclass(frozen=True, slots=True)
class SubmitRateReport:
    """What the limiter saw: calls accepted and refused, and the most accepted in any one second."""

    tps: int
    accepted: int
    throttled: int
    max_in_any_second: int


class SubmitRateLimit:
    """A sliding one-second window of accepted SubmitJob calls (thread-safe).

    Parameters
    ----------
    tps : int
        Calls accepted per second at most (AWS Batch: 50).
    clock : Callable[[], float]
        Monotonic seconds (injectable for tests).
    """

    def __init__(self, tps: int = DEFAULT_SUBMIT_TPS, clock: Callable[[], float] = time.monotonic) -> None:
        if tps < 1:
            raise ValueError("tps must be at least 1")
        self.tps = tps
        self._clock = clock
        self._window: deque[float] = deque()
        self._lock = threading.Lock()
        self._accepted = 0
        self._throttled = 0
        self._max = 0

    def admit(self) -> None:
        """Count one SubmitJob call, or refuse it as AWS Batch does.

        Raises
        ------
        DependencyFailed
            "AWS Batch is busy ...", whose cause is a ``ClientError`` with code
            ``TooManyRequestsException`` (the shared translation of ``functions.adapters.batch``).
        """
        with self._lock:
            now = self._clock()
            while self._window and self._window[0] <= now - WINDOW_SECONDS:
                self._window.popleft()
            if len(self._window) >= self.tps:
                self._throttled += 1
                refused = True
            else:
                self._window.append(now)
                self._accepted += 1
                self._max = max(self._max, len(self._window))
                refused = False
        if refused:
            error = ClientError(
                {"Error": {"Code": "TooManyRequestsException", "Message": "Too Many Requests"}},
                "SubmitJob",
            )
            with translated_errors("accept the job", "nothing was charged. Try again."):
                raise error

    def report(self) -> SubmitRateReport:
        """The numbers so far."""
        with self._lock:
            return SubmitRateReport(self.tps, self._accepted, self._throttled, self._max)
