"""AWS Batch array jobs in the executor: SubmitJob with ``arrayProperties.size``, TerminateJob of the
parent, ListJobs of its children. The rules and the parent's bookkeeping are in
``remote_batch_local.batch_arrays``; the children are jobs like any other (``_Job`` with ``array``
and ``index``), run by the scheduler and the runners; the parent's events come from ``core``."""

from __future__ import annotations

import dataclasses
import uuid
from typing import TYPE_CHECKING, Any

from functions.domain.errors import DependencyFailed
from functions.domain.machine_classes import machine_class_of
from functions.ports import BatchSubmission
from remote_batch_local.batch_arrays import ArrayParent, check_array_size, child_id, job_summary
from remote_batch_local.executor.constants import (
    DEFAULT_LOG_LIMIT_BYTES,
    DEFAULT_OUTPUT_LIMIT_BYTES,
    FINAL_STATUSES,
    QUEUED_STATUSES,
    _now_ms,
    logger,
)
from remote_batch_local.executor.job import _Job
from remote_batch_local.executor.memory import host_note
from remote_batch_local.executor.scheduler import Scheduler

if TYPE_CHECKING:
    from remote_batch_local.executor.gateway import LocalBatchGateway


class ArrayJobs(Scheduler):
    """Array jobs' submit, termination and listing, and how any job is made before it queues."""

    def _new_job(
        self, job_id: str, gateway: LocalBatchGateway, submission: BatchSubmission, created_at_ms: int
    ) -> _Job:
        """A job (or an array's child) as it is queued: its resources cut to this host's, its note,
        its timeout raised to the minimum, its volume limits."""
        timeout = submission.timeout_seconds
        note = ". ".join(
            filter(
                None,
                (
                    host_note(submission, self.vcpus, self.memory_mib, self._memory_basis),
                    self.sandbox.warning,
                ),
            )
        )
        job = _Job(
            job_id=job_id,
            gateway=gateway,
            submission=submission,
            created_at_ms=created_at_ms,
            vcpus=max(1, min(submission.vcpus, self.vcpus)),
            memory_mib=min(submission.memory_mib, self.memory_mib),
            note=note or None,
            timeout_seconds=None if timeout is None else max(self._min_timeout_seconds, timeout),
        )
        job.log_limit_bytes, job.output_limit_bytes = self._volume_limits(submission)
        return job

    def _volume_limits(self, submission: BatchSubmission) -> tuple[int, int]:
        """The job's log and output limits (bytes): its machine class's, cut to this executor's caps."""
        machine = machine_class_of(submission.vcpus, submission.memory_mib, submission.gpus)
        log_limit = machine.log_limit_bytes if machine else DEFAULT_LOG_LIMIT_BYTES
        output_limit = machine.output_limit_bytes if machine else DEFAULT_OUTPUT_LIMIT_BYTES
        if self._log_limit_cap is not None:
            log_limit = min(log_limit, self._log_limit_cap)
        if self._output_limit_cap is not None:
            output_limit = min(output_limit, self._output_limit_cap)
        return log_limit, output_limit

    def _submit_array(self, gateway: LocalBatchGateway, submission: BatchSubmission, size: int) -> str:
        """Queue an array job of ``size`` children ``<id>:0`` … in index order; returns its id.

        Raises ``DependencyFailed`` (cause: AWS Batch's ``ClientException``) for a size AWS Batch
        refuses, and when the executor has been shut down.
        """
        check_array_size(size)
        parent_id = str(uuid.uuid4())
        created_at_ms = _now_ms()
        parent: ArrayParent[_Job] = ArrayParent(parent_id, size, created_at_ms, context=(gateway, submission))
        template = self._new_job(parent_id, gateway, submission, created_at_ms)
        parent.children = [
            dataclasses.replace(template, job_id=child_id(parent_id, i), array=parent, index=i, attempts=[])
            for i in range(size)
        ]
        with self._cond:
            if self._closed:
                raise DependencyFailed("The local Batch executor is stopped; restart the local stack.")
            self._arrays[parent_id] = parent
            for child in parent.children:
                self._jobs[child.job_id] = child
            self._submitted.extend(parent.children)
            self._cond.notify_all()
        logger.info(
            "array job submitted batch_job_id=%s job_name=%s size=%d vcpus=%d",
            parent_id,
            submission.job_name,
            size,
            template.vcpus,
        )
        return parent_id

    def _terminate_array_locked(self, parent: ArrayParent[_Job], reason: str) -> None:
        """TerminateJob of an array parent: every child not final is terminated with ``reason``
        (queued ones fail at once, running ones are signalled); the parent fails with ``reason``
        once they all are final. No-op once the parent is final."""
        if parent.status in FINAL_STATUSES:
            logger.info("terminate ignored batch_job_id=%s", parent.job_id)
            return
        parent.termination_reason = parent.termination_reason or reason
        waiting = {child for child in parent.children if child.status in QUEUED_STATUSES}
        for queue in self._queues_locked():  # at once, not one search per child
            kept = [job for job in queue if job not in waiting]
            if len(kept) != len(queue):
                queue.clear()
                queue.extend(kept)
        for child in parent.children:
            if child.status not in FINAL_STATUSES:
                self._terminate_locked(child, reason)
        logger.info("array job terminating batch_job_id=%s reason=%s", parent.job_id, reason)

    def list_jobs(self, array_job_id: str, job_status: str | None = None) -> list[dict[str, Any]]:
        """ListJobs with ``arrayJobId``: the ``JobSummary`` of each child in ``job_status`` (AWS: only
        RUNNING ones when no status is given), in index order; [] for an id that is no array job."""
        wanted = job_status or "RUNNING"
        with self._cond:
            parent = self._arrays.get(array_job_id)
            children = [] if parent is None else [c for c in parent.children if c.status == wanted]
            return [job_summary(child.last_detail, child.job_id, child.status) for child in children]
