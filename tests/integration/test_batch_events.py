"""The batch_events Lambda on moto: status, timestamps, the one charge, notifications, replays."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from functions.domain.jobs import ms_to_datetime
from functions.domain.machine_classes import GeoZone
from tests.events import batch_event, job_lifecycle

T0 = 1_796_000_000_000  # ms since the epoch


def submit(stack, body=None, account_id="dev"):
    status, job = stack.api("POST", "/jobs", body=body or {"code": "2 + 2"}, account_id=account_id)
    assert status == 202, job
    stored = stack.services.store.get_job(job["jobId"])
    return job["jobId"], stored.batch_job_id


def ledger_items(account_id="dev"):
    client = boto3.client("dynamodb", region_name="us-east-1")
    items = client.query(
        TableName="test-ledger",
        KeyConditionExpression="accountId = :a",
        ExpressionAttributeValues={":a": {"S": account_id}},
    )["Items"]
    return [i for i in items if i["entryId"]["S"].startswith("charge#")]


def test_in_order_lifecycle_settles_once_and_notifies(stack):
    job_id, batch_id = submit(stack)
    for event in job_lifecycle(job_id, batch_id, created_at=T0, started_at=T0 + 4_000, stopped_at=T0 + 6_500):
        stack.deliver(event)
    status, job = stack.api("GET", f"/jobs/{job_id}")
    assert status == 200
    assert job["status"] == "Succeeded"
    assert job["statusReason"] is None
    assert job["exitCode"] == 0
    assert job["creditsSpent"] == Decimal("1")  # 2.5 s → 60-second minimum of Basic1x8
    assert job["startedAt"] == "2026-11-30T00:53:24Z"
    assert job["completedAt"] == "2026-11-30T00:53:26Z"
    assert stack.balance("dev") == Decimal("9999.0000")
    (entry,) = ledger_items()
    assert entry["entryId"]["S"] == f"charge#{job_id}"
    assert Decimal(entry["credits"]["N"]) == Decimal("1")
    assert Decimal(entry["balanceAfter"]["N"]) == Decimal("9999")
    sent = [(n.event, n.method, n.to) for n in stack.notifier.sent]
    assert sent == [("JobStarting", "Email", "dev@example.com"), ("JobCompleted", "Email", "dev@example.com")]
    assert job_id in stack.notifier.sent[1].subject + stack.notifier.sent[1].message
    # The usage ledger agrees.
    assert stack.services.store.list_ledger("dev", None, None)[0].credits == Decimal("1.0000")


def test_long_run_charges_ceil_seconds_at_the_class_rate(stack):
    job_id, batch_id = submit(stack, {"code": "1", "machineClass": "Memory8x64"})
    # 3600.2 s → 3601 s × 480/3600 = 480.1333… → 480.1333
    for event in job_lifecycle(job_id, batch_id, created_at=T0, started_at=T0, stopped_at=T0 + 3_600_200):
        stack.deliver(event)
    job = stack.services.store.get_job(job_id)
    assert job.credits_spent == Decimal("480.1333")
    assert stack.balance("dev") == Decimal("9519.8667")


def test_failure_reason_comes_from_the_workers_error(stack):
    job_id, batch_id = submit(stack, {"code": "1/0"})
    s3 = boto3.client("s3", region_name="us-east-1")
    messages = {
        "messages": ["ZeroDivisionError: division by zero", "Traceback ..."],
        "error": {"type": "ZeroDivisionError", "message": "division by zero", "traceback": "Traceback ..."},
    }
    s3.put_object(
        Bucket="test-data-us-east-1", Key=f"outputs/{job_id}/messages.json", Body=json.dumps(messages)
    )
    events = job_lifecycle(
        job_id,
        batch_id,
        created_at=T0,
        started_at=T0 + 1_000,
        stopped_at=T0 + 2_000,
        succeeded=False,
        exit_code=1,
    )
    for event in events:
        stack.deliver(event)
    job = stack.services.store.get_job(job_id)
    assert job.status.value == "Terminated"
    assert job.status_reason == "ZeroDivisionError: division by zero"
    assert job.exit_code == 1
    assert job.credits_spent == Decimal("1")


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (
            {
                "type": "MemoryError",
                "message": "Memory limit of 8 GiB exceeded",
                "traceback": "",
                "reason": "Memory limit of 8 GiB exceeded",
            },
            "Memory limit of 8 GiB exceeded",
        ),
        (
            {
                "type": "InvalidJobInput",
                "message": "x",
                "traceback": "",
                "reason": "The job's input was rejected: command[1] contains a NUL character",
            },
            "The job's input was rejected: command[1] contains a NUL character",
        ),
        # A blank or non-string reason is ignored: the "Type: message" line stands.
        ({"type": "ValueError", "message": "bad", "traceback": "", "reason": " "}, "ValueError: bad"),
        ({"type": "ValueError", "message": "bad", "traceback": "", "reason": 5}, "ValueError: bad"),
    ],
)
def test_failure_reason_is_the_workers_own_sentence_when_it_gives_one(stack, error, reason):
    job_id, batch_id = submit(stack, {"command": ["python3", "-c", "x = bytearray(20 * 2**30)"]})
    boto3.client("s3", region_name="us-east-1").put_object(
        Bucket="test-data-us-east-1",
        Key=f"outputs/{job_id}/messages.json",
        Body=json.dumps({"messages": [], "error": error}),
    )
    events = job_lifecycle(
        job_id,
        batch_id,
        created_at=T0,
        started_at=T0 + 1_000,
        stopped_at=T0 + 2_000,
        succeeded=False,
        exit_code=1,
    )
    for event in events:
        stack.deliver(event)
    job = stack.services.store.get_job(job_id)
    assert job.status.value == "Terminated"
    assert job.status_reason == reason


def test_terminated_before_running_costs_nothing(stack):
    job_id, batch_id = submit(stack)
    stack.api("POST", f"/jobs/{job_id}/abort")
    assert stack.batch[GeoZone.UNITED_STATES].terminations == [(batch_id, "Aborted by user")]
    stack.deliver(batch_event(job_id, batch_id, "RUNNABLE", created_at=T0))
    stack.deliver(
        batch_event(job_id, batch_id, "FAILED", created_at=T0, status_reason="Terminated by the user")
    )
    job = stack.services.store.get_job(job_id)
    assert job.status.value == "Terminated"
    assert job.status_reason == "Aborted by user"  # the service's reason wins over Batch's
    assert job.credits_spent == Decimal("0")
    assert stack.balance("dev") == Decimal("10000")
    assert ledger_items() == []
    # Aborting a final job is a no-op that returns it.
    status, again = stack.api("POST", f"/jobs/{job_id}/abort")
    assert status == 202 and again["status"] == "Terminated"
    assert len(stack.batch[GeoZone.UNITED_STATES].terminations) == 1


def test_charge_is_capped_by_the_balance_and_records_unbilled(stack):
    stack.add_account("low", "0.5", email="low@example.com")
    job_id, batch_id = submit(stack, account_id="low")
    for event in job_lifecycle(job_id, batch_id, created_at=T0, started_at=T0, stopped_at=T0 + 120_000):
        stack.deliver(event)
    assert stack.balance("low") == Decimal("0.0000")
    entry = stack.services.store.list_ledger("low", None, None)[0]
    assert (entry.credits, entry.unbilled, entry.balance_after) == (
        Decimal("0.5"),
        Decimal("1.5"),
        Decimal("0"),
    )
    assert stack.services.store.get_job(job_id).credits_spent == Decimal("0.5")


def test_retry_charges_only_the_final_attempt(stack):
    job_id, batch_id = submit(stack)
    first = {
        "container": {"exitCode": None},
        "startedAt": T0,
        "stoppedAt": T0 + 500_000,
        "statusReason": "Host EC2 (instance i-1) terminated.",
    }
    events = [
        batch_event(job_id, batch_id, "RUNNABLE", created_at=T0),
        batch_event(job_id, batch_id, "STARTING", created_at=T0),
        batch_event(job_id, batch_id, "RUNNING", created_at=T0, started_at=T0),
        batch_event(job_id, batch_id, "RUNNABLE", created_at=T0, attempts=[first]),
        batch_event(job_id, batch_id, "STARTING", created_at=T0, attempts=[first]),
        batch_event(job_id, batch_id, "RUNNING", created_at=T0, started_at=T0 + 600_000, attempts=[first]),
    ]
    second = {"container": {"exitCode": 0}, "startedAt": T0 + 600_000, "stoppedAt": T0 + 690_000}
    events.append(
        batch_event(
            job_id,
            batch_id,
            "SUCCEEDED",
            created_at=T0,
            started_at=T0 + 600_000,
            stopped_at=T0 + 690_000,
            exit_code=0,
            attempts=[first, second],
        )
    )
    for event in events:
        stack.deliver(event)
    job = stack.services.store.get_job(job_id)
    assert job.status.value == "Succeeded"
    assert [s.value for s in job.status_history] == [
        "Queued",
        "Starting",
        "Running",
        "Queued",
        "Starting",
        "Running",
        "Succeeded",
    ]
    assert job.credits_spent == Decimal("1.5")  # 90 s × 60/3600
    # A late event of the first attempt changes nothing.
    stack.deliver(batch_event(job_id, batch_id, "RUNNING", created_at=T0, started_at=T0))
    assert stack.services.store.get_job(job_id) == job


@pytest.mark.parametrize(
    "event",
    [
        {"detail-type": "EC2 Instance State-change Notification", "source": "aws.ec2", "detail": {}},
        batch_event("job-unknown", "b-1", "RUNNING", started_at=T0),
        batch_event("job-x", "b-2", "EXPLODED"),
        {**batch_event("job-x", "b-3", "RUNNING"), "detail": {"status": "RUNNING"}},
    ],
)
def test_foreign_unknown_and_malformed_events_are_ignored(stack, event):
    assert stack.deliver(event) == {"applied": False}


def test_event_for_another_batch_job_with_the_same_name_is_ignored(stack):
    job_id, batch_id = submit(stack)
    stack.deliver(batch_event(job_id, "someone-elses-batch-id", "RUNNING", started_at=T0))
    assert stack.services.store.get_job(job_id).status.value == "Queued"


def test_failed_publish_is_retried_by_the_meter_even_for_a_final_job(stack):
    job_id, batch_id = submit(stack)
    stack.clock.now = ms_to_datetime(T0)  # the events below arrive at their own times, T0 on
    stack.notifier.fail_next = 1
    # The event itself succeeds: the status is stored, the failed JobStarting stays owed.
    assert stack.deliver(batch_event(job_id, batch_id, "STARTING", created_at=T0))["status"] == "Starting"
    assert stack.notifier.sent == []
    assert stack.services.store.get_job(job_id).retry_notifications == {"JobStarting#1/Email"}
    # A tick before its backoff (1 minute after the failure) is over does not send it
    stack.tick()
    assert stack.notifier.sent == []
    # The meter's next tick (a minute later) sends it, once; ticks after that send nothing more.
    stack.clock.advance(60)
    stack.tick()
    assert [n.event for n in stack.notifier.sent] == ["JobStarting"]
    stack.tick()
    assert [n.event for n in stack.notifier.sent] == ["JobStarting"]
    job = stack.services.store.get_job(job_id)
    assert job.retry_notifications == frozenset()
    assert [(r.event, r.outcome) for r in job.notification_log] == [
        ("JobStarting", "failed"),
        ("JobStarting", "sent"),
    ]


def test_a_failed_notification_of_a_job_that_ended_is_still_sent(stack):
    job_id, batch_id = submit(stack)
    stack.clock.now = ms_to_datetime(T0)  # the events below arrive at their own times, T0 on
    stack.notifier.fail_next = 1
    stack.deliver(batch_event(job_id, batch_id, "STARTING", created_at=T0))
    # The final event's delivery, within JobStarting's backoff, sends JobCompleted only
    stack.deliver(batch_event(job_id, batch_id, "FAILED", created_at=T0, status_reason="Cancelled"))
    assert [n.event for n in stack.notifier.sent] == ["JobCompleted"]
    assert stack.services.store.get_job(job_id).retry_notifications == {"JobStarting#1/Email"}
    stack.clock.advance(60)
    stack.tick()
    stack.tick()
    assert sorted(n.event for n in stack.notifier.sent) == ["JobCompleted", "JobStarting"]
    assert stack.services.store.get_job(job_id).retry_notifications == frozenset()


def test_method_without_contact_is_skipped_not_failed(stack):
    stack.add_account("nophone", "10", email="np@example.com")
    job_id, batch_id = submit(
        stack,
        {"code": "1", "notifications": [{"events": ["JobStarting"], "methods": ["Email", "SMS"]}]},
        account_id="nophone",
    )
    stack.deliver(batch_event(job_id, batch_id, "STARTING", created_at=T0))
    assert [(n.event, n.method) for n in stack.notifier.sent] == [("JobStarting", "Email")]


def _final_state(stack, job_id, account_id="dev"):
    job = stack.services.store.get_job(job_id)
    return (
        job.status,
        job.status_reason,
        job.status_history,
        job.started_at,
        job.completed_at,
        job.exit_code,
        job.credits_spent,
        job.log_stream_name.rsplit("/", 1)[0] if job.log_stream_name else None,
        job.sent_notifications,
    )


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), succeeded=st.booleans(), run_ms=st.integers(min_value=0, max_value=7_200_000))
def test_replays_in_any_order_with_duplicates_end_like_one_in_order_delivery(stack, data, succeeded, run_ms):
    """However EventBridge delivers a job's events (duplicated, reordered), the job, the ledger and
    the balance end as after one in-order delivery: one charge, never two, no status going back."""
    stack.notifier.sent.clear()
    reference_id, reference_batch = submit(
        stack,
        {
            "code": "1",
            "notifications": [{"events": ["JobStatusChanged", "JobCompleted"], "methods": ["Email"]}],
        },
    )
    start = T0 + 3_000
    in_order = job_lifecycle(
        reference_id,
        reference_batch,
        created_at=T0,
        started_at=start,
        stopped_at=start + run_ms,
        succeeded=succeeded,
    )
    before = stack.balance("dev")
    for event in in_order:
        stack.deliver(event)
    expected = _final_state(stack, reference_id)
    charged = before - stack.balance("dev")

    job_id, batch_id = submit(
        stack,
        {
            "code": "1",
            "notifications": [{"events": ["JobStatusChanged", "JobCompleted"], "methods": ["Email"]}],
        },
    )
    events = job_lifecycle(
        job_id, batch_id, created_at=T0, started_at=start, stopped_at=start + run_ms, succeeded=succeeded
    )
    deliveries = data.draw(st.lists(st.sampled_from(events), min_size=1, max_size=12))
    deliveries = deliveries + data.draw(st.permutations(events))  # every event arrives at least once
    before = stack.balance("dev")
    for event in deliveries:
        stack.deliver(event)
    got = _final_state(stack, job_id)
    assert got == expected
    assert before - stack.balance("dev") == charged
    assert len([e for e in ledger_items() if e["jobId"]["S"] == job_id]) == 1
    # No notification sent twice: one message per (event, method, subject); the subject names the
    # status, so each status change's JobStatusChanged is its own message.
    messages = [(n.event, n.method, n.subject) for n in stack.notifier.sent if n.job_id == job_id]
    assert sorted(set(messages)) == sorted(messages), f"sent twice: {messages}"
    sent_for_job = [n.event for n in stack.notifier.sent if n.job_id == job_id]
    sent_for_reference = [n.event for n in stack.notifier.sent if n.job_id == reference_id]
    assert sorted(sent_for_job) == sorted(sent_for_reference)


def test_thresholds_crossed_by_the_final_settlement_send_no_progress_message(stack):
    # Issue 9 item 11: 150 multiples of 0.01 crossed at once, after the job ended, used to send 150
    # emails with stale amounts; a final job owes no progress message (its JobCompleted tells).
    rules = [{"events": [{"JobCreditsUsed": 0.01}], "methods": ["Email"]}]
    job_id, batch_id = submit(stack, {"code": "1", "notifications": rules})
    # 90 s of Basic1x8 settles at 1.5 credits.
    for event in job_lifecycle(job_id, batch_id, created_at=T0, started_at=T0, stopped_at=T0 + 90_000):
        stack.deliver(event)
    job = stack.services.store.get_job(job_id)
    assert (job.status.value, job.credits_spent) == ("Succeeded", Decimal("1.5"))
    for _ in range(3):
        stack.clock.advance(60)
        stack.tick()
    assert stack.notifier.sent == []
    assert stack.services.store.get_job(job_id).notification_log == ()


# -- issue 9: Batch's own reasons, infrastructure losses, times ------------------------------------

OOM = "OutOfMemoryError: Container killed due to memory usage"
THROTTLED_START = "CannotStartContainerError: Error response from daemon: ThrottlingException: Rate exceeded"
HOST = "Host EC2 (instance i-0fedcba9876543210) terminated."
ESSENTIAL = "Essential container in task exited"


def run_then(stack, job_id, batch_id, final_event):
    stack.deliver(batch_event(job_id, batch_id, "RUNNING", created_at=T0, started_at=T0))
    stack.deliver(final_event)
    status, job = stack.api("GET", f"/jobs/{job_id}")
    assert status == 200
    return job


@pytest.mark.parametrize("where", ["container", "attempt_container", "attempt_status", "status"])
def test_an_oom_reason_is_read_wherever_batch_puts_it(stack, where):
    job_id, batch_id = submit(stack)
    attempt: dict[str, Any] = {"container": {"exitCode": 1}, "startedAt": T0, "stoppedAt": T0 + 30_000}
    kwargs: dict[str, Any] = {"status_reason": ESSENTIAL}
    if where == "container":
        kwargs["container_reason"] = OOM
    elif where == "attempt_container":
        attempt["container"]["reason"] = OOM
    elif where == "attempt_status":
        attempt["statusReason"] = OOM
    else:
        kwargs["status_reason"] = OOM
    final = batch_event(
        job_id,
        batch_id,
        "FAILED",
        created_at=T0,
        started_at=T0,
        stopped_at=T0 + 30_000,
        exit_code=1,
        attempts=[attempt],
        **kwargs,
    )
    job = run_then(stack, job_id, batch_id, final)
    assert job["status"] == "Terminated"
    assert job["statusReason"] == "Memory limit of 8 GiB exceeded"
    assert OOM in job["batchReason"]
    assert job["creditsSpent"] == Decimal("1")  # the user's memory: charged (30 s → the 60 s minimum)


def test_a_container_that_could_not_start_says_so_and_keeps_batchs_words(stack):
    job_id, batch_id = submit(stack)
    stack.deliver(
        batch_event(
            job_id,
            batch_id,
            "FAILED",
            created_at=T0,
            stopped_at=T0 + 5_000,
            status_reason="Task failed to start",
            attempts=[],
            container_reason=THROTTLED_START,
        )
    )
    _, job = stack.api("GET", f"/jobs/{job_id}")
    assert job["statusReason"] == (
        "AWS Batch could not start the job's container (an AWS rate limit); its running time was not charged"
    )
    assert job["batchReason"] == f"{THROTTLED_START} | Task failed to start"
    assert job["creditsSpent"] == Decimal("0")
    status, error = stack.api("GET", f"/jobs/{job_id}/result")
    assert status == 409
    assert ".." not in error["error"]["message"]
    assert error["error"]["message"].endswith("not charged.")


def test_a_final_attempt_lost_with_its_host_after_1200_s_is_free_and_says_why(stack):
    rules = [{"events": ["JobCompleted"], "methods": ["Email"]}]
    job_id, batch_id, started = stack.start_running({"code": "1", "notifications": rules})
    stack.clock.advance(1200)
    assert stack.tick()["updated"] == 1  # the meter had shown 20 credits in flight
    assert stack.services.store.get_job(job_id).credits_spent == Decimal("20")
    attempt = {"container": {}, "startedAt": started, "stoppedAt": started + 1_200_000, "statusReason": HOST}
    stack.deliver(
        batch_event(
            job_id,
            batch_id,
            "FAILED",
            created_at=started,
            started_at=started,
            stopped_at=started + 1_200_000,
            status_reason=HOST,
            attempts=[attempt],
        )
    )
    _, job = stack.api("GET", f"/jobs/{job_id}")
    assert job["status"] == "Terminated"
    assert job["creditsSpent"] == Decimal("0")
    assert job["statusReason"] == (
        "AWS took away the machine running the job (EC2 instance i-0fedcba9876543210): the machine was shut "
        "down; its running time was not charged"
    )
    assert job["batchReason"] == "Host EC2 (instance i-0fedcba9876543210) terminated."
    assert stack.balance("dev") == Decimal("10000")
    assert ledger_items() == []
    (completed,) = [n for n in stack.notifier.sent if n.event == "JobCompleted"]
    assert "not charged" in completed.message
    assert ".." not in completed.message


def test_a_job_that_succeeded_while_a_process_was_oom_killed_stays_succeeded_with_a_warning(stack):
    job_id, batch_id = submit(stack)
    attempt = {"container": {"exitCode": 0, "reason": OOM}, "startedAt": T0, "stoppedAt": T0 + 90_000}
    final = batch_event(
        job_id,
        batch_id,
        "SUCCEEDED",
        created_at=T0,
        started_at=T0,
        stopped_at=T0 + 90_000,
        exit_code=0,
        attempts=[attempt],
        container_reason=OOM,
    )
    job = run_then(stack, job_id, batch_id, final)
    assert job["status"] == "Succeeded"
    assert job["statusReason"] is None
    assert job["creditsSpent"] == Decimal("1.5")
    (warning,) = job["warnings"]
    assert "Memory limit of 8 GiB exceeded" in warning
    (completed,) = [n for n in stack.notifier.sent if n.event == "JobCompleted"]
    assert f"Warning: {warning}" in completed.message


def test_a_plain_success_has_no_warnings_and_no_batch_reason_text_but_batchs(stack):
    job_id, batch_id = submit(stack)
    for event in job_lifecycle(job_id, batch_id, created_at=T0, started_at=T0, stopped_at=T0 + 5_000):
        stack.deliver(event)
    _, job = stack.api("GET", f"/jobs/{job_id}")
    assert job["warnings"] == []
    assert job["batchReason"] == ESSENTIAL


def test_exit_137_without_a_reason_is_reported_as_killed(stack):
    job_id, batch_id = submit(stack)
    final = batch_event(
        job_id,
        batch_id,
        "FAILED",
        created_at=T0,
        started_at=T0,
        stopped_at=T0 + 10_000,
        exit_code=137,
        status_reason=ESSENTIAL,
    )
    job = run_then(stack, job_id, batch_id, final)
    assert (
        job["statusReason"]
        == "Killed by signal SIGKILL (stopped from outside, often for using too much memory)"
    )
    assert job["exitCode"] == 137


def test_a_success_whose_stop_is_before_its_start_never_completes_before_it_started(stack):
    job_id, batch_id = submit(stack)
    final = batch_event(
        job_id,
        batch_id,
        "SUCCEEDED",
        created_at=T0,
        started_at=T0 + 60_000,
        stopped_at=T0 + 20_000,
        exit_code=0,
        time_ms=T0 + 20_000,
    )
    stack.deliver(batch_event(job_id, batch_id, "RUNNING", created_at=T0, started_at=T0 + 60_000))
    stack.deliver(final)
    _, job = stack.api("GET", f"/jobs/{job_id}")
    assert job["status"] == "Succeeded"
    assert job["completedAt"] >= job["startedAt"] == "2026-11-30T00:54:20Z"
    assert job["creditsSpent"] == Decimal("1")  # no running time known: the 60-second minimum


def test_a_failed_event_without_started_at_keeps_the_running_time_the_job_knows(stack):
    job_id, batch_id, started = stack.start_running({"code": "1"})
    stack.clock.advance(603)
    stack.tick()
    assert stack.services.store.get_job(job_id).credits_spent == Decimal("10.05")
    # FAILED with neither startedAt nor stoppedAt: the known start and the event's time.
    stack.deliver(
        batch_event(
            job_id,
            batch_id,
            "FAILED",
            created_at=started,
            exit_code=1,
            status_reason=ESSENTIAL,
            time_ms=started + 603_000,
        )
    )
    job = stack.services.store.get_job(job_id)
    assert job.status.value == "Terminated"
    assert job.credits_spent == Decimal("10.05")
    assert job.started_at == ms_to_datetime(started)
    assert job.completed_at == ms_to_datetime(started + 603_000)
    assert stack.balance("dev") == Decimal("9989.95")


def test_a_failed_event_with_a_stop_but_no_start_keeps_the_running_time_the_job_knows(stack):
    job_id, batch_id, started = stack.start_running({"code": "1"})
    stack.clock.advance(600)
    stack.tick()
    stack.deliver(
        batch_event(job_id, batch_id, "FAILED", created_at=started, stopped_at=started + 603_000, exit_code=1)
    )
    job = stack.services.store.get_job(job_id)
    assert job.credits_spent == Decimal("10.05")
    assert job.status_reason == "Exited with code 1"


def test_an_attempt_with_a_zero_start_is_not_taken_for_a_run(stack):
    job_id, batch_id = submit(stack)
    attempt = {
        "container": {"exitCode": 1},
        "startedAt": 0,
        "stoppedAt": T0 + 5_000,
        "statusReason": "Cancelled",
    }
    stack.deliver(
        batch_event(job_id, batch_id, "FAILED", created_at=T0, status_reason="Cancelled", attempts=[attempt])
    )
    job = stack.services.store.get_job(job_id)
    assert job.status.value == "Terminated"
    assert job.credits_spent == Decimal("0")
    assert job.started_at is None
    assert stack.balance("dev") == Decimal("10000")


def test_a_final_event_without_times_takes_the_last_attempts(stack):
    job_id, batch_id = submit(stack)
    attempt = {"container": {"exitCode": 0}, "startedAt": T0 + 1_000, "stoppedAt": T0 + 121_000}
    stack.deliver(batch_event(job_id, batch_id, "SUCCEEDED", created_at=T0, exit_code=0, attempts=[attempt]))
    job = stack.services.store.get_job(job_id)
    assert job.status.value == "Succeeded"
    assert job.credits_spent == Decimal("2")  # 120 s of Basic1x8
    assert job.started_at == ms_to_datetime(T0 + 1_000)
    assert job.completed_at == ms_to_datetime(T0 + 121_000)


def test_a_non_final_event_records_the_handlers_clock_as_last_event_at(stack):
    """``lastEventAt`` is when the service last heard of the job (the meter reconciles jobs quiet past
    their Batch timeout from it), so a RUNNING event must move it to the handler's clock, not leave it
    at ``submittedAt`` (mutation ``apply_job_state_change__mutmut_36``)."""
    job_id, batch_id = submit(stack)
    stack.clock.now = ms_to_datetime(T0)  # the events below arrive at their own times, T0 on
    submitted = stack.services.store.get_job(job_id)
    assert submitted is not None
    stack.clock.advance(90)
    running = job_lifecycle(job_id, batch_id, created_at=T0, started_at=T0 + 4_000, stopped_at=T0 + 6_500)[
        :-1
    ]
    for event in running:
        stack.deliver(event)
    job = stack.services.store.get_job(job_id)
    assert job is not None and job.status.value == "Running"
    assert job.last_event_at == stack.clock()
    assert job.last_event_at != submitted.submitted_at
