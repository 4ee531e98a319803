"""The local executor's job queues and compute environments, answering as AWS Batch does.

Per region (geo zone) the local stack has one job queue per machine class (``<prefix><class>``) and one
compute environment per machine family (``<prefix><family>``: Basic, Memory, Compute, GPU), each
queue on its family's environment, as the deployed queues share compute pools. What AWS Batch does,
and this does too (AWS Batch API reference):
- ``UpdateJobQueue state=DISABLED``: SubmitJob to the queue fails with ``ClientException``; "jobs that
  are already in the queue can finish" (they are still scheduled and run).
- ``UpdateComputeEnvironment computeResources.maxvCpus``: the environment runs at most that many vCPUs
  of jobs at once; jobs of its queues wait RUNNABLE beyond it (lowering it stops nothing running).
- DescribeJobQueues / DescribeComputeEnvironments: names or ARNs in, the ones known out.

An executor built without queues (tests of the executor alone) takes jobs for any queue, unlimited
by any environment.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from botocore.exceptions import ClientError

from functions.domain.errors import BatchRefused
from functions.domain.fleet import machine_family
from functions.ports import ComputeEnvironmentInfo, JobQueueInfo


def client_exception(operation: str, message: str) -> BatchRefused:
    """What the AWS adapter raises for a ``ClientException`` of ``operation`` (AWS Batch's 400: the
    same request never succeeds): ``BatchRefused`` whose cause is the ``ClientError`` AWS Batch would
    have answered."""
    error = ClientError({"Error": {"Code": "ClientException", "Message": message}}, operation)
    failure = BatchRefused(f"AWS Batch refused to {operation}: {message}")
    failure.__cause__ = error
    return failure


@dataclass(frozen=True, slots=True)
class _Queue:
    info: JobQueueInfo
    region: str


@dataclass(frozen=True, slots=True)
class _Environment:
    info: ComputeEnvironmentInfo
    region: str


class LocalFleet:
    """Job queues and compute environments of every region the executor serves.

    Parameters
    ----------
    account : str
        The AWS account id in ARNs.
    host_vcpus : int
        Each compute environment's ``maxvCpus`` at start (the host's vCPUs: no limit beyond it).
    """

    def __init__(self, account: str, host_vcpus: int) -> None:
        self._account = account
        self._host_vcpus = host_vcpus
        self._lock = threading.Lock()
        self._queues: dict[str, _Queue] = {}
        self._environments: dict[str, _Environment] = {}
        self._in_use: dict[str, int] = {}

    def _arn(self, region: str, kind: str, name: str) -> str:
        return f"arn:aws:batch:{region}:{self._account}:{kind}/{name}"

    def add_zone(self, region: str, job_queues: Mapping[str, str]) -> None:
        """Create the queues of one region: machine class → queue name or ARN (``<prefix><class>``),
        each on its family's environment ``<prefix><family>`` (made once)."""
        with self._lock:
            for machine_class, queue in job_queues.items():
                name = queue.rsplit("/", 1)[-1]
                prefix = name[: -len(machine_class)] if name.endswith(machine_class) else f"{name}-"
                ce_name = f"{prefix}{machine_family(machine_class)}"
                ce_arn = self._arn(region, "compute-environment", ce_name)
                if ce_arn not in self._environments:
                    self._environments[ce_arn] = _Environment(
                        ComputeEnvironmentInfo(ce_name, ce_arn, "ENABLED", "VALID", self._host_vcpus), region
                    )
                arn = self._arn(region, "job-queue", name)
                if arn not in self._queues:
                    self._queues[arn] = _Queue(JobQueueInfo(name, arn, "ENABLED", "VALID", (ce_arn,)), region)

    @property
    def configured(self) -> bool:
        """Whether any queue was added (else every queue is taken, without limits)."""
        with self._lock:
            return bool(self._queues)

    def _queue_locked(self, region: str, queue: str) -> _Queue | None:
        arn = queue if queue.startswith("arn:") else self._arn(region, "job-queue", queue)
        return self._queues.get(arn)

    def _environment_locked(self, region: str, environment: str) -> _Environment | None:
        arn = (
            environment
            if environment.startswith("arn:")
            else self._arn(region, "compute-environment", environment)
        )
        return self._environments.get(arn)

    # -- what SubmitJob and the scheduler ask ------------------------------------------------------
    def check_submit(self, region: str, queue: str, share_identifier: str | None = None) -> None:
        """Raise what SubmitJob answers for a queue that does not exist or is DISABLED, or for a job
        without a ``shareIdentifier`` (the fleet's queues have a fair-share scheduling policy, as the
        deployed ones: SubmitJob API reference, ``shareIdentifier``)."""
        with self._lock:
            if not self._queues:
                return
            found = self._queue_locked(region, queue)
            if found is None:
                raise client_exception("SubmitJob", f"Job queue {queue} does not exist.")
            if share_identifier is None:
                raise client_exception(
                    "SubmitJob",
                    f"Job queue {found.info.name} has a fair-share scheduling policy: shareIdentifier is "
                    "required.",
                )
            if found.info.state != "ENABLED":
                raise client_exception(
                    "SubmitJob", f"Job queue {found.info.name} is DISABLED: it takes no new jobs."
                )

    def environment_of(self, region: str, queue: str) -> str | None:
        """The ARN of the environment a queue's jobs run on (None: no environment limits it)."""
        with self._lock:
            found = self._queue_locked(region, queue)
            return found.info.compute_environments[0] if found else None

    def has_room(self, environment: str | None, vcpus: int) -> bool:
        """Whether a job of ``vcpus`` fits under the environment's ``maxvCpus`` now."""
        if environment is None:
            return True
        with self._lock:
            found = self._environments.get(environment)
            limit = found.info.max_vcpus if found is not None else None
            return limit is None or self._in_use.get(environment, 0) + vcpus <= limit

    def claim(self, environment: str | None, vcpus: int) -> None:
        """Count a starting job's vCPUs against its environment."""
        if environment is not None:
            with self._lock:
                self._in_use[environment] = self._in_use.get(environment, 0) + vcpus

    def release(self, environment: str | None, vcpus: int) -> None:
        """Give an ended job's vCPUs back to its environment."""
        if environment is not None and vcpus:
            with self._lock:
                self._in_use[environment] = max(0, self._in_use.get(environment, 0) - vcpus)

    def in_use(self, environment: str) -> int:
        """vCPUs of the environment's jobs running now."""
        with self._lock:
            return self._in_use.get(environment, 0)

    # -- the Batch API ----------------------------------------------------------------------------
    def describe_job_queues(self, region: str, job_queues: Sequence[str]) -> list[JobQueueInfo]:
        """DescribeJobQueues: the queues known, in the order asked."""
        with self._lock:
            found = [q.info for q in (self._queue_locked(region, name) for name in job_queues) if q]
        return list({info.arn: info for info in found}.values())

    def set_job_queue_state(self, region: str, job_queue: str, state: str) -> None:
        """UpdateJobQueue ``state``. Raises ``DependencyFailed`` (ClientException) for an unknown
        queue or state."""
        if state not in ("ENABLED", "DISABLED"):
            raise client_exception("UpdateJobQueue", f"state {state} must be one of ENABLED | DISABLED")
        with self._lock:
            found = self._queue_locked(region, job_queue)
            if found is None:
                raise client_exception("UpdateJobQueue", f"Job queue {job_queue} does not exist.")
            self._queues[found.info.arn] = replace(found, info=replace(found.info, state=state))

    def describe_compute_environments(
        self, region: str, environments: Sequence[str]
    ) -> list[ComputeEnvironmentInfo]:
        """DescribeComputeEnvironments: the environments known, in the order asked."""
        with self._lock:
            found = [e.info for e in (self._environment_locked(region, name) for name in environments) if e]
        return list({info.arn: info for info in found}.values())

    def set_max_vcpus(self, region: str, environment: str, max_vcpus: int) -> None:
        """UpdateComputeEnvironment ``computeResources.maxvCpus``. Raises ``DependencyFailed``
        (ClientException) for an unknown environment or a negative value."""
        if max_vcpus < 0:
            raise client_exception("UpdateComputeEnvironment", "maxvCpus must be at least minvCpus (0).")
        with self._lock:
            found = self._environment_locked(region, environment)
            if found is None:
                raise client_exception(
                    "UpdateComputeEnvironment", f"Compute environment {environment} does not exist."
                )
            self._environments[found.info.arn] = replace(found, info=replace(found.info, max_vcpus=max_vcpus))
