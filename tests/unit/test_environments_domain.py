"""The environment spec's checks, hashes and status machine (functions.domain.environments)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from functions.domain.environments import (
    MAX_REQUIREMENTS,
    BuildOutcome,
    EnvironmentSpec,
    EnvironmentStatus,
    Package,
    build_hash,
    check_name,
    check_spec,
    finish,
    new_environment,
    same_or_conflict,
    spec_hash,
)
from functions.domain.errors import Conflict, ValidationFailed
from functions.domain.runtime import PythonRuntime

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
RUNTIME = PythonRuntime()


def test_a_good_spec_passes_unchanged() -> None:
    spec = EnvironmentSpec(
        "3.12",
        ("numpy==2.1.*", "six==1.16.0", "requests[socks]>=2; python_version>='3.8'"),
        index_url="https://pypi.example.com/simple",
        extra_index_urls=("https://download.pytorch.org/whl/cpu",),
    )
    image = EnvironmentSpec("3.12", image="123456789012.dkr.ecr.eu-west-1.amazonaws.com/repo:tag")
    assert check_spec(spec, RUNTIME) is spec
    assert check_spec(image, RUNTIME) is image


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (EnvironmentSpec("3.9"), "python"),
        # An image's packages are the image's: requirements on top of one are refused for now.
        (EnvironmentSpec("3.12", ("six==1.16.0",), image="python:3.12-slim"), "requirements"),
        (EnvironmentSpec("3.12", index_url="https://p.example/simple", image="python:3.12"), "requirements"),
        (EnvironmentSpec("3.12", repository_credentials="arn:aws:secretsmanager:x"), "repositoryCredentials"),
        (EnvironmentSpec("3.12", ("six==1.16.0", "numpy==>2")), "requirements[1]"),
        (EnvironmentSpec("3.12", ("six",) * (MAX_REQUIREMENTS + 1)), "requirements"),
        (EnvironmentSpec("3.12", index_url="http://pypi.example.com/simple"), "indexUrl"),
        (EnvironmentSpec("3.12", index_url="ftp://pypi.example.com/"), "indexUrl"),
        (EnvironmentSpec("3.12", index_url="https://user:secret@pypi.example.com/"), "indexUrl"),
        (
            EnvironmentSpec("3.12", extra_index_urls=("https://ok.example", "file:///etc")),
            "extraIndexUrls[1]",
        ),
        # Text a terminal or a log would act on is refused, wherever in the spec it hides.
        (EnvironmentSpec("3.12", ("six; python_version > '\x1b[2J'",)), "requirements[0]"),
        (EnvironmentSpec("3.12", ("six==1.16.0\u202e",)), "requirements[0]"),
        (EnvironmentSpec("3.12", index_url="https://pypi.example.com/\x1b[31m/simple"), "indexUrl"),
        (EnvironmentSpec("3.12", extra_index_urls=("https://pypi.example.com/a b",)), "extraIndexUrls[0]"),
        (EnvironmentSpec("3.12", image="Not An Image"), "image"),
        (EnvironmentSpec("3.12", image="repo:tag:again"), "image"),
    ],
)
def test_each_bad_field_is_a_400_naming_it(spec: EnvironmentSpec, field: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        check_spec(spec, RUNTIME)
    assert caught.value.field == field


def test_http_indexes_pass_only_where_allowed() -> None:
    spec = EnvironmentSpec("3.12", index_url="http://127.0.0.1:3141/simple")
    assert check_spec(spec, RUNTIME, allow_http=True) is spec


@pytest.mark.parametrize("name", ["m", "1ml", "ml/x", "a" * 65, "ml env"])
def test_names_over_the_pattern_are_refused(name: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        check_name(name)
    assert caught.value.field == "name"


def test_the_spec_hash_ignores_spelling_but_not_meaning() -> None:
    assert spec_hash(EnvironmentSpec("3.12", ("Six == 1.16.0",))) == spec_hash(
        EnvironmentSpec("3.12", ("Six==1.16.0",))
    )
    assert spec_hash(EnvironmentSpec("3.12", ("six==1.16.0",))) != spec_hash(
        EnvironmentSpec("3.13", ("six==1.16.0",))
    )


def test_the_build_hash_is_python_lock_and_platform() -> None:
    base = build_hash("3.12", "six==1.16.0\n", "linux-x86_64")
    assert base == build_hash("3.12", "six==1.16.0\n", "linux-x86_64")
    assert (
        len(
            {
                base,
                build_hash("3.13", "six==1.16.0\n", "linux-x86_64"),
                build_hash("3.12", "six==1.17.0\n", "linux-x86_64"),
                build_hash("3.12", "six==1.16.0\n", "linux-aarch64"),
            }
        )
        == 4
    )


def test_a_second_put_is_the_same_or_a_conflict() -> None:
    environment = new_environment("acct", "ml", EnvironmentSpec("3.12", ("six==1.16.0",)), NOW)
    assert same_or_conflict(environment, EnvironmentSpec("3.12", ("six == 1.16.0",))) is environment
    with pytest.raises(Conflict):
        same_or_conflict(environment, EnvironmentSpec("3.12", ("six==1.17.0",)))


def test_a_build_ends_ready_or_failed_once() -> None:
    environment = new_environment("acct", "ml", EnvironmentSpec("3.12", ("six==1.16.0",)), NOW)
    assert environment.status is EnvironmentStatus.BUILDING
    assert environment.waiting_reason == "Building environment ml (Python 3.12, 1 package)"
    ready = finish(environment, BuildOutcome("h" * 64, (Package("six", "1.16.0"),), 12_345), NOW)
    assert (ready.status, ready.hash, ready.size_bytes, ready.ready_at) == (
        EnvironmentStatus.READY,
        "h" * 64,
        12_345,
        NOW,
    )
    assert finish(ready, BuildOutcome(None, error="late"), NOW) is ready
    failed = finish(environment, BuildOutcome(None, error="No solution found when resolving"), NOW)
    assert failed.status is EnvironmentStatus.FAILED
    assert failed.status_reason == "Environment ml failed: No solution found when resolving"
    assert (failed.ready_at, failed.failed_at, ready.failed_at) == (None, NOW, None)
