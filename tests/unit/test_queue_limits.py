"""The statusReason of a job AWS Batch cancelled at a queue time limit (functions/domain/queue_limits.py)."""

from __future__ import annotations

import pytest

from functions.domain.queue_limits import CAPACITY_WAIT_SECONDS, QUEUE_LIMITS, describe_queue_limit


def test_capacity_cancel_names_class_zone_and_minutes():
    reason = "Canceled by JobStateTimeLimit action due to reason: CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY"

    assert describe_queue_limit(reason, "GPU4xL4", "UnitedStates") == (
        "No capacity for GPU4xL4 in UnitedStates for 30 min"
    )
    assert CAPACITY_WAIT_SECONDS == 1800


@pytest.mark.parametrize(
    "reason",
    [
        None,
        "",
        "Essential container in task exited",
        "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - Service cannot fulfill the capacity requested",
        "Canceled by JobStateTimeLimit action due to reason: MISCONFIGURATION:SERVICE_ROLE_PERMISSIONS",
    ],
)
def test_other_reasons_are_not_queue_limits(reason):
    assert describe_queue_limit(reason, "Basic1x8", "UnitedStates") is None


def test_waits_are_within_what_batch_accepts():
    # AWS Batch API JobStateTimeLimitAction.maxTimeSeconds: 600 to 86,400.
    assert all(600 <= limit.wait_seconds <= 86_400 for limit in QUEUE_LIMITS)
