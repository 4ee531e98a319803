"""A running job's thread: credentials, spawn, console and output watchers, output size accounting,
the final event."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from botocore.exceptions import BotoCoreError, ClientError

from functions.domain.machine_classes import volume_limit_text
from remote_batch_local.events import (
    BatchAttempt,
)
from remote_batch_local.executor.constants import (
    FINAL_STATUSES,
    OUTPUT_CHECK_SECONDS,
    READER_JOIN_SECONDS,
    REASON_CONTAINER_EXITED,
    REASON_EXECUTOR_ERROR,
    _exit_code,
    _now_ms,
    logger,
)
from remote_batch_local.executor.job import _Job
from remote_batch_local.executor.limits import _signal_job
from remote_batch_local.executor.logs import (
    _join_reader,
    _log_operator_report,
    _LogShipper,
    _read_lines,
)
from remote_batch_local.executor.process_limit import (
    PROCESS_CHECK_CLOSE_SECONDS,
    PROCESS_CHECK_SECONDS,
    namespace_task_counts,
    process_limit_reason,
    tree_task_count,
)
from remote_batch_local.executor.warm import WarmPool
from remote_batch_local.sandbox import (
    kill_marked_processes,
)


def _tree_bytes(root: Path) -> int:
    """Bytes of the regular files under ``root`` (``st_size``, what an upload would read), not
    following links; files and folders that vanish while it walks are skipped."""
    total = 0
    pending = [root]
    while pending:
        folder = pending.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            pending.append(Path(entry.path))
                        elif entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_size
                    except OSError:
                        continue
        except OSError:
            continue
    return total


def _counted(job: _Job) -> bool:
    """Whether the ``process-limit`` thread counts ``job``'s tasks: its worker runs."""
    return job.process is not None and not job.exited


class JobRunner(WarmPool):
    """Runs each started job in its own thread, to its final event."""

    def _over_limit(self, job: _Job, what: str, limit_bytes: int | None) -> None:
        """Terminate ``job``: its ``what`` (``Log``, ``Output``) volume passed ``limit_bytes``."""
        reason = f"{what} limit of {volume_limit_text(limit_bytes or 0)} exceeded"
        logger.info("job over its limit batch_job_id=%s reason=%s", job.job_id, reason)
        with self._cond:
            if job.status not in FINAL_STATUSES:
                self._terminate_locked(job, reason)

    def _watch_outputs(self, job: _Job) -> None:
        """While the job runs, measure the files in its working directory every
        ``OUTPUT_CHECK_SECONDS``; past ``output_limit_bytes``, terminate it."""
        limit = job.output_limit_bytes
        workdir = job.workdir
        if limit is None or workdir is None:
            return
        while True:
            with self._cond:
                if job.exited or self._stopped:
                    return
                self._cond.wait(OUTPUT_CHECK_SECONDS)
                if job.exited:
                    return
            if _tree_bytes(workdir) > limit:
                self._over_limit(job, "Output", limit)
                return

    def _watch_process_limits(self) -> None:
        """The ``process-limit`` thread: while jobs run, count every running job's tasks (processes and
        threads: ``process_limit``) in one read of ``/proc`` every ``PROCESS_CHECK_SECONDS`` (every
        ``PROCESS_CHECK_CLOSE_SECONDS`` while a job is past half the limit); end a job past
        ``self._process_limit`` at once (``_over_process_limit``). Returns when the executor stops."""
        limit = self._process_limit
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._stopped or any(_counted(job) for job in self._live))
                if self._stopped:
                    return
                jobs = [
                    (job, job.namespace, job.process.pid)
                    for job in self._live
                    if _counted(job) and job.process
                ]
            highest = 0
            try:
                counts = namespace_task_counts({ns for _, ns, _ in jobs if ns is not None})
                for job, namespace, pid in jobs:
                    count = counts.get(namespace, 0) if namespace is not None else tree_task_count(pid)
                    if count > limit:
                        self._over_process_limit(job, count)
                    else:
                        highest = max(highest, count)
            except Exception:  # the next round retries; this thread must not die (no limit without it)
                logger.exception("process count failed")
            time.sleep(PROCESS_CHECK_CLOSE_SECONDS if highest * 2 > limit else PROCESS_CHECK_SECONDS)

    def _over_process_limit(self, job: _Job, count: int) -> None:
        """Kill ``job`` now (no grace: a fork bomb would use it to grow): it holds ``count`` tasks,
        over its process limit. The runner then publishes it FAILED with the reason, exit code 137."""
        reason = process_limit_reason(self._process_limit)
        with self._cond:
            if job.exited or job.status in FINAL_STATUSES:
                return
            logger.info("job over its limit batch_job_id=%s reason=%s tasks=%d", job.job_id, reason, count)
            if job.termination_reason is None:
                job.termination_reason = reason
            job.last_log_line = f"{reason}: the job held {count} processes and threads; all were killed."
            _signal_job(job, signal.SIGKILL)
            job.kill_at = None
            self._cond.notify_all()

    def _run(self, job: _Job) -> None:
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
            if self._registry is not None:
                self._registry.forget(job.job_id)
            if job.array is not None:
                self._revoke_array_credentials(job.array)
            elif self._credentials is not None:
                self._credentials.revoke(job.job_id)

    def _abort_run(self, job: _Job, reason: str) -> None:
        """After a runner error: kill the worker and what it left, then fail the job if not final."""
        with self._cond:
            process = job.process
        if process is not None:
            _signal_job(job, signal.SIGKILL)
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                process.wait(READER_JOIN_SECONDS)
            kill_marked_processes(job.markers)
        with self._cond:
            job.exited = True
            job.kill_at = None
            self._abandon_locked(job, reason)
            if job.status not in FINAL_STATUSES:  # started: _abandon_locked left it to this runner
                self._release_locked(job)
                try:
                    self._publish_locked(job, "FAILED", reason, stopped_at_ms=_now_ms(), task=job.task)
                except Exception:
                    logger.exception("job failed without its event batch_job_id=%s", job.job_id)
                    job.status = "FAILED"

    def _issue_credentials(self, job: _Job) -> dict[str, str] | None:
        """The job's own AWS credentials ({} without an issuer); None when they could not be made
        (the job then failed without starting)."""
        if self._credentials is None:
            return {}
        try:
            if job.array is None:
                return self._credentials.issue(job.job_id, job.submission)
            parent = job.array
            with parent.credentials_lock:  # one set for the whole array, as one job role on AWS
                if parent.credentials is None:
                    parent.credentials = self._credentials.issue(parent.job_id, job.submission)
                return dict(parent.credentials)
        except (ClientError, BotoCoreError) as exc:
            logger.error("job credentials not issued batch_job_id=%s error=%s", job.job_id, exc)
            with self._cond:
                self._fail_unstarted_locked(job, f"CannotStartContainerError: no credentials: {exc}")
            return None

    def _start_watchers(
        self, job: _Job, process: subprocess.Popen[bytes], shipper: _LogShipper
    ) -> list[threading.Thread]:
        """Start the console reader (which ships the log, up to the job's log limit) and the output
        watcher of a job that just started (the ``process-limit`` thread counts its tasks); returns the
        readers, to join once the job exited."""
        log_limit = job.log_limit_bytes
        readers = [
            threading.Thread(
                target=_read_lines,
                args=(pipe, shipper, log_limit, lambda: self._over_limit(job, "Log", log_limit)),
                name=f"{name}-{job.job_id[:8]}",
                daemon=True,
            )
            for name, pipe in (("console", process.stdout),)
            if pipe is not None
        ]
        for reader in readers:
            reader.start()
        watcher = threading.Thread(
            target=self._watch_outputs, args=(job,), name=f"files-{job.job_id[:8]}", daemon=True
        )
        watcher.start()
        return readers

    def _finish_log(
        self, job: _Job, readers: list[threading.Thread], shipper: _LogShipper, logs_ready: bool
    ) -> None:
        """Once the job exited: join its console readers, add the executor's last line (why it ended
        the job, if it did), ship what is left; the whole log is readable before the final status is."""
        for reader in readers:
            _join_reader(reader, shipper)
        with self._cond:
            last_line = job.last_log_line
        if last_line is not None:
            shipper.append(last_line)
        shipper.close()
        if not logs_ready:
            logger.warning("job log incomplete batch_job_id=%s", job.job_id)

    def _run_job(self, job: _Job) -> None:
        """Spawn the worker, ship its console, wait for it, kill what it left, publish the final event."""
        stream = job.log_stream
        logs_ready = job.gateway.open_log_stream(stream)
        credentials = self._issue_credentials(job)
        if credentials is None:
            return
        with self._cond:
            self._await_warm_locked()
            if job.termination_reason is not None:
                self._fail_unstarted_locked(job, job.termination_reason)
                return
            try:
                process = self._spawn_locked(job, credentials)
            except (OSError, subprocess.SubprocessError) as exc:
                logger.error("worker not started batch_job_id=%s error=%s", job.job_id, exc)
                self._fail_unstarted_locked(job, f"CannotStartContainerError: {exc}")
                return
            job.process = process
            self._live.add(job)
            job.started_at_ms = _now_ms()
            if job.timeout_seconds is not None:
                job.timeout_at = time.monotonic() + job.timeout_seconds
            self._publish_locked(job, "RUNNING", job.note, log_stream=stream, task=job.task)
            self._cond.notify_all()
        self._watch_namespace(job, process)

        shipper = _LogShipper(job.gateway.logs, job.gateway.log_group, stream, job.job_id)
        readers = self._start_watchers(job, process, shipper)
        returncode = process.wait()
        # The job's own end: its billed Running time stops here, whatever shipping its log still takes.
        stopped_at_ms = _now_ms()
        with self._cond:
            job.exited = True
            job.kill_at = None
            self._cond.notify_all()  # the output watcher stops
        # The container stops with its essential process: nothing it started survives it. In a PID
        # namespace the kernel killed them all with its init; then kill what is left of the process
        # group and what left it (found by the job id in its environment): without a namespace, the
        # job's escaped processes; with one, a sandbox's inner bwrap orphaned before it could arrange
        # to die with its parent (seen once under load: it would have slept on, holding the namespace).
        _signal_job(job, signal.SIGKILL)
        kill_marked_processes(job.markers)
        self._finish_log(job, readers, shipper, logs_ready)
        _log_operator_report(job)

        exit_code = _exit_code(returncode)
        with self._cond:
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
            self._release_locked(job)
            self._publish_locked(
                job,
                status,
                reason,
                stopped_at_ms=stopped_at_ms,
                exit_code=exit_code,
                log_stream=stream,
                task=job.task,
            )
        logger.info("worker exited batch_job_id=%s exit_code=%d", job.job_id, exit_code)
