"""The local stack's write-ahead journal: durability order, torn tails, segments, what is journaled."""

from __future__ import annotations

import base64
import io
import json
import threading
from pathlib import Path
from typing import Any

from remote_batch_local.journal import Journal, JournalingApp, journaled_service

AUTH = "AWS4-HMAC-SHA256 Credential=testing/20261201/us-east-1/{service}/aws4_request, SignedHeaders=host"


def _record(service: str = "dynamodb", body: str = "{}") -> dict[str, Any]:
    return {"service": service, "method": "POST", "path": "/", "query": "", "headers": {}, "body": body}


def _lines(directory: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for path in sorted(directory.glob("*.jsonl"))
        for line in path.read_text().splitlines()
    ]


def test_a_record_is_on_disk_when_wait_durable_returns(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    seq = journal.append(_record(body="a"))
    journal.wait_durable(seq)
    assert [(r["seq"], r["body"]) for r in _lines(tmp_path)] == [(1, "a")]


def test_concurrent_writers_share_fsyncs_and_lose_nothing(tmp_path: Path) -> None:
    journal = Journal(tmp_path)

    def write(n: int) -> None:
        for i in range(50):
            journal.wait_durable(journal.append(_record(body=f"{n}-{i}")))

    threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    records = _lines(tmp_path)
    assert [r["seq"] for r in records] == list(range(1, 401))
    assert {r["body"] for r in records} == {f"{n}-{i}" for n in range(8) for i in range(50)}


def test_a_torn_last_line_is_cut_and_appending_goes_on_after_it(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.wait_durable(journal.append(_record(body="kept")))
    journal.close()
    segment = next(tmp_path.glob("*.jsonl"))
    with segment.open("ab") as file:
        file.write(b'{"seq":2,"service":"dynamodb","body":"torn')

    reopened = Journal(tmp_path)
    assert [r["body"] for r in reopened.records()] == ["kept"]
    reopened.wait_durable(reopened.append(_record(body="next")))
    assert [(r["seq"], r["body"]) for r in _lines(tmp_path)] == [(1, "kept"), (2, "next")]


def test_rotate_then_discard_deletes_only_segments_a_snapshot_covers(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    journal.wait_durable(journal.append(_record("dynamodb")))  # 1
    journal.wait_durable(journal.append(_record("s3")))  # 2
    journal.rotate()
    journal.wait_durable(journal.append(_record("dynamodb")))  # 3
    assert len(list(tmp_path.glob("*.jsonl"))) == 2

    # s3 not covered yet: the first segment stays
    assert journal.discard({"dynamodb": 3, "s3": 0}) == 0
    assert journal.discard({"dynamodb": 1, "s3": 2}) == 1
    assert [r["seq"] for r in _lines(tmp_path)] == [3]
    assert journal.last_seq() == 3
    assert journal.last_seq_of("s3") == 0
    assert journal.last_seq_of("dynamodb") == 3


def test_reopened_journal_numbers_after_the_last_record(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    for _ in range(3):
        journal.wait_durable(journal.append(_record()))
    journal.close()
    again = Journal(tmp_path)
    assert again.last_seq() == 3
    assert again.append(_record()) == 4


def test_numbers_never_go_back_after_every_record_was_discarded(tmp_path: Path) -> None:
    # Given a journal whose records a snapshot covered (a clean stop: rotate, discard), so only its
    # empty newest segment is left on disk
    journal = Journal(tmp_path)
    for service in ("dynamodb", "s3", "s3"):
        journal.wait_durable(journal.append(_record(service)))
    journal.rotate()
    assert journal.discard({"dynamodb": 3, "s3": 3}) == 1
    journal.close()
    assert _lines(tmp_path) == []

    # When it is opened again
    again = Journal(tmp_path)

    # Then the next record is numbered past the covered ones: a snapshot's cut (3) must not cover it
    assert again.last_seq() == 3
    assert again.append(_record("s3")) == 4


def _environ(method: str, body: bytes, **headers: str) -> dict[str, Any]:
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": "/",
        "QUERY_STRING": "",
        "CONTENT_LENGTH": str(len(body)),
        "wsgi.input": io.BytesIO(body),
    }
    environ.update({f"HTTP_{k.upper()}": v for k, v in headers.items()})
    return environ


def test_which_requests_are_journaled() -> None:
    dynamodb = {"HTTP_X_AMZ_TARGET": "DynamoDB_20120810.UpdateItem", "REQUEST_METHOD": "POST"}
    assert journaled_service(dynamodb, b"{}") == "dynamodb"
    assert journaled_service({**dynamodb, "HTTP_X_AMZ_TARGET": "DynamoDB_20120810.Query"}, b"{}") is None
    logs = {"HTTP_X_AMZ_TARGET": "Logs_20140328.PutLogEvents", "REQUEST_METHOD": "POST"}
    assert journaled_service(logs, b"{}") is None
    s3 = {"REQUEST_METHOD": "PUT", "HTTP_AUTHORIZATION": AUTH.format(service="s3")}
    assert journaled_service(s3, b"data") == "s3"
    assert journaled_service({**s3, "REQUEST_METHOD": "GET"}, b"") is None
    presigned = {
        "REQUEST_METHOD": "PUT",
        "QUERY_STRING": "X-Amz-Credential=testing%2F20261201%2Fus-east-1%2Fs3%2Faws4_request",
    }
    assert journaled_service(presigned, b"data") == "s3"
    sns = {"REQUEST_METHOD": "POST", "HTTP_AUTHORIZATION": AUTH.format(service="sns")}
    assert journaled_service(sns, b"Action=Subscribe&Protocol=email") == "sns"
    assert journaled_service(sns, b"Action=Publish&Message=hi") is None


class _FakeMoto:
    """A WSGI app answering ``status`` with ``answer``, keeping the request bodies it read."""

    def __init__(self, status: str, answer: bytes = b"ok") -> None:
        self.status = status
        self.answer = answer
        self.bodies: list[bytes] = []

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        self.bodies.append(environ["wsgi.input"].read())
        start_response(self.status, [("Content-Type", "text/plain")])
        return [self.answer]


def test_middleware_journals_successful_writes_only_once_enabled(tmp_path: Path) -> None:
    journal = Journal(tmp_path)
    moto = _FakeMoto("200 OK", b"<SubscriptionArn>arn:aws:sns:us-east-1:0:t:abc</SubscriptionArn>")
    app = JournalingApp(moto, journal)
    subscribe = b"Action=Subscribe&Protocol=email&Endpoint=a%40example.com"
    auth = AUTH.format(service="sns")

    list(app(_environ("POST", subscribe, authorization=auth), lambda *a: None))
    assert _lines(tmp_path) == []  # not enabled yet (restore and replay are not journaled)

    app.enable()
    answer = b"".join(app(_environ("POST", subscribe, authorization=auth), lambda *a: None))
    assert answer == moto.answer and moto.bodies[-1] == subscribe
    list(app(_environ("POST", b"Action=Publish&Message=x", authorization=auth), lambda *a: None))
    moto.status = "400 Bad Request"
    list(app(_environ("POST", subscribe, authorization=auth), lambda *a: None))

    records = _lines(tmp_path)
    assert len(records) == 1
    assert records[0]["service"] == "sns"
    assert base64.b64decode(records[0]["body"]) == subscribe
    assert base64.b64decode(records[0]["response"]) == moto.answer
    assert records[0]["headers"]["Authorization"] == auth


def test_numbering_continues_after_a_restored_snapshots_cut_when_no_segment_is_left(tmp_path: Path) -> None:
    # Given a new journal (its folder emptied) and a snapshot that covers records up to 7
    journal = Journal(tmp_path)

    # When the restore tells it the cut
    journal.number_after(7)

    # Then its records are numbered after it, and a lower cut changes nothing
    journal.number_after(2)
    assert journal.append(_record()) == 8
    journal.wait_durable(8)
    assert [r["seq"] for r in _lines(tmp_path)] == [8]
