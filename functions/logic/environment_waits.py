"""The environment as a job's prerequisite (``functions.logic.waits``): a job submitted while its
environment builds waits for that environment (``domain.environments.environment_prerequisite``), is
released when it is Ready, taking its build's hash, and ends when it Failed or was deleted."""

from __future__ import annotations

from dataclasses import replace

from functions.domain.environments import (
    Environment,
    parse_environment_prerequisite,
    prerequisite_state,
)
from functions.domain.errors import DependencyFailed
from functions.domain.jobs import Job
from functions.domain.prerequisites import Prerequisite, PrerequisiteState, Standing
from functions.ports import Services


def stored_environment(
    services: Services, account_id: str, name: str | None, digest: str
) -> Environment | None:
    """The account's environment ``name``, or its unnamed one of spec hash ``digest`` (``name`` None);
    None when there is none. Raises ``DependencyFailed`` where environments are not configured."""
    store = services.environment_store
    if store is None:
        raise DependencyFailed("environments are not configured in this deployment")
    if name is None:
        return store.get_unnamed_environment(account_id, digest)
    return store.get_environment(account_id, name)


class EnvironmentChecker:
    """``waits.PrerequisiteChecker`` of ``PrerequisiteKind.ENVIRONMENT``."""

    def state(self, services: Services, prerequisite: Prerequisite) -> PrerequisiteState:
        """The environment's standing as stored now (``domain.environments.prerequisite_state``)."""
        account_id, name, digest = parse_environment_prerequisite(prerequisite)
        return prerequisite_state(prerequisite, stored_environment(services, account_id, name, digest))

    def give(self, job: Job, state: PrerequisiteState) -> Job:
        """The job with its environment's build hash (what the worker runs with)."""
        if state.standing is not Standing.MET or job.environment is None or state.value is None:
            return job
        return replace(job, environment=replace(job.environment, hash=state.value))
