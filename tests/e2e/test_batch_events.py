"""Issue 2 acceptance: the emitted Batch events can be read back, and replaying them changes nothing."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from tests.e2e.conftest import Client, LocalStackProcess, wait_for

EMITTED_ORDER = ["PENDING", "RUNNABLE", "STARTING", "RUNNING", "SUCCEEDED"]


def test_replayed_events_change_nothing(stack: LocalStackProcess, dev: Client, admin: Client) -> None:
    # Given a job that succeeded and sent its two emails
    job = dev.submit({"code": "2 + 2"})
    assert dev.wait_status(job["jobId"], timeout=30)["status"] == "Succeeded"
    wait_for(lambda: len(stack.outbox(job["jobId"])) >= 2, 5, "the job's notifications")

    # The job as it is once both are logged (the status is stored a few ms before the JobCompleted
    # line is appended to notificationLog: a snapshot taken in between is not the final state).
    def both_logged() -> dict[str, Any] | None:
        current = dev.job(job["jobId"])
        return current if len(current["notificationLog"]) >= 2 else None

    done = wait_for(both_logged, 5, "the job's notificationLog")
    assert done["status"] == "Succeeded"
    balance = dev.balance()
    outbox = stack.outbox(job["jobId"])

    # When its events are read back, in emission order
    response = admin.get("/local/batch-events", params={"jobId": job["jobId"]})
    assert response.status_code == 200, response.text
    events = response.json()["events"]
    assert [event["detail"]["status"] for event in events] == EMITTED_ORDER
    assert all(event["detail-type"] == "Batch Job State Change" for event in events)
    assert all(event["detail"]["jobName"] == job["jobId"] for event in events)

    # and delivered again, duplicated and reversed
    replay = [event for event in reversed(events) for _ in range(2)]
    accepted = admin.post("/local/batch-events", json={"events": replay})
    assert accepted.status_code == 202, accepted.text
    assert accepted.json() == {"accepted": len(replay)}
    # The bus delivers in order: once a later job has settled, the replay has been applied.
    sentinel = dev.submit({"code": "1"})
    assert dev.wait_status(sentinel["jobId"], timeout=30)["status"] == "Succeeded"

    # Then the job, the balance (but for the sentinel's own charge) and the outbox are as they were
    assert dev.job(job["jobId"]) == done
    sentinel_cost = Decimal(str(dev.job(sentinel["jobId"])["creditsSpent"]))
    assert dev.balance() == balance - sentinel_cost
    assert stack.outbox(job["jobId"]) == outbox


def test_replay_rejects_what_is_not_a_list_of_events(admin: Client) -> None:
    bodies: list[object] = [{"events": "nope"}, {"events": [1, 2]}, {}, []]
    for body in bodies:
        response = admin.post("/local/batch-events", json=body)
        assert response.status_code == 400, (body, response.text)
        assert response.json()["error"]["code"] == "ValidationError"
