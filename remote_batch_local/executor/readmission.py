"""Jobs accepted before a crash, taken back by the new executor: what AWS Batch does with the jobs it
holds when a host goes away.

Each job keeps its Batch job id, its submission and ``createdAt``, and the attempts its events
reported; what the last run's events say of it (``PriorRun``, read by
``remote_batch_local.recovery_accepted``) decides the rest: a job (or array child) that had ended stays
as it ended, one whose attempts are spent fails at once with the reason, any other is queued again and
runs as its next attempt (``AWS_BATCH_JOB_ATTEMPT``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from remote_batch_local.batch_arrays import ArrayParent, child_id
from remote_batch_local.events import BatchAttempt
from remote_batch_local.executor.accepted import AcceptedJob
from remote_batch_local.executor.clock import now_ms
from remote_batch_local.executor.constants import FINAL_STATUSES, logger
from remote_batch_local.executor.intake import JobIntake
from remote_batch_local.executor.job import BatchJob, JobZone
from remote_batch_local.executor.publisher import JobEvents
from remote_batch_local.executor.state import ExecutorState


@dataclass(frozen=True)
class PriorRun:
    """What the last run's events say of one job or array child.

    Attributes
    ----------
    status : str
        The last status its events reached (SUBMITTED: it sent none).
    attempts : tuple[BatchAttempt, ...]
        Its ended attempts, oldest first, an attempt lost to the crash included.
    detail : Mapping[str, Any] | None
        Its last event's ``detail`` (what DescribeJobs answers for one that had ended).
    end_reason : str | None
        Set when it must not run again (its attempts are spent): it fails at once with this reason.
    """

    status: str = "SUBMITTED"
    attempts: tuple[BatchAttempt, ...] = ()
    detail: Mapping[str, Any] | None = None
    end_reason: str | None = None


class Readmission:
    """Takes back accepted jobs after a crash (see the module docstring)."""

    def __init__(self, state: ExecutorState, intake: JobIntake, events: JobEvents) -> None:
        self._state = state
        self._intake = intake
        self._events = events

    def readmit(self, gateway: JobZone, accepted: AcceptedJob, prior: Mapping[str, PriorRun]) -> None:
        """Take back ``accepted`` (a single job or an array job) in ``gateway``'s zone; ``prior`` by Batch
        job id (the job's own, or each child's ``<id>:<index>``; a missing one sent no event).

        Raises
        ------
        DependencyFailed
            When the executor has been shut down.
        """
        submission = accepted.submission
        template = self._intake.new_job(accepted.job_id, gateway, submission, accepted.created_at_ms)
        with self._state.cond:
            if submission.array_size is None:
                self._readmit_locked([(template, prior.get(accepted.job_id, PriorRun()))], None)
            else:
                size = submission.array_size
                parent: ArrayParent[BatchJob] = ArrayParent(
                    accepted.job_id, size, accepted.created_at_ms, context=(gateway, submission)
                )
                parent.children = [
                    dataclasses.replace(
                        template, job_id=child_id(accepted.job_id, i), array=parent, index=i, attempts=[]
                    )
                    for i in range(size)
                ]
                self._state.arrays[parent.job_id] = parent
                runs = [(child, prior.get(child.job_id, PriorRun())) for child in parent.children]
                self._readmit_locked(runs, parent)
        logger.info(
            "accepted job taken back batch_job_id=%s job_name=%s array_size=%s",
            accepted.job_id,
            submission.job_name,
            submission.array_size,
        )

    def _readmit_locked(
        self, runs: list[tuple[BatchJob, PriorRun]], parent: ArrayParent[BatchJob] | None
    ) -> None:
        queued: list[BatchJob] = []
        spent: list[tuple[BatchJob, str]] = []
        for job, run in runs:
            job.attempts = list(run.attempts)
            job.attempt_number = len(job.attempts) + 1
            if run.status in FINAL_STATUSES:
                # As it ended: no event, no run (its final event is the last run's).
                if parent is not None:
                    stopped = run.detail.get("stoppedAt") if run.detail is not None else None
                    parent.child_moved(job.status, run.status, stopped if isinstance(stopped, int) else None)
                job.status = run.status
                job.last_detail = dict(run.detail) if run.detail is not None else None
                self._state.jobs[job.job_id] = job
            elif run.end_reason is not None:
                spent.append((job, run.end_reason))
            else:
                queued.append(job)
        self._intake.queue_locked(queued)
        for job, reason in spent:
            self._state.jobs[job.job_id] = job
            last = job.attempts[-1] if job.attempts else None
            job.started_at_ms = last.started_at_ms if last is not None else None
            self._events.publish_locked(
                job,
                "FAILED",
                reason,
                stopped_at_ms=last.stopped_at_ms if last is not None else now_ms(),
                log_stream=job.log_stream,
                task=job.task,
            )
        if parent is not None:
            # Every child may have ended before the crash, the parent's own final event cut by it.
            self._events.advance_parent_locked(parent)
