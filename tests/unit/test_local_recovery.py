"""Recovery after a crash bills a job from its own start to its own stop evidence (issue 10)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from boto3.dynamodb.types import TypeSerializer

from functions.adapters.dynamodb import job_to_item
from functions.domain.jobs import DispatchState, Job, JobType
from functions.domain.status import JobStatus
from remote_batch_local.events import batch_job_state_change
from remote_batch_local.recovery import STOPPED_REASON, STOPPED_UNSTARTED_REASON, recover_unfinished_jobs
from remote_batch_local.resources import local_settings
from tests.builders import build_job

SUBMITTED = datetime(2026, 12, 1, 1, 0, tzinfo=UTC)
CRASH = SUBMITTED + timedelta(minutes=10)
_serializer = TypeSerializer()


def _job(job_id: str, status: JobStatus, started_at: datetime | None = None) -> Job:
    return build_job(job_id, submitted_at=SUBMITTED, status=status, started_at=started_at)


class _Table:
    """The DynamoDB client's scan paginator over fixed jobs (the filter is applied by hand)."""

    def __init__(self, jobs: list[Job]) -> None:
        self._items = [
            {k: _serializer.serialize(v) for k, v in job_to_item(job).items() if v is not None}
            for job in jobs
        ]

    def get_paginator(self, name: str) -> Any:
        assert name == "scan"
        items = self._items

        class _Paginator:
            def paginate(self, **kwargs: Any) -> list[dict[str, Any]]:
                return [{"Items": items}]

        return _Paginator()


def _event(
    job_id: str, status: str, started_ms: int | None = None, stopped_ms: int | None = None
) -> dict[str, Any]:
    detail: dict[str, Any] = {"jobName": job_id, "jobId": f"batch-{job_id}", "status": status}
    if started_ms is not None:
        detail["startedAt"] = started_ms
    if stopped_ms is not None:
        detail["stoppedAt"] = stopped_ms
    return {"id": f"{job_id}-{status}", "detail": detail}


def _ms(value: datetime) -> int:
    return int(value.timestamp() * 1000)


def test_each_unfinished_job_is_settled_from_its_own_times() -> None:
    started = SUBMITTED + timedelta(minutes=2)
    running = _job("job-running", JobStatus.RUNNING, started)
    # the executor emitted RUNNING (its own start) but the crash came before the delivery
    starting = _job("job-starting", JobStatus.STARTING)
    # the executor emitted SUCCEEDED (its own stop) but the crash came before the delivery
    finished = _job("job-finished", JobStatus.RUNNING, started)
    queued = _job("job-queued", JobStatus.QUEUED)
    own_start = _ms(SUBMITTED + timedelta(minutes=3))
    own_stop = _ms(SUBMITTED + timedelta(minutes=5))
    emitted = {
        "job-starting": [_event("job-starting", "STARTING"), _event("job-starting", "RUNNING", own_start)],
        "job-finished": [
            _event("job-finished", "RUNNING", _ms(started)),
            _event("job-finished", "SUCCEEDED", _ms(started), own_stop),
        ],
    }
    published: list[dict[str, Any]] = []
    redelivered: list[dict[str, Any]] = []

    recovered = recover_unfinished_jobs(
        _Table([running, starting, finished, queued]),
        local_settings(),
        published.append,
        CRASH,
        emitted_for=lambda job_id: emitted.get(job_id, []),
        redeliver=redelivered.extend,
    )

    assert sorted(recovered) == ["job-finished", "job-queued", "job-running", "job-starting"]
    assert redelivered == [emitted["job-finished"][1]]
    by_job = {event["detail"]["jobName"]: event["detail"] for event in published}
    assert set(by_job) == {"job-running", "job-starting", "job-queued"}
    assert (by_job["job-running"]["startedAt"], by_job["job-running"]["stoppedAt"]) == (
        _ms(started),
        _ms(CRASH),
    )
    assert by_job["job-running"]["statusReason"] == STOPPED_REASON
    assert (by_job["job-starting"]["startedAt"], by_job["job-starting"]["stoppedAt"]) == (
        own_start,
        _ms(CRASH),
    )
    assert by_job["job-starting"]["jobId"] == "batch-job-starting"
    assert by_job["job-queued"]["statusReason"] == STOPPED_UNSTARTED_REASON
    assert by_job["job-queued"].get("startedAt") is None


def test_a_job_that_started_after_the_last_alive_stamp_ran_for_no_time_we_know_of() -> None:
    started = CRASH + timedelta(milliseconds=400)
    published: list[dict[str, Any]] = []
    recover_unfinished_jobs(
        _Table([_job("job-late", JobStatus.RUNNING, started)]), local_settings(), published.append, CRASH
    )
    detail = published[0]["detail"]
    assert detail["startedAt"] == detail["stoppedAt"] == _ms(started)


def _array_event(
    batch_job_id: str,
    status: str,
    *,
    index: int | None = None,
    started_ms: int | None = None,
    stopped_ms: int | None = None,
    summary: dict[str, int] | None = None,
) -> dict[str, Any]:
    """An event as the executor emits it for an array job of 3 children named ``job-array``."""
    environment = {"REMOTE_BATCH_JOB_ID": "job-array"}
    if index is not None:
        environment.update({"AWS_BATCH_JOB_ARRAY_INDEX": str(index), "AWS_BATCH_JOB_ARRAY_SIZE": "3"})
    return batch_job_state_change(
        region="us-east-1",
        account="000000000000",
        job_id=batch_job_id,
        job_name="job-array",
        job_queue="remote-batch-Basic1x8",
        job_definition="remote-batch-worker",
        status=status,
        created_at_ms=_ms(SUBMITTED),
        vcpus=1,
        memory_mib=8192,
        environment=environment,
        started_at_ms=started_ms,
        stopped_at_ms=stopped_ms,
        array_properties={"index": index}
        if index is not None
        else {"size": 3, "statusSummary": summary or {}},
    )


def test_an_unfinished_array_settles_each_child_by_its_own_evidence_then_the_batch_parent() -> None:
    parent = dataclasses.replace(_job("job-array", JobStatus.RUNNING), type=JobType.ARRAY, array_size=3)
    started = _ms(SUBMITTED + timedelta(minutes=1))
    stopped = _ms(SUBMITTED + timedelta(minutes=2))
    child_done = _array_event("X:0", "SUCCEEDED", index=0, started_ms=started, stopped_ms=stopped)
    emitted = [
        _array_event("X:0", "RUNNABLE", index=0),
        _array_event("X", "PENDING"),
        _array_event("X:1", "RUNNABLE", index=1),
        _array_event("X:2", "RUNNABLE", index=2),
        _array_event("X:0", "RUNNING", index=0, started_ms=started),
        _array_event("X:1", "RUNNING", index=1, started_ms=started + 500),
        child_done,
    ]
    published: list[dict[str, Any]] = []
    redelivered: list[dict[str, Any]] = []

    recovered = recover_unfinished_jobs(
        _Table([parent]),
        local_settings(),
        published.append,
        CRASH,
        emitted_for=lambda job_id: emitted if job_id == "job-array" else [],
        redeliver=redelivered.extend,
    )

    assert recovered == ["job-array"]
    assert redelivered == [child_done]
    assert [(e["detail"]["jobId"], e["detail"]["status"]) for e in published] == [
        ("X:1", "FAILED"),
        ("X:2", "FAILED"),
        ("X", "FAILED"),
    ]
    ran, never_ran, batch_parent = (e["detail"] for e in published)
    assert (ran["jobName"], ran["arrayProperties"], ran["statusReason"]) == (
        "job-array",
        {"index": 1},
        STOPPED_REASON,
    )
    assert (ran["startedAt"], ran["stoppedAt"]) == (started + 500, _ms(CRASH))
    assert {"name": "AWS_BATCH_JOB_ARRAY_INDEX", "value": "1"} in ran["container"]["environment"]
    assert ":" not in ran["container"]["logStreamName"]
    assert (never_ran["statusReason"], never_ran.get("startedAt"), never_ran["attempts"]) == (
        STOPPED_UNSTARTED_REASON,
        None,
        [],
    )
    assert batch_parent["arrayProperties"] == {
        "size": 3,
        "statusSummary": {
            "SUBMITTED": 0,
            "PENDING": 0,
            "RUNNABLE": 0,
            "STARTING": 0,
            "RUNNING": 0,
            "SUCCEEDED": 1,
            "FAILED": 2,
        },
    }
    assert batch_parent["stoppedAt"] == _ms(CRASH)
    assert "startedAt" not in batch_parent


def test_an_array_whose_batch_parent_ended_before_the_crash_gets_its_own_final_events_again() -> None:
    parent = dataclasses.replace(_job("job-array", JobStatus.RUNNING), type=JobType.ARRAY, array_size=3)
    stopped = _ms(SUBMITTED + timedelta(minutes=2))
    finals = [
        _array_event(f"X:{i}", "SUCCEEDED", index=i, started_ms=stopped - 1000, stopped_ms=stopped)
        for i in range(3)
    ]
    parent_final = _array_event("X", "SUCCEEDED", stopped_ms=stopped, summary={"SUCCEEDED": 3})
    published: list[dict[str, Any]] = []
    redelivered: list[dict[str, Any]] = []

    recover_unfinished_jobs(
        _Table([parent]),
        local_settings(),
        published.append,
        CRASH,
        emitted_for=lambda job_id: [*finals, parent_final],
        redeliver=redelivered.extend,
    )

    assert published == []
    assert redelivered == [*finals, parent_final]


def test_a_one_item_span_run_as_a_plain_job_is_settled_like_a_single_job() -> None:
    parent = dataclasses.replace(_job("job-array", JobStatus.RUNNING), type=JobType.ARRAY, array_size=3)
    started = _ms(SUBMITTED + timedelta(minutes=1))
    running = batch_job_state_change(
        region="us-east-1",
        account="000000000000",
        job_id="P",
        job_name="job-array_2",
        job_queue="remote-batch-Basic1x8",
        job_definition="remote-batch-worker",
        status="RUNNING",
        created_at_ms=_ms(SUBMITTED),
        vcpus=1,
        memory_mib=8192,
        environment={"REMOTE_BATCH_JOB_ID": "job-array"},
        started_at_ms=started,
    )
    published: list[dict[str, Any]] = []

    recover_unfinished_jobs(
        _Table([parent]), local_settings(), published.append, CRASH, emitted_for=lambda job_id: [running]
    )

    [detail] = [e["detail"] for e in published]
    assert (detail["jobId"], detail["jobName"], detail["status"], detail["statusReason"]) == (
        "P",
        "job-array_2",
        "FAILED",
        STOPPED_REASON,
    )
    assert (detail["startedAt"], detail["stoppedAt"]) == (started, _ms(CRASH))
    assert "arrayProperties" not in detail
    assert detail["attempts"][0]["startedAt"] == started


def test_a_held_array_never_in_aws_batch_is_left_to_resume_and_its_emitted_spans_are_settled() -> None:
    # Rule 4 for arrays: a held array (no span in AWS Batch, nothing emitted) is not stopped; one whose
    # span the crashed executor had emitted events for gets those children settled (rule 3) even
    # though the crash cut off the span's record.
    held = dataclasses.replace(
        _job("job-held", JobStatus.QUEUED),
        type=JobType.ARRAY,
        array_size=3,
        child_status_counts={"Queued": 3},
        dispatch_state=DispatchState.HELD,
        batch_job_id=None,
    )
    cut_off = dataclasses.replace(held, job_id="job-cutoff", dispatch_state=DispatchState.ADMITTED)
    started = _ms(SUBMITTED + timedelta(minutes=1))
    child_running = _event("job-cutoff", "RUNNING", started)
    child_running["detail"].update(jobId="span-1:0", arrayProperties={"index": 0})
    child_running["detail"]["container"] = {
        "environment": [{"name": "AWS_BATCH_JOB_ARRAY_SIZE", "value": "2"}]
    }
    published: list[dict[str, Any]] = []

    recovered = recover_unfinished_jobs(
        _Table([held, cut_off]),
        local_settings(),
        published.append,
        CRASH,
        emitted_for=lambda job_id: [child_running] if job_id == "job-cutoff" else [],
    )

    assert recovered == ["job-cutoff"]
    stopped = {
        e["detail"]["jobId"]: e["detail"]["statusReason"] for e in published if "statusReason" in e["detail"]
    }
    assert stopped["span-1:0"] == STOPPED_REASON
    assert stopped["span-1:1"] == STOPPED_UNSTARTED_REASON
