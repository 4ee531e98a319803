"""Job dependencies' rules (``functions.domain.dependencies``): where a parent stands for its child
under each condition, and what a submit may ask (``dependsOn``, ``inputsFrom``)."""

from __future__ import annotations

import pytest

from functions.domain.dependencies import (
    MAX_PARENTS,
    Condition,
    Dependency,
    InputsFrom,
    ParentStanding,
    check_dependencies,
    check_inputs_from,
    parent_prerequisite,
    parent_state,
    settled_reason,
)
from functions.domain.errors import ValidationFailed
from functions.domain.prerequisites import Prerequisite, PrerequisiteKind, Standing, Verdict, judge
from functions.domain.status import JobStatus

PARENT = "job-01JAAAAAAAAAAAAAAAAAAAAAAA"


def _standing(status: JobStatus, *, data_gone: bool = False) -> ParentStanding:
    return ParentStanding(status=status, is_final=status.is_final, data_gone=data_gone)


def test_a_parent_is_a_prerequisite_of_kind_job_keyed_by_its_id() -> None:
    prerequisite = parent_prerequisite(PARENT)
    assert (prerequisite.kind, prerequisite.key) == (PrerequisiteKind.JOB, PARENT)
    assert prerequisite.id == f"job|{PARENT}"


@pytest.mark.parametrize(
    ("condition", "status", "standing", "reason"),
    [
        (Condition.SUCCEEDED, JobStatus.RUNNING, Standing.PENDING, f"Waiting for {PARENT} (Running)"),
        (Condition.TERMINATED, JobStatus.QUEUED, Standing.PENDING, f"Waiting for {PARENT} (Queued)"),
        (Condition.SUCCEEDED, JobStatus.SUCCEEDED, Standing.MET, None),
        (Condition.COMPLETED, JobStatus.SUCCEEDED, Standing.MET, None),
        (Condition.COMPLETED, JobStatus.TERMINATED, Standing.MET, None),
        (Condition.TERMINATED, JobStatus.TERMINATED, Standing.MET, None),
        (
            Condition.SUCCEEDED,
            JobStatus.TERMINATED,
            Standing.BROKEN,
            f"Dependency {PARENT} ended Terminated; this job needed Succeeded",
        ),
        (
            Condition.TERMINATED,
            JobStatus.SUCCEEDED,
            Standing.BROKEN,
            f"Dependency {PARENT} ended Succeeded; this job needed Terminated",
        ),
    ],
)
def test_a_parents_standing_follows_its_status_and_the_condition(
    condition: Condition, status: JobStatus, standing: Standing, reason: str | None
) -> None:
    state = parent_state(parent_prerequisite(PARENT), condition, _standing(status), takes_outputs=False)
    assert (state.standing, state.reason) == (standing, reason)


def test_a_gone_parent_breaks_and_gone_outputs_break_only_a_child_that_takes_them() -> None:
    gone = parent_state(parent_prerequisite(PARENT), Condition.COMPLETED, None, takes_outputs=False)
    assert gone.standing is Standing.BROKEN
    assert gone.reason == f"Dependency {PARENT} no longer exists (its record expired or was deleted)"
    deleted = _standing(JobStatus.SUCCEEDED, data_gone=True)
    assert parent_state(
        parent_prerequisite(PARENT), Condition.SUCCEEDED, deleted, takes_outputs=False
    ).standing is (Standing.MET)
    taking = parent_state(parent_prerequisite(PARENT), Condition.SUCCEEDED, deleted, takes_outputs=True)
    assert taking.standing is Standing.BROKEN
    assert taking.reason == (
        f"Dependency {PARENT}'s outputs are gone (expired or deleted); this job takes its inputs from it"
    )


def test_the_waiting_rule_names_the_first_pending_parent_and_how_many_more() -> None:
    states = [
        parent_state(
            parent_prerequisite(f"job-{i}"), Condition.SUCCEEDED, _standing(status), takes_outputs=False
        )
        for i, status in enumerate(
            [JobStatus.SUCCEEDED, JobStatus.RUNNING, JobStatus.QUEUED, JobStatus.STARTING]
        )
    ]
    judgement = judge(states)
    assert (judgement.verdict, judgement.reason) == (Verdict.WAIT, "Waiting for job-1 (Running) and 2 more")


def test_dependencies_allow_a_hundred_distinct_parents_and_no_more() -> None:
    hundred = [Dependency(f"job-{i}") for i in range(MAX_PARENTS)]
    assert check_dependencies(hundred) == tuple(hundred)
    with pytest.raises(ValidationFailed) as raised:
        check_dependencies([*hundred, Dependency("job-x")])
    assert raised.value.field == "dependsOn"


def test_a_duplicate_parent_is_refused_on_its_position() -> None:
    with pytest.raises(ValidationFailed) as raised:
        check_dependencies(
            [Dependency("job-a"), Dependency("job-b"), Dependency("job-a", Condition.COMPLETED)]
        )
    assert raised.value.field == "dependsOn[2].jobId"


@pytest.mark.parametrize(
    ("inputs", "field"),
    [
        ([InputsFrom("job-c")], "inputsFrom[0].jobId"),
        ([InputsFrom("job-a"), InputsFrom("job-a")], "inputsFrom[1].jobId"),
        ([InputsFrom("job-a", ("model/*", "../secret"))], "inputsFrom[0].files[1]"),
        ([InputsFrom("job-a", ("/etc/passwd",))], "inputsFrom[0].files[0]"),
        ([InputsFrom("job-a", ("a/../../b",))], "inputsFrom[0].files[0]"),
        ([InputsFrom("job-a", ("",))], "inputsFrom[0].files[0]"),
        ([InputsFrom("job-a", ("*",) * 21)], "inputsFrom[0].files"),
    ],
)
def test_bad_inputs_from_is_refused_on_its_field(inputs: list[InputsFrom], field: str) -> None:
    with pytest.raises(ValidationFailed) as raised:
        check_inputs_from(inputs, [Dependency("job-a"), Dependency("job-b")])
    assert raised.value.field == field


def test_inputs_from_parents_with_relative_globs_is_kept() -> None:
    inputs = [InputsFrom("job-a", ("model/*", "*.json")), InputsFrom("job-b")]
    assert check_inputs_from(inputs, [Dependency("job-a"), Dependency("job-b")]) == tuple(inputs)


def test_a_reason_after_settlements_names_the_first_parent_not_settled_and_counts_the_rest() -> None:
    # Given a job waiting for an environment's build and three parents, the first two settled
    build = Prerequisite(PrerequisiteKind.ENVIRONMENT, "dev/ml/abc")
    a, b, c = (parent_prerequisite(f"job-{n}") for n in "abc")
    # Then it waits for the third parent alone, or the build and it, or (all settled) its dependencies
    assert settled_reason([a, b, c], frozenset({"job-a", "job-b"})) == "Waiting for job-c"
    assert settled_reason([a, b, c], frozenset({"job-b"})) == "Waiting for job-a and 1 more"
    assert (
        settled_reason([build, a, b, c], frozenset({"job-a", "job-b"}))
        == "Waiting for its environment's build and 1 more"
    )
    assert settled_reason([a, b], frozenset({"job-a", "job-b"})) == "Waiting for its dependencies"
