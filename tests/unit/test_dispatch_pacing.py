"""The dispatcher's pacing and the local Batch gateway's SubmitJob rate limit, on fake clocks."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError

from functions.domain.errors import DependencyFailed
from functions.logic.dispatch_rules import BACKOFF_CAP_SECONDS, Pacer, backoff_seconds
from remote_batch_local.executor.rate_limit import SubmitRateLimit


class FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_the_pacer_spaces_calls_one_interval_apart() -> None:
    time = FakeTime()
    pacer = Pacer(10.0, clock=time.clock, sleep=time.sleep)
    for _ in range(5):
        pacer.wait()
    # The first call goes at once; each later one waits 0.1 s after the one before.
    assert time.slept == pytest.approx([0.1, 0.1, 0.1, 0.1])
    assert time.now == pytest.approx(100.4)


def test_the_pacer_does_not_wait_after_a_pause() -> None:
    time = FakeTime()
    pacer = Pacer(2.0, clock=time.clock, sleep=time.sleep)
    pacer.wait()
    time.now += 5
    pacer.wait()
    assert time.slept == []


def test_backoff_grows_and_is_capped() -> None:
    for attempt in range(12):
        assert 0 <= backoff_seconds(attempt) <= min(BACKOFF_CAP_SECONDS, 0.1 * 2**attempt)


def test_the_rate_limit_refuses_the_51st_call_in_a_second_as_aws_batch_does() -> None:
    time = FakeTime()
    limit = SubmitRateLimit(50, clock=time.clock)
    for _ in range(50):
        limit.admit()
    with pytest.raises(DependencyFailed) as caught:
        limit.admit()
    assert "busy" in caught.value.message
    cause = caught.value.__cause__
    assert isinstance(cause, ClientError)
    assert cause.response["Error"]["Code"] == "TooManyRequestsException"
    # A second later the window has room again.
    time.now += 1.0
    limit.admit()
    report = limit.report()
    assert (report.accepted, report.throttled, report.max_in_any_second) == (51, 1, 50)


def test_the_window_slides_rather_than_resetting_on_the_second() -> None:
    time = FakeTime()
    limit = SubmitRateLimit(2, clock=time.clock)
    limit.admit()
    time.now += 0.9
    limit.admit()
    time.now += 0.2  # 1.1 s after the first, 0.2 s after the second: one in the window
    limit.admit()
    with pytest.raises(DependencyFailed):
        limit.admit()
    assert limit.report().max_in_any_second == 2
