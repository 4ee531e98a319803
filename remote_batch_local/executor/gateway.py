"""The Batch API surface of one geo zone: ``BatchGateway``'s SubmitJob, TerminateJob, DescribeJobs and
ListJobs, ``FleetControl``'s queues and environments, and the zone's log streams; over any
``BatchBackend`` (the executor)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from functions.adapters.batch_detail import BatchJobDetail, to_state
from functions.domain.jobs import BatchJobState
from functions.ports import BatchSubmission, ComputeEnvironmentInfo, JobQueueInfo
from remote_batch_local.executor.constants import logger
from remote_batch_local.executor.fleet import LocalFleet
from remote_batch_local.executor.rate_limit import SubmitRateLimit


class BatchBackend(Protocol):
    """What a zone's gateway needs of the Batch compute behind it (``LocalBatchExecutor`` is one)."""

    account: str
    fleet: LocalFleet
    submit_rate: SubmitRateLimit

    def submit(self, gateway: LocalBatchGateway, submission: BatchSubmission) -> str:
        """Queue ``submission`` in ``gateway``'s zone; its Batch job id."""

    def terminate_job(self, batch_job_id: str, reason: str) -> None:
        """TerminateJob."""

    def describe(self, batch_job_ids: Sequence[str]) -> list[dict[str, Any]]:
        """DescribeJobs' ``JobDetail`` of each known id."""

    def find_job_by_name(self, region: str, job_queue: str, job_name: str) -> str | None:
        """ListJobs by ``JOB_NAME``: the oldest such job's id."""

    def list_jobs(self, array_job_id: str, job_status: str | None = None) -> list[dict[str, Any]]:
        """ListJobs of an array's children."""

    def wake(self) -> None:
        """Let the scheduler look at the queue again."""


class LocalBatchGateway:
    """``BatchGateway`` and ``FleetControl`` of one geo zone, backed by the shared executor.

    Attributes
    ----------
    region : str
        The zone's region (events' ARNs, the worker's ``AWS_REGION``).
    log_group : str
        The zone's CloudWatch Logs group of job console output.
    account : str
        The AWS account id in ARNs.
    """

    def __init__(self, executor: BatchBackend, region: str, log_group: str, logs: Any) -> None:
        self._executor = executor
        self.region = region
        self.log_group = log_group
        self.account = executor.account
        self.logs = logs
        self._group_lock = threading.Lock()
        self._group_ready = False

    def submit_job(self, submission: BatchSubmission) -> str:
        """Queue a job; returns its Batch job id (a UUID) at once. Its events follow asynchronously.

        Raises
        ------
        DependencyFailed
            When the executor has been shut down; "AWS Batch is busy" (``TooManyRequestsException``)
            past the executor's SubmitJob rate (``rate_limit.SubmitRateLimit``), as AWS Batch answers.
        """
        self._executor.submit_rate.admit()
        return self._executor.submit(self, submission)

    def terminate_job(self, batch_job_id: str, reason: str) -> None:
        """Terminate a job: a queued one fails at once, a running one is signalled (SIGTERM, then
        SIGKILL after 2 s); ``reason`` becomes its ``statusReason``. No-op for final or unknown ids."""
        self._executor.terminate_job(batch_job_id, reason)

    def describe_jobs(self, batch_job_ids: Sequence[str], observed_at_ms: int) -> list[BatchJobState]:
        """DescribeJobs: the state of each id this executor knows (unknown ids are absent)."""
        return [
            to_state(BatchJobDetail.model_validate(d), observed_at_ms)
            for d in self._executor.describe(batch_job_ids)
        ]

    def find_job_by_name(self, job_queue: str, job_name: str) -> str | None:
        """ListJobs with a ``JOB_NAME`` filter: the oldest job of any status named ``job_name`` in this
        zone's ``job_queue``, or None (``LocalBatchExecutor.find_job_by_name``)."""
        return self._executor.find_job_by_name(self.region, job_queue, job_name)

    # -- FleetControl: the zone's job queues and compute environments (``LocalFleet``) -------------
    def describe_job_queues(self, job_queues: Sequence[str]) -> list[JobQueueInfo]:
        """DescribeJobQueues of this zone's queues (names or ARNs); unknown ones are absent."""
        return self._executor.fleet.describe_job_queues(self.region, job_queues)

    def set_job_queue_state(self, job_queue: str, state: str) -> None:
        """UpdateJobQueue ``state``: a DISABLED queue refuses SubmitJob, runs what it holds."""
        self._executor.fleet.set_job_queue_state(self.region, job_queue, state)
        self._executor.wake()

    def describe_compute_environments(self, environments: Sequence[str]) -> list[ComputeEnvironmentInfo]:
        """DescribeComputeEnvironments of this zone's environments; unknown ones are absent."""
        return self._executor.fleet.describe_compute_environments(self.region, environments)

    def set_max_vcpus(self, environment: str, max_vcpus: int) -> None:
        """UpdateComputeEnvironment ``maxvCpus``: jobs waiting on the environment may start now."""
        self._executor.fleet.set_max_vcpus(self.region, environment, max_vcpus)
        self._executor.wake()

    def list_jobs(self, array_job_id: str, job_status: str | None = None) -> list[dict[str, Any]]:
        """ListJobs of an array job's children (``LocalBatchExecutor.list_jobs``)."""
        return self._executor.list_jobs(array_job_id, job_status)

    def open_log_stream(self, stream: str) -> bool:
        """Create the zone's log group (once) and ``stream``; False when CloudWatch Logs refused."""
        try:
            with self._group_lock:
                if not self._group_ready:
                    self._create(self.logs.create_log_group, logGroupName=self.log_group)
                    self._group_ready = True
            self._create(self.logs.create_log_stream, logGroupName=self.log_group, logStreamName=stream)
        except (ClientError, BotoCoreError) as exc:
            logger.warning("log stream not created group=%s stream=%s error=%s", self.log_group, stream, exc)
            return False
        return True

    @staticmethod
    def _create(call: Callable[..., Any], **kwargs: str) -> None:
        try:
            call(**kwargs)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceAlreadyExistsException":
                raise
