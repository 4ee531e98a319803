"""The waiting rule (``functions.domain.prerequisites.judge``), the environment as a prerequisite
(``functions.domain.environments.prerequisite_state``), an unnamed environment's retention
(``reusable``) and the build limits' reasons."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from functions.domain.environments import (
    BUILD_SIZE_LIMIT_BYTES,
    BUILD_TIME_LIMIT_SECONDS,
    UNNAMED_RETENTION,
    UNNAMED_RETRY_AFTER,
    BuildOutcome,
    EnvironmentSpec,
    environment_prerequisite,
    finish,
    new_environment,
    parse_environment_prerequisite,
    prerequisite_state,
    reusable,
    size_limit_reason,
    time_limit_reason,
)
from functions.domain.prerequisites import (
    Prerequisite,
    PrerequisiteKind,
    PrerequisiteState,
    Standing,
    Verdict,
    judge,
)

NOW = datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
SPEC = EnvironmentSpec(python="3.12", requirements=("six==1.16.0", "numpy==2.1.*"))


def _state(standing: Standing, reason: str | None = None, key: str = "k") -> PrerequisiteState:
    return PrerequisiteState(Prerequisite(PrerequisiteKind.ENVIRONMENT, key), standing, reason)


@pytest.mark.parametrize(
    ("states", "verdict", "reason"),
    [
        ([], Verdict.RELEASE, None),
        ([_state(Standing.MET), _state(Standing.MET)], Verdict.RELEASE, None),
        ([_state(Standing.PENDING, "Building environment ml")], Verdict.WAIT, "Building environment ml"),
        (
            [_state(Standing.MET), _state(Standing.PENDING, "first"), _state(Standing.PENDING, "second")],
            Verdict.WAIT,
            "first and 1 more",
        ),
        # A broken prerequisite ends the job even while others are pending: it can never run.
        (
            [
                _state(Standing.PENDING, "first"),
                _state(Standing.BROKEN, "gone"),
                _state(Standing.BROKEN, "x"),
            ],
            Verdict.END,
            "gone",
        ),
    ],
)
def test_judge_ends_on_the_first_broken_waits_on_the_first_pending_else_releases(
    states: list[PrerequisiteState], verdict: Verdict, reason: str | None
) -> None:
    judgement = judge(states)
    assert (judgement.verdict, judgement.reason) == (verdict, reason)


def test_a_long_reason_is_cut_to_the_status_reason_limit() -> None:
    judgement = judge([_state(Standing.BROKEN, "x" * 5000)])
    assert judgement.reason is not None and len(judgement.reason) == 1000 and judgement.reason.endswith("…")


def test_a_prerequisite_id_round_trips_and_a_bad_one_is_refused() -> None:
    prerequisite = Prerequisite(PrerequisiteKind.ENVIRONMENT, "dev/ml/abc")
    assert prerequisite.id == "environment|dev/ml/abc"
    assert Prerequisite.parse(prerequisite.id) == prerequisite
    for bad in ("environment", "environment|", "nothing|key"):
        with pytest.raises(ValueError, match="not a prerequisite id"):
            Prerequisite.parse(bad)


def test_an_environment_stands_pending_met_or_broken_by_its_record() -> None:
    building = new_environment("dev", "ml", SPEC, NOW)
    prerequisite = environment_prerequisite(building)
    assert parse_environment_prerequisite(prerequisite) == ("dev", "ml", building.spec_hash)
    pending = prerequisite_state(prerequisite, building)
    assert (pending.standing, pending.reason) == (
        Standing.PENDING,
        "Building environment ml (Python 3.12, 2 packages)",
    )
    ready = prerequisite_state(prerequisite, finish(building, BuildOutcome("a" * 64), NOW))
    assert (ready.standing, ready.value) == (Standing.MET, "a" * 64)
    failed = prerequisite_state(prerequisite, finish(building, BuildOutcome(None, error="No solution"), NOW))
    assert (failed.standing, failed.reason) == (Standing.BROKEN, "Environment ml failed: No solution")
    gone = prerequisite_state(prerequisite, None)
    assert (gone.standing, gone.reason) == (
        Standing.BROKEN,
        "Environment ml was deleted while the job waited for its build",
    )
    # Deleted and asked again under the same name with another spec: not the one the job waited for.
    other = new_environment("dev", "ml", replace(SPEC, python="3.13"), NOW)
    assert prerequisite_state(prerequisite, other).standing is Standing.BROKEN


def test_an_unnamed_environment_says_so() -> None:
    inline = new_environment("dev", None, SPEC, NOW)
    prerequisite = environment_prerequisite(inline)
    assert parse_environment_prerequisite(prerequisite) == ("dev", None, inline.spec_hash)
    assert inline.waiting_reason == "Building the inline environment (Python 3.12, 2 packages)"
    failed = finish(inline, BuildOutcome(None, error="No solution"), NOW)
    assert failed.status_reason == "The inline environment failed: No solution"


@pytest.mark.parametrize(
    ("seconds", "reason"),
    [
        (1800, "the build took longer than its time limit of 30 minutes"),
        (60, "the build took longer than its time limit of 1 minute"),
        (0.5, "the build took longer than its time limit of 0.5 seconds"),
    ],
)
def test_the_time_limit_names_itself(seconds: float, reason: str) -> None:
    assert time_limit_reason(seconds) == reason


def test_the_size_limit_names_itself() -> None:
    assert size_limit_reason(13 * 1024**3, BUILD_SIZE_LIMIT_BYTES) == (
        "the installed packages take 13.0 GiB, over the size limit of 10 GiB unpacked"
    )
    assert BUILD_TIME_LIMIT_SECONDS == 30 * 60


def test_an_unnamed_environment_is_taken_until_its_retention_and_a_failure_for_ten_minutes() -> None:
    inline = new_environment("dev", None, SPEC, NOW)
    assert reusable(inline, NOW + timedelta(days=365))  # Building: always taken
    ready = finish(inline, BuildOutcome("a" * 64), NOW)
    assert reusable(ready, NOW + UNNAMED_RETENTION - timedelta(seconds=1))
    assert not reusable(ready, NOW + UNNAMED_RETENTION)
    failed = finish(inline, BuildOutcome(None, error="No solution"), NOW)
    assert reusable(failed, NOW + UNNAMED_RETRY_AFTER - timedelta(seconds=1))
    assert not reusable(failed, NOW + UNNAMED_RETRY_AFTER)
