"""An environment's DynamoDB item (functions.adapters.dynamodb.environments): written and read back whole."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from functions.adapters.dynamodb.environments import environment_from_item, environment_to_item
from functions.domain.environments import (
    BuildOutcome,
    EnvironmentSpec,
    EnvironmentStatus,
    Package,
    finish,
    new_environment,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(seconds=41)
SPEC = EnvironmentSpec("3.12", ("six==1.16.0",), extra_index_urls=("https://download.example/whl",))


def test_ready_and_failed_environments_read_back_as_written() -> None:
    building = new_environment("acct", "ml", SPEC, NOW)
    ready = finish(building, BuildOutcome("a" * 64, (Package("six", "1.16.0"),), 4096), LATER)
    failed = finish(building, BuildOutcome(None, error="No solution found"), LATER)
    for environment in (building, ready, failed):
        assert environment_from_item(environment_to_item(environment)) == environment
    assert (failed.ready_at, failed.failed_at) == (None, LATER)


def test_a_failed_record_from_before_failed_at_reads_its_time_as_failed_at() -> None:
    # Given a Failed record written when readyAt held the failure's time
    failed = finish(new_environment("acct", "ml", SPEC, NOW), BuildOutcome(None, error="boom"), LATER)
    item = environment_to_item(failed)
    item["readyAt"], item["failedAt"] = item["failedAt"], None

    # When it is read
    read = environment_from_item(item)

    # Then it never became Ready: the time is when it failed
    assert (read.status, read.ready_at, read.failed_at) == (EnvironmentStatus.FAILED, None, LATER)
