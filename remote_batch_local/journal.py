"""The write-ahead journal of the local stack: every acknowledged write to moto is on disk first.

``JournalingApp`` is a WSGI middleware in front of moto's application. For each request that
changes what the stack keeps (DynamoDB item writes; S3 object writes, deletes and multipart
uploads, presigned ones included; SNS topic and subscription changes, not ``Publish``), it

1. reads the whole request body;
2. under the service's lock, lets moto apply the request and, when moto answered 2xx, gives the
   record the journal's next sequence number (so the journal's order of a service's records is the
   order moto applied them: replay meets the same conditions, e.g. a conditional ``PutItem``);
3. outside the lock, waits until the record is written and ``fsync``-ed (group commit: one writer
   flushes every record queued meanwhile with one ``fsync``);
4. only then returns moto's answer.

So a write that was answered is durable; a write that crashed before its ``fsync`` was never
answered, hence never acknowledged to anybody (the api Lambda answers its HTTP caller only after
its DynamoDB writes returned). Reads, failed writes and CloudWatch Logs writes are not journaled
(logs are kept by the snapshot only: they are no API acknowledgement, and a verbose job would
otherwise fill the journal).

The journal is a folder of segments ``<first seq>.jsonl``: one JSON object per line, ``{"seq",
"service", "method", "path", "query", "headers", "body" (base64), "response" (base64, only where
replay needs the original answer)}``. A line without its final newline (a write cut by the crash)
ends the journal; it is cut off at the next open.

A full or read-only disk (``state_disk.py``): a write is refused before moto applies it while the
home's filesystem refuses writes (``StateDisk.check``: nothing applied, nothing journaled). A flush
that fails all the same (the disk filled meanwhile) cuts the segment back to its last durable byte
(no torn record is left between whole ones), keeps the batch queued in order, and raises
``StateDiskUnavailable`` to the writers waiting on it: their writes were applied in moto but never
acknowledged, and become durable, before any later write is acknowledged, at the next flush that
goes through. ``rotate`` starts a new segment; a snapshot that
covers a segment's records lets ``discard`` delete it (``state.py`` says when).

Replay (``replay``) feeds the records after a snapshot's cut to a fresh moto application in
process, in order, without the network. moto makes two kinds of ids at random that later records
refer to: SNS subscription ARNs and S3 multipart upload ids. After replaying the request that made
one, the new object is renamed in moto's backend to the id recorded in the original answer, so
every later record (and every item that stored the id, e.g. an account's ``emailSubscription``)
still points at it. Everything else moto answers is a function of the request and the state
(DynamoDB has no server-side values; S3 ETags are MD5s of the body), so replay is deterministic.
"""

from __future__ import annotations

import base64
import io
import json
import logging
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote

from werkzeug.test import EnvironBuilder
from werkzeug.wsgi import get_input_stream

from remote_batch_local.lambda_context import LOCAL_ACCOUNT_ID
from remote_batch_local.state_disk import StateDisk, StateDiskUnavailable
from remote_batch_local.wsgi_calls import call_app

logger = logging.getLogger(__name__)

JOURNALED = ("dynamodb", "s3", "sns")
_DYNAMODB_WRITES = frozenset(
    {
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "BatchWriteItem",
        "TransactWriteItems",
        "ExecuteStatement",
        "BatchExecuteStatement",
        "ExecuteTransaction",
    }
)
# SNS query-protocol actions that change topics or subscriptions (Publish only records a message).
_SNS_WRITES = frozenset(
    {
        "CreateTopic",
        "DeleteTopic",
        "SetTopicAttributes",
        "Subscribe",
        "Unsubscribe",
        "ConfirmSubscription",
        "SetSubscriptionAttributes",
        "TagResource",
        "UntagResource",
    }
)
_CREDENTIAL_SCOPE = re.compile(r"Credential=[^/]+/\d{8}/[^/]+/([a-z0-9-]+)/aws4_request")
# Request headers that describe the transport, not the request: never recorded.
_TRANSPORT_HEADERS = frozenset({"content-length", "transfer-encoding", "connection", "expect", "keep-alive"})
_SUBSCRIPTION_ARN = re.compile(rb"<SubscriptionArn>([^<]+)</SubscriptionArn>")
_UPLOAD_ID = re.compile(rb"<UploadId>([^<]+)</UploadId>")
#: Set in the environ of a request the stack sends itself (``transport.InProcessTransport``): a refused
#: write raises ``StateDiskUnavailable`` to its caller instead of answering 503 over HTTP.
IN_PROCESS = "remote_batch.in_process"


def _scope_service(environ: Mapping[str, Any]) -> str:
    found = _CREDENTIAL_SCOPE.search(environ.get("HTTP_AUTHORIZATION", "")) or _CREDENTIAL_SCOPE.search(
        unquote(environ.get("QUERY_STRING", "")).replace("X-Amz-Credential=", "Credential=")
    )
    return str(found.group(1)) if found else ""


def journaled_service(environ: Mapping[str, Any], body: bytes) -> str | None:
    """The service whose kept state the request may change (``dynamodb``, ``s3``, ``sns``), or None.

    DynamoDB: item writes by ``X-Amz-Target``. S3: every PUT, POST and DELETE (objects, deletes,
    multipart uploads; presigned URLs carry the credential scope in the query). SNS: the actions of
    ``_SNS_WRITES`` (the ``Action`` of the form body).
    """
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        prefix, _, operation = target.partition(".")
        return "dynamodb" if prefix == "DynamoDB_20120810" and operation in _DYNAMODB_WRITES else None
    method = environ.get("REQUEST_METHOD")
    if method not in ("PUT", "POST", "DELETE"):
        return None
    service = _scope_service(environ)
    if service == "s3":
        return "s3"
    if service == "sns":
        action = parse_qs(body.decode("utf-8", "replace")).get("Action", [""])[0]
        return "sns" if action in _SNS_WRITES else None
    return None


def needs_request_body(environ: Mapping[str, Any]) -> bool:
    """Whether the request might be journaled (so its body must be read before deciding)."""
    if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_20120810."):
        return True
    return environ.get("REQUEST_METHOD") in ("PUT", "POST", "DELETE") and _scope_service(environ) in (
        "s3",
        "sns",
    )


@dataclass(slots=True)
class _Segment:
    path: Path
    first_seq: int
    last_by_service: dict[str, int] = field(default_factory=dict)


class Journal:
    """Append-only, fsync-ed segments of journal records under ``directory``.

    Opening reads every segment (the records are kept for ``replay``), cuts a torn last line off,
    and appends after the last record. Sequence numbers never go back, across restarts too: the
    snapshot files name the last record they cover, so a reused number would be taken as covered.

    Parameters
    ----------
    directory : Path
        ``<home>/state/journal``; created 0700 when missing.
    disk : StateDisk | None
        The home's filesystem: a flush that fails because it is full or read-only is reported to it
        and raised as ``StateDiskUnavailable``; None raises the ``OSError`` itself.
    """

    def __init__(self, directory: Path, disk: StateDisk | None = None) -> None:
        self._dir = directory
        self._disk = disk
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._cond = threading.Condition()
        self._service_locks = {service: threading.Lock() for service in JOURNALED}
        self._segments: list[_Segment] = []
        self._loaded: list[dict[str, Any]] = []
        self._next_seq = 1
        self._load()
        self._pending: list[bytes] = []
        self._queued_seq = self._next_seq - 1
        self._durable_seq = self._queued_seq
        self._flushing = False
        if not self._segments:
            self._segments.append(_Segment(self._segment_path(self._next_seq), self._next_seq))
        self._fd = _open_segment(self._segments[-1].path)
        # The segment's length up to its last fsync-ed record: a failed flush cuts the file back to it.
        self._durable_size = os.fstat(self._fd).st_size

    def _segment_path(self, first_seq: int) -> Path:
        return self._dir / f"{first_seq:020d}.jsonl"

    def _load(self) -> None:
        paths = sorted(self._dir.glob("*.jsonl"))
        for index, path in enumerate(paths):
            segment = _Segment(path, int(path.stem))
            # A segment is named after the number its first record takes: an empty newest one (every
            # record before it covered by a snapshot and discarded) still says where numbering is.
            self._next_seq = max(self._next_seq, segment.first_seq)
            data = path.read_bytes()
            good = 0
            for line in data.splitlines(keepends=True):
                try:
                    if not line.endswith(b"\n"):
                        raise ValueError("torn line")
                    record = json.loads(line)
                except ValueError:
                    break
                good += len(line)
                self._loaded.append(record)
                segment.last_by_service[record["service"]] = record["seq"]
                self._next_seq = max(self._next_seq, record["seq"] + 1)
            if good < len(data):
                logger.warning(
                    "journal cut after its last whole record path=%s bytes=%d", path, len(data) - good
                )
                if index != len(paths) - 1:
                    logger.error("a journal segment before the last is damaged path=%s", path)
                with path.open("r+b") as file:
                    file.truncate(good)
                    os.fsync(file.fileno())
            self._segments.append(segment)

    def records(self) -> list[dict[str, Any]]:
        """The records found on disk when the journal was opened, oldest first."""
        return list(self._loaded)

    @contextmanager
    def applying(self, service: str) -> Iterator[None]:
        """Held while moto applies a write of ``service`` and its record is queued (and while a
        snapshot reads that service, so its cut is exact)."""
        with self._service_locks[service]:
            yield

    def held(self, service: str) -> bool:
        """Whether some thread is inside ``applying(service)`` now."""
        return self._service_locks[service].locked()

    def last_seq(self) -> int:
        """The sequence number of the last queued record (0 when none)."""
        with self._cond:
            return self._queued_seq

    def number_after(self, seq: int) -> None:
        """Number the next record after ``seq`` at least (a restored snapshot's cut: records it
        covers must not be numbered again, even when the segments that held them are gone)."""
        with self._cond:
            if self._queued_seq < seq:
                self._queued_seq = self._durable_seq = seq

    def last_seq_of(self, service: str) -> int:
        """The sequence number of ``service``'s last record in any segment (0 when none)."""
        with self._cond:
            return max((s.last_by_service.get(service, 0) for s in self._segments), default=0)

    def append(self, record: dict[str, Any]) -> int:
        """Queue ``record`` (``service`` set) with the next sequence number; returns it. Call
        ``wait_durable`` before acknowledging the write."""
        with self._cond:
            seq = self._queued_seq + 1
            self._queued_seq = seq
            self._pending.append(json.dumps({"seq": seq, **record}, separators=(",", ":")).encode() + b"\n")
            self._segments[-1].last_by_service[record["service"]] = seq
            return seq

    def wait_durable(self, seq: int) -> None:
        """Return once record ``seq`` is written and fsync-ed (this thread may do the writing for
        everyone queued so far: group commit)."""
        with self._cond:
            while self._durable_seq < seq:
                if self._flushing:
                    self._cond.wait()
                    continue
                self._flush_locked()

    def _flush_locked(self) -> None:
        """Write and fsync every queued record (called with ``_cond`` held, released meanwhile).

        Raises
        ------
        StateDiskUnavailable
            The disk is full or read-only (with a ``disk``); the records stay queued, in order.
        OSError
            Any other failed write or fsync; the records stay queued likewise.
        """
        batch, self._pending = self._pending, []
        upto = self._queued_seq
        fd, durable_size = self._fd, self._durable_size
        data = b"".join(batch)
        self._flushing = True
        self._cond.release()
        failure: OSError | None = None
        try:
            # A flush that failed before left the file cut back, or (if even that failed) longer.
            if os.fstat(fd).st_size != durable_size:
                os.ftruncate(fd, durable_size)
            _write_all(fd, data)
            os.fsync(fd)
        except OSError as exc:
            failure = exc
            _truncate_quietly(fd, durable_size)
        finally:
            self._cond.acquire()
            self._flushing = False
            self._cond.notify_all()
        if failure is not None:
            # After a failed fsync the written pages may be gone: the next flush writes them all again.
            self._pending[:0] = batch
            logger.error("journal flush failed records=%d error=%s", len(batch), failure)
            refused = self._disk.report(failure) if self._disk is not None else None
            if refused is not None:
                raise refused from failure
            raise failure
        self._durable_size = durable_size + len(data)
        self._durable_seq = max(self._durable_seq, upto)

    def rotate(self) -> None:
        """Flush what is queued and start a new segment (the older ones become discardable)."""
        with self._cond:
            while self._flushing:
                self._cond.wait()
            if self._pending:
                self._flush_locked()
            if not self._segments[-1].last_by_service:
                return
            first = self._queued_seq + 1
            path = self._segment_path(first)
            # Opened before the old one is closed: a disk that refuses the new file keeps the old one.
            fd = self._open_reported(path)
            os.close(self._fd)
            self._segments.append(_Segment(path, first))
            self._fd, self._durable_size = fd, 0

    def _open_reported(self, path: Path) -> int:
        try:
            return _open_segment(path)
        except OSError as exc:
            refused = self._disk.report(exc) if self._disk is not None else None
            if refused is not None:
                raise refused from exc
            raise

    def discard(self, covered: Mapping[str, int]) -> int:
        """Delete the closed segments whose every record is covered by a snapshot: ``covered``
        maps a service to the last sequence number its snapshot files include. Returns how many."""
        with self._cond:
            kept, removed = [], 0
            for segment in self._segments[:-1]:
                if all(seq <= covered.get(service, 0) for service, seq in segment.last_by_service.items()):
                    segment.path.unlink(missing_ok=True)
                    removed += 1
                else:
                    kept.append(segment)
            self._segments = [*kept, self._segments[-1]]
            return removed

    def close(self) -> None:
        """Flush and close the current segment. Records that cannot be written (the disk refuses
        them) were never acknowledged: they are logged as lost and the segment is closed all the same."""
        with self._cond:
            while self._flushing:
                self._cond.wait()
            try:
                if self._pending:
                    self._flush_locked()
            except (OSError, StateDiskUnavailable) as exc:
                logger.error(
                    "journal closed with unwritten records records=%d error=%s", len(self._pending), exc
                )
            finally:
                os.close(self._fd)


def _open_segment(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte of ``data`` is written (a write may take only part of it)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _truncate_quietly(fd: int, size: int) -> None:
    """Cut the file back to ``size`` after a failed write (frees what it took); a failure here is the
    next flush's to repeat (it checks the length first)."""
    try:
        os.ftruncate(fd, size)
    except OSError as exc:
        logger.error("journal could not be cut back after a failed write size=%d error=%s", size, exc)


class JournalingApp:
    """WSGI middleware in front of moto: journals each successful write before answering it.

    Until ``enable`` is called (after provisioning, the snapshot restore and the replay, which must
    not be journaled again) requests pass straight through.

    While ``disk`` refuses writes (full, read-only) a write is refused before moto applies it:
    ``StateDiskUnavailable`` is raised to the stack's own callers (``IN_PROCESS``), and a caller over
    HTTP (a job's worker) is answered 503 ``ServiceUnavailable`` in its service's error format.
    """

    def __init__(self, app: Callable[..., Any], journal: Journal, disk: StateDisk | None = None) -> None:
        self.app = app
        self._journal = journal
        self._disk = disk
        self._enabled = False

    @property
    def journal(self) -> Journal:
        """Where the writes go."""
        return self._journal

    def enable(self) -> None:
        """Journal every write from now on."""
        self._enabled = True

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if not self._enabled or not needs_request_body(environ):
            return self.app(environ, start_response)
        body = get_input_stream(environ).read()
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        environ.pop("HTTP_TRANSFER_ENCODING", None)
        environ["wsgi.input_terminated"] = False
        service = journaled_service(environ, body)
        if service is None:
            return self.app(environ, start_response)
        try:
            return self._journaled(service, environ, body, start_response)
        except StateDiskUnavailable as refused:
            if environ.get(IN_PROCESS):
                raise
            logger.warning("write refused: the state disk takes no writes service=%s", service)
            status, headers, answer = _unavailable(service, str(refused))
            start_response(status, headers)
            return [answer]

    def _journaled(
        self, service: str, environ: dict[str, Any], body: bytes, start_response: Callable[..., Any]
    ) -> Any:
        if self._disk is not None:
            self._disk.check()
        seq = 0
        with self._journal.applying(service):
            answer = call_app(self.app, environ)
            if answer.status[:1] == "2":
                seq = self._journal.append(_record(service, environ, body, answer.body))
        if seq:
            self._journal.wait_durable(seq)
        start_response(answer.status, answer.headers)
        return [answer.body]


def _unavailable(service: str, message: str) -> tuple[str, list[tuple[str, str]], bytes]:
    """A 503 ``ServiceUnavailable`` answer in ``service``'s error format (DynamoDB's JSON protocol;
    S3's and SNS's XML), which botocore reads as that error code."""
    if service == "dynamodb":
        body = json.dumps(
            {"__type": "com.amazonaws.dynamodb.v20120810#ServiceUnavailable", "message": message}
        )
        return "503 Service Unavailable", [("Content-Type", "application/x-amz-json-1.0")], body.encode()
    escaped = message.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    error = f"<Code>ServiceUnavailable</Code><Message>{escaped}</Message>"
    xml = (
        f"<Error>{error}</Error>"
        if service == "s3"
        else f"<ErrorResponse><Error>{error}</Error></ErrorResponse>"
    )
    return "503 Service Unavailable", [("Content-Type", "application/xml")], xml.encode()


def _record(service: str, environ: Mapping[str, Any], body: bytes, answer: bytes) -> dict[str, Any]:
    headers = {
        key[5:].replace("_", "-").title(): value
        for key, value in environ.items()
        if key.startswith("HTTP_") and key[5:].replace("_", "-").lower() not in _TRANSPORT_HEADERS
    }
    if environ.get("CONTENT_TYPE"):
        headers["Content-Type"] = environ["CONTENT_TYPE"]
    record: dict[str, Any] = {
        "service": service,
        "method": environ["REQUEST_METHOD"],
        "path": environ.get("PATH_INFO", "/"),
        "query": environ.get("QUERY_STRING", ""),
        "headers": headers,
        "body": base64.b64encode(body).decode("ascii"),
    }
    if _SUBSCRIPTION_ARN.search(answer) or _UPLOAD_ID.search(answer):
        record["response"] = base64.b64encode(answer).decode("ascii")
    return record


@dataclass(frozen=True, slots=True)
class ReplayReport:
    """What ``replay`` did: records applied, skipped (covered by the snapshot), refused by moto."""

    applied: int = 0
    skipped: int = 0
    refused: int = 0


def replay(
    records: Iterable[Mapping[str, Any]], app: Callable[..., Any], covered: Mapping[str, int]
) -> ReplayReport:
    """Apply the journal records a snapshot does not cover to moto's WSGI ``app``, in order.

    Parameters
    ----------
    records : Iterable[Mapping]
        ``Journal.records()``.
    app : Callable
        moto's application (not the journaling middleware: replayed writes are journaled already).
    covered : Mapping[str, int]
        Per service, the last sequence number the restored snapshot includes.
    """
    applied = skipped = refused = 0
    for record in records:
        if record["seq"] <= covered.get(record["service"], 0):
            skipped += 1
            continue
        status, answer = _apply(app, record)
        if status[:1] != "2":
            refused += 1
            logger.warning(
                "journal record refused at replay seq=%d service=%s status=%s answer=%s",
                record["seq"],
                record["service"],
                status,
                answer[:300],
            )
            continue
        applied += 1
        original = base64.b64decode(record["response"]) if record.get("response") else b""
        _keep_ids(record, original, answer)
    return ReplayReport(applied, skipped, refused)


def _apply(app: Callable[..., Any], record: Mapping[str, Any]) -> tuple[str, bytes]:
    headers = dict(record["headers"])
    host = headers.pop("Host", "127.0.0.1")
    builder = EnvironBuilder(
        method=record["method"],
        path=record["path"],
        query_string=record["query"],
        headers=headers,
        data=base64.b64decode(record["body"]),
        base_url=f"http://{host}/",
    )
    answer = call_app(app, builder.get_environ())
    return answer.status, answer.body


def _keep_ids(record: Mapping[str, Any], original: bytes, answer: bytes) -> None:
    """Give the object a replayed request created the id the original answer named."""
    old, new = _SUBSCRIPTION_ARN.search(original), _SUBSCRIPTION_ARN.search(answer)
    if old and new and old.group(1) != new.group(1):
        rename_subscription(new.group(1).decode(), old.group(1).decode())
    old, new = _UPLOAD_ID.search(original), _UPLOAD_ID.search(answer)
    if old and new and old.group(1) != new.group(1):
        bucket = record["path"].lstrip("/").split("/", 1)[0]
        _rename_upload(bucket, new.group(1).decode(), old.group(1).decode())


def rename_subscription(current: str, wanted: str) -> None:
    """Rename a subscription in moto's SNS backend (this process) from ``current`` to ``wanted``.

    moto names a new subscription ``<topic ARN>:<random UUID>``; this gives a re-created one the ARN
    it had, so what stored the ARN keeps working.
    """
    from moto.sns.models import sns_backends

    _, _, _, region, account, _ = current.split(":", 5)
    subscriptions = sns_backends[account][region].subscriptions
    subscription = subscriptions.pop(current)
    subscription.arn = wanted
    subscriptions[wanted] = subscription


def _rename_upload(bucket: str, current: str, wanted: str) -> None:
    from moto.s3.models import s3_backends

    multiparts = s3_backends[LOCAL_ACCOUNT_ID]["aws"].buckets[bucket].multiparts
    upload = dict.pop(multiparts, current)
    upload.id = wanted
    multiparts[wanted] = upload
