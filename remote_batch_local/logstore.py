"""Job logs on disk: the local stack's CloudWatch Logs streams of job output, without moto's copy.

moto keeps every log event as a Python object in memory (about 400 bytes for a 100-byte line) and
sorts the whole stream at each ``GetLogEvents`` page and scans it at each ``DescribeLogStreams``:
a job printing 300 MB grew the stack by 3–5× that and kept it, and the snapshot, reading every
stream from the start, fell minutes behind. So, for the job log groups only, ``LogStore.install``
swaps the stream moto creates for a ``DiskLogStream``: moto still parses and answers every request
(same API, same errors, same tokens), but the events live in one append-only file per stream,
``<root>/<40 hex>.log`` (records of ``<timestamp ms, ingestion ms, byte length>`` then the UTF-8
message), with ``<40 hex>.json`` naming its account, region, group and stream. In memory a stream
keeps its counters and a sparse index (the offset and timestamp of every 1,024th event): 16 bytes
per 1,024 events, about 1.6 MB for 100 million lines.

Writes go to the file before ``PutLogEvents`` answers (written to the OS, so a ``kill -9`` of the
stack loses nothing; ``sync`` fsyncs the streams written since, which the state snapshot calls every
tick); a torn last record, after a power loss, is cut off when the stream is opened again. The files
are the logs' persistent state: at start ``reattach`` creates each stored stream in moto again, which
reads only the file's record headers to rebuild the index.

A full or read-only disk (``state_disk.py``): while the home's filesystem refuses writes,
``PutLogEvents`` is refused before anything is written (``StateDiskUnavailable``; the executor's
``InProcessLogs`` answers CloudWatch's ``ServiceUnavailableException``); a batch whose write fails all
the same is cut off the file again, so the stream holds whole records and its counters match them.

Differences from moto's (and CloudWatch's) stream, kept on purpose: events are kept in arrival order
(the executor stamps them never decreasing, so this is timestamp order for job logs; CloudWatch sorts
an out-of-order batch in), and a ``GetLogEvents`` page holds at most 1 MB of messages besides
10,000 events, as CloudWatch's does (moto has no byte bound).
"""

from __future__ import annotations

import bisect
import gc
import hashlib
import json
import logging
import os
import struct
import threading
from array import array
from collections import deque
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from moto.core.utils import unix_time_millis, utcnow
from moto.logs import models as moto_logs
from moto.logs.exceptions import InvalidParameterException, ResourceAlreadyExistsException
from moto.logs.utils import EventMessageFilter

from remote_batch_local.files import write_json_atomic
from remote_batch_local.state_disk import StateDisk, StateDiskUnavailable

logger = logging.getLogger(__name__)

_RECORD = struct.Struct("<qqI")
INDEX_EVERY = 1024
# GetLogEvents: at most 10,000 events and 1,048,576 bytes of messages per page (CloudWatch Logs API
# reference, GetLogEvents: "up to 1 MB (up to 10,000 log events)").
PAGE_EVENTS = 10_000
PAGE_BYTES = 1_048_576
# moto's request handling leaves reference cycles that hold each request's body (about 1.3 MB for a
# full PutLogEvents call); CPython frees them only at a full collection, which a large heap makes
# rare (measured: 100 calls on one connection kept 124 MiB until ``gc.collect()``). The store runs
# one after every this many bytes of messages taken in, so that garbage stays bounded.
COLLECT_EVERY_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class StoredEvent:
    """One event as ``LogStream.events`` holds it in moto (what live tail and queries read)."""

    timestamp: int
    ingestion_time: int
    message: str
    event_id: int

    def to_filter_dict(self) -> dict[str, Any]:
        """The event as FilterLogEvents returns it (without ``logStreamName``)."""
        return {
            "eventId": str(self.event_id),
            "ingestionTime": self.ingestion_time,
            "message": self.message,
            "timestamp": self.timestamp,
        }

    def to_response_dict(self) -> dict[str, Any]:
        """The event as GetLogEvents returns it."""
        return {"ingestionTime": self.ingestion_time, "message": self.message, "timestamp": self.timestamp}


class _EventsView:
    """``stream.events`` for moto code that iterates a stream (live tail, Logs Insights): read lazily."""

    def __init__(self, stream: DiskLogStream) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[StoredEvent]:
        return self._stream.iter_events(0, self._stream.count)

    def __len__(self) -> int:
        return self._stream.count

    def __bool__(self) -> bool:
        return self._stream.count > 0


def _file_stem(account: str, region: str, group: str, stream: str) -> str:
    return hashlib.sha256(f"{account}\0{region}\0{group}\0{stream}".encode()).hexdigest()[:40]


class DiskLogStream(moto_logs.LogStream):
    """A moto ``LogStream`` whose events live in a file (see the module's docstring).

    Parameters
    ----------
    log_group : moto LogGroup
        The group (its account and region name the stream's file).
    name : str
        The stream's name.
    store : LogStore
        Where its file goes; an existing file of the same stream is taken over (``reattach``).
    """

    def __init__(self, log_group: Any, name: str, store: LogStore) -> None:
        super().__init__(log_group, name)
        self._lock = threading.Lock()
        self._store = store
        stem = _file_stem(self.account_id, self.region, log_group.name, name)
        self._path = store.root / f"{stem}.log"
        self._meta_path = store.root / f"{stem}.json"
        self.count = 0
        self._size = 0
        self._offsets = array("q")
        self._stamps = array("q")
        self._first_ts: int | None = None
        self._last_ts: int | None = None
        self._last_ingestion_ms: int | None = None
        self._first_event_id = 0
        with store.writing():
            if self._path.exists():
                self._scan()
            else:
                store.root.mkdir(parents=True, exist_ok=True)
                self._path.touch()
            write_json_atomic(
                self._meta_path,
                {
                    "account": self.account_id,
                    "region": self.region,
                    "logGroup": log_group.name,
                    "logStream": name,
                },
            )
        # Written with os.write on its descriptor: a failed batch leaves nothing in a buffer to go out later.
        self._writer: BinaryIO = open(self._path, "ab")  # noqa: SIM115 - kept open for the stream's life
        self._dirty = False
        store.opened(self)

    # moto's __init__ assigns ``self.events = []``: the view replaces it, the assignment is ignored.
    @property  # type: ignore[override]
    def events(self) -> _EventsView:
        return _EventsView(self)

    @events.setter
    def events(self, value: Any) -> None:
        if value:
            raise ValueError("a DiskLogStream's events are appended with put_log_events")

    def _scan(self) -> None:
        """Rebuild counters and index from the file's record headers; cut a torn last record."""
        with open(self._path, "r+b") as file:
            end = os.fstat(file.fileno()).st_size
            offset = 0
            while offset + _RECORD.size <= end:
                file.seek(offset)
                timestamp, ingestion, length = _RECORD.unpack(file.read(_RECORD.size))
                if offset + _RECORD.size + length > end:
                    break
                self._note(offset, timestamp, ingestion, length)
                offset += _RECORD.size + length
            if offset != end:
                logger.warning("torn log record cut path=%s bytes=%d", self._path, end - offset)
                file.truncate(offset)
        self._size = offset

    def _note(self, offset: int, timestamp: int, ingestion: int, length: int) -> None:
        if self.count % INDEX_EVERY == 0:
            self._offsets.append(offset)
            self._stamps.append(timestamp)
        if self._first_ts is None or timestamp < self._first_ts:
            self._first_ts = timestamp
        if self._last_ts is None or timestamp > self._last_ts:
            self._last_ts = timestamp
        self._last_ingestion_ms = ingestion
        self.count += 1
        self.stored_bytes += length

    # -- moto's LogStream API --------------------------------------------------------------------
    def _update(self) -> None:
        self.first_event_timestamp = self._first_ts  # type: ignore[assignment]
        self.last_event_timestamp = self._last_ts  # type: ignore[assignment]

    def to_describe_dict(self) -> dict[str, Any]:
        """DescribeLogStreams' entry, from the counters (no scan)."""
        with self._lock:
            self._update()
            described: dict[str, Any] = {
                "arn": self.arn,
                "creationTime": int(unix_time_millis(self.creation_time)),
                "logStreamName": self.log_stream_name,
                "storedBytes": self.stored_bytes,
            }
            if self.count:
                described.update(
                    {
                        "firstEventTimestamp": self._first_ts,
                        "lastEventTimestamp": self._last_ts,
                        "lastIngestionTime": self._last_ingestion_ms,
                        "uploadSequenceToken": str(self.upload_sequence_token),
                    }
                )
            return described

    def put_log_events(self, log_events: list[dict[str, Any]]) -> str:
        """Append the events to the file (written before it returns); returns the sequence token.

        Raises
        ------
        StateDiskUnavailable
            The state disk refuses writes: nothing was written, the stream is unchanged.
        """
        self._store.check()
        self.last_ingestion_time = utcnow()
        ingestion = int(unix_time_millis(self.last_ingestion_time))
        chunks: list[bytes] = []
        records: list[tuple[int, int, int]] = []
        with self._lock:
            first_index = self.count
            offset = self._size
            for event in log_events:
                message = event["message"].encode("utf-8")
                timestamp = int(event["timestamp"])
                chunks.append(_RECORD.pack(timestamp, ingestion, len(message)))
                chunks.append(message)
                records.append((offset, timestamp, len(message)))
                offset += _RECORD.size + len(message)
            written = offset - self._size
            with self._store.writing():
                self._append(b"".join(chunks))
            # Counted once on disk: a failed write above leaves the counters as the file is.
            for record_offset, timestamp, length in records:
                self._note(record_offset, timestamp, ingestion, length)
            self._size = offset
            self.upload_sequence_token += 1
            token = self.upload_sequence_token
            if not self._dirty:
                self._dirty = True
                self._store.mark_dirty(self)
        self._store.taken_in(written)
        if self.log_group.subscription_filters:
            forwarded = [
                {"id": first_index + i, "timestamp": e["timestamp"], "message": e["message"]}
                for i, e in enumerate(log_events)
            ]
            for subscription in self.log_group.subscription_filters.values():
                self._send_log_events(
                    service=subscription.destination_arn.split(":")[2],
                    destination_arn=subscription.destination_arn,
                    filter_name=subscription.name,
                    log_events=forwarded,
                )
        return f"{token:056d}"

    def get_log_events(
        self,
        start_time: Any,
        end_time: Any,
        limit: int | None,
        next_token: str | None,
        start_from_head: Any,
    ) -> tuple[list[dict[str, Any]], str | None, str | None]:
        """GetLogEvents with moto's tokens (``f/<index>``, ``b/<index>`` into the events in the
        time range), at most ``limit`` (default and most 10,000) events and 1 MB of messages."""
        limit = min(limit or PAGE_EVENTS, PAGE_EVENTS)
        with self._lock:
            low = self._first_at_or_after(int(start_time)) if start_time else 0
            high = self._first_at_or_after(int(end_time) + 1) if end_time else self.count
        final_index = max(high - low, 0) - 1
        direction, index = _parse_token(next_token)
        if direction is None:
            if start_from_head:
                start_index, end_index = 0, limit - 1
            else:
                start_index, end_index = final_index - limit + 1, final_index
        elif direction == "f":
            start_index, end_index = index + 1, index + limit
        else:
            start_index, end_index = index - limit, index - 1
        start_index = max(start_index, 0)
        if start_index > final_index:
            return [], f"b/{final_index:056d}", f"f/{final_index:056d}"
        end_index = min(end_index, final_index)
        if end_index < 0:
            return [], f"b/{0:056d}", f"f/{0:056d}"
        backward = direction == "b" or (direction is None and not start_from_head)
        page = self._page(low + start_index, low + end_index + 1, keep_last=backward)
        if backward:
            start_index = end_index - len(page) + 1
        else:
            end_index = start_index + len(page) - 1
        return [e.to_response_dict() for e in page], f"b/{start_index:056d}", f"f/{end_index:056d}"

    def filter_log_events(self, start_time: int, end_time: int, filter_pattern: str) -> list[dict[str, Any]]:
        """FilterLogEvents' matches in this stream (as moto: all of them; the group paginates)."""
        pattern = EventMessageFilter(filter_pattern)
        with self._lock:
            low = self._first_at_or_after(int(start_time)) if start_time else 0
            high = self._first_at_or_after(int(end_time) + 1) if end_time else self.count
        found = []
        for event in self.iter_events(low, high):
            if pattern.matches(event.message):
                found.append({**event.to_filter_dict(), "logStreamName": self.log_stream_name})
        return found

    def _append(self, data: bytes) -> None:
        """Write ``data`` at the end of the file, whole: a write that fails part way is cut off again."""
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self._writer.fileno(), view) :]
        except OSError:
            os.ftruncate(self._writer.fileno(), self._size)
            raise

    # -- reading ---------------------------------------------------------------------------------
    def _first_at_or_after(self, timestamp: int) -> int:
        """Index of the first event with a timestamp ≥ ``timestamp`` (events in timestamp order)."""
        block = max(bisect.bisect_left(self._stamps, timestamp) - 1, 0)
        index = block * INDEX_EVERY
        if index >= self.count:
            return self.count
        with open(self._path, "rb") as file:
            file.seek(self._offsets[block])
            while index < self.count:
                stamp, _, length = _RECORD.unpack(file.read(_RECORD.size))
                if stamp >= timestamp:
                    return index
                file.seek(length, os.SEEK_CUR)
                index += 1
        return self.count

    def iter_events(self, start: int, stop: int) -> Iterator[StoredEvent]:
        """Events ``start`` (inclusive) to ``stop`` (exclusive) by index, read from the file."""
        with self._lock:
            stop = min(stop, self.count)
            if start >= stop:
                return
            block = start // INDEX_EVERY
            offset = self._offsets[block]
        index = block * INDEX_EVERY
        with open(self._path, "rb") as file:
            file.seek(offset)
            while index < stop:
                timestamp, ingestion, length = _RECORD.unpack(file.read(_RECORD.size))
                if index < start:
                    file.seek(length, os.SEEK_CUR)
                else:
                    message = file.read(length).decode("utf-8", "replace")
                    yield StoredEvent(timestamp, ingestion, message, self._first_event_id + index)
                index += 1

    def _page(self, start: int, stop: int, *, keep_last: bool) -> list[StoredEvent]:
        """Events ``start``..``stop`` within ``PAGE_BYTES`` of messages (at least one): the first
        ones, or with ``keep_last`` the last ones."""
        page: deque[StoredEvent] = deque()
        size = 0
        for event in self.iter_events(start, stop):
            cost = len(event.message.encode("utf-8"))
            if not keep_last and page and size + cost > PAGE_BYTES:
                break
            page.append(event)
            size += cost
            while keep_last and len(page) > 1 and size > PAGE_BYTES:
                size -= len(page.popleft().message.encode("utf-8"))
        return list(page)

    # -- the store's ---------------------------------------------------------------------------
    def sync(self) -> None:
        """fsync the file (called by ``LogStore.sync``); a failed fsync raises and leaves it dirty."""
        with self._lock:
            if not self._writer.closed:
                os.fsync(self._writer.fileno())
            self._dirty = False

    def close(self) -> None:
        """Close the file (the store is closing): later writes fail, reads still work."""
        with self._lock:
            self._writer.close()

    def discard(self) -> None:
        """Close and remove the file (the stream was deleted)."""
        with self._lock:
            self._writer.close()
            self._path.unlink(missing_ok=True)
            self._meta_path.unlink(missing_ok=True)
        self._store.closed(self)


def _parse_token(token: str | None) -> tuple[str | None, int]:
    if token is None:
        return None, 0
    try:
        direction, index = token[0], int(token[2:])
    except (ValueError, IndexError):
        raise InvalidParameterException("The specified nextToken is invalid.") from None
    if direction not in ("f", "b"):
        raise InvalidParameterException("The specified nextToken is invalid.")
    return direction, index


class LogStore:
    """The on-disk store of the job log groups' streams, hooked into moto while installed.

    Parameters
    ----------
    root : Path
        Directory of the stream files (``<home>/state/logs``).
    groups : set of (region, log group name)
        The groups whose streams live on disk; any other group stays moto's own.
    disk : StateDisk | None
        The home's filesystem: while it refuses writes, streams take no events (``check``), and a
        write that fails because it is full or read-only raises ``StateDiskUnavailable``.

    Only one store is installed at a time (moto's backends are global to the process).
    """

    _installed: LogStore | None = None
    _originals: dict[str, Any] = {}

    def __init__(self, root: Path, groups: set[tuple[str, str]], disk: StateDisk | None = None) -> None:
        self.root = root
        self._groups = frozenset(groups)
        self._disk = disk
        self._dirty: list[DiskLogStream] = []
        self._streams: set[DiskLogStream] = set()
        self._lock = threading.Lock()
        self._since_collect = 0

    @classmethod
    def installed(cls) -> LogStore | None:
        """The store in use, or None."""
        return cls._installed

    def install(self) -> None:
        """Make moto create the scope's streams on disk and remove their files when deleted."""
        store_class = LogStore
        if store_class._installed is not None:
            store_class._installed.uninstall()
        self.root.mkdir(parents=True, exist_ok=True)
        originals: dict[str, Any] = {
            "create_log_stream": moto_logs.LogGroup.create_log_stream,
            "delete_log_stream": moto_logs.LogGroup.delete_log_stream,
            "delete_log_group": moto_logs.LogsBackend.delete_log_group,
        }
        store_class._originals = originals
        store = self

        def create_log_stream(group: Any, log_stream_name: str) -> None:
            if (group.region, group.name) not in store._groups:
                originals["create_log_stream"](group, log_stream_name)
                return
            if log_stream_name in group.streams:
                raise ResourceAlreadyExistsException()
            group.streams[log_stream_name] = DiskLogStream(group, log_stream_name, store)
            return None

        def delete_log_stream(group: Any, log_stream_name: str) -> None:
            stream = group.streams.get(log_stream_name)
            originals["delete_log_stream"](group, log_stream_name)
            if isinstance(stream, DiskLogStream):
                stream.discard()

        def delete_log_group(backend: Any, log_group_name: str) -> None:
            group = backend.groups.get(log_group_name)
            originals["delete_log_group"](backend, log_group_name)
            for stream in list(getattr(group, "streams", {}).values()):
                if isinstance(stream, DiskLogStream):
                    stream.discard()

        setattr(moto_logs.LogGroup, "create_log_stream", create_log_stream)  # noqa: B010
        setattr(moto_logs.LogGroup, "delete_log_stream", delete_log_stream)  # noqa: B010
        setattr(moto_logs.LogsBackend, "delete_log_group", delete_log_group)  # noqa: B010
        store_class._installed = self

    def uninstall(self) -> None:
        """Give moto its own streams back (files stay; open streams keep working until dropped)."""
        if LogStore._installed is not self:
            return
        for owner, name in (
            (moto_logs.LogGroup, "create_log_stream"),
            (moto_logs.LogGroup, "delete_log_stream"),
            (moto_logs.LogsBackend, "delete_log_group"),
        ):
            setattr(owner, name, LogStore._originals[name])
        LogStore._installed = None

    def check(self) -> None:
        """Refuse a write before it starts while the disk refuses writes (``StateDiskUnavailable``)."""
        if self._disk is not None:
            self._disk.check()

    def writing(self) -> AbstractContextManager[None]:
        """Around a write to the store: a full or read-only disk raises ``StateDiskUnavailable``."""
        return self._disk.writing() if self._disk is not None else nullcontext()

    def opened(self, stream: DiskLogStream) -> None:
        """Note a stream this store holds a file open for (until ``closed`` or ``close``)."""
        with self._lock:
            self._streams.add(stream)

    def closed(self, stream: DiskLogStream) -> None:
        """Forget a stream whose file was closed."""
        with self._lock:
            self._streams.discard(stream)

    def close(self) -> None:
        """fsync and close every stream's file and ``uninstall``: the stack is stopping."""
        self.uninstall()
        try:
            self.sync()
        except StateDiskUnavailable as refused:
            # Written to the OS already: only a power loss before the kernel writes them back loses them.
            logger.error("log streams closed without their last fsync error=%s", refused)
        with self._lock:
            streams, self._streams = list(self._streams), set()
        for stream in streams:
            stream.close()

    def taken_in(self, size: int) -> None:
        """Count ``size`` bytes written; past ``COLLECT_EVERY_BYTES`` since the last time, run a
        full garbage collection (see ``COLLECT_EVERY_BYTES``)."""
        with self._lock:
            self._since_collect += size
            due = self._since_collect >= COLLECT_EVERY_BYTES
            if due:
                self._since_collect = 0
        if due:
            gc.collect()

    def mark_dirty(self, stream: DiskLogStream) -> None:
        """Note a stream written since the last ``sync``."""
        with self._lock:
            self._dirty.append(stream)

    def sync(self) -> int:
        """fsync every stream written since the last call; returns how many.

        Raises
        ------
        StateDiskUnavailable
            An fsync failed because the disk is full or read-only; the streams not synced yet stay
            due for the next call (as after any other failed fsync, raised as it is).
        """
        with self._lock:
            dirty, self._dirty = self._dirty, []
        for index, stream in enumerate(dirty):
            try:
                with self.writing():
                    stream.sync()
            except BaseException:
                with self._lock:
                    self._dirty[:0] = dirty[index:]
                raise
        return len(dirty)

    def stored_streams(self) -> list[dict[str, str]]:
        """Every stream on disk in the store's groups: ``account``, ``region``, ``logGroup``,
        ``logStream`` (from the ``.json`` beside each file; a file without one is skipped)."""
        found = []
        for meta_path in sorted(self.root.glob("*.json")):
            try:
                meta = json.loads(meta_path.read_text())
            except (OSError, ValueError):
                logger.warning("log stream description unreadable path=%s", meta_path)
                continue
            if (meta.get("region"), meta.get("logGroup")) in self._groups and meta_path.with_suffix(
                ".log"
            ).exists():
                found.append(meta)
        return found


class InProcessLogs:
    """The local executor's CloudWatch Logs client: ``PutLogEvents`` goes straight to moto's Logs
    backend in this process (the log store's write-through streams behind it), without an HTTP round
    trip and two JSON encodings per batch; every other call goes to ``client`` (boto3, over HTTP).

    Shipping a verbose job's console through moto's HTTP API ran at about 2.5–5 MB/s on 2 cores, and
    the job's writes wait on its pipe while shipping lags, so that time was its Running time. The
    backend call takes the same path moto's own PutLogEvents handler takes after parsing (timestamps
    checked, the stream's ``put_log_events``), so what readers see is unchanged.

    Parameters
    ----------
    client : Any
        A boto3 ``logs`` client of the local moto server (create calls, reads).
    account, region : str
        Where the job log groups live in moto (``LOCAL_ACCOUNT_ID``, the zone's region).
    """

    def __init__(self, client: Any, account: str, region: str) -> None:
        self._client = client
        self._account = account
        self._region = region

    def put_log_events(
        self, *, logGroupName: str, logStreamName: str, logEvents: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """PutLogEvents' answer (``nextSequenceToken``, ``rejectedLogEventsInfo`` when some were).

        Raises
        ------
        botocore.exceptions.ClientError
            What the API would answer (``ResourceNotFoundException``, ``InvalidParameterException``).
        """
        from botocore.exceptions import ClientError
        from moto.core.exceptions import JsonRESTError
        from moto.logs.models import logs_backends

        backend = logs_backends[self._account][self._region]
        try:
            token, rejected = backend.put_log_events(logGroupName, logStreamName, logEvents)
        except JsonRESTError as exc:
            error = {"Error": {"Code": exc.relative_error_type, "Message": exc.message}}
            raise ClientError(error, "PutLogEvents") from exc  # type: ignore[arg-type]
        except StateDiskUnavailable as exc:
            # CloudWatch's own answer when it cannot take the events now (retryable).
            error = {"Error": {"Code": "ServiceUnavailableException", "Message": str(exc)}}
            raise ClientError(error, "PutLogEvents") from exc  # type: ignore[arg-type]
        response: dict[str, Any] = {"nextSequenceToken": token}
        if rejected:
            response["rejectedLogEventsInfo"] = rejected
        return response

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)
