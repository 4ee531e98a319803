"""Dedicated computes' vCPUs on this host: the compute environments and job queues of the service's
dedicated computes, each a reservation of the host's vCPU slots, and where a job's slots go back to.

A compute environment scaled to N vCPUs (``minvCpus = maxvCpus = N``) reserves N of the host's
vCPU slots (all computes together at most all but one: the shared queue always keeps a vCPU, unless
the host has only one), taking them from the shared pool as they come free (before any queued job
of the shared queue); a job submitted to its queue starts on those slots at once, without waiting
for shared capacity. A compute that gets fewer than N holds what is left; one that can get none
(the other computes hold all the host may give) reports its environment ``INVALID`` with the
reason, as AWS Batch reports an environment it cannot build, and reserves nothing (the service
marks the compute Failed, not charged for its start). Scaled to 0, its free slots go back to the
shared pool at once and its busy ones when their jobs end. The Batch API over these records is
``computes.LocalComputeEnvironments``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from functions.domain.errors import BatchRefused
from remote_batch_local.executor.constants import logger
from remote_batch_local.executor.job import BatchJob
from remote_batch_local.executor.state import ExecutorState


@dataclass(eq=False)
class DedicatedEnvironment:
    """One emulated compute environment of a dedicated compute (guarded by the state's lock).

    Attributes
    ----------
    name : str
        Its name (the compute's Batch name).
    status, state : str
        AWS Batch's ``status`` (CREATING, UPDATING, VALID, INVALID, DELETING) and ``state``
        (ENABLED, DISABLED).
    target : int
        The vCPUs it is scaled to (``minvCpus = maxvCpus``).
    max_vcpus : int
        Its ``maxvCpus`` as described.
    reason : str | None
        Its ``statusReason`` (why it is INVALID).
    reserved, free : set[int]
        The vCPU slots it holds, and those of them no job runs on.
    runnable : deque[BatchJob]
        Its queue's jobs waiting for its slots, in submission order.
    """

    name: str
    status: str = "CREATING"
    state: str = "ENABLED"
    target: int = 0
    max_vcpus: int = 0
    reason: str | None = None
    reserved: set[int] = field(default_factory=set)
    free: set[int] = field(default_factory=set)
    runnable: deque[BatchJob] = field(default_factory=deque)


@dataclass(eq=False)
class DedicatedQueue:
    """One emulated job queue of a dedicated compute: its name, its environment's, its status and
    state."""

    name: str
    environment: str
    status: str = "CREATING"
    state: str = "ENABLED"


def queue_name(job_queue: str) -> str:
    """A queue's name from its name or ARN (``arn:aws:batch:...:job-queue/<name>``)."""
    return job_queue.rsplit("/", 1)[-1]


def refusal(message: str) -> BatchRefused:
    """AWS Batch's ``ClientException`` (a 400: the same request never succeeds), as the adapter
    raises it."""
    return BatchRefused(f"AWS Batch (local) ClientException: {message}")


class ComputePools:
    """The dedicated compute environments and queues of every region, and their vCPU slots.

    Attributes
    ----------
    environments : dict[tuple[str, str], DedicatedEnvironment]
        By (region, name).
    queues : dict[tuple[str, str], DedicatedQueue]
        By (region, name).
    """

    def __init__(self, state: ExecutorState, host_vcpus: int) -> None:
        self._state = state
        self._host_vcpus = host_vcpus
        self.environments: dict[tuple[str, str], DedicatedEnvironment] = {}
        self.queues: dict[tuple[str, str], DedicatedQueue] = {}

    def check_submit(self, region: str, job_queue: str) -> bool:
        """Whether ``job_queue`` (a name or ARN) is a dedicated compute's queue in ``region``: True when
        it is and takes jobs; False for any other queue (the fleet's to check).

        Raises ``BatchRefused`` (AWS Batch's ``ClientException``, as SubmitJob answers) when it is
        a compute's queue that is DISABLED or being deleted."""
        with self._state.cond:
            queue = self.queues.get((region, queue_name(job_queue)))
            if queue is None:
                return False
            if queue.state != "ENABLED" or queue.status in ("DELETING", "DELETED"):
                raise refusal(
                    f"Job queue {queue.name} is {queue.state} ({queue.status}): it takes no new jobs."
                )
        return True

    def pool_of_locked(self, job: BatchJob) -> DedicatedEnvironment | None:
        """The environment whose queue ``job`` was submitted to (None: the shared queue)."""
        queue = self.queues.get((job.gateway.region, queue_name(job.submission.job_queue)))
        if queue is None:
            return None
        return self.environments.get((job.gateway.region, queue.environment))

    def waiting_queues_locked(self) -> Iterable[deque[BatchJob]]:
        """Every queue a job may wait in: the shared ones and each dedicated environment's."""
        state = self._state
        return (state.submitted, state.runnable, *(e.runnable for e in self.environments.values()))

    def return_slots_locked(self, slots: Iterable[int]) -> None:
        """Slots a job leaves go back to the environment that still reserves them, else to the host's."""
        for slot in slots:
            owner = next((e for e in self.environments.values() if slot in e.reserved), None)
            (owner.free if owner is not None else self._state.free_slots).add(slot)
        self._state.cond.notify_all()

    def _others_locked(self, environment: DedicatedEnvironment) -> int:
        """The vCPU slots the other dedicated computes reserve."""
        return sum(len(e.reserved) for e in self.environments.values() if e is not environment)

    def capped_locked(self, environment: DedicatedEnvironment) -> int:
        """What the environment may hold: its target, within what the other computes leave of the
        host's vCPUs but the last one (the shared queue keeps one; on a 1-vCPU host a compute takes
        it). 0 when the others hold all a compute may have."""
        kept = 1 if self._host_vcpus > 1 else 0
        return max(0, min(environment.target, self._host_vcpus - kept - self._others_locked(environment)))

    def invalidate_if_starved_locked(self, environment: DedicatedEnvironment) -> None:
        """A scaled-up, VALID environment that can get no vCPU at all becomes ``INVALID`` (scaled to
        0, with the reason), so its compute fails rather than wait, billed, for capacity."""
        if environment.status != "VALID" or environment.target <= 0 or self.capped_locked(environment) > 0:
            return
        others = self._others_locked(environment)
        kept = " and the shared queue keeps 1" if self._host_vcpus > 1 else ""
        environment.reason = (
            f"Local stack: no vCPU left for it: {others} of the host's {self._host_vcpus} vCPUs are held by "
            f"other dedicated computes{kept}; stop another compute or raise REMOTE_BATCH_LOCAL_VCPUS"
        )
        environment.status = "INVALID"
        self.scale_locked(environment, 0)
        logger.info("compute environment invalid name=%s reason=%s", environment.name, environment.reason)

    def ready_locked(self) -> list[tuple[BatchJob, set[int]]]:
        """Top up each scaled-up environment's reservation from the free shared slots, then take its
        queued jobs (FIFO) that fit its free slots: each with the slots it starts on."""
        free_slots = self._state.free_slots
        ready: list[tuple[BatchJob, set[int]]] = []
        for environment in self.environments.values():
            missing = self.capped_locked(environment) - len(environment.reserved)
            if missing > 0 and free_slots:
                taken = set(sorted(free_slots)[:missing])
                free_slots.difference_update(taken)
                environment.reserved |= taken
                environment.free |= taken
            queue = environment.runnable
            available = len(environment.free)
            while queue and min(queue[0].vcpus, self.capped_locked(environment)) <= available and available:
                job = queue.popleft()
                job.vcpus = max(1, min(job.vcpus, self.capped_locked(environment)))
                available -= job.vcpus
                ready.append((job, environment.free))
        return ready

    @staticmethod
    def waiting_reason_locked(job: BatchJob, environment: DedicatedEnvironment) -> str | None:
        """Why a job joining a dedicated compute's queue now will not start at once, or None."""
        if environment.target == 0:
            return f"Waiting for dedicated compute {environment.name} to start"
        if job.vcpus > len(environment.free) or environment.runnable:
            return f"Waiting for {job.vcpus} vCPU of dedicated compute {environment.name}"
        return None

    def settle_locked(self, region: str) -> None:
        """Finish the asynchronous changes a describe now reports as done: one describe later."""
        for key, queue in list(self.queues.items()):
            if key[0] != region:
                continue
            if queue.status == "DELETING":
                del self.queues[key]
            elif queue.status in ("CREATING", "UPDATING"):
                queue.status = "VALID"
        for key, environment in list(self.environments.items()):
            if key[0] != region:
                continue
            if environment.status == "DELETING":
                self.scale_locked(environment, 0)
                del self.environments[key]
            elif environment.status in ("CREATING", "UPDATING"):
                environment.status = "VALID"

    def scale_locked(self, environment: DedicatedEnvironment, target: int) -> None:
        """Scale ``environment`` to ``target`` vCPUs: to 0, its free slots go back to the shared pool
        at once (its busy ones when their jobs end); above, any surplus free slots go back."""
        free_slots = self._state.free_slots
        environment.target = target
        if target == 0:
            free_slots |= environment.free
            environment.reserved = set()
            environment.free = set()
        else:
            surplus = len(environment.reserved) - self.capped_locked(environment)
            if surplus > 0:
                give = set(sorted(environment.free)[:surplus])
                environment.free -= give
                environment.reserved -= give
                free_slots |= give
        self._state.cond.notify_all()
