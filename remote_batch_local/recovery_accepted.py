"""After a crash, the jobs AWS Batch had accepted run on, as AWS Batch runs them after a host loss.

The executor keeps every job it acknowledged on disk (``executor.accepted``). At the next start after
a crash (not after a clean stop, which ends its jobs itself), each such job whose final event the last
run did not emit is taken back by the new executor, with the same Batch job id, from what the last
run's events (the bus's journal) say of it:

- accepted and not yet running (SUBMITTED to STARTING): it is queued again and runs;
- RUNNING at the crash: that attempt was lost with its host. It is recorded as an ended attempt
  (``statusReason`` ``LOCAL_HOST_LOST_REASON``, from its own ``startedAt`` to the crash instant) and,
  by the service's retry rule (``functions.domain.batch_retries``: a ``Host EC2*`` attempt is retried,
  ``MAX_ATTEMPTS`` attempts in all, as the deployed job definitions' ``retryStrategy``), the job runs
  again as its next attempt; the service charges only the attempt that finished (the final event's
  ``startedAt``/``stoppedAt``), never the lost one;
- RUNNING at the crash with its attempts spent: it fails with that reason at once, and the service
  charges it nothing (a host lost is an infrastructure loss, ``batch_reasons``).

An array job's children each follow these rules; a child that had ended stays as it ended, and the
parent ends by its children as before. The jobs it takes back are left out of ``recovery``'s
settlement (rules 1-3 there), which keeps settling the jobs the executor never acknowledged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from functions.domain.batch_reasons import LOCAL_HOST_LOST_REASON
from functions.domain.batch_retries import retried
from remote_batch_local.batch_arrays import FINAL, child_id
from remote_batch_local.events import BatchAttempt, log_stream_name, task_arn
from remote_batch_local.executor import AcceptedJob, AcceptedJobs, LocalBatchExecutor, PriorRun

logger = logging.getLogger(__name__)

Envelope = dict[str, Any]
JOB_ID_VARIABLE = "REMOTE_BATCH_JOB_ID"


def prior_run(events: list[Envelope], crash_ms: int) -> PriorRun:
    """What ``events`` (one job's or child's, in emission order) say of it at a crash at ``crash_ms``
    (ms since the epoch): its last status and attempts, plus the attempt lost to the crash when it was
    RUNNING, and whether that attempt was its last (``end_reason``)."""
    if not events:
        return PriorRun()
    detail = events[-1]["detail"]
    status = str(detail.get("status", "SUBMITTED"))
    attempts = tuple(
        BatchAttempt.from_detail(a) for a in detail.get("attempts") or () if isinstance(a, Mapping)
    )
    if status != "RUNNING":
        return PriorRun(status=status, attempts=attempts, detail=detail)
    started_ms = int(detail.get("startedAt") or crash_ms)
    job_id = str(detail.get("jobId", ""))
    lost = BatchAttempt(
        exit_code=None,
        log_stream_name=log_stream_name(str(detail.get("jobDefinition", "")), job_id),
        task_arn=task_arn(str(events[-1].get("region", "")), str(events[-1].get("account", "")), job_id),
        started_at_ms=started_ms,
        stopped_at_ms=max(crash_ms, started_ms),
        status_reason=LOCAL_HOST_LOST_REASON,
    )
    attempts += (lost,)
    end_reason = None if retried(LOCAL_HOST_LOST_REASON, len(attempts)) else LOCAL_HOST_LOST_REASON
    return PriorRun(status=status, attempts=attempts, detail=detail, end_reason=end_reason)


def _own(envelopes: list[Envelope], batch_job_id: str) -> dict[str, list[Envelope]]:
    """The envelopes of ``batch_job_id`` and of its children, by Batch job id, in emission order."""
    by_id: dict[str, list[Envelope]] = {}
    for envelope in envelopes:
        detail = envelope.get("detail")
        job_id = detail.get("jobId") if isinstance(detail, dict) else None
        if isinstance(job_id, str) and (job_id == batch_job_id or job_id.startswith(f"{batch_job_id}:")):
            by_id.setdefault(job_id, []).append(envelope)
    return by_id


def _service_job(accepted: AcceptedJob) -> str:
    """The service job an accepted job belongs to (the bus's key for its events)."""
    return accepted.submission.environment.get(JOB_ID_VARIABLE) or accepted.submission.job_name


def resume_accepted_jobs(
    executor: LocalBatchExecutor,
    accepted: AcceptedJobs,
    emitted_for: Callable[[str], list[Envelope]],
    crashed_at: datetime,
) -> set[str]:
    """Take back, in the new ``executor``, every job ``accepted`` holds that had not ended (this
    module's rules); forget the others. Returns the Batch job ids taken back.

    Parameters
    ----------
    executor : LocalBatchExecutor
        The new run's executor (before the last run's settlement, ``recovery``).
    accepted : AcceptedJobs
        The jobs the last run's executor acknowledged.
    emitted_for : Callable[[str], list[Envelope]]
        The event bus's ``emitted_for``: what was emitted for a service job, the last run included.
    crashed_at : datetime
        The crash instant as recorded (the last "alive" stamp): the lost attempts' ``stoppedAt``.
    """
    crash_ms = int(crashed_at.timestamp() * 1000)
    records = accepted.load()
    taken: set[str] = set()
    for record in records:
        by_id = _own(emitted_for(_service_job(record)), record.job_id)
        own = by_id.get(record.job_id, [])
        if any(e["detail"].get("status") in FINAL for e in own):
            continue  # it ended: ``recovery`` delivers its final event again if need be
        prior: dict[str, PriorRun] = {}
        if record.submission.array_size is None:
            prior[record.job_id] = prior_run(own, crash_ms)
        else:
            for index in range(record.submission.array_size):
                events = by_id.get(child_id(record.job_id, index))
                if events:
                    prior[child_id(record.job_id, index)] = prior_run(events, crash_ms)
        executor.readmit(record, prior)
        taken.add(record.job_id)
        retried_count = sum(1 for run in prior.values() if run.attempts and run.end_reason is None)
        logger.info(
            "accepted job resumed after the crash batch_job_id=%s job_name=%s retried=%d",
            record.job_id,
            record.submission.job_name,
            retried_count,
        )
    accepted.forget({record.job_id for record in records} - taken)
    return taken
