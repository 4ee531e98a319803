"""An image job's two containers, played by two processes on this machine: the supervisor's side
(``worker.job_container.run_in_job_container``) in this one, the job container's launcher
(``functions.domain.images.CONTAINER_LAUNCHER``, run by this machine's python3 as the image's would) in
a child, sharing one exchange folder as the job's volume."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from functions.domain.images import CONTAINER_LAUNCHER
from functions.logic.batch_submission import IMAGE_PYTHON_VARIABLE
from worker import job_container
from worker.runner import CodeInput
from worker.supervisor import JobRun

RUNNING = f"{sys.version_info[0]}.{sys.version_info[1]}"


def _launch(exchange: Path) -> subprocess.Popen[bytes]:
    """The job container: ``python3 -I -c LAUNCHER <exchange>`` (it waits for ``ready``)."""
    return subprocess.Popen([sys.executable, "-I", "-c", CONTAINER_LAUNCHER, str(exchange)])


def _run(exchange: Path, source: str, environ: dict[str, str]) -> tuple[JobRun, bytes, int]:
    launcher = _launch(exchange)
    sink = io.BytesIO()
    run = job_container.run_in_job_container(
        CodeInput(source=source, array_item=None),
        exchange=exchange,
        memory_gib=8,
        environ=environ,
        container_state=lambda: None,
        sink=sink,
    )
    return run, sink.getvalue(), launcher.wait(timeout=60)


def test_the_job_runs_in_the_job_container_and_its_console_reaches_the_supervisors_log(
    tmp_path: Path,
) -> None:
    environ = {"REMOTE_BATCH_JOB_ID": "job-1", IMAGE_PYTHON_VARIABLE: RUNNING, "AWS_SECRET_ACCESS_KEY": "x"}
    source = (
        "import os, sys\n"
        "print('hello from the image')\n"
        "print('to stderr', file=sys.stderr)\n"
        "open(os.path.join(os.environ['REMOTE_BATCH_OUTPUT_DIR'], 'out.txt'), 'w').write('1')\n"
        "assert os.environ['REMOTE_BATCH_JOB_ID'] == 'job-1'\n"
        "assert 'AWS_SECRET_ACCESS_KEY' not in os.environ or os.environ['AWS_SECRET_ACCESS_KEY'] != 'x'\n"
        "2 + 2\n"
    )

    run, console, launcher_code = _run(tmp_path, source, environ)

    assert run.error is None, run.messages
    assert run.exit_code == 0 and launcher_code == 0
    assert run.outputs is not None and json.loads(run.outputs.result_json)["result"] == 4
    assert b"hello from the image\n" in console and b"to stderr\n" in console
    # The outputs are where the supervisor uploads them from.
    assert (job_container.output_dir(tmp_path) / "out.txt").read_text() == "1"
    args = json.loads((tmp_path / "args.json").read_text())
    assert args["environment"]["REMOTE_BATCH_JOB_ID"] == "job-1"
    assert "AWS_SECRET_ACCESS_KEY" not in args["environment"]


def test_a_job_that_raises_keeps_its_error_and_exit_code(tmp_path: Path) -> None:
    run, console, launcher_code = _run(tmp_path, "raise ValueError('bad input')\n", {})

    assert run.error is not None and run.error.type == "ValueError"
    assert run.exit_code == 1 and launcher_code == 1
    assert b"ValueError: bad input" in console


def test_an_image_on_another_python_than_the_environments_ends_saying_both(tmp_path: Path) -> None:
    run, _console, launcher_code = _run(tmp_path, "1\n", {IMAGE_PYTHON_VARIABLE: "3.9"})

    assert run.error is not None
    assert run.error.reason == f"The image's python3 is Python {RUNNING}, not the environment's 3.9"
    assert launcher_code == 2


def test_a_job_container_that_stops_without_python3_ends_the_job_with_that(tmp_path: Path) -> None:
    # No launcher at all: the image had no python3 (the shell's 127), as ECS's metadata tells.
    run = job_container.run_in_job_container(
        CodeInput(source="1\n", array_item=None),
        exchange=tmp_path,
        memory_gib=None,
        environ={},
        container_state=lambda: 127,
        sink=io.BytesIO(),
    )

    assert run.error is not None and run.error.reason == "The image has no python3"
    assert run.exit_code == 127


def test_the_metadata_state_reads_the_job_containers_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    task: dict[str, Any] = {"Containers": [{"Name": "supervisor", "KnownStatus": "RUNNING"}, {"Name": "job"}]}
    asked: list[str] = []

    def urlopen(url: str, timeout: float) -> Any:
        asked.append(url)
        return contextlib.nullcontext(io.BytesIO(json.dumps(task).encode()))

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    endpoint = "http://169.254.170.2/v4/abc"
    assert job_container.metadata_state({job_container.METADATA_VARIABLE: endpoint})() is None
    task["Containers"][1] = {"Name": "job", "KnownStatus": "STOPPED", "ExitCode": 137}
    assert job_container.metadata_state({job_container.METADATA_VARIABLE: endpoint})() == 137
    assert asked == [f"{endpoint}/task"] * 2
    assert job_container.metadata_state({})() is None


def test_the_job_in_the_job_container_cannot_import_the_job_sides_modules(tmp_path: Path) -> None:
    # (This test's python3 is the service's venv, whose own worker package is on its path: the job
    # side's copy must not be what the job sees.)
    source = (
        "import sys\n"
        "[[name for name in sys.modules if name.partition('.')[0] in ('worker', 'cloudpickle')],\n"
        " any(p.endswith('lib') for p in sys.path)]\n"
    )

    run, _console, launcher_code = _run(tmp_path, source, {})

    assert run.error is None, run.messages
    assert run.outputs is not None and json.loads(run.outputs.result_json)["result"] == [[], False]
    assert launcher_code == 0


def test_the_job_starts_in_the_shared_work_folder_with_its_parents_inputs_its_own(tmp_path: Path) -> None:
    # Given a parent's file put in the work folder by the supervisor (root there) before the job starts
    work = job_container.work_dir(tmp_path)
    inputs = work / "inputs" / "job-P"
    inputs.mkdir(parents=True)
    (inputs / "n.txt").write_text("20")
    (inputs / "n.txt").chmod(0o600)
    job_container.share_tree(work / "inputs")

    # When the job reads it by the relative path the docs give and changes it
    source = (
        "import os\n"
        "n = int(open('inputs/job-P/n.txt').read())\n"
        "open('inputs/job-P/n.txt', 'w').write('changed')\n"
        "(os.getcwd(), n + 1)\n"
    )
    run, _, launcher_code = _run(tmp_path, source, {IMAGE_PYTHON_VARIABLE: RUNNING})

    # Then it ran in the work folder, read the input and could write it (any image user may)
    assert run.error is None and launcher_code == 0, run.messages
    assert run.outputs is not None and json.loads(run.outputs.result_json)["result"] == [str(work), 21]
    assert (inputs / "n.txt").read_text() == "changed"
    assert {oct(p.stat().st_mode & 0o777) for p in (work / "inputs", inputs)} == {"0o777"}
    assert oct((inputs / "n.txt").stat().st_mode & 0o777) == "0o666"
