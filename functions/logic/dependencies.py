"""A submit's parents (issue 25's ``dependsOn``; ``functions.domain.dependencies`` holds the rules):
each is checked and marked before the child is written, and becomes one of its prerequisites
(``functions.logic.waits``), so the child waits ``Queued``, holding no quota and no credits, until
every parent ended as its condition asks."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from functions.domain.dependencies import (
    MAX_DEPENDENTS,
    Dependency,
    DependencyMode,
    ParentStanding,
    check_per_item_parent,
    parent_prerequisite,
    parent_state,
)
from functions.domain.errors import NotFound, ValidationFailed
from functions.domain.jobs import JobType
from functions.domain.machine_classes import GeoZone
from functions.domain.prerequisites import Prerequisite, PrerequisiteState, Standing, Verdict, judge
from functions.domain.text import JOB_ID_PATTERN, full_match
from functions.ports import Services


@dataclass(frozen=True, slots=True)
class MarkedParents:
    """What marking a submit's parents found: the child's prerequisites on them (in order), the reason
    it waits with (the first parent not final: ``Waiting for job-X (Running)``, and how many more;
    None when every parent is final already: the submit's settle releases or ends the child at once),
    and the parents final already (they settle nothing more for it: its ``settled_parents``)."""

    prerequisites: tuple[Prerequisite, ...]
    reason: str | None
    settled: frozenset[str]
    #: The size of the parent an array depends on per item (None without one); the parent is no
    #: prerequisite of the array as a whole (``logic.item_dependencies`` releases its items).
    per_item_size: int | None = None


def mark_parents(
    services: Services,
    account_id: str,
    child_id: str,
    zone: GeoZone,
    dependencies: Sequence[Dependency],
    *,
    takes_outputs: Sequence[str],
    now: datetime,
) -> MarkedParents:
    """Check each parent of a submit and append the child ``child_id`` to its ``dependents``
    (``JobRepository.mark_has_dependents``: one conditional UpdateItem each, which also reads it),
    before the child is written, so a parent's ending always finds its children
    (``waits.settle_dependents``).

    Raises
    ------
    NotFound
        ``dependsOn[i].jobId``: a parent that is not a job of ``account_id`` (unknown, another
        account's, past its record TTL).
    ValidationFailed
        ``dependsOn[i].jobId``: an array's child (depend on its array), a parent in another geo zone,
        or one that ``MAX_DEPENDENTS`` jobs wait for already; ``inputsFrom[i].jobId``: one whose data
        expired or was deleted while the child takes its outputs; ``dependsOn[i].mode``: a
        ``perItem`` parent that is no array (its size is the child's to match:
        ``MarkedParents.per_item_size``).
    """
    states: list[PrerequisiteState] = []
    settled: set[str] = set()
    per_item_size: int | None = None
    for index, dependency in enumerate(dependencies):
        field = f"dependsOn[{index}].jobId"
        if ":" in dependency.job_id:
            raise ValidationFailed(
                f"{dependency.job_id} is an array's child; depend on its array instead.", field=field
            )
        per_item = dependency.mode is DependencyMode.PER_ITEM
        parent = (
            services.store.mark_has_dependents(dependency.job_id, account_id, child_id, per_item=per_item)
            if full_match(JOB_ID_PATTERN, dependency.job_id)
            else None
        )
        if parent is None:
            raise NotFound(f"No job {dependency.job_id} in this account.", field=field)
        if parent.geo_zone != zone:
            raise ValidationFailed(
                f"{dependency.job_id} runs in {parent.geo_zone.value}; a job depends only on jobs of its own "
                f"geo zone ({zone.value}).",
                field=field,
            )
        if per_item:
            check_per_item_parent(
                index, dependency.job_id, parent.array_size if parent.type is JobType.ARRAY else None
            )
            if parent.array_containers is not None:
                # Its items end a container at a time (``container_events``), not one event each.
                raise ValidationFailed(
                    f"{dependency.job_id} runs its items with parallelism; depend on it whole, not perItem.",
                    field=field,
                )
            per_item_size = parent.array_size
        elif parent.is_final:
            settled.add(parent.job_id)
        if not parent.is_final and child_id not in (
            parent.item_dependents if per_item else parent.dependents
        ):
            raise ValidationFailed(
                f"{MAX_DEPENDENTS} jobs wait for {dependency.job_id} already; at most {MAX_DEPENDENTS} may "
                "wait for one job (map one job over many items with an array instead).",
                field=field,
            )
        state = parent_state(
            parent_prerequisite(parent.job_id),
            dependency.condition,
            ParentStanding(parent.status, parent.is_final, parent.is_expired(now)),
            takes_outputs=dependency.job_id in takes_outputs,
        )
        if (
            state.standing is Standing.BROKEN
            and dependency.job_id in takes_outputs
            and parent.is_expired(now)
        ):
            raise ValidationFailed(
                f"{dependency.job_id}'s outputs have expired or were deleted; this job cannot take inputs "
                "from it.",
                field=f"inputsFrom[{list(takes_outputs).index(dependency.job_id)}].jobId",
            )
        if not per_item:
            states.append(state)
    judgement = judge(states)
    reason = judgement.reason if judgement.verdict is Verdict.WAIT else None
    return MarkedParents(
        tuple(parent_prerequisite(d.job_id) for d in dependencies if d.mode is DependencyMode.WHOLE),
        reason,
        frozenset(settled),
        per_item_size,
    )
