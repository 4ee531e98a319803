"""Recovery after a crash bills a job from its own start to its own stop evidence (issue 10)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from boto3.dynamodb.types import TypeSerializer

from functions.adapters.dynamodb import job_to_item
from functions.domain.jobs import Job, JobType, PayloadKind
from functions.domain.machine_classes import GeoZone
from functions.domain.notifications import AUTOMATIC_RULES
from functions.domain.status import JobStatus
from remote_batch.local.recovery import STOPPED_REASON, STOPPED_UNSTARTED_REASON, recover_unfinished_jobs
from remote_batch.local.resources import local_settings

SUBMITTED = datetime(2026, 12, 1, 1, 0, tzinfo=UTC)
CRASH = SUBMITTED + timedelta(minutes=10)
_serializer = TypeSerializer()


def _job(job_id: str, status: JobStatus, started_at: datetime | None = None) -> Job:
    return Job(
        job_id=job_id,
        account_id="dev",
        name=None,
        type=JobType.SINGLE,
        payload_kind=PayloadKind.CODE,
        machine_class="Basic1x8",
        geo_zone=GeoZone.UNITED_STATES,
        credit_constraint=None,
        time_constraint=None,
        notifications=AUTOMATIC_RULES,
        submitted_at=SUBMITTED,
        status=status,
        started_at=started_at,
        batch_job_id=f"batch-{job_id}",
    )


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
