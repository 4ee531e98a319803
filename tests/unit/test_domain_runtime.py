"""functions/domain/runtime.py: the Python versions a job may choose, their definitions; estimate_credits."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest

from functions.domain.credits import estimate_credits
from functions.domain.errors import ValidationFailed
from functions.domain.runtime import (
    DEFAULT_PYTHON_VERSION,
    PYTHON_VERSIONS,
    PythonRuntime,
    job_definition_name,
    python_minor,
)

WORKER = Path(__file__).resolve().parents[2] / "worker"


def test_the_images_take_each_version_as_a_build_argument() -> None:
    for dockerfile in ("Dockerfile", "Dockerfile.gpu"):
        text = (WORKER / dockerfile).read_text()
        assert re.search(r"^ARG PYTHON_VERSION=(\d+\.\d+)$", text, re.MULTILINE)[1] == DEFAULT_PYTHON_VERSION  # type: ignore[index]
    assert re.search(
        r"^FROM python:\$\{PYTHON_VERSION\}-slim$", (WORKER / "Dockerfile").read_text(), re.MULTILINE
    )
    assert PYTHON_VERSIONS == ("3.11", "3.12", "3.13")


def test_a_job_runs_the_version_it_names_or_the_default() -> None:
    runtime = PythonRuntime()

    assert runtime.choose(None) == "3.12"
    assert [runtime.choose(version) for version in PYTHON_VERSIONS] == ["3.11", "3.12", "3.13"]


@pytest.mark.parametrize("version", ["3.10", "3.14", "2.7"])
def test_a_version_not_run_here_is_refused_naming_those_that_are(version: str) -> None:
    runtime = PythonRuntime(versions=("3.11", "3.13"), default="3.11")

    with pytest.raises(ValidationFailed) as caught:
        runtime.choose(version)

    assert caught.value.field == "pythonVersion"
    assert caught.value.message.startswith(f"Jobs here run Python 3.11, 3.13, not {version};")


def test_the_default_must_be_one_of_the_versions() -> None:
    with pytest.raises(ValueError, match=r"the default Python 3\.12 is not one of 3\.11, 3\.13"):
        PythonRuntime(versions=("3.11", "3.13"))


def test_each_version_has_its_job_definition() -> None:
    assert job_definition_name("remote-batch-dev-Basic1x8", "3.12") == "remote-batch-dev-Basic1x8-py312"
    assert job_definition_name("arn:aws:batch:us-east-1:1:job-definition/w", "3.9") == (
        "arn:aws:batch:us-east-1:1:job-definition/w-py39"
    )
    assert job_definition_name("arn:aws:batch:us-east-1:1:job-definition/w:3", "3.13") == (
        "arn:aws:batch:us-east-1:1:job-definition/w-py313:3"
    )
    assert job_definition_name("worker:7", "3.11") == "worker-py311:7"


def test_python_minor_refuses_a_patch_version() -> None:
    assert python_minor("3.9") == (3, 9)
    with pytest.raises(ValueError, match=r"not a Python major\.minor"):
        python_minor("3.11.7")


@pytest.mark.parametrize(
    ("seconds", "rate", "cap", "limit", "credits", "billed"),
    [
        (Decimal(1), Decimal(60), None, None, Decimal("1.0000"), 60),  # the 60-second minimum
        (Decimal(60), Decimal(60), None, None, Decimal("1.0000"), 60),
        (Decimal("60.001"), Decimal(60), None, None, Decimal("1.0167"), 61),  # whole seconds, rounded up
        (Decimal(3600), Decimal("120"), None, None, Decimal("120.0000"), 3600),
        (Decimal(3600), Decimal("120"), Decimal("50.5"), None, Decimal("50.5000"), 3600),  # capped
        (Decimal(3600), Decimal("120"), None, 600, Decimal("20.0000"), 600),  # cut at the time constraint
        (Decimal(7), Decimal("7"), None, None, Decimal("0.1167"), 60),  # 60 × 7 / 3600 = 0.11666… half-up
    ],
)
def test_estimate_credits(
    seconds: Decimal, rate: Decimal, cap: Decimal | None, limit: int | None, credits: Decimal, billed: int
) -> None:
    assert estimate_credits(seconds, rate, cap, limit) == (credits, billed)
