"""Jobs that wait for prerequisites: the shared mechanism (``functions.domain.prerequisites`` holds
the rule), used by environments (a job submitted while its environment builds, issue 24) and by a job's
parents (issue 25's ``dependsOn``: ``logic.parent_waits``; a parent's ending settles its children,
``settle_dependents``, and a child that ends settles its own, down the chain).

A job that must wait is written ``Queued`` in the dispatch state ``Waiting`` with its prerequisites
(``submit_waiting``): it takes no quota and no credits and reaches no dispatcher. Whenever an
environment's standing may have changed (a build reported, an environment deleted),
``prerequisite_settled`` finds the jobs that wait for it with one Query of its wait items and judges
each against all of its prerequisites (``settle``). A parent that settled finds its children on its
own record and counts itself on each (``parent_settled``: one UpdateItem, no read of the other
parents), which judges the child only once every parent is settled, or ends it at once when this one
ended the other way: a dependency costs two requests per edge (the mark, the count).

- all met: the job is released into the quota's admission as a new submit would be
  (``quotas.release_into_hold``: held, counted as queued, the account's admission asked for), taking
  what its prerequisites give it (an environment: its build's hash), once its parents' outputs it
  takes (``inputsFrom``) are copied under its own inputs (``logic.parent_inputs``; over a limit, or
  with a parent's outputs gone, it ends as below instead);
- one broken: the job ends ``Terminated``, free, with that prerequisite's reason, through the one
  module that ends jobs (``endings.end_waiting``: no charge, no ledger entry, its notifications sent);
- else it goes on waiting, its ``statusReason`` the first pending prerequisite's.

Exactly once, whatever the duplication or order of the reports: the release and the ending are each a
transaction conditional on the job's ``waiting#`` guard (``adapters.dynamodb.waits``), which the first
of them deletes (the input copies before a release may be made more than once: they overwrite the same
keys with the same bytes). No report is lost to a race with the submit: the submit writes the waiting
job and then reads its prerequisites again (``submit_waiting`` ends in ``settle``), the reporter writes
the prerequisite's new standing and then queries its waiters (a parent: reads its list), so one of the
two sees the other. A report
lost altogether (a crash between the write and the Query) is made good by the meter's backstop, which
settles every waiting job that had no change for a while (``metering._nudge_undispatched``).

Each kind has a checker (:class:`PrerequisiteChecker`) that reads its standing and says what a met one
gives the job; :data:`CHECKERS` maps kinds to them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from types import MappingProxyType
from typing import Protocol

from aws_lambda_powertools import Logger

from functions.domain.dependencies import Condition, ParentStanding, parent_prerequisite, parent_state
from functions.domain.errors import DependencyFailed, RecordMissing
from functions.domain.jobs import DispatchState, Job
from functions.domain.prerequisites import (
    Prerequisite,
    PrerequisiteKind,
    PrerequisiteState,
    Standing,
    Verdict,
    judge,
)
from functions.logic.endings import end_waiting
from functions.logic.environment_waits import EnvironmentChecker
from functions.logic.parent_inputs import copy_parent_inputs
from functions.logic.parent_waits import ParentChecker
from functions.logic.quotas import release_into_hold
from functions.ports import Services

logger = Logger(child=True)


class PrerequisiteChecker(Protocol):
    """How one kind of prerequisite stands, and what a met one gives the job it releases."""

    def states(
        self, services: Services, job: Job, prerequisites: Sequence[Prerequisite]
    ) -> list[PrerequisiteState]:
        """The standing now, for the waiting ``job``, of each of its ``prerequisites`` of this kind,
        in order (read strongly consistent; a kind may read them all in one request). Raises
        ``DependencyFailed``."""

    def give(self, job: Job, state: PrerequisiteState) -> Job:
        """``job`` with what the met prerequisite ``state`` gives it (unchanged when nothing)."""


#: The checker of each kind of prerequisite.
CHECKERS: Mapping[PrerequisiteKind, PrerequisiteChecker] = MappingProxyType(
    {PrerequisiteKind.ENVIRONMENT: EnvironmentChecker(), PrerequisiteKind.JOB: ParentChecker()}
)


def states_of(services: Services, job: Job) -> list[PrerequisiteState]:
    """Each of ``job``'s prerequisites' standing now, in order (each kind's read at once: a child's
    100 parents are one BatchGetItem). Raises ``DependencyFailed``."""
    found: dict[Prerequisite, PrerequisiteState] = {}
    for kind in dict.fromkeys(p.kind for p in job.waiting_for):
        of_kind = [p for p in job.waiting_for if p.kind is kind]
        found.update(zip(of_kind, CHECKERS[kind].states(services, job, of_kind), strict=True))
    return [found[p] for p in job.waiting_for]


def submit_waiting(services: Services, job: Job, reason: str, now: datetime) -> Job:
    """Write the new ``job`` waiting for ``job.waiting_for`` (``statusReason`` ``reason``: what the
    submit found it waits for), then judge it once against its prerequisites as they stand after that
    write (``settle``), so a prerequisite settled meanwhile releases or ends it here.

    Returns the job as it stands: waiting, or already released or ended.

    Raises ``ConditionFailed`` (the id exists) or ``DependencyFailed`` when the job could not be
    written (nothing of it stands). A failure after the write is logged: the job is stored waiting and
    the next report or the meter's backstop settles it.
    """
    waiting = replace(job, dispatch_state=DispatchState.WAITING, status_reason=reason)
    services.store.create_waiting_job(waiting)
    logger.info(
        "job waits for prerequisites",
        job_id=job.job_id,
        prerequisites=[p.id for p in job.waiting_for],
    )
    try:
        return settle(services, waiting, now)
    except DependencyFailed:
        logger.exception("waiting job not judged after its submit", job_id=job.job_id)
        return waiting


def settle(services: Services, job: Job, now: datetime) -> Job:
    """Judge a waiting job against every one of its prerequisites now (``prerequisites.judge``):
    release it (``quotas.release_into_hold``), end it ``Terminated`` and free (``endings.end_waiting``),
    or leave it waiting with the first pending prerequisite's reason. A job that no longer waits is
    returned as it is. Safe to run any number of times, concurrently: the release and the ending are
    conditional writes and only the first of them happens.

    Returns the job as this call left it. Raises ``DependencyFailed`` (the job stays waiting: a later
    report or the backstop settles it).
    """
    if not job.is_waiting:
        return job
    found = states_of(services, job)
    judgement = judge(found)
    if judgement.verdict is Verdict.WAIT:
        # The parents found final count as settled: their own settlements then judge nothing again.
        settled = frozenset(
            s.prerequisite.key
            for s in found
            if s.prerequisite.kind is PrerequisiteKind.JOB and s.standing is Standing.MET
        )
        more = settled - job.settled_parents
        if (judgement.reason is not None and judgement.reason != job.status_reason) or more:
            reason = judgement.reason or job.status_reason or "Waiting for a prerequisite"
            services.store.set_wait_reason(job.job_id, reason, settled=more)
            return replace(job, status_reason=reason, settled_parents=job.settled_parents | more)
        return job
    if judgement.verdict is Verdict.END:
        return _end(services, job, judgement.reason or "A prerequisite can no longer be met", now)
    # Its parents' outputs copied under its own inputs first (a limit passed or outputs gone: it ends).
    refused = copy_parent_inputs(services, job)
    if refused is not None:
        return _end(services, job, refused, now)
    return _release(services, job, found)


def _release(services: Services, job: Job, found: Sequence[PrerequisiteState]) -> Job:
    """Release ``job``, every prerequisite met (``found``), with what each gives it; the job as stored
    when another writer released or ended it first."""
    given = job
    for state in found:
        given = CHECKERS[state.prerequisite.kind].give(given, state)
    released = release_into_hold(services, given)
    if released is None:
        # Another writer released or ended it first.
        return services.store.get_job(job.job_id) or job
    logger.info("waiting job released", job_id=job.job_id, dispatch_state=str(released.dispatch_state))
    _forget(services, job)
    return released


def prerequisite_settled(services: Services, prerequisite: Prerequisite, now: datetime) -> int:
    """``prerequisite``'s standing may have changed (a build reported, an environment deleted): settle
    every job waiting for it (``settle``), and delete the wait items of jobs that no longer wait.
    Idempotent; one job's failure is logged and the others go on (the backstop settles it later).

    Returns how many jobs this call released or ended.
    """
    store = services.store
    moved = 0
    for job_id in list(store.list_waiters(prerequisite)):
        try:
            job = store.get_job(job_id)
            if job is None or not job.is_waiting or prerequisite not in job.waiting_for:
                store.delete_waits(job_id, [prerequisite])
                continue
            if not settle(services, job, now).is_waiting:
                moved += 1
        except (DependencyFailed, RecordMissing):
            logger.exception("waiting job not settled", job_id=job_id, prerequisite=prerequisite.id)
    if moved:
        logger.info("prerequisite settled", prerequisite=prerequisite.id, jobs=moved)
    return moved


def settle_dependents(services: Services, job: Job, now: datetime) -> int:
    """A job's final status is settled: count it on each child that waits for it (``parent_settled``:
    its ``dependents``, listed on its record, so no Query), which releases or ends the child when
    that decides it; a parent from before the list (``has_dependents``) Queries its waiters
    (``prerequisite_settled``). A delivery again heals one a crash cut short. One child's failure is
    logged and the others go on (the meter's backstop settles it later).

    Returns how many children this call released or ended.
    """
    if not job.is_final or not (job.dependents or job.has_dependents):
        return 0
    moved = 0
    for child_id in job.dependents:
        try:
            moved += parent_settled(services, job, child_id, now)
        except (DependencyFailed, RecordMissing):
            logger.exception("child not settled", job_id=job.job_id, child_id=child_id)
    if job.has_dependents:
        try:
            moved += prerequisite_settled(services, parent_prerequisite(job.job_id), now)
        except DependencyFailed:
            logger.exception("children not settled", job_id=job.job_id)
    return moved


def parent_settled(services: Services, parent: Job, child_id: str, now: datetime) -> bool:
    """The final ``parent``'s settlement for one child that may wait for it: counted on the child's
    record (``JobRepository.parent_settled``: one UpdateItem, which answers the child), then judged
    from what that answer holds, without reading its other parents: the parent ended the other way
    (or its outputs, which the child takes, are gone): the child ends now with that reason (the first
    broken parent to settle, not the first in order); every parent of the child settled: it is judged
    against all of them (``settle``: one read of them all, then its release or ending); else it goes
    on waiting. The same settlement counted again (a duplicated event) is judged again, so one a crash
    cut short is healed; counting it never happens twice.

    Returns whether the child was released or ended here. Raises ``DependencyFailed``,
    ``RecordMissing``.
    """
    child = services.store.parent_settled(child_id, parent.job_id)
    if child is None:
        return False
    prerequisite = parent_prerequisite(parent.job_id)
    if prerequisite not in child.waiting_for:
        return False
    condition = next(
        (d.condition for d in child.depends_on if d.job_id == parent.job_id), Condition.SUCCEEDED
    )
    state = parent_state(
        prerequisite,
        condition,
        ParentStanding(parent.status, parent.is_final, parent.is_expired(now)),
        takes_outputs=any(i.job_id == parent.job_id for i in child.inputs_from),
    )
    if state.standing is Standing.BROKEN:
        return not _end(services, child, state.reason or "A dependency can no longer be met", now).is_waiting
    parents = {p.key for p in child.waiting_for if p.kind is PrerequisiteKind.JOB}
    if not parents <= child.settled_parents:
        return False
    return not settle(services, child, now).is_waiting


def _end(services: Services, job: Job, reason: str, now: datetime) -> Job:
    """End the waiting ``job`` ``Terminated``, free, with ``reason`` (``endings.end_waiting``), forget
    its wait items and settle its own children, down the chain."""
    ended = end_waiting(services, job, reason, now)
    logger.info("waiting job ended", job_id=job.job_id, reason=ended.status_reason)
    _forget(services, job)
    settle_dependents(services, ended, now)
    return ended


def _forget(services: Services, job: Job) -> None:
    """Delete a released or ended job's wait items, those of prerequisites that are no parents (a
    failure leaves them for the next Query of their prerequisite, which deletes them then; a parent
    lists its children itself)."""
    try:
        services.store.delete_waits(
            job.job_id, [p for p in job.waiting_for if p.kind is not PrerequisiteKind.JOB]
        )
    except DependencyFailed:
        logger.exception("wait items left behind", job_id=job.job_id)
