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

import compileall
import importlib.util
import re
import shutil
import sys
import sysconfig
from collections.abc import Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
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
# The modules a .pth line imports: each `import name` and `__import__('name')` in it.
_PTH_IMPORT = re.compile(r"\bimport\s+([A-Za-z_]\w*)|__import__\(['\"]([A-Za-z_]\w*)['\"]\)")


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


def image_entries(requirements: Path = IMAGE_REQUIREMENTS) -> list[Path]:
    """The top-level packages, modules and ``.dist-info`` folders of :func:`image_distributions` in
    this environment's site-packages (absolute paths, sorted; scripts outside it and ``.pth`` files
    left out)."""
    entries: set[Path] = set()
    for distribution in image_distributions(requirements):
        root = Path(str(distribution.locate_file("")))
        for entry in {Path(str(file)).parts[0] for file in distribution.files or [] if str(file)}:
            if entry in ("..", "__pycache__") or entry.endswith(".pth"):
                continue
            if (root / entry).exists():
                entries.add(root / entry)
    return sorted(entries)


def image_site(target: Path, requirements: Path = IMAGE_REQUIREMENTS) -> Path:
    """Build ``target``: a folder of links to :func:`image_entries`, and nothing else. Rebuilt at
    every start (a package upgraded since is linked anew). Returns ``target``."""
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for source in image_entries(requirements):
        link = target / source.name
        if not link.exists():
            link.symlink_to(source)
    return target


def startup_modules(site_packages: Path) -> list[Path]:
    """The modules and packages of ``site_packages`` that its ``.pth`` files import, which every start
    of this environment's Python runs (editable installs' finders, setuptools' ``_distutils_hack``)."""
    found: set[Path] = set()
    for pth in sorted(site_packages.glob("*.pth")):
        for line in pth.read_text().splitlines():
            if not line.startswith(("import ", "import\t")):
                continue
            for names in _PTH_IMPORT.findall(line):
                spec = importlib.util.find_spec(next(name for name in names if name))
                paths = [*(spec.submodule_search_locations or [])] if spec else []
                if spec and spec.origin and not paths:
                    paths = [spec.origin]
                found.update(Path(path) for path in paths if Path(path).parent == site_packages)
    return sorted(found)


def compile_image_packages(requirements: Path = IMAGE_REQUIREMENTS) -> int:
    """Write the ``.pyc`` of every module of :func:`image_entries` and :func:`startup_modules`, on
    every core (``make`` runs it after installing the venv). A job's sandbox mounts them read-only, so
    a module without its ``.pyc`` would be compiled again at each job's import; the venv's other
    packages get theirs when the stack or a test first imports them. Returns how many modules did not
    compile (their errors printed)."""
    site_packages = Path(sysconfig.get_path("purelib"))
    entries = [*image_entries(requirements), *startup_modules(site_packages)]
    sources = sorted(
        {
            str(path)
            for entry in entries
            for path in ([entry] if entry.is_file() else entry.rglob("*.py"))
            if path.suffix == ".py"
        }
    )
    with ProcessPoolExecutor() as pool:
        compiled = list(pool.map(_compile, sources, chunksize=64))
    return compiled.count(False)


def _compile(source: str) -> bool:
    """``compileall.compile_file`` of one module, its errors printed."""
    return bool(compileall.compile_file(source, quiet=1))


if __name__ == "__main__":
    sys.exit(1 if compile_image_packages() else 0)
