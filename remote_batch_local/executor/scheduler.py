"""The run queue and its scheduler thread: announce submitted jobs, start queued ones by fair share
across accounts (FIFO within a share) when enough vCPUs are free, enforce timeouts and kill deadlines."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterable
from functools import partial

from remote_batch_local.executor.computes import ComputePools
from remote_batch_local.executor.constants import (
    REASON_EXECUTOR_ERROR,
    REASON_TIMEOUT,
    SCHEDULER_RETRY_SECONDS,
    _clamp_wait,
    _plural,
    logger,
)
from remote_batch_local.executor.job import _Job
from remote_batch_local.executor.limits import _signal_job
from remote_batch_local.executor.runner import JobRunner


class _QueueView:
    """The run queue as the next job joining it sees it, kept up to date as jobs join, so that
    announcing the N children of an array costs O(N), not O(N²).

    Jobs start in FIFO order when enough vCPUs are free: the ones already queued start first if they
    fit. ``free`` is what is left of the free vCPUs after the queued jobs that fit; ``blocked`` counts
    the queued jobs from the first that does not fit on.
    """

    def __init__(self, free: int, runnable: Iterable[_Job]) -> None:
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
        reason = f"Waiting for {_plural(vcpus, 'vCPU')}: {in_use} of {host_vcpus} in use by other jobs"
        if self.blocked:
            reason += f", {_plural(self.blocked, 'job')} queued ahead"
        return reason

    def announce_with(self, announce: Callable[[_Job, _QueueView], None]) -> Callable[[_Job], None]:
        """``announce`` bound to this view."""
        return lambda job: announce(job, self)


class Scheduler(ComputePools, JobRunner):
    """The scheduler thread's loop and the queue it keeps."""

    def _schedule(self) -> None:
        """The scheduler thread. An error in one job's handling fails that job (see ``_guard_locked``);
        any other error is logged and the loop goes on: it must never stop scheduling."""
        with self._cond:
            while not self._stopped:
                wait: float | None
                try:
                    view: _QueueView | None = None
                    while self._submitted:
                        view = view or _QueueView(len(self._free_slots), self._runnable)
                        self._guard_locked(
                            self._submitted.popleft(), view.announce_with(self._announce_locked)
                        )
                    # Dedicated computes first: they take free slots before the shared queue does.
                    for ready, free in self._ready_on_pools_locked():
                        self._guard_locked(ready, partial(self._start_locked, free=free))
                    while (job := self._next_startable_locked()) is not None:
                        self._runnable.remove(job)
                        self._guard_locked(job, self._start_locked)
                    wait = self._enforce_deadlines_locked()
                except Exception:
                    logger.exception("scheduler error")
                    wait = SCHEDULER_RETRY_SECONDS
                self._cond.wait(_clamp_wait(wait))

    def _guard_locked(self, job: _Job, action: Callable[[_Job], None]) -> None:
        """Run ``action(job)``; when it raises, log the error and fail the job (or, if its worker
        runs, terminate it) rather than let the error reach the scheduler loop."""
        try:
            action(job)
        except Exception as exc:
            logger.exception("job handling failed batch_job_id=%s", job.job_id)
            self._abandon_locked(job, f"{REASON_EXECUTOR_ERROR}: {type(exc).__name__}: {exc}")

    def _announce_locked(self, job: _Job, view: _QueueView) -> None:
        """Publish PENDING and RUNNABLE (saying why it waits, when it must) and queue the job."""
        pool = self._pool_of_locked(job)
        if pool is not None:
            self._announce_on_pool_locked(job, pool)
            return
        self._publish_locked(job, "PENDING", job.note)
        waiting = view.waiting_reason(job.vcpus, self.vcpus)
        reason = ". ".join(r for r in (job.note, waiting) if r) or None
        self._publish_locked(job, "RUNNABLE", reason)
        self._runnable.append(job)
        view.joined(job.vcpus)

    def _next_startable_locked(self) -> _Job | None:
        """The runnable job to start next, if it fits the host's free vCPUs now; else None.

        Among the jobs whose compute environment has room under its ``maxvCpus`` (a job waiting on its
        environment does not hold up other environments' jobs, as in AWS Batch), the first, in
        submission order, of the share of its job queue with the least recent vCPU usage
        (``fair_share.ShareUsage``): fair share across accounts (``functions.domain.fair_share``),
        first in, first out between shares that used nothing. Jobs without a share identifier (a
        queue without a fair-share policy) are one share of their queue.
        Only the first job of each share is weighed: the others come after it in the same queue.
        """
        best: _Job | None = None
        best_usage = 0.0
        weighed: set[tuple[str, str | None]] = set()
        for job in self._runnable:
            share = job.share_key
            if share in weighed:
                continue
            weighed.add(share)
            environment = self.fleet.environment_of(job.gateway.region, job.submission.job_queue)
            if not self.fleet.has_room(environment, job.vcpus):
                continue
            usage = self._shares.usage(share)
            if best is None or usage < best_usage:
                best, best_usage = job, usage
                if usage == 0:
                    break  # no share holds less, and no job of one comes sooner
        if best is None:
            return None
        return best if best.vcpus <= len(self._free_slots) else None

    def _start_locked(self, job: _Job, free: set[int] | None = None) -> None:
        """Start ``job`` on slots from ``free`` (a dedicated compute's; default: the shared pool's),
        counted against its queue's compute environment's ``maxvCpus`` (a dedicated compute's queue
        has none in the fleet: its own slots bound it)."""
        shared = free is None
        free = self._free_slots if free is None else free
        job.slots = tuple(sorted(free)[: job.vcpus])
        free.difference_update(job.slots)
        if shared:
            job.share_vcpus = len(job.slots)
            self._shares.start(job.share_key, job.share_vcpus)
        job.environment = self.fleet.environment_of(job.gateway.region, job.submission.job_queue)
        self.fleet.claim(job.environment, len(job.slots))
        self._publish_locked(job, "STARTING", job.note, task=job.task)
        job.runner = threading.Thread(
            target=self._run, args=(job,), name=f"batch-job-{job.job_id[:8]}", daemon=True
        )
        job.runner.start()

    def _enforce_deadlines_locked(self) -> float | None:
        """Time out and kill what is due; returns seconds until the next deadline (None: none)."""
        now = time.monotonic()
        next_due: float | None = None
        for job in list(self._live):
            if job.process is None or job.exited:
                self._live.discard(job)
                continue
            try:
                due = self._enforce_job_deadlines_locked(job, now)
            except Exception as exc:
                logger.exception("deadline handling failed batch_job_id=%s", job.job_id)
                self._abandon_locked(job, f"{REASON_EXECUTOR_ERROR}: {type(exc).__name__}: {exc}")
                due = now + SCHEDULER_RETRY_SECONDS
            if due is not None:
                next_due = due if next_due is None else min(next_due, due)
        return None if next_due is None else max(0.0, next_due - now)

    def _enforce_job_deadlines_locked(self, job: _Job, now: float) -> float | None:
        """Time out or kill one running job if due; returns its next deadline (monotonic) or None."""
        next_due: float | None = None
        if job.timeout_at is not None and job.termination_reason is None:
            if job.timeout_at <= now:
                logger.info("job timed out batch_job_id=%s seconds=%s", job.job_id, job.timeout_seconds)
                self._terminate_locked(job, REASON_TIMEOUT)
            else:
                next_due = job.timeout_at
        if job.kill_at is not None and job.process is not None:
            if job.kill_at <= now:
                logger.info("worker killed batch_job_id=%s pid=%d", job.job_id, job.process.pid)
                _signal_job(job, signal.SIGKILL)
                job.kill_at = None
            else:
                next_due = job.kill_at if next_due is None else min(next_due, job.kill_at)
        return next_due
