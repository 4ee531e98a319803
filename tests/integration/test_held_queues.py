"""Held jobs per family and zone (issue 15): each key's held jobs are a range of their own, read oldest
first and only as far as its room, so 300 held Basic jobs (more than a page) never hold back a Memory
job; one admission pass costs a bounded number of DynamoDB requests however many jobs are held; held
items of the first layout are rewritten when the local stack starts."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import boto3
import pytest

from benchmarks.capacity import RequestRecorder
from functions.adapters.dynamodb.quotas import held_entry, held_partition, rekey_legacy_held_items
from functions.domain.jobs import DispatchState
from functions.domain.machine_classes import GeoZone, machine_class
from functions.domain.quotas import Family, QuotaKey, QuotaLimits
from functions.logic import quotas
from functions.logic.submission import new_job_id
from tests.builders import build_job
from tests.integration.conftest import Stack, finish

US = GeoZone.UNITED_STATES
BASIC_US = QuotaKey(Family.BASIC, US)
MEMORY_US = QuotaKey(Family.MEMORY, US)
ADMIN = {"account_id": "admin", "groups": "admin"}
BASIC = {"code": "1", "machineClass": "Basic1x8", "geoZone": "UnitedStates"}
MEMORY = {"code": "1", "machineClass": "Memory8x64", "geoZone": "UnitedStates"}
BASIC_REASON = "Waiting for quota: Basic vCPUs in UnitedStates (1 of 1 in use)"
MEMORY_REASON = "Waiting for quota: Memory vCPUs in UnitedStates (8 of 8 in use)"


def set_limits(stack: Stack, basic: int, memory: int) -> None:
    status, body = stack.api(
        "PUT",
        "/admin/accounts/dev/quotas",
        body={
            "quotas": [
                {"family": "Basic", "geoZone": "UnitedStates", "limit": basic},
                {"family": "Memory", "geoZone": "UnitedStates", "limit": memory},
            ]
        },
        **ADMIN,
    )
    assert status == 200, body


def submit(stack: Stack, body: dict[str, Any]) -> dict[str, Any]:
    status, job = stack.api("POST", "/jobs", body=body)
    assert status == 202, job
    return dict(job)


def held_state(stack: Stack, held: int) -> tuple[str, str, list[str], str]:
    """Basic 1 and Memory 8 vCPUs in UnitedStates, each full (one job running), then ``held`` Basic
    jobs and one Memory job held. Returns (running Memory, running Basic, held Basic, held Memory)."""
    set_limits(stack, 1, 8)
    memory_running = submit(stack, MEMORY)["jobId"]
    basic_running = submit(stack, BASIC)["jobId"]
    # All but the last held as a submit holds them (quotas.hold), without the rest of POST /jobs (ids
    # 1 ms apart, a minute ago); the last through POST /jobs.
    basic_held = []
    start_ms = time.time_ns() // 1_000_000 - 60_000
    demand, limits = quotas.check_submit(stack.services, "dev", machine_class("Basic1x8"), US)
    for index in range(held - 1):
        job = build_job(new_job_id(start_ms + index), batch_job_id=None)
        stored, alone = quotas.hold(stack.services, job, demand, limits)
        assert (stored.status_reason, alone) == (BASIC_REASON, False)
        basic_held.append(job.job_id)
    last = submit(stack, BASIC)
    assert (last["status"], last["statusReason"]) == ("Queued", BASIC_REASON)
    basic_held.append(last["jobId"])
    memory = submit(stack, MEMORY)
    assert memory["statusReason"] == MEMORY_REASON
    return memory_running, basic_running, basic_held, memory["jobId"]


def dynamodb_requests(call: Any) -> tuple[Any, Counter[str]]:
    with RequestRecorder() as recorder:
        result = call()
    counts = Counter(
        {k.split(":", 1)[1]: v for k, v in recorder.usage.requests.items() if k.startswith("dynamodb:")}
    )
    return result, counts


def test_a_memory_job_behind_300_held_basic_jobs_goes_as_soon_as_memory_frees(stack: Stack) -> None:
    memory_running, basic_running, basic_held, memory_held = held_state(stack, 300)
    usage = stack.services.store.get_quota_usage("dev")
    assert (usage.waiting(BASIC_US), usage.waiting(MEMORY_US)) == (300, 8)

    # The running Memory job ends: the next admission sends the held Memory job at once (before, one
    # page of the 200 oldest held jobs of the account, all Basic, left it waiting for 100 of them).
    finish(stack, memory_running)
    submitted = [s.job_name for s in stack.batch[US].submissions]
    assert submitted == [memory_running, basic_running, memory_held]
    # The Basic jobs stay held, oldest first in their own range.
    store = stack.services.store
    page = store.list_held_jobs("dev", BASIC_US, limit=300)
    assert [h.job_id for h in page] == basic_held
    assert store.list_held_jobs("dev", BASIC_US, limit=150, after=basic_held[149]) == page[150:]
    assert {j.dispatch_state for j in store.get_jobs(basic_held)} == {DispatchState.HELD}
    # The running Basic job ends: the oldest held Basic job goes, and the next gets the reason.
    finish(stack, basic_running)
    assert [s.job_name for s in stack.batch[US].submissions][3:] == [basic_held[0]]
    assert [h.job_id for h in store.list_held_jobs("dev", BASIC_US, limit=2)] == basic_held[1:3]
    _, job = stack.api("GET", f"/jobs/{basic_held[1]}")
    assert (job["status"], job["statusReason"]) == ("Queued", BASIC_REASON)


@pytest.mark.parametrize("held", [3, 250])
def test_one_admission_pass_costs_the_same_requests_however_many_jobs_are_held(
    stack: Stack, held: int
) -> None:
    _, _, basic_held, memory_held = held_state(stack, held)
    # The Basic limit becomes 3 without an admission (stored directly): 2 more Basic jobs fit.
    stack.services.store.put_quota_limits("dev", QuotaLimits({BASIC_US: 3, MEMORY_US: 8}))

    admitted, counts = dynamodb_requests(lambda: quotas.admit_waiting(stack.services, "dev"))

    assert admitted == basic_held[:2]
    # The usage (Query) and the account's balance with its limits (one BatchGetItem: an account out of
    # credits has its held jobs ended, not admitted); Basic's oldest 3 (one Query: the 2 that fit and the
    # one that stops the key); 2 admissions; the third's new reason (the job and its held item); Memory,
    # with no room, only its oldest held job (one Query of one item) whose reason is still right.
    assert counts == Counter({"Query": 3, "BatchGetItem": 1, "TransactWriteItems": 2, "UpdateItem": 2})
    store = stack.services.store
    reasons = {j.job_id: j.status_reason for j in store.get_jobs([basic_held[2], memory_held])}
    assert reasons == {
        basic_held[2]: "Waiting for quota: Basic vCPUs in UnitedStates (3 of 3 in use)",
        memory_held: MEMORY_REASON,
    }
    # Nothing changed since: the pass reads each key's oldest job and writes nothing.
    admitted, counts = dynamodb_requests(lambda: quotas.admit_waiting(stack.services, "dev"))
    assert admitted == []
    assert counts == Counter({"Query": 3, "BatchGetItem": 1})


def test_held_items_of_the_earlier_layouts_are_moved_to_their_familys_range(stack: Stack) -> None:
    set_limits(stack, 1, 8)
    submit(stack, BASIC)
    older, younger = submit(stack, BASIC)["jobId"], submit(stack, BASIC)["jobId"]
    table = stack.settings.quotas_table
    client = boto3.client("dynamodb", region_name="us-east-1")
    # The earlier layouts, in the account's own partition, as homes kept from before stored the two
    # held jobs: held#<jobId> (the first) and held#<Family>#<Zone>#<jobId> (the second).
    for job_id, entry in ((older, f"held#{older}"), (younger, held_entry(BASIC_US, younger))):
        key = {"accountId": {"S": held_partition("dev")}, "entry": {"S": held_entry(BASIC_US, job_id)}}
        item = client.get_item(TableName=table, Key=key, ConsistentRead=True)["Item"]
        client.delete_item(TableName=table, Key=key)
        client.put_item(TableName=table, Item={**item, "accountId": {"S": "dev"}, "entry": {"S": entry}})
    assert stack.services.store.list_held_jobs("dev", BASIC_US) == []

    assert rekey_legacy_held_items(client, table) == 2
    assert rekey_legacy_held_items(client, table) == 0

    held = stack.services.store.list_held_jobs("dev", BASIC_US)
    assert [(h.job_id, h.demand.units, h.reason) for h in held] == [
        (older, 1, BASIC_REASON),
        (younger, 1, BASIC_REASON),
    ]
    entries = [
        (i["accountId"]["S"], i["entry"]["S"])
        for i in client.scan(TableName=table)["Items"]
        if "held#" in i["entry"]["S"]
    ]
    assert sorted(entries) == [
        (held_partition("dev"), held_entry(BASIC_US, older)),
        (held_partition("dev"), held_entry(BASIC_US, younger)),
    ]
    # They drain as any held job: a raised limit admits the older first.
    set_limits(stack, 2, 8)
    assert [s.job_name for s in stack.batch[US].submissions][1:] == [older]
