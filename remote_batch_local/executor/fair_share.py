"""Fair share in the local executor: each share's recent vCPU usage, as AWS Batch weighs it.

AWS Batch's fair-share scheduler starts, among a job queue's runnable jobs, one of the share
identifier with the lowest usage, "vCPU usage over time" times the share's weight, where older usage
counts less over ``shareDecaySeconds`` ("Use share identifiers to identify workloads" and
``SchedulingPolicyDetail``, AWS Batch User Guide and API reference). AWS does not publish the decay's
exact form; ``ShareUsage`` keeps each share's vCPU-seconds with an exponential decay of time constant
``decay_seconds``, which ranks shares the same way for the cases the service relies on: a share that
just ran comes after one that did not, and usage older than the window hardly counts.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass


@dataclass(slots=True)
class _Share:
    used: float = 0.0  # vCPU-seconds, decayed to ``at``
    at: float = 0.0  # when ``used`` was last brought up to date (the clock's seconds)
    held: int = 0  # vCPUs the share's running jobs hold now


class ShareUsage:
    """Each share's vCPU-seconds, decayed with time constant ``decay_seconds``; not thread-safe (the
    executor calls it under its lock).

    Parameters
    ----------
    decay_seconds : float
        Usage ``decay_seconds`` old counts 1/e of new (``functions.domain.fair_share.SHARE_DECAY_SECONDS``
        in the local stack, as the deployed policy's ``shareDecaySeconds``).
    clock : Callable[[], float]
        Monotonic seconds (injectable for tests).
    """

    def __init__(self, decay_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        if decay_seconds <= 0:
            raise ValueError("decay_seconds must be positive")
        self._decay = decay_seconds
        self._clock = clock
        self._shares: dict[Hashable, _Share] = {}

    def _brought_up_to(self, share: _Share, now: float) -> float:
        """``share``'s usage at ``now``: what it had, decayed, plus what it holds since, decayed."""
        elapsed = max(0.0, now - share.at)
        factor = math.exp(-elapsed / self._decay)
        # The integral of ``held`` vCPUs over the elapsed time, each instant decayed to ``now``.
        accrued = share.held * self._decay * (1.0 - factor)
        return share.used * factor + accrued

    def _update(self, key: Hashable, delta_vcpus: int) -> None:
        now = self._clock()
        share = self._shares.setdefault(key, _Share(at=now))
        share.used = self._brought_up_to(share, now)
        share.at = now
        share.held = max(0, share.held + delta_vcpus)

    def start(self, key: Hashable, vcpus: int) -> None:
        """A job of share ``key`` starts holding ``vcpus``."""
        self._update(key, vcpus)

    def stop(self, key: Hashable, vcpus: int) -> None:
        """A job of share ``key`` gives back the ``vcpus`` it held."""
        self._update(key, -vcpus)

    def usage(self, key: Hashable) -> float:
        """Share ``key``'s vCPU-seconds now, decayed (0.0 for a share never seen)."""
        share = self._shares.get(key)
        if share is None:
            return 0.0
        return self._brought_up_to(share, self._clock())
