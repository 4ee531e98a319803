"""The executor's wall clock: the milliseconds since the epoch its events carry."""

from __future__ import annotations

import time


def now_ms() -> int:
    """Now, in milliseconds since the epoch (``createdAt``, ``startedAt``, ``stoppedAt``)."""
    return time.time_ns() // 1_000_000
