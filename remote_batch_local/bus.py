"""An in-process stand-in for EventBridge delivering ``Batch Job State Change`` events to a Lambda.

Like an EventBridge rule with a Lambda target and a dead-letter queue: delivery workers invoke the
target concurrently (as EventBridge invokes a Lambda asynchronously, one invocation per event, many
at once), retry a failing delivery with backoff, then drop the event to ``dead_letters``. EventBridge
promises no order at all; the bus keeps one: the events of one service job (``_job_key``: an
array's spans and children included) always go to the same worker, which delivers them one at a
time in the order they were published, so concurrency is across jobs only. Every published event
is also appended to a JSON-lines journal, so the record of what was emitted (``emitted_for``)
survives a restart of the local stack.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import zlib
from collections import deque
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from functions.adapters.event_patterns import (
    BATCH_DETAIL_TYPE,
    BATCH_SOURCE,
    as_event_ruler_sees,
    job_changing_detail_pattern,
)
from remote_batch_local.files import append_line
from remote_batch_local.state_disk import StateDisk, StateDiskUnavailable

logger = logging.getLogger("remote_batch_local.bus")

# Seconds between two deliveries of an event that waits for the state disk to take writes again.
DISK_WAIT_SECONDS = 1.0

Envelope = dict[str, Any]
# The service's job id in a job's container environment (set at submit).
JOB_ID_VARIABLE = "REMOTE_BATCH_JOB_ID"
# The local stack's delivery workers (concurrent invocations of the target): each job's events go
# to one of them.
DELIVERY_WORKERS = 8


@dataclass(slots=True)
class _Delivery:
    envelope: Envelope
    copies: int


def _job_key(envelope: Envelope) -> str | None:
    """The service job an envelope belongs to: the ``REMOTE_BATCH_JOB_ID`` of its container's
    environment (the service sets it to the array's id on every span of an array, whatever the
    span's ``jobName``), else ``detail.jobName`` up to an array child's ``:``."""
    detail = envelope.get("detail")
    if not isinstance(detail, dict):
        return None
    container = detail.get("container")
    pairs = container.get("environment") if isinstance(container, dict) else None
    for pair in pairs if isinstance(pairs, list) else []:
        if (
            isinstance(pair, dict)
            and pair.get("name") == JOB_ID_VARIABLE
            and isinstance(pair.get("value"), str)
        ):
            return str(pair["value"])
    name = detail.get("jobName")
    return name.split(":", 1)[0] if isinstance(name, str) else None


def worker_of(envelope: Envelope, workers: int) -> int:
    """The delivery worker (``0 .. workers - 1``) of ``envelope``: by its job (``_job_key``, CRC-32),
    so one job's events are delivered in order; worker 0 for an event of no job."""
    key = _job_key(envelope)
    return 0 if key is None else zlib.crc32(key.encode()) % workers


@functools.cache
def _rule_pattern() -> Any:
    """The deployed rule's pattern, less its queue prefixes (local queues are all the service's),
    as moto's EventBridge matches it."""
    from moto.events.models import EventPattern

    pattern = {
        "source": [BATCH_SOURCE],
        "detail-type": [BATCH_DETAIL_TYPE],
        "detail": job_changing_detail_pattern(),
    }
    return EventPattern.load(json.dumps(pattern))


def matches_rule(envelope: Envelope) -> bool:
    """True when the deployed EventBridge rule would deliver ``envelope`` to batch_events (moto's
    matcher, with arrays of objects shown as EventBridge matches them: ``as_event_ruler_sees``)."""
    return bool(_rule_pattern().matches_event(as_event_ruler_sees(envelope)))


class EventBus:
    """EventBridge → Lambda, in one process: concurrent across jobs, ordered per job, at-least-once,
    with retries and a DLQ.

    Parameters
    ----------
    deliver : Callable[[dict], None]
        The target (the batch_events Lambda handler). Called from ``workers`` delivery threads at
        once, each with a JSON round-tripped copy of one envelope; one job's events one at a time.
    journal_path : Path
        A JSON-lines file of every published envelope. Read back at construction, so
        ``emitted_for`` answers for events published before a restart (they are not redelivered).
    duplicate : bool
        Deliver every event twice in a row, to exercise exactly-once handling.
    max_attempts : int
        Deliveries tried per event copy before it goes to ``dead_letters`` (EventBridge's async
        Lambda invocation tries 3 times).
    retry_delay : float
        Seconds before the first retry; doubles for each further retry (the job's later events wait).
    workers : int
        Delivery threads (the local stack uses ``DELIVERY_WORKERS``); 1, the default, delivers
        every event in publication order, across jobs too.
    rule : Callable[[dict], bool] | None
        The rule's pattern: an envelope it does not match is recorded as emitted but never
        delivered, as EventBridge leaves it out (the local stack passes ``matches_rule``); None
        delivers every envelope.
    disk : StateDisk | None
        The home's filesystem: an envelope whose journal line it refuses (full, read-only) is
        reported, logged and still delivered (the job's state change must not be lost for its record).
    """

    def __init__(
        self,
        deliver: Callable[[Envelope], None],
        journal_path: Path,
        duplicate: bool = False,
        max_attempts: int = 3,
        retry_delay: float = 0.1,
        *,
        workers: int = 1,
        rule: Callable[[Envelope], bool] | None = None,
        disk: StateDisk | None = None,
    ) -> None:
        self._deliver = deliver
        self._disk = disk
        self._rule = rule
        self._journal_path = Path(journal_path)
        self._duplicate = duplicate
        self._max_attempts = max(1, max_attempts)
        self._retry_delay = retry_delay
        self._cond = threading.Condition()
        # One queue per delivery worker; a worker delivers from its own queue only.
        self._queues: list[deque[_Delivery]] = [deque() for _ in range(max(1, workers))]
        self._in_flight = 0
        self._stopping = False
        self._threads: list[threading.Thread] = []
        self._emitted: dict[str, list[Envelope]] = {}
        self._dead_letters: list[Envelope] = []
        self._load_journal()

    # -- recording -------------------------------------------------------------------------------

    def _load_journal(self) -> None:
        if not self._journal_path.exists():
            return
        with self._journal_path.open(encoding="utf-8") as journal:
            for number, line in enumerate(journal, start=1):
                if not line.strip():
                    continue
                try:
                    envelope = json.loads(line)
                except json.JSONDecodeError:
                    logger.warning(
                        "skipped unreadable journal line path=%s line=%d", self._journal_path, number
                    )
                    continue
                self._remember(envelope)

    def _remember(self, envelope: Envelope) -> None:
        key = _job_key(envelope)
        if key is not None:
            self._emitted.setdefault(key, []).append(envelope)

    def emitted_for(self, job_id: str) -> list[Envelope]:
        """Every envelope published for the service job ``job_id``: its own, and an array's, of all
        its spans and their children (``REMOTE_BATCH_JOB_ID`` in the environment, else ``jobName``
        equal to ``job_id`` or starting with ``job_id + ":"``), in emission order, including those
        published before a restart.
        """
        with self._cond:
            return [json.loads(json.dumps(envelope)) for envelope in self._emitted.get(job_id, [])]

    @property
    def dead_letters(self) -> list[Envelope]:
        """Envelopes whose delivery failed every attempt (or that came after ``stop``), oldest first."""
        with self._cond:
            return list(self._dead_letters)

    # -- publishing ------------------------------------------------------------------------------

    def publish(self, envelope: Envelope) -> None:
        """Record ``envelope`` as emitted (memory and journal) and queue it for delivery.

        Returns at once; delivery happens on a worker thread, after every event of the same job
        published before it. An event published after ``stop`` is recorded and goes straight to
        ``dead_letters``.
        """
        line = json.dumps(envelope, separators=(",", ":"))
        with self._cond:
            try:
                with self._disk.writing() if self._disk is not None else nullcontext():
                    self._journal_path.parent.mkdir(parents=True, exist_ok=True)
                    append_line(self._journal_path, (line + "\n").encode(), mode=0o644)
            except StateDiskUnavailable as refused:
                logger.error(
                    "batch event delivered without its journal line event_id=%s error=%s",
                    envelope.get("id"),
                    refused,
                )
            stored = json.loads(line)
            self._remember(stored)
            self._enqueue_locked(stored)

    def replay(self, envelopes: Iterable[Envelope]) -> None:
        """Queue ``envelopes`` for delivery, in the given order, without recording them as emitted
        (``POST /local/batch-events``: duplicates and reorderings are the caller's to choose)."""
        with self._cond:
            for envelope in envelopes:
                self._enqueue_locked(json.loads(json.dumps(envelope)))

    def _enqueue_locked(self, envelope: Envelope) -> None:
        if self._rule is not None and not self._rule(envelope):
            # As on AWS, where the rule's pattern leaves it out: it cannot change the job.
            logger.debug("event filtered out by the rule event_id=%s", envelope.get("id"))
            return
        if self._stopping:
            logger.warning("bus stopped; event not delivered event_id=%s", envelope.get("id"))
            self._dead_letters.append(envelope)
            return
        self._queues[worker_of(envelope, len(self._queues))].append(
            _Delivery(envelope, 2 if self._duplicate else 1)
        )
        self._cond.notify_all()

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the delivery workers (events published before are delivered then)."""
        with self._cond:
            if self._threads:
                return
            self._stopping = False
            self._threads = [
                threading.Thread(target=self._consume, args=(index,), name=f"event-bus-{index}", daemon=True)
                for index in range(len(self._queues))
            ]
            for thread in self._threads:
                thread.start()

    def _queued(self) -> int:
        return sum(len(queue) for queue in self._queues)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until nothing is queued or being delivered; False if ``timeout`` (s) passed first."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._queued() and not self._in_flight, timeout)

    def stop(self, drain: bool = True, timeout: float = 10.0) -> None:
        """Stop the workers.

        Parameters
        ----------
        drain : bool
            Deliver what is queued first (up to ``timeout``); otherwise queued events are dropped
            to ``dead_letters``. Deliveries in progress always complete.
        timeout : float
            Seconds to wait for the drain and for the worker threads to end.
        """
        if drain and not self.wait_idle(timeout):
            logger.warning("bus stopped before draining queued=%d", self._queued())
        with self._cond:
            self._stopping = True
            for queue in self._queues:
                while queue:
                    self._dead_letters.append(queue.popleft().envelope)
            self._cond.notify_all()
            threads, self._threads = self._threads, []
        for thread in threads:
            thread.join(timeout)

    # -- workers ---------------------------------------------------------------------------------

    def _consume(self, index: int) -> None:
        queue = self._queues[index]
        while True:
            with self._cond:
                self._cond.wait_for(lambda: queue or self._stopping)
                if self._stopping:
                    return
                item = queue.popleft()
                self._in_flight += 1
            delivered = False
            try:
                delivered = self._deliver_with_retries(item.envelope)
            finally:
                with self._cond:
                    item.copies -= 1
                    # The duplicate goes next, ahead of the job's later events; a copy that went to
                    # the dead-letter list takes its duplicate with it.
                    if delivered and item.copies > 0:
                        if self._stopping:
                            self._dead_letters.append(item.envelope)
                        else:
                            queue.appendleft(item)
                    self._in_flight -= 1
                    self._cond.notify_all()

    def _deliver_with_retries(self, envelope: Envelope) -> bool:
        """Deliver with up to ``max_attempts`` tries. A try that failed while the state disk refuses
        writes is not counted: nothing the target does can be made durable then, so the event waits
        for the disk (polled every ``DISK_WAIT_SECONDS``) instead of spending its tries and going to
        the dead-letter list, as EventBridge keeps retrying a failing target for up to 24 hours."""
        delay = self._retry_delay
        event_id = envelope.get("id")
        attempt = 0
        waited = False
        while attempt < self._max_attempts:
            attempt += 1
            try:
                self._deliver(json.loads(json.dumps(envelope)))
            except Exception:
                if self._disk is not None and self._disk.status() is not None:
                    attempt -= 1
                    if not waited:  # one line per event; the disk logs when it takes writes again
                        logger.warning("event delivery waits for the state disk event_id=%s", event_id)
                        waited = True
                    wait = DISK_WAIT_SECONDS
                else:
                    # The target's failure must not stop the bus: log it and retry, as EventBridge does.
                    logger.exception("event delivery failed event_id=%s attempt=%d", event_id, attempt)
                    if attempt >= self._max_attempts:
                        break
                    wait, delay = delay, delay * 2
            else:
                return True
            with self._cond:
                if self._cond.wait_for(lambda: self._stopping, wait):
                    break
        logger.error("event sent to dead-letter list event_id=%s", event_id)
        with self._cond:
            self._dead_letters.append(envelope)
        return False
