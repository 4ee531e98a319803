"""Issue 24: the job's code sees exactly its environment's packages and none of the service's. The job
side's own modules (``worker``, its copy of cloudpickle) are hidden before the user's code runs, and a
client's pickle still loads with that copy (it names ``cloudpickle.cloudpickle`` functions)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import cloudpickle

from worker import job_side, supervisor
from worker.runner import CodeInput, JobInput, PickleInput

#: What the job reports about its imports: its cloudpickle's version, whether ``worker`` imports,
#: and whether the job side's folder is still on its path.
PROBE = (
    "import sys, importlib.util\n"
    "import cloudpickle\n"
    "{'cloudpickle': cloudpickle.__version__,\n"
    " 'worker': importlib.util.find_spec('worker') is not None,\n"
    " 'job_side_on_path': any(p.endswith('lib') and 'remote-batch-job-side-' in p for p in sys.path)}\n"
)


def _site_with_own_cloudpickle(tmp_path: Path) -> Path:
    """A site folder holding the environment's own package named cloudpickle, version 0.0.1."""
    site = tmp_path / "site"
    (site / "cloudpickle").mkdir(parents=True)
    (site / "cloudpickle" / "__init__.py").write_text('__version__ = "0.0.1"\n')
    return site


def _run(job: JobInput, tmp_path: Path) -> dict[str, Any]:
    environ = {job_side.SITE_VARIABLE: str(_site_with_own_cloudpickle(tmp_path))}
    outputs = tmp_path / "outputs"
    outputs.mkdir(parents=True)
    run = supervisor.run_in_job_python(job, output_dir=outputs, memory_gib=None, environ=environ)
    assert run.error is None, run.messages
    assert run.outputs is not None and run.exit_code == 0
    document: dict[str, Any] = json.loads(run.outputs.result_json)
    return {"result": document["result"], "pickle": run.outputs.result_pickle}


def test_code_sees_its_environments_cloudpickle_and_no_worker_package(tmp_path: Path) -> None:
    ran = _run(CodeInput(source=PROBE), tmp_path)

    assert ran["result"] == {"cloudpickle": "0.0.1", "worker": False, "job_side_on_path": False}


def _probe(scale: int) -> Any:
    def call(x: int) -> dict[str, Any]:
        import importlib.util

        import cloudpickle as theirs

        return {
            "cloudpickle": theirs.__version__,
            "worker": importlib.util.find_spec("worker") is not None,
            "value": x * scale,
        }

    return call


def test_a_clients_pickled_closure_and_lambda_load_and_their_results_pickle_back(tmp_path: Path) -> None:
    # Given a closure (shipped by value: it names cloudpickle.cloudpickle's _make_function and cells)
    payload = cloudpickle.dumps((_probe(3), (7,), {}))

    ran = _run(PickleInput(payload=payload), tmp_path)

    assert ran["result"] == {"cloudpickle": "0.0.1", "worker": False, "value": 21}

    # And a lambda returning a lambda: the result's pickle is made by the job side's cloudpickle and
    # loads in the client
    returns_lambda = cloudpickle.dumps((lambda k: lambda y: y + k, (5,), {}))

    second = _run(PickleInput(payload=returns_lambda), tmp_path / "second")

    assert second["pickle"] is not None
    assert cloudpickle.loads(second["pickle"])(1) == 6


def test_the_supervisors_own_imports_are_untouched(tmp_path: Path) -> None:
    _run(CodeInput(source="1"), tmp_path)

    assert sys.modules["cloudpickle"] is cloudpickle and "worker.runner" in sys.modules
