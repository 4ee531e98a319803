"""A job AWS Batch cancels at its queue's time limit (no capacity): Terminated, uncharged, notified,
with a reason the user can read. The events are the ones AWS Batch documents for such a cancel
("Jobs stuck in RUNNABLE due to capacity"): RUNNABLE with the blocking reason, then FAILED with no
attempt and ``Canceled by JobStateTimeLimit action due to reason: <reason>``."""

from __future__ import annotations

from decimal import Decimal

import pytest

from functions.domain.queue_limits import QUEUE_LIMITS
from tests.events import batch_event

T0 = 1_796_000_000_000  # ms since the epoch


def _submit(stack, machine_class: str, zone: str) -> tuple[str, str]:
    body = {
        "code": "1",
        "machineClass": machine_class,
        "geoZone": zone,
        "notifications": [{"events": ["JobTerminated"], "methods": ["Email"]}],
    }
    status, job = stack.api("POST", "/jobs", body=body)
    assert status == 202, job
    return job["jobId"], stack.services.store.get_job(job["jobId"]).batch_job_id


def test_a_job_cancelled_for_want_of_capacity_ends_terminated_uncharged_and_notified(stack):
    job_id, batch_id = _submit(stack, "GPU1xL40S", "EuropeanUnion")
    blocked = (
        "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY - Service cannot fulfill the capacity requested for "
        "instance type [g6e.4xlarge]"
    )
    stack.deliver(batch_event(job_id, batch_id, "RUNNABLE", created_at=T0, status_reason=blocked))
    stack.deliver(
        batch_event(
            job_id,
            batch_id,
            "FAILED",
            created_at=T0,
            status_reason="Canceled by JobStateTimeLimit action due to reason: "
            "CAPACITY:INSUFFICIENT_INSTANCE_CAPACITY",
            attempts=[],
        )
    )

    status, job = stack.api("GET", f"/jobs/{job_id}")
    assert status == 200
    assert job["status"] == "Terminated"
    assert job["statusReason"] == "No capacity for GPU1xL40S in EuropeanUnion for 30 min"
    assert job["creditsSpent"] == Decimal("0")
    assert job["startedAt"] is None
    assert stack.balance("dev") == Decimal("10000")
    assert [(n.event, n.method, n.to) for n in stack.notifier.sent] == [
        ("JobTerminated", "Email", "dev@example.com")
    ]
    assert "No capacity for GPU1xL40S in EuropeanUnion for 30 min" in stack.notifier.sent[0].message


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        (
            "MISCONFIGURATION:JOB_RESOURCE_REQUIREMENT",
            "No instance type in UnitedStates can run Memory192x1536",
        ),
        (
            "MISCONFIGURATION:COMPUTE_ENVIRONMENT_MAX_RESOURCE",
            "Memory192x1536 does not fit the vCPU limit of its compute environments in UnitedStates",
        ),
        (
            "MISCONFIGURATION:EC2_INSTANCE_CONFIGURATION_UNSUPPORTED",
            "The instances configured for Memory192x1536 in UnitedStates cannot be launched",
        ),
    ],
)
def test_misconfiguration_cancels_read_as_such(stack, reason: str, expected: str):
    job_id, batch_id = _submit(stack, "Memory192x1536", "UnitedStates")
    cancelled = f"Canceled by JobStateTimeLimit action due to reason: {reason}"
    stack.deliver(batch_event(job_id, batch_id, "FAILED", created_at=T0, status_reason=cancelled))

    job = stack.services.store.get_job(job_id)
    assert job.status.value == "Terminated"
    assert job.status_reason == expected
    assert job.credits_spent == Decimal("0")


def test_every_queue_limit_has_its_own_message():
    assert len({limit.template for limit in QUEUE_LIMITS}) == len(QUEUE_LIMITS) == 4
