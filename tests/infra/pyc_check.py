"""Run by the Lambda runtime's Python (``python3.13 -I -S pyc_check.py SPEC.json``): how each module of
a folder or a zip was compiled, read with that interpreter's own rules (its magic number, cache tag and
source-hash key, none of which the tests' Python shares). Standard library only.

SPEC.json: ``{"folder": str}`` or ``{"zip": str}``, and ``"report": path``. The report:
``{"python": "3.13.0", "modules": int, "missing": [module, ...], "magic_ok": bool, "flags": [int, ...],
"hash_mismatches": [...], "filenames": {module: co_filename}}`` (``filenames`` and hashes for a
folder only).
"""

import importlib.util
import json
import marshal
import platform
import sys
import zipfile
from pathlib import Path


def _folder(folder: Path) -> dict[str, object]:
    modules = sorted(folder.rglob("*.py"))
    missing, flags, mismatches, filenames = [], set(), [], {}
    magic_ok = True
    for module in modules:
        name = module.relative_to(folder).as_posix()
        pyc = Path(importlib.util.cache_from_source(str(module)))
        if not pyc.is_file():
            missing.append(name)
            continue
        data = pyc.read_bytes()
        magic_ok = magic_ok and data[:4] == importlib.util.MAGIC_NUMBER
        flags.add(int.from_bytes(data[4:8], "little"))
        if data[8:16] != importlib.util.source_hash(module.read_bytes()):
            mismatches.append(name)
        filenames[name] = marshal.loads(data[16:]).co_filename
    stray = sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*.pyc")
        if p not in {Path(importlib.util.cache_from_source(str(m))) for m in modules}
    )
    return {
        "modules": len(modules),
        "missing": missing,
        "stray": stray,
        "magic_ok": magic_ok,
        "flags": sorted(flags),
        "hash_mismatches": mismatches,
        "filenames": filenames,
    }


def _zip(path: Path) -> dict[str, object]:
    with zipfile.ZipFile(path) as archive:
        names = set(archive.namelist())
        modules = sorted(n for n in names if n.endswith(".py"))
        headers = {n: archive.open(n).read(16) for n in names if n.endswith(".pyc")}
    missing = [m for m in modules if importlib.util.cache_from_source(m) not in headers]
    return {
        "modules": len(modules),
        "missing": missing,
        "magic_ok": {header[:4] for header in headers.values()} == {importlib.util.MAGIC_NUMBER},
        "flags": sorted({int.from_bytes(header[4:8], "little") for header in headers.values()}),
    }


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    report = _folder(Path(spec["folder"])) if "folder" in spec else _zip(Path(spec["zip"]))
    report["python"] = platform.python_version()
    Path(spec["report"]).write_text(json.dumps(report))


if __name__ == "__main__":
    main()
