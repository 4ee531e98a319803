"""SubmitJob's side of the executor: a job made from a submission (its resources cut to this host, its
note, its timeout raised to the minimum, its volume limits) and queued for the scheduler."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from functions.domain.errors import DependencyFailed
from functions.domain.machine_classes import machine_class_of
from functions.ports import BatchSubmission
from remote_batch_local.executor.accepted import AcceptedJob, AcceptedJobs
from remote_batch_local.executor.clock import now_ms
from remote_batch_local.executor.constants import DEFAULT_LOG_LIMIT_BYTES, DEFAULT_OUTPUT_LIMIT_BYTES, logger
from remote_batch_local.executor.job import BatchJob, JobZone
from remote_batch_local.executor.memory import host_note
from remote_batch_local.executor.settings import ExecutorSettings
from remote_batch_local.executor.state import ExecutorState
from remote_batch_local.state_disk import StateDiskUnavailable

STOPPED_MESSAGE = "The local Batch executor is stopped; restart the local stack."


class JobIntake:
    """Makes jobs from submissions, keeps each accepted one on disk (``accepted``, when given) and
    queues it (SUBMITTED) for the scheduler to announce."""

    def __init__(
        self, state: ExecutorState, settings: ExecutorSettings, accepted: AcceptedJobs | None
    ) -> None:
        self._state = state
        self._settings = settings
        self._accepted = accepted

    def keep(self, job_id: str, gateway: JobZone, submission: BatchSubmission, created_at_ms: int) -> None:
        """Keep the accepted job on disk before SubmitJob answers (``accepted.AcceptedJobs``).

        Raises
        ------
        DependencyFailed
            When the executor has been shut down, or the record could not be written (a full disk):
            nothing was accepted.
        """
        if self._state.closed:
            raise DependencyFailed(STOPPED_MESSAGE)
        if self._accepted is None:
            return
        record = AcceptedJob(job_id, gateway.region, gateway.log_group, created_at_ms, submission)
        try:
            self._accepted.record(record)
        except StateDiskUnavailable as refused:
            raise DependencyFailed(str(refused)) from refused
        except OSError as exc:
            logger.error("accepted job not recorded batch_job_id=%s error=%s", job_id, exc)
            raise DependencyFailed(
                "AWS Batch (local) could not record the job on disk; nothing was charged. Try again."
            ) from exc

    def new_job(
        self, job_id: str, gateway: JobZone, submission: BatchSubmission, created_at_ms: int
    ) -> BatchJob:
        """A job (or an array's child) as it is queued: its resources cut to this host's, its note,
        its timeout raised to the minimum, its volume limits."""
        settings = self._settings
        timeout = submission.timeout_seconds
        note = ". ".join(
            filter(
                None,
                (
                    host_note(submission, settings.vcpus, settings.memory_mib, settings.memory_basis),
                    settings.sandbox.warning,
                ),
            )
        )
        job = BatchJob(
            job_id=job_id,
            gateway=gateway,
            submission=submission,
            created_at_ms=created_at_ms,
            vcpus=max(1, min(submission.vcpus, settings.vcpus)),
            memory_mib=min(submission.memory_mib, settings.memory_mib),
            note=note or None,
            timeout_seconds=None if timeout is None else max(settings.min_timeout_seconds, timeout),
        )
        job.log_limit_bytes, job.output_limit_bytes = self._volume_limits(submission)
        return job

    def _volume_limits(self, submission: BatchSubmission) -> tuple[int, int]:
        """The job's log and output limits (bytes): its machine class's, cut to this executor's caps."""
        machine = machine_class_of(submission.vcpus, submission.memory_mib, submission.gpus)
        log_limit = machine.log_limit_bytes if machine else DEFAULT_LOG_LIMIT_BYTES
        output_limit = machine.output_limit_bytes if machine else DEFAULT_OUTPUT_LIMIT_BYTES
        if self._settings.log_limit_cap is not None:
            log_limit = min(log_limit, self._settings.log_limit_cap)
        if self._settings.output_limit_cap is not None:
            output_limit = min(output_limit, self._settings.output_limit_cap)
        return log_limit, output_limit

    def queue_locked(self, jobs: Iterable[BatchJob]) -> None:
        """Accept ``jobs``: known by id and waiting to be announced, in order.

        Raises
        ------
        DependencyFailed
            When the executor has been shut down.
        """
        state = self._state
        if state.closed:
            raise DependencyFailed(STOPPED_MESSAGE)
        for job in jobs:
            state.jobs[job.job_id] = job
            state.submitted.append(job)
        state.cond.notify_all()

    def submit(self, gateway: JobZone, submission: BatchSubmission) -> str:
        """Queue one single job; returns its Batch job id (a new UUID).

        Raises
        ------
        DependencyFailed
            When the executor has been shut down or could not keep the job on disk.
        """
        job_id = str(uuid.uuid4())
        job = self.new_job(job_id, gateway, submission, now_ms())
        self.keep(job_id, gateway, submission, job.created_at_ms)
        with self._state.cond:
            self.queue_locked([job])
        logger.info(
            "job submitted batch_job_id=%s job_name=%s vcpus=%d", job_id, submission.job_name, job.vcpus
        )
        return job_id
