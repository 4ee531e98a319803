"""What one meter tick reports and logs when some of its jobs cannot be read or notified: each job
counted once in ``skipped`` under its own id, the step named in the log line, and the credits raised
across every account summed (issue 11 item 8: the survivors of the mutation run over ``meter_tick``)."""

from __future__ import annotations

import logging
from decimal import Decimal

import pytest

from functions.domain.metering import read_meter as domain_read_meter
from functions.logic import metering


def skipped_lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return sorted(
        (record.job_id, record.step)  # type: ignore[attr-defined]
        for record in caplog.records
        if record.getMessage() == "job skipped by the meter"
    )


def test_jobs_whose_meter_reading_fails_are_each_skipped_under_their_own_id(stack, monkeypatch, caplog):
    first, _, _ = stack.start_running({"code": "1"})
    second, _, _ = stack.start_running({"code": "1"})
    kept, _, _ = stack.start_running({"code": "1"})
    real = domain_read_meter

    def unreadable(job, now):
        if job.job_id in (first, second):
            raise ValueError("a reading that cannot be made")
        return real(job, now)

    monkeypatch.setattr(metering, "read_meter", unreadable)
    stack.clock.advance(60)
    with caplog.at_level(logging.ERROR):
        report = stack.tick()

    assert (report["metered"], report["updated"], report["skipped"]) == (1, 1, 2)
    assert skipped_lines(caplog) == sorted([(first, "read"), (second, "read")])
    assert stack.services.store.get_job(kept).credits_spent == Decimal("1")
    assert stack.services.store.get_job(first).credits_spent == Decimal("0")


def test_jobs_whose_notifications_fail_are_each_skipped_after_their_credits_are_raised(
    stack, monkeypatch, caplog
):
    first, _, _ = stack.start_running({"code": "1"})
    second, _, _ = stack.start_running({"code": "1"})

    def broken(services, reading, now):
        raise RuntimeError(f"notifications of {reading.job.job_id} broke")

    monkeypatch.setattr(metering, "notify_progress", broken)
    stack.clock.advance(60)
    with caplog.at_level(logging.ERROR):
        report = stack.tick()

    assert (report["metered"], report["updated"], report["skipped"]) == (2, 2, 2)
    assert skipped_lines(caplog) == sorted([(first, "notify"), (second, "notify")])
    for job_id in (first, second):
        assert stack.services.store.get_job(job_id).credits_spent == Decimal("1")


def test_credits_raised_in_every_account_are_summed_in_the_report(stack):
    stack.add_account("alice", "100", email="alice@example.com")
    stack.add_account("bob", "100", email="bob@example.com")
    jobs = [stack.start_running({"code": "1"}, account_id=a)[0] for a in ("alice", "alice", "bob")]
    stack.clock.advance(30)

    report = stack.tick()

    assert (report["metered"], report["updated"], report["terminated"], report["skipped"]) == (3, 3, 0, 0)
    assert [stack.services.store.get_job(j).credits_spent for j in jobs] == [Decimal("0.5")] * 3


def test_a_tick_sends_what_a_running_job_owes_at_the_ticks_time(stack):
    stack.add_account("ana", "100000", email="ana@example.com")
    rules = [{"events": ["Hourly"], "methods": ["Email"]}]
    job_id, _, _ = stack.start_running({"code": "1", "notifications": rules}, account_id="ana")
    stack.clock.advance(55 * 60)  # this tick also reconciles the quiet job; not an hour yet
    assert stack.tick()["skipped"] == 0
    assert stack.notifier.sent == []
    stack.clock.advance(5 * 60)

    report = stack.tick()

    assert (report["metered"], report["skipped"]) == (1, 0)
    assert [(n.job_id, n.event, n.method, n.to) for n in stack.notifier.sent] == [
        (job_id, "Hourly", "Email", "ana@example.com")
    ]
    assert stack.services.store.get_job(job_id).sent_notifications == {"Hourly#1/Email"}
