"""The local stack's state disk: when writes are refused (full, over quota, read-only), when they resume."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

from remote_batch_local.state_disk import (
    CONDITION_OF_ERRNO,
    DiskCondition,
    StateDisk,
    StateDiskUnavailable,
    condition_of,
)

RESERVE = 1000


class FakeFilesystem:
    """``os.statvfs`` of a filesystem whose free bytes and read-only flag the test sets."""

    def __init__(self, free: int, read_only: bool = False) -> None:
        self.free = free
        self.read_only = read_only

    def __call__(self, path: Path) -> Any:
        return os.statvfs_result(
            (4096, 1, 0, 0, self.free, 0, 0, 0, os.ST_RDONLY if self.read_only else 0, 255)
        )


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _disk(tmp_path: Path, filesystem: FakeFilesystem, clock: FakeClock) -> StateDisk:
    return StateDisk(tmp_path, RESERVE, clock=clock, statvfs=filesystem, probe_interval=1.0)


def test_writes_are_admitted_while_the_reserve_is_free(tmp_path: Path) -> None:
    disk = _disk(tmp_path, FakeFilesystem(free=RESERVE), FakeClock())

    disk.check()

    assert disk.status() is None


def test_below_the_reserve_writes_are_refused_and_resume_when_space_returns(tmp_path: Path) -> None:
    filesystem, clock = FakeFilesystem(free=RESERVE - 1), FakeClock()
    disk = _disk(tmp_path, filesystem, clock)

    with pytest.raises(StateDiskUnavailable) as refused:
        disk.check()

    assert refused.value.status.condition is DiskCondition.FULL
    assert refused.value.status.free_bytes == RESERVE - 1
    assert str(refused.value).startswith("The local stack's state disk is full")
    # Space returns: the next probe (one interval later) admits writes again.
    filesystem.free = 10 * RESERVE
    clock.now += 1.0
    assert disk.status() is None


def test_a_read_only_filesystem_refuses_writes_with_its_own_reason(tmp_path: Path) -> None:
    filesystem, clock = FakeFilesystem(free=10 * RESERVE, read_only=True), FakeClock()
    disk = _disk(tmp_path, filesystem, clock)

    status = disk.status()

    assert status is not None and status.condition is DiskCondition.READ_ONLY
    assert "read-only" in status.message
    filesystem.read_only = False
    clock.now += 1.0
    assert disk.status() is None


@pytest.mark.parametrize(
    ("code", "condition"),
    [
        (errno.ENOSPC, DiskCondition.FULL),
        (errno.EDQUOT, DiskCondition.FULL),
        (errno.EROFS, DiskCondition.READ_ONLY),
    ],
)
def test_a_failed_write_of_the_kind_holds_the_refusal_until_a_probe_allocates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, condition: DiskCondition
) -> None:
    # Given free space by statvfs (a quota, or a filesystem that filled and was not measured yet)
    filesystem, clock = FakeFilesystem(free=10 * RESERVE), FakeClock()
    disk = _disk(tmp_path, filesystem, clock)

    # When a write fails with the error
    with pytest.raises(StateDiskUnavailable) as refused, disk.writing():
        raise OSError(code, os.strerror(code))

    # Then writes are refused with that condition, until a probe file can be allocated again
    assert refused.value.status.condition is condition
    assert isinstance(refused.value.__cause__, OSError)
    failing = OSError(code, os.strerror(code))
    monkeypatch.setattr(os, "posix_fallocate", lambda *args: (_ for _ in ()).throw(failing))
    clock.now += 1.0
    status = disk.status()
    assert status is not None and status.condition is condition
    monkeypatch.undo()
    assert disk.status() is not None  # the probe is not due again before an interval passed
    clock.now += 1.0
    assert disk.status() is None
    assert not (tmp_path / ".disk-probe").exists()


def test_other_write_errors_pass_unchanged(tmp_path: Path) -> None:
    disk = _disk(tmp_path, FakeFilesystem(free=10 * RESERVE), FakeClock())

    with pytest.raises(OSError, match="I/O error") as failed, disk.writing():
        raise OSError(errno.EIO, "I/O error")

    assert failed.value.errno == errno.EIO
    assert disk.status() is None


def test_the_kind_is_exactly_the_three_errors() -> None:
    assert set(CONDITION_OF_ERRNO) == {errno.ENOSPC, errno.EDQUOT, errno.EROFS}
    assert condition_of(FileNotFoundError(errno.ENOENT, "x")) is None
    assert condition_of(ValueError("x")) is None
