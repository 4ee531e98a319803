"""Reading jobs, results, logs and accounts for their owner."""

from __future__ import annotations

import base64
import hashlib
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from functions.domain.arrays import child_job_id, job_data_path
from functions.domain.batch_reasons import as_sentence
from functions.domain.errors import (
    Conflict,
    DependencyFailed,
    Expired,
    JobNotFinished,
    NoOutput,
    NotFound,
    PayloadTooLarge,
    ValidationFailed,
)
from functions.domain.jobs import Account, Job, JobType, is_credit_constraint_reason
from functions.domain.limits import RESPONSE_BUDGET_BYTES, base64_bytes, presigned_seconds, wire_bytes
from functions.domain.log_lines import PartJoiner, event_cost
from functions.domain.outcomes import (
    LEGACY_MESSAGES_OBJECT,
    OUTCOME_OBJECT,
    PICKLE_OBJECT,
    PREVIEW_OBJECT,
    RESULT_OBJECT,
    OutcomeUnreadable,
    StoredOutcome,
)
from functions.domain.page_tokens import decode_page_token, encode_page_token, token_refused
from functions.domain.status import JobStatus
from functions.logic.array_results import RESULT_DOCUMENT, store_array_result
from functions.logic.job_outcomes import output_key, read_outcome
from functions.logic.submission import get_owned_job
from functions.ports import BlobStore, LogEvent, LogReader, Services

MAX_LOG_EVENTS = 10_000
#: Log streams deleted at once by ``DELETE`` of an array (one per child that ran).
LOG_DELETERS = 8
#: ``messages`` of a result are inlined up to this cost on the wire; longer, ``messagesUrl`` links them.
MESSAGES_BUDGET_BYTES = 512 * 1024
#: A result (``result.json``) is inlined up to this cost on the wire, with its messages.
RESULT_BUDGET_BYTES = RESPONSE_BUDGET_BYTES - MESSAGES_BUDGET_BYTES
#: The largest pickle inlined: its base64 (ASCII, nothing JSON escapes) fills the response's budget.
PICKLE_INLINE_MAX_BYTES = RESPONSE_BUDGET_BYTES * 3 // 4


@dataclass(frozen=True, slots=True)
class JobResult:
    """A final job's ``EvaluationResult``.

    Exactly one of ``result`` (when ``inline``), ``result_url`` or ``pickle`` is meaningful:
    ``result_url`` is a presigned GET (≤ 15 min, never past ``expiresAt``) of a JSON document whose
    ``result`` and ``resultRepr`` are the result's (``result.json``, or ``outcome.json`` when the
    result is inline there), or of the raw pickle (``result.pickle``), when inlining it would take
    the response over its 5 MiB; ``pickle`` is base64. ``messages_url`` replaces ``messages`` the
    same way (then ``messages`` is empty): a JSON document whose ``messages`` are the job's
    (``outcome.json``, or ``messages.json`` for a job of the previous layout).
    """

    job_id: str
    result: Any = None
    result_repr: str | None = None
    messages: tuple[str, ...] = ()
    inline: bool = True
    result_url: str | None = None
    pickle: str | None = None
    messages_url: str | None = None
    errors: tuple[ChildError, ...] | None = None


@dataclass(frozen=True, slots=True)
class ChildError:
    """Why an array's child has no result: its index and its ``statusReason``."""

    index: int
    message: str


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


def _legacy_messages(services: Services, job: Job, now: datetime) -> tuple[tuple[str, ...], str | None]:
    """The messages of a job of the previous layout, or () and a presigned URL of ``messages.json``
    when they would take more than ``MESSAGES_BUDGET_BYTES`` of the response."""
    blobs = services.zones[job.geo_zone].blobs
    key = output_key(job.job_id, LEGACY_MESSAGES_OBJECT)
    size = blobs.size(key)
    if size is None:
        return (), None
    link = (), blobs.presigned_get(key, presigned_seconds(job.expires_at, now))
    if size > MESSAGES_BUDGET_BYTES:
        return link
    try:
        messages = json.loads(blobs.get(key) or b"{}").get("messages", [])
    except (ValueError, AttributeError):
        return (), None
    if not isinstance(messages, list):
        return (), None
    texts = tuple(str(m) for m in messages)
    if sum(wire_bytes(json.dumps(m)) + 1 for m in texts) > MESSAGES_BUDGET_BYTES:
        return link
    return texts, None


def _inline_result(document: Any) -> bool:
    """Whether ``result.json``'s result and repr fit the response's budget as they travel."""
    if not isinstance(document, dict):
        return True
    body = json.dumps({"result": document.get("result"), "resultRepr": document.get("resultRepr")})
    return wire_bytes(body) <= RESULT_BUDGET_BYTES


def get_result(services: Services, account_id: str, job_id: str, now: datetime, as_pickle: bool) -> JobResult:
    """``GET /jobs/{jobId}/result``, from the job's ``outcome.json`` (one GetObject for a result that
    is inline there, ``functions.domain.outcomes``), or from the previous layout's objects.

    Raises
    ------
    NotFound, JobNotFinished, Expired
        As docs/http-api.md says.
    NoOutput
        The job ended Terminated without output (e.g. never ran, or its CreditConstraint discarded it).
    DependencyFailed
        S3 failed, or the job's outcome cannot be read (damaged, or of a format this code does not read).
    """
    job = _final_job_with_data(services, account_id, job_id, now)
    if job.status_reason and is_credit_constraint_reason(job.status_reason):
        cap = job.status_reason.removesuffix(" reached")
        raise NoOutput(f"Job {job_id} reached its {cap}; its output was discarded.")
    if job.type == JobType.ARRAY:
        return _array_result(services, job, now, as_pickle)
    blobs = services.zones[job.geo_zone].blobs
    no_output = NoOutput(
        f"Job {job_id} ended {job.status.value} without output"
        + (f": {as_sentence(job.status_reason)}" if job.status_reason else ".")
    )
    try:
        outcome = read_outcome(blobs, job_id)
    except OutcomeUnreadable as exc:
        raise DependencyFailed(f"The result of job {job_id} could not be read ({exc}).") from exc
    if outcome is None:
        return _legacy_result(services, job, now, as_pickle, no_output)
    seconds = presigned_seconds(job.expires_at, now)
    return _outcome_result(blobs, job, outcome, seconds, as_pickle=as_pickle, no_output=no_output)


def _outcome_result(
    blobs: BlobStore,
    job: Job,
    outcome: StoredOutcome,
    url_seconds: int,
    *,
    as_pickle: bool,
    no_output: NoOutput,
) -> JobResult:
    """``get_result`` from the job's ``outcome.json`` and the objects it names."""
    job_id = job.job_id
    if as_pickle:
        if outcome.pickle_base64 is not None and len(outcome.pickle_base64) <= RESPONSE_BUDGET_BYTES:
            return JobResult(job_id=job_id, pickle=outcome.pickle_base64)
        if outcome.pickle_object is None:
            raise no_output
        return _pickle_object(blobs, output_key(job_id, PICKLE_OBJECT), url_seconds, job_id, no_output)
    messages, messages_url = _outcome_messages(blobs, job_id, outcome, url_seconds)
    if not outcome.ran:
        if job.status == JobStatus.TERMINATED:
            raise no_output
        return JobResult(
            job_id=job_id, result=None, result_repr="None", messages=messages, messages_url=messages_url
        )
    document: dict[str, Any] | None = {"result": outcome.result, "resultRepr": outcome.result_repr}
    key = output_key(job_id, OUTCOME_OBJECT)
    if outcome.result_object is not None:
        key = output_key(job_id, RESULT_OBJECT)
        document = _result_object(blobs, key, job_id)
    if document is None or not _inline_result(document):
        url = blobs.presigned_get(key, url_seconds)
        return JobResult(
            job_id=job_id, inline=False, result_url=url, messages=messages, messages_url=messages_url
        )
    return JobResult(
        job_id=job_id,
        result=document.get("result"),
        result_repr=document.get("resultRepr"),
        messages=messages,
        messages_url=messages_url,
    )


def _result_object(blobs: BlobStore, key: str, job_id: str) -> dict[str, Any] | None:
    """The result's own ``result.json`` (``{"result", "resultRepr"}``) in one GetObject, or None when
    it is over ``RESULT_BUDGET_BYTES`` (not read: a file over the budget can only grow once escaped).

    Raises ``DependencyFailed`` when it is missing though ``outcome.json`` names it, or S3 failed.
    """
    try:
        raw = blobs.get(key, RESULT_BUDGET_BYTES)
    except PayloadTooLarge:
        return None
    if raw is None:
        raise DependencyFailed(f"The result of job {job_id} could not be read ({RESULT_OBJECT} is missing).")
    document = json.loads(raw or b"{}")
    return document if isinstance(document, dict) else {"result": None, "resultRepr": None}


def _pickle_object(
    blobs: BlobStore, key: str, url_seconds: int, job_id: str, no_output: NoOutput
) -> JobResult:
    """A pickle that is an object of its own: inline (base64) when it fits the response, else a
    presigned GET of it; one GetObject either way. ``no_output`` when the object is absent."""
    try:
        data = blobs.get(key, PICKLE_INLINE_MAX_BYTES)
    except PayloadTooLarge:
        return JobResult(job_id=job_id, inline=False, result_url=blobs.presigned_get(key, url_seconds))
    if data is None:
        raise no_output
    return JobResult(job_id=job_id, pickle=base64.b64encode(data).decode())


def _outcome_messages(
    blobs: BlobStore, job_id: str, outcome: StoredOutcome, url_seconds: int
) -> tuple[tuple[str, ...], str | None]:
    """The outcome's messages, or () and a presigned URL of ``outcome.json`` (whose ``messages``
    they are) when they would take more than ``MESSAGES_BUDGET_BYTES`` of the response."""
    if sum(wire_bytes(json.dumps(m)) + 1 for m in outcome.messages) > MESSAGES_BUDGET_BYTES:
        return (), blobs.presigned_get(output_key(job_id, OUTCOME_OBJECT), url_seconds)
    return outcome.messages, None


def _legacy_result(
    services: Services, job: Job, now: datetime, as_pickle: bool, no_output: NoOutput
) -> JobResult:
    """``get_result`` of a job the worker wrote in the previous layout (no ``outcome.json``:
    ``result.json``, ``result.pickle``, ``messages.json``), or that left nothing."""
    job_id = job.job_id
    blobs = services.zones[job.geo_zone].blobs
    url_seconds = presigned_seconds(job.expires_at, now)
    if as_pickle:
        key = output_key(job_id, PICKLE_OBJECT)
        size = blobs.size(key)
        if size is None:
            raise no_output
        # base64 is ASCII without characters JSON escapes: its length is its cost on the wire.
        if base64_bytes(size) > RESPONSE_BUDGET_BYTES:
            return JobResult(job_id=job_id, inline=False, result_url=blobs.presigned_get(key, url_seconds))
        data = blobs.get(key) or b""
        return JobResult(job_id=job_id, pickle=base64.b64encode(data).decode())
    key = output_key(job_id, RESULT_OBJECT)
    size = blobs.size(key)
    messages, messages_url = _legacy_messages(services, job, now)
    if size is None:
        if job.status == JobStatus.TERMINATED:
            raise no_output
        return JobResult(
            job_id=job_id, result=None, result_repr="None", messages=messages, messages_url=messages_url
        )
    # A file over the budget can only grow once escaped: link it without reading it.
    document = None if size > RESULT_BUDGET_BYTES else json.loads(blobs.get(key) or b"{}")
    if document is None or not _inline_result(document):
        url = blobs.presigned_get(key, url_seconds)
        return JobResult(
            job_id=job_id, inline=False, result_url=url, messages=messages, messages_url=messages_url
        )
    return JobResult(
        job_id=job_id,
        result=document.get("result"),
        result_repr=document.get("resultRepr"),
        messages=messages,
        messages_url=messages_url,
    )


def _array_result(services: Services, job: Job, now: datetime, as_pickle: bool) -> JobResult:
    """An array's result: its children's results in index order, a failed child's as null with its
    reason in ``errors``; a link to the document (assembled once, when the array ended) when it
    does not fit the response. Pickles are per child."""
    if as_pickle:
        raise ValidationFailed(
            f"Job {job.job_id} is an array: its result is JSON; ask a child (GET /jobs/{job.job_id}:0/result"
            "?format=pickle) for a pickle.",
            field="format",
        )
    blobs = services.zones[job.geo_zone].blobs
    key = output_key(job.job_id, RESULT_DOCUMENT)
    size = blobs.size(key)
    if size is None:
        # Assembled before the array was stored final; gone only if its write was lost: make it again.
        store_array_result(services, job)
        size = blobs.size(key) or 0
    if size > RESULT_BUDGET_BYTES:
        return JobResult(
            job_id=job.job_id,
            inline=False,
            result_url=blobs.presigned_get(key, presigned_seconds(job.expires_at, now)),
        )
    document = json.loads(blobs.get(key) or b"{}")
    errors = tuple(ChildError(int(e["index"]), str(e["message"])) for e in document.get("errors", []))
    if (
        not _inline_result(document)
        or wire_bytes(json.dumps(document.get("errors", []))) > MESSAGES_BUDGET_BYTES
    ):
        url = blobs.presigned_get(key, presigned_seconds(job.expires_at, now))
        return JobResult(job_id=job.job_id, inline=False, result_url=url)
    return JobResult(
        job_id=job.job_id,
        result=document.get("result"),
        result_repr=document.get("resultRepr"),
        messages=tuple(f"index {e.index}: {e.message}" for e in errors),
        errors=errors,
    )


@dataclass(frozen=True, slots=True)
class LogPage:
    """Up to ``MAX_LOG_EVENTS`` lines of a job's log, at most ``LOG_PAGE_BYTES`` of them on the
    wire, and the token of the next page (or None)."""

    events: list[LogEvent]
    next_token: str | None


#: What one page's lines may cost in the response (``log_lines.event_cost``), below the 5 MiB cap.
LOG_PAGE_BYTES = RESPONSE_BUDGET_BYTES
#: Parts of a cut line read (and dropped) per request at most: 64 × 256 KiB = 16 MiB of reading.
MAX_DROPPED_PARTS = 64
_MAX_TOKEN_SKIP = 10**9


_LOG_TOKEN = frozenset({"log", "after", "skip", "cut"})


def _log_tag(stream: str) -> str:
    """A short tag of a log stream, so a log's token is refused on another log."""
    return hashlib.sha256(stream.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _encode_log_token(stream: str, after_ms: int, skip: int, dropping: bool) -> str:
    return encode_page_token({"log": _log_tag(stream), "after": after_ms, "skip": skip, "cut": int(dropping)})


def _decode_log_token(token: str, stream: str) -> tuple[int, int, bool]:
    position = decode_page_token(token, _LOG_TOKEN, issued_for={"log": _log_tag(stream)}, scope="log")
    after, skip, cut = position["after"], position["skip"], position["cut"]
    if not all(type(value) is int for value in (after, skip, cut)):
        raise token_refused("log")
    if after < 0 or not 0 <= skip <= _MAX_TOKEN_SKIP or cut not in (0, 1):
        raise token_refused("log")
    return after, skip, bool(cut)


def _ms(stamp: datetime) -> int:
    return round(stamp.timestamp() * 1000)


def get_log(
    services: Services,
    account_id: str,
    job_id: str,
    since: datetime | None,
    now: datetime,
    *,
    next_token: str | None = None,
) -> LogPage:
    """``GET /jobs/{jobId}/log``: the job container's console output, oldest first.

    A page holds at most ``MAX_LOG_EVENTS`` lines and at most ``LOG_PAGE_BYTES`` of them as the
    response carries them (so no response is over 5 MiB, whatever the lines hold); ``next_token``
    (from the previous page) continues after it. A line CloudWatch holds in several events (the
    awslogs driver's 256 KiB parts) comes back whole; one over 1 MiB is cut and marked
    (``functions.domain.log_lines``). A page may come back short, even empty, while it has a token
    (a cut line's parts take a bounded amount of reading per request).

    The token is the millisecond of the last line returned and how many events of that millisecond
    were read, so lines written later in the same millisecond are not lost.

    Raises ``NotFound``, ``Expired`` (after ``expiresAt``), ``ValidationFailed`` for a bad token.
    A job with no log stream yet has no lines.
    """
    job = get_owned_job(services, account_id, job_id)
    if job.type == JobType.ARRAY:
        raise ValidationFailed(
            f"Job {job_id} is an array and has no log of its own; ask a child: "
            f"GET /jobs/{job_id}:<index>/log.",
            field="jobId",
        )
    if job.is_expired(now):
        raise expired(job_id)
    if not job.log_stream_name:
        return LogPage([], None)
    return read_log_page(services.zones[job.geo_zone].logs, job.log_stream_name, since, next_token)


def read_log_page(logs: LogReader, stream: str, since: datetime | None, next_token: str | None) -> LogPage:
    """One page of a log stream from ``since`` (or after ``next_token``), as :func:`get_log` describes
    it (a job's console log; an environment's build log). Raises ``ValidationFailed`` for a bad token."""
    skip, dropping, position_ms = 0, False, -1
    if next_token:
        position_ms, skip, dropping = _decode_log_token(next_token, stream)
        since = datetime.fromtimestamp(position_ms / 1000, tz=UTC)
    events = logs.events(stream, since)
    for _ in zip(range(skip), events, strict=False):
        pass
    joiner = PartJoiner(events, dropping=dropping)
    position_skip = skip
    if not joiner.drop_continuation(MAX_DROPPED_PARTS):
        return LogPage([], _encode_log_token(stream, position_ms, skip + joiner.consumed, True))
    position_skip += joiner.consumed
    lines: list[LogEvent] = []
    cost = 0
    while True:
        if len(lines) == MAX_LOG_EVENTS:
            token = (
                _encode_log_token(stream, position_ms, position_skip, False) if joiner.has_more() else None
            )
            return LogPage(lines, token)
        consumed = joiner.consumed
        line = joiner.next_line(MAX_DROPPED_PARTS)
        if line is None:
            return LogPage(lines, None)
        line_cost = event_cost(line.message)
        if lines and cost + line_cost > LOG_PAGE_BYTES:
            return LogPage(lines, _encode_log_token(stream, position_ms, position_skip, False))
        lines.append(LogEvent(line.timestamp, line.message))
        cost += line_cost
        read = joiner.consumed - consumed
        line_ms = _ms(line.timestamp)
        position_skip = position_skip + read if line_ms == position_ms else read
        position_ms = line_ms
        if joiner.dropping:
            return LogPage(lines, _encode_log_token(stream, position_ms, position_skip, True))


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


@dataclass(frozen=True, slots=True)
class OutputPage:
    """A page of a job's output files, in name order (UTF-8 bytes), and the token of the next page
    (or None)."""

    files: list[OutputFile]
    next_token: str | None


#: S3's longest object key, in bytes of UTF-8: no token names a position past it.
MAX_KEY_BYTES = 1024
#: Most output files a page lists (one ListObjectsV2 request at most; S3 returns up to 1,000 keys).
MAX_OUTPUTS_PAGE = 1000
#: What one page's files may cost in the response (name, size and URL as JSON), below the 5 MiB cap.
OUTPUTS_PAGE_BYTES = RESPONSE_BUDGET_BYTES
#: The JSON around one file's name, size and URL, escaped twice (``{\\"name\\": , ...}, ``).
_OUTPUT_FRAME_BYTES = 48


_OUTPUTS_TOKEN = frozenset({"jobId", "after"})


def _encode_outputs_token(job_id: str, after: str) -> str:
    return encode_page_token({"jobId": job_id, "after": after})


def _decode_outputs_token(token: str, job_id: str) -> str:
    after = decode_page_token(token, _OUTPUTS_TOKEN, issued_for={"jobId": job_id}, scope="job")["after"]
    if not isinstance(after, str) or not after or not is_key_text(after):
        raise token_refused("job")
    return after


def is_key_text(text: str) -> bool:
    """Whether ``text`` can be (part of) an S3 key or a DynamoDB string: UTF-8 (no lone surrogate)
    and at most ``MAX_KEY_BYTES`` bytes of it."""
    try:
        return len(text.encode("utf-8")) <= MAX_KEY_BYTES
    except UnicodeEncodeError:
        return False


def output_cost(file: OutputFile) -> int:
    """Bytes one file takes in the response's ``files`` list, escaped as JSON in the body and again in
    the invoke response (as ``log_lines.event_cost`` counts a log line)."""
    text = wire_bytes(json.dumps(file.name)) + wire_bytes(json.dumps(file.url))
    return text + len(str(file.size)) + _OUTPUT_FRAME_BYTES


def list_outputs(
    services: Services,
    account_id: str,
    job_id: str,
    now: datetime,
    *,
    limit: int = MAX_OUTPUTS_PAGE,
    next_token: str | None = None,
) -> OutputPage:
    """``GET /jobs/{jobId}/outputs``: a page of the job's output files (those written so far while it
    runs), by name.

    A page holds at most ``limit`` (1..``MAX_OUTPUTS_PAGE``) files and at most
    ``OUTPUTS_PAGE_BYTES`` of them as the response carries them (names and URLs escaped), so no
    answer is over 5 MiB however many files a job wrote; ``next_token`` (from the previous page)
    continues after the last name it listed. A page may be short while it has a token.

    Raises ``NotFound``, ``Expired``, ``ValidationFailed`` (``field="nextToken"``) for a token this
    API did not issue; a job stopped at its CreditConstraint has none (discarded).
    """
    job = get_owned_job(services, account_id, job_id)
    if job.is_expired(now):
        raise expired(job_id)
    after = _decode_outputs_token(next_token, job_id) if next_token else None
    if job.status_reason and is_credit_constraint_reason(job.status_reason):
        return OutputPage([], None)
    blobs = services.zones[job.geo_zone].blobs
    prefix = output_key(job_id, "files/")
    seconds = presigned_seconds(job.expires_at, now)
    objects, more = blobs.list_page(prefix, None if after is None else prefix + after, limit)
    files: list[OutputFile] = []
    cost = 0
    for stored in objects:
        file = OutputFile(
            name=stored.key[len(prefix) :], size=stored.size, url=blobs.presigned_get(stored.key, seconds)
        )
        if files and cost + output_cost(file) > OUTPUTS_PAGE_BYTES:
            return OutputPage(files, _encode_outputs_token(job_id, files[-1].name))
        files.append(file)
        cost += output_cost(file)
    return OutputPage(files, _encode_outputs_token(job_id, files[-1].name) if more and files else None)


@dataclass(frozen=True, slots=True)
class PreviewLink:
    """Where the preview PNG is: a presigned GET (``expires_seconds`` ≤ 900, never past the job's
    ``expiresAt``) and its size in bytes."""

    url: str
    size: int
    expires_seconds: int


def get_preview(services: Services, account_id: str, job_id: str, now: datetime) -> PreviewLink:
    """``GET /jobs/{jobId}/preview.png``: a link to the PNG the worker drew of the result.

    Served as a link whatever its size: the PNG never passes through API Gateway and Lambda (no
    binary media types, no 6 MB limit), and the client gets it straight from S3.

    A picture of the result (a plot, an image) is the worker's ``preview.png``. The repr drawn as
    text travels inside ``outcome.json`` (``functions.domain.outcomes``): the first request writes it
    to ``preview.png`` (the same bytes each time: idempotent), so a presigned URL can point at it.

    Raises ``NotFound`` (no such job, or no preview: a None result, a job not finished), ``Expired``.
    """
    job = get_owned_job(services, account_id, job_id)
    if job.is_expired(now):
        raise expired(job_id)
    blobs = services.zones[job.geo_zone].blobs
    # An array's picture is its first child's (WCS's OutputPreviewImage of an array).
    owner = child_job_id(job_id, 0) if job.type == JobType.ARRAY else job_id
    key = output_key(owner, PREVIEW_OBJECT)
    size = None
    if not (job.status_reason and is_credit_constraint_reason(job.status_reason)):
        size = blobs.size(key)
        if size is None:
            size = _store_inline_preview(blobs, owner, key)
    if size is None:
        raise NotFound(f"Job {job_id} has no preview image.")
    seconds = presigned_seconds(job.expires_at, now)
    return PreviewLink(url=blobs.presigned_get(key, seconds), size=size, expires_seconds=seconds)


def _store_inline_preview(blobs: BlobStore, job_id: str, key: str) -> int | None:
    """Write the text preview inline in the job's ``outcome.json`` to ``key``; its size in bytes, or
    None when the job has none (no outcome yet, a None result, an outcome unreadable here)."""
    try:
        outcome = read_outcome(blobs, job_id)
    except OutcomeUnreadable:
        return None
    if outcome is None or outcome.preview_png is None:
        return None
    blobs.put(key, outcome.preview_png, "image/png")
    return len(outcome.preview_png)


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
    # An array's prefixes hold its children's data too (``arrays.job_data_path``).
    path = job_data_path(job_id)
    removed = zone.blobs.delete_prefix(f"inputs/{path}/") + zone.blobs.delete_prefix(f"outputs/{path}/")
    streams = [job.log_stream_name] if job.log_stream_name else []
    if job.type == JobType.ARRAY:
        children = services.store.get_jobs([child_job_id(job_id, i) for i in range(job.array_size or 0)])
        streams += [c.log_stream_name for c in children if c.log_stream_name]
    with ThreadPoolExecutor(max_workers=LOG_DELETERS) as pool:
        list(pool.map(zone.logs.delete, streams))
    return removed
