"""The local dispatch queue: batches of SQS records, redelivery of failures, and admission requests
coalesced while one for the same account still waits undelivered."""

from __future__ import annotations

import json
import threading
from typing import Any

from remote_batch_local.dispatch_queue import LocalDispatchQueue


class _Dispatcher:
    """Records each delivered batch's bodies; the first delivery waits until released."""

    def __init__(self, fail_first: bool = False) -> None:
        self.batches: list[list[dict[str, Any]]] = []
        self.release = threading.Event()
        self.entered = threading.Event()
        self.fail_first = fail_first

    def __call__(self, event: dict[str, Any]) -> dict[str, Any]:
        self.entered.set()
        self.release.wait(10)
        self.batches.append([json.loads(r["body"]) for r in event["Records"]])
        if self.fail_first and len(self.batches) == 1:
            return {"batchItemFailures": [{"itemIdentifier": r["messageId"]} for r in event["Records"]]}
        return {"batchItemFailures": []}


def _queue(dispatcher: _Dispatcher) -> LocalDispatchQueue:
    queue = LocalDispatchQueue(dispatcher, region="us-east-1", account="1", visibility_timeout=0.05)
    queue.start()
    return queue


def test_admission_requests_waiting_for_the_same_account_are_sent_once() -> None:
    dispatcher = _Dispatcher()
    queue = _queue(dispatcher)
    try:
        queue.send(["job-1"])  # taken at once; its delivery waits, so what follows queues up
        assert dispatcher.entered.wait(5)
        queue.request_admission(["acct-a"])
        queue.request_admission(["acct-a", "acct-b"])
        queue.request_admission(["acct-a"])
        queue.send(["job-2"])
        dispatcher.release.set()
        assert queue.wait_idle(5)
        # A request made after the waiting one was delivered is queued again.
        queue.request_admission(["acct-a"])
        assert queue.wait_idle(5)
    finally:
        queue.stop(5)
    assert dispatcher.batches == [
        [{"jobId": "job-1"}],
        [{"accountId": "acct-a"}, {"accountId": "acct-b"}, {"jobId": "job-2"}],
        [{"accountId": "acct-a"}],
    ]
    assert queue.stats().sent == 5


def test_a_failed_admission_request_is_delivered_again_and_a_new_one_is_not_lost() -> None:
    dispatcher = _Dispatcher(fail_first=True)
    queue = _queue(dispatcher)
    try:
        queue.request_admission(["acct-a"])
        assert dispatcher.entered.wait(5)
        # Taken (in flight): a new request of the account is queued, not merged into the one in flight.
        queue.request_admission(["acct-a"])
        dispatcher.release.set()
        assert queue.wait_idle(5)
    finally:
        queue.stop(5)
    bodies = [body for batch in dispatcher.batches for body in batch]
    assert bodies.count({"accountId": "acct-a"}) == 3  # the first, its redelivery, and the second
    assert queue.stats().dead_letters == 0
