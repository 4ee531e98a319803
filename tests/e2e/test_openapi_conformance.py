"""The served OpenAPI document holds: schemathesis with every check against the local stack.

``schemathesis run --checks all`` (configuration in tests/e2e/schemathesis.toml: deterministic
generation, at most 8 examples per operation, the stateful phase off) against ``GET /openapi.json``
of a stack of its own, with the ``dev`` token. It passes only with 0 failures.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import LocalStackProcess, _free_port

CONFIG = Path(__file__).with_name("schemathesis.toml")
RUN_SECONDS = 240


@pytest.fixture(scope="module")
def conformance_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackProcess]:
    """A stack of its own: the run submits jobs and changes contacts, which other tests must not see."""
    process = LocalStackProcess(tmp_path_factory.mktemp("conformance-stack") / "home", _free_port())
    process.start()
    yield process
    assert process.stop() == 0


@pytest.mark.slow
def test_schemathesis_all_checks_pass_on_the_served_document(conformance_stack):
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "--config-file",
        str(CONFIG),
        "run",
        f"{conformance_stack.endpoint}/openapi.json",
        "--checks",
        "all",
        # 41 operations x 8 examples (deterministic): the suite's 12-minute budget (docs/testing.md).
        "--max-examples",
        "8",
        "--header",
        f"Authorization: Bearer {conformance_stack.tokens['dev']}",
        "--no-color",
    ]
    run = subprocess.run(command, capture_output=True, text=True, timeout=RUN_SECONDS, check=False)
    assert run.returncode == 0, run.stdout[-6000:]
    (summary,) = [line.strip() for line in run.stdout.splitlines() if " generated, " in line]
    counts = re.fullmatch(r"([0-9]+) generated, ([0-9]+) passed(?:, [0-9]+ skipped)?", summary)
    assert counts is not None, summary
    generated, passed = counts.groups()
    assert int(generated) == int(passed) > 0, summary
    print(summary)  # shown with pytest -rP
