"""Dedicated compute on moto, through the api and meter handlers: idempotent creation, the quota it
holds, provisioning that follows AWS Batch's asynchronous states in AWS's order, exact charges at
stop and hourly, the balance rule, schedules, idle stops, jobs on its queue charged 0, deletion."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from functions.domain.computes import resource_name
from functions.domain.machine_classes import GeoZone
from functions.domain.quotas import Family, QuotaKey
from tests.events import batch_event
from tests.fakes import FakeComputeEnvironments
from tests.integration.conftest import Stack

SPEC = {"machineClass": "Basic2x8", "geoZone": "UnitedStates", "count": 2}  # 4 vCPUs, 180 credits/hour
NAME = resource_name("remote-batch-test", "dev", "lab")


def _get(stack: Stack, name: str = "lab") -> dict[str, Any]:
    status, body = stack.api("GET", f"/account/computes/{name}")
    assert status == 200, body
    return dict(body)


def _running(stack: Stack, fake: FakeComputeEnvironments) -> None:
    """PUT, the meter's polls until Stopped, start, polls until Running."""
    status, body = stack.api("PUT", "/account/computes/lab", body=SPEC)
    assert status == 201, body
    for _ in range(4):
        stack.tick()
    assert _get(stack)["status"] == "Stopped"
    status, body = stack.api("POST", "/account/computes/lab/start")
    assert status == 202, body
    for _ in range(3):
        stack.tick()
    assert _get(stack)["status"] == "Running"


def _reserved(stack: Stack) -> tuple[int, int]:
    """What the account's computes reserve: Basic vCPUs in UnitedStates, and vCPUs of the total."""
    usage = stack.services.store.get_quota_usage("dev")
    return usage.reserved_of(QuotaKey(Family.BASIC, GeoZone.UNITED_STATES)), usage.total_reserved


def _compute_entries(stack: Stack) -> list[dict[str, Any]]:
    status, usage = stack.api("GET", "/account/usage")
    assert status == 200
    return [e for e in usage["entries"] if e["kind"] == "compute"]


def test_put_is_idempotent_and_holds_the_quota(stack: Stack, computes: FakeComputeEnvironments) -> None:
    status, created = stack.api("PUT", "/account/computes/lab", body=SPEC)
    assert status == 201 and created["status"] == "Creating" and created["vcpus"] == 4
    status, again = stack.api("PUT", "/account/computes/lab", body=SPEC)
    assert status == 200 and again["createdAt"] == created["createdAt"]
    status, other = stack.api("PUT", "/account/computes/lab", body={**SPEC, "count": 3})
    assert status == 409 and other["error"]["code"] == "Conflict"
    status, listed = stack.api("GET", "/account/computes")
    assert [c["name"] for c in listed["computes"]] == ["lab"]
    assert _reserved(stack) == (4, 4)
    # Another account sees nothing.
    assert stack.api("GET", "/account/computes/lab", account_id="other")[0] == 404


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**SPEC, "machineClass": "Huge"}, "machineClass"),
        ({**SPEC, "count": 0}, "count"),
        ({**SPEC, "count": "2"}, "count"),
        ({**SPEC, "geoZone": "Mars"}, "geoZone"),
        ({**SPEC, "extra": 1}, "extra"),
    ],
)
def test_bad_specs_are_400_naming_the_field(
    stack: Stack, computes: FakeComputeEnvironments, body: dict[str, Any], field: str
) -> None:
    status, error = stack.api("PUT", "/account/computes/lab", body=body)
    assert status == 400 and error["error"]["field"] == field, error


def test_provisioning_follows_aws_order(stack: Stack, computes: FakeComputeEnvironments) -> None:
    _running(stack, computes)
    stack.api("DELETE", "/account/computes/lab")
    for _ in range(8):
        stack.tick()
    assert stack.api("GET", "/account/computes/lab")[0] == 404
    assert [c[0] for c in computes.calls] == [
        "create_environment",
        "create_queue",
        "set_capacity",
        "disable_queue",
        "delete_queue",
        "disable_environment",
        "delete_environment",
    ]
    # Deleting a Running compute goes straight to disabling: AWS Batch ends its instances.
    assert [c[2] for c in computes.calls if c[0] == "set_capacity"] == [4]
    assert _reserved(stack) == (0, 0)


def test_stop_charges_running_seconds_times_rate_exactly(
    stack: Stack, computes: FakeComputeEnvironments
) -> None:
    _running(stack, computes)
    before = stack.balance("dev")
    stack.clock.advance(1234.5)
    status, stopping = stack.api("POST", "/account/computes/lab/stop")
    assert status == 202 and stopping["status"] == "Stopping"
    # Running 1234.5 s → 1235 s billed (the last started second too), 180 credits/hour.
    expected = Decimal("61.7500")
    (entry,) = _compute_entries(stack)
    assert Decimal(str(entry["credits"])) == expected
    assert entry["note"] == "Dedicated compute lab (Basic2x8 x 2): 1235 s at 180 credits/hour"
    assert stack.balance("dev") == before - expected
    assert stopping["creditsSpent"] == expected and stopping["runningSeconds"] == 1235
    # A duplicated stop charges nothing more.
    assert stack.api("POST", "/account/computes/lab/stop")[0] == 202
    assert len(_compute_entries(stack)) == 1
    stack.tick()  # AWS Batch still UPDATING
    assert _get(stack)["status"] == "Stopping"
    stack.tick()
    assert _get(stack)["status"] == "Stopped"


def test_the_meter_settles_at_least_hourly(stack: Stack, computes: FakeComputeEnvironments) -> None:
    _running(stack, computes)
    stack.clock.advance(3600.4)
    stack.tick()
    (hourly,) = _compute_entries(stack)
    assert Decimal(str(hourly["credits"])) == Decimal(180)  # 3600 s; the 0.4 s carries over
    stack.clock.advance(10)
    stack.api("POST", "/account/computes/lab/stop")
    entries = _compute_entries(stack)
    assert sorted(Decimal(str(e["credits"])) for e in entries) == [Decimal("0.55"), Decimal(180)]  # 11 s
    assert _get(stack)["runningSeconds"] == 3611


def test_out_of_credits_stops_it(stack: Stack, computes: FakeComputeEnvironments) -> None:
    stack.add_account("poor", "1")
    status, _ = stack.api("PUT", "/account/computes/lab", body=SPEC, account_id="poor")
    assert status == 201
    for _ in range(4):
        stack.tick()
    stack.api("POST", "/account/computes/lab/start", account_id="poor")
    for _ in range(3):
        stack.tick()
    stack.clock.advance(25)  # 25 s × 180/h = 1.25 credits > 1
    stack.tick()
    status, compute = stack.api("GET", "/account/computes/lab", account_id="poor")
    assert (
        compute["status"] in ("Stopping", "Stopped")
        and compute["statusReason"] == "Stopped: account out of credits"
    )
    assert stack.balance("poor") == Decimal(0)
    status, usage = stack.api("GET", "/account/usage", account_id="poor")
    (entry,) = [e for e in usage["entries"] if e["kind"] == "compute"]
    assert (Decimal(str(entry["credits"])), Decimal(str(entry["unbilled"]))) == (Decimal(1), Decimal("0.25"))


def test_idle_stop_and_daily_schedule(stack: Stack, computes: FakeComputeEnvironments) -> None:
    _running(stack, computes)
    status, body = stack.api(
        "PUT",
        "/account/computes/lab/schedules",
        body={
            "idleStopMinutes": 5,
            "daily": [{"start": "08:00", "stop": "20:00", "timeZone": "Europe/Berlin"}],
        },
    )
    assert status == 200 and body["schedules"]["daily"][0]["timeZone"] == "Europe/Berlin"
    stack.clock.advance(4 * 60)
    stack.tick()
    assert _get(stack)["status"] == "Running"
    stack.clock.advance(61)
    stack.tick()
    assert _get(stack)["statusReason"] == "Stopped: idle for 5 min"
    stack.tick()
    stack.tick()
    assert _get(stack)["status"] == "Stopped"
    # The clock is 2026-11-29 17:29 UTC: the next 08:00 in Berlin is 07:00 UTC on the 30th.
    stack.clock.now = datetime(2026, 11, 30, 6, 59, 30, tzinfo=UTC)
    stack.tick()
    assert _get(stack)["status"] == "Stopped"
    stack.clock.advance(60)
    stack.tick()
    assert _get(stack)["statusReason"] == "Started by its daily schedule"
    # A user who stops it right after is not overruled by the same boundary on a later tick.
    stack.api("POST", "/account/computes/lab/stop")
    for _ in range(3):
        stack.clock.advance(60)
        stack.tick()
    assert _get(stack)["status"] == "Stopped"


@pytest.mark.parametrize(
    ("schedules", "field"),
    [
        ({"idleStopMinutes": 0}, "idleStopMinutes"),
        ({"daily": [{"start": "8:00", "timeZone": "UTC"}]}, "daily[0].start"),
        ({"daily": [{"start": "08:00", "timeZone": "Nowhere/Land"}]}, "daily[0].timeZone"),
        ({"daily": [{"start": "08:00", "timeZone": "localtime"}]}, "daily[0].timeZone"),
        ({"daily": [{"start": "08:00", "timeZone": "Factory"}]}, "daily[0].timeZone"),
    ],
)
def test_bad_schedules_are_400(
    stack: Stack, computes: FakeComputeEnvironments, schedules: dict[str, Any], field: str
) -> None:
    stack.api("PUT", "/account/computes/lab", body=SPEC)
    status, error = stack.api("PUT", "/account/computes/lab/schedules", body=schedules)
    assert status == 400 and error["error"]["field"] == field, error


def test_a_job_on_the_compute_goes_to_its_queue_and_is_charged_zero(
    stack: Stack, computes: FakeComputeEnvironments
) -> None:
    status, refused = stack.api("POST", "/jobs", body={"code": "1", "compute": "lab"})
    assert status == 400 and refused["error"]["field"] == "compute"
    _running(stack, computes)
    status, wrong = stack.api(
        "POST", "/jobs", body={"code": "1", "compute": "lab", "machineClass": "Basic1x8"}
    )
    assert status == 400 and wrong["error"]["field"] == "machineClass"
    job_id, batch_id, started = stack.start_running({"code": "1", "compute": "lab"})
    submission = stack.batch[GeoZone.UNITED_STATES].submissions[-1]
    assert submission.job_queue == NAME and submission.vcpus == 2
    assert submission.share_identifier is None  # a compute's queue is first in, first out (one account)
    before = stack.balance("dev")
    stack.deliver(
        batch_event(
            job_id,
            batch_id,
            "SUCCEEDED",
            created_at=started,
            started_at=started,
            stopped_at=started + 600_000,
        )
    )
    status, job = stack.api("GET", f"/jobs/{job_id}")
    assert job["status"] == "Succeeded" and job["creditsSpent"] == 0 and job["compute"] == "lab"
    assert stack.balance("dev") == before
    status, usage = stack.api("GET", "/account/usage")
    (entry,) = [e for e in usage["entries"] if e["jobId"] == job_id]
    assert entry["credits"] == 0 and entry["compute"] == "lab" and "charged to the compute" in entry["note"]


def test_a_failed_environment_makes_it_failed_with_the_reason(
    stack: Stack, computes: FakeComputeEnvironments
) -> None:
    stack.api("PUT", "/account/computes/lab", body=SPEC)
    computes.broken = "CLIENT_ERROR - subnet-1 does not exist"
    stack.tick()
    compute = _get(stack)
    assert compute["status"] == "Failed"
    assert compute["statusReason"] == "AWS Batch: CLIENT_ERROR - subnet-1 does not exist"
    assert stack.api("POST", "/account/computes/lab/start")[0] == 409


def test_a_batch_failure_is_retried_by_the_meter(stack: Stack, computes: FakeComputeEnvironments) -> None:
    computes.fail = True
    status, created = stack.api("PUT", "/account/computes/lab", body=SPEC)
    assert status == 201 and created["status"] == "Creating"
    for _ in range(5):  # CreateComputeEnvironment again, then its CREATING, then the queue's
        stack.tick()
    assert _get(stack)["status"] == "Stopped"
    assert [c[0] for c in computes.calls].count("create_environment") == 2


def test_no_compute_routes_without_a_token(stack: Stack, computes: FakeComputeEnvironments) -> None:
    assert stack.api("GET", "/account/computes", account_id=None)[0] == 401


@pytest.mark.parametrize(
    ("method", "path", "body", "message"),
    [
        (
            "PUT",
            "/account/computes/a.b",
            SPEC,
            "name must be 2 to 32 letters, digits or hyphens, starting with a letter; got 'a.b'.",
        ),
        (
            "PUT",
            "/account/computes/lab/schedules",
            {"daily": [{"start": "25:00", "timeZone": "UTC"}]},
            "daily[0].start must be a 24-hour time HH:MM, such as 08:00 or 18:30; got '25:00'.",
        ),
        (
            "POST",
            "/jobs",
            {"code": "1", "compute": "-lead"},
            "compute must be 2 to 32 letters, digits or hyphens, starting with a letter; got '-lead'.",
        ),
        (
            "POST",
            "/jobs",
            {"command": ["echo", "a\u0000b"]},
            "command[1] holds a character this field does not take (a NUL); got 'a\\x00b'.",
        ),
    ],
)
def test_a_value_off_its_pattern_is_told_the_rule_of_that_pattern(
    stack: Stack, computes: FakeComputeEnvironments, method: str, path: str, body: Any, message: str
) -> None:
    stack.api("PUT", "/account/computes/lab", body=SPEC)
    status, error = stack.api(method, path, body=body)
    assert status == 400, error
    assert error["error"]["message"] == message


def _starting(stack: Stack) -> None:
    """PUT, the meter's polls until Stopped, then start (Starting: AWS Batch still scaling up)."""
    assert stack.api("PUT", "/account/computes/lab", body=SPEC)[0] == 201
    for _ in range(4):
        stack.tick()
    status, body = stack.api("POST", "/account/computes/lab/start")
    assert status == 202 and body["status"] == "Starting", body


def test_a_stop_ends_the_jobs_on_the_compute_charged_zero(
    stack: Stack, computes: FakeComputeEnvironments
) -> None:
    _running(stack, computes)
    job_id, batch_id, started = stack.start_running({"code": "1", "compute": "lab"})
    status, queued = stack.api("POST", "/jobs", body={"code": "2", "compute": "lab"})
    assert status == 202
    queued_batch_id = stack.services.store.get_job(queued["jobId"])
    assert queued_batch_id is not None and queued_batch_id.batch_job_id is not None
    stack.clock.advance(100)
    before = stack.balance("dev")
    assert stack.api("POST", "/account/computes/lab/stop")[0] == 202
    # Both the running and the queued job are terminated through AWS Batch, with the compute's reason.
    batch = stack.batch[GeoZone.UNITED_STATES]
    assert sorted(batch.terminations) == sorted(
        [
            (batch_id, "Dedicated compute lab stopped"),
            (queued_batch_id.batch_job_id, "Dedicated compute lab stopped"),
        ]
    )
    stopped_at = started + 100_000
    stack.deliver(
        batch_event(
            job_id,
            batch_id,
            "FAILED",
            created_at=started,
            started_at=started,
            stopped_at=stopped_at,
            status_reason="Dedicated compute lab stopped",
        )
    )
    status, job = stack.api("GET", f"/jobs/{job_id}")
    assert job["status"] == "Terminated" and job["statusReason"] == "Dedicated compute lab stopped"
    assert job["creditsSpent"] == 0
    # Only the compute's 100 s are charged: 100 × 180 / 3600 = 5 credits.
    (entry,) = _compute_entries(stack)
    assert Decimal(str(entry["credits"])) == Decimal(5)
    assert stack.balance("dev") == before - Decimal(5)


def test_a_job_on_a_starting_compute_is_billed_from_the_start_request(
    stack: Stack, computes: FakeComputeEnvironments
) -> None:
    _starting(stack)
    job_id, batch_id, _ = stack.start_running({"code": "1", "compute": "lab"})
    stack.clock.advance(30)
    stack.tick()  # AWS Batch is scaling up: still Starting, billed
    compute = _get(stack)
    assert compute["status"] in ("Starting", "Running") and compute["runningSince"] is not None
    stack.clock.advance(12.2)
    status, stopping = stack.api("POST", "/account/computes/lab/stop")
    assert status == 202 and stopping["status"] == "Stopping"
    # 42.2 s → 43 s billed at 180 credits/hour = 2.15 credits, from the start request on.
    (entry,) = _compute_entries(stack)
    assert Decimal(str(entry["credits"])) == Decimal("2.15")
    assert stopping["runningSeconds"] == 43 and stopping["runningSince"] is None
    assert (batch_id, "Dedicated compute lab stopped") in stack.batch[GeoZone.UNITED_STATES].terminations


def test_the_meter_ends_a_job_left_running_on_a_stopped_compute(
    stack: Stack, computes: FakeComputeEnvironments
) -> None:
    _running(stack, computes)
    job_id, batch_id, _ = stack.start_running({"code": "1", "compute": "lab"})
    batch = stack.batch[GeoZone.UNITED_STATES]
    batch.fail_terminate = 1  # the stop's TerminateJob is refused
    assert stack.api("POST", "/account/computes/lab/stop")[0] == 202
    assert batch.terminations == []
    stack.tick()
    assert batch.terminations == [(batch_id, "Dedicated compute lab stopped")]
    stack.tick()  # asked once, not again at every tick
    assert len(batch.terminate_calls) == 2


def test_a_local_stack_restart_bills_a_running_compute_only_up_to_its_last_alive_stamp(
    stack: Stack, computes: FakeComputeEnvironments
) -> None:
    from remote_batch_local.recovery_computes import recover_dedicated_computes

    _running(stack, computes)
    stack.clock.advance(100.4)
    last_alive = stack.clock()
    stack.clock.advance(26)  # the stack was dead for 26 s
    assert stack.services.compute_store is not None
    assert recover_dedicated_computes(stack.services, last_alive) == 1
    compute = _get(stack)
    assert compute["status"] == "Stopped"
    assert compute["statusReason"] == "Stopped: the local stack stopped while it ran"
    # 100.4 s → 101 s at 180 credits/hour = 5.05 credits; none of the 26 s outage.
    (entry,) = _compute_entries(stack)
    assert Decimal(str(entry["credits"])) == Decimal("5.05")
    assert compute["runningSeconds"] == 101
    # A second start of the stack finds nothing left to recover.
    assert recover_dedicated_computes(stack.services, stack.clock()) == 0
    assert len(_compute_entries(stack)) == 1


def test_a_start_sent_right_after_the_create_starts_it_once_ready_billed_from_then(
    stack: Stack, computes: FakeComputeEnvironments
) -> None:
    # Given a compute just created (still Creating)
    status, created = stack.api("PUT", "/account/computes/lab", body=SPEC)
    assert status == 201 and created["status"] == "Creating"

    # When the user starts it at once (issue 22 item 9: this was 409 "Compute lab is Creating")
    status, started = stack.api("POST", "/account/computes/lab/start")

    # Then the start is accepted and kept, and the compute's view says so; nothing is billed while
    # it is created
    assert status == 202, started
    assert (started["status"], started["startPending"]) == ("Creating", True)
    assert (_get(stack)["status"], _get(stack)["startPending"]) == ("Creating", True)
    stack.clock.advance(600)
    for _ in range(4):
        stack.tick()
    ready = _get(stack)
    assert ready["status"] in ("Starting", "Running")
    assert ready["startPending"] is False
    assert [c[0] for c in computes.calls][:3] == ["create_environment", "create_queue", "set_capacity"]
    for _ in range(3):
        stack.tick()
    assert _get(stack)["status"] == "Running"
    # billed from when it was ready, not from the start request ten minutes of creation earlier
    stack.clock.advance(100)
    status, _ = stack.api("POST", "/account/computes/lab/stop")
    assert status == 202
    (entry,) = _compute_entries(stack)
    assert Decimal(str(entry["credits"])) == Decimal("5.0000")  # 100 s at 180 credits/hour


def test_a_start_sent_while_it_stops_starts_it_again_once_stopped(
    stack: Stack, computes: FakeComputeEnvironments
) -> None:
    _running(stack, computes)
    status, stopping = stack.api("POST", "/account/computes/lab/stop")
    assert status == 202 and stopping["status"] == "Stopping"

    status, body = stack.api("POST", "/account/computes/lab/start")

    assert status == 202, body
    assert (body["status"], body["startPending"]) == ("Stopping", True)
    assert _get(stack)["startPending"] is True
    for _ in range(4):
        stack.tick()
    assert _get(stack)["status"] in ("Starting", "Running")
    assert _get(stack)["startPending"] is False
