"""The local stack's "worker images": for each Python version a job may choose, the interpreter of this
machine its job side runs in (``worker.job_side``), as AWS Batch runs a version's job definition in that
version's image.

Found at start (:func:`discover`): for each of ``functions.domain.runtime.PYTHON_VERSIONS``, the first
interpreter that runs and is that version among ``REMOTE_BATCH_LOCAL_PYTHONS`` (paths the operator
names), ``python3.X`` on PATH and pyenv's ``versions/3.X.*`` (``remote_batch_local.interpreters``);
never the stack's own virtualenv, whose site-packages are the service's.

A found interpreter's jobs see its own site-packages (the user's packages), like an image's Python.
The stack's own version is the exception that makes the local default behave as the cloud's image:
its job side runs the base interpreter without its site-packages (``-S``) and gets instead a folder
of links to the worker image's packages (``worker/requirements.txt``: numpy, scikit-learn, matplotlib...
and what they need) as installed in the stack's venv, and nothing else of it (no boto3, no moto, no
service modules).

The executor resolves a job's definition to its Python by the definition's ``-py3XY`` suffix
(``functions.domain.runtime.job_definition_name``): :meth:`LocalPythons.for_job_definition`.
"""

from __future__ import annotations

import re
import shutil
import sys
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from functions.domain.runtime import PYTHON_VERSIONS
from remote_batch_local.interpreters import Interpreter, find_interpreter, running_version
from worker.job_side import SITE_VARIABLE
from worker.supervisor import JOB_PYTHON_VARIABLE

#: The worker image's packages for the user's code (what the cloud image's python3.X holds).
IMAGE_REQUIREMENTS = Path(__file__).resolve().parent.parent / "worker" / "requirements.txt"
_DEFINITION_VERSION = re.compile(r"-py3(\d{1,2})(?::\d+)?$")
_REQUIREMENT_NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")


@dataclass(frozen=True, slots=True)
class LocalPython:
    """What a job of one Python version runs in here.

    Attributes
    ----------
    interpreter : Interpreter
        The interpreter found for the version.
    site : tuple[Path, ...]
        Site folders the job side gets instead of the interpreter's own (``-S``); empty: its own.
    """

    interpreter: Interpreter
    site: tuple[Path, ...] = ()

    def environment(self) -> dict[str, str]:
        """The worker's variables that point its job side at this Python."""
        env = {JOB_PYTHON_VARIABLE: str(self.interpreter.executable)}
        if self.site:
            env[SITE_VARIABLE] = ":".join(str(path) for path in self.site)
        return env

    def read_only_paths(self) -> list[Path]:
        """What a sandboxed job must see of it: the installation, the venv, the site folders."""
        return [self.interpreter.base_prefix, self.interpreter.prefix, *self.site]

    def describe(self) -> str:
        """``CPython 3.12.1 (/root/.pyenv/versions/3.12.1/bin/python3.12)``, with the image's packages
        named when the job side gets them instead of the interpreter's own."""
        packages = ", with the worker image's packages" if self.site else ""
        return f"CPython {self.interpreter.micro} ({self.interpreter.executable}{packages})"


@dataclass(frozen=True, slots=True)
class LocalPythons:
    """The local Python of each version found, by ``major.minor``."""

    by_version: dict[str, LocalPython] = field(default_factory=dict)

    @property
    def versions(self) -> tuple[str, ...]:
        """The versions found, oldest first."""
        return tuple(sorted(self.by_version, key=lambda v: tuple(int(p) for p in v.split("."))))

    def default(self) -> str | None:
        """What a job naming no version runs here: the stack's own version when found (its job side
        has the worker image's packages, as the cloud's default image), else the newest found."""
        if running_version() in self.by_version:
            return running_version()
        return self.versions[-1] if self.versions else None

    def for_job_definition(self, job_definition: str) -> LocalPython | None:
        """The Python of a job definition named ``...-py3XY`` (``:revision`` allowed), None for another
        name (the worker's own interpreter runs the job side) or a version not found."""
        match = _DEFINITION_VERSION.search(job_definition)
        return self.by_version.get(f"3.{match[1]}") if match else None

    def descriptions(self) -> dict[str, str]:
        """Each version's interpreter, for ``GET /runtime`` and the start log line."""
        return {version: self.by_version[version].describe() for version in self.versions}

    def read_only_paths(self) -> list[Path]:
        """Every version's paths (a warm worker's sandbox is made before its job's version is known)."""
        return [path for python in self.by_version.values() for path in python.read_only_paths()]


def discover(home: Path, extra: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> LocalPythons:
    """Find the interpreter of each version jobs may choose (see the module docstring).

    Parameters
    ----------
    home : Path
        The stack's home: the own version's image site is built in ``home/pythons/<version>/site``.
    extra : iterable of str
        Interpreter paths tried first (``REMOTE_BATCH_LOCAL_PYTHONS``).
    environ : Mapping[str, str] or None
        Where PATH and PYENV_ROOT are read (``os.environ`` when None).
    """
    own_venv = Path(sys.prefix)
    paths = list(extra)

    def find(version: str) -> Interpreter | None:
        return find_interpreter(version, environ, extra=paths, exclude_prefixes=[own_venv])

    with ThreadPoolExecutor(max_workers=len(PYTHON_VERSIONS)) as pool:
        found = dict(zip(PYTHON_VERSIONS, pool.map(find, PYTHON_VERSIONS), strict=True))
    pythons: dict[str, LocalPython] = {}
    for version, interpreter in found.items():
        if interpreter is None:
            continue
        own = version == running_version() and interpreter.prefix.resolve() == Path(sys.base_prefix).resolve()
        site = (image_site(home / "pythons" / version / "site"),) if own else ()
        pythons[version] = LocalPython(interpreter, site)
    return LocalPythons(pythons)


def image_distributions(requirements: Path = IMAGE_REQUIREMENTS) -> list[metadata.Distribution]:
    """The distributions of this environment the worker image's packages are made of: those
    ``requirements`` names and, recursively, what they require (extras and markers that do not hold
    here left out), each once; a name not installed here is skipped."""
    from packaging.requirements import Requirement

    pending = [
        match[1]
        for line in requirements.read_text().splitlines()
        if (match := _REQUIREMENT_NAME.match(line.strip()))
    ]
    seen: dict[str, metadata.Distribution] = {}
    while pending:
        name = pending.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[key] = distribution
        for text in distribution.requires or []:
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return list(seen.values())


def image_site(target: Path, requirements: Path = IMAGE_REQUIREMENTS) -> Path:
    """Build ``target``: a folder of links to the top-level packages, modules and ``.dist-info`` of
    :func:`image_distributions` in this environment's site-packages, and nothing else. Rebuilt at
    every start (a package upgraded since is linked anew). Returns ``target``."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for distribution in image_distributions(requirements):
        root = Path(str(distribution.locate_file("")))
        for entry in {Path(str(file)).parts[0] for file in distribution.files or [] if str(file)}:
            if entry in ("..", "__pycache__") or entry.endswith(".pth"):
                continue
            link, source = target / entry, root / entry
            if source.exists() and not link.exists():
                link.symlink_to(source)
    return target
