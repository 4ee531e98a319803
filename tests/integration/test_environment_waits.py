"""Jobs submitted while their environment builds, on moto through the handlers: they wait Queued,
holding no quota and no credits; a Ready report releases them into the admission (quota, dispatch, the
build's hash in SubmitJob); a Failed report ends them Terminated with 0 credits, no ledger entry and
their notifications; duplicate and out-of-order reports change each job once; the meter's backstop
settles what a lost report missed; deleting the environment ends its waiters; abort works."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest

from functions import bootstrap
from functions.domain.environments import BuildOutcome, Package
from functions.domain.environments import finish as finish_build
from functions.domain.jobs import DispatchState
from functions.domain.machine_classes import GeoZone
from functions.logic import environments
from functions.ports import BuildRequest
from tests.fakes import RecordingEnvironmentBuilder
from tests.integration.conftest import Stack, finish, limit_basic_us

SPEC = {"python": "3.12", "requirements": ["six==1.16.0", "numpy==2.1.*"]}
BUILDING = "Building environment ml (Python 3.12, 2 packages)"
FAILED = "Environment ml failed: No solution found when resolving dependencies"
READY = BuildOutcome("f" * 64, (Package("six", "1.16.0"), Package("numpy", "2.1.3")), 123)
BROKEN = BuildOutcome(None, error="No solution found when resolving dependencies")


@pytest.fixture
def builder(stack: Stack) -> RecordingEnvironmentBuilder:
    fake = RecordingEnvironmentBuilder()
    stack.services = replace(stack.services, environment_builder=fake)
    bootstrap.install(stack.services)
    return fake


def _report(stack: Stack, request: BuildRequest, outcome: BuildOutcome) -> None:
    environments.record_build(
        stack.services,
        request.account_id,
        request.name,
        spec_hash=request.spec_hash,
        outcome=outcome,
        now=stack.clock(),
        log_stream_name=request.log_stream_name,
    )


def _submit(stack: Stack, **body: Any) -> dict[str, Any]:
    status, job = stack.api("POST", "/jobs", body={"code": "import six; six.__version__", **body})
    assert status == 202, job
    return dict(job)


def _basic_quota(stack: Stack) -> dict[str, Any]:
    _, body = stack.api("GET", "/account/quotas")
    return next(q for q in body["quotas"] if q["family"] == "Basic" and q["geoZone"] == "UnitedStates")


def _job_entries(stack: Stack) -> list[Any]:
    """The account's ledger entries about jobs (the initial grant is not one)."""
    return [e for e in stack.services.store.list_ledger("dev", None, None) if e.job_id is not None]


def _submissions(stack: Stack) -> list[Any]:
    return stack.batch[GeoZone.UNITED_STATES].submissions


def test_a_job_waits_while_its_environment_builds_then_runs_with_the_build(
    stack: Stack, builder: RecordingEnvironmentBuilder
) -> None:
    # Given an environment Building and a job submitted in it
    stack.api("PUT", "/environments/ml", body=SPEC)
    job = _submit(stack, environment="ml")
    # Then it waits: Queued with the build's reason, no hash yet, no quota taken, nothing sent
    assert (job["status"], job["statusReason"]) == ("Queued", BUILDING)
    assert job["environment"] == {"name": "ml", "hash": None, "python": "3.12", "image": None}
    quota = _basic_quota(stack)
    assert (quota["inUse"], quota["queued"]) == (0, 0)
    assert _submissions(stack) == []
    assert stack.api("GET", f"/jobs/{job['jobId']}")[1]["statusReason"] == BUILDING
    # When the build reports Ready
    _report(stack, builder.requests[0], READY)
    # Then it is admitted and sent with the build's hash, its reason gone
    released = stack.api("GET", f"/jobs/{job['jobId']}")[1]
    assert released["status"] == "Queued" and released["statusReason"] is None
    assert released["environment"] == {"name": "ml", "hash": "f" * 64, "python": "3.12", "image": None}
    [submission] = _submissions(stack)
    assert submission.environment["REMOTE_BATCH_ENVIRONMENT_HASH"] == "f" * 64
    assert _basic_quota(stack)["inUse"] > 0
    # And it runs and is charged as any job
    finish(stack, job["jobId"])
    done = stack.api("GET", f"/jobs/{job['jobId']}")[1]
    assert done["status"] == "Succeeded" and Decimal(done["creditsSpent"]) > 0


def test_a_failed_build_ends_its_waiting_jobs_free_with_the_first_error_line(
    stack: Stack, builder: RecordingEnvironmentBuilder
) -> None:
    stack.api("PUT", "/environments/ml", body=SPEC)
    single = _submit(stack, environment="ml", notifications="JobTerminated")
    array = _submit(stack, environment="ml", arrayItems=[1, 2, 3])
    assert array["statusReason"] == BUILDING
    balance = stack.balance("dev")
    _report(stack, builder.requests[0], BROKEN)
    for job_id in (single["jobId"], array["jobId"]):
        ended = stack.services.store.get_job(job_id)
        assert ended is not None
        assert (ended.status.value, ended.status_reason) == ("Terminated", FAILED)
        assert ended.credits_spent == Decimal("0")
    # The array's children end with it, each free.
    children = stack.api("GET", f"/jobs/{array['jobId']}/children")[1]["jobs"]
    assert [c["status"] for c in children] == ["Terminated"] * 3
    # No ledger entry, no charge, no quota left counted, nothing sent to AWS Batch.
    assert _job_entries(stack) == []
    assert stack.balance("dev") == balance == Decimal("10000")
    quota = _basic_quota(stack)
    assert (quota["inUse"], quota["queued"]) == (0, 0)
    assert _submissions(stack) == []
    # The single job's JobTerminated notification went out, with the reason.
    terminated = [
        n for n in stack.notifier.sent if n.job_id == single["jobId"] and n.event == "JobTerminated"
    ]
    assert len(terminated) == 1
    # A new job naming the failed environment is refused on the field.
    status, refused = stack.api("POST", "/jobs", body={"code": "1", "environment": "ml"})
    assert status == 400 and refused["error"]["field"] == "environment"
    assert FAILED in refused["error"]["message"]


@pytest.mark.parametrize(
    "reports",
    [
        pytest.param([READY, READY], id="ready-twice"),
        pytest.param([READY, BROKEN, READY], id="ready-then-failed"),
        pytest.param([BROKEN, READY, BROKEN], id="failed-then-ready"),
    ],
)
def test_duplicate_and_out_of_order_reports_change_each_job_once(
    stack: Stack, builder: RecordingEnvironmentBuilder, reports: list[BuildOutcome]
) -> None:
    stack.api("PUT", "/environments/ml", body=SPEC)
    jobs = [_submit(stack, environment="ml")["jobId"] for _ in range(3)]
    for outcome in reports:
        _report(stack, builder.requests[0], outcome)
    stored = [stack.services.store.get_job(job_id) for job_id in jobs]
    if reports[0] is READY:
        # Released once each: one SubmitJob per job, none twice, none ended.
        assert sorted(s.job_name for s in _submissions(stack)) == sorted(jobs)
        assert all(j is not None and j.status.value == "Queued" and j.batch_job_id for j in stored)
    else:
        assert _submissions(stack) == []
        assert all(
            j is not None and (j.status.value, j.status_reason) == ("Terminated", FAILED) for j in stored
        )
        assert all(j is not None and j.credits_spent == Decimal("0") for j in stored)
        assert _job_entries(stack) == []
    assert _basic_quota(stack)["queued"] == 0


def test_the_meter_backstop_settles_jobs_a_lost_report_left_waiting(
    stack: Stack, builder: RecordingEnvironmentBuilder
) -> None:
    stack.api("PUT", "/environments/ml", body=SPEC)
    job = _submit(stack, environment="ml")
    # The environment turns Ready but the waiters' release never runs (a crash between the two).
    store = stack.services.environment_store
    assert store is not None
    building = store.get_environment("dev", "ml")
    assert building is not None
    store.save_environment(building, finish_build(building, READY, stack.clock()))
    stack.tick()
    assert _submissions(stack) == []  # not yet quiet for long: left alone
    stack.clock.advance(timedelta(minutes=11).total_seconds())
    stack.tick()
    [submission] = _submissions(stack)
    assert submission.job_name == job["jobId"]
    assert submission.environment["REMOTE_BATCH_ENVIRONMENT_HASH"] == "f" * 64


def test_deleting_an_environment_ends_the_jobs_waiting_for_it(
    stack: Stack, builder: RecordingEnvironmentBuilder
) -> None:
    stack.api("PUT", "/environments/ml", body=SPEC)
    job = _submit(stack, environment="ml")
    assert stack.api("DELETE", "/environments/ml")[0] == 200
    ended = stack.api("GET", f"/jobs/{job['jobId']}")[1]
    assert ended["status"] == "Terminated"
    assert ended["statusReason"] == "Environment ml was deleted while the job waited for its build"
    assert Decimal(ended["creditsSpent"]) == Decimal("0")
    # The build's late report finds nothing (the name is free) and changes no job.
    _report(stack, builder.requests[0], READY)
    assert _submissions(stack) == []


def test_aborting_a_waiting_job_ends_it_and_a_later_report_leaves_it(
    stack: Stack, builder: RecordingEnvironmentBuilder
) -> None:
    stack.api("PUT", "/environments/ml", body=SPEC)
    job = _submit(stack, environment="ml")
    status, aborted = stack.api("POST", f"/jobs/{job['jobId']}/abort")
    assert status == 202, aborted
    assert (aborted["status"], aborted["statusReason"]) == ("Terminated", "Aborted by user")
    _report(stack, builder.requests[0], READY)
    after = stack.services.store.get_job(job["jobId"])
    assert after is not None and after.status_reason == "Aborted by user"
    assert after.credits_spent == Decimal("0")
    assert _submissions(stack) == []
    assert _job_entries(stack) == []


def test_a_released_job_waits_for_quota_like_any_other(
    stack: Stack, builder: RecordingEnvironmentBuilder
) -> None:
    # Given a Basic quota of one job's vCPUs, taken by a job AWS Batch runs
    limit_basic_us(stack, 1)
    running = _submit(stack)
    stack.api("PUT", "/environments/ml", body=SPEC)
    waiting = _submit(stack, environment="ml")
    _report(stack, builder.requests[0], READY)
    held = stack.services.store.get_job(waiting["jobId"])
    assert held is not None and held.dispatch_state == DispatchState.HELD
    assert held.status_reason is not None and held.status_reason.startswith("Waiting for quota")
    assert _basic_quota(stack)["queued"] == 1
    # When the running job ends, the released one is admitted and sent.
    finish(stack, running["jobId"])
    assert [s.job_name for s in _submissions(stack)] == [running["jobId"], waiting["jobId"]]


# -- inline specs: an unnamed environment by the spec's hash ---------------------------------------------
def test_the_same_inline_spec_twice_is_one_environment_and_one_build(
    stack: Stack, builder: RecordingEnvironmentBuilder
) -> None:
    first = _submit(stack, environment=SPEC)
    second = _submit(stack, environment={**SPEC, "requirements": ["six == 1.16.0", "numpy==2.1.*"]})
    inline = "Building the inline environment (Python 3.12, 2 packages)"
    assert (first["statusReason"], second["statusReason"]) == (inline, inline)
    assert first["environment"] == {"name": None, "hash": None, "python": "3.12", "image": None}
    [request] = builder.requests
    assert request.name is None
    # Unnamed: not listed among the account's environments.
    assert stack.api("GET", "/environments")[1]["environments"] == []
    _report(stack, request, READY)
    for job in (first, second):
        released = stack.api("GET", f"/jobs/{job['jobId']}")[1]
        assert released["environment"] == {"name": None, "hash": "f" * 64, "python": "3.12", "image": None}
    assert len(_submissions(stack)) == 2
    # Once Ready, a job with that spec runs at once, without a build.
    third = _submit(stack, environment=SPEC)
    assert third["environment"]["hash"] == "f" * 64 and len(builder.requests) == 1
    assert len(_submissions(stack)) == 3


def test_a_failed_inline_environment_refuses_jobs_for_a_while_then_builds_again(
    stack: Stack, builder: RecordingEnvironmentBuilder
) -> None:
    job = _submit(stack, environment=SPEC)
    _report(stack, builder.requests[0], BROKEN)
    ended = stack.api("GET", f"/jobs/{job['jobId']}")[1]
    assert ended["status"] == "Terminated"
    assert (
        ended["statusReason"]
        == "The inline environment failed: No solution found when resolving dependencies"
    )
    assert Decimal(ended["creditsSpent"]) == Decimal("0") and _job_entries(stack) == []
    status, refused = stack.api("POST", "/jobs", body={"code": "1", "environment": SPEC})
    assert status == 400 and refused["error"]["field"] == "environment"
    assert refused["error"]["message"] == (
        "The inline environment failed: No solution found when resolving dependencies. To use it, the "
        "same inline spec builds again 10 minutes after it failed; change the requirements to try at once."
    )
    stack.clock.advance(timedelta(minutes=11).total_seconds())
    again = _submit(stack, environment=SPEC)
    assert again["status"] == "Queued" and len(builder.requests) == 2
    # The first build's report delivered again names the earlier build: the new one is not touched.
    _report(stack, builder.requests[0], BROKEN)
    assert stack.api("GET", f"/jobs/{again['jobId']}")[1]["status"] == "Queued"
    _report(stack, builder.requests[1], READY)
    assert stack.api("GET", f"/jobs/{again['jobId']}")[1]["environment"]["hash"] == "f" * 64
