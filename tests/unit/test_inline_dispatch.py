"""The inline dispatch (``ports.InlineDispatch``, no queue): each message is handled in the sending call,
with the services that hold the queue, copies made by ``dataclasses.replace`` included."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from functions.bootstrap import inline_dispatch
from functions.domain.jobs import Job
from functions.ports import InlineDispatch, Services


class Handlers:
    """The dispatcher's two handlings, recording which services and ids each was called with."""

    def __init__(self) -> None:
        self.sent: list[tuple[Services, list[str]]] = []
        self.admitted: list[tuple[Services, list[str]]] = []

    def send_jobs(self, services: Services, job_ids: Sequence[str]) -> Sequence[Job | None]:
        self.sent.append((services, list(job_ids)))
        return [None for _ in job_ids]

    def admit_accounts(self, services: Services, account_ids: Sequence[str]) -> None:
        self.admitted.append((services, list(account_ids)))


def _services(dispatch: Any) -> Services:
    none = cast(Any, None)
    return Services(
        store=none,
        notifier=none,
        subscriptions=none,
        zones={},
        clock=lambda: datetime(2026, 12, 1, tzinfo=UTC),
        events=none,
        dispatch=dispatch,
    )


def test_messages_are_handled_in_the_call_with_the_services_that_hold_the_queue() -> None:
    handlers = Handlers()
    services = _services(InlineDispatch(handlers.send_jobs, handlers.admit_accounts))

    assert services.dispatch.inline is True
    assert services.dispatch.send(["job-a", "job-b"]) == [None, None]
    services.dispatch.request_admission(["dev"])

    assert handlers.sent == [(services, ["job-a", "job-b"])]
    assert handlers.admitted == [(services, ["dev"])]


def test_a_copy_of_the_services_dispatches_with_the_copy_and_the_original_with_the_original() -> None:
    handlers = Handlers()
    original = _services(InlineDispatch(handlers.send_jobs, handlers.admit_accounts))
    copy = replace(original, array_span_size=2)

    copy.dispatch.send(["job-a"])
    original.dispatch.request_admission(["dev"])

    assert copy.dispatch is not original.dispatch
    assert handlers.sent[0][0] is copy and handlers.sent[0][0].array_span_size == 2
    assert handlers.admitted[0][0] is original and original.array_span_size == 10_000


def test_an_inline_dispatch_outside_services_refuses_to_run() -> None:
    handlers = Handlers()
    loose = InlineDispatch(handlers.send_jobs, handlers.admit_accounts)

    with pytest.raises(RuntimeError, match="only as the dispatch of a Services"):
        loose.send(["job-a"])
    assert handlers.sent == []


def test_bootstrap_builds_the_inline_dispatch_where_there_is_no_queue() -> None:
    services = _services(inline_dispatch())

    assert isinstance(services.dispatch, InlineDispatch)
    assert services.dispatch.services is services
    assert services.dispatch.send([]) == []
