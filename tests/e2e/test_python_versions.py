"""Issue 24's first bullet: the same function submitted from clients on Python 3.11, 3.12 and 3.13 runs on
the local stack in the Python that made it and returns its result; ``GET /runtime`` says which
interpreter each version runs in.

Each client is a fresh venv of that version with the client installed from this checkout (``uv venv -p``,
``uv pip install -e``), nothing else: the job runs in the stack's interpreter of that version, not in
the client's. A version this machine lacks is skipped, naming it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from functions.domain.runtime import PYTHON_VERSIONS
from remote_batch_local.interpreters import find_interpreter
from tests.e2e.conftest import REPO_ROOT, Client, LocalStackProcess

pytestmark = pytest.mark.e2e

CLIENT_SCRIPT = """
import json, sys
import remote_batch as rb

def where(x):
    import importlib.util, sys
    service = [name for name in ("functions", "remote_batch_local", "moto") if importlib.util.find_spec(name)]
    return {"double": 2 * x, "python": list(sys.version_info[:2]), "service": service}

job = rb.submit(where, 21)
print(json.dumps({"client": list(sys.version_info[:2]), "job": job.result(timeout=120), "id": job.id}))
"""


def _uv() -> str:
    from uv import find_uv_bin

    return str(find_uv_bin())


@pytest.fixture(scope="module", params=PYTHON_VERSIONS)
def client_python(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv of that Python holding the client (this checkout, editable) and its dependencies only."""
    version = request.param
    interpreter = find_interpreter(version, exclude_prefixes=[Path(sys.prefix)])
    if interpreter is None:
        pytest.skip(f"no CPython {version} on this machine (python{version} on PATH or under pyenv)")
    venv = tmp_path_factory.mktemp(f"client-{version}") / "venv"
    env = {**os.environ, "VIRTUAL_ENV": str(venv)}
    subprocess.run([_uv(), "venv", "-q", "-p", str(interpreter.executable), str(venv)], check=True, env=env)
    python = venv / "bin" / "python"
    subprocess.run(
        [_uv(), "pip", "install", "-q", "--python", str(python), "-e", str(REPO_ROOT)], check=True, env=env
    )
    return python


def test_the_same_function_from_each_client_python_returns_its_result(
    client_python: Path, stack: LocalStackProcess, dev: Client
) -> None:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": os.environ.get("HOME", "/tmp"),
        "REMOTE_BATCH_ENDPOINT": stack.endpoint,
        "REMOTE_BATCH_TOKEN": stack.tokens["dev"],
    }

    done = subprocess.run(
        [str(client_python), "-c", CLIENT_SCRIPT],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    runtime = dev.get("/runtime").json()
    print(f"\nclient Python {answer['client']}: {answer['job']}\nGET /runtime: {json.dumps(runtime)}")
    # The job ran in the Python that pickled the function, without the service's modules.
    assert answer["job"] == {"double": 42, "python": answer["client"], "service": []}
    job = dev.get(f"/jobs/{answer['id']}").json()
    assert job["status"] == "Succeeded" and job["pythonVersion"] == "{}.{}".format(*answer["client"])
    assert "{}.{}".format(*answer["client"]) in runtime["pythonVersions"]


def test_runtime_names_each_interpreter_and_a_missing_version_is_a_400_naming_those_found(
    dev: Client,
) -> None:
    runtime = dev.get("/runtime").json()
    found = runtime["pythonVersions"]
    print(f"\nGET /runtime: {json.dumps(runtime, indent=2)}")

    assert set(runtime["interpreters"]) == set(found) and runtime["pythonVersion"] in found
    assert all(text.startswith("CPython 3.") for text in runtime["interpreters"].values())
    answer = dev.post("/jobs", json={"code": "1", "pythonVersion": "3.10"})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["field"] == "pythonVersion"
    assert error["message"].startswith(f"Jobs here run Python {', '.join(found)}, not 3.10;")
