"""File writes for the local stack's state: atomic replacement (write a temporary sibling, then
``os.replace``) and whole-line appends (a line that could not be written whole is cut off again)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_bytes_atomic(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` so readers see the old or the new file, never a partial one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(descriptor, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def append_line(path: Path, line: bytes, mode: int = 0o600, *, durable: bool = False) -> None:
    """Append ``line`` (which ends with a newline) to ``path`` (created with ``mode``), whole or not at all;
    ``durable``: ``fsync``-ed before it returns.

    A write that fails part way (a full disk takes the first bytes only) is cut back to the file's
    length before it, so no torn line sits between whole ones when a later append goes through.

    Raises
    ------
    OSError
        The write failed (``ENOSPC``, ``EDQUOT``, ``EROFS``, ...); the file is as it was.
    """
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
    try:
        before = os.fstat(descriptor).st_size
        view = memoryview(line)
        try:
            while view:
                view = view[os.write(descriptor, view) :]
            if durable:
                os.fsync(descriptor)
        except OSError:
            os.ftruncate(descriptor, before)
            raise
    finally:
        os.close(descriptor)


def write_json_atomic(path: Path, value: Any, mode: int = 0o644) -> None:
    """``write_bytes_atomic`` of ``value`` as indented UTF-8 JSON."""
    write_bytes_atomic(path, (json.dumps(value, indent=1, ensure_ascii=False) + "\n").encode(), mode)


def read_json(path: Path) -> Any:
    """The JSON value in ``path``, or None when the file does not exist."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
