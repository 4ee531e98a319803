"""What jobs run with, as the API serves it (``GET /runtime``): the Python versions a job may choose.

A job runs on CPython 3.11, 3.12 or 3.13, chosen per job (``POST /jobs`` ``pythonVersion``; the SDK sends
its own major.minor). A cloudpickle of a function carries the bytecode of the Python that made it and
only loads in the same major.minor version (cloudpickle's README: "cloudpickle ... is only guaranteed
to work ... with the same version of Python"), so a pickled call runs in the version it was made by: a
version the deployment does not run is refused at submit, naming the versions it does, before any job
runs. Deployed, each version has its worker image and a job definition per machine class
(:func:`job_definition_name`); the local stack runs the versions whose interpreter it found.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from functions.domain.errors import ValidationFailed

#: The versions a deployment runs: one worker image each (worker/Dockerfile's ``PYTHON_VERSION``).
PYTHON_VERSIONS = ("3.11", "3.12", "3.13")
#: A job that names no version runs this one (the worker image's before versions were chosen).
DEFAULT_PYTHON_VERSION = "3.12"
#: ``major.minor`` as ``pythonVersion`` spells it.
PYTHON_VERSION_PATTERN = r"^3\.[0-9]{1,2}$"


def python_minor(version: str) -> tuple[int, int]:
    """``"3.12"`` → ``(3, 12)``. Raises ``ValueError`` for anything not ``major.minor``."""
    if not re.fullmatch(PYTHON_VERSION_PATTERN, version):
        raise ValueError(f"{version!r} is not a Python major.minor version such as 3.12")
    major, minor = version.split(".")
    return int(major), int(minor)


def job_definition_name(base: str, version: str) -> str:
    """The job definition of a machine class's jobs on Python ``version``: the class's definition
    (a name or an ARN, with or without ``:revision``) with ``-py3XY`` after its name
    (``remote-batch-dev-Basic1x8-py312``, ``...:job-definition/worker-py312:1``). AWS Batch cannot
    override a definition's image per job, so each version has its definitions."""
    major, minor = python_minor(version)
    head, _, revision = base.rpartition(":")
    if head and revision.isdigit() and not head.endswith(":"):
        return f"{head}-py{major}{minor}:{revision}"
    return f"{base}-py{major}{minor}"


@dataclass(frozen=True, slots=True)
class PythonRuntime:
    """The Python versions this deployment runs jobs on.

    Attributes
    ----------
    versions : tuple[str, ...]
        ``major.minor`` of each, oldest first.
    default : str
        What a job that names none runs; one of ``versions``.
    interpreters : dict[str, str]
        Where each version runs, for people (the local stack: ``CPython 3.12.1
        (/root/.pyenv/versions/3.12.1/bin/python3.12)``); empty when deployed (each version's image).
    """

    versions: tuple[str, ...] = PYTHON_VERSIONS
    default: str = DEFAULT_PYTHON_VERSION
    interpreters: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.default not in self.versions:
            raise ValueError(f"the default Python {self.default} is not one of {', '.join(self.versions)}")

    def choose(self, requested: str | None) -> str:
        """The version a job runs: ``requested``, or the default when None.

        Raises
        ------
        ValidationFailed
            ``field`` ``pythonVersion``: a version this deployment does not run, naming those it does.
        """
        if requested is None:
            return self.default
        if requested in self.versions:
            return requested
        runs = ", ".join(self.versions)
        raise ValidationFailed(
            f"Jobs here run Python {runs}, not {requested}; submit from one of those versions (a pickled "
            f"function only loads in the Python version that made it), or name one in pythonVersion.",
            field="pythonVersion",
        )
