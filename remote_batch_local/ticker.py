"""Periodic work on a thread: the meter's schedule and the state snapshots.

Waits on an ``Event``, so ``stop`` ends the thread at once instead of after a sleep.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from remote_batch_local.lambda_context import LOCAL_ACCOUNT_ID

logger = logging.getLogger(__name__)


def scheduled_event(now: datetime, region: str, rule_name: str) -> dict[str, Any]:
    """An EventBridge ``Scheduled Event`` envelope, as a schedule rule sends it to its target."""
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": LOCAL_ACCOUNT_ID,
        "time": now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [f"arn:aws:events:{region}:{LOCAL_ACCOUNT_ID}:rule/{rule_name}"],
        "detail": {},
    }


class Ticker:
    """Calls ``action`` every ``interval`` seconds on a daemon thread until ``stop``.

    A failing call is logged and the ticks go on (as a schedule keeps firing).

    Parameters
    ----------
    name : str
        The thread's name, in logs.
    interval : float
        Seconds between the end of a call and the start of the next.
    action : Callable[[], object]
        What to run.
    """

    def __init__(self, name: str, interval: float, action: Callable[[], object]) -> None:
        self._name = name
        self._interval = interval
        self._action = action
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Start ticking (the first call comes after one interval)."""
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop ticking; waits up to ``timeout`` s for a call in progress to end."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stopping.wait(self._interval):
            try:
                self._action()
            except Exception:
                # A tick's failure is the next tick's to retry; the ticker itself must not die.
                logger.exception("tick failed ticker=%s", self._name)
