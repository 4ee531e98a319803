"""The meter Lambda on moto: spend refresh, CreditConstraint, TimeConstraint, balance, reconciliation."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import boto3
import pytest

from functions.domain.jobs import MAX_TERMINATE_ATTEMPTS, BatchJobState
from functions.domain.machine_classes import GeoZone
from tests.events import batch_event


def start_job(stack, body, account_id="dev"):
    """Submit and deliver RUNNING at the clock's now; returns (job id, batch id, started ms)."""
    return stack.start_running(body, account_id)


def started_datetime(ms):
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def fail_event(job_id, batch_id, started, stopped, reason):
    return batch_event(
        job_id,
        batch_id,
        "FAILED",
        created_at=started,
        started_at=started,
        stopped_at=stopped,
        exit_code=143,
        status_reason=reason,
    )


@pytest.mark.parametrize(
    ("machine", "seconds", "expected"),
    [("Basic1x8", 10, "0.1667"), ("Basic1x8", 90, "1.5"), ("Memory8x64", 3600, "480")],
)
def test_meter_refreshes_credits_spent_and_never_lowers_it(stack, machine, seconds, expected):
    job_id, batch_id, started = start_job(stack, {"code": "1", "machineClass": machine})
    stack.clock.advance(seconds)
    report = stack.tick()
    assert (report["metered"], report["updated"], report["terminated"]) == (1, 1, 0)
    assert stack.services.store.get_job(job_id).credits_spent == Decimal(expected)
    stack.clock.advance(-seconds)  # a tick with a clock behind never lowers it
    assert stack.tick()["updated"] == 0
    assert stack.services.store.get_job(job_id).credits_spent == Decimal(expected)
    stack.deliver(
        batch_event(
            job_id,
            batch_id,
            "SUCCEEDED",
            created_at=started,
            started_at=started,
            stopped_at=started + seconds * 1000,
            exit_code=0,
        )
    )
    assert stack.tick()["metered"] == 0  # a final job leaves the meter's index


def test_credit_constraint_terminates_caps_the_charge_and_discards_output(stack):
    job_id, batch_id, started = start_job(
        stack, {"code": "import time; time.sleep(600)", "creditConstraint": 0.05}
    )
    stack.clock.advance(2)  # 2 s = 0.0333 credits
    assert stack.tick()["terminated"] == 0
    stack.clock.advance(1)  # 3 s = 0.05 credits: the cap
    assert stack.tick()["terminated"] == 1
    gateway = stack.batch[GeoZone.UNITED_STATES]
    assert gateway.terminations == [(batch_id, "CreditConstraint of 0.05 credits reached")]
    # The worker had uploaded something before it was killed.
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.put_object(
        Bucket="test-data-us-east-1",
        Key=f"outputs/{job_id}/result.json",
        Body=json.dumps({"result": None, "resultRepr": "None"}),
    )
    stack.deliver(fail_event(job_id, batch_id, started, started + 4_000, "Job terminated by the meter"))
    job = stack.services.store.get_job(job_id)
    assert job.status.value == "Terminated"
    assert job.status_reason == "CreditConstraint of 0.05 credits reached"
    assert job.credits_spent == Decimal("0.0500")
    assert stack.balance("dev") == Decimal("9999.9500")
    assert s3.list_objects_v2(Bucket="test-data-us-east-1", Prefix=f"outputs/{job_id}/").get("KeyCount") == 0
    status, error = stack.api("GET", f"/jobs/{job_id}/result")
    assert status == 409
    assert error["error"]["code"] == "NoOutput"
    assert "CreditConstraint of 0.05 credits" in error["error"]["message"]


def test_time_constraint_terminates(stack):
    job_id, batch_id, started = start_job(stack, {"code": "1", "timeConstraint": 3})
    stack.clock.advance(2.5)
    assert stack.tick()["terminated"] == 0
    stack.clock.advance(0.5)
    assert stack.tick()["terminated"] == 1
    assert stack.batch[GeoZone.UNITED_STATES].terminations == [(batch_id, "TimeConstraint of 3 s reached")]
    stack.deliver(fail_event(job_id, batch_id, started, started + 3_500, "Terminated"))
    job = stack.services.store.get_job(job_id)
    assert job.status_reason == "TimeConstraint of 3 s reached"
    assert job.credits_spent == Decimal("1.0000")  # the 60-second minimum


def test_credit_constraint_is_enforced_before_time_constraint(stack):
    _, batch_id, _ = start_job(stack, {"code": "1", "timeConstraint": 3, "creditConstraint": 0.05})
    stack.clock.advance(3)
    stack.tick()
    assert stack.batch[GeoZone.UNITED_STATES].terminations == [
        (batch_id, "CreditConstraint of 0.05 credits reached")
    ]


def test_account_out_of_credits_terminates_all_its_running_jobs_and_balance_ends_at_zero(stack):
    stack.add_account("poor", "0.02", email="poor@example.com")
    first = start_job(stack, {"code": "import time; time.sleep(600)"}, account_id="poor")
    second = start_job(stack, {"code": "import time; time.sleep(600)"}, account_id="poor")
    other = start_job(stack, {"code": "import time; time.sleep(600)"})  # dev's job is not touched
    stack.clock.advance(1)  # 2 × 0.0167 = 0.0334 > 0.02
    assert stack.tick()["terminated"] == 2
    reasons = sorted(stack.batch[GeoZone.UNITED_STATES].terminations)
    assert reasons == sorted([(first[1], "Account out of credits"), (second[1], "Account out of credits")])
    for job_id, batch_id, started in (first, second):
        stack.deliver(fail_event(job_id, batch_id, started, started + 1_500, "Terminated"))
        assert stack.services.store.get_job(job_id).status_reason == "Account out of credits"
    assert stack.balance("poor") == Decimal("0.0000")
    entries = stack.services.store.list_ledger("poor", None, None)
    charges = sorted((e.credits, e.unbilled) for e in entries if e.kind.value == "charge")
    # The second job found nothing left: its entry charges 0 and records the whole cost as unbilled.
    assert charges == [(Decimal("0.0000"), Decimal("1.0000")), (Decimal("0.0200"), Decimal("0.9800"))]
    assert stack.services.store.get_job(other[0]).status.value == "Running"
    _, usage = stack.api("GET", "/account/usage", account_id="poor")
    assert sorted((e["credits"], e["unbilled"]) for e in usage["entries"] if e["kind"] == "charge") == [
        (Decimal("0"), Decimal("1")),
        (Decimal("0.02"), Decimal("0.98")),
    ]
    status, error = stack.api("POST", "/jobs", body={"code": "1"}, account_id="poor")
    assert status == 402
    assert error["error"]["code"] == "InsufficientCredits"


def test_terminate_job_is_sent_once_per_job_until_the_failed_event_arrives(stack):
    job_id, batch_id, started = start_job(stack, {"code": "1", "timeConstraint": 1})
    gateway = stack.batch[GeoZone.UNITED_STATES]
    stack.clock.advance(2)
    reports = []
    for _ in range(5):  # 125 s of ticks with the FAILED event late
        reports.append(stack.tick()["terminated"])
        stack.clock.advance(25)
    # A user's abort meanwhile does not send it again either.
    status, body = stack.api("POST", f"/jobs/{job_id}/abort")
    assert status == 202
    assert body["status"] == "Running"
    assert gateway.terminate_calls == [(batch_id, "TimeConstraint of 1 s reached")]
    assert reports == [1, 0, 0, 0, 0]
    job = stack.services.store.get_job(job_id)
    assert job.termination_requested_at == started_datetime(started) + timedelta(seconds=2)
    assert job.termination_attempts == 1
    stack.deliver(fail_event(job_id, batch_id, started, started + 3_000, "Job terminated"))
    assert stack.services.store.get_job(job_id).status_reason == "TimeConstraint of 1 s reached"
    stack.tick()
    assert len(gateway.terminate_calls) == 1


def test_a_failed_terminate_job_is_sent_again_on_a_later_tick(stack):
    _, batch_id, _ = start_job(stack, {"code": "1", "timeConstraint": 1})
    gateway = stack.batch[GeoZone.UNITED_STATES]
    gateway.fail_terminate = 1
    stack.clock.advance(2)
    assert stack.tick()["terminated"] == 0  # refused: the request is released
    assert stack.tick()["terminated"] == 1  # sent again, and it goes through
    assert stack.tick()["terminated"] == 0
    assert gateway.terminate_calls == [(batch_id, "TimeConstraint of 1 s reached")] * 2
    assert gateway.terminations == [(batch_id, "TimeConstraint of 1 s reached")]


def test_a_terminate_job_batch_keeps_refusing_is_tried_at_most_five_times(stack):
    job_id, _, _ = start_job(stack, {"code": "1", "timeConstraint": 1})
    gateway = stack.batch[GeoZone.UNITED_STATES]
    gateway.fail_terminate = 100
    stack.clock.advance(2)
    for _ in range(8):
        report = stack.tick()
        assert report["skipped"] == 0  # a refused call is not a broken job
    assert len(gateway.terminate_calls) == MAX_TERMINATE_ATTEMPTS == 5
    assert stack.services.store.get_job(job_id).termination_attempts == 5


def test_reconciliation_applies_what_batch_describes_for_a_job_with_lost_events(stack):
    job_id, batch_id, started = start_job(stack, {"code": "1"})
    gateway = stack.batch[GeoZone.UNITED_STATES]
    gateway.known[batch_id] = BatchJobState(
        batch_job_id=batch_id,
        job_name=job_id,
        status="SUCCEEDED",
        status_reason="Essential container in task exited",
        created_at_ms=started,
        started_at_ms=started,
        stopped_at_ms=started + 30_000,
        exit_code=0,
        log_stream_name="s",
        attempt_count=1,
    )
    stack.clock.advance(9 * 60)
    assert stack.tick()["reconciled"] == 0  # not stale yet
    stack.clock.advance(61)
    assert stack.tick()["reconciled"] == 1
    job = stack.services.store.get_job(job_id)
    assert job.status.value == "Succeeded"
    assert job.credits_spent == Decimal("1.0000")
    assert stack.tick()["reconciled"] == 0


def test_reconciliation_of_a_still_running_job_waits_another_ten_minutes(stack):
    # start_job already tells the fake DescribeJobs the job is RUNNING.
    job_id, _, _ = start_job(stack, {"code": "1"})
    stack.clock.advance(11 * 60)
    assert stack.tick()["reconciled"] == 1
    assert stack.tick()["reconciled"] == 0
    stack.clock.advance(11 * 60)
    assert stack.tick()["reconciled"] == 1
    assert stack.services.store.get_job(job_id).status.value == "Running"


def test_a_job_batch_never_heard_of_is_terminated_without_charge(stack):
    status, job = stack.api("POST", "/jobs", body={"code": "1"})
    job_id = job["jobId"]
    stack.clock.advance(11 * 60)
    assert stack.tick()["reconciled"] == 1
    job = stack.services.store.get_job(job_id)
    assert job.status.value == "Terminated"
    assert job.status_reason == "AWS Batch has no record of the job"
    assert job.credits_spent == Decimal("0")
    assert stack.balance("dev") == Decimal("10000")


def test_running_time_past_the_time_constraint_is_not_billed(stack):
    job_id, batch_id, started = start_job(stack, {"code": "1", "timeConstraint": 100})
    # Enforcement lags (a meter tick, Batch's 60 s minimum timeout): the job stops at 130 s.
    stack.deliver(
        fail_event(job_id, batch_id, started, started + 130_000, "Job attempt duration exceeded timeout")
    )
    job = stack.services.store.get_job(job_id)
    assert job.status_reason == "TimeConstraint of 100 s reached"
    assert job.credits_spent == Decimal("1.6667")  # 100 s × 60/3600, not 130 s


# -- issue 9: one bad item never stops a tick; expired jobs are gone -------------------------------


def put_raw(item):
    boto3.client("dynamodb", region_name="us-east-1").put_item(TableName="test-jobs", Item=item)


def expire(job_id, at_epoch):
    boto3.client("dynamodb", region_name="us-east-1").update_item(
        TableName="test-jobs",
        Key={"jobId": {"S": job_id}},
        UpdateExpression="SET #t = :t",
        ExpressionAttributeNames={"#t": "ttl"},
        ExpressionAttributeValues={":t": {"N": str(at_epoch)}},
    )


def test_stub_items_in_every_index_the_meter_reads_never_stop_a_tick(stack):
    first, _, _ = start_job(stack, {"code": "1"})
    second, _, _ = start_job(stack, {"code": "1"})
    # Stubs as an unconditional update on a deleted job used to leave them (no accountId, no status).
    put_raw({"jobId": {"S": "job-stub-metered"}, "meterPartition": {"S": "metered"}})
    put_raw({"jobId": {"S": "job-stub-open"}, "openPartition": {"S": "open"}, "lastEventAt": {"S": "0"}})
    put_raw(
        {
            "jobId": {"S": "job-stub-retry"},
            "retryPartition": {"S": "retry"},
            "retryNotifications": {"SS": ["k"]},
        }
    )
    stack.clock.advance(60)

    report = stack.tick()

    assert report["skipped"] == 3
    assert (report["metered"], report["updated"]) == (2, 2)
    for job_id in (first, second):
        assert stack.services.store.get_job(job_id).credits_spent == Decimal("1")
    for stub in ("job-stub-metered", "job-stub-open", "job-stub-retry"):
        status, error = stack.api("GET", f"/jobs/{stub}")
        assert status == 404, error
        assert error["error"]["code"] == "NotFound"


def test_a_job_deleted_between_the_index_read_and_its_update_is_skipped_not_fatal(stack):
    gone, _, _ = start_job(stack, {"code": "1"})
    kept, _, _ = start_job(stack, {"code": "1"})
    store = stack.services.store
    original = store.raise_credits_spent

    def delete_then_raise(job_id, credits):
        if job_id == gone:
            boto3.client("dynamodb", region_name="us-east-1").delete_item(
                TableName="test-jobs", Key={"jobId": {"S": gone}}
            )
        return original(job_id, credits)

    store.raise_credits_spent = delete_then_raise
    stack.clock.advance(60)
    report = stack.tick()

    assert report["skipped"] == 1
    assert store.get_job(gone) is None
    assert stack.count_items("test-jobs") == 1  # nothing re-created the deleted job
    assert store.get_job(kept).credits_spent == Decimal("1")


def test_a_notification_retry_of_a_deleted_job_recreates_nothing(stack):
    job_id, batch_id, started = start_job(stack, {"code": "1"})
    stack.notifier.fail_next = 1
    stack.deliver(
        batch_event(
            job_id,
            batch_id,
            "SUCCEEDED",
            created_at=started,
            started_at=started,
            stopped_at=started + 5_000,
            exit_code=0,
        )
    )
    assert stack.services.store.get_job(job_id).retry_notifications
    boto3.client("dynamodb", region_name="us-east-1").delete_item(
        TableName="test-jobs", Key={"jobId": {"S": job_id}}
    )
    stack.notifier.fail_next = 1
    report = stack.tick()
    assert report["skipped"] == 0
    assert stack.count_items("test-jobs") == 0


def test_a_running_job_past_its_ttl_is_gone_for_every_route_the_meter_and_late_events(stack):
    job_id, batch_id, started = start_job(stack, {"code": "1"})
    other, _, _ = start_job(stack, {"code": "1"})
    expire(job_id, int(stack.clock().timestamp()) - 1)  # past its TTL; DynamoDB has not deleted it
    balance = stack.balance("dev")

    status, error = stack.api("GET", f"/jobs/{job_id}")
    assert status == 404
    assert error["error"]["code"] == "NotFound"
    _, listing = stack.api("GET", "/jobs")
    assert [j["jobId"] for j in listing["jobs"]] == [other]
    for route in ("/log", "/result", "/outputs", "/preview.png"):
        assert stack.api("GET", f"/jobs/{job_id}{route}")[0] == 404
    assert stack.api("POST", f"/jobs/{job_id}/abort")[0] == 404
    assert stack.api("DELETE", f"/jobs/{job_id}")[0] == 404

    stack.clock.advance(11 * 60)
    report = stack.tick()
    assert report["metered"] == 1  # only the other job
    assert report["reconciled"] == 1  # only the other job

    late = batch_event(
        job_id,
        batch_id,
        "SUCCEEDED",
        created_at=started,
        started_at=started,
        stopped_at=started + 600_000,
        exit_code=0,
    )
    assert stack.deliver(late) == {"applied": False}
    assert stack.balance("dev") == balance
    assert stack.services.store.list_ledger("dev", None, None)[0].kind.value == "grant"
