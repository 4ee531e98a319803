"""Serialized access to moto's backends where moto is not thread-safe, and the tables' images.

moto's server answers each request on a thread of its own, and its backends are plain Python
objects that take no lock (moto 5.2.5): a DynamoDB ``Scan`` or ``Query`` iterates a table's dicts
while a concurrent ``PutItem`` adds to them ("dictionary changed size during iteration", answered
as a 500); even a ``GetItem`` of an absent key inserts into a ``defaultdict`` of a table with a sort
key; S3 listings iterate a bucket's keys as objects are put; moto's IAM authorization, which runs in
every request, iterates all users' access keys while a job's user is created. ``MotoAccess``, a WSGI
middleware right in front of moto's application, therefore runs each request under its service's
lock:

- one lock per service (``dynamodb``, ``s3``, ``sns``, ``logs``, ``iam``, ...: a moto backend each),
  held by one request at a time, so requests to different services run concurrently. Every request is
  held whole (reads too, given the above); a request only holds it while moto computes its answer
  (milliseconds: everything is in memory), never while the journal ``fsync``-s;
- IAM's lock is a readers-writer lock: every request reads IAM (its authorization) and holds it
  shared; IAM's own changes (a job's user made or deleted) hold it alone.

The DynamoDB lock also guards ``TableImages``: the items each DynamoDB write touched are noted under
it, so a snapshot copies only the items written since the previous one (``capture``), and holds the
lock no longer than that takes.
"""

from __future__ import annotations

import io
import json
import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote

from werkzeug.wsgi import get_input_stream

from remote_batch_local.wsgi_calls import call_app

logger = logging.getLogger(__name__)

DYNAMODB = "dynamodb"
IAM = "iam"
_TARGET_SERVICES = {"DynamoDB_20120810": DYNAMODB, "Logs_20140328": "logs"}
_CREDENTIAL_SCOPE = re.compile(r"Credential=[^/]+/[0-9]{8}/[^/]+/([a-z0-9-]+)/aws4_request")
# Operations that change nothing (query protocols' ``Action``, JSON protocols' ``X-Amz-Target``).
_READ_PREFIXES = ("Get", "List", "Describe", "BatchGet", "TransactGet", "Query", "Scan", "Filter")


class ReadWriteLock:
    """Many readers or one writer; a waiting writer goes before readers that come after it."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Held shared."""
        with self._cond:
            self._cond.wait_for(lambda: not self._writer and not self._writers_waiting)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Held alone."""
        with self._cond:
            self._writers_waiting += 1
            try:
                self._cond.wait_for(lambda: not self._writer and not self._readers)
            finally:
                self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


def request_service(environ: Mapping[str, Any], body: bytes | None) -> tuple[str, str]:
    """The moto service a request goes to and its operation (``""`` when unknown): the JSON
    protocols' ``X-Amz-Target``, else the SigV4 credential scope (header or presigned query) and the
    query protocols' ``Action`` (query string or form ``body``); S3's operation is its method."""
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        prefix, _, operation = target.partition(".")
        return _TARGET_SERVICES.get(prefix, prefix.split("_", 1)[0].lower()), operation
    found = _CREDENTIAL_SCOPE.search(environ.get("HTTP_AUTHORIZATION", "")) or _CREDENTIAL_SCOPE.search(
        unquote(environ.get("QUERY_STRING", "")).replace("X-Amz-Credential=", "Credential=")
    )
    service = str(found.group(1)) if found else ""
    if service == "s3" or not service:
        return service, str(environ.get("REQUEST_METHOD", ""))
    action = parse_qs(environ.get("QUERY_STRING", "")).get("Action", [""])[0]
    if not action and body:
        action = parse_qs(body.decode("utf-8", "replace")).get("Action", [""])[0]
    return service, action


def is_read(service: str, operation: str) -> bool:
    """Whether the operation changes nothing (S3: GET and HEAD; others: by the operation's name)."""
    if service == "s3":
        return operation in ("GET", "HEAD")
    return operation.startswith(_READ_PREFIXES)


@dataclass(frozen=True, slots=True)
class Changes:
    """What ``TableImages.copy_changes`` copied: per table, the items by key text (None: deleted),
    and the tables copied whole."""

    tables: tuple[str, ...]
    copied: dict[str, dict[str, dict[str, Any] | None]]
    whole: set[str]


class TableImages:
    """The DynamoDB tables' items in DynamoDB JSON, kept up to date from the writes' requests.

    ``MotoAccess`` calls ``note`` under the DynamoDB lock after moto applied a write; ``capture``
    takes that lock, reads from moto's backend only the items noted since the last capture (all
    items of a table never captured, or one a PartiQL statement or a table operation changed), and
    returns every item of the tables.

    Parameters
    ----------
    lock : threading.Lock
        The DynamoDB lock of ``MotoAccess``.
    account : str
        moto's account of the tables.
    region : str
        Their region.
    """

    def __init__(self, lock: threading.Lock, account: str, region: str) -> None:
        self._lock = lock
        self._account = account
        self._region = region
        # table → the keys or items of the writes noted since the last capture
        self._touched: dict[str, list[dict[str, Any]]] = {}
        self._whole: set[str] = set()  # tables to read whole at the next capture
        self._everything = True  # a statement that names no table: read every table whole
        self._images: dict[str, dict[str, str]] = {}  # table → key text → item text

    def note(self, operation: str, request: Mapping[str, Any]) -> None:
        """Note what a DynamoDB write request (``operation``, its JSON body) touched (call under
        the DynamoDB lock, after moto applied it)."""
        if operation == "PutItem":
            self._touch(request.get("TableName"), request.get("Item"))
        elif operation in ("UpdateItem", "DeleteItem"):
            self._touch(request.get("TableName"), request.get("Key"))
        elif operation == "BatchWriteItem":
            for table, writes in (request.get("RequestItems") or {}).items():
                for write in writes:
                    put, delete = write.get("PutRequest"), write.get("DeleteRequest")
                    self._touch(table, (put or {}).get("Item") or (delete or {}).get("Key"))
        elif operation == "TransactWriteItems":
            for entry in request.get("TransactItems") or []:
                for kind, write in entry.items():
                    if kind != "ConditionCheck":
                        self._touch(write.get("TableName"), write.get("Item") or write.get("Key"))
        elif isinstance(request.get("TableName"), str):
            self._whole.add(request["TableName"])  # CreateTable, DeleteTable, UpdateTable, ...
        else:
            self._everything = True  # PartiQL: which items is the statement's to say

    def _touch(self, table: Any, attributes: Any) -> None:
        if isinstance(table, str) and isinstance(attributes, dict):
            self._touched.setdefault(table, []).append(attributes)
        elif isinstance(table, str):
            self._whole.add(table)

    def capture(self, tables: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
        """Every item of ``tables`` (DynamoDB JSON, as ``Scan`` returns it), as moto holds them now
        (``capture_json``, parsed)."""
        return {
            name: [json.loads(text) for text in texts] for name, texts in self.capture_json(tables).items()
        }

    def capture_json(self, tables: Iterable[str]) -> dict[str, list[str]]:
        """Every item of ``tables`` as JSON text (DynamoDB JSON, keys sorted), as moto holds them now:
        ``merge_json(copy_changes(tables))``."""
        return self.merge_json(self.copy_changes(tables))

    def copy_changes(self, tables: Iterable[str]) -> Changes:
        """The items of ``tables`` written since the last copy, as moto holds them now (a table read
        whole the first time, or after a statement that may have changed any of its items).

        Holds the DynamoDB lock while they are copied, and only then: milliseconds for the few
        hundred items a busy 5 s writes, however large the tables.
        """
        names = tuple(tables)
        with self._lock:
            copied, whole = self._copy_locked(names)
        return Changes(names, copied, whole)

    def merge_json(self, changes: Changes) -> dict[str, list[str]]:
        """Bring the images up to ``changes`` (in the order they were copied) and return every item
        of their tables as JSON text: only the changed items are turned into text, so a snapshot's
        file is the texts joined (no ``json.dumps`` of every table holding the GIL)."""
        for name in changes.tables:
            if name not in changes.copied:
                self._images.pop(name, None)
                continue
            texts = {
                key: None if item is None else json.dumps(item, sort_keys=True)
                for key, item in changes.copied[name].items()
            }
            if name in changes.whole:
                self._images[name] = {key: text for key, text in texts.items() if text is not None}
                continue
            image = self._images.setdefault(name, {})
            for key, text in texts.items():
                if text is None:
                    image.pop(key, None)
                else:
                    image[key] = text
        return {name: list(self._images.get(name, {}).values()) for name in changes.tables}

    def _copy_locked(
        self, names: tuple[str, ...]
    ) -> tuple[dict[str, dict[str, dict[str, Any] | None]], set[str]]:
        """Per table, the items to copy (None: gone) and the tables copied whole."""
        from moto.dynamodb.models import dynamodb_backends

        backend_tables = dynamodb_backends[self._account][self._region].tables
        touched, self._touched = self._touched, {}
        if self._everything:
            self._whole.update(names)
            self._everything = False
        copied: dict[str, dict[str, dict[str, Any] | None]] = {}
        whole: set[str] = set()
        for name in names:
            table = backend_tables.get(name)
            if table is None:
                continue
            if name in self._whole or name not in self._images:
                copies = (item.to_json()["Attributes"] for item in table.all_items())
                copied[name] = {str(_key_text(table, attributes)): attributes for attributes in copies}
                whole.add(name)
                continue
            changed = copied.setdefault(name, {})
            for attributes in touched.get(name, ()):
                key = _key_text(table, attributes)
                if key is not None and key not in changed:
                    changed[key] = _stored_json(table, attributes)
        self._whole.difference_update(names)
        return copied, whole


def _key_text(table: Any, attributes: Mapping[str, Any]) -> str | None:
    """An item's primary key (DynamoDB JSON) as text, the images' keys; None when incomplete."""
    key = {table.hash_key_attr: attributes.get(table.hash_key_attr)}
    if table.range_key_attr:
        key[table.range_key_attr] = attributes.get(table.range_key_attr)
    if not all(isinstance(value, dict) for value in key.values()):
        return None
    return json.dumps(key, sort_keys=True)


def _stored_json(table: Any, attributes: Mapping[str, Any]) -> dict[str, Any] | None:
    """The item stored under ``attributes``' key (DynamoDB JSON), None when there is none."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    from remote_batch_local.moto_transactions import stored_item

    range_value = attributes.get(table.range_key_attr) if table.range_key_attr else None
    item = stored_item(
        table,
        DynamoType(attributes[table.hash_key_attr]),
        DynamoType(range_value) if range_value is not None else None,
    )
    return None if item is None else dict(item.to_json()["Attributes"])


class MotoAccess:
    """WSGI middleware in front of moto's application: each request under its service's lock.

    Parameters
    ----------
    app : Callable
        moto's application.
    account : str
        moto's account of the stack's tables (``TableImages``).
    region : str
        Their region.
    """

    def __init__(self, app: Callable[..., Any], account: str, region: str) -> None:
        self.app = app
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {DYNAMODB: threading.Lock()}
        self.iam = ReadWriteLock()
        self.tables = TableImages(self._locks[DYNAMODB], account, region)

    def lock_of(self, service: str) -> threading.Lock:
        """The lock of ``service``'s backend (made on first use)."""
        with self._guard:
            return self._locks.setdefault(service, threading.Lock())

    @contextmanager
    def holding(self, service: str, operation: str) -> Iterator[None]:
        """What a request to ``service``'s ``operation`` holds while moto answers it."""
        if service == IAM:
            with self.iam.reading() if is_read(service, operation) else self.iam.writing():
                yield
            return
        with self.iam.reading(), self.lock_of(service):
            yield

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        body: bytes | None = None
        if environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_20120810.") or (
            environ.get("REQUEST_METHOD") == "POST" and "HTTP_X_AMZ_TARGET" not in environ
        ):
            body = get_input_stream(environ).read()
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
            environ.pop("HTTP_TRANSFER_ENCODING", None)
            environ["wsgi.input_terminated"] = False
        service, operation = request_service(environ, body)
        with self.holding(service, operation):
            # moto computes its answer as the body is read: read it under the lock too.
            answer = call_app(self.app, environ)
            if service == DYNAMODB and body is not None and not is_read(service, operation):
                self._note(operation, body)
        start_response(answer.status, answer.headers)
        return [answer.body]

    def _note(self, operation: str, body: bytes) -> None:
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            request = {}
        if not isinstance(request, dict):
            request = {}
        self.tables.note(operation, request)
