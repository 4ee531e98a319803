"""The local stack's ``Batch Job State Change`` builder, the bigger-than-host note and the events of
jobs a stopped stack left unfinished."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from functions.domain.jobs import Job
from functions.domain.machine_classes import machine_class
from functions.domain.status import JobStatus
from functions.ports import BatchSubmission
from remote_batch_local.events import (
    BatchAttempt,
    batch_job_state_change,
    job_definition_arn,
    job_definition_name,
    job_queue_arn,
    log_stream_name,
)
from remote_batch_local.executor import (
    SHUTDOWN_REASON,
    SHUTDOWN_UNSTARTED_REASON,
    host_note,
    job_memory_ceiling_mib,
)
from remote_batch_local.recovery import stopped_event
from remote_batch_local.resources import local_settings
from tests.builders import build_job

REGION = "us-east-1"
ACCOUNT = "000000000000"
JOB_ID = "4c7599ae-0a82-49aa-ba5a-4727fcce14a8"


def _event(**overrides):
    arguments: dict[str, Any] = {
        "region": REGION,
        "account": ACCOUNT,
        "job_id": JOB_ID,
        "job_name": "01JOBULID",
        "job_queue": "remote-batch-Basic1x8",
        "job_definition": "remote-batch-worker",
        "status": "RUNNABLE",
        "created_at_ms": 1_641_944_200_058,
        "vcpus": 1,
        "memory_mib": 8192,
        "environment": {"JOB_ID": "01JOBULID", "BUCKET": "b"},
        "command": ["python", "-u", "-m", "worker"],
        "time": datetime(2022, 1, 11, 23, 36, 40, 123_000, tzinfo=UTC),
    }
    arguments.update(overrides)
    return batch_job_state_change(**arguments)


def test_envelope_has_eventbridge_shape():
    envelope = _event()

    assert set(envelope) == {
        "version",
        "id",
        "detail-type",
        "source",
        "account",
        "time",
        "region",
        "resources",
        "detail",
    }
    assert envelope["version"] == "0"
    assert uuid.UUID(envelope["id"]).version == 4
    assert envelope["detail-type"] == "Batch Job State Change"
    assert envelope["source"] == "aws.batch"
    assert re.fullmatch(r"\d{12}", envelope["account"])
    assert envelope["time"] == "2022-01-11T23:36:40Z"
    assert envelope["resources"] == [f"arn:aws:batch:{REGION}:{ACCOUNT}:job/{JOB_ID}"]
    assert json.loads(json.dumps(envelope)) == envelope


def test_queued_detail_resembles_job_detail():
    detail = _event()["detail"]

    assert detail["jobArn"] == f"arn:aws:batch:{REGION}:{ACCOUNT}:job/{JOB_ID}"
    assert detail["jobName"] == "01JOBULID"
    assert detail["jobId"] == JOB_ID
    assert detail["jobQueue"] == f"arn:aws:batch:{REGION}:{ACCOUNT}:job-queue/remote-batch-Basic1x8"
    assert detail["jobDefinition"] == f"arn:aws:batch:{REGION}:{ACCOUNT}:job-definition/remote-batch-worker:1"
    assert detail["status"] == "RUNNABLE"
    assert detail["attempts"] == []
    assert detail["createdAt"] == 1_641_944_200_058
    assert "startedAt" not in detail
    assert "stoppedAt" not in detail
    assert "statusReason" not in detail
    assert "timeout" not in detail
    assert detail["dependsOn"] == []
    assert detail["parameters"] == {}
    assert detail["platformCapabilities"] == ["EC2"]
    container = detail["container"]
    assert container["environment"] == [
        {"name": "BUCKET", "value": "b"},
        {"name": "JOB_ID", "value": "01JOBULID"},
    ]
    assert container["resourceRequirements"] == [
        {"value": "1", "type": "VCPU"},
        {"value": "8192", "type": "MEMORY"},
    ]
    assert container["networkInterfaces"] == []
    assert "exitCode" not in container
    assert "logStreamName" not in container


def test_final_detail_carries_times_exit_code_and_attempt():
    stream = log_stream_name("remote-batch-worker", JOB_ID)
    attempt = BatchAttempt(
        exit_code=3,
        log_stream_name=stream,
        task_arn="arn:aws:ecs:us-east-1:000000000000:task/x/y",
        started_at_ms=1_000,
        stopped_at_ms=2_000,
        status_reason="Essential container in task exited",
    )

    detail = _event(
        status="FAILED",
        status_reason="Essential container in task exited",
        started_at_ms=1_000,
        stopped_at_ms=2_000,
        exit_code=3,
        log_stream=stream,
        attempts=[attempt],
        timeout_seconds=60,
        gpus=1,
    )["detail"]

    assert detail["statusReason"] == "Essential container in task exited"
    assert (detail["startedAt"], detail["stoppedAt"]) == (1_000, 2_000)
    assert detail["container"]["exitCode"] == 3
    assert detail["container"]["logStreamName"] == f"remote-batch-worker/default/{JOB_ID}"
    assert detail["container"]["resourceRequirements"][-1] == {"value": "1", "type": "GPU"}
    assert detail["timeout"] == {"attemptDurationSeconds": 60}
    assert detail["attempts"] == [
        {
            "container": {
                "taskArn": "arn:aws:ecs:us-east-1:000000000000:task/x/y",
                "networkInterfaces": [],
                "exitCode": 3,
                "logStreamName": stream,
            },
            "startedAt": 1_000,
            "stoppedAt": 2_000,
            "statusReason": "Essential container in task exited",
        }
    ]


@pytest.mark.parametrize(
    ("given", "arn", "name"),
    [
        ("worker", "arn:aws:batch:us-east-1:000000000000:job-definition/worker:1", "worker"),
        ("worker:7", "arn:aws:batch:us-east-1:000000000000:job-definition/worker:7", "worker"),
        (
            "arn:aws:batch:eu-central-1:1:job-definition/worker:2",
            "arn:aws:batch:eu-central-1:1:job-definition/worker:2",
            "worker",
        ),
    ],
)
def test_job_definition_forms(given, arn, name):
    assert job_definition_arn(REGION, ACCOUNT, given) == arn
    assert job_definition_name(given) == name


def test_queue_arn_is_kept():
    arn = "arn:aws:batch:us-east-1:1:job-queue/q"
    assert job_queue_arn(REGION, ACCOUNT, arn) == arn


def _submission(class_name: str) -> BatchSubmission:
    mc = machine_class(class_name)
    return BatchSubmission(
        job_name="j",
        job_queue="q",
        job_definition="d",
        vcpus=mc.vcpus,
        memory_mib=mc.memory_mib,
        gpus=mc.gpus,
        environment={},
    )


@pytest.mark.parametrize(
    ("class_name", "host_vcpus", "host_mib", "expected"),
    [
        ("Basic1x8", 2, 24_105, None),
        (
            "Memory8x64",
            2,
            24_105,
            "Machine class needs 8 vCPUs and 64 GiB; this host runs it with 2 vCPUs and 23 GiB",
        ),
        (
            "Basic4x16",
            2,
            65_536,
            "Machine class needs 4 vCPUs and 16 GiB; this host runs it with 2 vCPUs and 16 GiB",
        ),
        (
            "Basic2x8",
            1,
            4_096,
            "Machine class needs 2 vCPUs and 8 GiB; this host runs it with 1 vCPU and 4 GiB",
        ),
        (
            "GPU1xL40S",
            16,
            131_072,
            "Machine class needs 8 vCPUs, 64 GiB and 1 GPU; "
            "this host runs it on CPU only, with 8 vCPUs and 64 GiB",
        ),
        (
            "GPU4xL4",
            2,
            8_192,
            "Machine class needs 48 vCPUs, 192 GiB and 4 GPUs; "
            "this host runs it on CPU only, with 2 vCPUs and 8 GiB",
        ),
    ],
)
def test_host_note(class_name, host_vcpus, host_mib, expected):
    assert host_note(_submission(class_name), host_vcpus, host_mib) == expected


class _Memory:
    """A ``psutil.virtual_memory()`` result: bytes in total and available now."""

    def __init__(self, total_gib: float, available_gib: float) -> None:
        self.total = int(total_gib * 1024**3)
        self.available = int(available_gib * 1024**3)


@pytest.mark.parametrize(
    ("total_gib", "available_gib", "ceiling_mib", "headroom"),
    [
        (24, 17, 17 * 1024 - 3 * 1024, "3.0"),  # an eighth of 24 GiB kept for the stack
        (24, 24, 21 * 1024, "3.0"),  # never the whole host, even when all of it is free
        (4, 3, 2 * 1024, "1.0"),  # at least 1 GiB kept
        (2, 1, 256, "1.0"),  # a floor: a job always gets 256 MiB
        (23.54, 14, 14 * 1024 - 3013, "2.9"),  # this host: 24,105 MiB
    ],
)
def test_job_memory_ceiling_keeps_headroom_for_the_stack(total_gib, available_gib, ceiling_mib, headroom):
    ceiling, basis = job_memory_ceiling_mib(_Memory(total_gib, available_gib))

    assert ceiling == ceiling_mib
    assert basis == f"the host's free memory less {headroom} GiB kept for the local stack"


def test_host_note_says_why_memory_was_cut():
    basis = "the host's free memory less 3.0 GiB kept for the local stack"

    assert host_note(_submission("Memory8x64"), 2, 14 * 1024, basis) == (
        "Machine class needs 8 vCPUs and 64 GiB; this host runs it with 2 vCPUs and 14 GiB "
        "(the host's free memory less 3.0 GiB kept for the local stack)"
    )
    # a class cut for its vCPUs only says nothing about memory
    assert host_note(_submission("Memory8x64"), 2, 128 * 1024, basis) == (
        "Machine class needs 8 vCPUs and 64 GiB; this host runs it with 2 vCPUs and 64 GiB"
    )


def _unfinished_job(status: JobStatus, started_at: datetime | None) -> Job:
    return build_job(
        "job-01JDXYZ0000000000000000000",
        account_id="alice",
        notifications=(),
        submitted_at=datetime(2026, 1, 1, 12, 0, tzinfo=UTC),
        status=status,
        batch_job_id=JOB_ID,
        started_at=started_at,
    )


def test_recovery_says_a_job_that_never_started_was_stopped_before_it_ran():
    stopped_at = datetime(2026, 1, 1, 12, 5, tzinfo=UTC)

    detail = stopped_event(_unfinished_job(JobStatus.QUEUED, None), local_settings(), stopped_at)["detail"]

    assert SHUTDOWN_UNSTARTED_REASON == "Local stack stopped before the job ran"
    assert detail["status"] == "FAILED"
    assert detail["statusReason"] == "Local stack stopped before the job ran"
    assert "startedAt" not in detail
    assert detail["attempts"] == []


def test_recovery_says_a_started_job_was_stopped_while_it_ran():
    started_at = datetime(2026, 1, 1, 12, 1, tzinfo=UTC)
    stopped_at = datetime(2026, 1, 1, 12, 5, tzinfo=UTC)

    detail = stopped_event(_unfinished_job(JobStatus.RUNNING, started_at), local_settings(), stopped_at)[
        "detail"
    ]

    assert SHUTDOWN_REASON == "Local stack stopped while the job ran"
    assert detail["statusReason"] == "Local stack stopped while the job ran"
    assert detail["attempts"][0]["statusReason"] == "Local stack stopped while the job ran"
