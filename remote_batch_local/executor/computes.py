"""Dedicated computes on this host, as AWS Batch's API answers them: the compute environments and job
queues of the service's dedicated computes (``functions.ports.ComputeEnvironments``), over the vCPU
reservations of ``pools.ComputePools``.

How its vCPUs are reserved is ``pools``' docstring. Like AWS Batch, every change is
asynchronous: a created or updated environment or queue reports ``CREATING``/``UPDATING`` until the
next describe, then ``VALID``; a deleted one ``DELETING``, then it is gone. The ordering rules are
AWS Batch's: a queue needs a ``VALID`` environment; only a ``DISABLED`` queue may be deleted; only a
``DISABLED`` environment no queue uses may be deleted (else ``ClientException``, as
``DependencyFailed``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from functions.domain.computes import ComputeStatus
from functions.domain.machine_classes import MachineClass
from functions.logic.computes import batch_name
from functions.ports import EnvironmentState, QueueState, Services
from remote_batch_local.executor.constants import logger
from remote_batch_local.executor.ending import JobEnding
from remote_batch_local.executor.pools import ComputePools, DedicatedEnvironment, DedicatedQueue, refusal
from remote_batch_local.executor.state import ExecutorState
from remote_batch_local.recovery_computes import recover_dedicated_computes

MAX_NAME = 128


class LocalComputeEnvironments:
    """``ComputeEnvironments`` of one region, on the executor's emulation (``pools.ComputePools``)."""

    def __init__(self, state: ExecutorState, pools: ComputePools, ending: JobEnding, region: str) -> None:
        self._state = state
        self._pools = pools
        self._ending = ending
        self.region = region

    def _key(self, name: str) -> tuple[str, str]:
        return (self.region, name)

    def create_environment(self, name: str, machine: MachineClass) -> None:
        """CreateComputeEnvironment (``CREATING``; ``maxvCpus`` the class's vCPUs, no reservation)."""
        if len(name) > MAX_NAME:
            raise refusal(f"compute environment name {name} is longer than {MAX_NAME} characters")
        with self._state.cond:
            if self._key(name) not in self._pools.environments:
                self._pools.environments[self._key(name)] = DedicatedEnvironment(
                    name=name, max_vcpus=machine.vcpus
                )
                logger.info("compute environment created name=%s", name)

    def describe_environment(self, name: str) -> EnvironmentState | None:
        """The environment; ``desiredvCpus`` is what it reserves (its target once it holds all the
        host can give it)."""
        pools = self._pools
        with self._state.cond:
            environment = pools.environments.get(self._key(name))
            if environment is None:
                return None
            pools.invalidate_if_starved_locked(environment)
            state = EnvironmentState(
                status=environment.status,
                state=environment.state,
                min_vcpus=environment.target,
                max_vcpus=environment.max_vcpus,
                desired_vcpus=environment.target
                if len(environment.reserved) >= pools.capped_locked(environment) > 0
                else len(environment.reserved),
                reason=environment.reason,
            )
            pools.settle_locked(self.region)
            return state

    def _environment(self, name: str) -> DedicatedEnvironment:
        found = self._pools.environments.get(self._key(name))
        if found is None or found.status == "DELETING":
            raise refusal(f"no compute environment {name}")
        return found

    def set_capacity(self, name: str, vcpus: int) -> None:
        """UpdateComputeEnvironment min = max = ``vcpus`` (``UPDATING`` until the next describe)."""
        with self._state.cond:
            environment = self._environment(name)
            environment.status = "UPDATING"
            environment.max_vcpus = vcpus
            self._pools.scale_locked(environment, vcpus)
            logger.info("compute environment scaled name=%s vcpus=%d", name, vcpus)

    def disable_environment(self, name: str) -> None:
        """UpdateComputeEnvironment ``state=DISABLED``."""
        with self._state.cond:
            environment = self._environment(name)
            environment.state, environment.status = "DISABLED", "UPDATING"

    def delete_environment(self, name: str) -> None:
        """DeleteComputeEnvironment: only a DISABLED environment no queue uses."""
        with self._state.cond:
            environment = self._environment(name)
            if environment.state != "DISABLED":
                raise refusal(f"compute environment {name} must be DISABLED to be deleted")
            if any(q.environment == name for k, q in self._pools.queues.items() if k[0] == self.region):
                raise refusal(f"compute environment {name} is used by a job queue")
            environment.status = "DELETING"

    def create_queue(self, name: str, environment: str) -> None:
        """CreateJobQueue on a VALID environment."""
        with self._state.cond:
            if self._key(name) in self._pools.queues:
                return
            if self._environment(environment).status != "VALID":
                raise refusal(f"compute environment {environment} is not VALID")
            self._pools.queues[self._key(name)] = DedicatedQueue(name=name, environment=environment)

    def describe_queue(self, name: str) -> QueueState | None:
        """The queue, or None."""
        with self._state.cond:
            queue = self._pools.queues.get(self._key(name))
            state = None if queue is None else QueueState(status=queue.status, state=queue.state)
            self._pools.settle_locked(self.region)
            return state

    def _queue(self, name: str) -> DedicatedQueue:
        found = self._pools.queues.get(self._key(name))
        if found is None or found.status == "DELETING":
            raise refusal(f"no job queue {name}")
        return found

    def disable_queue(self, name: str) -> None:
        """UpdateJobQueue ``state=DISABLED``."""
        with self._state.cond:
            queue = self._queue(name)
            queue.state, queue.status = "DISABLED", "UPDATING"

    def delete_queue(self, name: str) -> None:
        """DeleteJobQueue: only a DISABLED queue; its waiting jobs fail as AWS Batch fails them."""
        with self._state.cond:
            queue = self._queue(name)
            if queue.state != "DISABLED":
                raise refusal(f"job queue {name} must be DISABLED to be deleted")
            queue.status = "DELETING"
            environment = self._pools.environments.get(self._key(queue.environment))
            waiting = list(environment.runnable) if environment is not None else []
            for job in waiting:
                self._ending.terminate_locked(job, "The job queue was deleted")

    def restore(self, name: str, vcpus: int, started: bool) -> None:
        """Remake a dedicated compute's environment and queue after a start on kept state: ``VALID``
        at once, scaled to ``vcpus`` when ``started`` (else 0)."""
        key = self._key(name)
        with self._state.cond:
            environment = self._pools.environments.setdefault(
                key, DedicatedEnvironment(name=name, status="VALID", max_vcpus=vcpus)
            )
            self._pools.queues.setdefault(key, DedicatedQueue(name=name, environment=name, status="VALID"))
            environment.max_vcpus = vcpus if started else environment.max_vcpus
            self._pools.scale_locked(environment, vcpus if started else 0)


class ComputeBackend(Protocol):
    """What the restore needs of the executor (``LocalBatchExecutor`` is one)."""

    def compute_environments(self, region: str) -> LocalComputeEnvironments:
        """The ``ComputeEnvironments`` of one region."""


def restore_dedicated_computes(
    services: Services, executor: ComputeBackend, last_alive: datetime | None = None
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
        started = compute.status in (ComputeStatus.STARTING, ComputeStatus.RUNNING)
        executor.compute_environments(zone.region).restore(
            batch_name(services, compute), compute.vcpus, started
        )
        remade += 1
    if remade:
        logger.info("dedicated computes restored count=%d", remade)
    return remade
