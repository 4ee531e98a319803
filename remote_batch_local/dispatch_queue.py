"""The local stack's dispatch queue: what SQS and the Lambda event source mapping do for the deployed
dispatcher, in-process.

Messages (a job to send, or an account whose held jobs to admit) are delivered oldest first in
batches of up to ``batch_size`` to the dispatcher function (``LocalLambdas.dispatch``) as SQS events;
the answer's ``batchItemFailures`` are delivered again after ``visibility_timeout`` seconds (a failed
invocation: its whole batch), each delivery counted in the record's ``ApproximateReceiveCount``; a
message delivered ``max_receives`` times without success goes to the dead-letter list (logged), as the
deployed queue's redrive policy moves it to its DLQ. One delivery at a time: the dispatcher is one
execution environment here, as the mapping's maximum concurrency bounds it deployed. An admission
request for an account whose request still waits undelivered is not queued twice (the waiting one is
read after it, so its admission sees the caller's writes).

Messages live in memory only: after a restart, the meter's backstop admits held jobs and sends
admitted jobs' messages again (``functions.logic.metering``).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from functions.adapters.sqs import SEND_BATCH_SIZE, admission_message, dispatch_message
from remote_batch_local.state_disk import StateDisk

logger = logging.getLogger(__name__)

DEFAULT_VISIBILITY_TIMEOUT_SECONDS = 1.0
DEFAULT_MAX_RECEIVES = 12
QUEUE_ARN = "arn:aws:sqs:{region}:{account}:remote-batch-local-dispatch"


@dataclass
class _Message:
    message_id: str
    body: str
    sent_ms: int
    receive_count: int = 0
    visible_at: float = 0.0


@dataclass(frozen=True, slots=True)
class DispatchQueueStats:
    """Messages sent, deliveries made, messages waiting or in flight, and dead letters."""

    sent: int
    deliveries: int
    waiting: int
    dead_letters: int


class LocalDispatchQueue:
    """``DispatchQueue`` of the local stack.

    Parameters
    ----------
    deliver : Callable[[dict], dict]
        Invokes the dispatcher with an SQS event; returns its partial batch response.
    region, account : str
        For the records' ``eventSourceARN``.
    batch_size : int
        Records per invocation at most (SQS: 10).
    visibility_timeout : float
        Seconds before a failed message is delivered again.
    max_receives : int
        Deliveries after which a failing message is dead-lettered.
    disk : StateDisk | None
        The home's filesystem: a delivery that failed while it refuses writes (full, read-only) is not
        counted towards ``max_receives`` (nothing the dispatcher does can be made durable then; the
        message waits for the disk instead of going to the dead-letter list).
    """

    inline = False  # delivered by its own thread, as SQS's event source mapping delivers

    def __init__(
        self,
        deliver: Callable[[dict[str, Any]], Any],
        *,
        region: str,
        account: str,
        batch_size: int = SEND_BATCH_SIZE,
        visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT_SECONDS,
        max_receives: int = DEFAULT_MAX_RECEIVES,
        disk: StateDisk | None = None,
    ) -> None:
        self._deliver = deliver
        self._disk = disk
        self._region = region
        self._arn = QUEUE_ARN.format(region=region, account=account)
        self._batch_size = batch_size
        self._visibility_timeout = visibility_timeout
        self._max_receives = max_receives
        self._messages: list[_Message] = []
        self._dead: list[_Message] = []
        self._undelivered_admissions: set[str] = set()  # bodies of admission requests not yet delivered
        self._sent = 0
        self._deliveries = 0
        self._busy = False
        self._stopping = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="dispatch-queue", daemon=True)

    def start(self) -> None:
        """Start delivering."""
        self._thread.start()

    def send(self, job_ids: Sequence[str]) -> None:
        """Enqueue one message per job id (``{"jobId": ...}``, as the SQS adapter sends)."""
        now_ms = int(time.time() * 1000)
        with self._cond:
            for job_id in job_ids:
                self._messages.append(_Message(str(uuid.uuid4()), dispatch_message(job_id), now_ms))
            self._sent += len(job_ids)
            self._cond.notify_all()

    def request_admission(self, account_ids: Sequence[str]) -> None:
        """Enqueue an admission request per account (``{"accountId": ...}``), unless one for that
        account already waits undelivered: that one is read after this call, so its admission sees
        the caller's writes (a burst of submits from one account makes one request per delivery,
        not one each)."""
        now_ms = int(time.time() * 1000)
        with self._cond:
            for account_id in account_ids:
                body = admission_message(account_id)
                if body not in self._undelivered_admissions:
                    self._messages.append(_Message(str(uuid.uuid4()), body, now_ms))
                    self._undelivered_admissions.add(body)
                    self._sent += 1
            self._cond.notify_all()

    def stats(self) -> DispatchQueueStats:
        """The queue's numbers now."""
        with self._cond:
            return DispatchQueueStats(self._sent, self._deliveries, len(self._messages), len(self._dead))

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no message waits or is in flight; False after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._messages or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
        return True

    def stop(self, timeout: float) -> None:
        """Stop after the delivery in flight (messages left are dropped: the meter's backstop resends)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _take(self) -> list[_Message] | None:
        """The next batch of visible messages (oldest first), waiting for one; None when stopping."""
        with self._cond:
            while not self._stopping:
                now = time.monotonic()
                visible = [m for m in self._messages if m.visible_at <= now][: self._batch_size]
                if visible:
                    taken = {id(m) for m in visible}
                    self._messages = [m for m in self._messages if id(m) not in taken]
                    for message in visible:
                        message.receive_count += 1
                        self._undelivered_admissions.discard(message.body)
                    self._busy = True
                    self._deliveries += 1
                    return visible
                waits = [m.visible_at - now for m in self._messages]
                self._cond.wait(min([0.5, *waits]))
            return None

    def _run(self) -> None:
        while (batch := self._take()) is not None:
            try:
                response = self._deliver(self._event(batch))
                failed_ids = {f["itemIdentifier"] for f in (response or {}).get("batchItemFailures", [])}
            except Exception:
                logger.exception("dispatcher invocation failed messages=%d", len(batch))
                failed_ids = {m.message_id for m in batch}
            disk_refuses = bool(failed_ids) and self._disk is not None and self._disk.status() is not None
            with self._cond:
                for message in batch:
                    if message.message_id not in failed_ids:
                        continue
                    if disk_refuses:
                        message.receive_count -= 1
                    if message.receive_count >= self._max_receives:
                        logger.error("dispatch message dead-lettered body=%s", message.body)
                        self._dead.append(message)
                    else:
                        message.visible_at = time.monotonic() + self._visibility_timeout
                        self._messages.append(message)
                self._busy = False
                self._cond.notify_all()

    def _event(self, batch: list[_Message]) -> dict[str, Any]:
        return {
            "Records": [
                {
                    "messageId": m.message_id,
                    "receiptHandle": m.message_id,
                    "body": m.body,
                    "attributes": {
                        "ApproximateReceiveCount": str(m.receive_count),
                        "SentTimestamp": str(m.sent_ms),
                        "SenderId": "remote-batch-local",
                        "ApproximateFirstReceiveTimestamp": str(m.sent_ms),
                    },
                    "messageAttributes": {},
                    "md5OfBody": hashlib.md5(m.body.encode(), usedforsecurity=False).hexdigest(),
                    "eventSource": "aws:sqs",
                    "eventSourceARN": self._arn,
                    "awsRegion": self._region,
                }
                for m in batch
            ]
        }
