"""The local stack's on-disk job log store under moto's CloudWatch Logs API (issue 10, Build 2)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.logs import models as moto_logs

from remote_batch_local.logstore import PAGE_BYTES, DiskLogStream, LogStore

REGION = "us-east-1"
GROUP = "/aws/batch/job"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[LogStore]:
    log_store = LogStore(tmp_path / "logs", {(REGION, GROUP)})
    log_store.install()
    yield log_store
    log_store.close()


@pytest.fixture
def logs(store: LogStore) -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("logs", region_name=REGION)
        client.create_log_group(logGroupName=GROUP)
        client.create_log_group(logGroupName="other")
        yield client


def _put(logs: Any, stream: str, messages: list[str], start_ms: int) -> None:
    events = [{"timestamp": start_ms + i, "message": m} for i, m in enumerate(messages)]
    for first in range(0, len(events), 5000):
        logs.put_log_events(logGroupName=GROUP, logStreamName=stream, logEvents=events[first : first + 5000])


def _all(logs: Any, stream: str, **kwargs: Any) -> list[str]:
    messages: list[str] = []
    token = None
    while True:
        page = logs.get_log_events(
            logGroupName=GROUP,
            logStreamName=stream,
            startFromHead=True,
            **kwargs,
            **({"nextToken": token} if token else {}),
        )
        messages += [event["message"] for event in page["events"]]
        if not page["events"] or page["nextForwardToken"] == token:
            return messages
        token = page["nextForwardToken"]


def test_job_streams_live_on_disk_and_read_back_in_pages(logs: Any, store: LogStore) -> None:
    logs.create_log_stream(logGroupName=GROUP, logStreamName="job/default/a")
    messages = [f"line {i}" for i in range(25_000)]
    now = int(time.time() * 1000) - 60_000
    _put(logs, "job/default/a", messages, now)

    stream = moto_logs.logs_backends["123456789012"][REGION].groups[GROUP].streams["job/default/a"]
    assert isinstance(stream, DiskLogStream)
    # moto holds no event objects: the events are read from the file
    assert stream.__dict__.get("events") is None
    first = logs.get_log_events(logGroupName=GROUP, logStreamName="job/default/a", startFromHead=True)
    assert len(first["events"]) == 10_000
    assert _all(logs, "job/default/a") == messages
    # a time range reads from the first event at or after it (sparse index, then a scan)
    assert _all(logs, "job/default/a", startTime=now + 20_000)[:2] == ["line 20000", "line 20001"]
    # the tail, backwards, as moto pages it
    tail = logs.get_log_events(logGroupName=GROUP, logStreamName="job/default/a", limit=3)
    assert [e["message"] for e in tail["events"]] == ["line 24997", "line 24998", "line 24999"]
    described = logs.describe_log_streams(logGroupName=GROUP)["logStreams"][0]
    assert described["storedBytes"] == sum(len(m) for m in messages)
    assert (described["firstEventTimestamp"], described["lastEventTimestamp"]) == (now, now + 24_999)
    # another group stays moto's own
    logs.create_log_stream(logGroupName="other", logStreamName="s")
    other = moto_logs.logs_backends["123456789012"][REGION].groups["other"].streams["s"]
    assert not isinstance(other, DiskLogStream)


def test_a_page_holds_at_most_1_mb_of_messages(logs: Any) -> None:
    logs.create_log_stream(logGroupName=GROUP, logStreamName="big")
    big = ["y" * 200_000 for _ in range(12)]
    _put(logs, "big", big[:5], int(time.time() * 1000))
    _put(logs, "big", big[5:], int(time.time() * 1000) + 10)
    page = logs.get_log_events(logGroupName=GROUP, logStreamName="big", startFromHead=True)
    assert sum(len(e["message"]) for e in page["events"]) <= PAGE_BYTES
    assert len(page["events"]) == 5
    assert _all(logs, "big") == big


def test_streams_come_back_from_disk_and_a_torn_record_is_cut(tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    first = LogStore(tmp_path / "logs", {(REGION, GROUP)})
    first.install()
    with mock_aws():
        logs = boto3.client("logs", region_name=REGION)
        logs.create_log_group(logGroupName=GROUP)
        logs.create_log_stream(logGroupName=GROUP, logStreamName="kept")
        _put(logs, "kept", ["one", "two", "three"], now)
    first.close()
    files = list((tmp_path / "logs").glob("*.log"))
    assert len(files) == 1
    with files[0].open("ab") as log_file:  # a crash in the middle of a record
        log_file.write(b"\x01\x02\x03")

    second = LogStore(tmp_path / "logs", {(REGION, GROUP)})
    second.install()
    try:
        with mock_aws():
            logs = boto3.client("logs", region_name=REGION)
            logs.create_log_group(logGroupName=GROUP)
            stored = second.stored_streams()
            assert [(s["logGroup"], s["logStream"]) for s in stored] == [(GROUP, "kept")]
            logs.create_log_stream(logGroupName=GROUP, logStreamName="kept")
            assert _all(logs, "kept") == ["one", "two", "three"]
            _put(logs, "kept", ["four"], now + 10)
            assert _all(logs, "kept") == ["one", "two", "three", "four"]
            assert second.sync() == 1
            # deleting the stream removes its files
            logs.delete_log_stream(logGroupName=GROUP, logStreamName="kept")
            assert list((tmp_path / "logs").iterdir()) == []
    finally:
        second.close()
