"""Whether the filesystem of the local stack's home can take writes: full, read-only, or fine.

Every acknowledged write of the local stack goes to disk first (the journal, ``journal.py``); the
snapshots, the job log store, the event bus's record, the outbox and the tokens write there too. When
that filesystem is full (``ENOSPC``, or ``EDQUOT``: the user's quota is spent) or read-only
(``EROFS``: mounted so, or remounted so by the kernel after an I/O error), nothing new can be made
durable. The stack then refuses new writes before doing any of them (503 ``ServiceUnavailable``,
nothing written), answers reads, and says so on ``GET /health``; it resumes by itself once the
filesystem takes writes again.

The rule is Elasticsearch's flood-stage disk watermark (writes blocked while free space is below it,
released by itself when space returns), with a fixed reserve: a write is admitted only while at least
``reserve_bytes`` are free, so that the writes a request admitted earlier still has to make (its
journal records, the next snapshot) fit in what is left. A read-only filesystem is the same kind of
refusal (nothing can be made durable), with its own message; it too clears by itself once the
filesystem is writable again (an operator's ``mount -o remount,rw``).

A condition a write reported (``report``) is held until a probe shows the filesystem takes writes:
``statvfs`` says at least ``reserve_bytes`` are free and not read-only, and a probe file of
``PROBE_BYTES`` can be allocated (quotas are not in ``statvfs``: only an allocation sees them). Probes
run at most once per ``probe_interval`` seconds, whatever the request rate.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

logger = logging.getLogger(__name__)

#: Free bytes below which new writes are refused (``REMOTE_BATCH_DISK_RESERVE_BYTES``).
DEFAULT_RESERVE_BYTES = 64 * 1024 * 1024
#: Bytes the probe allocates to see that writes go through again (a quota shows only on allocation).
PROBE_BYTES = 64 * 1024
#: Seconds between two probes of a filesystem that is refusing writes.
PROBE_INTERVAL_SECONDS = 1.0
#: ``Retry-After`` of a refusal (seconds): a person or a job freeing space takes longer than a probe.
RETRY_AFTER_SECONDS = 5
PROBE_NAME = ".disk-probe"


class DiskCondition(StrEnum):
    """Why the home's filesystem takes no writes."""

    FULL = "full"
    READ_ONLY = "read-only"


#: The errors that say a filesystem takes no writes, and which condition each is.
CONDITION_OF_ERRNO = {
    errno.ENOSPC: DiskCondition.FULL,
    errno.EDQUOT: DiskCondition.FULL,
    errno.EROFS: DiskCondition.READ_ONLY,
}


def condition_of(exc: BaseException) -> DiskCondition | None:
    """The condition an ``OSError`` says the filesystem is in (``ENOSPC``, ``EDQUOT``, ``EROFS``), or
    None for any other error (``EIO``, a missing file, ...: not this kind)."""
    return CONDITION_OF_ERRNO.get(exc.errno) if isinstance(exc, OSError) and exc.errno is not None else None


@dataclass(frozen=True, slots=True)
class DiskStatus:
    """Why writes are refused now: the condition, where, and the free bytes against the reserve."""

    condition: DiskCondition
    path: Path
    free_bytes: int
    reserve_bytes: int

    @property
    def message(self) -> str:
        """The sentence of the 503 body and of ``/health``."""
        if self.condition is DiskCondition.READ_ONLY:
            return (
                f"The local stack's state disk is read-only ({self.path}): nothing new can be made "
                "durable; writes resume by themselves once it is writable again. Reads still work."
            )
        return (
            f"The local stack's state disk is full ({self.path}: {self.free_bytes} bytes free, "
            f"{self.reserve_bytes} needed); free some space and writes resume by themselves. "
            "Reads still work."
        )


class StateDiskUnavailable(Exception):
    """A write was refused (or failed) because the home's filesystem takes no writes.

    Raised before anything was written when ``StateDisk.check`` refused; raised from the failed write
    (``from`` its ``OSError``) when the filesystem filled meanwhile.
    """

    def __init__(self, status: DiskStatus) -> None:
        super().__init__(status.message)
        self.status = status


class StateDisk:
    """The filesystem of the local stack's home, as the writes see it.

    Parameters
    ----------
    home : Path
        The local stack's home (its filesystem is the one watched; the probe file goes in it).
    reserve_bytes : int
        Free bytes below which ``check`` refuses (0: refuse only after a write failed).
    clock : Callable[[], float]
        Monotonic seconds (probes are rate-limited by it).
    statvfs : Callable[[Path], os.statvfs_result]
        ``os.statvfs`` (tests pass a fake filesystem).
    """

    def __init__(
        self,
        home: Path,
        reserve_bytes: int = DEFAULT_RESERVE_BYTES,
        *,
        clock: Callable[[], float] = time.monotonic,
        statvfs: Callable[[Path], os.statvfs_result] = os.statvfs,
        probe_interval: float = PROBE_INTERVAL_SECONDS,
    ) -> None:
        self._home = home
        self._reserve = reserve_bytes
        self._clock = clock
        self._statvfs = statvfs
        self._probe_interval = probe_interval
        self._lock = threading.Lock()
        self._status: DiskStatus | None = None
        self._probed_at = -float("inf")

    @property
    def home(self) -> Path:
        """The watched home."""
        return self._home

    def status(self) -> DiskStatus | None:
        """Why writes are refused now, or None when the filesystem takes them.

        Cheap enough for every write: one ``statvfs`` while fine; while refusing, the last status until
        the next probe is due.
        """
        with self._lock:
            now = self._clock()
            if self._status is not None and now - self._probed_at < self._probe_interval:
                return self._status
            self._probed_at = now
            measured = self._measure()
            if measured is None and self._status is not None:
                # A condition a write met clears only once an allocation goes through again.
                measured = self._probe()
                if measured is None:
                    logger.warning("state disk takes writes again path=%s", self._home)
            elif measured is not None and self._status is None:
                logger.error("state disk refuses writes path=%s reason=%s", self._home, measured.message)
            self._status = measured
            return measured

    def check(self) -> None:
        """Refuse a write before it starts.

        Raises
        ------
        StateDiskUnavailable
            The filesystem is full (below the reserve) or read-only.
        """
        status = self.status()
        if status is not None:
            raise StateDiskUnavailable(status)

    def report(self, exc: BaseException) -> StateDiskUnavailable | None:
        """Note a write that failed with ``exc``; returns the ``StateDiskUnavailable`` to raise ``from``
        it when ``exc`` is of this kind (``condition_of``), else None (the caller re-raises ``exc``)."""
        condition = condition_of(exc)
        if condition is None:
            return None
        with self._lock:
            free = self._free_bytes()
            status = DiskStatus(condition, self._home, free if free is not None else 0, self._reserve)
            if self._status is None:
                logger.error("state disk refuses writes path=%s reason=%s", self._home, status.message)
            self._status = status
            self._probed_at = self._clock()
        return StateDiskUnavailable(status)

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Around a write: an ``OSError`` of this kind is reported and raised as
        ``StateDiskUnavailable`` (from it); any other error passes unchanged."""
        try:
            yield
        except OSError as exc:
            refused = self.report(exc)
            if refused is None:
                raise
            raise refused from exc

    # -- measuring ---------------------------------------------------------------------------------
    def _free_bytes(self) -> int | None:
        try:
            stats = self._statvfs(self._home)
        except OSError:
            return None
        return stats.f_bavail * stats.f_frsize

    def _measure(self) -> DiskStatus | None:
        try:
            stats = self._statvfs(self._home)
        except FileNotFoundError:
            return None  # the home is made at start; nothing to watch before
        free = stats.f_bavail * stats.f_frsize
        if stats.f_flag & os.ST_RDONLY:
            return DiskStatus(DiskCondition.READ_ONLY, self._home, free, self._reserve)
        if free < self._reserve:
            return DiskStatus(DiskCondition.FULL, self._home, free, self._reserve)
        return None

    def _probe(self) -> DiskStatus | None:
        """Allocate and remove a probe file; the status its failure says, or None when it went through."""
        path = self._home / PROBE_NAME
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                _allocate(descriptor, PROBE_BYTES)
            finally:
                os.close(descriptor)
                path.unlink(missing_ok=True)
        except OSError as exc:
            condition = condition_of(exc)
            if condition is None:
                raise
            free = self._free_bytes()
            return DiskStatus(condition, self._home, free if free is not None else 0, self._reserve)
        return None


def _allocate(descriptor: int, size: int) -> None:
    """Reserve ``size`` bytes of the file's blocks (``posix_fallocate``; zeros written where the
    platform has none)."""
    if hasattr(os, "posix_fallocate"):
        os.posix_fallocate(descriptor, 0, size)
        return
    os.write(descriptor, b"\0" * size)
    os.fsync(descriptor)
