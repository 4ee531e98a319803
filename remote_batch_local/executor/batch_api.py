"""The executor's own API: construction, SubmitJob/TerminateJob/DescribeJobs for its gateways, a job's
status, shutdown."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from functions.domain.errors import DependencyFailed
from functions.domain.fair_share import SHARE_DECAY_SECONDS
from functions.ports import BatchSubmission
from remote_batch_local.executor.arrays import ArrayJobs
from remote_batch_local.executor.computes import LocalComputeEnvironments
from remote_batch_local.executor.constants import (
    AWS_MIN_TIMEOUT_SECONDS,
    FINAL_STATUSES,
    KILL_GRACE_SECONDS,
    QUEUED_STATUSES,
    READER_JOIN_SECONDS,
    REPO_ROOT,
    SHUTDOWN_REASON,
    SHUTDOWN_UNSTARTED_REASON,
    CredentialIssuer,
    EventPublisher,
    _now_ms,
    logger,
)
from remote_batch_local.executor.fair_share import ShareUsage
from remote_batch_local.executor.fleet import LocalFleet, client_exception
from remote_batch_local.executor.gateway import LocalBatchGateway
from remote_batch_local.executor.limits import _signal_job
from remote_batch_local.executor.memory import job_memory_ceiling_mib
from remote_batch_local.executor.process_limit import PROCESS_LIMIT
from remote_batch_local.executor.rate_limit import DEFAULT_SUBMIT_TPS, SubmitRateLimit
from remote_batch_local.executor.warm import WARM_WORKERS
from remote_batch_local.job_pythons import LocalPythons
from remote_batch_local.sandbox import (
    ProcessRegistry,
    Sandbox,
    detect_sandbox,
    kill_marked_processes,
)


class LocalBatchExecutor(ArrayJobs):
    """AWS Batch compute on this host: a FIFO queue over the host's vCPUs, one subprocess per job.

    Parameters
    ----------
    bus : EventPublisher
        Receives every ``Batch Job State Change`` envelope, once, in order per job.
    logs_client : Callable[[str], Any]
        Builds a boto3 CloudWatch Logs client for a region (called once per ``gateway``).
    worker_environment : Mapping[str, str]
        The worker's base environment (AWS endpoint and credentials). The executor adds the
        submission's environment, ``AWS_REGION``/``AWS_DEFAULT_REGION`` of the zone,
        ``AWS_BATCH_JOB_ID``, ``AWS_BATCH_JOB_ATTEMPT``, ``AWS_BATCH_JQ_NAME``, the BLAS/OpenMP
        thread counts (the allotted vCPUs), ``PYTHONPATH`` (``import_root`` first), ``TMPDIR``/``TEMP``/
        ``TMP`` (inside the job's directory), ``REMOTE_BATCH_OPERATOR_LOG`` (a file in it whose content,
        the worker's own errors, is logged here after the job, never in the job's log) and, when
        absent, this process's ``PATH``.
    vcpus : int | None
        Host capacity in vCPUs shared by all jobs; default: the CPUs this process may run on.
    memory_mib : int | None
        The ceiling of a job's address-space limit in MiB; default: the host's available memory at
        start less a headroom for the stack (``job_memory_ceiling_mib``), said in the ``statusReason``
        of a job whose class it cuts down.
    account : str
        The 12-digit AWS account id in ARNs.
    python : str | None
        The interpreter for the default worker command; default ``sys.executable``.
    worker_command : Sequence[str] | None
        The job container's command; default ``[python, "-u", "-m", "worker"]``.
    import_root : Path | None
        The directory put first on the worker's ``PYTHONPATH``; default the repository root (so
        ``worker`` imports). The worker's working directory is its own temporary directory.
    min_timeout_seconds : int
        Timeouts below this are raised to it, as AWS Batch's minimum ``attemptDurationSeconds`` (60 s).
    kill_grace_seconds : float
        Seconds between SIGTERM and SIGKILL when a running job is terminated or times out.
    sandbox : Sandbox | None
        How each job is isolated (``remote_batch_local.sandbox``); default: the strongest that works
        here (``detect_sandbox``). Its warning, if any, is logged now and ends each job's statusReason.
    registry : ProcessRegistry | None
        Where each running job's folder and processes are recorded, for the next start after a crash;
        default: none kept.
    credentials : CredentialIssuer | None
        Issues each job its own AWS credentials before it starts (they replace any in
        ``worker_environment``) and revokes them after it ended; default: the job runs with
        ``worker_environment``'s.
    log_limit_bytes : int | None
        Caps every job's console output (bytes) below its machine class's ``log_limit_bytes``; past
        it the job is terminated with ``Log limit of <size> exceeded``. None: the class's limit.
    output_limit_bytes : int | None
        Caps the bytes of files every job keeps in its working directory (outputs, temporary files)
        below its class's ``output_limit_bytes``; past it: ``Output limit of <size> exceeded``.
    process_limit : int
        The most tasks (processes plus threads) a job may hold at once (default ``PROCESS_LIMIT``,
        1024; ``process_limit``); past it the job is killed at once and fails with ``Process limit
        of <limit> exceeded``.
    warm_workers : int
        The most idle warm workers kept (``warm``: sandboxed workers started ahead of need, each
        running one job); 0 starts every job's worker when it starts. Only for the default
        ``worker_command``: a custom command always starts with its job.
    submit_tps : int
        SubmitJob calls accepted per second (``rate_limit.SubmitRateLimit``; AWS Batch's is about 50):
        more are refused with ``TooManyRequestsException`` as AWS Batch does.
    environments : Path or None
        Where environments are built (``remote_batch_local.environments``): a job whose submission names
        a build (``REMOTE_BATCH_ENVIRONMENT_HASH``) runs with ``<environments>/<hash>/site``.
    pythons : LocalPythons or None
        The interpreter of each Python version (``remote_batch_local.job_pythons``): a job's
        definition (``...-py312``) picks the one its job side runs in, as a definition's image would;
        None: the worker's own interpreter for every job.
    """

    def __init__(
        self,
        bus: EventPublisher,
        logs_client: Callable[[str], Any],
        worker_environment: Mapping[str, str],
        *,
        vcpus: int | None = None,
        memory_mib: int | None = None,
        account: str = "000000000000",
        python: str | None = None,
        worker_command: Sequence[str] | None = None,
        import_root: Path | None = None,
        min_timeout_seconds: int = AWS_MIN_TIMEOUT_SECONDS,
        kill_grace_seconds: float = KILL_GRACE_SECONDS,
        sandbox: Sandbox | None = None,
        registry: ProcessRegistry | None = None,
        credentials: CredentialIssuer | None = None,
        log_limit_bytes: int | None = None,
        output_limit_bytes: int | None = None,
        process_limit: int = PROCESS_LIMIT,
        warm_workers: int = WARM_WORKERS,
        submit_tps: int = DEFAULT_SUBMIT_TPS,
        pythons: LocalPythons | None = None,
        environments: Path | None = None,
    ) -> None:
        cpu_ids = sorted(os.sched_getaffinity(0))
        self.vcpus = max(1, vcpus if vcpus is not None else len(cpu_ids))
        self._memory_basis = None
        if memory_mib is None:
            memory_mib, self._memory_basis = job_memory_ceiling_mib()
        self.memory_mib = memory_mib
        self.sandbox = sandbox if sandbox is not None else detect_sandbox()
        if self.sandbox.warning:
            logger.warning("JOBS ARE NOT SANDBOXED: %s", self.sandbox.warning)
        self._registry = registry
        self._credentials = credentials
        self.account = account
        python = python or sys.executable
        self._command = list(worker_command) if worker_command is not None else [python, "-u", "-m", "worker"]
        self._import_root = import_root or REPO_ROOT
        self._worker_environment = dict(worker_environment)
        self._pythons = pythons or LocalPythons()
        self._environment_builds = environments
        self._min_timeout_seconds = min_timeout_seconds
        self._kill_grace_seconds = kill_grace_seconds
        self._log_limit_cap = log_limit_bytes
        self._output_limit_cap = output_limit_bytes
        self._process_limit = process_limit
        self._bus = bus
        self.submit_rate = SubmitRateLimit(submit_tps)
        self._logs_client = logs_client
        # vCPU slot i runs on CPU id _cpu_of_slot[i]; more slots than CPUs share them round-robin.
        self._cpu_of_slot = [cpu_ids[i % len(cpu_ids)] for i in range(self.vcpus)]
        self._free_slots = set(range(self.vcpus))
        # Job queues and compute environments (``fleet``): the local stack adds its zones' queues.
        self.fleet = LocalFleet(account, self.vcpus)
        self._cond = threading.Condition()
        self._jobs = {}
        self._arrays = {}
        self._live = set()
        self._submitted = deque()
        self._runnable = deque()
        self._shares = ShareUsage(SHARE_DECAY_SECONDS)
        self._gateways = {}
        self._init_pools()
        self._compute_apis: dict[str, LocalComputeEnvironments] = {}
        self._closed = False
        self._stopped = False
        self._scheduler = threading.Thread(target=self._schedule, name="batch-scheduler", daemon=True)
        self._scheduler.start()
        self._process_counter = threading.Thread(
            target=self._watch_process_limits, name="process-limit", daemon=True
        )
        self._process_counter.start()
        self._start_warm_pool(warm_workers, python if worker_command is None else None)
        logger.info(
            "executor started vcpus=%d memory_mib=%d sandbox=%s warm_workers=%d",
            self.vcpus,
            self.memory_mib,
            self.sandbox.kind,
            self._warm_max,
        )

    def gateway(self, region: str, log_group: str) -> LocalBatchGateway:
        """The ``BatchGateway`` of one geo zone (the same object for the same arguments)."""
        with self._cond:
            existing = self._gateways.get((region, log_group))
        if existing is not None:
            return existing
        created = LocalBatchGateway(self, region, log_group, self._logs_client(region))
        with self._cond:
            return self._gateways.setdefault((region, log_group), created)

    def compute_environments(self, region: str) -> LocalComputeEnvironments:
        """The ``ComputeEnvironments`` of one region (dedicated computes; the same object per region)."""
        with self._cond:
            return self._compute_apis.setdefault(region, LocalComputeEnvironments(self, region))

    def submit(self, gateway: LocalBatchGateway, submission: BatchSubmission) -> str:
        """Queue ``submission`` in ``gateway``'s zone; returns the Batch job id (use the gateway). With
        ``array_size``, an array job of that many children (``arrays``).

        Raises
        ------
        DependencyFailed
            When the executor has been shut down; for an array size AWS Batch refuses, a job queue
            the fleet does not know or that is DISABLED (its cause is AWS Batch's ``ClientException``).
        """
        if self.check_compute_submit(gateway.region, submission.job_queue):
            if submission.share_identifier is not None:
                raise client_exception(
                    "SubmitJob",
                    f"Job queue {submission.job_queue} has no fair-share scheduling policy: a job on it "
                    "takes no shareIdentifier.",
                )
        else:
            self.fleet.check_submit(gateway.region, submission.job_queue, submission.share_identifier)
        if submission.array_size is not None:
            return self._submit_array(gateway, submission, submission.array_size)
        job_id = str(uuid.uuid4())
        job = self._new_job(job_id, gateway, submission, _now_ms())
        with self._cond:
            if self._closed:
                raise DependencyFailed("The local Batch executor is stopped; restart the local stack.")
            self._jobs[job_id] = job
            self._submitted.append(job)
            self._cond.notify_all()
        logger.info(
            "job submitted batch_job_id=%s job_name=%s vcpus=%d", job_id, submission.job_name, job.vcpus
        )
        return job_id

    def wake(self) -> None:
        """Let the scheduler look at the queue again (a compute environment's limit changed)."""
        with self._cond:
            self._cond.notify_all()

    def terminate_job(self, batch_job_id: str, reason: str) -> None:
        """Terminate a job in any non-final status; no-op for a final or unknown id.

        A queued job fails at once with ``reason`` and no ``startedAt``. A running job's process
        group gets SIGTERM, then SIGKILL after ``kill_grace_seconds``; it fails with ``reason`` once
        it is gone (``stoppedAt`` = when it died). Returns without waiting for that.
        """
        with self._cond:
            parent = self._arrays.get(batch_job_id)
            if parent is not None:
                self._terminate_array_locked(parent, reason)
            else:
                job = self._jobs.get(batch_job_id)
                if job is None or job.status in FINAL_STATUSES:
                    logger.info("terminate ignored batch_job_id=%s", batch_job_id)
                    return
                self._terminate_locked(job, reason)
                parent = job.array
        if parent is not None:
            self._revoke_array_credentials(parent)

    def describe(self, batch_job_ids: Sequence[str]) -> list[dict[str, Any]]:
        """DescribeJobs: the ``JobDetail`` of each known id in the order given: a job's (or array
        child's) as its last event carried it, an array parent's as of now (its ``statusSummary``
        counts its children's statuses now)."""
        found: list[dict[str, Any]] = []
        with self._cond:
            for batch_job_id in batch_job_ids:
                parent = self._arrays.get(batch_job_id)
                job = self._jobs.get(batch_job_id)
                if parent is not None:
                    found.append(self._parent_envelope_locked(parent)["detail"])
                elif job is not None and job.last_detail is not None:
                    found.append(dict(job.last_detail))
        return found

    def find_job_by_name(self, region: str, job_queue: str, job_name: str) -> str | None:
        """ListJobs with a ``JOB_NAME`` filter in one zone's ``job_queue`` (a name or an ARN): the id of
        the oldest job (or array parent) of any status submitted there as ``job_name``, or None."""
        queue = job_queue.rsplit("/", 1)[-1]
        found: list[tuple[int, str]] = []
        with self._cond:
            candidates: list[tuple[int, str, LocalBatchGateway, BatchSubmission]] = [
                (job.created_at_ms, job.job_id, job.gateway, job.submission)
                for job in self._jobs.values()
                if job.array is None
            ]
            candidates += [
                (parent.created_at_ms, parent.job_id, *parent.context) for parent in self._arrays.values()
            ]
        for created_at_ms, batch_job_id, gateway, submission in candidates:
            if (
                gateway.region == region
                and submission.job_name == job_name
                and submission.job_queue.rsplit("/", 1)[-1] == queue
            ):
                found.append((created_at_ms, batch_job_id))
        return min(found)[1] if found else None

    def status_of(self, batch_job_id: str) -> str | None:
        """The job's (or array parent's) current Batch status (``SUBMITTED`` … ``FAILED``), or None
        for an unknown id."""
        with self._cond:
            parent = self._arrays.get(batch_job_id)
            if parent is not None:
                return parent.status
            job = self._jobs.get(batch_job_id)
            return None if job is None else job.status

    def shutdown(
        self,
        reason: str = SHUTDOWN_REASON,
        timeout: float = 10.0,
        unstarted_reason: str = SHUTDOWN_UNSTARTED_REASON,
    ) -> None:
        """Terminate every job that is not final (as ``terminate_job`` does, so their FAILED events
        reach the bus), wait for the workers to die, kill what they left and join the threads.

        An array's children that never started are left as they are, without an event (and so is
        their array): the next start settles them from the journal of events (``recovery``), as after
        a crash, rather than the stop waiting for the events of up to 10,000 children an array.

        Parameters
        ----------
        reason : str
            The ``statusReason`` of the running jobs it ends.
        timeout : float
            Seconds to wait for the workers; any still alive after it are killed outright.
        unstarted_reason : str
            The ``statusReason`` of the jobs it ends before they ran (queued or STARTING).
        """
        deadline = time.monotonic() + timeout
        with self._cond:
            self._closed = True
            # Nothing queued starts from now on: empty the queues at once (an array's 10,000 children
            # would each be looked for in them otherwise).
            self._submitted.clear()
            self._runnable.clear()
            for job in list(self._jobs.values()):
                if job.status in FINAL_STATUSES or (job.array is not None and job.status in QUEUED_STATUSES):
                    continue
                self._terminate_locked(job, reason if job.started_at_ms is not None else unstarted_reason)
            runners = [job.runner for job in self._jobs.values() if job.runner is not None]
        for runner in runners:
            runner.join(max(0.0, deadline - time.monotonic()))
        with self._cond:
            killed = False
            for job in self._jobs.values():
                if job.process is not None and not job.exited:
                    logger.warning(
                        "worker killed at shutdown batch_job_id=%s pid=%d", job.job_id, job.process.pid
                    )
                    _signal_job(job, signal.SIGKILL)
                    killed = True
            started = frozenset().union(
                *(job.markers for job in self._jobs.values() if job.process is not None)
            )
        kill_marked_processes(started)
        if killed:  # let their runners publish the final events and remove the job directories
            for runner in runners:
                runner.join(max(0.0, deadline - time.monotonic()) + READER_JOIN_SECONDS)
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
            arrays = list(self._arrays.values())
        for parent in arrays:
            self._revoke_array_credentials(parent)
        self._stop_warm_pool(max(0.1, deadline - time.monotonic()) + READER_JOIN_SECONDS)
        self._scheduler.join(max(0.1, deadline - time.monotonic()))
        self._process_counter.join(max(0.1, deadline - time.monotonic()))
        logger.info("executor stopped")
