"""How a job ends inside the executor: its vCPUs released, a queued job failed at once, a running
one signalled (its runner then publishes the final event), an array's children ended with it."""

from __future__ import annotations

import signal
import time

from functions.domain.machine_classes import volume_limit_text
from remote_batch_local.batch_arrays import ArrayParent
from remote_batch_local.executor.clock import now_ms
from remote_batch_local.executor.constants import FINAL_STATUSES, QUEUED_STATUSES, logger
from remote_batch_local.executor.fleet import LocalFleet
from remote_batch_local.executor.job import BatchJob
from remote_batch_local.executor.limits import signal_job
from remote_batch_local.executor.pools import ComputePools
from remote_batch_local.executor.publisher import JobEvents
from remote_batch_local.executor.settings import ExecutorSettings
from remote_batch_local.executor.state import ExecutorState


class JobEnding:
    """The one place a job leaves its slots and queues, and is failed or signalled to end."""

    def __init__(
        self,
        state: ExecutorState,
        settings: ExecutorSettings,
        events: JobEvents,
        pools: ComputePools,
        fleet: LocalFleet,
    ) -> None:
        self._state = state
        self._settings = settings
        self._events = events
        self._pools = pools
        self._fleet = fleet

    def release_locked(self, job: BatchJob) -> None:
        """Give back what ``job`` holds: its share's usage, its environment's vCPUs, its slots."""
        if job.share_vcpus:
            self._state.shares.stop(job.share_key, job.share_vcpus)
            job.share_vcpus = 0
        self._fleet.release(job.environment, len(job.slots))
        self._pools.return_slots_locked(job.slots)
        job.slots = ()
        self._state.cond.notify_all()

    def fail_unstarted_locked(self, job: BatchJob, reason: str) -> None:
        """Fail a job that has no worker (queued, or STARTING before its spawn) with ``reason``."""
        self.release_locked(job)
        self._events.publish_locked(job, "FAILED", reason, stopped_at_ms=now_ms())

    def _dequeue_locked(self, job: BatchJob) -> None:
        for queue in self._pools.waiting_queues_locked():
            if job in queue:
                queue.remove(job)

    def terminate_locked(self, job: BatchJob, reason: str) -> None:
        """TerminateJob: a queued job fails at once with ``reason``; a running one gets SIGTERM and,
        after the kill grace, SIGKILL (its runner publishes FAILED with ``reason``); a STARTING one
        without a process fails when its runner sees the reason, before it spawns."""
        if job.status in QUEUED_STATUSES:
            self._dequeue_locked(job)
            self.fail_unstarted_locked(job, reason)
        elif job.termination_reason is None and not job.exited:
            job.termination_reason = reason
            if job.process is not None:
                signal_job(job, signal.SIGTERM)
                job.kill_at = time.monotonic() + self._settings.kill_grace_seconds
            logger.info("job terminating batch_job_id=%s reason=%s", job.job_id, reason)
            self._state.cond.notify_all()

    def abandon_locked(self, job: BatchJob, reason: str) -> None:
        """End a job whose handling failed: terminate a spawned worker (its runner publishes the
        final event); fail any other job that is not final, even if that event cannot be published."""
        self._dequeue_locked(job)
        if job.status in FINAL_STATUSES:
            return
        if job.process is not None:
            self.terminate_locked(job, reason)
            return
        job.termination_reason = job.termination_reason or reason  # a runner about to spawn sees it
        try:
            self.fail_unstarted_locked(job, reason)
        except Exception:
            logger.exception("job failed without its event batch_job_id=%s", job.job_id)
            job.status = "FAILED"
            self.release_locked(job)

    def terminate_array_locked(self, parent: ArrayParent[BatchJob], reason: str) -> None:
        """TerminateJob of an array parent: every child not final is terminated with ``reason``
        (queued ones fail at once, running ones are signalled); the parent fails with ``reason``
        once they all are final. No-op once the parent is final."""
        if parent.status in FINAL_STATUSES:
            logger.info("terminate ignored batch_job_id=%s", parent.job_id)
            return
        parent.termination_reason = parent.termination_reason or reason
        waiting = {child for child in parent.children if child.status in QUEUED_STATUSES}
        for queue in self._pools.waiting_queues_locked():  # at once, not one search per child
            kept = [job for job in queue if job not in waiting]
            if len(kept) != len(queue):
                queue.clear()
                queue.extend(kept)
        for child in parent.children:
            if child.status not in FINAL_STATUSES:
                self.terminate_locked(child, reason)
        logger.info("array job terminating batch_job_id=%s reason=%s", parent.job_id, reason)

    def revoke_array_credentials(self, parent: ArrayParent[BatchJob]) -> None:
        """Revoke the credentials an array's children shared, once the array is final (every child's
        worker is gone then); only the first caller does. Takes the lock itself."""
        with self._state.cond:
            if parent.status not in FINAL_STATUSES or parent.credentials_revoked:
                return
            parent.credentials_revoked = True
            issued = parent.credentials is not None
        if issued and self._settings.credentials is not None:
            self._settings.credentials.revoke(parent.job_id)

    def over_volume_limit(self, job: BatchJob, what: str, limit_bytes: int | None) -> None:
        """Terminate ``job``: its ``what`` (``Log``, ``Output``) volume passed ``limit_bytes``
        (``Log limit of 1 GiB exceeded``). Takes the lock itself."""
        reason = f"{what} limit of {volume_limit_text(limit_bytes or 0)} exceeded"
        logger.info("job over its limit batch_job_id=%s reason=%s", job.job_id, reason)
        with self._state.cond:
            if job.status not in FINAL_STATUSES:
                self.terminate_locked(job, reason)
