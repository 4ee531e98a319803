"""The job side runs on an environment's image's python3, which may be as old as 3.9
(``functions.domain.images.MIN_IMAGE_PYTHON``): what it imports must parse and run there. The machines
here have 3.11 to 3.13 only, so the check is static: ``ast`` with ``feature_version=(3, 9)`` (syntax)
and vermin (the library's APIs and keyword arguments by version)."""

from __future__ import annotations

import ast
from pathlib import Path

import cloudpickle
import pytest
import vermin

from functions.domain import images
from worker import job_container, job_side

WORKER = Path(job_side.__file__).resolve().parent
CLOUDPICKLE = Path(cloudpickle.__file__).resolve().parent
FILES = [WORKER / name for name in job_side.MODULES] + sorted(CLOUDPICKLE.glob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_each_module_of_the_job_side_parses_as_python_3_9(path: Path) -> None:
    ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=(3, 9))


def test_vermin_finds_nothing_of_3_10_or_later_in_the_job_side() -> None:
    config = vermin.Config()
    config.set_eval_annotations(False)  # annotations are strings here (from __future__ import annotations)
    needed = []
    for path in FILES:
        minimums = vermin.visit(path.read_text(encoding="utf-8"), config).minimum_versions()
        needed.append((path.name, minimums[1]))
    assert [(name, version) for name, version in needed if version and version > (3, 9)] == []


def test_a_module_with_a_match_statement_would_be_caught() -> None:
    with pytest.raises(SyntaxError):
        ast.parse("match x:\n    case 1:\n        pass\n", feature_version=(3, 9))
    source = "import tempfile\ntempfile.TemporaryDirectory(ignore_cleanup_errors=True)\n"
    assert vermin.visit(source, vermin.Config()).minimum_versions()[1] >= (3, 10)


def test_the_launcher_parses_as_python_3_9_and_the_worker_agrees_on_the_exchange() -> None:
    ast.parse(images.CONTAINER_LAUNCHER, feature_version=(3, 9))
    assert images.EXCHANGE_PATH == job_side.EXCHANGE_PATH
    assert images.EXCHANGE_VARIABLE == job_container.EXCHANGE_VARIABLE
    assert images.JOB_CONTAINER == job_container.JOB_CONTAINER
    assert images.MIN_IMAGE_PYTHON == (3, 9)
