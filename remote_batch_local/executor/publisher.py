"""The executor's ``Batch Job State Change`` events: a job's, and its array parent's when a child
moved it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from remote_batch_local.batch_arrays import ArrayParent, child_environment
from remote_batch_local.events import batch_job_state_change
from remote_batch_local.executor.clock import now_ms
from remote_batch_local.executor.constants import FINAL_STATUSES, logger
from remote_batch_local.executor.job import BatchJob
from remote_batch_local.executor.ports import EventPublisher
from remote_batch_local.executor.settings import ExecutorSettings


class JobEvents:
    """Publishes each status a job enters, once, in order, as AWS Batch's event (call under the
    state's lock: the order of the bus is the order of the transitions).

    Parameters
    ----------
    bus : EventPublisher
        Receives every envelope.
    settings : ExecutorSettings
        The account and the container command the events carry.
    """

    def __init__(self, bus: EventPublisher, settings: ExecutorSettings) -> None:
        self._bus = bus
        self._account = settings.account
        self._command = list(settings.command)

    def publish_locked(self, job: BatchJob, status: str, reason: str | None = None, **extra: Any) -> None:
        """Move ``job`` to ``status`` and publish its event (``extra``: ``batch_job_state_change``'s
        keywords, e.g. ``stopped_at_ms``, ``exit_code``, ``log_stream``, ``task``); an array child's
        parent publishes its own when this moves it."""
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
            account=self._account,
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
            self.advance_parent_locked(parent)

    def advance_parent_locked(self, parent: ArrayParent[BatchJob]) -> None:
        """Publish an array parent's event when its children moved it (PENDING, or its outcome)."""
        status = parent.next_status()
        if status is None:
            return
        parent.status = status
        self._bus.publish(self.parent_envelope_locked(parent))
        logger.info("array job %s batch_job_id=%s", status.lower(), parent.job_id)

    def parent_envelope_locked(self, parent: ArrayParent[BatchJob]) -> dict[str, Any]:
        """An array parent's event as of now: its status, ``arrayProperties`` (size, ``statusSummary``),
        the submission's queue, definition, resources, environment and tags; no timeout (AWS: "the
        parent array job does not have a timeout"), no attempts; once final, ``stoppedAt`` (its last
        child's stop) and, after a TerminateJob of it, that reason."""
        gateway, sub = parent.context
        final = parent.status in FINAL_STATUSES
        return batch_job_state_change(
            region=gateway.region,
            account=self._account,
            job_id=parent.job_id,
            job_name=sub.job_name,
            job_queue=sub.job_queue,
            job_definition=sub.job_definition,
            status=parent.status,
            status_reason=parent.termination_reason if parent.status == "FAILED" else None,
            created_at_ms=parent.created_at_ms,
            stopped_at_ms=(parent.stopped_at_ms or now_ms()) if final else None,
            vcpus=sub.vcpus,
            memory_mib=sub.memory_mib,
            gpus=sub.gpus,
            environment=sub.environment,
            command=self._command,
            array_properties=parent.array_properties(),
            tags=sub.tags,
            time=datetime.now(UTC),
        )
