"""The local stack builds environments as the cloud does, from wheels only: a requirement that has only
a source distribution fails with uv's message and its build code never runs on the machine (it would
run outside any job's sandbox, as the stack's user). Real uv, offline, on a folder of packages."""

from __future__ import annotations

import io
import shutil
import sys
import tarfile
import threading
from pathlib import Path

import pytest

from functions.domain.environments import BuildOutcome, EnvironmentSpec, spec_hash
from functions.domain.machine_classes import GeoZone
from functions.ports import BuildRequest
from remote_batch_local.environments import LocalEnvironmentBuilder
from remote_batch_local.interpreters import Interpreter
from remote_batch_local.job_pythons import LocalPython, LocalPythons
from tests.wheels import make_wheel, uv_offline

UV = shutil.which("uv", path=str(Path(sys.executable).parent))


def _sdist(folder: Path, name: str, version: str, marker: Path) -> None:
    """``<name>-<version>.tar.gz`` whose setup.py, if anything ever ran it, writes ``marker``."""
    root = f"{name}-{version}"
    files = {
        f"{root}/PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{root}/setup.py": (
            f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
            f"from setuptools import setup\nsetup(name={name!r}, version={version!r})\n"
        ),
    }
    with tarfile.open(folder / f"{root}.tar.gz", "w:gz") as archive:
        for member, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(member)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))


class _Logs:
    class exceptions:
        class ResourceAlreadyExistsException(Exception):
            pass

    def __init__(self) -> None:
        self.lines: list[str] = []

    def create_log_stream(self, **_: str) -> None:
        pass

    def put_log_events(self, *, logEvents: list[dict[str, object]], **_: str) -> None:
        self.lines += [str(e["message"]) for e in logEvents]


@pytest.mark.skipif(UV is None, reason="uv is installed in the venv by make")
def test_a_source_only_requirement_fails_like_in_the_cloud_and_its_build_code_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a package folder with a wheel and a source-only distribution whose setup.py leaves a mark
    packages, marker = tmp_path / "packages", tmp_path / "setup-py-ran"
    make_wheel(packages, "tinyenv", "1.0")
    _sdist(packages, "srconly", "1.0", marker)
    for name, value in uv_offline(packages).items():
        monkeypatch.setenv(name, value)
    here = Path(sys.executable)
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    interpreter = Interpreter(version, version, here, False, Path(sys.prefix), Path(sys.base_prefix))
    outcomes: list[BuildOutcome] = []
    done = threading.Semaphore(0)
    logs = _Logs()
    builder = LocalEnvironmentBuilder(
        tmp_path / "environments",
        pythons=LocalPythons({version: LocalPython(interpreter)}),
        logs=logs,
        log_group="/aws/batch/job",
        zone=GeoZone.UNITED_STATES,
        report=lambda request, outcome: (outcomes.append(outcome), done.release()),
        uv=str(UV),
    )

    # When an environment asks for it beside a wheel
    spec = EnvironmentSpec(version, ("tinyenv==1.0", "srconly==1.0"))
    builder.start_build(BuildRequest("dev", "src", spec, spec_hash(spec), "environments/dev/src"))
    assert done.acquire(timeout=60)
    builder.close(wait=True)

    # Then the build failed naming the package, and nothing of it ran
    (outcome,) = outcomes
    assert outcome.hash is None and outcome.error is not None and "srconly" in outcome.error, outcome
    assert not marker.exists()
