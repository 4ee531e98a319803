"""The executor's state and the steps every part takes under its lock: publish an event, release a
job's vCPUs, terminate or abandon a job."""

from __future__ import annotations

import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from remote_batch_local.batch_arrays import ArrayParent, child_environment
from remote_batch_local.events import (
    batch_job_state_change,
)
from remote_batch_local.executor.constants import (
    FINAL_STATUSES,
    QUEUED_STATUSES,
    CredentialIssuer,
    EventPublisher,
    _now_ms,
    logger,
)
from remote_batch_local.executor.fair_share import ShareUsage
from remote_batch_local.executor.job import _Job
from remote_batch_local.executor.limits import _signal_job
from remote_batch_local.sandbox import (
    ProcessRegistry,
    Sandbox,
)

if TYPE_CHECKING:
    from remote_batch_local.executor.fleet import LocalFleet
    from remote_batch_local.executor.gateway import LocalBatchGateway
    from remote_batch_local.job_pythons import LocalPythons


class ExecutorCore:
    """The executor's state (set by ``LocalBatchExecutor.__init__``, guarded by ``_cond``) and the
    locked steps the scheduler, the runners and the public API share."""

    vcpus: int
    memory_mib: int
    sandbox: Sandbox
    account: str
    _memory_basis: str | None
    _registry: ProcessRegistry | None
    _credentials: CredentialIssuer | None
    _command: list[str]
    _import_root: Path
    _worker_environment: dict[str, str]
    _pythons: LocalPythons
    _environment_builds: Path | None
    _min_timeout_seconds: int
    _kill_grace_seconds: float
    _log_limit_cap: int | None
    _output_limit_cap: int | None
    _process_limit: int
    _bus: EventPublisher
    _logs_client: Callable[[str], Any]
    _cpu_of_slot: list[int]
    _free_slots: set[int]
    fleet: LocalFleet
    _cond: threading.Condition
    _jobs: dict[str, _Job]
    _arrays: dict[str, ArrayParent[_Job]]
    # Jobs whose worker was spawned and has not exited (the scheduler's deadlines are theirs).
    _live: set[_Job]
    _submitted: deque[_Job]
    _runnable: deque[_Job]
    # Each (job queue, share identifier)'s recent vCPU usage on the shared pool: the fair-share order.
    _shares: ShareUsage
    _gateways: dict[tuple[str, str], LocalBatchGateway]
    _closed: bool
    _stopped: bool
    _scheduler: threading.Thread
    _process_counter: threading.Thread

    def _publish_locked(self, job: _Job, status: str, reason: str | None = None, **extra: Any) -> None:
        parent = job.array
        if parent is not None:
            parent.child_moved(job.status, status, extra.get("stopped_at_ms"))
        job.status = status
        sub = job.submission
        environment = sub.environment
        if parent is not None and job.index is not None:
            environment = child_environment(sub.environment, job.index, parent.size)
        envelope = batch_job_state_change(
            region=job.gateway.region,
            account=self.account,
            job_id=job.job_id,
            job_name=sub.job_name,
            job_queue=sub.job_queue,
            job_definition=sub.job_definition,
            status=status,
            status_reason=reason,
            created_at_ms=job.created_at_ms,
            started_at_ms=job.started_at_ms,
            vcpus=sub.vcpus,
            memory_mib=sub.memory_mib,
            gpus=sub.gpus,
            environment=environment,
            command=self._command,
            attempts=job.attempts,
            array_properties=None if job.index is None else {"index": job.index},
            timeout_seconds=job.timeout_seconds,
            tags=sub.tags,
            time=datetime.now(UTC),
            **extra,
        )
        job.last_detail = envelope["detail"]
        self._bus.publish(envelope)
        log = logger.info if parent is None else logger.debug  # an array's children: its own lines
        log("job %s batch_job_id=%s job_name=%s", status.lower(), job.job_id, sub.job_name)
        if parent is not None:
            self._advance_parent_locked(parent)

    def _advance_parent_locked(self, parent: ArrayParent[_Job]) -> None:
        """Publish an array parent's event when its children moved it (PENDING, or its outcome)."""
        status = parent.next_status()
        if status is None:
            return
        parent.status = status
        self._bus.publish(self._parent_envelope_locked(parent))
        logger.info("array job %s batch_job_id=%s", status.lower(), parent.job_id)

    def _parent_envelope_locked(self, parent: ArrayParent[_Job]) -> dict[str, Any]:
        """An array parent's event as of now: its status, ``arrayProperties`` (size, ``statusSummary``),
        the submission's queue, definition, resources, environment and tags; no timeout (AWS: "the
        parent array job does not have a timeout"), no attempts; once final, ``stoppedAt`` (its last
        child's stop) and, after a TerminateJob of it, that reason."""
        gateway, sub = parent.context
        final = parent.status in FINAL_STATUSES
        return batch_job_state_change(
            region=gateway.region,
            account=self.account,
            job_id=parent.job_id,
            job_name=sub.job_name,
            job_queue=sub.job_queue,
            job_definition=sub.job_definition,
            status=parent.status,
            status_reason=parent.termination_reason if parent.status == "FAILED" else None,
            created_at_ms=parent.created_at_ms,
            stopped_at_ms=(parent.stopped_at_ms or _now_ms()) if final else None,
            vcpus=sub.vcpus,
            memory_mib=sub.memory_mib,
            gpus=sub.gpus,
            environment=sub.environment,
            command=self._command,
            array_properties=parent.array_properties(),
            tags=sub.tags,
            time=datetime.now(UTC),
        )

    def _revoke_array_credentials(self, parent: ArrayParent[_Job]) -> None:
        """Revoke the credentials an array's children shared, once the array is final (every child's
        worker is gone then); only the first caller does."""
        with self._cond:
            if parent.status not in FINAL_STATUSES or parent.credentials_revoked:
                return
            parent.credentials_revoked = True
            issued = parent.credentials is not None
        if issued and self._credentials is not None:
            self._credentials.revoke(parent.job_id)

    def _fail_unstarted_locked(self, job: _Job, reason: str) -> None:
        self._release_locked(job)
        self._publish_locked(job, "FAILED", reason, stopped_at_ms=_now_ms())

    def _release_locked(self, job: _Job) -> None:
        if job.share_vcpus:
            self._shares.stop(job.share_key, job.share_vcpus)
            job.share_vcpus = 0
        self.fleet.release(job.environment, len(job.slots))
        self._return_slots_locked(job.slots)
        job.slots = ()
        self._cond.notify_all()

    def _return_slots_locked(self, slots: Iterable[int]) -> None:
        """Give a job's vCPU slots back (to the shared pool; ``ComputePools`` routes a dedicated
        compute's own back to it)."""
        self._free_slots.update(slots)

    def _queues_locked(self) -> Iterable[deque[_Job]]:
        """Every queue a job may wait in (the shared ones; ``ComputePools`` adds the dedicated ones)."""
        return (self._submitted, self._runnable)

    def _terminate_locked(self, job: _Job, reason: str) -> None:
        if job.status in QUEUED_STATUSES:
            for queue in self._queues_locked():
                if job in queue:
                    queue.remove(job)
            self._fail_unstarted_locked(job, reason)
        elif job.termination_reason is None and not job.exited:
            # STARTING without a process: the runner sees the reason before it spawns.
            job.termination_reason = reason
            if job.process is not None:
                _signal_job(job, signal.SIGTERM)
                job.kill_at = time.monotonic() + self._kill_grace_seconds
            logger.info("job terminating batch_job_id=%s reason=%s", job.job_id, reason)
            self._cond.notify_all()

    def _abandon_locked(self, job: _Job, reason: str) -> None:
        """End a job whose handling failed: terminate a spawned worker (its runner publishes the
        final event); fail any other job that is not final, even if that event cannot be published."""
        for queue in self._queues_locked():
            if job in queue:
                queue.remove(job)
        if job.status in FINAL_STATUSES:
            return
        if job.process is not None:
            self._terminate_locked(job, reason)
            return
        job.termination_reason = job.termination_reason or reason  # a runner about to spawn sees it
        try:
            self._fail_unstarted_locked(job, reason)
        except Exception:
            logger.exception("job failed without its event batch_job_id=%s", job.job_id)
            job.status = "FAILED"
            self._release_locked(job)
