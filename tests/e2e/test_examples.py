"""Every example of examples/ runs against the local stack, as a user runs it (so none rots).

The scripts run as subprocesses; the notebook is executed by nbclient in a fresh ipykernel. Each finds
the stack through ``REMOTE_BATCH_ENDPOINT`` / ``REMOTE_BATCH_TOKEN``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import requests
from nbclient import NotebookClient

from tests.e2e.conftest import REPO_ROOT, LocalStackProcess

EXAMPLES = REPO_ROOT / "examples"


@pytest.fixture
def example_env(stack: LocalStackProcess, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMOTE_BATCH_")}
    env.update(
        {
            "REMOTE_BATCH_ENDPOINT": stack.endpoint,
            "REMOTE_BATCH_TOKEN": stack.tokens["dev"],
            "REMOTE_BATCH_CONFIG_DIR": str(tmp_path / "config"),
            "PYTHONPATH": str(REPO_ROOT),
            "MPLBACKEND": "Agg",
        }
    )
    return env


def run_example(name: str, env: dict[str, str], cwd: Path, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.slow
def test_digits_classifier(example_env: dict[str, str], tmp_path: Path) -> None:
    output = run_example("digits_classifier.py", example_env, tmp_path)
    match = re.search(r"accuracy (0\.\d{3}) on (\d+) held-out digits", output)
    assert match, output
    assert float(match.group(1)) >= 0.95 and int(match.group(2)) == 450
    assert re.search(r"credits spent: \d", output)


@pytest.mark.slow
def test_mapped_function(example_env: dict[str, str], tmp_path: Path) -> None:
    output = run_example("mapped_function.py", example_env, tmp_path)
    assert "steps: [0, 1, 7, 2, 5, 8, 16, 3, 19, 6, 14, 9, 9, 17, 17, 4, 12, 20, 20, 7]" in output
    assert "longest: 19 takes 20 steps (checked locally: 20)" in output


@pytest.mark.slow
def test_environment_model(example_env: dict[str, str], tmp_path: Path) -> None:
    try:  # the environment's scikit-learn comes from the package index the machine reaches
        requests.head("https://pypi.org/simple/scikit-learn/", timeout=10)
    except requests.RequestException as exc:
        pytest.skip(f"the package index cannot be reached from here: {exc}")
    output = run_example("environment_model.py", example_env, tmp_path)
    assert re.search(r"^environment digits-sklearn: (created|found)$", output, re.M), output
    assert re.search(r"^ready: \d+ packages, build [0-9a-f]{64}$", output, re.M), output
    assert "trained with scikit-learn 1.9.1 on 1700 digits" in output
    assert re.search(r"^outputs: model\.joblib \(\d+ bytes\)$", output, re.M), output
    assert "predicted with scikit-learn 1.9.1: first digits [" in output
    match = re.search(r"accuracy (0\.\d{3}|1\.000) on 97 held-out digits", output)
    assert match and float(match.group(1)) >= 0.9, output


def test_command_outputs(example_env: dict[str, str], tmp_path: Path) -> None:
    output = run_example("command_outputs.py", example_env, tmp_path, str(tmp_path / "got"))
    assert "output squares.csv (" in output and "output report/summary.txt (" in output
    lines = (tmp_path / "got" / "squares.csv").read_text().splitlines()
    assert lines[0] == "n,square" and lines[-1] == "10,100" and len(lines) == 11
    assert output.rstrip().endswith("rows: 10")


@pytest.mark.slow
def test_notebook(example_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in example_env.items():
        monkeypatch.setenv(name, value)  # the kernel inherits this process's environment
    notebook = nbformat.read(EXAMPLES / "notebook.ipynb", as_version=4)
    NotebookClient(
        notebook, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(EXAMPLES)}}
    ).execute()

    code = [cell for cell in notebook.cells if cell.cell_type == "code"]

    def result(cell: int) -> dict[str, str]:
        (value,) = [o for o in code[cell].outputs if o.output_type == "execute_result"]
        return dict(value["data"])

    assert result(0)["text/plain"] == "4"
    area = result(1)["text/plain"]
    assert area.startswith("12.566")
    card = result(2)
    assert "rb-job" in card["text/html"] and "data:image/png;base64," in card["text/html"]
    assert ">Succeeded</span>" in card["text/html"]
    size = result(3)["text/plain"]
    assert size == "(400, 300)"
    printed = "".join(o["text"] for o in code[4].outputs if o.output_type == "stream" and o.name == "stdout")
    assert printed == "step 0\nstep 1\nstep 2\n\n"
    table = result(4)
    assert "step 2" in table["text/html"]
    error = "".join(o["text"] for o in code[5].outputs if o.output_type == "stream" and o.name == "stdout")
    waited = "".join(o["text"] for o in code[4].outputs if o.output_type == "stream" and o.name == "stderr")
    assert " Succeeded " in waited.splitlines()[-1]  # wait()'s progress lines
    assert error == "ZeroDivisionError - division by zero\n"
