"""A dedicated compute's quota reservation on moto, through the api and meter handlers: a compute is
created only into what the account's jobs and computes leave (else 400 ``QuotaExceeded``, nothing
written), jobs are admitted only into what it leaves (a Stopped compute still reserves), deleting it
or its failing gives the reservation back and admits held jobs, jobs submitted to it take no quota,
and concurrent compute creates and job admissions never take more than a limit."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from functions.domain.computes import resource_name
from functions.domain.errors import QuotaExceeded
from functions.domain.jobs import PayloadKind
from functions.domain.machine_classes import GeoZone
from functions.domain.quotas import Family, QuotaKey, QuotaLimits
from functions.logic import computes as compute_logic
from functions.logic import submission
from tests.fakes import FakeComputeEnvironments
from tests.integration.conftest import Stack, finish

US = GeoZone.UNITED_STATES
BASIC_US = QuotaKey(Family.BASIC, US)
SPEC = {"machineClass": "Basic2x8", "geoZone": "UnitedStates", "count": 2}  # 4 vCPUs
JOB = {"code": "1", "machineClass": "Basic1x8", "geoZone": "UnitedStates"}  # 1 vCPU
ADMIN = {"account_id": "admin", "groups": "admin"}
ADVICE = "wait for jobs to end, delete a compute or ask an operator for a higher quota"


def set_basic_us(stack: Stack, limit: int) -> None:
    status, body = stack.api(
        "PUT",
        "/admin/accounts/dev/quotas",
        body={"quotas": [{"family": "Basic", "geoZone": "UnitedStates", "limit": limit}]},
        **ADMIN,
    )
    assert status == 200, body


def quotas(stack: Stack) -> tuple[dict[str, Any], dict[str, Any]]:
    """``GET /account/quotas``: the Basic UnitedStates line and the total."""
    status, body = stack.api("GET", "/account/quotas")
    assert status == 200, body
    line = next(q for q in body["quotas"] if q["family"] == "Basic" and q["geoZone"] == "UnitedStates")
    return line, body["total"]


def counters(stack: Stack) -> tuple[int, int, int, int]:
    """Basic UnitedStates: in use by jobs, reserved; the total: in use by jobs, reserved."""
    usage = stack.services.store.get_quota_usage("dev")
    return usage.used(BASIC_US), usage.reserved_of(BASIC_US), usage.total_in_use, usage.total_reserved


def submit(stack: Stack, body: dict[str, Any] = JOB) -> dict[str, Any]:
    status, job = stack.api("POST", "/jobs", body=body)
    assert status == 202, job
    return dict(job)


def job(stack: Stack, job_id: str) -> dict[str, Any]:
    status, body = stack.api("GET", f"/jobs/{job_id}")
    assert status == 200, body
    return dict(body)


def compute_status(stack: Stack, name: str = "lab") -> str | None:
    status, body = stack.api("GET", f"/account/computes/{name}")
    return str(body["status"]) if status == 200 else None


def sent(stack: Stack) -> list[str]:
    """The job ids sent to AWS Batch so far, in order."""
    return [s.job_name for s in stack.batch[US].submissions]


def create(stack: Stack, until: str = "Stopped") -> None:
    status, body = stack.api("PUT", "/account/computes/lab", body=SPEC)
    assert status == 201, body
    for _ in range(6):
        if compute_status(stack) == until:
            return
        stack.tick()
    assert compute_status(stack) == until


def test_a_compute_over_what_jobs_leave_is_400_and_writes_nothing(
    stack: Stack, computes: FakeComputeEnvironments
) -> None:
    # Given Basic 6 in UnitedStates with 3 jobs holding 3
    set_basic_us(stack, 6)
    for _ in range(3):
        submit(stack)
    assert counters(stack) == (3, 0, 3, 0)
    # When a compute of 4 is asked for
    status, error = stack.api("PUT", "/account/computes/lab", body=SPEC)
    # Then 400 naming the family, zone, limit, what is taken and the request; nothing written
    assert status == 400, error
    assert error["error"]["code"] == "QuotaExceeded" and error["error"]["field"] == "machineClass"
    assert error["error"]["message"] == (
        "Basic2x8 x 2 needs 4 vCPUs but the account's Basic quota in UnitedStates is 6 vCPUs, 3 of them "
        f"in use (0 reserved by dedicated compute); {ADVICE}."
    )
    assert compute_status(stack) is None
    assert stack.count_items(stack.settings.computes_table) == 0
    assert counters(stack) == (3, 0, 3, 0)
    assert computes.calls == []


def test_a_compute_alone_over_its_family_limit_is_400(
    stack: Stack, computes: FakeComputeEnvironments
) -> None:
    set_basic_us(stack, 2)
    status, error = stack.api("PUT", "/account/computes/lab", body=SPEC)
    assert status == 400 and error["error"]["code"] == "QuotaExceeded"
    assert error["error"]["message"] == (
        "Basic2x8 x 2 needs 4 vCPUs but the account's Basic quota in UnitedStates is 2 vCPUs; "
        "ask an operator for a higher quota."
    )
    assert stack.count_items(stack.settings.computes_table) == 0 and counters(stack) == (0, 0, 0, 0)


def test_jobs_are_admitted_only_into_what_a_stopped_compute_leaves(
    stack: Stack, computes: FakeComputeEnvironments
) -> None:
    # Given Basic 6 and a compute of 4, Stopped (it still reserves), created twice (reserved once)
    set_basic_us(stack, 6)
    create(stack, until="Stopped")
    assert stack.api("PUT", "/account/computes/lab", body=SPEC)[0] == 200
    assert counters(stack) == (0, 4, 0, 4)
    # When 3 one-vCPU jobs are submitted
    ids = [submit(stack)["jobId"] for _ in range(3)]
    # Then 2 go to AWS Batch and the third waits, its reason naming the reservation
    assert sent(stack) == ids[:2]
    third = job(stack, ids[2])
    assert (third["status"], third["statusReason"]) == (
        "Queued",
        "Waiting for quota: Basic vCPUs in UnitedStates (6 of 6 in use, 4 of them reserved by dedicated "
        "compute)",
    )
    line, total = quotas(stack)
    assert line == {
        "family": "Basic",
        "geoZone": "UnitedStates",
        "unit": "vCPU",
        "limit": 6,
        "inUse": 2,
        "queued": 1,
        "reserved": 4,
    }
    assert total == {"unit": "vCPU", "limit": 768, "inUse": 2, "queued": 1, "reserved": 4}
    # A job's end admits the held one into what it gave back, not into the reservation.
    finish(stack, ids[0])
    assert sent(stack) == ids and counters(stack) == (2, 4, 2, 4)


def test_deleting_the_compute_frees_its_reservation_and_admits_held_jobs(
    stack: Stack, computes: FakeComputeEnvironments
) -> None:
    # Given Basic 4, all of it reserved by a Running compute, and two held jobs
    set_basic_us(stack, 4)
    create(stack, until="Stopped")
    assert stack.api("POST", "/account/computes/lab/start")[0] == 202
    for _ in range(3):
        stack.tick()
    assert compute_status(stack) == "Running"
    ids = [submit(stack)["jobId"] for _ in range(2)]
    assert sent(stack) == []
    assert job(stack, ids[0])["statusReason"] == (
        "Waiting for quota: Basic vCPUs in UnitedStates (4 of 4 in use, 4 of them reserved by dedicated "
        "compute)"
    )
    # When the compute is deleted (the meter follows AWS Batch until its resources are gone)
    assert stack.api("DELETE", "/account/computes/lab")[0] == 202
    assert counters(stack) == (0, 4, 0, 4)  # held until the compute is gone
    for _ in range(8):
        stack.tick()
    # Then its reservation is free and the held jobs were admitted into it, oldest first
    assert compute_status(stack) is None
    assert sent(stack) == ids
    assert counters(stack) == (2, 0, 2, 0)
    assert quotas(stack)[1] == {"unit": "vCPU", "limit": 768, "inUse": 2, "queued": 0, "reserved": 0}


def test_a_failed_create_gives_the_reservation_back_once(
    stack: Stack, computes: FakeComputeEnvironments
) -> None:
    # Given Basic 4 and a compute of 4 whose compute environment AWS Batch reports INVALID
    set_basic_us(stack, 4)
    assert stack.api("PUT", "/account/computes/lab", body=SPEC)[0] == 201
    held = submit(stack)["jobId"]
    assert sent(stack) == []
    computes.broken = "CLIENT_ERROR - subnet-1 does not exist"
    stack.tick()
    # Then it is Failed, its reservation is back, and the held job was admitted into it
    assert compute_status(stack) == "Failed"
    assert counters(stack) == (1, 0, 1, 0)
    assert sent(stack) == [held]
    # Deleting the Failed compute gives nothing back a second time.
    computes.broken = None
    assert stack.api("DELETE", "/account/computes/lab")[0] == 202
    for _ in range(8):
        stack.tick()
    assert compute_status(stack) is None
    assert counters(stack) == (1, 0, 1, 0)


def test_jobs_on_the_compute_take_no_quota(stack: Stack, computes: FakeComputeEnvironments) -> None:
    # Given Basic 4, all of it reserved by a Running compute of 4
    set_basic_us(stack, 4)
    create(stack, until="Stopped")
    assert stack.api("POST", "/account/computes/lab/start")[0] == 202
    for _ in range(3):
        stack.tick()
    assert compute_status(stack) == "Running"
    # When jobs are submitted to it: they go to its queue at once, counted nowhere
    on_compute = [submit(stack, {"code": "1", "compute": "lab"})["jobId"] for _ in range(3)]
    assert sent(stack) == on_compute
    assert {s.job_queue for s in stack.batch[US].submissions} == {
        resource_name("remote-batch-test", "dev", "lab")
    }
    assert counters(stack) == (0, 4, 0, 4)
    line, _ = quotas(stack)
    assert (line["inUse"], line["queued"], line["reserved"]) == (0, 0, 4)
    # A shared-queue job still waits for the quota the compute reserves.
    shared = submit(stack)["jobId"]
    assert job(stack, shared)["status"] == "Queued" and shared not in sent(stack)
    # Their ends give nothing back (they took nothing) and admit nothing.
    for job_id in on_compute:
        finish(stack, job_id)
    assert counters(stack) == (0, 4, 0, 4)
    assert shared not in sent(stack)


# -- concurrency ---------------------------------------------------------------------------------------


LIMIT = 8


# Computes of Basic2x8 x 1 and jobs of Basic2x8: 2 vCPUs each, 16 requests for 4 slots.
@pytest.mark.parametrize(("n_computes", "n_jobs"), [(6, 10), (8, 8), (10, 6)])
def test_concurrent_compute_creates_and_job_admissions_never_exceed_the_limit(
    stack: Stack, computes: FakeComputeEnvironments, one_request_at_a_time: None, n_computes: int, n_jobs: int
) -> None:
    # Given Basic 8 in UnitedStates (room for 4 of the 16 two-vCPU requests)
    services = stack.services
    services.store.put_quota_limits("dev", QuotaLimits({BASIC_US: LIMIT}))
    request = submission.JobRequest(
        payload_kind=PayloadKind.CODE, payload="1", machine_class="Basic2x8", geo_zone="UnitedStates"
    )

    def create_compute(index: int) -> bool:
        try:
            compute_logic.put_compute(
                services,
                "dev",
                f"lab{index}",
                machine="Basic2x8",
                zone_name="UnitedStates",
                count=1,
                now=stack.clock(),
            )
        except QuotaExceeded:
            return False
        return True

    def submit_job(_: int) -> str:
        return submission.submit_job(services, "dev", request, stack.clock()).job_id

    # When compute creates and job submits race
    with ThreadPoolExecutor(max_workers=8) as pool:
        created_futures = [pool.submit(create_compute, i) for i in range(n_computes)]
        job_futures = [pool.submit(submit_job, i) for i in range(n_jobs)]
        created = sum(f.result() for f in created_futures)
        ids = [f.result() for f in job_futures]

    # Then jobs in use and reservations together never exceed the limit, and each counter is exact
    usage = services.store.get_quota_usage("dev")
    jobs = services.store.get_jobs(ids)
    admitted = [j for j in jobs if j.holds_quota]
    assert len(services.store.list_held_jobs("dev")) + len(admitted) == n_jobs
    assert usage.reserved_of(BASIC_US) == usage.total_reserved == 2 * created
    assert usage.used(BASIC_US) == usage.total_in_use == 2 * len(admitted)
    assert usage.committed(BASIC_US) <= LIMIT
    assert services.compute_store is not None
    assert len(services.compute_store.list_computes("dev")) == created
    assert sorted(sent(stack)) == sorted(j.job_id for j in admitted)
    # None waits while its capacity is free: the limit is full whenever a job is held.
    if len(admitted) < n_jobs:
        assert usage.committed(BASIC_US) + 2 > LIMIT
    assert created + len(admitted) == LIMIT // 2
