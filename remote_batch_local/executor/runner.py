"""A started job's thread: its credentials, its worker (warm or fresh), its console and output
watchers, the wait for its exit, the kill of what it left, its final event."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import threading
import time

from botocore.exceptions import BotoCoreError, ClientError

from remote_batch_local.events import BatchAttempt
from remote_batch_local.executor.clock import now_ms
from remote_batch_local.executor.constants import (
    DISK_RECHECK_SECONDS,
    FINAL_STATUSES,
    READER_JOIN_SECONDS,
    REASON_CONTAINER_EXITED,
    REASON_EXECUTOR_ERROR,
    logger,
)
from remote_batch_local.executor.ending import JobEnding
from remote_batch_local.executor.job import BatchJob
from remote_batch_local.executor.launch import Launcher
from remote_batch_local.executor.limits import signal_job
from remote_batch_local.executor.logs import LogShipper, join_reader, log_operator_report, read_lines
from remote_batch_local.executor.publisher import JobEvents
from remote_batch_local.executor.settings import ExecutorSettings
from remote_batch_local.executor.state import ExecutorState
from remote_batch_local.executor.volumes import OutputWatch
from remote_batch_local.executor.warm import WarmPool
from remote_batch_local.sandbox import kill_marked_processes
from remote_batch_local.state_disk import StateDiskUnavailable
from worker.runner import exit_code_of


class JobRunner:
    """Runs each started job, on the thread the scheduler starts for it, to its final event."""

    def __init__(
        self,
        state: ExecutorState,
        settings: ExecutorSettings,
        *,
        events: JobEvents,
        ending: JobEnding,
        launcher: Launcher,
        warm: WarmPool,
    ) -> None:
        self._state = state
        self._settings = settings
        self._events = events
        self._ending = ending
        self._launcher = launcher
        self._warm = warm
        self._outputs = OutputWatch(state, ending)

    def run(self, job: BatchJob) -> None:
        """A running job's thread: run it (``_run_job``), then remove its working directory.

        An unexpected error is logged and ends the job: its processes are killed and it fails.
        """
        try:
            self._run_job(job)
        except Exception as exc:
            logger.exception("job runner failed batch_job_id=%s", job.job_id)
            self._abort_run(job, f"{REASON_EXECUTOR_ERROR}: {type(exc).__name__}: {exc}")
        finally:
            if job.workdir is not None:
                shutil.rmtree(job.workdir, ignore_errors=True)
            if self._settings.registry is not None:
                self._settings.registry.forget(job.job_id)
            if job.array is not None:
                self._ending.revoke_array_credentials(job.array)
            elif self._settings.credentials is not None:
                self._settings.credentials.revoke(job.job_id)

    def _abort_run(self, job: BatchJob, reason: str) -> None:
        """After a runner error: kill the worker and what it left, then fail the job if not final."""
        with self._state.cond:
            process = job.process
        if process is not None:
            signal_job(job, signal.SIGKILL)
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                process.wait(READER_JOIN_SECONDS)
            kill_marked_processes(job.markers)
        with self._state.cond:
            job.exited = True
            job.kill_at = None
            self._ending.abandon_locked(job, reason)
            if job.status not in FINAL_STATUSES:  # started: _abandon_locked left it to this runner
                self._ending.release_locked(job)
                try:
                    self._events.publish_locked(job, "FAILED", reason, stopped_at_ms=now_ms(), task=job.task)
                except Exception:
                    logger.exception("job failed without its event batch_job_id=%s", job.job_id)
                    job.status = "FAILED"

    def _open_log_stream(self, job: BatchJob) -> bool | None:
        """Create the job's log stream (``LocalBatchGateway.open_log_stream``: False when CloudWatch
        Logs refused it); None when the job ended or the executor stopped meanwhile.

        While the state disk refuses writes (``StateDiskUnavailable``: it filled after the scheduler
        started the job) the job waits here, STARTING and uncharged (billing starts at RUNNING), and
        tries again every ``DISK_RECHECK_SECONDS``: on AWS a container is not started before its log
        stream can be. A TerminateJob meanwhile fails it without starting.
        """
        waiting = False
        while True:
            try:
                opened = job.gateway.open_log_stream(job.log_stream)
            except StateDiskUnavailable as refused:
                if not waiting:
                    logger.warning(
                        "job waits for the state disk batch_job_id=%s reason=%s", job.job_id, refused
                    )
                    waiting = True
                with self._state.cond:
                    self._state.cond.wait_for(
                        lambda: self._state.stopped or job.termination_reason is not None,
                        DISK_RECHECK_SECONDS,
                    )
                    if job.termination_reason is not None or self._state.stopped:
                        if job.status not in FINAL_STATUSES:
                            self._ending.fail_unstarted_locked(
                                job, job.termination_reason or f"CannotStartContainerError: {refused}"
                            )
                        return None
                continue
            if waiting:
                logger.info("job log stream created after the wait batch_job_id=%s", job.job_id)
            return opened

    def _issue_credentials(self, job: BatchJob) -> dict[str, str] | None:
        """The job's own AWS credentials ({} without an issuer); None when they could not be made
        (the job then failed without starting)."""
        issuer = self._settings.credentials
        if issuer is None:
            return {}
        try:
            if job.array is None:
                return issuer.issue(job.job_id, job.submission)
            parent = job.array
            with parent.credentials_lock:  # one set for the whole array, as one job role on AWS
                if parent.credentials is None:
                    parent.credentials = issuer.issue(parent.job_id, job.submission)
                return dict(parent.credentials)
        except (ClientError, BotoCoreError) as exc:
            logger.error("job credentials not issued batch_job_id=%s error=%s", job.job_id, exc)
            with self._state.cond:
                self._ending.fail_unstarted_locked(job, f"CannotStartContainerError: no credentials: {exc}")
            return None

    def _start_watchers(
        self, job: BatchJob, process: subprocess.Popen[bytes], shipper: LogShipper
    ) -> list[threading.Thread]:
        """Start the console reader (which ships the log, up to the job's log limit) and the output
        watcher of a job that just started (the ``process-limit`` thread counts its tasks); returns the
        readers, to join once the job exited."""
        log_limit = job.log_limit_bytes
        readers = [
            threading.Thread(
                target=read_lines,
                args=(
                    pipe,
                    shipper,
                    log_limit,
                    lambda: self._ending.over_volume_limit(job, "Log", log_limit),
                ),
                name=f"{name}-{job.job_id[:8]}",
                daemon=True,
            )
            for name, pipe in (("console", process.stdout),)
            if pipe is not None
        ]
        for reader in readers:
            reader.start()
        watcher = threading.Thread(
            target=self._outputs.watch, args=(job,), name=f"files-{job.job_id[:8]}", daemon=True
        )
        watcher.start()
        return readers

    def _finish_log(
        self, job: BatchJob, readers: list[threading.Thread], shipper: LogShipper, logs_ready: bool
    ) -> None:
        """Once the job exited: join its console readers, add the executor's last line (why it ended
        the job, if it did), ship what is left; the whole log is readable before the final status is."""
        for reader in readers:
            join_reader(reader, shipper)
        with self._state.cond:
            last_line = job.last_log_line
        if last_line is not None:
            shipper.append(last_line)
        shipper.close()
        if not logs_ready:
            logger.warning("job log incomplete batch_job_id=%s", job.job_id)

    def _spawn_locked(self, job: BatchJob, credentials: dict[str, str]) -> subprocess.Popen[bytes]:
        """Hand ``job`` to an idle warm worker that fits it; else start its worker the usual way."""
        process = self._warm.take_locked(job, credentials)
        return process if process is not None else self._launcher.spawn_locked(job, credentials)

    def _run_job(self, job: BatchJob) -> None:
        """Spawn the worker, ship its console, wait for it, kill what it left, publish the final event."""
        stream = job.log_stream
        logs_ready = self._open_log_stream(job)
        if logs_ready is None:
            return
        credentials = self._issue_credentials(job)
        if credentials is None:
            return
        with self._state.cond:
            self._warm.await_spawning_locked()
            if job.termination_reason is not None:
                self._ending.fail_unstarted_locked(job, job.termination_reason)
                return
            try:
                process = self._spawn_locked(job, credentials)
            except (OSError, subprocess.SubprocessError) as exc:
                logger.error("worker not started batch_job_id=%s error=%s", job.job_id, exc)
                self._ending.fail_unstarted_locked(job, f"CannotStartContainerError: {exc}")
                return
            job.process = process
            self._state.live.add(job)
            job.started_at_ms = now_ms()
            if job.timeout_seconds is not None:
                job.timeout_at = time.monotonic() + job.timeout_seconds
            self._events.publish_locked(job, "RUNNING", job.note, log_stream=stream, task=job.task)
            self._state.cond.notify_all()
        self._launcher.watch_namespace(job, process)

        shipper = LogShipper(job.gateway.logs, job.gateway.log_group, stream, job.job_id)
        readers = self._start_watchers(job, process, shipper)
        returncode = process.wait()
        # The job's own end: its billed Running time stops here, whatever shipping its log still takes.
        stopped_at_ms = now_ms()
        with self._state.cond:
            job.exited = True
            job.kill_at = None
            self._state.cond.notify_all()  # the output watcher stops
        # The container stops with its essential process: nothing it started survives it. In a PID
        # namespace the kernel killed them all with its init; then kill what is left of the process
        # group and what left it (found by the job id in its environment): without a namespace, the
        # job's escaped processes; with one, a sandbox's inner bwrap orphaned before it could arrange
        # to die with its parent (seen once under load: it would have slept on, holding the namespace).
        signal_job(job, signal.SIGKILL)
        kill_marked_processes(job.markers)
        self._finish_log(job, readers, shipper, logs_ready)
        log_operator_report(job)

        exit_code = exit_code_of(returncode)
        with self._state.cond:
            if job.termination_reason is not None:
                status, reason = "FAILED", job.termination_reason
            else:
                status = "SUCCEEDED" if returncode == 0 else "FAILED"
                reason = REASON_CONTAINER_EXITED
            job.attempts.append(
                BatchAttempt(
                    exit_code=exit_code,
                    log_stream_name=stream,
                    task_arn=job.task,
                    started_at_ms=job.started_at_ms or stopped_at_ms,
                    stopped_at_ms=stopped_at_ms,
                    status_reason=reason,
                )
            )
            self._ending.release_locked(job)
            self._events.publish_locked(
                job,
                status,
                reason,
                stopped_at_ms=stopped_at_ms,
                exit_code=exit_code,
                log_stream=stream,
                task=job.task,
            )
        logger.info("worker exited batch_job_id=%s exit_code=%d", job.job_id, exit_code)
