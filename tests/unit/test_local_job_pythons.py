"""remote_batch_local/job_pythons.py: a job definition's Python, the own version's image site."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import sysconfig
from pathlib import Path

from remote_batch_local.interpreters import Interpreter, running_version
from remote_batch_local.job_pythons import (
    LocalPython,
    LocalPythons,
    compile_image_packages,
    image_entries,
    image_site,
    startup_modules,
)


def _python(version: str, prefix: str) -> LocalPython:
    return LocalPython(
        Interpreter(
            version,
            f"{version}.1",
            Path(prefix, "bin", f"python{version}"),
            False,
            Path(prefix),
            Path(prefix),
        )
    )


PYTHONS = LocalPythons({"3.12": _python("3.12", "/opt/py312"), "3.13": _python("3.13", "/opt/py313")})


def test_a_job_definition_names_its_python_by_its_suffix() -> None:
    arn = "arn:aws:batch:us-east-1:000000000000:job-definition/remote-batch-local-worker"

    assert PYTHONS.for_job_definition(f"{arn}-py313") is PYTHONS.by_version["3.13"]
    assert PYTHONS.for_job_definition(f"{arn}-py312:4") is PYTHONS.by_version["3.12"]
    assert PYTHONS.for_job_definition(f"{arn}-py311") is None  # not found here
    assert PYTHONS.for_job_definition(arn) is None  # no version: the worker's own interpreter


def test_the_worker_is_pointed_at_the_interpreter_and_the_sandbox_sees_it() -> None:
    python = PYTHONS.by_version["3.13"]

    assert python.environment() == {"REMOTE_BATCH_JOB_PYTHON": "/opt/py313/bin/python3.13"}
    assert Path("/opt/py313") in PYTHONS.read_only_paths() and Path("/opt/py312") in PYTHONS.read_only_paths()
    assert PYTHONS.versions == ("3.12", "3.13")
    assert PYTHONS.descriptions()["3.12"] == "CPython 3.12.1 (/opt/py312/bin/python3.12)"


def test_the_default_is_the_stacks_own_version_when_found_else_the_newest() -> None:
    own = running_version()

    assert LocalPythons({own: _python(own, "/opt/own"), "3.13": _python("3.13", "/x")}).default() == own
    assert LocalPythons({"3.9": _python("3.9", "/a"), "3.10": _python("3.10", "/b")}).default() == "3.10"
    assert LocalPythons().default() is None


def test_the_image_site_holds_the_worker_images_packages_and_none_of_the_services(tmp_path: Path) -> None:
    site = image_site(tmp_path / "site")

    names = {path.name for path in site.iterdir()}
    assert {"numpy", "sklearn", "matplotlib", "PIL", "cloudpickle", "boto3"} <= names
    assert (
        not {"moto", "pydantic", "aws_lambda_powertools", "functions", "remote_batch_local", "worker"} & names
    )
    assert all(path.is_symlink() for path in site.iterdir())
    # The base interpreter without its own site-packages, plus this folder: numpy, no service module.
    probe = (
        f"import site, importlib.util; site.addsitedir({str(site)!r}); "
        "print(importlib.util.find_spec('numpy') is not None, importlib.util.find_spec('moto') is None, "
        "importlib.util.find_spec('functions') is None)"
    )
    base = getattr(sys, "_base_executable", sys.executable)
    done = subprocess.run([base, "-I", "-S", "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["True", "True", "True"]


def test_the_image_packages_and_what_every_start_imports_are_compiled_and_nothing_else() -> None:
    # Given this venv (make wrote the .pyc of the image's packages), its .pth files and a module outside
    site_packages = Path(sysconfig.get_path("purelib"))
    startup = startup_modules(site_packages)
    entries = image_entries()

    # When they are compiled (again: what is up to date is left as it is)
    failures = compile_image_packages()

    # Then every module compiled, the editable installs' finders among what every start imports,
    # each image module has its .pyc, and no service package is among those compiled
    assert failures == 0
    names = {path.name for path in startup}
    assert "_distutils_hack" in names and any(name.startswith("__editable___remote_batch_") for name in names)
    numpy = next(entry for entry in entries if entry.name == "numpy")
    for module in (numpy / "__init__.py", *startup[:1]):
        assert Path(importlib.util.cache_from_source(str(module))).is_file()
    assert not {"moto", "aws_cdk", "pydantic"} & {entry.name for entry in entries + startup}
