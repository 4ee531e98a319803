"""Fair share across accounts: share identifiers (``functions.domain.fair_share``), the SubmitJob
parameter, and the local executor's usage ranking (``remote_batch_local.executor.fair_share``)."""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from functions.adapters.batch import submit_job_request
from functions.domain.fair_share import SHARE_BUCKETS, share_identifier
from functions.ports import BatchSubmission
from remote_batch_local.executor.fair_share import ShareUsage


@given(st.text(min_size=1, max_size=128))
def test_a_share_identifier_is_what_aws_batch_takes_and_stable(account_id: str) -> None:
    share = share_identifier(account_id)
    # SubmitJob: up to 255 letters and digits; one of SHARE_BUCKETS, under the 500 active per queue.
    assert re.fullmatch(r"acct[0-9]{1,3}", share), share
    assert 0 <= int(share[4:]) < SHARE_BUCKETS < 500
    assert share_identifier(account_id) == share


def test_accounts_spread_over_the_buckets() -> None:
    counts = Counter(share_identifier(f"account-{n}") for n in range(40_000))
    # 100 accounts per bucket on average; a hash that clumps would leave buckets empty or doubled.
    assert len(counts) == SHARE_BUCKETS
    assert max(counts.values()) < 160
    assert min(counts.values()) > 50


def test_submit_job_sends_the_share_identifier_only_when_given() -> None:
    base = BatchSubmission(
        job_name="job-1",
        job_queue="q",
        job_definition="d",
        vcpus=1,
        memory_mib=512,
        gpus=0,
        environment={},
    )
    assert "shareIdentifier" not in submit_job_request(base)
    shared = dataclasses.replace(base, share_identifier="acct7")
    assert submit_job_request(shared)["shareIdentifier"] == "acct7"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_usage_accrues_while_held_and_decays_after() -> None:
    clock = Clock()
    usage = ShareUsage(decay_seconds=100, clock=clock)
    assert usage.usage("a") == 0.0
    usage.start("a", 2)
    clock.now += 10
    held = usage.usage("a")
    # 2 vCPUs for 10 s, each instant decayed to now: 2 * 100 * (1 - e^-0.1)
    assert held == pytest.approx(200 * (1 - math.exp(-0.1)))
    assert 19 < held < 20
    usage.stop("a", 2)
    clock.now += 100
    assert usage.usage("a") == pytest.approx(held * math.exp(-1))


def test_a_share_that_ran_ranks_after_one_that_did_not_and_both_fade() -> None:
    clock = Clock()
    usage = ShareUsage(decay_seconds=3600, clock=clock)
    usage.start("heavy", 1)
    clock.now += 1
    usage.stop("heavy", 1)
    usage.start("light", 1)
    clock.now += 0.5
    usage.stop("light", 1)
    assert usage.usage("light") < usage.usage("heavy")
    clock.now += 10 * 3600
    assert usage.usage("heavy") < 1e-4


def test_decay_must_be_positive() -> None:
    with pytest.raises(ValueError, match="decay_seconds"):
        ShareUsage(decay_seconds=0)
