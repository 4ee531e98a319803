"""Reading jobs, results, logs and accounts for their owner."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from functions.domain.batch_reasons import as_sentence
from functions.domain.errors import Conflict, Expired, JobNotFinished, NoOutput, NotFound, ValidationFailed
from functions.domain.jobs import Account, Job, is_credit_constraint_reason
from functions.domain.status import JobStatus
from functions.logic.job_events import output_key
from functions.logic.submission import get_owned_job
from functions.ports import LogEvent, Services

INLINE_LIMIT_BYTES = 5 * 1024 * 1024
PRESIGNED_SECONDS = 15 * 60
MAX_LOG_EVENTS = 10_000


@dataclass(frozen=True, slots=True)
class JobResult:
    """A final job's ``EvaluationResult``.

    Exactly one of ``result`` (when ``inline``), ``result_url`` or ``pickle`` is meaningful:
    ``result_url`` is a presigned GET (15 min) for a result over 5 MiB; ``pickle`` is base64.
    """

    job_id: str
    result: Any = None
    result_repr: str | None = None
    messages: tuple[str, ...] = ()
    inline: bool = True
    result_url: str | None = None
    pickle: str | None = None


def expired(job_id: str) -> Expired:
    """The 410 of a job whose data passed its 14-day retention or was deleted by its owner."""
    return Expired(
        f"Job {job_id}'s inputs, outputs and log are gone: past their 14-day retention, or deleted."
    )


def _final_job_with_data(services: Services, account_id: str, job_id: str, now: datetime) -> Job:
    job = get_owned_job(services, account_id, job_id)
    if not job.is_final:
        raise JobNotFinished(f"Job {job_id} is {job.status.value}; its result exists once it is final.")
    if job.is_expired(now):
        raise expired(job_id)
    return job


def _messages(services: Services, job: Job) -> tuple[str, ...]:
    raw = services.zones[job.geo_zone].blobs.get(output_key(job.job_id, "messages.json"), INLINE_LIMIT_BYTES)
    if raw is None:
        return ()
    try:
        messages = json.loads(raw).get("messages", [])
    except (ValueError, AttributeError):
        return ()
    return tuple(str(m) for m in messages) if isinstance(messages, list) else ()


def get_result(services: Services, account_id: str, job_id: str, now: datetime, as_pickle: bool) -> JobResult:
    """``GET /jobs/{jobId}/result``.

    Raises
    ------
    NotFound, JobNotFinished, Expired
        As API.md says.
    NoOutput
        The job ended Terminated without output (e.g. never ran, or its CreditConstraint discarded it).
    """
    job = _final_job_with_data(services, account_id, job_id, now)
    if job.status_reason and is_credit_constraint_reason(job.status_reason):
        cap = job.status_reason.removesuffix(" reached")
        raise NoOutput(f"Job {job_id} reached its {cap}; its output was discarded.")
    blobs = services.zones[job.geo_zone].blobs
    no_output = NoOutput(
        f"Job {job_id} ended {job.status.value} without output"
        + (f": {as_sentence(job.status_reason)}" if job.status_reason else ".")
    )
    if as_pickle:
        key = output_key(job_id, "result.pickle")
        size = blobs.size(key)
        if size is None:
            raise no_output
        if size > INLINE_LIMIT_BYTES:
            return JobResult(
                job_id=job_id, inline=False, result_url=blobs.presigned_get(key, PRESIGNED_SECONDS)
            )
        data = blobs.get(key) or b""
        return JobResult(job_id=job_id, pickle=base64.b64encode(data).decode())
    key = output_key(job_id, "result.json")
    size = blobs.size(key)
    if size is None:
        if job.status == JobStatus.TERMINATED:
            raise no_output
        return JobResult(job_id=job_id, result=None, result_repr="None", messages=_messages(services, job))
    messages = _messages(services, job)
    if size > INLINE_LIMIT_BYTES:
        url = blobs.presigned_get(key, PRESIGNED_SECONDS)
        return JobResult(job_id=job_id, inline=False, result_url=url, messages=messages)
    document = json.loads(blobs.get(key) or b"{}")
    return JobResult(
        job_id=job_id,
        result=document.get("result"),
        result_repr=document.get("resultRepr"),
        messages=messages,
    )


@dataclass(frozen=True, slots=True)
class LogPage:
    """Up to ``MAX_LOG_EVENTS`` lines of a job's log, and the token of the next page (or None)."""

    events: list[LogEvent]
    next_token: str | None


def _encode_log_token(after_ms: int, skip: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"after": after_ms, "skip": skip}).encode()).decode()


def _decode_log_token(token: str) -> tuple[int, int]:
    try:
        data = json.loads(base64.urlsafe_b64decode(token.encode()))
        after, skip = int(data["after"]), int(data["skip"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise ValidationFailed("nextToken is not one this API issued.", field="nextToken") from None
    if after < 0 or not 0 <= skip <= MAX_LOG_EVENTS:
        raise ValidationFailed("nextToken is not one this API issued.", field="nextToken")
    return after, skip


def get_log(
    services: Services,
    account_id: str,
    job_id: str,
    since: datetime | None,
    now: datetime,
    *,
    next_token: str | None = None,
) -> LogPage:
    """``GET /jobs/{jobId}/log``: the job container's console output, oldest first, a page of at
    most ``MAX_LOG_EVENTS`` lines; ``next_token`` (from the previous page) continues after it.

    Raises ``NotFound``, ``Expired`` (after ``expiresAt``), ``ValidationFailed`` for a bad token.
    A job with no log stream yet has no lines.
    """
    job = get_owned_job(services, account_id, job_id)
    if job.is_expired(now):
        raise expired(job_id)
    if not job.log_stream_name:
        return LogPage([], None)
    skip = 0
    if next_token:
        after_ms, skip = _decode_log_token(next_token)
        since = datetime.fromtimestamp(after_ms / 1000, tz=UTC)
    read = services.zones[job.geo_zone].logs.read(job.log_stream_name, since, skip + MAX_LOG_EVENTS + 1)[
        skip:
    ]
    if len(read) <= MAX_LOG_EVENTS:
        return LogPage(read, None)
    events = read[:MAX_LOG_EVENTS]
    last = events[-1].timestamp
    # The next page starts at the last line's millisecond, skipping the lines of it already shown.
    same = sum(1 for e in events if e.timestamp == last)
    if next_token and events[0].timestamp == last:
        same += skip
    return LogPage(events, _encode_log_token(round(last.timestamp() * 1000), same))


def get_or_create_account(
    services: Services, account_id: str, email: str | None, roles: tuple[str, ...], now: datetime
) -> Account:
    """The caller's account; a first-time caller (a new Cognito user) gets an empty one."""
    account = services.store.get_account(account_id)
    if account is None:
        account = services.store.create_account(
            Account(account_id=account_id, credit_balance=Decimal(0), email=email, roles=roles),
            now,
        )
    return account


@dataclass(frozen=True, slots=True)
class OutputFile:
    """One file the job wrote under ``$REMOTE_BATCH_OUTPUT_DIR``: its relative name, size in bytes,
    and a presigned GET URL valid 15 minutes."""

    name: str
    size: int
    url: str


def list_outputs(services: Services, account_id: str, job_id: str, now: datetime) -> list[OutputFile]:
    """``GET /jobs/{jobId}/outputs``: the job's output files (those written so far while it runs).

    Raises ``NotFound`` or ``Expired``; a job stopped at its CreditConstraint has none (discarded).
    """
    job = get_owned_job(services, account_id, job_id)
    if job.is_expired(now):
        raise expired(job_id)
    if job.status_reason and is_credit_constraint_reason(job.status_reason):
        return []
    blobs = services.zones[job.geo_zone].blobs
    prefix = output_key(job_id, "files/")
    return [
        OutputFile(name=o.key[len(prefix) :], size=o.size, url=blobs.presigned_get(o.key, PRESIGNED_SECONDS))
        for o in sorted(blobs.list(prefix), key=lambda o: o.key)
    ]


def get_preview(services: Services, account_id: str, job_id: str, now: datetime) -> bytes:
    """``GET /jobs/{jobId}/preview.png``: the PNG the worker drew of the result.

    Raises ``NotFound`` (no such job, or no preview: a None result, a job not finished), ``Expired``.
    """
    job = get_owned_job(services, account_id, job_id)
    if job.is_expired(now):
        raise expired(job_id)
    data = None
    if not (job.status_reason and is_credit_constraint_reason(job.status_reason)):
        data = services.zones[job.geo_zone].blobs.get(output_key(job_id, "preview.png"), INLINE_LIMIT_BYTES)
    if data is None:
        raise NotFound(f"Job {job_id} has no preview image.")
    return data


def delete_job_data(services: Services, account_id: str, job_id: str, now: datetime) -> int:
    """``DELETE /jobs/{jobId}``: delete a final job's inputs, outputs and log now instead of at expiry.

    The job record stays (history keeps working). Returns how many objects were deleted.

    Raises
    ------
    NotFound
        Not this account's job.
    Conflict
        The job is not final.
    """
    job = get_owned_job(services, account_id, job_id)
    if not job.is_final:
        raise Conflict(
            f"Job {job_id} is {job.status.value}; abort it, then delete its data once it is final."
        )
    services.store.mark_data_deleted(job_id, now)
    zone = services.zones[job.geo_zone]
    removed = zone.blobs.delete_prefix(f"inputs/{job_id}/") + zone.blobs.delete_prefix(f"outputs/{job_id}/")
    if job.log_stream_name:
        zone.logs.delete(job.log_stream_name)
    return removed
