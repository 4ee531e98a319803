"""Issue 2 acceptance: the local stack keeps its state across restarts, and settles what a crash left."""

from __future__ import annotations

import json
import signal
from decimal import Decimal

from tests.e2e.conftest import Client, LocalStackProcess, wait_for, worker_processes


def _snapshot_status(stack: LocalStackProcess, job_id: str) -> str | None:
    tables = json.loads((stack.home / "state" / "dynamodb.json").read_text())["tables"]
    for item in tables["remote-batch-local-jobs"]:
        if item["jobId"]["S"] == job_id:
            return str(item["status"]["S"])
    return None


def test_restart_keeps_jobs_balance_results_and_tokens(stack: LocalStackProcess, dev: Client) -> None:
    # Given a finished job with a result and a log, and a job still running
    job = dev.submit({"code": "print('kept')\n6 * 7"})
    assert dev.wait_status(job["jobId"])["status"] == "Succeeded"
    # (its JobCompleted notification is recorded just after the status: wait for it too)
    wait_for(
        lambda: any(entry["event"] == "JobCompleted" for entry in dev.job(job["jobId"])["notificationLog"]),
        10,
        "the JobCompleted notification",
    )
    before_job = dev.job(job["jobId"])
    running = dev.submit({"code": "import time\ntime.sleep(300)"})
    dev.wait_status(running["jobId"], ("Running",), timeout=30)
    balance = dev.balance()
    tokens = dict(stack.tokens)
    account = dev.get("/account").json()

    # When the stack is stopped (SIGINT, exit 0) and started again on the same home and port
    stack.restart()

    # Then the same tokens work and everything is still there
    assert stack.tokens == tokens
    assert dev.job(job["jobId"]) == before_job
    # the running job was ended by the stop and charged its running time (the 60 s minimum)
    stopped = dev.job(running["jobId"])
    assert stopped["status"] == "Terminated"
    assert stopped["statusReason"] == "Local stack stopped while the job ran"
    assert Decimal(str(stopped["creditsSpent"])) == Decimal("1")
    assert dev.balance() == balance - Decimal("1")
    assert not worker_processes(running["jobId"])
    assert dev.get(f"/jobs/{job['jobId']}/result").json()["result"] == 42
    log = dev.get(f"/jobs/{job['jobId']}/log").json()
    assert [event["message"] for event in log["events"]] == ["kept"]
    listed = dev.get("/jobs").json()["jobs"]
    assert job["jobId"] in [j["jobId"] for j in listed]
    # the email subscription survived (same status, same address)
    after = dev.get("/account").json()
    assert (after["email"], after["emailStatus"]) == (account["email"], account["emailStatus"])


def test_crash_runs_the_running_job_again_at_next_start(stack: LocalStackProcess, dev: Client) -> None:
    # Given a job running when the stack dies without a chance to clean up
    balance = dev.balance()
    job = dev.submit({"code": "import time\ntime.sleep(6)\n42"})
    dev.wait_status(job["jobId"], ("Running",), timeout=30)
    wait_for(lambda: _snapshot_status(stack, job["jobId"]) == "Running", 10, "a snapshot of the running job")
    stack.stop(signal.SIGKILL)

    # When it starts again
    stack.start()

    # Then the job runs again (its host was lost: a new attempt, as AWS Batch retries it) and is charged
    # once, the 60 s minimum of the attempt that finished
    done = dev.wait_status(job["jobId"], timeout=60)
    assert (done["status"], done["statusReason"]) == ("Succeeded", None), done
    assert dev.get(f"/jobs/{job['jobId']}/result").json()["result"] == 42
    assert Decimal(str(done["creditsSpent"])) == Decimal("1")
    assert dev.balance() == balance - Decimal("1")
    assert not worker_processes(job["jobId"])


def test_a_chain_killed_in_the_middle_finishes_after_the_restart_each_job_charged_once(
    stack: LocalStackProcess, dev: Client
) -> None:
    # Given a chain A -> B -> C (B takes A's output file) with A running and B, C waiting when the
    # stack dies without a chance to clean up
    balance = dev.balance()
    a = dev.submit(
        {
            "code": "import os, time\ntime.sleep(4)\n"
            "open(os.path.join(os.environ['REMOTE_BATCH_OUTPUT_DIR'], 'n.txt'), 'w').write('20')\n1"
        }
    )
    b = dev.submit(
        {
            "code": f"int(open('inputs/{a['jobId']}/n.txt').read()) + 1",
            "dependsOn": [{"jobId": a["jobId"]}],
            "inputsFrom": [{"jobId": a["jobId"], "files": ["n.txt"]}],
        }
    )
    c = dev.submit({"code": "'done'", "dependsOn": [{"jobId": b["jobId"]}]})
    dev.wait_status(a["jobId"], ("Running",), timeout=30)
    wait_for(lambda: _snapshot_status(stack, a["jobId"]) == "Running", 10, "a snapshot of the running job")
    assert dev.job(c["jobId"])["status"] == "Queued"
    stack.stop(signal.SIGKILL)

    # When it starts again
    stack.start()

    # Then A runs again as a new attempt, and the chain finishes in order with B reading A's file
    done = {job["jobId"]: dev.wait_status(job["jobId"], timeout=90) for job in (a, b, c)}
    assert [(done[j["jobId"]]["status"], done[j["jobId"]]["statusReason"]) for j in (a, b, c)] == [
        ("Succeeded", None)
    ] * 3, done
    assert dev.get(f"/jobs/{b['jobId']}/result").json()["result"] == 21
    assert dev.get(f"/jobs/{c['jobId']}/result").json()["result"] == "done"
    # each job is charged once: the 60 s minimum of the attempt that finished, 1 credit each
    assert [Decimal(str(done[j["jobId"]]["creditsSpent"])) for j in (a, b, c)] == [Decimal("1")] * 3
    assert dev.balance() == balance - Decimal("3")
    assert done[b["jobId"]]["startedAt"] >= done[a["jobId"]]["completedAt"]
    assert done[c["jobId"]]["startedAt"] >= done[b["jobId"]]["completedAt"]
