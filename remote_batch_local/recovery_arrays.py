"""Settling the array jobs a crashed local stack left unfinished (see ``recovery``'s rules).

An array parent's outcome is its children's, so recovery works from the events the executor emitted
for the parent's service job (the bus's journal): for each AWS Batch array job among them (a span),
every child that has a final event gets it delivered again (the handlers ignore what they already
applied), and every other child gets the event AWS Batch would send for a job whose host vanished,
exactly as a single job would: ``Local stack stopped while the job ran`` billed from its own start to
the crash instant, or ``Local stack stopped before the job ran`` and no charge (a span of one item,
a plain Batch job, likewise). Then the Batch parent gets its final event (SUCCEEDED only if every
child did), with its ``statusSummary``. A clean stop ends the running children and leaves those
that never ran to this settlement at the next start (an array may have 10,000 of them; the stop does
not wait for their events). After a crash, a span the executor had accepted is taken back by the new
executor instead (``recovery_accepted``), child by child, and left out here.

A span that left no event at all (a crash before the executor announced it) is unknown to the new
executor: the meter's reconciliation ends it as unknown to Batch.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from functions.domain.charged_time import ended_attempt
from remote_batch_local.batch_arrays import (
    ARRAY_INDEX_VARIABLE,
    ARRAY_SIZE_VARIABLE,
    FINAL,
    ArrayParent,
    child_environment,
    child_id,
    split_child_id,
)
from remote_batch_local.events import (
    BatchAttempt,
    batch_job_state_change,
    log_stream_name,
    task_arn,
)

Envelope = dict[str, Any]


@dataclass
class _Span:
    """What the journal says of one AWS Batch array job."""

    parent_id: str
    size: int | None = None
    # A span of one item, submitted as a plain job (AWS Batch's smallest array is 2): its events
    # are ``children[0]``.
    plain: bool = False
    template: Envelope | None = None
    parent_final: Envelope | None = None
    children: dict[int, list[Envelope]] = field(default_factory=dict)


def _spans(envelopes: Iterable[Envelope]) -> list[_Span]:
    """The array jobs among a service job's emitted events, in the order they first appear."""
    spans: dict[str, _Span] = {}
    for envelope in envelopes:
        detail = envelope.get("detail")
        if not isinstance(detail, dict) or not isinstance(detail.get("jobId"), str):
            continue
        properties = detail.get("arrayProperties")
        if not isinstance(properties, dict):
            plain = spans.setdefault(detail["jobId"], _Span(detail["jobId"], size=1, plain=True))
            plain.template = plain.template or envelope
            plain.children.setdefault(0, []).append(envelope)
            continue
        split = split_child_id(detail["jobId"])
        parent_id = split[0] if split else detail["jobId"]
        span = spans.setdefault(parent_id, _Span(parent_id))
        span.template = span.template or envelope
        if split is not None:
            span.children.setdefault(split[1], []).append(envelope)
            size = _environment(detail).get(ARRAY_SIZE_VARIABLE, "")
            if span.size is None and size.isdigit():
                span.size = int(size)
        else:
            if isinstance(properties.get("size"), int):
                span.size = properties["size"]
            if detail.get("status") in FINAL:
                span.parent_final = envelope
    return list(spans.values())


def _environment(detail: dict[str, Any]) -> dict[str, str]:
    container = detail.get("container")
    pairs = container.get("environment") if isinstance(container, dict) else None
    if not isinstance(pairs, list):
        return {}
    return {
        str(pair["name"]): str(pair["value"])
        for pair in pairs
        if isinstance(pair, dict) and "name" in pair and "value" in pair
    }


def _resources(detail: dict[str, Any]) -> dict[str, int]:
    container = detail.get("container")
    requirements = container.get("resourceRequirements") if isinstance(container, dict) else None
    found = {"VCPU": 1, "MEMORY": 0, "GPU": 0}
    for requirement in requirements if isinstance(requirements, list) else []:
        if isinstance(requirement, dict) and str(requirement.get("value", "")).isdigit():
            found[str(requirement.get("type"))] = int(requirement["value"])
    return found


def _final(events: list[Envelope]) -> Envelope | None:
    return next((e for e in reversed(events) if e["detail"].get("status") in FINAL), None)


def _started_ms(events: list[Envelope]) -> int | None:
    return next((e["detail"]["startedAt"] for e in reversed(events) if e["detail"].get("startedAt")), None)


def _span_event(
    template: Envelope,
    batch_job_id: str,
    status: str,
    stopped_ms: int,
    *,
    reason: str | None = None,
    started_ms: int | None = None,
    index: int | None = None,
    size: int = 0,
    parent: ArrayParent[None] | None = None,
) -> Envelope:
    """A final event of a child (``index``) or of the Batch parent (``parent``), shaped like the
    executor's: queue, definition, resources, environment and tags from ``template``."""
    detail = template["detail"]
    base = {
        k: v for k, v in _environment(detail).items() if k not in (ARRAY_INDEX_VARIABLE, ARRAY_SIZE_VARIABLE)
    }
    resources = _resources(detail)
    region, account = str(template.get("region", "")), str(template.get("account", ""))
    timeout = detail.get("timeout")
    attempts: tuple[BatchAttempt, ...] = ()
    stream: str | None = None
    if parent is None and started_ms is not None:
        stream = log_stream_name(str(detail.get("jobDefinition", "")), batch_job_id)
        attempts = (
            BatchAttempt(
                exit_code=None,
                log_stream_name=stream,
                task_arn=task_arn(region, account, batch_job_id),
                started_at_ms=started_ms,
                stopped_at_ms=stopped_ms,
                status_reason=reason or "",
            ),
        )
    return batch_job_state_change(
        region=region,
        account=account,
        job_id=batch_job_id,
        job_name=str(detail.get("jobName", "")),
        job_queue=str(detail.get("jobQueue", "")),
        job_definition=str(detail.get("jobDefinition", "")),
        status=status,
        created_at_ms=int(detail.get("createdAt") or stopped_ms),
        vcpus=resources["VCPU"],
        memory_mib=resources["MEMORY"],
        gpus=resources["GPU"],
        environment=child_environment(base, index, size) if index is not None else base,
        command=list(detail.get("container", {}).get("command", [])),
        status_reason=reason,
        started_at_ms=started_ms,
        stopped_at_ms=stopped_ms,
        log_stream=stream,
        attempts=attempts,
        array_properties=(
            parent.array_properties() if parent is not None else None if index is None else {"index": index}
        ),
        timeout_seconds=timeout.get("attemptDurationSeconds") if isinstance(timeout, dict) else None,
        tags=detail.get("tags") if isinstance(detail.get("tags"), dict) else None,
    )


def settle_array(
    envelopes: list[Envelope],
    stopped_at: datetime,
    publish: Callable[[Envelope], None],
    redeliver: Callable[[Iterable[Envelope]], None] | None,
    reasons: tuple[str, str],
    *,
    taken_back: Collection[str] = frozenset(),
) -> int:
    """Settle every array job among a service job's emitted ``envelopes``; returns how many children
    got an event (again).

    Parameters
    ----------
    envelopes : list[Envelope]
        What the executor emitted for the service job (``EventBus.emitted_for``), in order.
    stopped_at : datetime
        The crash instant as recorded (``stoppedAt`` of the children it stops, never before their
        ``startedAt``).
    publish : Callable[[Envelope], None]
        Records and delivers a new event (``EventBus.publish``).
    redeliver : Callable[[Iterable[Envelope]], None] | None
        Delivers emitted events again (``EventBus.replay``); without it, only new events are sent.
    reasons : tuple[str, str]
        The ``statusReason`` of a child stopped while it ran, and of one stopped before it ran.
    taken_back : Collection[str]
        The spans (Batch job ids) the new executor took back (``recovery_accepted``): left to run.
    """
    running_reason, unstarted_reason = reasons
    crash_ms = int(stopped_at.timestamp() * 1000)
    settled = 0
    for span in _spans(envelopes):
        if span.size is None or span.template is None or span.parent_id in taken_back:
            continue
        parent: ArrayParent[None] = ArrayParent(
            span.parent_id, span.size, int(span.template["detail"].get("createdAt") or 0)
        )
        last_stop = 0
        for index in range(span.size):
            events = span.children.get(index, [])
            batch_job_id = span.parent_id if span.plain else child_id(span.parent_id, index)
            final = _final(events)
            if final is not None:
                if redeliver is not None:
                    redeliver([final])
                status = str(final["detail"]["status"])
                last_stop = max(last_stop, int(final["detail"].get("stoppedAt") or 0))
            else:
                # From its start, never before its submission, to the crash (``charged_time``).
                times = ended_attempt(parent.created_at_ms, _started_ms(events), crash_ms)
                started = times.started_ms
                stopped_ms = times.stopped_ms if times.stopped_ms is not None else crash_ms
                reason = running_reason if started is not None else unstarted_reason
                publish(
                    _span_event(
                        span.template,
                        batch_job_id,
                        "FAILED",
                        stopped_ms,
                        reason=reason,
                        started_ms=started,
                        index=None if span.plain else index,
                        size=span.size,
                    )
                )
                status, last_stop = "FAILED", max(last_stop, stopped_ms)
            parent.child_moved("SUBMITTED", status)
            settled += 1
        if span.plain:
            continue
        if span.parent_final is not None:
            if redeliver is not None:
                redeliver([span.parent_final])
            continue
        publish(
            _span_event(span.template, span.parent_id, parent.outcome(), last_stop or crash_ms, parent=parent)
        )
    return settled
