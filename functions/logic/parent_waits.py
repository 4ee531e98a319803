"""A parent job as its child's prerequisite (``functions.logic.waits``; the rule of one parent is
``domain.dependencies.parent_state``): the child waits while the parent is not final, is released
once every parent ended as its condition asks, and ends when one ended the other way or is gone."""

from __future__ import annotations

from collections.abc import Sequence

from functions.domain.dependencies import Condition, ParentStanding, parent_state
from functions.domain.jobs import Job
from functions.domain.prerequisites import Prerequisite, PrerequisiteState
from functions.ports import Services


class ParentChecker:
    """``waits.PrerequisiteChecker`` of ``PrerequisiteKind.JOB`` (key: the parent's id)."""

    def states(
        self, services: Services, job: Job, prerequisites: Sequence[Prerequisite]
    ) -> list[PrerequisiteState]:
        """Each parent's standing for ``job`` as stored now, all read in one strongly consistent
        BatchGetItem (up to 100 keys: the most parents a job has). A parent ``job`` does not list in
        ``dependsOn`` is waited for as ``Succeeded``; one gone, or another account's, is broken."""
        conditions = {d.job_id: d.condition for d in job.depends_on}
        takes_outputs = {i.job_id for i in job.inputs_from}
        now = services.clock()
        parents = {
            p.job_id: p
            for p in services.store.get_jobs([p.key for p in prerequisites])
            if p.account_id == job.account_id
        }
        states: list[PrerequisiteState] = []
        for prerequisite in prerequisites:
            parent = parents.get(prerequisite.key)
            standing = (
                None
                if parent is None
                else ParentStanding(parent.status, parent.is_final, parent.is_expired(now))
            )
            states.append(
                parent_state(
                    prerequisite,
                    conditions.get(prerequisite.key, Condition.SUCCEEDED),
                    standing,
                    takes_outputs=prerequisite.key in takes_outputs,
                )
            )
        return states

    def give(self, job: Job, state: PrerequisiteState) -> Job:
        """Nothing: the outputs a child takes (``inputsFrom``) are copied before its release, all
        parents at once (``logic.parent_inputs``, whose limits are per child)."""
        return job
