"""Atomic file writes for the local stack's state (write a temporary sibling, then ``os.replace``)."""

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


def write_json_atomic(path: Path, value: Any, mode: int = 0o644) -> None:
    """``write_bytes_atomic`` of ``value`` as indented UTF-8 JSON."""
    write_bytes_atomic(path, (json.dumps(value, indent=1, ensure_ascii=False) + "\n").encode(), mode)


def read_json(path: Path) -> Any:
    """The JSON value in ``path``, or None when the file does not exist."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
