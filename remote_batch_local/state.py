"""What the local stack keeps of moto across restarts and crashes: snapshots plus a write-ahead journal.

moto keeps everything in memory. Two things make it durable:

- **The journal** (``journal.py``): every write to moto that changes what is kept (DynamoDB item
  writes: jobs, accounts, ledger, contacts, idempotency records, notification claims; S3 object
  writes: job inputs, outputs, results, presigned uploads; SNS topic and subscription changes) is
  appended to ``<home>/state/journal/`` and ``fsync``-ed before moto's answer is returned (group
  commit). The api Lambda answers its caller only after its writes returned, so whatever the API
  acknowledged is on disk first. Tokens are kept in ``tokens.json``, written (fsync, rename) before
  the response that shows the token.
- **Snapshots**, every few seconds (and at shutdown): the current contents of the service's moto
  resources, exported to ``<home>/state/`` so the journal can be cut short and a start does not
  replay history.

At the next start the snapshot is written back into a fresh moto, then the journal records it
does not cover are replayed in order, then the stack serves.

Snapshot files:

- DynamoDB: every item of every table (DynamoDB JSON, as ``Scan`` answers) in one file,
  ``dynamodb.json``, exactly the journal up to its ``journalSeq``: the table writes are held only
  while the items written since the last snapshot are copied out of moto (``moto_access.TableImages``:
  milliseconds, however large the tables), and the file is written after they go on. Requests are
  never held while it is written; a restore replays the journal after the cut, so the tables agree
  with each other as they did when every acknowledged write was done;
- S3: every object of both buckets as a plain file ``<home>/s3/<bucket>/<key>``, and a manifest
  ``s3.json`` (``journalSeq``; per object ETag, size, content type, user metadata); only objects
  whose ETag changed are read;
- CloudWatch Logs: nothing to export: the job log groups' streams are written through to the log
  store (``remote_batch_local.logstore``, ``<home>/logs/``) as ``PutLogEvents`` arrives, flushed
  before it is answered (so not journaled), and a tick fsyncs the streams written since the last
  one (a restore re-creates them in moto from their files; a snapshot from before the store,
  ``logs.json`` and ``logs/*.json``, is imported into it once);
- SNS: every account's email topic (names under the deployment's prefix) with its subscriptions,
  their ARNs and attributes (``journalSeq``);
- ``snapshot.json``: when the last snapshot was taken.

Each file says up to which journal record (``journalSeq``) it includes. DynamoDB and SNS records
are not idempotent (``ADD`` to a balance, a second ``Subscribe``), so those files are read with the
service's writes held (``Journal.applying``): the file is exactly the journal up to its cut. Object
writes are not held while S3 is exported (that would stall submits behind large outputs): every
S3 record puts or deletes a whole object, so replaying the records after the cut on objects that
already include some of them ends in the same state. Every file is replaced atomically
(temporary sibling, fsync, ``os.replace``); a crash leaves each file old or new, each with its own
cut, so replay stays exact per service whatever file was replaced last. After a snapshot the
journal segments all of whose records are covered are deleted (``Journal.discard``).

Why a journal of moto's requests rather than a persistence layer under moto's models: the journal
sits at moto's HTTP boundary, which every writer already crosses (the in-process Lambdas, the
executor and the job workers all use boto3 against the server's endpoint; nothing writes to moto's
backends in process), so it needs no knowledge of moto's internal model classes and survives moto
upgrades; replay reuses moto's own request handling. The cost is measured by
``benchmarks/journal_latency.py`` (docs/benchmarks.md).

Why snapshots at all rather than moto's recorder or the journal alone: both log every write for
ever, so the file grows with use and each start replays the whole history; a snapshot holds the
current state only (its size is the data's size, a restore is one write per item, object and
stream), and the journal holds only the few seconds since.

What to export is decided by the moto server's write counts per service (``WriteCounter``) and by
the journal's last record per service: a tick after which nothing was written reads nothing and
only stamps ``snapshot.json``. Measured with 2,000 jobs, 500 objects and 200 log streams: tables
0.6 s, S3 0.1 s (only changed objects are downloaded), logs an fsync per stream written since.
Restoring all of that takes about 5 s.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from functions.adapters.sns import email_topic_arn
from remote_batch_local.files import read_json, write_bytes_atomic, write_json_atomic
from remote_batch_local.journal import JOURNALED, Journal, ReplayReport, rename_subscription, replay
from remote_batch_local.logstore import LogStore
from remote_batch_local.moto_access import TableImages
from remote_batch_local.resources import AwsClients

logger = logging.getLogger(__name__)

SNAPSHOT_VERSION = 1
BATCH_WRITE_ITEMS = 25
LOG_BATCH_EVENTS = 5000
LOG_BATCH_BYTES = 800_000
_BY_HASH = ".by-hash"
# A snapshot that held the table writes longer than this (seconds) says so in the log.
HOLD_WARNING_SECONDS = 0.1


@dataclass(frozen=True, slots=True)
class SnapshotScope:
    """What a snapshot covers.

    Attributes
    ----------
    tables : tuple[str, ...]
        DynamoDB table names (home region).
    buckets : Mapping[str, str]
        Bucket name → its region.
    log_groups : tuple[tuple[str, str], ...]
        (region, log group name) pairs.
    topic_arn_prefix : str
        The email topics kept are those whose ARN starts with it (one per account and address).
    home_region : str
        Region of the tables and the topic.
    """

    tables: tuple[str, ...]
    buckets: Mapping[str, str]
    log_groups: tuple[tuple[str, str], ...]
    topic_arn_prefix: str
    home_region: str


@dataclass(frozen=True, slots=True)
class RestoreReport:
    """What ``restore`` put back; ``taken_at`` is None when there was no snapshot."""

    taken_at: datetime | None
    items: int = 0
    objects: int = 0
    log_streams: int = 0
    subscriptions: int = 0
    journal: ReplayReport = field(default_factory=ReplayReport)


def _topic_of_shared(prefix: str, subscription: Mapping[str, Any]) -> str | None:
    """A subscription of a snapshot taken when email went through one shared topic (filter policy
    ``{"accountId": [id]}``): the topic of that account and address now, or None."""
    try:
        account_ids = json.loads((subscription.get("attributes") or {}).get("FilterPolicy", "{}"))[
            "accountId"
        ]
    except (ValueError, KeyError, TypeError):
        return None
    if not isinstance(account_ids, list) or len(account_ids) != 1 or not subscription.get("endpoint"):
        return None
    return email_topic_arn(prefix, str(account_ids[0]), str(subscription["endpoint"]))


def _now_ms() -> int:
    return int(time.time() * 1000)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _object_path(bucket: str, key: str) -> str:
    """Where an object's file goes, relative to ``<home>/s3``: its key, unless the key cannot be a
    relative path (empty, ``.`` or ``..`` segments, backslashes, over-long names)."""
    parts = key.split("/")
    unsafe = (
        any(part in ("", ".", "..") or len(part.encode()) > 200 for part in parts)
        or parts[0] == _BY_HASH
        or "\\" in key
        or "\x00" in key
    )
    if unsafe:
        return _hashed_path(bucket, key)
    return f"{bucket}/{key}"


def _hashed_path(bucket: str, key: str) -> str:
    return f"{bucket}/{_BY_HASH}/{hashlib.sha256(key.encode()).hexdigest()}"


class StateSnapshots:
    """Exports the scope's moto contents to disk and restores them into a fresh moto.

    Parameters
    ----------
    state_dir : Path
        ``<home>/state``: manifests, tables, logs, ``snapshot.json``.
    objects_dir : Path
        ``<home>/s3``: one file per S3 object.
    scope : SnapshotScope
        The resources to keep.
    clients : AwsClients
        Clients on the moto server.
    write_counts : Callable[[], Mapping[str, int]]
        The moto server's completed write requests so far, by service (``MotoServer.write_counts``);
        a service whose count did not move since the last export is not read again.
    journal : Journal
        The write-ahead journal of the acknowledged writes: replayed after the restore; a snapshot
        records, per service, the last journal record it includes and lets older segments go.
    moto_app : Callable[[], Callable]
        moto's WSGI application (without the journaling middleware), for the replay.
    log_store : LogStore | None
        Where the job log groups' streams live (installed in moto); None: logs are not kept.
    tables : TableImages | None
        The tables' items as moto holds them (``MotoServer.access.tables``), copied without a
        ``Scan``; None: tables are read with ``Scan`` while their writes are held.
    """

    def __init__(
        self,
        state_dir: Path,
        objects_dir: Path,
        scope: SnapshotScope,
        clients: AwsClients,
        write_counts: Callable[[], Mapping[str, int]],
        *,
        journal: Journal,
        moto_app: Callable[..., Any],
        log_store: LogStore | None = None,
        tables: TableImages | None = None,
    ) -> None:
        self._dir = state_dir
        self._objects = objects_dir
        self._scope = scope
        self._clients = clients
        self._write_counts = write_counts
        self._journal = journal
        self._moto_app = moto_app
        # Per journaled service: the last journal record its snapshot files include.
        self._covered: dict[str, int] = dict.fromkeys(JOURNALED, 0)
        self._exported: dict[str, int] = {}
        self._lock = threading.Lock()
        self._tables_digest = ""
        self._s3_manifest: dict[str, dict[str, dict[str, Any]]] = {}
        self._log_store = log_store
        self._sns_digest = ""
        self._tables = tables

    # -- paths -------------------------------------------------------------------------------------
    @property
    def _meta_path(self) -> Path:
        return self._dir / "snapshot.json"

    def last_taken_at(self) -> datetime | None:
        """When the snapshot on disk was taken, or None when there is none."""
        meta = read_json(self._meta_path)
        if not meta:
            return None
        return datetime.fromtimestamp(int(meta["takenAtMs"]) / 1000, tz=UTC)

    # -- restore -----------------------------------------------------------------------------------
    def restore(self) -> RestoreReport:
        """Write the snapshot on disk into moto (tables, objects, log streams, subscriptions), then
        replay the journal records it does not cover.

        Call once, after ``provision``, before anything else uses moto and before the journaling
        middleware is enabled (what is restored is on disk already).
        """
        with self._lock:
            # The log store's streams are on disk whether or not a snapshot was ever taken.
            streams = self._restore_logs()
            taken_at = self.last_taken_at()
            items = objects = subscriptions = 0
            if taken_at is not None:
                items = self._restore_tables()
                objects = self._restore_objects()
                subscriptions = self._restore_subscriptions()
            replayed = replay(self._journal.records(), self._moto_app, self._covered)
            self._journal.number_after(max(self._covered.values(), default=0))
            self._abort_uploads()
            if self._tables is not None:
                # The first copy reads the tables whole: here, before anything is served.
                self._tables.capture(self._scope.tables)
            return RestoreReport(taken_at, items, objects, streams, subscriptions, replayed)

    def _abort_uploads(self) -> None:
        """Abort the multipart uploads the replay brought back: their writers (job workers) died
        with the last run, and an upload in progress keeps S3 out of the snapshots."""
        for bucket, region in self._scope.buckets.items():
            s3 = self._clients.client("s3", region)
            for upload in s3.list_multipart_uploads(Bucket=bucket).get("Uploads", []):
                s3.abort_multipart_upload(Bucket=bucket, Key=upload["Key"], UploadId=upload["UploadId"])
                logger.info("upload left by the last run aborted bucket=%s key=%s", bucket, upload["Key"])

    def _restore_tables(self) -> int:
        stored = read_json(self._dir / "dynamodb.json") or {"tables": {}}
        self._covered["dynamodb"] = int(stored.get("journalSeq", 0))
        dynamodb = self._clients.client("dynamodb", self._scope.home_region)
        count = 0
        for table, items in stored["tables"].items():
            if table not in self._scope.tables:
                logger.warning("snapshot table not in scope skipped table=%s", table)
                continue
            for start in range(0, len(items), BATCH_WRITE_ITEMS):
                requests = [
                    {"PutRequest": {"Item": item}} for item in items[start : start + BATCH_WRITE_ITEMS]
                ]
                pending: dict[str, Any] = {table: requests}
                while pending:
                    pending = dynamodb.batch_write_item(RequestItems=pending).get("UnprocessedItems") or {}
            count += len(items)
        return count

    def _restore_objects(self) -> int:
        stored = read_json(self._dir / "s3.json") or {}
        if "buckets" in stored:
            self._covered["s3"] = int(stored.get("journalSeq", 0))
            stored = stored["buckets"]
        manifest: dict[str, dict[str, dict[str, Any]]] = stored
        count = 0
        for bucket, objects in manifest.items():
            region = self._scope.buckets.get(bucket)
            if region is None:
                logger.warning("snapshot bucket not in scope skipped bucket=%s", bucket)
                continue
            s3 = self._clients.client("s3", region)
            kept: dict[str, dict[str, Any]] = {}
            for key, entry in objects.items():
                try:
                    body = (self._objects / entry["path"]).read_bytes()
                except FileNotFoundError:
                    logger.warning("snapshot object missing skipped bucket=%s key=%s", bucket, key)
                    continue
                put: dict[str, Any] = {"Bucket": bucket, "Key": key, "Body": body}
                if entry.get("contentType"):
                    put["ContentType"] = entry["contentType"]
                if entry.get("metadata"):
                    put["Metadata"] = entry["metadata"]
                kept[key] = {**entry, "etag": s3.put_object(**put)["ETag"]}
                count += 1
            self._s3_manifest[bucket] = kept
        return count

    def _restore_logs(self) -> int:
        """Create every stream of the log store in moto again (each takes its file over), after
        importing the streams of a snapshot from before the store (``logs.json`` and one JSON file of
        events per stream) into it, then removing those files."""
        if self._log_store is None:
            return 0
        self._import_snapshot_logs()
        count = 0
        for stored in self._log_store.stored_streams():
            logs = self._clients.client("logs", stored["region"])
            try:
                logs.create_log_stream(logGroupName=stored["logGroup"], logStreamName=stored["logStream"])
            except logs.exceptions.ResourceAlreadyExistsException:
                continue
            count += 1
        return count

    def _import_snapshot_logs(self) -> None:
        index_path = self._dir / "logs.json"
        index: dict[str, dict[str, dict[str, Any]]] = read_json(index_path) or {}
        for group_key, streams in index.items():
            region, _, group = group_key.partition(" ")
            if (region, group) not in self._scope.log_groups:
                continue
            logs = self._clients.client("logs", region)
            for stream, entry in streams.items():
                events = (read_json(self._dir / entry["file"]) or {}).get("events", [])
                logs.create_log_stream(logGroupName=group, logStreamName=stream)
                for batch in _log_batches(sorted(events, key=lambda e: e[0])):
                    logs.put_log_events(
                        logGroupName=group,
                        logStreamName=stream,
                        logEvents=[{"timestamp": ts, "message": message} for ts, message in batch],
                    )
                (self._dir / entry["file"]).unlink(missing_ok=True)
        if self._log_store is not None:
            self._log_store.sync()
        index_path.unlink(missing_ok=True)

    def _restore_subscriptions(self) -> int:
        """Re-create the subscriptions under the ARNs they had (moto would make new random ones),
        so accounts' ``emailSubscription`` and the journal's later records still name them."""
        stored = read_json(self._dir / "sns.json") or {"subscriptions": []}
        self._covered["sns"] = int(stored.get("journalSeq", 0))
        sns = self._clients.client("sns", self._scope.home_region)
        restored = 0
        for subscription in stored["subscriptions"]:
            topic_arn = subscription.get("topicArn") or _topic_of_shared(
                self._scope.topic_arn_prefix, subscription
            )
            if not topic_arn or not topic_arn.startswith(self._scope.topic_arn_prefix):
                continue
            sns.create_topic(
                Name=topic_arn.rsplit(":", 1)[1], Attributes=subscription.get("topicAttributes") or {}
            )
            created = sns.subscribe(
                TopicArn=topic_arn,
                Protocol=subscription["protocol"],
                Endpoint=subscription["endpoint"],
                Attributes={
                    k: v for k, v in (subscription.get("attributes") or {}).items() if k != "FilterPolicy"
                },
                ReturnSubscriptionArn=True,
            )
            recorded = subscription.get("arn")
            # A subscription of the shared topic a migrated snapshot names stays new: its ARN named
            # another topic.
            if recorded and recorded != created["SubscriptionArn"] and recorded.startswith(topic_arn + ":"):
                rename_subscription(created["SubscriptionArn"], recorded)
            restored += 1
        return restored

    # -- take --------------------------------------------------------------------------------------
    def take(self, hold: AbstractContextManager[Any] | None = None) -> bool:
        """Export what changed since the last call, then stamp ``snapshot.json``.

        Parameters
        ----------
        hold : AbstractContextManager | None
            Held while the tables are read with ``Scan`` (without ``tables``), besides their writes.

        Returns
        -------
        bool
            True when something other than the time stamp was written.
        """
        with self._lock:
            started = time.monotonic()
            # Records from here on go to a new segment; the older ones can go once covered below.
            self._journal.rotate()
            counts = self._write_counts()
            stale = {
                s for s in ("dynamodb", "s3", "logs", "sns") if counts.get(s, 0) != self._exported.get(s)
            }
            changed = False
            if "dynamodb" in stale or self._journal.last_seq_of("dynamodb") > self._covered["dynamodb"]:
                if self._tables is not None:
                    # Table writes wait only while the items written since the last tick are copied.
                    with self._journal.applying("dynamodb"):
                        held_from = time.monotonic()
                        cut = self._journal.last_seq()
                        changes = self._tables.copy_changes(self._scope.tables)
                        held = time.monotonic() - held_from
                    texts = self._tables.merge_json(changes)
                    (logger.warning if held > HOLD_WARNING_SECONDS else logger.debug)(
                        "snapshot held the table writes seconds=%.3f", held
                    )
                    changed |= self._write_table_texts(texts, cut)
                else:
                    with hold or nullcontext(), self._journal.applying("dynamodb"):
                        changed |= self._take_tables(self._journal.last_seq())
            if "s3" in stale or self._journal.last_seq_of("s3") > self._covered["s3"]:
                # Object writes go on meanwhile: replaying the records after the cut on a snapshot
                # that already has some of them ends the same (each puts or deletes a whole object).
                with self._journal.applying("s3"):
                    cut = self._journal.last_seq()
                taken = self._take_objects(cut)
                if taken is None:
                    stale.discard("s3")  # an upload is in progress: export at a later tick
                changed |= bool(taken)
            # The executor appends job logs in process (``logstore.InProcessLogs``): the write counts
            # do not see them, and the store knows which streams it wrote since its last sync.
            if "logs" in stale or self._log_store is not None:
                changed |= self._take_logs()
            if "sns" in stale or self._journal.last_seq_of("sns") > self._covered["sns"]:
                with self._journal.applying("sns"):
                    changed |= self._take_subscriptions(self._journal.last_seq())
            # Only what was exported is marked: a failed export above raises and is retried next tick.
            self._exported.update({service: counts.get(service, 0) for service in stale})
            self._journal.discard(self._covered)
            now = _now_ms()
            write_json_atomic(
                self._meta_path, {"version": SNAPSHOT_VERSION, "takenAt": _iso(now), "takenAtMs": now}
            )
            elapsed = time.monotonic() - started
            log = logger.info if elapsed > 1 else logger.debug
            log("snapshot taken changed=%s seconds=%.3f", changed, elapsed)
            return changed

    def _take_tables(self, cut: int) -> bool:
        """Export every table read with ``Scan``; called with the table writes held, ``cut`` the
        last journal record."""
        dynamodb = self._clients.client("dynamodb", self._scope.home_region)
        tables: dict[str, list[dict[str, Any]]] = {}
        for table in self._scope.tables:
            items: list[dict[str, Any]] = []
            for page in dynamodb.get_paginator("scan").paginate(TableName=table):
                items += page.get("Items", [])
            tables[table] = items
        return self._write_tables(tables, cut)

    def _write_table_texts(self, texts: dict[str, list[str]], cut: int) -> bool:
        """``_write_tables`` for items already in JSON text (``TableImages.capture_json``): the file
        is their join (the same document), hashed and written without a ``json.dumps`` of it all."""
        body = (
            "{"
            + ", ".join(f"{json.dumps(name)}: [{', '.join(items)}]" for name, items in sorted(texts.items()))
            + "}"
        )
        encoded = body.encode()
        digest = hashlib.sha256(encoded).hexdigest()
        if digest == self._tables_digest and cut == self._covered["dynamodb"]:
            return False
        write_bytes_atomic(self._dir / "dynamodb.json", b'{"journalSeq": %d, "tables": %s}' % (cut, encoded))
        self._tables_digest = digest
        self._covered["dynamodb"] = cut
        return True

    def _write_tables(self, tables: dict[str, list[dict[str, Any]]], cut: int) -> bool:
        """Write ``dynamodb.json`` (every item of every table, up to journal record ``cut``) unless
        it would say what it says already."""
        digest = hashlib.sha256(json.dumps(tables, sort_keys=True).encode()).hexdigest()
        if digest == self._tables_digest and cut == self._covered["dynamodb"]:
            return False
        data = json.dumps({"journalSeq": cut, "tables": tables}, sort_keys=True).encode()
        write_bytes_atomic(self._dir / "dynamodb.json", data)
        self._tables_digest = digest
        self._covered["dynamodb"] = cut
        return True

    def _take_objects(self, cut: int) -> bool | None:
        """Export the changed objects; ``cut`` is the last journal record applied before. None
        (nothing done) while a multipart upload is in progress: its parts are in no snapshot, so
        the journal records that made them must stay."""
        for bucket, region in self._scope.buckets.items():
            if self._clients.client("s3", region).list_multipart_uploads(Bucket=bucket).get("Uploads"):
                return None
        changed = False
        for bucket, region in self._scope.buckets.items():
            s3 = self._clients.client("s3", region)
            known = self._s3_manifest.setdefault(bucket, {})
            listed: dict[str, dict[str, Any]] = {}
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
                for summary in page.get("Contents", []):
                    listed[summary["Key"]] = {"etag": summary["ETag"], "size": summary["Size"]}
            for key, summary in listed.items():
                entry = known.get(key)
                if entry is not None and entry["etag"] == summary["etag"]:
                    continue
                got = s3.get_object(Bucket=bucket, Key=key)
                known[key] = {
                    "etag": got["ETag"],
                    "size": got["ContentLength"],
                    "contentType": got.get("ContentType"),
                    "metadata": got.get("Metadata") or {},
                    "path": self._write_object(bucket, key, got["Body"].read(), entry),
                }
                changed = True
            for key in set(known) - set(listed):
                self._remove_object_file(known.pop(key)["path"])
                changed = True
        if changed or cut != self._covered["s3"]:
            write_json_atomic(self._dir / "s3.json", {"journalSeq": cut, "buckets": self._s3_manifest})
            self._covered["s3"] = cut
        return changed

    def _write_object(self, bucket: str, key: str, body: bytes, previous: dict[str, Any] | None) -> str:
        path = previous["path"] if previous else _object_path(bucket, key)
        try:
            write_bytes_atomic(self._objects / path, body)
        except (NotADirectoryError, IsADirectoryError, FileExistsError):
            # A key that is also another key's "folder" (``a`` and ``a/b``) cannot be both a file
            # and a directory: keep it under its hash instead.
            path = _hashed_path(bucket, key)
            write_bytes_atomic(self._objects / path, body)
        return path

    def _remove_object_file(self, relative: str) -> None:
        path = self._objects / relative
        path.unlink(missing_ok=True)
        parent = path.parent
        while parent != self._objects and parent.is_dir() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent

    def _take_logs(self) -> bool:
        """The job logs are written through to the log store as they arrive (nothing to read or
        copy here, whatever their size): fsync the streams written since the last tick."""
        return self._log_store is not None and self._log_store.sync() > 0

    def _take_subscriptions(self, cut: int) -> bool:
        """Export the subscriptions; called with the SNS writes held, ``cut`` the last journal record."""
        sns = self._clients.client("sns", self._scope.home_region)
        subscriptions = []
        for topics in sns.get_paginator("list_topics").paginate():
            for topic in topics.get("Topics", []):
                topic_arn = topic["TopicArn"]
                if not topic_arn.startswith(self._scope.topic_arn_prefix):
                    continue
                topic_attributes = sns.get_topic_attributes(TopicArn=topic_arn).get("Attributes", {})
                kept_topic = {
                    name: value
                    for name, value in topic_attributes.items()
                    if name in ("Policy", "KmsMasterKeyId")
                }
                paginator = sns.get_paginator("list_subscriptions_by_topic")
                for page in paginator.paginate(TopicArn=topic_arn):
                    for summary in page.get("Subscriptions", []):
                        attributes = sns.get_subscription_attributes(
                            SubscriptionArn=summary["SubscriptionArn"]
                        )
                        kept = {
                            name: value
                            for name, value in attributes.get("Attributes", {}).items()
                            if name in ("FilterPolicy", "FilterPolicyScope", "RawMessageDelivery")
                        }
                        subscriptions.append(
                            {
                                "topicArn": topic_arn,
                                "topicAttributes": kept_topic,
                                "arn": summary["SubscriptionArn"],
                                "protocol": summary["Protocol"],
                                "endpoint": summary["Endpoint"],
                                "attributes": kept,
                            }
                        )
        digest = hashlib.sha256(json.dumps(subscriptions, sort_keys=True).encode()).hexdigest()
        if digest == self._sns_digest and cut == self._covered["sns"]:
            return False
        data = json.dumps({"journalSeq": cut, "subscriptions": subscriptions}, sort_keys=True).encode()
        write_bytes_atomic(self._dir / "sns.json", data)
        self._sns_digest = digest
        self._covered["sns"] = cut
        return True


def _log_batches(events: list[list[Any]]) -> Iterator[list[list[Any]]]:
    """PutLogEvents-sized batches (at most 5000 events and ~800 kB each), oldest first."""
    batch: list[list[Any]] = []
    size = 0
    for event in events:
        event_size = len(str(event[1]).encode()) + 26
        if batch and (len(batch) >= LOG_BATCH_EVENTS or size + event_size > LOG_BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(event)
        size += event_size
    if batch:
        yield batch
