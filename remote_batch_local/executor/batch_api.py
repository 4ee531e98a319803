"""The executor: one ``ExecutorState`` and the collaborators built with it, behind the Batch API its
gateways and computes call (SubmitJob, TerminateJob, DescribeJobs, ListJobs, the stop)."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from functions.ports import BatchSubmission
from remote_batch_local.executor.accepted import AcceptedJob, AcceptedJobs
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
    logger,
)
from remote_batch_local.executor.ending import JobEnding
from remote_batch_local.executor.fleet import LocalFleet, client_exception
from remote_batch_local.executor.gateway import LocalBatchGateway
from remote_batch_local.executor.intake import JobIntake
from remote_batch_local.executor.job import JobZone
from remote_batch_local.executor.launch import Launcher
from remote_batch_local.executor.limits import signal_job
from remote_batch_local.executor.memory import job_memory_ceiling_mib
from remote_batch_local.executor.pools import ComputePools
from remote_batch_local.executor.ports import CredentialIssuer, EventPublisher
from remote_batch_local.executor.process_limit import PROCESS_LIMIT, ProcessLimitWatch
from remote_batch_local.executor.publisher import JobEvents
from remote_batch_local.executor.rate_limit import DEFAULT_SUBMIT_TPS, SubmitRateLimit
from remote_batch_local.executor.readmission import PriorRun, Readmission
from remote_batch_local.executor.runner import JobRunner
from remote_batch_local.executor.scheduler import Scheduler
from remote_batch_local.executor.settings import ExecutorSettings
from remote_batch_local.executor.state import ExecutorState
from remote_batch_local.executor.warm import WARM_WORKERS, WarmPool
from remote_batch_local.job_pythons import LocalPythons
from remote_batch_local.sandbox import ProcessRegistry, Sandbox, detect_sandbox, kill_marked_processes
from remote_batch_local.state_disk import StateDisk


class LocalBatchExecutor:
    """AWS Batch compute on this host: a FIFO queue over the host's vCPUs, one subprocess per job.

    It builds the executor's one ``ExecutorState`` and its collaborators with it, and answers the
    Batch API its gateways (``gateway``) and computes (``compute_environments``) call.

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
    accepted : AcceptedJobs | None
        Where each accepted job is kept on disk before SubmitJob answers, so that the next start
        after a crash takes it back (``readmit``); default: none kept.
    disk : StateDisk | None
        The local stack's state disk (``ExecutorSettings.disk``): while it refuses writes, queued jobs
        stay RUNNABLE and a job's log stream waits for it; default: never checked.
    environments : Path or None
        Where environments are built (``ExecutorSettings.environment_builds``): a job whose submission
        names a build (``REMOTE_BATCH_ENVIRONMENT_HASH``) runs with ``<environments>/<hash>/site``.
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
        accepted: AcceptedJobs | None = None,
        disk: StateDisk | None = None,
        pythons: LocalPythons | None = None,
        environments: Path | None = None,
    ) -> None:
        cpu_ids = sorted(os.sched_getaffinity(0))
        host_vcpus = max(1, vcpus if vcpus is not None else len(cpu_ids))
        memory_basis = None
        if memory_mib is None:
            memory_mib, memory_basis = job_memory_ceiling_mib()
        self.sandbox = sandbox if sandbox is not None else detect_sandbox()
        if self.sandbox.warning:
            logger.warning("JOBS ARE NOT SANDBOXED: %s", self.sandbox.warning)
        python = python or sys.executable
        self.settings = settings = ExecutorSettings(
            account=account,
            vcpus=host_vcpus,
            memory_mib=memory_mib,
            memory_basis=memory_basis,
            cpu_of_slot=tuple(cpu_ids[i % len(cpu_ids)] for i in range(host_vcpus)),
            command=tuple(worker_command) if worker_command is not None else (python, "-u", "-m", "worker"),
            python=python if worker_command is None else None,
            import_root=import_root or REPO_ROOT,
            worker_environment=dict(worker_environment),
            min_timeout_seconds=min_timeout_seconds,
            kill_grace_seconds=kill_grace_seconds,
            log_limit_cap=log_limit_bytes,
            output_limit_cap=output_limit_bytes,
            process_limit=process_limit,
            sandbox=self.sandbox,
            registry=registry,
            credentials=credentials,
            disk=disk,
            pythons=pythons or LocalPythons(),
            environment_builds=environments,
        )
        self.vcpus = host_vcpus
        self.memory_mib = memory_mib
        self.account = account
        self.submit_rate = SubmitRateLimit(submit_tps)
        self._logs_client = logs_client
        # Job queues and compute environments (``fleet``): the local stack adds its zones' queues.
        self.fleet = LocalFleet(account, host_vcpus)
        self._state = state = ExecutorState(free_slots=set(range(host_vcpus)))
        self._events = events = JobEvents(bus, settings)
        self._pools = pools = ComputePools(state, host_vcpus)
        self._ending = ending = JobEnding(state, settings, events, pools, self.fleet)
        self.accepted = accepted
        self._intake = intake = JobIntake(state, settings, accepted)
        self._arrays = ArrayJobs(state, intake)
        self._readmission = Readmission(state, intake, events)
        launcher = Launcher(state, settings)
        self._warm = warm = WarmPool(state, settings, launcher, warm_workers)
        runner = JobRunner(state, settings, events=events, ending=ending, launcher=launcher, warm=warm)
        self._scheduler = Scheduler(
            state,
            events,
            ending,
            pools=pools,
            fleet=self.fleet,
            runner=runner,
            host_vcpus=host_vcpus,
            disk=disk,
        )
        self._process_limit = ProcessLimitWatch(state, process_limit)
        self._gateways: dict[tuple[str, str], LocalBatchGateway] = {}
        self._compute_apis: dict[str, LocalComputeEnvironments] = {}
        self._scheduler.start()
        self._process_limit.start()
        warm.start()
        logger.info(
            "executor started vcpus=%d memory_mib=%d sandbox=%s warm_workers=%d",
            host_vcpus,
            memory_mib,
            self.sandbox.kind,
            warm.size,
        )

    def gateway(self, region: str, log_group: str) -> LocalBatchGateway:
        """The ``BatchGateway`` of one geo zone (the same object for the same arguments)."""
        with self._state.cond:
            existing = self._gateways.get((region, log_group))
        if existing is not None:
            return existing
        created = LocalBatchGateway(self, region, log_group, self._logs_client(region))
        with self._state.cond:
            return self._gateways.setdefault((region, log_group), created)

    def compute_environments(self, region: str) -> LocalComputeEnvironments:
        """The ``ComputeEnvironments`` of one region (dedicated computes; the same object per region)."""
        with self._state.cond:
            api = self._compute_apis.get(region)
            if api is None:
                api = LocalComputeEnvironments(self._state, self._pools, self._ending, region)
                self._compute_apis[region] = api
            return api

    def submit(self, gateway: LocalBatchGateway, submission: BatchSubmission) -> str:
        """Queue ``submission`` in ``gateway``'s zone; returns the Batch job id (use the gateway). With
        ``array_size``, an array job of that many children (``arrays``).

        Raises
        ------
        DependencyFailed
            When the executor has been shut down; for an array size AWS Batch refuses, a job queue
            the fleet does not know or that is DISABLED (its cause is AWS Batch's ``ClientException``).
        """
        if self._pools.check_submit(gateway.region, submission.job_queue):
            if submission.share_identifier is not None:
                raise client_exception(
                    "SubmitJob",
                    f"Job queue {submission.job_queue} has no fair-share scheduling policy: a job on it "
                    "takes no shareIdentifier.",
                )
        else:
            self.fleet.check_submit(gateway.region, submission.job_queue, submission.share_identifier)
        if submission.array_size is not None:
            return self._arrays.submit(gateway, submission, submission.array_size)
        return self._intake.submit(gateway, submission)

    def readmit(self, accepted: AcceptedJob, prior: Mapping[str, PriorRun]) -> None:
        """Take back a job accepted before a crash, with what the last run's events say of it (and of
        each child of an array job) by Batch job id (``readmission``); the gateway of its zone is made
        if needed, with the zone's logs client.

        Raises
        ------
        DependencyFailed
            When the executor has been shut down.
        """
        gateway = self.gateway(accepted.region, accepted.log_group)
        self._readmission.readmit(gateway, accepted, prior)

    def list_jobs(self, array_job_id: str, job_status: str | None = None) -> list[dict[str, Any]]:
        """ListJobs with ``arrayJobId``: the ``JobSummary`` of each child in ``job_status`` (AWS: only
        RUNNING ones when no status is given), in index order; [] for an id that is no array job."""
        return self._arrays.list_jobs(array_job_id, job_status)

    def wake(self) -> None:
        """Let the scheduler look at the queue again (a compute environment's limit changed)."""
        with self._state.cond:
            self._state.cond.notify_all()

    def terminate_job(self, batch_job_id: str, reason: str) -> None:
        """Terminate a job in any non-final status; no-op for a final or unknown id.

        A queued job fails at once with ``reason`` and no ``startedAt``. A running job's process
        group gets SIGTERM, then SIGKILL after ``kill_grace_seconds``; it fails with ``reason`` once
        it is gone (``stoppedAt`` = when it died). Returns without waiting for that.
        """
        state = self._state
        with state.cond:
            parent = state.arrays.get(batch_job_id)
            if parent is not None:
                self._ending.terminate_array_locked(parent, reason)
            else:
                job = state.jobs.get(batch_job_id)
                if job is None or job.status in FINAL_STATUSES:
                    logger.info("terminate ignored batch_job_id=%s", batch_job_id)
                    return
                self._ending.terminate_locked(job, reason)
                parent = job.array
        if parent is not None:
            self._ending.revoke_array_credentials(parent)

    def describe(self, batch_job_ids: Sequence[str]) -> list[dict[str, Any]]:
        """DescribeJobs: the ``JobDetail`` of each known id in the order given: a job's (or array
        child's) as its last event carried it, an array parent's as of now (its ``statusSummary``
        counts its children's statuses now)."""
        found: list[dict[str, Any]] = []
        with self._state.cond:
            for batch_job_id in batch_job_ids:
                parent = self._state.arrays.get(batch_job_id)
                job = self._state.jobs.get(batch_job_id)
                if parent is not None:
                    found.append(self._events.parent_envelope_locked(parent)["detail"])
                elif job is not None and job.last_detail is not None:
                    found.append(dict(job.last_detail))
        return found

    def find_job_by_name(self, region: str, job_queue: str, job_name: str) -> str | None:
        """ListJobs with a ``JOB_NAME`` filter in one zone's ``job_queue`` (a name or an ARN): the id of
        the oldest job (or array parent) of any status submitted there as ``job_name``, or None."""
        queue = job_queue.rsplit("/", 1)[-1]
        found: list[tuple[int, str]] = []
        with self._state.cond:
            candidates: list[tuple[int, str, JobZone, BatchSubmission]] = [
                (job.created_at_ms, job.job_id, job.gateway, job.submission)
                for job in self._state.jobs.values()
                if job.array is None
            ]
            candidates += [
                (parent.created_at_ms, parent.job_id, *parent.context)
                for parent in self._state.arrays.values()
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
        with self._state.cond:
            parent = self._state.arrays.get(batch_job_id)
            if parent is not None:
                return parent.status
            job = self._state.jobs.get(batch_job_id)
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
        state = self._state
        with state.cond:
            state.closed = True
            # Nothing queued starts from now on: empty the queues at once (an array's 10,000 children
            # would each be looked for in them otherwise).
            state.submitted.clear()
            state.runnable.clear()
            for job in list(state.jobs.values()):
                if job.status in FINAL_STATUSES or (job.array is not None and job.status in QUEUED_STATUSES):
                    continue
                self._ending.terminate_locked(
                    job, reason if job.started_at_ms is not None else unstarted_reason
                )
            runners = [job.runner for job in state.jobs.values() if job.runner is not None]
        for runner in runners:
            runner.join(max(0.0, deadline - time.monotonic()))
        with state.cond:
            killed = False
            for job in state.jobs.values():
                if job.process is not None and not job.exited:
                    logger.warning(
                        "worker killed at shutdown batch_job_id=%s pid=%d", job.job_id, job.process.pid
                    )
                    signal_job(job, signal.SIGKILL)
                    killed = True
            started = frozenset().union(
                *(job.markers for job in state.jobs.values() if job.process is not None)
            )
        kill_marked_processes(started)
        if killed:  # let their runners publish the final events and remove the job directories
            for runner in runners:
                runner.join(max(0.0, deadline - time.monotonic()) + READER_JOIN_SECONDS)
        with state.cond:
            state.stopped = True
            state.cond.notify_all()
            arrays = list(state.arrays.values())
        for parent in arrays:
            self._ending.revoke_array_credentials(parent)
        self._warm.stop(max(0.1, deadline - time.monotonic()) + READER_JOIN_SECONDS)
        self._scheduler.join(max(0.1, deadline - time.monotonic()))
        self._process_limit.join(max(0.1, deadline - time.monotonic()))
        logger.info("executor stopped")
