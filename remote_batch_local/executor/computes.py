"""Dedicated computes on this host: AWS Batch's compute environments and job queues of the service's
dedicated computes (``functions.ports.ComputeEnvironments``), emulated by reserving vCPU slots.

A compute environment scaled to N vCPUs (``minvCpus = maxvCpus = N``) reserves N of the host's
vCPU slots (all computes together at most all but one: the shared queue always keeps a vCPU, unless
the host has only one), taking them from the shared pool as they come free (before any queued job
of the shared queue); a job submitted to its queue starts on those slots at once, without waiting
for shared capacity. A compute that gets fewer than N holds what is left; one that can get none
(the other computes hold all the host may give) reports its environment ``INVALID`` with the
reason, as AWS Batch reports an environment it cannot build, and reserves nothing (the service
marks the compute Failed, not charged for its start). Scaled to 0, its free slots go back to the
shared pool at once and its busy ones when their jobs end. Like AWS Batch, every change is
asynchronous: a created or updated environment or queue reports ``CREATING``/``UPDATING`` until the
next describe, then ``VALID``; a deleted one ``DELETING``, then it is gone. The ordering rules are
AWS Batch's: a queue needs a ``VALID`` environment; only a ``DISABLED`` queue may be deleted; only a
``DISABLED`` environment no queue uses may be deleted (else ``ClientException``, as
``DependencyFailed``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from functions.domain.computes import ComputeStatus
from functions.domain.errors import BatchRefused
from functions.domain.machine_classes import MachineClass
from functions.logic.computes import batch_name
from functions.ports import EnvironmentState, QueueState, Services
from remote_batch_local.executor.constants import logger
from remote_batch_local.executor.core import ExecutorCore
from remote_batch_local.executor.job import _Job
from remote_batch_local.recovery_computes import recover_dedicated_computes

if TYPE_CHECKING:
    from remote_batch_local.executor.batch_api import LocalBatchExecutor

MAX_NAME = 128


@dataclass(eq=False)
class _Environment:
    """One emulated compute environment (guarded by the executor's lock)."""

    name: str
    status: str = "CREATING"
    state: str = "ENABLED"
    target: int = 0
    max_vcpus: int = 0
    reason: str | None = None
    reserved: set[int] = field(default_factory=set)
    free: set[int] = field(default_factory=set)
    runnable: deque[_Job] = field(default_factory=deque)


@dataclass(eq=False)
class _Queue:
    """One emulated job queue."""

    name: str
    environment: str
    status: str = "CREATING"
    state: str = "ENABLED"


def _queue_name(job_queue: str) -> str:
    """A queue's name from its name or ARN (``arn:aws:batch:...:job-queue/<name>``)."""
    return job_queue.rsplit("/", 1)[-1]


def _refuse(message: str) -> BatchRefused:
    """AWS Batch's ``ClientException`` (a 400: the same request never succeeds), as the adapter
    raises it."""
    return BatchRefused(f"AWS Batch (local) ClientException: {message}")


class ComputePools(ExecutorCore):
    """The executor's dedicated compute environments and queues, per region, and their slots."""

    _environments: dict[tuple[str, str], _Environment]
    _compute_queues: dict[tuple[str, str], _Queue]

    def _init_pools(self) -> None:
        self._environments = {}
        self._compute_queues = {}

    def check_compute_submit(self, region: str, job_queue: str) -> bool:
        """Whether ``job_queue`` (a name or ARN) is a dedicated compute's queue in ``region``: True when
        it is and takes jobs; False for any other queue (the fleet's to check).

        Raises ``DependencyFailed`` (AWS Batch's ``ClientException``, as SubmitJob answers) when it is
        a compute's queue that is DISABLED or being deleted."""
        with self._cond:
            queue = self._compute_queues.get((region, _queue_name(job_queue)))
            if queue is None:
                return False
            if queue.state != "ENABLED" or queue.status in ("DELETING", "DELETED"):
                raise _refuse(
                    f"Job queue {queue.name} is {queue.state} ({queue.status}): it takes no new jobs."
                )
        return True

    # -- the scheduler's side ---------------------------------------------------------------------
    def _pool_of_locked(self, job: _Job) -> _Environment | None:
        """The environment whose queue ``job`` was submitted to (None: the shared queue)."""
        queue = self._compute_queues.get((job.gateway.region, _queue_name(job.submission.job_queue)))
        if queue is None:
            return None
        return self._environments.get((job.gateway.region, queue.environment))

    def _queues_locked(self) -> Iterable[deque[_Job]]:
        return (self._submitted, self._runnable, *(e.runnable for e in self._environments.values()))

    def _return_slots_locked(self, slots: Iterable[int]) -> None:
        """Slots a job leaves go back to the environment that still reserves them, else to the host's."""
        for slot in slots:
            owner = next((e for e in self._environments.values() if slot in e.reserved), None)
            (owner.free if owner is not None else self._free_slots).add(slot)
        self._cond.notify_all()

    def _others_locked(self, environment: _Environment) -> int:
        """The vCPU slots the other dedicated computes reserve."""
        return sum(len(e.reserved) for e in self._environments.values() if e is not environment)

    def _capped(self, environment: _Environment) -> int:
        """What the environment may hold: its target, within what the other computes leave of the
        host's vCPUs but the last one (the shared queue keeps one; on a 1-vCPU host a compute takes
        it). 0 when the others hold all a compute may have."""
        kept = 1 if self.vcpus > 1 else 0
        return max(0, min(environment.target, self.vcpus - kept - self._others_locked(environment)))

    def _invalidate_if_starved_locked(self, environment: _Environment) -> None:
        """A scaled-up, VALID environment that can get no vCPU at all becomes ``INVALID`` (scaled to
        0, with the reason), so its compute fails rather than wait, billed, for capacity."""
        if environment.status != "VALID" or environment.target <= 0 or self._capped(environment) > 0:
            return
        others = self._others_locked(environment)
        kept = " and the shared queue keeps 1" if self.vcpus > 1 else ""
        environment.reason = (
            f"Local stack: no vCPU left for it: {others} of the host's {self.vcpus} vCPUs are held by "
            f"other dedicated computes{kept}; stop another compute or raise REMOTE_BATCH_LOCAL_VCPUS"
        )
        environment.status = "INVALID"
        self._scale_locked(environment, 0)
        logger.info("compute environment invalid name=%s reason=%s", environment.name, environment.reason)

    def _ready_on_pools_locked(self) -> list[tuple[_Job, set[int]]]:
        """Top up each scaled-up environment's reservation from the free shared slots, then take its
        queued jobs (FIFO) that fit its free slots: each with the slots it starts on."""
        ready: list[tuple[_Job, set[int]]] = []
        for environment in self._environments.values():
            missing = self._capped(environment) - len(environment.reserved)
            if missing > 0 and self._free_slots:
                taken = set(sorted(self._free_slots)[:missing])
                self._free_slots.difference_update(taken)
                environment.reserved |= taken
                environment.free |= taken
            queue = environment.runnable
            available = len(environment.free)
            while queue and min(queue[0].vcpus, self._capped(environment)) <= available and available:
                job = queue.popleft()
                job.vcpus = max(1, min(job.vcpus, self._capped(environment)))
                available -= job.vcpus
                ready.append((job, environment.free))
        return ready

    def _announce_on_pool_locked(self, job: _Job, environment: _Environment) -> None:
        """PENDING and RUNNABLE of a job on a dedicated compute's queue, and its place in that queue."""
        self._publish_locked(job, "PENDING", job.note)
        waiting = None
        if environment.target == 0:
            waiting = f"Waiting for dedicated compute {environment.name} to start"
        elif job.vcpus > len(environment.free) or environment.runnable:
            waiting = f"Waiting for {job.vcpus} vCPU of dedicated compute {environment.name}"
        reason = ". ".join(r for r in (job.note, waiting) if r) or None
        self._publish_locked(job, "RUNNABLE", reason)
        environment.runnable.append(job)

    # -- the Batch API's side (``LocalComputeEnvironments``) -----------------------------------------
    def _settle_locked(self, region: str) -> None:
        """Finish the asynchronous changes a describe now reports as done: one describe later."""
        for key, queue in list(self._compute_queues.items()):
            if key[0] != region:
                continue
            if queue.status == "DELETING":
                del self._compute_queues[key]
            elif queue.status in ("CREATING", "UPDATING"):
                queue.status = "VALID"
        for key, environment in list(self._environments.items()):
            if key[0] != region:
                continue
            if environment.status == "DELETING":
                self._scale_locked(environment, 0)
                del self._environments[key]
            elif environment.status in ("CREATING", "UPDATING"):
                environment.status = "VALID"

    def _scale_locked(self, environment: _Environment, target: int) -> None:
        environment.target = target
        if target == 0:
            self._free_slots |= environment.free
            environment.reserved -= environment.free
            # Busy slots return to the shared pool when their jobs end.
            environment.reserved = set()
            environment.free = set()
        else:
            surplus = len(environment.reserved) - self._capped(environment)
            if surplus > 0:
                give = set(sorted(environment.free)[:surplus])
                environment.free -= give
                environment.reserved -= give
                self._free_slots |= give
        self._cond.notify_all()


class LocalComputeEnvironments:
    """``ComputeEnvironments`` of one region, on the executor's emulation (``ComputePools``)."""

    def __init__(self, executor: LocalBatchExecutor, region: str) -> None:
        self._executor = executor
        self.region = region

    def _key(self, name: str) -> tuple[str, str]:
        return (self.region, name)

    def create_environment(self, name: str, machine: MachineClass) -> None:
        """CreateComputeEnvironment (``CREATING``; ``maxvCpus`` the class's vCPUs, no reservation)."""
        if len(name) > MAX_NAME:
            raise _refuse(f"compute environment name {name} is longer than {MAX_NAME} characters")
        executor = self._executor
        with executor._cond:
            if self._key(name) not in executor._environments:
                executor._environments[self._key(name)] = _Environment(name=name, max_vcpus=machine.vcpus)
                logger.info("compute environment created name=%s", name)

    def describe_environment(self, name: str) -> EnvironmentState | None:
        """The environment; ``desiredvCpus`` is what it reserves (its target once it holds all the
        host can give it)."""
        executor = self._executor
        with executor._cond:
            environment = executor._environments.get(self._key(name))
            if environment is None:
                return None
            executor._invalidate_if_starved_locked(environment)
            state = EnvironmentState(
                status=environment.status,
                state=environment.state,
                min_vcpus=environment.target,
                max_vcpus=environment.max_vcpus,
                desired_vcpus=environment.target
                if len(environment.reserved) >= executor._capped(environment) > 0
                else len(environment.reserved),
                reason=environment.reason,
            )
            executor._settle_locked(self.region)
            return state

    def _environment(self, name: str) -> _Environment:
        found = self._executor._environments.get(self._key(name))
        if found is None or found.status == "DELETING":
            raise _refuse(f"no compute environment {name}")
        return found

    def set_capacity(self, name: str, vcpus: int) -> None:
        """UpdateComputeEnvironment min = max = ``vcpus`` (``UPDATING`` until the next describe)."""
        executor = self._executor
        with executor._cond:
            environment = self._environment(name)
            environment.status = "UPDATING"
            environment.max_vcpus = vcpus
            executor._scale_locked(environment, vcpus)
            logger.info("compute environment scaled name=%s vcpus=%d", name, vcpus)

    def disable_environment(self, name: str) -> None:
        """UpdateComputeEnvironment ``state=DISABLED``."""
        with self._executor._cond:
            environment = self._environment(name)
            environment.state, environment.status = "DISABLED", "UPDATING"

    def delete_environment(self, name: str) -> None:
        """DeleteComputeEnvironment: only a DISABLED environment no queue uses."""
        executor = self._executor
        with executor._cond:
            environment = self._environment(name)
            if environment.state != "DISABLED":
                raise _refuse(f"compute environment {name} must be DISABLED to be deleted")
            if any(q.environment == name for k, q in executor._compute_queues.items() if k[0] == self.region):
                raise _refuse(f"compute environment {name} is used by a job queue")
            environment.status = "DELETING"

    def create_queue(self, name: str, environment: str) -> None:
        """CreateJobQueue on a VALID environment."""
        executor = self._executor
        with executor._cond:
            if self._key(name) in executor._compute_queues:
                return
            if self._environment(environment).status != "VALID":
                raise _refuse(f"compute environment {environment} is not VALID")
            executor._compute_queues[self._key(name)] = _Queue(name=name, environment=environment)

    def describe_queue(self, name: str) -> QueueState | None:
        """The queue, or None."""
        executor = self._executor
        with executor._cond:
            queue = executor._compute_queues.get(self._key(name))
            state = None if queue is None else QueueState(status=queue.status, state=queue.state)
            executor._settle_locked(self.region)
            return state

    def _queue(self, name: str) -> _Queue:
        found = self._executor._compute_queues.get(self._key(name))
        if found is None or found.status == "DELETING":
            raise _refuse(f"no job queue {name}")
        return found

    def disable_queue(self, name: str) -> None:
        """UpdateJobQueue ``state=DISABLED``."""
        with self._executor._cond:
            queue = self._queue(name)
            queue.state, queue.status = "DISABLED", "UPDATING"

    def delete_queue(self, name: str) -> None:
        """DeleteJobQueue: only a DISABLED queue; its waiting jobs fail as AWS Batch fails them."""
        executor = self._executor
        with executor._cond:
            queue = self._queue(name)
            if queue.state != "DISABLED":
                raise _refuse(f"job queue {name} must be DISABLED to be deleted")
            queue.status = "DELETING"
            environment = executor._environments.get(self._key(queue.environment))
            waiting = list(environment.runnable) if environment is not None else []
            for job in waiting:
                executor._terminate_locked(job, "The job queue was deleted")


def restore_dedicated_computes(
    services: Services, executor: LocalBatchExecutor, last_alive: datetime | None = None
) -> int:
    """After a start of the local stack on kept state: first bill each compute the last run left
    started up to ``last_alive`` (the last run's last sign of life) and stop it
    (``recovery_computes``: its emulated capacity died with that run), then remake the environment
    and queue of every dedicated compute the store has (the executor keeps them in memory only),
    ``VALID`` at once and scaled as the compute's status says (Starting/Running: its vCPUs; others
    0). A compute being created or deleted is left to the meter's next tick. Returns how many were
    remade."""
    store = services.compute_store
    if store is None:
        return 0
    recover_dedicated_computes(services, last_alive)
    remade = 0
    for compute in store.list_all_computes():
        if compute.status in (ComputeStatus.CREATING, ComputeStatus.DELETING):
            continue
        zone = services.zones.get(compute.geo_zone)
        if zone is None:
            continue
        name = batch_name(services, compute)
        key = (zone.region, name)
        started = compute.status in (ComputeStatus.STARTING, ComputeStatus.RUNNING)
        with executor._cond:
            environment = executor._environments.setdefault(
                key, _Environment(name=name, status="VALID", max_vcpus=compute.vcpus)
            )
            executor._compute_queues.setdefault(key, _Queue(name=name, environment=name, status="VALID"))
            environment.max_vcpus = compute.vcpus if started else environment.max_vcpus
            executor._scale_locked(environment, compute.vcpus if started else 0)
        remade += 1
    if remade:
        logger.info("dedicated computes restored count=%d", remade)
    return remade
