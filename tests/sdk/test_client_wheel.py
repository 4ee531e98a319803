"""The client wheel is the client: built from the repository root, it holds ``remote_batch/`` alone (no
``functions``, ``worker``, ``remote_batch_local`` or ``infra``), requires none of the service's packages,
and installs into a clean venv where ``remote-batch --help`` and ``import remote_batch`` work.

One build, one clean venv (``uv venv`` + ``uv pip install``, the dependencies from the package index) for
the module; about 10-30 s, so ``slow`` (out of ``make check``, in ``make test``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

import pytest
from pytest_socket import enable_socket

from tests.local_stack import REPO_ROOT

pytestmark = pytest.mark.slow

UV = Path(sys.executable).with_name("uv")
# What the build reads from the checkout: its tree without the venv, caches and build outputs. The build
# runs on a copy, since setuptools writes build/ and *.egg-info beside the pyproject.toml it builds.
NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv", "node_modules", "build", "dist", "cdk.out", "*.egg-info", "mutants",
    ".*_cache", ".hypothesis", ".remote-batch", ".schemathesis", "__pycache__",
)  # fmt: skip
# Top-level names the client must not ship, and distributions it must not require.
SERVER_PACKAGES = {"functions", "worker", "remote_batch_local", "infra", "tests", "benchmarks"}
SERVER_REQUIREMENTS = {"boto3", "botocore", "aws-lambda-powertools", "pydantic", "moto"}


@dataclass(frozen=True)
class InstalledWheel:
    """The built wheel and a clean venv holding it (and its dependencies) alone."""

    wheel: Path
    venv: Path
    workdir: Path  # an empty working directory: ``python -c`` puts the cwd first on sys.path

    def run(self, *command: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        return subprocess.run(
            [str(self.venv / "bin" / command[0]), *command[1:]],
            cwd=self.workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )


def _uv(*arguments: str, cwd: Path) -> None:
    done = subprocess.run(
        [str(UV), *arguments], cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"uv {' '.join(arguments)} failed:\n{done.stdout}\n{done.stderr}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> InstalledWheel:
    root = tmp_path_factory.mktemp("client-wheel")
    source = root / "source"
    shutil.copytree(REPO_ROOT, source, ignore=NOT_SOURCES)
    _uv("build", "--wheel", "--out-dir", str(root / "dist"), str(source), cwd=root)
    (wheel,) = (root / "dist").glob("remote_batch-*.whl")
    venv = root / "venv"
    _uv("venv", "--quiet", "--python", sys.executable, str(venv), cwd=root)
    _uv("pip", "install", "--quiet", "--python", str(venv / "bin" / "python"), str(wheel), cwd=root)
    workdir = root / "work"
    workdir.mkdir()
    return InstalledWheel(wheel, venv, workdir)


@pytest.fixture(autouse=True)
def _network_for_subprocesses() -> None:
    """The sdk folder allows only loopback in-process; this module's network use is uv's, in its own
    process (the package index), which pytest-socket does not reach anyway."""
    enable_socket()


def _top_level(names: list[str]) -> set[str]:
    return {name.split("/", 1)[0] for name in names}


def _metadata(wheel: Path) -> dict[str, list[str]]:
    with zipfile.ZipFile(wheel) as archive:
        (name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        message = Parser().parsestr(archive.read(name).decode())
    return {key: message.get_all(key) or [] for key in ("Name", "Requires-Dist", "Provides-Extra")}


def _distribution(requirement: str) -> str:
    """``"pandas>=2.0; extra == 'client'"`` -> ``"pandas"`` (PEP 503 normalized)."""
    name = requirement.split(";", 1)[0]
    for stop in "<>=!~[ (":
        name = name.split(stop, 1)[0]
    return name.strip().lower().replace("_", "-").replace(".", "-")


def test_the_wheel_holds_the_client_package_and_its_metadata_only(installed: InstalledWheel) -> None:
    with zipfile.ZipFile(installed.wheel) as archive:
        names = archive.namelist()
    print(f"{installed.wheel.name}: {len(names)} files")
    print("\n".join(sorted(names)))

    top = _top_level(names)
    (dist_info,) = [name for name in top if name.endswith(".dist-info")]
    assert top == {"remote_batch", dist_info}
    assert dist_info.startswith("remote_batch-0.2.0")
    assert not top & SERVER_PACKAGES
    assert "remote_batch/__init__.py" in names
    assert "remote_batch/cli.py" in names
    assert not [name for name in names if "/local/" in name or name.startswith("remote_batch/local")]
    with zipfile.ZipFile(installed.wheel) as archive:
        entry_points = archive.read(f"{dist_info}/entry_points.txt").decode()
    assert "remote-batch = remote_batch.cli:main" in entry_points
    assert "remote-batch-local" not in entry_points


def test_the_wheel_requires_none_of_the_service_packages(installed: InstalledWheel) -> None:
    metadata = _metadata(installed.wheel)
    print("Requires-Dist:", *metadata["Requires-Dist"], sep="\n  ")

    assert metadata["Name"] == ["remote-batch"]
    required = {_distribution(r) for r in metadata["Requires-Dist"] if "extra ==" not in r}
    # standardwebhooks: remote_batch.webhooks.verify (pure Python, no dependencies of its own);
    # pip-requirements-parser: `remote-batch env create -r FILE` (pip's own requirements-file parser).
    assert required == {"requests", "platformdirs", "typer", "rich", "cloudpickle", "standardwebhooks",
                        "pip-requirements-parser"}  # fmt: skip
    everything = {_distribution(r) for r in metadata["Requires-Dist"]}
    assert not everything & SERVER_REQUIREMENTS
    assert metadata["Provides-Extra"] == ["client"]


def test_the_cli_and_the_sdk_run_from_a_clean_venv(installed: InstalledWheel) -> None:
    helped = installed.run("remote-batch", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "Usage: remote-batch" in helped.stdout

    imported = installed.run(
        "python",
        "-c",
        "import sys, remote_batch; print(remote_batch.__file__); print(sorted(n for n in"
        " ('functions', 'worker', 'remote_batch_local', 'boto3', 'pydantic') if n in sys.modules))",
    )
    assert imported.returncode == 0, imported.stderr
    module_file, loaded = imported.stdout.splitlines()
    assert Path(module_file).is_relative_to(installed.venv)
    assert loaded == "[]"


def test_the_clean_venv_holds_the_client_and_its_dependencies_only(installed: InstalledWheel) -> None:
    found = installed.run(
        "python",
        "-c",
        "import importlib.metadata as m\nfor d in m.distributions(): print(d.metadata['Name'].lower())",
    )
    assert found.returncode == 0, found.stderr
    distributions = set(found.stdout.split())
    print("installed:", " ".join(sorted(distributions)))
    assert "remote-batch" in distributions
    # pydantic may be there: typer (0.2x) requires it itself; the client does not (the test above).
    assert not distributions & ((SERVER_REQUIREMENTS - {"pydantic"}) | {"remote-batch-local"})
