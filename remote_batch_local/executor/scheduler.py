"""The run queue and its scheduler thread: announce submitted jobs, start queued ones by fair share
across accounts (FIFO within a share) when enough vCPUs are free, enforce timeouts and kill deadlines."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterable
from functools import partial

from remote_batch_local.executor.constants import (
    DISK_RECHECK_SECONDS,
    MAX_WAIT_SECONDS,
    REASON_EXECUTOR_ERROR,
    REASON_TIMEOUT,
    SCHEDULER_RETRY_SECONDS,
    logger,
)
from remote_batch_local.executor.ending import JobEnding
from remote_batch_local.executor.fleet import LocalFleet
from remote_batch_local.executor.job import BatchJob
from remote_batch_local.executor.limits import signal_job
from remote_batch_local.executor.pools import ComputePools, DedicatedEnvironment
from remote_batch_local.executor.publisher import JobEvents
from remote_batch_local.executor.runner import JobRunner
from remote_batch_local.executor.state import ExecutorState
from remote_batch_local.executor.wording import plural
from remote_batch_local.state_disk import StateDisk


def _clamp_wait(seconds: float | None) -> float:
    """A ``Condition.wait`` timeout: at most ``MAX_WAIT_SECONDS`` (None, "no deadline", too)."""
    return MAX_WAIT_SECONDS if seconds is None else max(0.0, min(seconds, MAX_WAIT_SECONDS))


class _QueueView:
    """The run queue as the next job joining it sees it, kept up to date as jobs join, so that
    announcing the N children of an array costs O(N), not O(N²).

    Jobs start in FIFO order when enough vCPUs are free: the ones already queued start first if they
    fit. ``free`` is what is left of the free vCPUs after the queued jobs that fit; ``blocked`` counts
    the queued jobs from the first that does not fit on.
    """

    def __init__(self, free: int, runnable: Iterable[BatchJob]) -> None:
        self.free = free
        self.blocked = 0
        for ahead in runnable:
            self.joined(ahead.vcpus)

    def joined(self, vcpus: int) -> None:
        """Count a job of ``vcpus`` joining the end of the queue."""
        if self.blocked or vcpus > self.free:
            self.blocked += 1
        else:
            self.free -= vcpus

    def waiting_reason(self, vcpus: int, host_vcpus: int) -> str | None:
        """Why a job of ``vcpus`` joining the queue now will not start at once, or None when it will.

        Example: ``Waiting for 1 vCPU: 2 of 2 in use by other jobs, 1 job queued ahead``.
        """
        if not self.blocked and vcpus <= self.free:
            return None
        in_use = host_vcpus - self.free
        reason = f"Waiting for {plural(vcpus, 'vCPU')}: {in_use} of {host_vcpus} in use by other jobs"
        if self.blocked:
            reason += f", {plural(self.blocked, 'job')} queued ahead"
        return reason

    def announce_with(self, announce: Callable[[BatchJob, _QueueView], None]) -> Callable[[BatchJob], None]:
        """``announce`` bound to this view."""
        return lambda job: announce(job, self)


class Scheduler:
    """The ``batch-scheduler`` thread: announces submitted jobs, starts queued ones (dedicated
    computes' first, then the shared queue by fair share), enforces timeouts and kill deadlines."""

    def __init__(
        self,
        state: ExecutorState,
        events: JobEvents,
        ending: JobEnding,
        *,
        pools: ComputePools,
        fleet: LocalFleet,
        runner: JobRunner,
        host_vcpus: int,
        disk: StateDisk | None = None,
    ) -> None:
        self._state = state
        self._disk = disk
        self._held_for_disk = False
        self._events = events
        self._ending = ending
        self._pools = pools
        self._fleet = fleet
        self._runner = runner
        self._host_vcpus = host_vcpus
        self._thread = threading.Thread(target=self._schedule, name="batch-scheduler", daemon=True)

    def start(self) -> None:
        """Start the thread (it returns once the executor's state is ``stopped``)."""
        self._thread.start()

    def join(self, timeout: float) -> None:
        """Wait at most ``timeout`` seconds for the thread to return."""
        self._thread.join(timeout)

    def _schedule(self) -> None:
        """The scheduler thread. An error in one job's handling fails that job (see ``_guard_locked``);
        any other error is logged and the loop goes on: it must never stop scheduling."""
        state = self._state
        with state.cond:
            while not state.stopped:
                wait: float | None
                try:
                    view: _QueueView | None = None
                    while state.submitted:
                        view = view or _QueueView(len(state.free_slots), state.runnable)
                        self._guard_locked(
                            state.submitted.popleft(), view.announce_with(self._announce_locked)
                        )
                    held = self._held_for_disk_locked()
                    if not held:
                        # Dedicated computes first: they take free slots before the shared queue does.
                        for ready, free in self._pools.ready_locked():
                            self._guard_locked(ready, partial(self._start_locked, free=free))
                        while (job := self._next_startable_locked()) is not None:
                            state.runnable.remove(job)
                            self._guard_locked(job, self._start_locked)
                    wait = self._enforce_deadlines_locked()
                    if held:
                        wait = DISK_RECHECK_SECONDS if wait is None else min(wait, DISK_RECHECK_SECONDS)
                except Exception:
                    logger.exception("scheduler error")
                    wait = SCHEDULER_RETRY_SECONDS
                state.cond.wait(_clamp_wait(wait))

    def _held_for_disk_locked(self) -> bool:
        """Whether queued jobs are held RUNNABLE because the state disk refuses writes (a job's log
        stream and records cannot be made): as on AWS, a host that cannot start a container leaves
        its jobs queued, uncharged, and they start by themselves once the disk takes writes again.
        Asked only while a job waits in a queue (each ask is a ``statvfs``; a probe while refusing)."""
        if self._disk is None or not any(self._pools.waiting_queues_locked()):
            return False
        status = self._disk.status()
        held = status is not None
        if held != self._held_for_disk:
            if status is not None:
                logger.warning("jobs held RUNNABLE: %s", status.message)
            else:
                logger.warning("jobs start again: the state disk takes writes")
            self._held_for_disk = held
        return held

    def _guard_locked(self, job: BatchJob, action: Callable[[BatchJob], None]) -> None:
        """Run ``action(job)``; when it raises, log the error and fail the job (or, if its worker
        runs, terminate it) rather than let the error reach the scheduler loop."""
        try:
            action(job)
        except Exception as exc:
            logger.exception("job handling failed batch_job_id=%s", job.job_id)
            self._ending.abandon_locked(job, f"{REASON_EXECUTOR_ERROR}: {type(exc).__name__}: {exc}")

    def _announce_locked(self, job: BatchJob, view: _QueueView) -> None:
        """Publish PENDING and RUNNABLE (saying why it waits, when it must) and queue the job."""
        pool = self._pools.pool_of_locked(job)
        if pool is not None:
            self._announce_on_pool_locked(job, pool)
            return
        self._events.publish_locked(job, "PENDING", job.note)
        waiting = view.waiting_reason(job.vcpus, self._host_vcpus)
        reason = ". ".join(r for r in (job.note, waiting) if r) or None
        self._events.publish_locked(job, "RUNNABLE", reason)
        self._state.runnable.append(job)
        view.joined(job.vcpus)

    def _announce_on_pool_locked(self, job: BatchJob, environment: DedicatedEnvironment) -> None:
        """PENDING and RUNNABLE of a job on a dedicated compute's queue, and its place in that queue."""
        self._events.publish_locked(job, "PENDING", job.note)
        waiting = self._pools.waiting_reason_locked(job, environment)
        reason = ". ".join(r for r in (job.note, waiting) if r) or None
        self._events.publish_locked(job, "RUNNABLE", reason)
        environment.runnable.append(job)

    def _next_startable_locked(self) -> BatchJob | None:
        """The runnable job to start next, if it fits the host's free vCPUs now; else None.

        Among the jobs whose compute environment has room under its ``maxvCpus`` (a job waiting on its
        environment does not hold up other environments' jobs, as in AWS Batch), the first, in
        submission order, of the share of its job queue with the least recent vCPU usage
        (``fair_share.ShareUsage``): fair share across accounts (``functions.domain.fair_share``),
        first in, first out between shares that used nothing. Jobs without a share identifier (a
        queue without a fair-share policy) are one share of their queue.
        Only the first job of each share is weighed: the others come after it in the same queue.
        """
        best: BatchJob | None = None
        best_usage = 0.0
        weighed: set[tuple[str, str | None]] = set()
        for job in self._state.runnable:
            share = job.share_key
            if share in weighed:
                continue
            weighed.add(share)
            environment = self._fleet.environment_of(job.gateway.region, job.submission.job_queue)
            if not self._fleet.has_room(environment, job.vcpus):
                continue
            usage = self._state.shares.usage(share)
            if best is None or usage < best_usage:
                best, best_usage = job, usage
                if usage == 0:
                    break  # no share holds less, and no job of one comes sooner
        if best is None:
            return None
        return best if best.vcpus <= len(self._state.free_slots) else None

    def _start_locked(self, job: BatchJob, free: set[int] | None = None) -> None:
        """Start ``job`` on slots from ``free`` (a dedicated compute's; default: the shared pool's),
        counted against its queue's compute environment's ``maxvCpus`` (a dedicated compute's queue
        has none in the fleet: its own slots bound it)."""
        shared = free is None
        free = self._state.free_slots if free is None else free
        job.slots = tuple(sorted(free)[: job.vcpus])
        free.difference_update(job.slots)
        if shared:
            job.share_vcpus = len(job.slots)
            self._state.shares.start(job.share_key, job.share_vcpus)
        job.environment = self._fleet.environment_of(job.gateway.region, job.submission.job_queue)
        self._fleet.claim(job.environment, len(job.slots))
        self._events.publish_locked(job, "STARTING", job.note, task=job.task)
        job.runner = threading.Thread(
            target=self._runner.run, args=(job,), name=f"batch-job-{job.job_id[:8]}", daemon=True
        )
        job.runner.start()

    def _enforce_deadlines_locked(self) -> float | None:
        """Time out and kill what is due; returns seconds until the next deadline (None: none)."""
        now = time.monotonic()
        next_due: float | None = None
        for job in list(self._state.live):
            if job.process is None or job.exited:
                self._state.live.discard(job)
                continue
            try:
                due = self._enforce_job_deadlines_locked(job, now)
            except Exception as exc:
                logger.exception("deadline handling failed batch_job_id=%s", job.job_id)
                self._ending.abandon_locked(job, f"{REASON_EXECUTOR_ERROR}: {type(exc).__name__}: {exc}")
                due = now + SCHEDULER_RETRY_SECONDS
            if due is not None:
                next_due = due if next_due is None else min(next_due, due)
        return None if next_due is None else max(0.0, next_due - now)

    def _enforce_job_deadlines_locked(self, job: BatchJob, now: float) -> float | None:
        """Time out or kill one running job if due; returns its next deadline (monotonic) or None."""
        next_due: float | None = None
        if job.timeout_at is not None and job.termination_reason is None:
            if job.timeout_at <= now:
                logger.info("job timed out batch_job_id=%s seconds=%s", job.job_id, job.timeout_seconds)
                self._ending.terminate_locked(job, REASON_TIMEOUT)
            else:
                next_due = job.timeout_at
        if job.kill_at is not None and job.process is not None:
            if job.kill_at <= now:
                logger.info("worker killed batch_job_id=%s pid=%d", job.job_id, job.process.pid)
                signal_job(job, signal.SIGKILL)
                job.kill_at = None
            else:
                next_due = job.kill_at if next_due is None else min(next_due, job.kill_at)
        return next_due
