"""``remote-batch env create ... --wait`` then ``submit --env`` on the local stack, with no network: the
requirement is a wheel made here, served by a PEP 503 index on 127.0.0.1 named in the requirements file
(``--index-url http://...``: the local stack takes http indexes, for a mirror on the machine)."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import sys
import threading
import zipfile
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import remote_batch as rb
from remote_batch import connection
from remote_batch.cli import app
from tests.e2e.conftest import LocalStackProcess

pytestmark = pytest.mark.e2e

PACKAGE, VERSION = "rbtiny", "1.0"


def build_wheel(folder: Path, name: str, version: str, source: str) -> Path:
    """A pure-Python wheel of one module (PEP 427: the files, METADATA, WHEEL and RECORD)."""
    files = {
        f"{name}/__init__.py": source,
        f"{name}-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{name}-{version}.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: remote-batch-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = f"{name}-{version}.dist-info/RECORD"
    rows = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        rows.append(f"{path},sha256={digest},{len(text.encode())}")
    target = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(target, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
        archive.writestr(record, "\n".join([*rows, f"{record},,"]) + "\n")
    return target


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """No line on stderr per request."""


@pytest.fixture(scope="module")
def local_index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A package index on 127.0.0.1 holding two wheels (``rbtiny``, a fake ``cloudpickle``); its simple
    API's URL."""
    root = tmp_path_factory.mktemp("index")
    for name, version, source in [
        (PACKAGE, VERSION, f'VERSION = "{VERSION}"\n'),
        # A package of the user's own named as the job side's vendored one (issue 24).
        ("cloudpickle", "0.0.1", '__version__ = "0.0.1"\n'),
    ]:
        wheel = build_wheel(root, name, version, source)
        page = root / "simple" / name / "index.html"
        page.parent.mkdir(parents=True)
        page.write_text(f'<html><body><a href="../../{wheel.name}">{wheel.name}</a></body></html>\n')
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), partial(QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()
    server.server_close()


@pytest.fixture
def dev_cli(stack: LocalStackProcess, monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    """The CLI in this process as the ``dev`` account (through the environment, as a user sets it)."""
    monkeypatch.setenv("REMOTE_BATCH_ENDPOINT", stack.endpoint)
    monkeypatch.setenv("REMOTE_BATCH_TOKEN", stack.tokens["dev"])
    monkeypatch.setattr(connection, "_default", None)
    return CliRunner()


def test_env_create_wait_then_submit_env_runs_with_the_environments_package(
    dev_cli: CliRunner, local_index: str, tmp_path: Path
) -> None:
    # Given a requirements file as a pip user writes one: a comment, its index, an include
    (tmp_path / "pins.txt").write_text(f"{PACKAGE}=={VERSION}\n")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"# the job's own package\n--index-url {local_index}\n-r pins.txt\n")

    # When the environment is created and its build followed
    created = dev_cli.invoke(
        app, ["env", "create", "tiny", "--python", "3.12", "-r", str(requirements), "--wait"]
    )

    # Then it is Ready with exactly that package, and the build log came as it went
    assert created.exit_code == 0, created.output
    assert "created environment tiny Building: Python 3.12, 1 requirement" in created.stderr
    assert "resolving 1 requirements" in created.stderr  # the builder's log, followed
    assert created.stdout.startswith("environment tiny Ready: Python 3.12, 1 requirement, 1 package")
    shown = json.loads(dev_cli.invoke(app, ["env", "show", "tiny", "--json"]).stdout)
    assert shown["packages"] == [{"name": PACKAGE, "version": VERSION}]
    assert shown["indexUrl"] == local_index and shown["requirements"] == [f"{PACKAGE}=={VERSION}"]
    log = dev_cli.invoke(app, ["env", "log", "tiny"])
    assert log.exit_code == 0 and "resolving 1 requirements" in log.stdout
    listed = dev_cli.invoke(app, ["env", "list", "--json"])
    assert "tiny" in [e["name"] for e in json.loads(listed.stdout)]

    # When a job is submitted in it
    code = (
        f"import sys, {PACKAGE}\n{{'version': {PACKAGE}.VERSION, 'python': '%d.%d' % sys.version_info[:2]}}"
    )
    submitted = dev_cli.invoke(app, ["submit", "--env", "tiny", "--wait", "--code", code])

    # Then it ran with the environment's package on the environment's Python
    assert submitted.exit_code == 0, submitted.output
    job = rb.job(submitted.stderr.split()[1])
    assert job.environment == rb.JobEnvironment("tiny", shown["hash"], "3.12")
    assert job.result(timeout=60) == {"version": VERSION, "python": "3.12"}

    # And the same file again finds it; deleting it frees the name
    again = dev_cli.invoke(app, ["env", "create", "tiny", "--python", "3.12", "-r", str(requirements)])
    assert again.exit_code == 0 and "found (same spec)" in again.stderr
    deleted = dev_cli.invoke(app, ["env", "delete", "tiny"])
    assert deleted.exit_code == 0 and deleted.stdout.strip() == "deleted environment tiny"
    assert dev_cli.invoke(app, ["env", "show", "tiny"]).exit_code == 1


def test_a_job_sees_its_environments_own_cloudpickle_and_none_of_the_services_modules(
    dev_cli: CliRunner, local_index: str, tmp_path: Path
) -> None:
    # Given an environment pinning a cloudpickle of its own (the job side vendors another), on this
    # Python (a function is submitted to it below)
    python = f"{sys.version_info[0]}.{sys.version_info[1]}"
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"--index-url {local_index}\ncloudpickle==0.0.1\n")
    created = dev_cli.invoke(
        app, ["env", "create", "cp001", "--python", python, "-r", str(requirements), "--wait"]
    )
    assert created.exit_code == 0, created.output

    # When code runs in it
    code = (
        "import importlib.util, cloudpickle\n"
        "{'cloudpickle': cloudpickle.__version__, 'worker': importlib.util.find_spec('worker') is not None}"
    )
    submitted = dev_cli.invoke(app, ["submit", "--env", "cp001", "--wait", "--code", code])

    # Then it sees the environment's cloudpickle, and the service's worker package is not importable
    assert submitted.exit_code == 0, submitted.output
    assert rb.job(submitted.stderr.split()[1]).result(timeout=60) == {"cloudpickle": "0.0.1", "worker": False}

    # And a closure pickled by this client still loads (with the job side's own cloudpickle)
    offset = 40

    def add(x: int) -> tuple[int, str]:
        import cloudpickle as theirs

        return x + offset, theirs.__version__

    assert tuple(rb.submit(add, 2, environment="cp001").result(timeout=60)) == (42, "0.0.1")
