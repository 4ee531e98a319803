"""DynamoDB requests per step of a Single job's life (issue 14): each step's count is pinned, so a
read that creeps back in (a read before a conditional write, a read after a write) fails here."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from decimal import Decimal
from typing import Any

from benchmarks.capacity import RequestRecorder
from functions.domain.jobs import DispatchState
from functions.domain.machine_classes import GeoZone
from functions.domain.quotas import Family, QuotaKey, QuotaLimits
from functions.domain.status import JobStatus
from remote_batch_local.bus import matches_rule
from tests.events import batch_event, job_lifecycle
from tests.integration.conftest import finish, limit_basic_us


def _dynamodb(call: Callable[[], Any]) -> tuple[Any, Counter[str]]:
    with RequestRecorder() as recorder:
        result = call()
    counts = Counter(
        {k.split(":", 1)[1]: v for k, v in recorder.usage.requests.items() if k.startswith("dynamodb:")}
    )
    return result, counts


def _submitted(stack, notifications: Any) -> tuple[str, str, list[dict[str, Any]]]:
    status, job = stack.api("POST", "/jobs", body={"code": "1", "notifications": notifications})
    assert status == 202, job
    stored = stack.services.store.get_job(job["jobId"])
    created = int(stack.clock().timestamp() * 1000)
    events = job_lifecycle(
        job["jobId"],
        stored.batch_job_id,
        created_at=created,
        started_at=created + 5_000,
        stopped_at=created + 65_000,
    )
    return job["jobId"], stored.batch_job_id, events


def test_each_event_of_a_job_without_notifications_is_one_write_and_no_read(stack) -> None:
    job_id, _, events = _submitted(stack, "None")
    pending, runnable, starting, running, succeeded = events

    # The rule leaves out a first attempt's PENDING and RUNNABLE: no Lambda call at all.
    assert not matches_rule(pending)
    assert not matches_rule(runnable)
    # STARTING and RUNNING: one conditional UpdateItem each, returning the job it wrote.
    summary, counts = _dynamodb(lambda: stack.deliver(starting))
    assert summary["status"] == "Starting"
    assert counts == Counter({"UpdateItem": 1})
    summary, counts = _dynamodb(lambda: stack.deliver(running))
    assert summary["status"] == "Running"
    assert counts == Counter({"UpdateItem": 1})
    # The settlement: the job and the balance read, then one transaction; nothing read after it.
    stack.clock.advance(60)
    summary, counts = _dynamodb(lambda: stack.deliver(succeeded))
    assert summary["status"] == "Succeeded"
    # Its quota is given back in that transaction on the condition that nothing of the account is
    # queued: that proves no held job waits, so no admission scan follows (issue 14).
    assert counts == Counter({"GetItem": 2, "TransactWriteItems": 1})
    assert stack.services.store.get_job(job_id).status_history[-1].value == "Succeeded"


def test_an_event_that_finds_the_job_elsewhere_is_applied_from_the_failed_writes_answer(stack) -> None:
    # Given a job whose STARTING event was lost: RUNNING finds it Queued, not Starting
    job_id, batch_id, events = _submitted(stack, "None")
    running = events[3]

    summary, counts = _dynamodb(lambda: stack.deliver(running))

    # Then the presumed write fails and returns the job (ALL_OLD): no GetItem, one more UpdateItem
    assert summary["status"] == "Running"
    assert counts == Counter({"UpdateItem": 2})
    job = stack.services.store.get_job(job_id)
    assert [s.value for s in job.status_history] == ["Queued", "Starting", "Running"]
    assert job.batch_job_id == batch_id


def test_a_duplicate_event_reads_the_job_once_and_writes_nothing_more(stack) -> None:
    job_id, _, events = _submitted(stack, "None")
    starting = events[2]
    stack.deliver(starting)
    before = stack.services.store.get_job(job_id)

    summary, counts = _dynamodb(lambda: stack.deliver(starting))

    assert summary["status"] == "Starting"
    assert counts == Counter({"UpdateItem": 1})  # the failed presumed write, its answer the job
    assert stack.services.store.get_job(job_id) == before


def test_an_event_of_another_batch_job_of_the_same_name_changes_nothing(stack) -> None:
    job_id, _, _ = _submitted(stack, "None")
    before = stack.services.store.get_job(job_id)
    stranger = batch_event(job_id, "another-batch-job", "STARTING")

    stack.deliver(stranger)

    assert stack.services.store.get_job(job_id) == before


def test_the_meter_reads_the_metered_index_once_per_tick(stack) -> None:
    _, _, events = _submitted(stack, "None")
    for event in events[2:4]:
        stack.deliver(event)
    stack.clock.advance(60)

    report, counts = _dynamodb(stack.tick)

    assert report["metered"] == 1
    assert report["stuck"] == 0
    # notifyRetry, metered, unfinished and the dedicated computes' allComputes index (issue 16): one
    # Query each; the raise of creditsSpent; the balance.
    assert counts == Counter({"Query": 4, "UpdateItem": 1, "GetItem": 1})


def test_a_settlement_claims_its_notification_in_its_own_write_and_reads_the_account_once(stack) -> None:
    job_id, _, events = _submitted(stack, [{"events": ["JobCompleted"], "methods": ["Email"]}])
    for event in events[2:4]:
        stack.deliver(event)
    stack.clock.advance(60)

    summary, counts = _dynamodb(lambda: stack.deliver(events[4]))

    # The job and the account (balance and contacts) read once, the transaction claims the
    # JobCompleted key, and one UpdateItem appends the outcome to the notification log.
    assert summary["status"] == "Succeeded"
    # Its quota is given back in that transaction on the condition that nothing of the account is
    # queued: that proves no held job waits, so no admission scan follows (issue 14).
    assert counts == Counter({"GetItem": 2, "TransactWriteItems": 1, "UpdateItem": 1})
    assert [(n.event, n.method) for n in stack.notifier.sent] == [("JobCompleted", "Email")]
    job = stack.services.store.get_job(job_id)
    assert job.sent_notifications == frozenset({"JobCompleted#3/Email"})  # the 4th status entered
    assert [(r.event, r.outcome) for r in job.notification_log] == [("JobCompleted", "sent")]
    # A redelivered final event sends nothing again.
    stack.deliver(events[4])
    assert len(stack.notifier.sent) == 1


def test_a_final_event_tagged_with_its_account_reads_the_job_and_the_account_in_one_request(stack) -> None:
    # AWS Batch's events carry the tags the submit gave the job (remote-batch:accountId among them)
    job_id, _, events = _submitted(stack, "None")
    for event in events:
        event["detail"]["tags"]["remote-batch:accountId"] = "dev"
    for event in events[2:4]:
        stack.deliver(event)
    stack.clock.advance(60)
    balance = stack.balance("dev")

    summary, counts = _dynamodb(lambda: stack.deliver(events[4]))

    assert summary["status"] == "Succeeded"
    # Its quota is given back in that transaction on the condition that nothing of the account is
    # queued: that proves no held job waits, so no admission scan follows (issue 14).
    assert counts == Counter({"BatchGetItem": 1, "TransactWriteItems": 1})
    assert stack.services.store.get_job(job_id).credits_spent == Decimal("1.0000")
    assert stack.balance("dev") == balance - Decimal("1.0000")


def test_a_final_event_whose_account_tag_is_not_the_jobs_charges_the_jobs_account(stack) -> None:
    job_id, _, events = _submitted(stack, "None")
    events[4]["detail"]["tags"]["remote-batch:accountId"] = "someone-else"
    for event in events[2:4]:
        stack.deliver(event)
    stack.clock.advance(60)
    balance = stack.balance("dev")

    summary, counts = _dynamodb(lambda: stack.deliver(events[4]))

    assert summary["status"] == "Succeeded"
    # The tag's account is not the job's: the job's own account is read for the charge.
    # Its quota is given back in that transaction on the condition that nothing of the account is
    # queued: that proves no held job waits, so no admission scan follows (issue 14).
    assert counts == Counter({"BatchGetItem": 1, "GetItem": 1, "TransactWriteItems": 1})
    assert stack.balance("dev") == balance - Decimal("1.0000")


def test_the_list_shows_each_job_as_get_does_from_the_slim_index(stack) -> None:
    # A job with everything the view shows: a name, caps, a reason, notifications sent and logged
    body = {
        "code": "1",
        "name": "listed",
        "creditConstraint": 5,
        "timeConstraint": 600,
        "notifications": [{"events": ["JobStarting", "JobCompleted"], "methods": ["Email", "SMS"]}],
    }
    status, job = stack.api("POST", "/jobs", body=body)
    assert status == 202, job
    stored = stack.services.store.get_job(job["jobId"])
    created = int(stack.clock().timestamp() * 1000)
    events = job_lifecycle(
        job["jobId"],
        stored.batch_job_id,
        created_at=created,
        started_at=created + 5_000,
        stopped_at=created + 65_000,
    )
    for event in events[2:]:
        stack.deliver(event)
    queued_status, queued = stack.api("POST", "/jobs", body={"code": "2", "notifications": "None"})
    assert queued_status == 202, queued

    listed_status, listed = stack.api("GET", "/jobs")

    assert listed_status == 200, listed
    for shown in listed["jobs"]:
        got_status, got = stack.api("GET", f"/jobs/{shown['jobId']}")
        assert got_status == 200
        assert shown == got
    assert [j["jobId"] for j in listed["jobs"]] == [queued["jobId"], job["jobId"]]
    assert listed["jobs"][1]["notificationLog"]
    assert listed["jobs"][1]["status"] == "Succeeded"


def _usage(stack) -> tuple[int, int]:
    """(units in use, units queued) of Basic in UnitedStates."""
    usage = stack.services.store.get_quota_usage("dev")
    key = QuotaKey(Family.BASIC, GeoZone.UNITED_STATES)
    return usage.used(key), usage.waiting(key)


BASIC_US_JOB = {"code": "1", "notifications": "None", "machineClass": "Basic1x8", "geoZone": "UnitedStates"}


def test_a_submit_that_fits_is_written_admitted_in_one_transaction_then_claimed_and_recorded(stack) -> None:
    (status, job), counts = _dynamodb(lambda: stack.api("POST", "/jobs", body=BASIC_US_JOB))

    assert status == 202, job
    # The caller's role (GetItem), the class states (Query, kept 10 s per environment), the account
    # and its quota limits (one BatchGetItem), the job written admitted with its units in use (one
    # TransactWriteItems, no counters read first), then the dispatcher's claim and the record of
    # the Batch id (UpdateItem each, the claim with no read before it, the record returning the job).
    assert counts == Counter(
        {"GetItem": 1, "Query": 1, "BatchGetItem": 1, "TransactWriteItems": 1, "UpdateItem": 2}
    )
    stored = stack.services.store.get_job(job["jobId"])
    assert stored.dispatch_state == DispatchState.DISPATCHED
    assert stored.batch_job_id == stack.batch[GeoZone.UNITED_STATES].submitted_ids[-1]
    assert _usage(stack) == (1, 0)
    assert stack.services.store.list_held_jobs("dev") == []
    # A second submit in the same environment reads the class states from memory.
    (status, _), counts = _dynamodb(lambda: stack.api("POST", "/jobs", body=BASIC_US_JOB))
    assert status == 202
    assert counts == Counter({"GetItem": 1, "BatchGetItem": 1, "TransactWriteItems": 1, "UpdateItem": 2})
    assert _usage(stack) == (2, 0)


def test_a_submit_behind_a_held_job_of_its_family_is_held_never_admitted_past_it(stack) -> None:
    limit_basic_us(stack, 1)
    first = stack.api("POST", "/jobs", body=BASIC_US_JOB)[1]["jobId"]
    second = stack.api("POST", "/jobs", body=BASIC_US_JOB)[1]["jobId"]
    assert stack.services.store.get_job(second).dispatch_state == DispatchState.HELD
    # Room for two more appears without an admission (the limits written as a raw store write):
    stack.services.store.put_quota_limits(
        "dev", QuotaLimits({QuotaKey(Family.BASIC, GeoZone.UNITED_STATES): 3})
    )

    status, third = stack.api("POST", "/jobs", body=BASIC_US_JOB)

    # Then the third's one-write admission fails on the queued units: it is held, and the admission
    # its submit asks for lets the older held job go first.
    assert status == 202
    submitted = [s.job_name for s in stack.batch[GeoZone.UNITED_STATES].submissions]
    assert submitted == [first, second, third["jobId"]]
    assert _usage(stack) == (3, 0)


def test_an_ending_while_a_job_is_held_writes_its_release_again_and_admits_the_held_job(stack) -> None:
    limit_basic_us(stack, 1)
    first = stack.api("POST", "/jobs", body=BASIC_US_JOB)[1]["jobId"]
    second = stack.api("POST", "/jobs", body=BASIC_US_JOB)[1]["jobId"]
    assert _usage(stack) == (1, 1)
    balance = stack.balance("dev")

    _, counts = _dynamodb(lambda: finish(stack, first))

    # The conditional release fails on the queued unit (no write), the settlement is written without
    # the condition, and the admission reads the usage and the held job and admits it.
    assert counts["TransactWriteItems"] == 3  # the failed settlement, the settlement, the admission
    assert stack.services.store.get_job(first).status == JobStatus.SUCCEEDED
    assert stack.services.store.get_job(first).credits_spent == Decimal("1.0000")
    assert stack.balance("dev") == balance - Decimal("1.0000")  # charged once
    assert stack.services.store.get_job(second).dispatch_state == DispatchState.DISPATCHED
    assert _usage(stack) == (1, 0)
