"""What jobs run with, as the API serves it (``GET /runtime``), and the rule a pickle must follow.

A cloudpickle of a function carries the bytecode of the Python that made it; it only loads in the same
major.minor version (cloudpickle's README: "cloudpickle ... is only guaranteed to work ... with the
same version of Python"). A pickled call made by another minor version than the worker's is refused at
submit, before any job runs, instead of failing inside the job.
"""

from __future__ import annotations

import re

from functions.domain.errors import ValidationFailed

#: The worker image's Python: worker/Dockerfile is ``FROM python:3.12-slim`` and worker/Dockerfile.gpu
#: installs Ubuntu 24.04's python3, also 3.12 (tests/unit/test_domain_runtime.py checks both files).
#: The local stack runs its worker with its own interpreter and says so (``Settings.worker_python``).
WORKER_PYTHON_VERSION = "3.12"
#: ``major.minor`` as ``pythonVersion`` and ``REMOTE_BATCH_WORKER_PYTHON`` spell it.
PYTHON_VERSION_PATTERN = r"^3\.[0-9]{1,2}$"


def python_minor(version: str) -> tuple[int, int]:
    """``"3.12"`` → ``(3, 12)``. Raises ``ValueError`` for anything not ``major.minor``."""
    if not re.fullmatch(PYTHON_VERSION_PATTERN, version):
        raise ValueError(f"{version!r} is not a Python major.minor version such as 3.12")
    major, minor = version.split(".")
    return int(major), int(minor)


def check_pickle_python(client_version: str | None, worker_version: str) -> None:
    """Refuse a pickled call made by another Python minor version than the worker's.

    Parameters
    ----------
    client_version : str | None
        ``pythonVersion`` of the submit (``3.11``), None when the client did not say.
    worker_version : str
        The worker's ``major.minor``.

    Raises
    ------
    ValidationFailed
        ``field`` ``pythonVersion``, naming both versions and what to do.
    """
    if client_version is None or python_minor(client_version) == python_minor(worker_version):
        return
    raise ValidationFailed(
        f"This pickle was made by Python {client_version}, but jobs run Python {worker_version} and a "
        f"pickled function only loads in the Python version that made it; submit it from Python "
        f"{worker_version}, or send code or a command instead.",
        field="pythonVersion",
    )
