"""Tiny real wheels for tests that resolve and install with uv without a network: a folder of them is
given to uv as its only package source (``uv_offline``: ``UV_NO_INDEX`` and ``UV_FIND_LINKS``)."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def make_wheel(folder: Path, name: str, version: str, module_source: str | None = None) -> Path:
    """A pure-Python wheel ``<name>-<version>-py3-none-any.whl`` in ``folder`` whose package ``name``
    holds ``VERSION = "<version>"`` (or ``module_source``). Returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": (module_source or f"VERSION = {version!r}\n").encode(),
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as wheel:
        records = []
        for member, data in files.items():
            wheel.writestr(member, data)
            records.append(f"{member},{_record_hash(data)},{len(data)}")
        records.append(f"{info}/RECORD,,")
        wheel.writestr(f"{info}/RECORD", "\n".join(records) + "\n")
    return path


def uv_offline(folder: Path) -> dict[str, str]:
    """The variables that make uv resolve and install from ``folder`` only (no index, no network)."""
    return {"UV_NO_INDEX": "1", "UV_FIND_LINKS": str(folder), "UV_NO_CACHE": "1"}
