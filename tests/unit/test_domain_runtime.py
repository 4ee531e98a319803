"""functions/domain/runtime.py: the worker's Python and the pickle version rule; estimate_credits."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path

import pytest

from functions.domain.credits import estimate_credits
from functions.domain.errors import ValidationFailed
from functions.domain.runtime import WORKER_PYTHON_VERSION, check_pickle_python, python_minor

WORKER = Path(__file__).resolve().parents[2] / "worker"


def test_the_constant_is_the_worker_images_python() -> None:
    cpu = (WORKER / "Dockerfile").read_text()
    assert re.search(r"^FROM python:(\d+\.\d+)-slim", cpu, re.MULTILINE)[1] == WORKER_PYTHON_VERSION  # type: ignore[index]
    gpu = (WORKER / "Dockerfile.gpu").read_text()
    assert "FROM nvidia/cuda:12.8.0-runtime-ubuntu24.04" in gpu  # Ubuntu 24.04's python3 is 3.12
    assert WORKER_PYTHON_VERSION == "3.12"


def test_the_same_minor_version_or_none_passes() -> None:
    check_pickle_python(None, "3.12")
    check_pickle_python("3.12", "3.12")


def test_another_minor_version_is_refused_naming_both() -> None:
    with pytest.raises(ValidationFailed) as caught:
        check_pickle_python("3.11", "3.12")
    assert caught.value.field == "pythonVersion"
    assert caught.value.message.startswith("This pickle was made by Python 3.11, but jobs run Python 3.12")


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
