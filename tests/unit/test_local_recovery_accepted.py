"""Issue 22 item 8: after a crash the local stack runs on the jobs AWS Batch had accepted, as AWS
Batch does after a host loss: what the last run's events say of each job (``prior_run``), the
service's retry rule (``batch_retries``), and that an attempt lost this way is free. Pure: no AWS."""

from __future__ import annotations

from typing import Any

import pytest

from functions.domain.batch_reasons import LOCAL_HOST_LOST_REASON
from functions.domain.batch_retries import MAX_ATTEMPTS, RETRY_STATUS_REASON, retried
from functions.domain.jobs import describe_failure, is_infrastructure_loss
from functions.domain.machine_classes import MACHINE_CLASSES
from remote_batch_local.events import BatchAttempt, batch_job_state_change, task_arn
from remote_batch_local.recovery_accepted import prior_run
from tests.builders import build_job

REGION = "us-east-1"
ACCOUNT = "000000000000"
BATCH_ID = "4c7599ae-0a82-49aa-ba5a-4727fcce14a8"
T0 = 1_764_000_000_000
CRASH = T0 + 30_000


def _event(status: str, *, started_at_ms: int | None = None, attempts: int = 0) -> dict[str, Any]:
    lost = [
        BatchAttempt(None, f"def/default/{BATCH_ID}", "arn:task", T0 + n, T0 + n + 1, LOCAL_HOST_LOST_REASON)
        for n in range(attempts)
    ]
    return batch_job_state_change(
        region=REGION,
        account=ACCOUNT,
        job_id=BATCH_ID,
        job_name="job-1",
        job_queue="q",
        job_definition="def",
        status=status,
        created_at_ms=T0,
        started_at_ms=started_at_ms,
        vcpus=1,
        memory_mib=8192,
        gpus=0,
        attempts=lost,
    )


def test_the_retry_rule_is_the_deployed_one():
    assert (MAX_ATTEMPTS, RETRY_STATUS_REASON) == (3, "Host EC2*")
    assert retried("Host EC2 (instance i-0123456789abcdef0) terminated.", 1)
    assert retried(LOCAL_HOST_LOST_REASON, 2)
    assert not retried(LOCAL_HOST_LOST_REASON, 3)  # attempts spent
    assert not retried("Essential container in task exited", 1)  # the job's own failure is final
    assert not retried(None, 1)


def test_a_job_that_sent_no_event_is_queued_again_without_attempts():
    run = prior_run([], CRASH)
    assert (run.status, run.attempts, run.end_reason) == ("SUBMITTED", (), None)


@pytest.mark.parametrize("status", ["PENDING", "RUNNABLE", "STARTING"])
def test_a_job_accepted_and_not_yet_running_runs_without_a_lost_attempt(status):
    run = prior_run([_event("PENDING"), _event(status)], CRASH)
    assert (run.status, run.attempts, run.end_reason) == (status, (), None)


def test_a_job_running_at_the_crash_lost_an_attempt_from_its_start_to_the_crash_and_runs_again():
    run = prior_run([_event("RUNNABLE"), _event("RUNNING", started_at_ms=T0 + 5_000)], CRASH)
    assert run.end_reason is None
    assert run.attempts == (
        BatchAttempt(
            exit_code=None,
            log_stream_name=f"def/default/{BATCH_ID}",
            task_arn=task_arn(REGION, ACCOUNT, BATCH_ID),
            started_at_ms=T0 + 5_000,
            stopped_at_ms=CRASH,
            status_reason=LOCAL_HOST_LOST_REASON,
        ),
    )


def test_a_lost_attempt_never_stops_before_it_started():
    run = prior_run([_event("RUNNING", started_at_ms=CRASH + 700)], CRASH)
    assert (run.attempts[-1].started_at_ms, run.attempts[-1].stopped_at_ms) == (CRASH + 700, CRASH + 700)


@pytest.mark.parametrize(("before", "ends"), [(0, False), (1, False), (2, True)])
def test_the_attempt_limit_is_the_deployed_one(before, ends):
    run = prior_run([_event("RUNNING", started_at_ms=T0, attempts=before)], CRASH)
    assert len(run.attempts) == before + 1
    assert [a.status_reason for a in run.attempts] == [LOCAL_HOST_LOST_REASON] * (before + 1)
    assert run.end_reason == (LOCAL_HOST_LOST_REASON if ends else None)


def test_a_job_whose_attempts_were_lost_to_the_crash_is_free_and_says_why():
    job = build_job()
    reasons = [LOCAL_HOST_LOST_REASON] * 3
    assert is_infrastructure_loss(job, reasons, None)
    assert describe_failure(job, MACHINE_CLASSES["Basic1x8"], reasons, None, None) == (
        "The local stack stopped while the job ran (its host was lost); its running time was not charged"
    )
