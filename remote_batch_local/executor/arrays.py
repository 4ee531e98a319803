"""AWS Batch array jobs in the executor: SubmitJob with ``arrayProperties.size`` and ListJobs of an
array's children. The rules and the parent's bookkeeping are in ``remote_batch_local.batch_arrays``;
the children are jobs like any other (``BatchJob`` with ``array`` and ``index``), run by the scheduler
and the runners; the parent's events come from ``publisher``, its TerminateJob from ``ending``."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from functions.ports import BatchSubmission
from remote_batch_local.batch_arrays import ArrayParent, check_array_size, child_id, job_summary
from remote_batch_local.executor.clock import now_ms
from remote_batch_local.executor.constants import logger
from remote_batch_local.executor.intake import JobIntake
from remote_batch_local.executor.job import BatchJob, JobZone
from remote_batch_local.executor.state import ExecutorState


class ArrayJobs:
    """Submits array jobs and lists their children."""

    def __init__(self, state: ExecutorState, intake: JobIntake) -> None:
        self._state = state
        self._intake = intake

    def submit(self, gateway: JobZone, submission: BatchSubmission, size: int) -> str:
        """Queue an array job of ``size`` children ``<id>:0`` … in index order; returns its id.

        Raises ``DependencyFailed`` (cause: AWS Batch's ``ClientException``) for a size AWS Batch
        refuses, when the executor has been shut down or could not keep the job on disk.
        """
        check_array_size(size)
        parent_id = str(uuid.uuid4())
        created_at_ms = now_ms()
        parent: ArrayParent[BatchJob] = ArrayParent(
            parent_id, size, created_at_ms, context=(gateway, submission)
        )
        template = self._intake.new_job(parent_id, gateway, submission, created_at_ms)
        parent.children = [
            dataclasses.replace(template, job_id=child_id(parent_id, i), array=parent, index=i, attempts=[])
            for i in range(size)
        ]
        self._intake.keep(parent_id, gateway, submission, created_at_ms)
        with self._state.cond:
            self._intake.queue_locked(parent.children)
            self._state.arrays[parent_id] = parent
        logger.info(
            "array job submitted batch_job_id=%s job_name=%s size=%d vcpus=%d",
            parent_id,
            submission.job_name,
            size,
            template.vcpus,
        )
        return parent_id

    def list_jobs(self, array_job_id: str, job_status: str | None = None) -> list[dict[str, Any]]:
        """ListJobs with ``arrayJobId``: the ``JobSummary`` of each child in ``job_status`` (AWS: only
        RUNNING ones when no status is given), in index order; [] for an id that is no array job."""
        wanted = job_status or "RUNNING"
        with self._state.cond:
            parent = self._state.arrays.get(array_job_id)
            children = [] if parent is None else [c for c in parent.children if c.status == wanted]
            return [job_summary(child.last_detail, child.job_id, child.status) for child in children]
