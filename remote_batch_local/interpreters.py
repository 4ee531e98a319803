"""The CPython interpreters of this machine, by ``major.minor``, found by running them.

Standard library only: ``infra.lambda_bundle`` (which compiles the Lambda code for the Lambda runtime's
Python) uses it as well as the local stack (which runs each job in the interpreter of the job's
``pythonVersion``).

A name on PATH is not proof of an interpreter: pyenv puts a ``python3.12`` shim on PATH that fails
("pyenv: python3.12: command not found") unless pyenv selects that version. So each candidate is run
(``-I -c``, a few milliseconds) and kept only when it answers with its version and its real
``sys.executable``; the shim is replaced by the interpreter it ran.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: How long one candidate may take to say what it is, in seconds (pyenv's shim adds ~50 ms).
PROBE_TIMEOUT_SECONDS = 10.0
_PROBE = (
    "import json, sys; print(json.dumps({'version': list(sys.version_info[:3]), "
    "'implementation': sys.implementation.name, 'executable': sys.executable, "
    "'prefix': sys.prefix, 'base_prefix': sys.base_prefix}))"
)
_VERSION = re.compile(r"^3\.\d{1,2}$")


@dataclass(frozen=True, slots=True)
class Interpreter:
    """A CPython interpreter that ran here.

    Attributes
    ----------
    version : str
        ``major.minor``, e.g. ``"3.12"``.
    micro : str
        The full version, e.g. ``"3.12.1"``.
    executable : Path
        Its ``sys.executable`` (a pyenv shim resolved to the interpreter it runs).
    is_venv : bool
        It is a virtual environment's interpreter (``sys.prefix != sys.base_prefix``).
    prefix : Path
        Its ``sys.prefix``.
    base_prefix : Path
        Its ``sys.base_prefix`` (the installation a venv was made from; ``prefix`` otherwise).
    """

    version: str
    micro: str
    executable: Path
    is_venv: bool
    prefix: Path
    base_prefix: Path


def probe(candidate: str | os.PathLike[str]) -> Interpreter | None:
    """Run ``candidate`` and describe it; None when it does not run, is not CPython 3, or says nothing
    readable within ``PROBE_TIMEOUT_SECONDS``."""
    try:
        done = subprocess.run(  # noqa: S603 - a fixed probe run by an interpreter path
            [os.fspath(candidate), "-I", "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_SECONDS,
            check=False,
            env={"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/")},
        )
        facts = json.loads(done.stdout) if done.returncode == 0 else None
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    if not isinstance(facts, dict) or facts.get("implementation") != "cpython":
        return None
    major, minor, micro = facts["version"]
    if major != 3:
        return None
    return Interpreter(
        version=f"{major}.{minor}",
        micro=f"{major}.{minor}.{micro}",
        executable=Path(facts["executable"]),
        is_venv=facts["prefix"] != facts["base_prefix"],
        prefix=Path(facts["prefix"]),
        base_prefix=Path(facts["base_prefix"]),
    )


def pyenv_root(environ: Mapping[str, str]) -> Path | None:
    """pyenv's root: ``$PYENV_ROOT``, else what ``pyenv root`` prints, else None (no pyenv)."""
    if environ.get("PYENV_ROOT"):
        return Path(environ["PYENV_ROOT"])
    pyenv = shutil.which("pyenv", path=environ.get("PATH"))
    if pyenv is None:
        return None
    try:
        done = subprocess.run(  # noqa: S603 - pyenv's own command
            [pyenv, "root"], capture_output=True, text=True, timeout=PROBE_TIMEOUT_SECONDS, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    root = done.stdout.strip()
    return Path(root) if done.returncode == 0 and root else None


def candidates(version: str, environ: Mapping[str, str], extra: Iterable[str] = ()) -> list[str]:
    """Where an interpreter of ``version`` may be, best first: the ``extra`` paths (a setting naming
    them), ``python3.X`` on PATH, then pyenv's ``<root>/versions/3.X.*/bin/python3.X`` (newest micro
    first)."""
    found = [*extra]
    on_path = shutil.which(f"python{version}", path=environ.get("PATH"))
    if on_path is not None:
        found.append(on_path)
    root = pyenv_root(environ)
    if root is not None:
        installs = sorted(
            (root / "versions").glob(f"{version}.*"),
            key=lambda path: [int(part) if part.isdigit() else -1 for part in path.name.split(".")],
            reverse=True,
        )
        found += [str(path / "bin" / f"python{version}") for path in installs]
    return found


def find_interpreter(
    version: str,
    environ: Mapping[str, str] | None = None,
    *,
    extra: Iterable[str] = (),
    exclude_prefixes: Iterable[Path] = (),
) -> Interpreter | None:
    """The first of :func:`candidates` that runs and is CPython ``version``.

    Parameters
    ----------
    version : str
        ``major.minor``, e.g. ``"3.13"``.
    environ : Mapping[str, str] or None
        Where PATH and PYENV_ROOT are read; ``os.environ`` when None.
    extra : iterable of str
        Interpreter paths tried first.
    exclude_prefixes : iterable of Path
        ``sys.prefix`` values refused (the local stack refuses its own venv: the job's interpreter
        must not see the service's site-packages).

    Raises
    ------
    ValueError
        ``version`` is not ``major.minor``.
    """
    if not _VERSION.fullmatch(version):
        raise ValueError(f"{version!r} is not a Python major.minor version such as 3.12")
    environ = os.environ if environ is None else environ
    refused = {path.resolve() for path in exclude_prefixes}
    for candidate in candidates(version, environ, extra):
        found = probe(candidate)
        if found is not None and found.version == version and found.prefix.resolve() not in refused:
            return found
    return None


def running_version() -> str:
    """This interpreter's ``major.minor``."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"
