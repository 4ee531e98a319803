"""Issue 10 acceptance: ``kill -9`` of the local stack at random points loses nothing it acknowledged.

For each seed, a fresh stack (its own process group) runs a random workload: accounts created,
contacts set, jobs of short sleeps submitted (with notifications), some aborted, credits granted.
At a few random operations the whole process group is killed with SIGKILL, while a last submit
may still be in flight, and the stack is started again on the same home. At the end every
acknowledged thing is checked, once all jobs are final. The test is bounded by counts (seeds, kill
points, operations), not by time.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.e2e.conftest import FINAL, Client, LocalStackProcess, _free_port, wait_for

SEEDS = (1, 2)
KILLS_PER_SEED = 2
OPERATIONS = 18
INITIAL_CREDITS = Decimal("40")
NOTIFY = [{"events": ["JobStarting", "JobCompleted"], "methods": ["Email"]}]


@dataclass
class _Account:
    token: str
    credits: Decimal = INITIAL_CREDITS
    email: str | None = None
    phone: str | None = None
    jobs: list[str] = field(default_factory=list)
    # Submits cut by the kill before their answer: each may or may not have been written.
    unanswered_submits: int = 0


@dataclass
class _Figures:
    kills: int = 0
    acknowledged_jobs: int = 0
    recovered_jobs: int = 0
    double_charges: int = 0
    unacknowledged_jobs: int = 0
    lost: list[str] = field(default_factory=list)


def _sleep_code(rng: random.Random) -> str:
    return f"import time\ntime.sleep({rng.choice((0.2, 0.5, 1.0, 2.0))})\n{rng.randint(0, 99)}"


class _Workload:
    """The random operations of one seed, with what the stack acknowledged."""

    def __init__(self, stack: LocalStackProcess, rng: random.Random) -> None:
        self.stack = stack
        self.rng = rng
        self.accounts: dict[str, _Account] = {}

    def admin(self) -> Client:
        return self.stack.client("admin")

    def client(self, account_id: str) -> Client:
        return Client(self.stack.endpoint, self.accounts[account_id].token)

    def create_account(self) -> None:
        account_id = f"crash-{self.rng.getrandbits(40):010x}"
        body = {"accountId": account_id, "email": None, "credits": int(INITIAL_CREDITS)}
        response = self.admin().post("/admin/accounts", json=body)
        assert response.status_code == 201, response.text
        self.accounts[account_id] = _Account(token=response.json()["token"])

    def set_contacts(self, account_id: str) -> None:
        email = f"{account_id}-{self.rng.randint(0, 999)}@example.com"
        phone = f"+1555555{self.rng.randint(0, 9999):04d}"
        response = self.client(account_id).request(
            "PUT", "/account/contacts", json={"email": email, "phone": phone}
        )
        assert response.status_code == 200, response.text
        self.accounts[account_id].email, self.accounts[account_id].phone = email, phone

    def submit(self, account_id: str) -> None:
        body = {"code": _sleep_code(self.rng), "notifications": NOTIFY}
        job = self.client(account_id).submit(body)
        self.accounts[account_id].jobs.append(job["jobId"])

    def abort(self, account_id: str) -> None:
        jobs = self.accounts[account_id].jobs
        if jobs:
            response = self.client(account_id).post(f"/jobs/{self.rng.choice(jobs)}/abort")
            assert response.status_code == 202, response.text

    def grant(self, account_id: str) -> None:
        credits = Decimal(self.rng.randint(1, 9))
        response = self.admin().post(
            f"/admin/accounts/{account_id}/credits", json={"credits": int(credits), "reason": "crash test"}
        )
        assert response.status_code == 200, response.text
        self.accounts[account_id].credits += credits

    def step(self) -> None:
        if not self.accounts or self.rng.random() < 0.15:
            self.create_account()
            return
        account_id = self.rng.choice(sorted(self.accounts))
        action = self.rng.choices(
            (self.submit, self.set_contacts, self.abort, self.grant), weights=(6, 2, 2, 1)
        )[0]
        action(account_id)

    def submit_during_crash(self) -> None:
        """Submit on a thread and kill the stack a random few milliseconds later: the submit is
        acknowledged or not, and only an acknowledged one counts."""
        account_id = self.rng.choice(sorted(self.accounts))
        client = self.client(account_id)
        answered: list[dict[str, Any]] = []

        def run() -> None:
            try:
                response = client.post("/jobs", json={"code": _sleep_code(self.rng), "notifications": NOTIFY})
            except requests.ConnectionError:
                return
            if response.status_code == 202:
                answered.append(Client.body(response))

        thread = threading.Thread(target=run)
        thread.start()
        time.sleep(self.rng.uniform(0, 0.05))
        self.stack.kill_group()
        thread.join(30)
        self.accounts[account_id].jobs += [job["jobId"] for job in answered]
        if not answered:
            self.accounts[account_id].unanswered_submits += 1


def _all_job_ids(client: Client) -> list[str]:
    """Every job ``GET /jobs`` lists for the client's account (all pages)."""
    ids: list[str] = []
    token: str | None = None
    while True:
        page = Client.body(
            client.get("/jobs", params={"limit": 100, **({"nextToken": token} if token else {})})
        )
        ids += [job["jobId"] for job in page["jobs"]]
        token = page["nextToken"]
        if not token:
            return ids


def _check(workload: _Workload, figures: _Figures) -> None:
    stack = workload.stack
    sent = Counter((line["jobId"], line["event"], line["method"]) for line in _outbox_lines(stack.home))
    # Each time a job enters a status owes its notification once: a job run again after a crash (a new
    # attempt, as AWS Batch retries a lost host) enters Starting again, and its log says so.
    logged: Counter[tuple[str, str, str]] = Counter()
    for account_id, expected in workload.accounts.items():
        client = workload.client(account_id)
        charged = Decimal(0)
        # A submit the kill cut before its 202 may still have written its job durably: the stack
        # then runs and charges it (the client, told nothing, finds it in GET /jobs or retries with
        # an Idempotency-Key). Such jobs count in the money checks, at most one per cut submit; they
        # are waited for before the balance is read (they may run after the restart).
        unacknowledged = [j for j in _all_job_ids(client) if j not in expected.jobs]
        figures.unacknowledged_jobs += len(unacknowledged)
        if len(unacknowledged) > expected.unanswered_submits:
            figures.lost.append(
                f"{account_id}: {len(unacknowledged)} jobs nobody acknowledged, "
                f"from {expected.unanswered_submits} cut submits"
            )
        for job_id in unacknowledged:
            job = client.wait_status(job_id, FINAL, timeout=60)
            charged += Decimal(str(job["creditsSpent"]))
            logged.update(_sent(job))
        response = client.get("/account")
        if response.status_code != 200:
            figures.lost.append(f"account {account_id}: {response.status_code} {response.text}")
            continue
        account = Client.body(response)
        if (account["email"], account["phone"]) != (expected.email, expected.phone):
            figures.lost.append(f"contacts of {account_id}: {account['email']}, {account['phone']}")
        for job_id in expected.jobs:
            figures.acknowledged_jobs += 1
            got = client.get(f"/jobs/{job_id}")
            if got.status_code != 200:
                figures.lost.append(f"job {job_id}: {got.status_code}")
                continue
            job = client.wait_status(job_id, FINAL, timeout=60)
            charged += Decimal(str(job["creditsSpent"]))
            logged.update(_sent(job))
            if job["statusReason"] in (
                "Local stack stopped while the job ran",
                "Local stack stopped before the job ran",
            ):
                figures.recovered_jobs += 1
        usage = Client.body(client.get("/account/usage"))
        charges = Counter(e["jobId"] for e in usage["entries"] if e["kind"] == "charge")
        figures.double_charges += sum(1 for n in charges.values() if n > 1)
        ledger_charged = sum(
            (Decimal(str(e["credits"])) for e in usage["entries"] if e["kind"] == "charge"), Decimal(0)
        )
        grants = sum(
            (Decimal(str(e["credits"])) for e in usage["entries"] if e["kind"] == "grant"), Decimal(0)
        )
        if ledger_charged != charged:
            figures.lost.append(f"{account_id}: ledger charges {ledger_charged} != jobs' credits {charged}")
        # The starting credits of POST /admin/accounts are a grant entry too.
        if grants != expected.credits:
            figures.lost.append(f"{account_id}: grants {grants} != acknowledged {expected.credits}")
        balance = Decimal(str(account["creditBalance"]))
        if balance != expected.credits - charged:
            figures.lost.append(f"{account_id}: balance {balance} != {expected.credits} - {charged}")
    figures.lost += [
        f"notification sent {n} times for {logged[key]} entries: {key}"
        for key, n in sent.items()
        if n > max(1, logged[key])
    ]


def _sent(job: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(job id, event, method) of each notification the job's log says was sent."""
    return [(job["jobId"], e["event"], e["method"]) for e in job["notificationLog"] if e["outcome"] == "sent"]


def _final_or_missing(client: Client, job_id: str) -> bool:
    """True when the job is final (or missing: ``_check`` reports a missing job as lost)."""
    response = client.get(f"/jobs/{job_id}")
    return response.status_code != 200 or response.json()["status"] in FINAL


def _outbox_lines(home: Path) -> list[dict[str, Any]]:
    path = home / "outbox.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_kill_9_at_random_points_loses_nothing_acknowledged(tmp_path: Path) -> None:
    figures = _Figures()
    for seed in SEEDS:
        rng = random.Random(seed)
        stack = LocalStackProcess(
            tmp_path / f"seed-{seed}" / "home",
            _free_port(),
            {"REMOTE_BATCH_SNAPSHOT_INTERVAL": "3"},
            new_session=True,
        )
        stack.home.parent.mkdir(parents=True)
        stack.start()
        workload = _Workload(stack, rng)
        kill_points = set(rng.sample(range(3, OPERATIONS), KILLS_PER_SEED))
        try:
            for operation in range(OPERATIONS):
                workload.step()
                if operation in kill_points:
                    workload.submit_during_crash()
                    figures.kills += 1
                    stack.start()
            wait_for(
                lambda: all(
                    _final_or_missing(workload.client(a), j)
                    for a, acc in workload.accounts.items()
                    for j in acc.jobs
                ),
                60,
                "every acknowledged job to be final",
                interval=0.5,
            )
            _check(workload, figures)
        finally:
            if stack.process is not None and stack.process.poll() is None:
                stack.kill_group()
    print(
        f"\ncrash test: kills={figures.kills} seeds={len(SEEDS)} "
        f"jobs_acknowledged={figures.acknowledged_jobs} "
        f"recovered={figures.recovered_jobs} unacknowledged={figures.unacknowledged_jobs} "
        f"double_charges={figures.double_charges} "
        f"lost_acknowledgements={len(figures.lost)}"
    )
    assert figures.kills == len(SEEDS) * KILLS_PER_SEED
    assert figures.double_charges == 0
    # No acknowledged job ends for the crash: AWS Batch keeps what it accepted, runs a lost attempt again.
    assert figures.recovered_jobs == 0
    assert figures.lost == []


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _final_event(stack: LocalStackProcess, job_id: str) -> dict[str, Any]:
    """The last final ``Batch Job State Change`` the stack emitted for the service job ``job_id``."""
    events = Client.body(stack.client("admin").get("/local/batch-events", params={"jobId": job_id}))["events"]
    return next(e for e in reversed(events) if e["detail"]["status"] in ("SUCCEEDED", "FAILED"))


def _charges(client: Client, job_id: str) -> list[Decimal]:
    usage = Client.body(client.get("/account/usage"))
    return [
        Decimal(str(e["credits"])) for e in usage["entries"] if e["kind"] == "charge" and e["jobId"] == job_id
    ]


@pytest.mark.slow
def test_a_job_running_at_a_crash_runs_again_as_a_new_attempt_charged_once(tmp_path: Path) -> None:
    # Given a stack whose snapshots are 60 s apart (so the last one is older than the job), and a job
    # running there for 2 s of its 5 (two "alive" stamps into its run)
    stack = LocalStackProcess(
        tmp_path / "home", _free_port(), {"REMOTE_BATCH_SNAPSHOT_INTERVAL": "60"}, new_session=True
    )
    stack.home.parent.mkdir(parents=True, exist_ok=True)
    stack.start()
    try:
        dev = stack.client("dev")
        balance = dev.balance()
        job = dev.submit({"code": "import time\ntime.sleep(5)\n7"})
        running = dev.wait_status(job["jobId"], ("Running",), timeout=30)
        time.sleep(2)

        # When the whole process group is killed, and the stack started again (its start takes seconds:
        # an attempt ended at the restart instead of the crash would end after crashed_at)
        crashed_at = datetime.now(UTC)
        stack.kill_group()
        stack.start()

        # Then AWS Batch's rule for a lost host applies: the job runs again as its second attempt and
        # succeeds; the lost attempt ended at the crash (within the 1 s "alive" stamp), from its own start
        done = dev.wait_status(job["jobId"], timeout=60)
        assert done["status"] == "Succeeded", done
        assert dev.get(f"/jobs/{job['jobId']}/result").json()["result"] == 7
        final = _final_event(stack, job["jobId"])["detail"]
        lost, ran = final["attempts"]
        assert (
            lost["statusReason"]
            == "Host EC2 (local stack) terminated: the local stack stopped while the job ran"
        )
        assert lost["startedAt"] // 1000 == int(_instant(running["startedAt"]).timestamp())  # API: seconds
        stopped = datetime.fromtimestamp(lost["stoppedAt"] / 1000, UTC)
        assert crashed_at - timedelta(seconds=2) <= stopped <= crashed_at, (stopped, crashed_at)
        assert ran["statusReason"] == "Essential container in task exited"
        assert ran["startedAt"] >= lost["stoppedAt"]
        # and it is charged once, for the attempt that finished (the 60 s minimum): the lost one is free
        assert Decimal(str(done["creditsSpent"])) == Decimal("1")
        assert _charges(dev, job["jobId"]) == [Decimal("1")]
        assert dev.balance() == balance - Decimal("1")
    finally:
        if stack.process is not None and stack.process.poll() is None:
            stack.kill_group()


def test_jobs_aws_batch_accepted_and_had_not_started_at_a_crash_run_after_the_restart(tmp_path: Path) -> None:
    # Given a stack with one vCPU: a job running, two more accepted by AWS Batch and waiting for the vCPU
    stack = LocalStackProcess(
        tmp_path / "home",
        _free_port(),
        {"REMOTE_BATCH_SNAPSHOT_INTERVAL": "60", "REMOTE_BATCH_LOCAL_VCPUS": "1"},
        new_session=True,
    )
    stack.home.parent.mkdir(parents=True, exist_ok=True)
    stack.start()
    try:
        dev = stack.client("dev")
        balance = dev.balance()
        running = dev.submit({"code": "import time\ntime.sleep(4)\n1"})
        dev.wait_status(running["jobId"], ("Running",), timeout=30)
        waiting = [dev.submit({"code": f"{n} * 7"}) for n in (2, 3)]

        def waits_for_the_vcpu(job_id: str) -> bool:
            return "Waiting for 1 vCPU" in (dev.job(job_id)["statusReason"] or "")

        for job in waiting:
            wait_for(
                lambda: waits_for_the_vcpu(job["jobId"]), 30, "the job to wait in AWS Batch for the vCPU"
            )

        # When the whole process group is killed and the stack started again
        stack.kill_group()
        stack.start()

        # Then the waiting jobs run (AWS Batch kept them), and the running one runs again
        for job, result in zip([running, *waiting], (1, 14, 21), strict=True):
            done = dev.wait_status(job["jobId"], timeout=90)
            assert (done["status"], done["statusReason"]) == ("Succeeded", None), done
            assert dev.get(f"/jobs/{job['jobId']}/result").json()["result"] == result
            assert Decimal(str(done["creditsSpent"])) == Decimal("1")
            assert _charges(dev, job["jobId"]) == [Decimal("1")]
        assert len(_final_event(stack, running["jobId"])["detail"]["attempts"]) == 2
        assert [len(_final_event(stack, job["jobId"])["detail"]["attempts"]) for job in waiting] == [1, 1]
        assert dev.balance() == balance - Decimal("3")
    finally:
        if stack.process is not None and stack.process.poll() is None:
            stack.kill_group()


@pytest.mark.slow
def test_a_job_held_for_quota_at_a_crash_runs_after_the_restart(tmp_path: Path) -> None:
    # Given an account with room for one Basic vCPU, a job running and one held behind it
    stack = LocalStackProcess(
        tmp_path / "home", _free_port(), {"REMOTE_BATCH_SNAPSHOT_INTERVAL": "60"}, new_session=True
    )
    stack.home.parent.mkdir(parents=True, exist_ok=True)
    stack.start()
    try:
        admin = stack.client("admin")
        quota = {"quotas": [{"family": "Basic", "geoZone": "UnitedStates", "limit": 1}]}
        assert admin.request("PUT", "/admin/accounts/dev/quotas", json=quota).status_code == 200
        dev = stack.client("dev")
        running = dev.submit({"code": "import time\ntime.sleep(3)", "geoZone": "UnitedStates"})
        dev.wait_status(running["jobId"], ("Running",), timeout=30)
        held = dev.submit({"code": "6 * 7", "geoZone": "UnitedStates"})
        assert dev.job(held["jobId"])["statusReason"].startswith("Waiting for quota")

        # When the whole process group is killed and the stack started again
        stack.kill_group()
        stack.start()

        # Then the running job runs again (a new attempt: its host was lost), and the held one (never in
        # AWS Batch: what the deployed dispatch queue would still hold) is admitted into its room after it
        done = dev.wait_status(running["jobId"], FINAL, timeout=60)
        assert (done["status"], done["statusReason"]) == ("Succeeded", None), done
        after = dev.wait_status(held["jobId"], FINAL, timeout=60)
        assert after["status"] == "Succeeded", after
        assert dev.get(f"/jobs/{held['jobId']}/result").json()["result"] == 42
    finally:
        if stack.process is not None and stack.process.poll() is None:
            stack.kill_group()


@pytest.mark.slow
def test_an_array_partly_dispatched_at_a_crash_resumes_its_held_children_after_the_restart(
    tmp_path: Path,
) -> None:
    # Given an account with room for one Basic vCPU and an array of three: its first child running,
    # the other two held for quota (never in AWS Batch)
    stack = LocalStackProcess(
        tmp_path / "home", _free_port(), {"REMOTE_BATCH_SNAPSHOT_INTERVAL": "60"}, new_session=True
    )
    stack.home.parent.mkdir(parents=True, exist_ok=True)
    stack.start()
    try:
        admin = stack.client("admin")
        quota = {"quotas": [{"family": "Basic", "geoZone": "UnitedStates", "limit": 1}]}
        assert admin.request("PUT", "/admin/accounts/dev/quotas", json=quota).status_code == 200
        dev = stack.client("dev")
        array = dev.submit(
            {
                "code": "import time\ntime.sleep(item)\nitem * 7",
                "arrayItems": [5, 1, 2],
                "geoZone": "UnitedStates",
            }
        )
        dev.wait_status(array["jobId"], ("Running",), timeout=30)
        assert dev.job(array["jobId"])["statusReason"].startswith("Waiting for quota")

        # When the whole process group is killed and the stack started again
        stack.kill_group()
        stack.start()

        # Then the running child runs again (a new attempt, charged once) and the two held ones are
        # admitted and run
        done = dev.wait_status(array["jobId"], FINAL, timeout=90)
        children = dev.get(f"/jobs/{array['jobId']}/children").json()["jobs"]
        assert [(c["status"], c["statusReason"]) for c in children] == [("Succeeded", None)] * 3
        assert (done["status"], done["statusReason"]) == ("Succeeded", None), done
        assert [dev.get(f"/jobs/{c['jobId']}/result").json()["result"] for c in children] == [35, 7, 14]
        assert [Decimal(str(c["creditsSpent"])) for c in children] == [Decimal("1")] * 3
        quotas = dev.get("/account/quotas").json()["quotas"]
        basic = next(q for q in quotas if (q["family"], q["geoZone"]) == ("Basic", "UnitedStates"))
        assert (basic["inUse"], basic["queued"]) == (0, 0)
    finally:
        if stack.process is not None and stack.process.poll() is None:
            stack.kill_group()
