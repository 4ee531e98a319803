"""The dispatcher's rules: how SubmitJob is paced and retried, when a job AWS Batch does not take ends,
and how long a claim may stand.

SubmitJob is paced (``Pacer``) below AWS Batch's ~50 requests per second per account (AWS Batch service
quotas, "SubmitJob"): each dispatcher instance paces itself at ``REMOTE_BATCH_DISPATCH_TPS`` divided by
the most instances that run at once (``REMOTE_BATCH_DISPATCH_CONCURRENCY``, the event source mapping's
maximum concurrency), so all of them together stay below it. Throttling and 5xx are retried
``SUBMIT_ATTEMPTS`` times within one delivery with exponential backoff and full jitter
(``backoff_seconds``); a job AWS Batch refuses for good, or still does not accept after
``MAX_RECEIVES`` deliveries, ends ``Terminated`` with the reason, free. The single job's dispatch
(``functions.logic.dispatch``) and an array span's (``functions.logic.array_dispatch``) follow these
same rules.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from enum import StrEnum

# SubmitJob attempts within one delivery (throttling, 5xx), with exponential backoff and full jitter
# from BACKOFF_BASE_SECONDS up to BACKOFF_CAP_SECONDS (AWS Architecture Blog, "Exponential Backoff
# And Jitter").
SUBMIT_ATTEMPTS = 4
BACKOFF_BASE_SECONDS = 0.1
BACKOFF_CAP_SECONDS = 2.0
# Deliveries of one job's message after which a job AWS Batch still does not accept is ended
# (the queue's DLQ takes a message only when ending it failed too: its redrive count is higher).
MAX_RECEIVES = 8
NOT_ACCEPTED_REASON = "AWS Batch did not accept the job after {attempts} attempts; nothing was charged"
REFUSED_REASON = "AWS Batch refused the job; nothing was charged"
# How long a claim (``Dispatching``) may stand before the meter's backstop takes it for a dead
# dispatcher's (``dispatch.recover_claim``). The dispatcher Lambda runs at most 60 s (infra/constants.py,
# ``LAMBDA_TIMEOUT_SECONDS["dispatcher"]``; Lambda stops an invocation at its timeout) and records
# SubmitJob's answer within ``SUBMIT_ATTEMPTS`` calls and backoffs of at most ``BACKOFF_CAP_SECONDS``
# of it; the local stack's dispatcher works the same way. 15 minutes is fifteen of those lifetimes: no
# live dispatcher still holds a claim that old, and a job it submitted is long listed by AWS Batch
# (tests/unit/test_dispatch_claims.py keeps the bound above ten Lambda timeouts).
CLAIM_TIMEOUT = timedelta(minutes=15)


class DispatchOutcome(StrEnum):
    """What ``dispatch.dispatch_job`` did with one message."""

    SUBMITTED = "submitted"
    SKIPPED = "skipped"  # not admitted, claimed by another dispatcher, sent already, ended or gone
    ENDED = "ended"  # refused for good or never accepted: Terminated with the reason
    RETRY = "retry"  # AWS Batch busy or unreachable: deliver the message again later
    PARKED = "parked"  # its class is out of service in its zone: left admitted until it is enabled


class ClaimRecovery(StrEnum):
    """What ``dispatch.recover_claim`` did with a job left ``Dispatching``."""

    WAITING = "waiting"  # claimed less than CLAIM_TIMEOUT ago: its dispatcher may still be at work
    RECORDED = "recorded"  # AWS Batch has it: its Batch id recorded (``Dispatched``)
    REQUEUED = "requeued"  # AWS Batch has none: the claim given back, the job enqueued again
    ENDED = "ended"  # AWS Batch has none and it was aborted meanwhile: Terminated, free
    SKIPPED = "skipped"  # not a standing claim (any more): sent, released or ended by another writer


class Pacer:
    """Spaces calls at most ``rate`` per second (one slot every ``1/rate`` s), across threads.

    Each dispatcher instance paces itself at the configured rate divided by the most instances that run
    at once (the event source mapping's maximum concurrency), so all of them together stay below it.
    ``clock`` and ``sleep`` (monotonic seconds) are injectable for tests.
    """

    def __init__(
        self,
        rate: float,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self._interval = 1.0 / rate
        self._clock = clock
        self._sleep = sleep
        self._next = 0.0
        self._lock = threading.Lock()

    def wait(self) -> None:
        """Block until this caller's slot (each call takes the next free one)."""
        with self._lock:
            now = self._clock()
            slot = max(now, self._next)
            self._next = slot + self._interval
        if slot > now:
            self._sleep(slot - now)


def backoff_seconds(attempt: int) -> float:
    """Full-jitter backoff before retry ``attempt`` (0-based): uniform in [0, min(cap, base·2^attempt)]."""
    return random.uniform(0, min(BACKOFF_CAP_SECONDS, BACKOFF_BASE_SECONDS * 2**attempt))  # noqa: S311
