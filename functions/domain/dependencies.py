"""Job dependencies (issue 25): a job that waits for other jobs of its account (its parents) and may
start from their outputs.

A child names its parents in ``dependsOn`` (``Dependency``: a parent's id and the ``condition`` its
final status must meet) and the parents whose outputs it takes in ``inputsFrom`` (``InputsFrom``: a
parent and glob patterns over its output names). Each parent is one prerequisite of the child
(``functions.domain.prerequisites``, kind ``job``, key the parent's id), so the child waits,
is released and ends by the rule every prerequisite obeys; this module says where one parent
stands for its child (:func:`parent_state`) and checks what a submit may ask (:func:`check_dependencies`,
:func:`check_inputs_from`). The conditions are Slurm's ``afterok`` / ``afterany`` / ``afternotok``
(AWS Batch's ``dependsOn`` has only the first). The graph is acyclic by construction: a parent
exists before its child is submitted. It reads no clock and calls nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import PurePosixPath

from functions.domain.errors import ValidationFailed
from functions.domain.prerequisites import Prerequisite, PrerequisiteKind, PrerequisiteState, Standing
from functions.domain.status import JobStatus

#: The most parents one job may name (AWS Batch allows 20).
MAX_PARENTS = 100
#: The most jobs that may wait for one job (its ``dependents``, kept on its record: 1,000 ids are
#: about 31 KB of the item's 400 KB).
MAX_DEPENDENTS = 1000
#: The most glob patterns one ``inputsFrom`` entry may give, and the longest one (characters).
MAX_PATTERNS = 20
MAX_PATTERN_LENGTH = 256
#: Where a child finds a parent's files in its working folder: ``inputs/<parent id>/<name>``.
INPUTS_FOLDER = "inputs"


class Condition(StrEnum):
    """What a parent's final status must be for its child to run."""

    SUCCEEDED = "Succeeded"
    #: Either final status.
    COMPLETED = "Completed"
    TERMINATED = "Terminated"

    def holds_for(self, status: JobStatus) -> bool:
        """Whether a parent that ended ``status`` (final) meets this condition."""
        return self is Condition.COMPLETED or status.value == self.value


@dataclass(frozen=True, slots=True)
class Dependency:
    """One parent of a job: its id and the condition its final status must meet."""

    job_id: str
    condition: Condition = Condition.SUCCEEDED


@dataclass(frozen=True, slots=True)
class InputsFrom:
    """The outputs of parent ``job_id`` the child starts with: those whose names match one of
    ``files`` (``fnmatch`` patterns over output names such as ``model/weights.pt``; empty: all)."""

    job_id: str
    files: tuple[str, ...] = ()


def parent_prerequisite(job_id: str) -> Prerequisite:
    """The prerequisite a child holds on its parent ``job_id`` (kind ``job``)."""
    return Prerequisite(PrerequisiteKind.JOB, job_id)


def waiting_reason(parent_id: str, status: JobStatus) -> str:
    """A child's ``statusReason`` while it waits for a parent not final yet."""
    return f"Waiting for {parent_id} ({status.value})"


def unmet_reason(parent_id: str, status: JobStatus, condition: Condition) -> str:
    """Why a child ends when its parent ended the other way."""
    return f"Dependency {parent_id} ended {status.value}; this job needed {condition.value}"


def settled_reason(waiting_for: Sequence[Prerequisite], settled: frozenset[str]) -> str:
    """A waiting job's ``statusReason`` once parents of its settled since it was last judged (their
    settlements count them without reading the others, ``functions.logic.waits.parent_settled``):
    ``Waiting for job-Y and N more``, job-Y its first prerequisite not settled; a build first:
    ``Waiting for its environment's build and N more``."""
    pending = [p for p in waiting_for if not (p.kind is PrerequisiteKind.JOB and p.key in settled)]
    if not pending:
        return "Waiting for its dependencies"
    first = pending[0]
    reason = (
        f"Waiting for {first.key}"
        if first.kind is PrerequisiteKind.JOB
        else "Waiting for its environment's build"
    )
    return f"{reason} and {len(pending) - 1} more" if len(pending) > 1 else reason


def gone_reason(parent_id: str) -> str:
    """Why a child ends when its parent's record is gone (expired or deleted)."""
    return f"Dependency {parent_id} no longer exists (its record expired or was deleted)"


def data_gone_reason(parent_id: str) -> str:
    """Why a child that takes a parent's outputs ends when they are gone."""
    return (
        f"Dependency {parent_id}'s outputs are gone (expired or deleted); this job takes its inputs from it"
    )


@dataclass(frozen=True, slots=True)
class ParentStanding:
    """What a child knows of one parent as stored: its status, whether that is final (an array's:
    once the array itself is), and whether its outputs are gone (expired or deleted)."""

    status: JobStatus
    is_final: bool
    data_gone: bool


def parent_state(
    prerequisite: Prerequisite, condition: Condition, parent: ParentStanding | None, *, takes_outputs: bool
) -> PrerequisiteState:
    """Where parent ``prerequisite`` stands for a child needing ``condition``: ``Pending`` while the
    parent is not final (``Waiting for job-X (Running)``), ``Met`` once it ended as the condition asks,
    ``Broken`` when it ended the other way, is gone, or (``takes_outputs``: the child lists it in
    ``inputsFrom``) its outputs are gone."""
    parent_id = prerequisite.key
    if parent is None:
        return PrerequisiteState(prerequisite, Standing.BROKEN, gone_reason(parent_id))
    if not parent.is_final:
        return PrerequisiteState(prerequisite, Standing.PENDING, waiting_reason(parent_id, parent.status))
    if not condition.holds_for(parent.status):
        return PrerequisiteState(
            prerequisite, Standing.BROKEN, unmet_reason(parent_id, parent.status, condition)
        )
    if takes_outputs and parent.data_gone:
        return PrerequisiteState(prerequisite, Standing.BROKEN, data_gone_reason(parent_id))
    return PrerequisiteState(prerequisite, Standing.MET)


def check_dependencies(dependencies: Sequence[Dependency]) -> tuple[Dependency, ...]:
    """``dependsOn`` as given, checked: at most ``MAX_PARENTS``, each parent once.

    Raises ``ValidationFailed`` (``dependsOn``, or ``dependsOn[i].jobId`` for a duplicate)."""
    if len(dependencies) > MAX_PARENTS:
        raise ValidationFailed(
            f"dependsOn names {len(dependencies)} jobs; at most {MAX_PARENTS} are allowed.", field="dependsOn"
        )
    seen: set[str] = set()
    for index, dependency in enumerate(dependencies):
        if dependency.job_id in seen:
            raise ValidationFailed(
                f"dependsOn names {dependency.job_id} twice.", field=f"dependsOn[{index}].jobId"
            )
        seen.add(dependency.job_id)
    return tuple(dependencies)


def check_pattern(pattern: str, field: str) -> str:
    """One ``inputsFrom`` glob: relative, no ``..`` part, not empty. Raises ``ValidationFailed``."""
    path = PurePosixPath(pattern)
    if not pattern or len(pattern) > MAX_PATTERN_LENGTH:
        raise ValidationFailed(f"A pattern has 1 to {MAX_PATTERN_LENGTH} characters.", field=field)
    if path.is_absolute() or pattern.startswith("\\"):
        raise ValidationFailed(
            f"Pattern {pattern!r} is absolute; give one relative to the outputs.", field=field
        )
    if ".." in path.parts or ".." in pattern.split("\\"):
        raise ValidationFailed(f"Pattern {pattern!r} has a '..' part.", field=field)
    return pattern


def check_inputs_from(
    inputs_from: Sequence[InputsFrom], dependencies: Sequence[Dependency]
) -> tuple[InputsFrom, ...]:
    """``inputsFrom`` as given, checked: each parent once and also in ``dependsOn``, its patterns
    relative without ``..`` (``check_pattern``), at most ``MAX_PATTERNS`` each.

    Raises ``ValidationFailed`` naming the field (``inputsFrom[i].jobId``, ``inputsFrom[i].files[j]``)."""
    parents = {d.job_id for d in dependencies}
    seen: set[str] = set()
    for index, entry in enumerate(inputs_from):
        if entry.job_id not in parents:
            raise ValidationFailed(
                f"inputsFrom names {entry.job_id}, which is not in dependsOn; a job takes inputs only "
                "from its parents.",
                field=f"inputsFrom[{index}].jobId",
            )
        if entry.job_id in seen:
            raise ValidationFailed(
                f"inputsFrom names {entry.job_id} twice.", field=f"inputsFrom[{index}].jobId"
            )
        seen.add(entry.job_id)
        if len(entry.files) > MAX_PATTERNS:
            raise ValidationFailed(
                f"At most {MAX_PATTERNS} patterns per parent.", field=f"inputsFrom[{index}].files"
            )
        for position, pattern in enumerate(entry.files):
            check_pattern(pattern, f"inputsFrom[{index}].files[{position}]")
    return tuple(inputs_from)
