"""A full (ENOSPC), over-quota (EDQUOT) or read-only (EROFS) state disk, on every path the local stack
writes: refused writes leave nothing behind, acknowledged ones are never lost, and writes resume by
themselves once the disk takes them again.

The faults are injected (no mount needed): ``FaultyDisk`` makes ``os.write``/``os.fsync`` fail for
files under the home and ``statvfs`` say it is full, as a filled filesystem does.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from werkzeug.test import EnvironBuilder

from functions.domain.errors import DependencyFailed
from functions.ports import OutgoingNotification
from remote_batch_local.bus import EventBus
from remote_batch_local.dispatch_queue import LocalDispatchQueue
from remote_batch_local.executor.constants import LOG_EVENT_OVERHEAD_BYTES
from remote_batch_local.executor.logs import LogShipper, dropped_lines_note
from remote_batch_local.files import write_bytes_atomic
from remote_batch_local.gateway import ApiGateway
from remote_batch_local.journal import IN_PROCESS, Journal, JournalingApp
from remote_batch_local.logstore import InProcessLogs, LogStore
from remote_batch_local.outbox import OutboxNotifier
from remote_batch_local.stack import _writing_tick
from remote_batch_local.state_disk import StateDisk, StateDiskUnavailable
from remote_batch_local.tokens import TokenStore

REGION = "us-east-1"
GROUP = "/remote-batch/jobs"
NOW_MS = int(time.time() * 1000)  # CloudWatch rejects events older than 14 days
KIND = pytest.mark.parametrize(
    "code", [errno.ENOSPC, errno.EDQUOT, errno.EROFS], ids=["ENOSPC", "EDQUOT", "EROFS"]
)


class FaultyDisk:
    """The home's filesystem, made to refuse writes on demand.

    ``fail_writes``: ``os.write`` and ``os.fsync`` on a file under the home raise ``OSError(code)``
    (the first ``partial`` bytes of a write go through first, as on a filesystem that fills mid-write).
    ``known_full``: ``statvfs`` reports no free bytes (read-only for ``EROFS``).
    """

    def __init__(self, home: Path, monkeypatch: pytest.MonkeyPatch, code: int) -> None:
        self.home = home
        self.code = code
        self.fail_writes = False
        self.known_full = False
        self.partial = 3
        self.clock = 0.0
        self.disk = StateDisk(home, 1024, clock=lambda: self.clock, statvfs=self._statvfs)
        real_write, real_fsync = os.write, os.fsync

        def write(fd: int, data: Any) -> int:
            if self.fail_writes and self._under_home(fd):
                if self.partial and len(data) > self.partial:
                    real_write(fd, bytes(data[: self.partial]))
                raise OSError(self.code, os.strerror(self.code))
            return real_write(fd, data)

        def fsync(fd: int) -> None:
            if self.fail_writes and self._under_home(fd):
                raise OSError(self.code, os.strerror(self.code))
            real_fsync(fd)

        monkeypatch.setattr(os, "write", write)
        monkeypatch.setattr(os, "fsync", fsync)

    def _under_home(self, fd: int) -> bool:
        try:
            return os.readlink(f"/proc/self/fd/{fd}").startswith(str(self.home))
        except OSError:
            return False

    def _statvfs(self, path: Path) -> os.statvfs_result:
        read_only = self.known_full and self.code == errno.EROFS
        free = 0 if self.known_full and not read_only else 1 << 30
        return os.statvfs_result((4096, 1, 0, 0, free, 0, 0, 0, os.ST_RDONLY if read_only else 0, 255))

    def fill(self, *, known: bool = True) -> None:
        self.fail_writes, self.known_full = True, known

    def free(self) -> None:
        """Space returns; the next probe (a probe interval later) sees it."""
        self.fail_writes = self.known_full = False
        self.clock += 60.0


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


# -- the journal --------------------------------------------------------------------------------------
@KIND
def test_a_journal_flush_that_fails_leaves_no_torn_record_and_loses_no_acknowledged_write(
    home: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    faulty = FaultyDisk(home, monkeypatch, code)
    journal = Journal(home / "journal", faulty.disk)
    durable = journal.append({"service": "dynamodb", "n": 1})
    journal.wait_durable(durable)
    segment = next((home / "journal").glob("*.jsonl"))
    size = segment.stat().st_size

    # Given a write applied in moto whose record the disk refuses (it filled after the check)
    faulty.fill(known=False)
    refused = journal.append({"service": "dynamodb", "n": 2})
    with pytest.raises(StateDiskUnavailable):
        journal.wait_durable(refused)

    # Then the segment is cut back to its last whole record, and the disk refuses further writes
    assert segment.stat().st_size == size
    assert faulty.disk.status() is not None

    # When space returns, the next acknowledged write makes the refused record durable first, in order
    faulty.free()
    later = journal.append({"service": "dynamodb", "n": 3})
    journal.wait_durable(later)
    journal.close()
    assert [record["n"] for record in Journal(home / "journal").records()] == [1, 2, 3]


@KIND
def test_the_journal_refuses_a_write_before_moto_applies_it(
    home: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    faulty = FaultyDisk(home, monkeypatch, code)
    journal = Journal(home / "journal", faulty.disk)
    applied: list[str] = []

    def moto(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        applied.append(environ["HTTP_X_AMZ_TARGET"])
        start_response("200 OK", [])
        return [b"{}"]

    app = JournalingApp(moto, journal, faulty.disk)
    app.enable()
    faulty.fill()

    def put_item(in_process: bool) -> tuple[str, bytes]:
        environ = EnvironBuilder(
            method="POST", path="/", headers=[("X-Amz-Target", "DynamoDB_20120810.PutItem")], data=b"{}"
        ).get_environ()
        if in_process:
            environ[IN_PROCESS] = True
        status: list[str] = []
        answer = b"".join(app(environ, lambda code, headers: status.append(code)))
        return status[0], answer

    # The stack's own request: raised to its caller (the api function), nothing applied
    with pytest.raises(StateDiskUnavailable):
        put_item(in_process=True)
    # A job's request over HTTP: DynamoDB's 503 error, nothing applied
    status, answer = put_item(in_process=False)
    assert status.startswith("503")
    assert json.loads(answer)["__type"].endswith("#ServiceUnavailable")
    assert applied == []
    assert journal.last_seq() == 0

    faulty.free()
    assert put_item(in_process=True)[0] == "200 OK"
    assert applied == ["DynamoDB_20120810.PutItem"]


# -- the job log store --------------------------------------------------------------------------------
@pytest.fixture
def log_store(home: Path) -> Iterator[tuple[LogStore, list[FaultyDisk]]]:
    holder: list[FaultyDisk] = []
    yield_store: LogStore | None = None
    with mock_aws():
        boto3.client("logs", region_name=REGION).create_log_group(logGroupName=GROUP)
        yield_store = LogStore(home / "logs", {(REGION, GROUP)})
        yield_store.install()
        try:
            yield yield_store, holder
        finally:
            yield_store.close()


@KIND
def test_a_log_batch_the_disk_refuses_is_cut_off_whole(
    home: Path, monkeypatch: pytest.MonkeyPatch, code: int, log_store: tuple[LogStore, list[FaultyDisk]]
) -> None:
    store, _ = log_store
    faulty = FaultyDisk(home, monkeypatch, code)
    store._disk = faulty.disk  # the store as the stack builds it, with the faulty disk
    client = boto3.client("logs", region_name=REGION)
    client.create_log_stream(logGroupName=GROUP, logStreamName="job")
    logs = InProcessLogs(client, "123456789012", REGION)
    logs.put_log_events(
        logGroupName=GROUP, logStreamName="job", logEvents=[{"timestamp": NOW_MS, "message": "one"}]
    )
    (log_file,) = (home / "logs").glob("*.log")
    size = log_file.stat().st_size

    for known in (False, True):  # the disk filled mid-write; then, known full, refused before writing
        faulty.fill(known=known)
        with pytest.raises(ClientError) as refused:
            logs.put_log_events(
                logGroupName=GROUP,
                logStreamName="job",
                logEvents=[{"timestamp": NOW_MS + 1, "message": "lost"}],
            )
        assert refused.value.response["Error"]["Code"] == "ServiceUnavailableException"
        assert log_file.stat().st_size == size

    faulty.free()
    logs.put_log_events(
        logGroupName=GROUP, logStreamName="job", logEvents=[{"timestamp": NOW_MS + 2, "message": "three"}]
    )
    events = client.get_log_events(logGroupName=GROUP, logStreamName="job", startFromHead=True)["events"]
    assert [e["message"] for e in events] == ["one", "three"]


# -- the event bus's record ---------------------------------------------------------------------------
@KIND
def test_a_batch_event_is_delivered_when_its_journal_line_is_refused(
    home: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    faulty = FaultyDisk(home, monkeypatch, code)
    delivered: list[str] = []
    bus = EventBus(
        lambda envelope: delivered.append(envelope["id"]), home / "batch-events.jsonl", disk=faulty.disk
    )
    bus.start()
    try:
        bus.publish({"id": "e-1", "detail": {"jobId": "j"}})
        faulty.fill(known=False)
        bus.publish({"id": "e-2", "detail": {"jobId": "j"}})
        faulty.free()
        bus.publish({"id": "e-3", "detail": {"jobId": "j"}})
        assert bus.wait_idle(10)
    finally:
        bus.stop()

    assert delivered == ["e-1", "e-2", "e-3"]
    lines = (home / "batch-events.jsonl").read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["e-1", "e-3"]


def test_a_delivery_that_fails_while_the_disk_refuses_writes_waits_instead_of_dead_lettering(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    faulty = FaultyDisk(home, monkeypatch, errno.ENOSPC)
    monkeypatch.setattr("remote_batch_local.bus.DISK_WAIT_SECONDS", 0.01)
    tries: list[int] = []

    def deliver(envelope: dict[str, Any]) -> None:
        tries.append(1)
        if len(tries) <= 4:
            status = faulty.disk.status() or _never()
            if len(tries) == 4:
                faulty.free()  # space returns while the event waits: this try counts, the next succeeds
            raise StateDiskUnavailable(status)

    faulty.fill()
    bus = EventBus(deliver, home / "events.jsonl", max_attempts=2, retry_delay=0.01, disk=faulty.disk)
    bus.start()
    try:
        bus.publish({"id": "e-1", "detail": {"jobId": "j"}})
        assert bus.wait_idle(10)
    finally:
        bus.stop()

    # Three failed tries while the disk was full (uncounted), then the two tries of max_attempts.
    assert len(tries) == 5
    assert bus.dead_letters == []


def _never() -> Any:
    raise AssertionError("the disk was expected to refuse writes")


# -- the outbox ---------------------------------------------------------------------------------------
class RecordingNotifier:
    def __init__(self) -> None:
        self.sent: list[str] = []

    def send(self, notification: OutgoingNotification) -> None:
        self.sent.append(notification.subject)


def _notification(subject: str) -> OutgoingNotification:
    return OutgoingNotification(
        job_id="j-1",
        account_id="a-1",
        event="SUCCEEDED",
        method="Email",
        to="dev@example.com",
        subject=subject,
        message="done",
        at=datetime(2026, 12, 1, tzinfo=UTC),
        secret=None,
    )


@KIND
def test_the_outbox_publishes_nothing_while_the_disk_refuses_and_never_tears_a_line(
    home: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    faulty = FaultyDisk(home, monkeypatch, code)
    inner = RecordingNotifier()
    outbox = OutboxNotifier(inner, home / "outbox.jsonl", echo=lambda text: None, disk=faulty.disk)
    outbox.send(_notification("first"))

    # Known full: refused before publishing, as a transient failure (the caller retries later)
    faulty.fill()
    with pytest.raises(DependencyFailed):
        outbox.send(_notification("refused"))
    # Filled after the check: SNS has it; only the local line is missing, and no torn line is left
    faulty.free()
    faulty.fill(known=False)
    outbox.send(_notification("published"))
    faulty.free()
    outbox.send(_notification("last"))

    assert inner.sent == ["first", "published", "last"]
    lines = (home / "outbox.jsonl").read_text().splitlines()
    assert [json.loads(line)["subject"] for line in lines] == ["first", "last"]


# -- the snapshots and the alive stamp ----------------------------------------------------------------
@KIND
def test_a_snapshot_tick_the_disk_refuses_is_reported_and_leaves_no_temporary_file(
    home: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    faulty = FaultyDisk(home, monkeypatch, code)
    target = home / "state" / "dynamodb.json"
    write_bytes_atomic(target, b"old")
    tick = _writing_tick(faulty.disk, "snapshot", lambda: write_bytes_atomic(target, b"new"))

    faulty.fill(known=False)
    tick()  # the ticker goes on; the disk now refuses writes

    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in target.parent.iterdir()) == ["dynamodb.json"]
    assert faulty.disk.status() is not None
    faulty.free()
    tick()
    assert target.read_bytes() == b"new"


# -- the HTTP gateway ---------------------------------------------------------------------------------
class Gateway:
    def __init__(self, home: Path, disk: StateDisk) -> None:
        self.invoked: list[str] = []
        tokens = TokenStore(home / "tokens.json")
        self.token = tokens.mint("acct-1", ("user",))

        def invoke(event: dict[str, Any]) -> dict[str, Any]:
            self.invoked.append(f"{event['httpMethod']} {event['path']}")
            if event["path"] == "/health":
                return {"statusCode": 200, "body": json.dumps({"status": "ok"})}
            return {"statusCode": 202, "body": json.dumps({"jobId": "j-1"})}

        self.app = ApiGateway(
            tokens=tokens,
            invoke_api=invoke,
            events=None,  # type: ignore[arg-type]
            accounts=None,  # type: ignore[arg-type]
            admin_environment=contextlib.nullcontext,
            disk=disk,
        )

    def call(self, method: str, path: str) -> tuple[int, dict[str, str], dict[str, Any]]:
        environ = EnvironBuilder(
            method=method,
            path=path,
            headers=[("Authorization", f"Bearer {self.token}"), ("Content-Type", "application/json")],
            input_stream=io.BytesIO(b"{}" if method == "POST" else b""),
        ).get_environ()
        started: list[Any] = []
        chunks = self.app(environ, lambda status, headers, *rest: started.append((status, headers)))
        status, headers = started[0]
        return int(status.split()[0]), dict(headers), json.loads(b"".join(chunks))


@KIND
def test_while_the_disk_refuses_writes_the_gateway_answers_503_invokes_nothing_and_health_says_why(
    home: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    faulty = FaultyDisk(home, monkeypatch, code)
    gateway = Gateway(home, faulty.disk)
    faulty.fill()

    for method in ("POST", "PUT", "PATCH", "DELETE"):
        status, headers, body = gateway.call(method, "/jobs")
        assert status == 503
        assert headers["Retry-After"] == "5"
        assert body["error"]["code"] == "ServiceUnavailable"
        assert body["error"]["message"].startswith("The local stack's state disk is")
    health_status, _, health = gateway.call("GET", "/health")
    read_status, _, _ = gateway.call("GET", "/jobs")

    assert gateway.invoked == ["GET /jobs"]  # reads are still answered; nothing that writes ran
    assert health_status == 503
    assert health["error"]["code"] == "ServiceUnavailable"
    assert ("read-only" if code == errno.EROFS else "full") in health["error"]["message"]
    assert read_status == 202

    # Space returns: the stack resumes by itself
    faulty.free()
    assert gateway.call("POST", "/jobs")[0] == 202
    assert gateway.call("GET", "/health")[:1] == (200,)


def test_a_500_of_a_request_that_met_the_full_disk_on_its_way_is_answered_503(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    faulty = FaultyDisk(home, monkeypatch, errno.ENOSPC)
    gateway = Gateway(home, faulty.disk)

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        # The api function's journaled write was refused (the disk filled after the request was admitted)
        with contextlib.suppress(StateDiskUnavailable), faulty.disk.writing():
            raise OSError(errno.ENOSPC, "No space left on device")
        return {"statusCode": 500, "body": json.dumps({"error": {"code": "InternalError"}})}

    gateway.app._invoke_api = invoke

    status, _, body = gateway.call("POST", "/jobs")

    assert status == 503
    assert body["error"]["code"] == "ServiceUnavailable"


@KIND
def test_a_write_of_the_gateway_itself_that_the_disk_refuses_is_answered_503(
    home: Path, monkeypatch: pytest.MonkeyPatch, code: int
) -> None:
    faulty = FaultyDisk(home, monkeypatch, code)
    gateway = Gateway(home, faulty.disk)

    def invoke(event: dict[str, Any]) -> dict[str, Any]:
        # What the admin route's token write meets when the disk filled after the request was admitted
        raise OSError(code, os.strerror(code))

    gateway.app._invoke_api = invoke

    status, _, body = gateway.call("POST", "/jobs")

    assert status == 503
    assert body["error"]["code"] == "ServiceUnavailable"
    assert faulty.disk.status() is not None


# -- the dispatch queue -------------------------------------------------------------------------------
def test_a_dispatch_that_fails_while_the_disk_refuses_writes_waits_instead_of_dead_lettering(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    faulty = FaultyDisk(home, monkeypatch, errno.ENOSPC)
    deliveries: list[list[str]] = []

    def dispatcher(event: dict[str, Any]) -> dict[str, Any]:
        deliveries.append([json.loads(record["body"])["jobId"] for record in event["Records"]])
        if len(deliveries) == 4:
            faulty.free()  # space returns: this failure counts, the next delivery succeeds
        if len(deliveries) <= 4:
            return {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in event["Records"]]}
        return {"batchItemFailures": []}

    faulty.fill()
    queue = LocalDispatchQueue(
        dispatcher, region=REGION, account="1", visibility_timeout=0.01, max_receives=2, disk=faulty.disk
    )
    queue.start()
    try:
        queue.send(["job-1"])
        assert queue.wait_idle(10)
    finally:
        queue.stop(5)

    assert deliveries == [["job-1"]] * 5
    assert queue.stats().dead_letters == 0


# -- the executor's log shipping ------------------------------------------------------------------------
def _shipper_on_full_disk(
    home: Path, monkeypatch: pytest.MonkeyPatch, code: int, store: LogStore
) -> tuple[FaultyDisk, Any, LogShipper]:
    """A job's ``LogShipper`` over the in-process logs client, its stream made, on a disk that fills."""
    monkeypatch.setattr("remote_batch_local.executor.logs.LOG_UNAVAILABLE_RETRY_SECONDS", 0.01)
    faulty = FaultyDisk(home, monkeypatch, code)
    store._disk = faulty.disk
    client = boto3.client("logs", region_name=REGION)
    client.create_log_stream(logGroupName=GROUP, logStreamName="job")
    return faulty, client, LogShipper(InProcessLogs(client, "123456789012", REGION), GROUP, "job", "job-1")


def _stream_messages(client: Any) -> list[str]:
    events = client.get_log_events(logGroupName=GROUP, logStreamName="job", startFromHead=True)["events"]
    return [e["message"] for e in events]


@KIND
def test_log_lines_shipped_while_the_disk_refuses_writes_are_kept_and_shipped_once_it_takes_them(
    home: Path, monkeypatch: pytest.MonkeyPatch, code: int, log_store: tuple[LogStore, list[FaultyDisk]]
) -> None:
    faulty, client, shipper = _shipper_on_full_disk(home, monkeypatch, code, log_store[0])
    shipper.append("before")
    assert _eventually_true(lambda: shipper.shipped == 1)

    # When the disk fills and the job goes on printing, its lines wait in the buffer, none lost
    faulty.fill()
    for i in range(5):
        shipper.append(f"during {i}")
    assert _eventually_true(lambda: shipper._unavailable)
    assert _stream_messages(client) == ["before"]

    # Then, once space returns, they are shipped in order before the ones printed after
    faulty.free()
    shipper.append("after")
    shipper.close()
    assert _stream_messages(client) == ["before", *(f"during {i}" for i in range(5)), "after"]


def test_log_lines_past_the_buffer_while_the_disk_is_full_are_dropped_and_the_log_says_so_once(
    home: Path, monkeypatch: pytest.MonkeyPatch, log_store: tuple[LogStore, list[FaultyDisk]]
) -> None:
    # Given a shipper holding at most about 3 lines, whose store is unavailable (a full disk)
    monkeypatch.setattr(
        "remote_batch_local.executor.logs.LOG_BUFFER_BYTES", 3 * (LOG_EVENT_OVERHEAD_BYTES + 6)
    )
    faulty, client, shipper = _shipper_on_full_disk(home, monkeypatch, errno.ENOSPC, log_store[0])
    faulty.fill()
    shipper.append("line 0")
    assert _eventually_true(lambda: shipper._unavailable)

    # When the job prints more than the buffer holds, it is not held on its pipe: the rest is dropped
    for i in range(1, 10):
        shipper.append(f"line {i}")
    faulty.free()
    assert _eventually_true(lambda: not shipper._unavailable)
    shipper.append("resumed")
    shipper.close()

    # Then what the buffer held is shipped, one line says how many were dropped, and shipping goes on
    assert _stream_messages(client) == ["line 0", "line 1", "line 2", dropped_lines_note(7), "resumed"]
    assert dropped_lines_note(7).startswith("[remote-batch] 7 log lines dropped here")


def _eventually_true(condition: Any, timeout: float = 5) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
    return True
