"""Log shipping: a job's console read line by line and put to CloudWatch Logs in batches; the
worker's operator report."""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from typing import IO, Any

from botocore.exceptions import BotoCoreError, ClientError

from remote_batch_local.executor.clock import now_ms
from remote_batch_local.executor.constants import (
    LOG_BATCH_BYTES,
    LOG_BATCH_EVENTS,
    LOG_BUFFER_BYTES,
    LOG_CLOSE_WAIT_SECONDS,
    LOG_EVENT_OVERHEAD_BYTES,
    LOG_FLUSH_SECONDS,
    LOG_LINE_MAX_BYTES,
    LOG_PUT_ATTEMPTS,
    LOG_READ_BYTES,
    LOG_UNAVAILABLE_RETRY_SECONDS,
    OPERATOR_LOG_MAX_BYTES,
    OPERATOR_LOG_NAME,
    READER_JOIN_SECONDS,
    logger,
)
from remote_batch_local.executor.job import BatchJob

#: The error codes of a log store that cannot take events now but will (CloudWatch Logs'
#: ``ServiceUnavailableException``; the local stack's full or read-only state disk answers it).
UNAVAILABLE_CODES = frozenset({"ServiceUnavailableException", "ServiceUnavailable"})


def dropped_lines_note(lines: int) -> str:
    """The line a job's log gets where lines were dropped while the log store was unavailable."""
    return (
        f"[remote-batch] {lines} log line{'s' if lines != 1 else ''} dropped here: the log store was "
        "unavailable (the local stack's state disk took no writes) and its buffer was full"
    )


class LogShipper:
    """Ships a job's console lines in PutLogEvents batches on its own thread, holding at most
    ``LOG_BUFFER_BYTES`` of them: ``append`` waits while the buffer is full (so a job that prints
    faster than the store takes waits on its pipe, as a container waits on its log driver).

    Lines are timestamped (ms, never decreasing) when appended; a batch (at most
    ``LOG_BATCH_EVENTS`` events and ``LOG_BATCH_BYTES``, PutLogEvents' bounds) is sent when full,
    ``LOG_FLUSH_SECONDS`` after its first line, or on ``close``.

    While the store answers ``ServiceUnavailableException`` (``UNAVAILABLE_CODES``: a full state disk)
    the batch is kept, in order, and tried again every ``LOG_UNAVAILABLE_RETRY_SECONDS`` until the
    store takes it; the job is not held on its pipe by the outage: once the buffer is full, new lines
    are dropped and counted, and one line in their place (``dropped_lines_note``) says how many when
    shipping resumes (Docker's awslogs ``mode=non-blocking`` with a ``max-buffer-size``). After
    ``close`` the kept lines are tried for at most ``LOG_CLOSE_WAIT_SECONDS`` more.
    """

    def __init__(self, client: Any, group: str, stream: str, job_id: str) -> None:
        self._client = client
        self._group = group
        self._stream = stream
        self._job_id = job_id
        self._cond = threading.Condition()
        self._buffer: deque[tuple[int, str, float, int]] = deque()
        self._buffered_bytes = 0
        self._last_ms = 0
        self._closing = False
        self._closed = False
        self._dropped = 0
        self._unavailable = False
        self._dropped_unavailable = 0
        self._in_flight_bytes = 0
        self.shipped = 0
        self._thread = threading.Thread(target=self._run, name=f"logs-{job_id[:8]}", daemon=True)
        self._thread.start()

    def append(self, message: str, *, continues_line: bool = False) -> None:
        """Queue one line (without its newline), timestamped now; a part that ``continues_line``
        (the rest of a line over ``LOG_LINE_MAX_BYTES``) takes the previous part's timestamp.

        Waits while ``LOG_BUFFER_BYTES`` are buffered, unless the store is unavailable: then the line
        is dropped (counted, and noted in the log when shipping resumes). After ``close`` the line is
        dropped (counted).
        """
        cost = len(message.encode("utf-8")) + LOG_EVENT_OVERHEAD_BYTES
        with self._cond:
            self._cond.wait_for(
                lambda: self._closed or self._unavailable or self._buffered_bytes < LOG_BUFFER_BYTES
            )
            if self._closed:
                self._dropped += 1
                return
            if self._unavailable and self._buffered_bytes + self._in_flight_bytes >= LOG_BUFFER_BYTES:
                self._dropped_unavailable += 1  # the batch being tried again counts: memory stays bounded
                return
            self._note_drops_locked()
            if not continues_line:
                self._last_ms = max(self._last_ms, now_ms())
            self._buffer.append((self._last_ms, message, time.monotonic(), cost))
            self._buffered_bytes += cost
            if len(self._buffer) == 1 or self._buffered_bytes >= LOG_BATCH_BYTES:
                self._cond.notify_all()

    def _note_drops_locked(self) -> None:
        """Put the line that says how many lines were dropped where they were (once per outage)."""
        if not self._dropped_unavailable:
            return
        note = dropped_lines_note(self._dropped_unavailable)
        logger.warning(
            "log lines dropped while the log store was unavailable job_id=%s lines=%d",
            self._job_id,
            self._dropped_unavailable,
        )
        self._dropped_unavailable = 0
        self._last_ms = max(self._last_ms, now_ms())
        cost = len(note.encode("utf-8")) + LOG_EVENT_OVERHEAD_BYTES
        self._buffer.append((self._last_ms, note, time.monotonic(), cost))
        self._buffered_bytes += cost

    def close(self) -> None:
        """Send what is buffered and stop; returns after the last PutLogEvents call."""
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join()
        with self._cond:
            if self._dropped:
                logger.error("log lines dropped after close job_id=%s lines=%d", self._job_id, self._dropped)

    def _full_locked(self) -> bool:
        return len(self._buffer) >= LOG_BATCH_EVENTS or self._buffered_bytes >= LOG_BATCH_BYTES

    def _run(self) -> None:
        closing_since: float | None = None
        while True:
            with self._cond:
                if self._closing:
                    self._note_drops_locked()
                self._cond.wait_for(lambda: self._buffer or self._closing)
                if self._closing and closing_since is None:
                    closing_since = time.monotonic()
                if not self._buffer:
                    self._closed = True  # from now on, a late line is dropped rather than left unsent
                    self._cond.notify_all()
                    return
                due = self._buffer[0][2] + LOG_FLUSH_SECONDS
                while not self._full_locked() and not self._closing:
                    remaining = due - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                batch = self._take_batch_locked()
                self._cond.notify_all()  # room in the buffer: a waiting reader goes on
            try:
                delivered = self._put(batch)
            except Exception:  # the thread must live on: a reader may be waiting for buffer room
                logger.exception("log lines dropped job_id=%s lines=%d", self._job_id, len(batch))
                delivered = True
            if not delivered:
                closed_too_long = (
                    closing_since is not None and time.monotonic() - closing_since >= LOG_CLOSE_WAIT_SECONDS
                )
                if not closed_too_long:
                    self._keep(batch)
                    continue
                with self._cond:
                    self._in_flight_bytes = 0
                    left = len(batch) + len(self._buffer) + self._dropped_unavailable
                    self._buffer.clear()
                    self._buffered_bytes = 0
                    self._dropped_unavailable = 0
                logger.error(
                    "log lines dropped: the log store stayed unavailable job_id=%s lines=%d",
                    self._job_id,
                    left,
                )
                continue
            with self._cond:
                self._in_flight_bytes = 0
                if self._unavailable:
                    self._unavailable = False
                    self._cond.notify_all()  # a reader dropping lines waits for room again
            self.shipped += len(batch)

    def _keep(self, batch: list[dict[str, Any]]) -> None:
        """Put a batch the store could not take back at the buffer's head, in order, and wait
        ``LOG_UNAVAILABLE_RETRY_SECONDS`` before the next try (appends go on meanwhile)."""
        with self._cond:
            now = time.monotonic()
            for event in reversed(batch):
                cost = len(event["message"].encode("utf-8")) + LOG_EVENT_OVERHEAD_BYTES
                self._buffer.appendleft((event["timestamp"], event["message"], now, cost))
                self._buffered_bytes += cost
            self._in_flight_bytes = 0
            if not self._unavailable:
                self._unavailable = True
                self._cond.notify_all()  # a reader waiting for room drops lines from now on
            deadline = now + LOG_UNAVAILABLE_RETRY_SECONDS
            while (remaining := deadline - time.monotonic()) > 0:
                self._cond.wait(remaining)

    def _take_batch_locked(self) -> list[dict[str, Any]]:
        batch: list[dict[str, Any]] = []
        size = 0
        while self._buffer and len(batch) < LOG_BATCH_EVENTS:
            timestamp, message, _, cost = self._buffer[0]
            if len(message.encode("utf-8")) > LOG_LINE_MAX_BYTES:
                message = message.encode("utf-8")[:LOG_LINE_MAX_BYTES].decode("utf-8", "ignore")
            if batch and size + cost > LOG_BATCH_BYTES:
                break
            self._buffer.popleft()
            self._buffered_bytes -= cost
            batch.append({"timestamp": timestamp, "message": message})
            size += cost
        self._in_flight_bytes = size
        return batch

    def _put(self, batch: list[dict[str, Any]]) -> bool:
        """Send ``batch``; False when the store was unavailable on every attempt (the caller keeps it),
        True when it was taken or dropped for any other error (logged)."""
        unavailable = False
        for attempt in range(1, LOG_PUT_ATTEMPTS + 1):
            try:
                response = self._client.put_log_events(
                    logGroupName=self._group, logStreamName=self._stream, logEvents=batch
                )
            except (ClientError, BotoCoreError) as exc:
                logger.warning(
                    "log put failed job_id=%s attempt=%d lines=%d error=%s",
                    self._job_id,
                    attempt,
                    len(batch),
                    exc,
                )
                unavailable = isinstance(exc, ClientError) and exc.response.get("Error", {}).get("Code") in (
                    UNAVAILABLE_CODES
                )
                continue
            if response.get("rejectedLogEventsInfo"):
                logger.warning(
                    "log events rejected job_id=%s info=%s", self._job_id, response["rejectedLogEventsInfo"]
                )
            return True
        if unavailable:
            return False
        logger.error("log lines dropped job_id=%s lines=%d", self._job_id, len(batch))
        return True


def _line_parts(body: bytes) -> list[bytes]:
    """``body`` cut into parts of at most ``LOG_LINE_MAX_BYTES`` at UTF-8 character boundaries."""
    parts = []
    while len(body) > LOG_LINE_MAX_BYTES:
        boundary = _utf8_boundary(body[:LOG_LINE_MAX_BYTES]) or LOG_LINE_MAX_BYTES
        parts.append(body[:boundary])
        body = body[boundary:]
    parts.append(body)
    return parts


def read_lines(
    stream: IO[bytes],
    shipper: LogShipper,
    limit_bytes: int | None = None,
    on_limit: Callable[[], None] | None = None,
) -> None:
    """Forward a pipe to ``shipper`` line by line until EOF (empty lines are skipped, as awslogs does).

    The pipe is read in chunks of at most ``LOG_READ_BYTES``; what is held at once is one chunk, one
    unfinished line part (under ``LOG_LINE_MAX_BYTES``) and the shipper's bounded buffer. A line over
    ``LOG_LINE_MAX_BYTES`` goes as several events the way Docker's awslogs driver ships it on AWS
    Batch: parts of ``LOG_LINE_MAX_BYTES`` cut at a UTF-8 character boundary, all with the line's
    timestamp (``functions.domain.log_lines``, whose reader joins them back).

    After ``limit_bytes`` bytes (when given), ``on_limit`` is called once and the rest of the pipe is
    read and dropped, so the job never waits on a pipe no one reads while it is being ended.
    """
    read = getattr(stream, "read1", stream.read)
    with stream:
        carry = b""
        continuing = False
        total = 0
        while chunk := read(LOG_READ_BYTES):
            if limit_bytes is not None and total >= limit_bytes:
                continue  # over the limit: drained and dropped
            total += len(chunk)
            if limit_bytes is not None and total >= limit_bytes:
                chunk = chunk[: len(chunk) - (total - limit_bytes)]
                if on_limit is not None:
                    on_limit()
            lines = (carry + chunk).split(b"\n")
            carry = lines.pop()
            for line in lines:
                for part in _line_parts(line.removesuffix(b"\r")):
                    if part:
                        shipper.append(part.decode("utf-8", "replace"), continues_line=continuing)
                        continuing = True
                continuing = False
            while len(carry) >= LOG_LINE_MAX_BYTES:
                boundary = _utf8_boundary(carry[:LOG_LINE_MAX_BYTES]) or LOG_LINE_MAX_BYTES
                shipper.append(carry[:boundary].decode("utf-8", "replace"), continues_line=continuing)
                continuing = True
                carry = carry[boundary:]
        if carry:
            shipper.append(carry.decode("utf-8", "replace"), continues_line=continuing)


def join_reader(reader: threading.Thread, shipper: LogShipper) -> None:
    """Wait for a console reader to reach EOF and hand its last lines over, as long as the log is
    still being shipped (a slow store); give up after ``READER_JOIN_SECONDS`` without progress
    (a process that escaped the job's kill holds the pipe open)."""
    shipped = -1
    while reader.is_alive() and shipper.shipped != shipped:
        shipped = shipper.shipped
        reader.join(READER_JOIN_SECONDS)


def _utf8_boundary(data: bytes) -> int:
    """The length of the longest prefix of ``data`` that does not end inside a UTF-8 character."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # ASCII or a lead byte: the last character starts here
            width = 1 if byte < 0x80 else 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if width <= back else len(data) - back
    return len(data)


def log_operator_report(job: BatchJob) -> None:
    """Log what the worker wrote to its operator file (its own errors' details), at most
    ``OPERATOR_LOG_MAX_BYTES`` of it, to this process's log."""
    if job.workdir is None:
        return
    try:
        with open(job.workdir / OPERATOR_LOG_NAME, "rb") as report:
            text = report.read(OPERATOR_LOG_MAX_BYTES).decode("utf-8", "replace")
    except FileNotFoundError:
        return
    except OSError as exc:
        logger.warning("worker report unreadable batch_job_id=%s error=%s", job.job_id, exc)
        return
    if text.strip():
        logger.warning("worker reported its own error batch_job_id=%s\n%s", job.job_id, text.rstrip())
