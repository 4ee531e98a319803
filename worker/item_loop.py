"""A container that takes many items of an array: claim the next item, run it, record it, until none is left.

An array of N items runs on P containers (AWS Batch array children, ``REMOTE_BATCH_ARRAY_CONTAINERS``
= P; container c is the child of global index c). Each container loops over the items in its
``claim_order`` and runs each it wins the claim of:

- **Claims** are S3 conditional writes (``JobStorage.write_once``: PutObject with
  ``If-None-Match: *``) of ``<output prefix>claims/<index>`` holding the container's Batch job id;
  exactly one container wins each item, so an item never runs twice to completion. Container c
  starts at item c and steps by P (its own run), then takes what is left of the other containers'
  runs from their ends, so containers meet at most once per run.
- **Running** one item is ``ItemRunner``: the supervisor's job side
  (``worker.supervisor.run_in_job_python``: one job-side process per item, which dies with it, forked
  from the container's one zygote: ``worker.fork_server``). An item that raises, exits non-zero, segfaults or
  exceeds memory ends its job side alone: the supervisor records the reason as for a single job and
  the container goes on to the next item.
- **Recording**: the item's outputs go where a one-item child's go (``<output prefix><index>/``,
  ``worker.layout``), then its report (``functions.domain.item_reports`` gives the shape) to
  ``<output prefix>containers/<batch job id>/<index>.json``: the service ingests a container's
  reports into its items' records when the container ends.
- **Logs**: while an item runs, the container's stdout and stderr go through ``Console``, which
  relays them line by line to the real console and counts them: the report's ``logFirst`` and
  ``logCount`` are sequence numbers of console lines (counted from the loop's start), so the
  container's log is split at item boundaries without any marker text an item could print.

The container dying (its supervisor's memory, a cap, TerminateJob) leaves the item it held claimed
without a report: the service fails that item with the container's reason, and the items not claimed
are taken by the other containers (or a container the service starts again).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from worker.errors import WorkerError
from worker.storage import JobStorage
from worker.supervisor import JobRun

#: A console line longer than this is cut into lines of this many bytes (Docker's log drivers cut
#: at 16 KiB too, so a line counted here is one event in the job's log stream).
MAX_LINE_BYTES = 16 * 1024
#: How long a finished item's stragglers (processes it left behind holding the console) are waited
#: for at its boundary; after it their lines are dropped, never counted into the next item.
DRAIN_SECONDS = 2.0
#: The report's ``status`` values (``functions.domain.item_reports``).
SUCCEEDED, FAILED = "Succeeded", "Failed"


class ItemRunner(Protocol):
    """Runs one item's job side and returns what it recorded (``worker.supervisor.JobRun``)."""

    def __call__(self, index: int, output_dir: Path) -> JobRun:
        """Run item ``index`` with ``output_dir`` as its ``$REMOTE_BATCH_OUTPUT_DIR``.

        Raises ``WorkerError`` when the item's input cannot be had (it then fails alone).
        """
        ...


def claim_order(container: int, containers: int, size: int) -> Iterator[int]:
    """The items container ``container`` of ``containers`` tries, in order: its own run
    (``container``, ``container + containers``, ...), then each other container's run from its end,
    the next container's first.

    Raises ``ValueError`` when ``container`` is not in ``0..containers - 1``.
    """
    if not 0 <= container < containers:
        raise ValueError(f"container {container} is outside 0..{containers - 1}")
    yield from range(container, size, containers)
    for step in range(1, containers):
        run = (container + step) % containers
        yield from reversed(range(run, size, containers))


@dataclass
class Segment:
    """The console lines of one item: ``first`` (0-based sequence number) and ``count``."""

    first: int = 0
    count: int = 0


class Console:
    """The container's console, relayed line by line and counted (see the module's "Logs").

    Parameters
    ----------
    real_fd : int
        Where the lines go (a duplicate of the container's stdout, which AWS Batch and the local
        executor read as one stream with stderr).
    """

    def __init__(self, real_fd: int) -> None:
        self._real = real_fd
        self._lines = 0
        self._lock = threading.Lock()

    @contextmanager
    def segment(self) -> Iterator[Segment]:
        """Send fds 1 and 2 (this process's and every child's it starts meanwhile) through the
        counting relay; at the end, the segment holds its lines' sequence numbers. A last line
        without a newline is ended with one, so the next segment starts on its own line. When a
        process the item left behind still holds the console ``DRAIN_SECONDS`` after the end, what
        it writes from then on (and such an unended line) is dropped, never counted elsewhere."""
        segment = Segment()
        _flush()
        read_end, write_end = os.pipe()
        saved = [os.dup(1), os.dup(2)]
        dropped = threading.Event()
        with self._lock:
            segment.first = self._lines
        relay = threading.Thread(target=self._relay, args=(read_end, dropped), daemon=True)
        relay.start()
        try:
            os.dup2(write_end, 1)
            os.dup2(write_end, 2)
            os.close(write_end)
            yield segment
        finally:
            _flush()
            for fd, old in zip((1, 2), saved, strict=True):
                os.dup2(old, fd)
                os.close(old)
            relay.join(timeout=DRAIN_SECONDS)
            with self._lock:
                dropped.set()
                segment.count = self._lines - segment.first

    def _relay(self, read_end: int, dropped: threading.Event) -> None:
        pending = b""
        with open(read_end, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                pending += chunk
                lines = pending.split(b"\n")
                pending = lines.pop()
                while len(pending) > MAX_LINE_BYTES:
                    lines.append(pending[:MAX_LINE_BYTES])
                    pending = pending[MAX_LINE_BYTES:]
                self._write(lines, dropped)
        if pending:
            self._write([pending], dropped)

    def _write(self, lines: list[bytes], dropped: threading.Event) -> None:
        cut = [piece for line in lines for piece in _cut(line)]
        with self._lock:
            if dropped.is_set() or not cut:
                return
            data = b"".join(line + b"\n" for line in cut)
            with contextlib.suppress(OSError):
                while data:
                    data = data[os.write(self._real, data) :]
            self._lines += len(cut)


def _cut(line: bytes) -> list[bytes]:
    return [line[i : i + MAX_LINE_BYTES] for i in range(0, len(line), MAX_LINE_BYTES)] or [b""]


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(ValueError, OSError, AttributeError):
            stream.flush()


@dataclass(frozen=True)
class ItemLoop:
    """One container's share of an array's items.

    Attributes
    ----------
    storage : JobStorage
        The zone's bucket.
    output_prefix : str
        The array's ``outputs/<parent>/`` (ends with ``/``).
    batch_job_id : str
        This container's AWS Batch job id (the claims' body, the reports' folder).
    container, containers, size : int
        This container's index, the array's containers and its items.
    run_item : ItemRunner
        Runs one item.
    publish : Callable[[str, JobRun, Path], None]
        Uploads an item's outputs under a prefix (``worker.entrypoint.publish``).
    console : Console
        The counting console.
    prepare_output_dir : Callable[[Path], None]
        Makes a fresh output folder the job side's (``worker.job_user.JobUser.own_folder``).
    clock_ms : Callable[[], int]
        Milliseconds since the epoch.
    """

    storage: JobStorage
    output_prefix: str
    batch_job_id: str
    container: int
    containers: int
    size: int
    run_item: ItemRunner
    publish: Callable[[str, JobRun, Path], None]
    console: Console
    prepare_output_dir: Callable[[Path], object] = lambda _path: None
    clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000

    def claim_key(self, index: int) -> str:
        """``<output prefix>claims/<index>``."""
        return f"{self.output_prefix}claims/{index}"

    def report_key(self, index: int) -> str:
        """``<output prefix>containers/<batch job id>/<index>.json``."""
        return f"{self.output_prefix}containers/{self.batch_job_id}/{index}.json"

    def run(self) -> list[int]:
        """Claim and run items until none is left; returns the indexes this container ran, in order.

        Raises
        ------
        StorageError
            A claim, an item's outputs or its report could not be written: the container ends (the
            item it held is failed by the service with the container's reason).
        """
        ran: list[int] = []
        for index in claim_order(self.container, self.containers, self.size):
            if not self.storage.write_once(self.claim_key(index), self.batch_job_id.encode()):
                continue
            self._run_one(index)
            ran.append(index)
        return ran

    def _run_one(self, index: int) -> None:
        started = self.clock_ms()
        with (
            tempfile.TemporaryDirectory(prefix="remote-batch-output-", ignore_cleanup_errors=True) as tmp,
            self.console.segment() as segment,
        ):
            output_dir = Path(tmp)
            self.prepare_output_dir(output_dir)
            try:
                run = self.run_item(index, output_dir)
            except WorkerError as exc:
                rejected = " ".join(f"The item's input was rejected: {exc}".split())
                print(f"remote-batch worker: {rejected}", file=sys.stderr, flush=True)
                self._report(index, started, 2, rejected, segment)
                return
            self.publish(f"{self.output_prefix}{index}/", run, output_dir)
        reason: str | None = None
        if run.error is not None:
            # The error line as ``functions.domain.outcomes.error_summary`` words it without a signal
            # (the service words a signal's death itself, from the item's ``outcome.json``).
            message = " ".join(run.error.message.split())
            reason = run.error.reason or (f"{run.error.type}: {message}" if message else run.error.type)
        elif run.exit_code != 0:
            reason = f"Exited with code {run.exit_code}"
        self._report(index, started, run.exit_code, reason, segment)

    def _report(self, index: int, started: int, exit_code: int, reason: str | None, segment: Segment) -> None:
        failed = reason is not None or exit_code != 0
        document = {
            "index": index,
            "startedAt": started,
            "stoppedAt": max(started, self.clock_ms()),
            "exitCode": exit_code if 0 <= exit_code <= 255 else 255,
            "status": FAILED if failed else SUCCEEDED,
            "reason": (reason or f"Exited with code {exit_code}")[:1024] if failed else None,
            "logFirst": segment.first,
            "logCount": segment.count,
        }
        body = json.dumps(document, separators=(",", ":")).encode()
        self.storage.write(self.report_key(index), body, "application/json")
