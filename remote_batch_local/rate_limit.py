"""The local gateway's per-account request limit: a token bucket per account
(``functions.domain.rate_limits``), as the deployed WAF rate-based rule limits each caller."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from functions.domain.rate_limits import TokenBucket


class AccountRateLimiter:
    """One ``TokenBucket`` per account id, thread-safe.

    Parameters
    ----------
    rate : float
        Requests per second each account may make on average (0: no limit).
    burst : int
        Requests an account may make at once after a quiet spell.
    monotonic : Callable[[], float]
        Seconds (``time.monotonic``).
    """

    def __init__(self, rate: float, burst: int, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._rate = rate
        self._burst = max(1, burst)
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._buckets: dict[str, TokenBucket] = {}

    def take(self, account_id: str) -> float:
        """Count one request of ``account_id``: 0 when allowed, else the seconds to wait."""
        if self._rate <= 0:
            return 0.0
        with self._lock:
            bucket = self._buckets.get(account_id)
            if bucket is None:
                bucket = self._buckets[account_id] = TokenBucket(rate=self._rate, capacity=self._burst)
            return bucket.take(self._monotonic())
