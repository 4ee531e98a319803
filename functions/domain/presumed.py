"""A Batch event's transition written without reading the job first.

Batch emits one attempt's events in order (STARTING, RUNNING, then the end; docs/architecture.md "Status
machine"), so a STARTING event almost always finds its job ``Queued`` and a RUNNING event finds it
``Starting``. For those two, what ``jobs.apply_batch_event`` writes depends only on the event and on
that presumed status; the store writes it with one conditional UpdateItem whose condition is exactly
"the job is in the presumed state" (``PresumedTransition.holds_for``) and which returns the job it
wrote. When the condition fails (a lost or late event, a retry, an array, another Batch job of the
same name), the store returns the job as it is and the event is applied the usual way from it: one
request either way instead of a read and a write.

Final events are not presumed: their charge needs the job's caps and the account's balance.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from functions.domain.batch_reasons import normalize_reason
from functions.domain.charged_time import epoch_ms
from functions.domain.jobs import BatchJobState, Job, JobType, ms_to_datetime
from functions.domain.status import BATCH_TO_JOB_STATUS, JobStatus, event_position, statuses_between

# The status a job has, in the usual order of events, when the event of this Batch status comes.
PRESUMED_STATUS = {"STARTING": JobStatus.QUEUED, "RUNNING": JobStatus.STARTING}
# A job's ``event_position`` before any Batch event was applied.
NO_EVENT = -1


@dataclass(frozen=True, slots=True)
class PresumedTransition:
    """An event's transition for a Single job in ``presumed`` status.

    Attributes
    ----------
    state : BatchJobState
        The event (its ``job_name`` is the job's id).
    presumed : JobStatus
        The status the job must have for this transition to be the one ``apply_batch_event`` computes.
    before : int
        The ``event_position`` the job must have: the event before this one in the same attempt
        (RUNNING: its STARTING; STARTING: none in a first attempt, whose PENDING and RUNNABLE the rule
        leaves out, else the retry's RUNNABLE).
    target : JobStatus
        The status the event moves the job to.
    entered : tuple[JobStatus, ...]
        Statuses appended to ``status_history`` (``statuses_between(presumed, target)``).
    status_reason : str | None
        The event's reason, normalized (None removes the job's).
    """

    state: BatchJobState
    presumed: JobStatus
    before: int
    target: JobStatus
    entered: tuple[JobStatus, ...]
    status_reason: str | None

    @property
    def job_id(self) -> str:
        """The job the event names."""
        return self.state.job_name

    def holds_for(self, job: Job) -> bool:
        """True when ``job`` is in the state this transition presumes: a Single job named by the event,
        in ``presumed`` status at position ``before``, of the event's Batch job (or of none yet), and
        submitted no later than the event's ``startedAt`` (an earlier start is clamped, which needs the
        job as read: ``charged_time``). The store's write condition says the same."""
        started = self.state.started_at_ms
        return (
            job.job_id == self.job_id
            and (started is None or epoch_ms(job.submitted_at) <= started)
            and job.type == JobType.SINGLE
            and job.status == self.presumed
            and job.event_position == self.before
            and (job.batch_job_id is None or job.batch_job_id == self.state.batch_job_id)
        )

    def apply(self, job: Job) -> Job:
        """The job after the event (``holds_for(job)`` must be True): equal to
        ``apply_batch_event(job, state).after``. The store writes the same fields."""
        state = self.state
        return replace(
            job,
            status=self.target,
            status_reason=self.status_reason,
            status_history=job.status_history + self.entered,
            event_position=state.position,
            started_at=ms_to_datetime(state.started_at_ms)
            if state.started_at_ms is not None
            else job.started_at,
            completed_at=None,
            exit_code=state.exit_code if state.exit_code is not None else job.exit_code,
            batch_job_id=job.batch_job_id or state.batch_job_id,
            log_stream_name=state.log_stream_name or job.log_stream_name,
        )


def presume_transition(state: BatchJobState, arrived_at: datetime) -> PresumedTransition | None:
    """The presumed transition of a STARTING or RUNNING event of a job that is no array (no
    ``arrayProperties``) and whose ``startedAt``, if any, is not after the event's arrival; None for
    other events (they are applied from the job as read, which clamps such a start)."""
    presumed = PRESUMED_STATUS.get(state.status)
    if presumed is None or state.array_index is not None or state.array_size is not None:
        return None
    if state.started_at_ms is not None and state.started_at_ms > epoch_ms(arrived_at):
        return None
    target = BATCH_TO_JOB_STATUS[state.status]
    entered = statuses_between(presumed, target, ever_ran=state.started_at_ms is not None)
    if state.status == "RUNNING":
        before = event_position(state.attempt_count, "STARTING")
    else:
        before = event_position(state.attempt_count, "RUNNABLE") if state.attempt_count else NO_EVENT
    return PresumedTransition(
        state=state,
        presumed=presumed,
        before=before,
        target=target,
        entered=tuple(entered),
        status_reason=normalize_reason(state.status_reason),
    )
