"""Array jobs: one submit maps code, a command or a function over many items (pure rules).

AWS Batch runs an array job of ``size`` 2..10,000 children: the children's job ids are
``<array job id>:<index>``, each child sees ``AWS_BATCH_JOB_ARRAY_INDEX``, each child's events carry
``arrayProperties.index``, and the array job's own events carry ``arrayProperties.size`` and
``statusSummary`` (AWS Batch user guide, "Array jobs"; API reference, ``ArrayPropertiesDetail``).
The service maps a list of up to 100,000 items onto **spans** of at most ``span_size`` items, one
Batch array job per span (a span of one item is a plain Batch job: AWS's smallest array is 2), all
behind one ``Array`` job the user sees. A child's **global** index is its span's offset plus its index
in the span; the child is the job ``<parent job id>:<global index>``.

The parent's status is the children's roll-up: ``Queued`` until a child starts, ``Running`` until
every child is final, then ``Succeeded`` when all succeeded, else ``Terminated``. Child events arrive
at least once, in any order; ``move_count`` applies one child's status change to the parent's
counts, and every child not seen yet counts as ``Queued``, so the counts always sum to the size.
"""

from __future__ import annotations

import codecs
import json
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from functions.domain.credits import ZERO, quantize_credits
from functions.domain.dependencies import item_unmet_reason
from functions.domain.errors import ValidationFailed
from functions.domain.jobs import DispatchState, Job, JobType, QueuedSpan
from functions.domain.status import JobStatus

#: AWS Batch's largest array job (``arrayProperties.size``), and the default span size.
MAX_BATCH_ARRAY_SIZE = 10_000
#: AWS Batch's smallest array job: a span of one item is submitted as a plain job.
MIN_BATCH_ARRAY_SIZE = 2
#: Most items inline in ``POST /jobs`` (``arrayItems``), docs/http-api.md.
MAX_INLINE_ITEMS = 10_000
#: Most items of an uploaded JSON Lines object (``arrayItemsKey``), docs/http-api.md version 2.
MAX_UPLOADED_ITEMS = 100_000
#: The items and their index, under ``inputs/<parent>/`` (``encode_items``).
ITEMS_OBJECT = "items.jsonl"
ITEMS_INDEX = "items.idx"
#: Each entry of the items index is a big-endian unsigned 64-bit byte offset into ``items.jsonl``.
INDEX_ENTRY_BYTES = 8

_CHILD_ID = re.compile(r"(job-[0-9A-HJKMNP-TV-Z]{26}):(0|[1-9][0-9]{0,5})")
_SPAN_DISPATCH = re.compile(r"(job-[0-9A-HJKMNP-TV-Z]{26})#(0|[1-9][0-9]{0,5})")
_SPAN_NAME = re.compile(r"(job-[0-9A-HJKMNP-TV-Z]{26})(?:_([1-9][0-9]{0,5}))?")
_FINAL = (JobStatus.SUCCEEDED.value, JobStatus.TERMINATED.value)


@dataclass(frozen=True, slots=True)
class Span:
    """One Batch job of an array: ``count`` items from global index ``offset`` on.

    ``is_batch_array`` is False for a span of one item, which AWS Batch cannot run as an array job:
    it is a plain job, and its one item is the span's index 0.
    """

    offset: int
    count: int

    @property
    def is_batch_array(self) -> bool:
        """True when the span is submitted as a Batch array job (2 items or more)."""
        return self.count >= MIN_BATCH_ARRAY_SIZE


def plan_spans(size: int, span_size: int) -> list[Span]:
    """Cut ``size`` items into spans of at most ``span_size``, in order.

    Raises
    ------
    ValueError
        ``size`` < 1, or ``span_size`` outside 1..10,000 (AWS Batch's largest array).
    """
    if size < 1:
        raise ValueError(f"an array has at least one item, not {size}")
    if not 1 <= span_size <= MAX_BATCH_ARRAY_SIZE:
        raise ValueError(f"span size must be 1..{MAX_BATCH_ARRAY_SIZE}, not {span_size}")
    return [Span(offset, min(span_size, size - offset)) for offset in range(0, size, span_size)]


def span_job_name(parent_job_id: str, offset: int) -> str:
    """The Batch ``jobName`` of the span at ``offset``: the parent's id for the first span (an
    array of up to ``span_size`` items is named like a single job), ``<parent>_<offset>`` after it
    (Batch job names take letters, digits, hyphens and underscores)."""
    return parent_job_id if offset == 0 else f"{parent_job_id}_{offset}"


def parse_span_job_name(job_name: str) -> tuple[str, int] | None:
    """(parent job id, span offset) of a Batch ``jobName`` made by ``span_job_name`` (also the plain
    job id of a Single job, offset 0); None for a name this service does not make.

    A ``:<index>`` suffix is dropped first: AWS Batch gives children their parent's name, but a
    stand-in that names a child ``<name>:<index>`` still routes to the same array.
    """
    match = _SPAN_NAME.fullmatch(job_name.split(":", 1)[0])
    if match is None:
        return None
    return match.group(1), int(match.group(2) or 0)


def span_dispatch_id(parent_job_id: str, offset: int) -> str:
    """``<parent>#<offset>``: how the dispatch queue names an admitted span of an array (its message's
    ``jobId``; ``functions.logic.array_dispatch.dispatch_span``). No job id holds a ``#``."""
    return f"{parent_job_id}#{offset}"


def parse_span_dispatch_id(message_id: str) -> tuple[str, int] | None:
    """(parent job id, span offset) of a ``span_dispatch_id``; None for anything else (a job's id)."""
    match = _SPAN_DISPATCH.fullmatch(message_id)
    return (match.group(1), int(match.group(2))) if match else None


def queued_spans(parent: Job, span_size: int) -> tuple[QueuedSpan, ...]:
    """Every span of an array that takes no quota (on a dedicated compute), ``Admitted``, in order."""
    return tuple(
        QueuedSpan(span.offset, span.count, DispatchState.ADMITTED)
        for span in plan_spans(parent.array_children, span_size)
    )


def span_ids(parent: Job) -> list[str]:
    """The dispatch queue's names (``span_dispatch_id``) of the parent's ``Admitted`` spans."""
    return [
        span_dispatch_id(parent.job_id, s.offset)
        for s in parent.array_queue
        if s.state == DispatchState.ADMITTED
    ]


def withdrawn_reason(parent: Job, index: int) -> str | None:
    """The reason a child of ``parent`` ended without ever reaching AWS Batch (``Job.array_withdrawn``:
    an abort, a cap, a span AWS Batch refused; ``Job.array_ended_items``: its ``perItem`` parent's
    item did not succeed), or None when it was not withdrawn. An array whose containers take many
    items withdraws containers, not items (its items each get a record: ``logic.unclaimed_items``):
    None."""
    if parent.array_containers is not None:
        return None
    if index in parent.array_ended_items and parent.per_item_parent is not None:
        return item_unmet_reason(child_job_id(parent.per_item_parent, index), JobStatus.TERMINATED)
    for withdrawn in parent.array_withdrawn:
        if withdrawn.offset <= index < withdrawn.offset + withdrawn.count:
            return withdrawn.reason
    return None


def unsent_runs(parent: Job) -> list[tuple[int, int]]:
    """(offset, count) runs of the children of ``parent`` not in a span yet, in order: from
    ``array_admitted`` on for an array admitted from the front; for a ``perItem`` array every item
    neither admitted (the first ``array_admitted`` of ``array_released``) nor ended."""
    size = parent.array_children
    if parent.per_item_parent is None:
        return [(parent.array_admitted, size - parent.array_admitted)] if parent.array_admitted < size else []
    sent = set(parent.array_released[: parent.array_admitted]) | parent.array_ended_items
    runs: list[tuple[int, int]] = []
    for index in range(size):
        if index in sent:
            continue
        if runs and runs[-1][0] + runs[-1][1] == index:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((index, 1))
    return runs


def child_job_id(parent_job_id: str, index: int) -> str:
    """``<parent>:<global index>``: the job id of an array's child."""
    return f"{parent_job_id}:{index}"


def parse_child_job_id(job_id: str) -> tuple[str, int] | None:
    """(parent job id, global index) of a child's job id, or None when it is not one."""
    match = _CHILD_ID.fullmatch(job_id)
    return (match.group(1), int(match.group(2))) if match else None


def job_data_path(job_id: str) -> str:
    """The path of a job's data under ``inputs/`` and ``outputs/``: the job id, or for a child
    ``<parent>/<index>``, so a parent's prefix holds its children's data (one delete removes all)."""
    child = parse_child_job_id(job_id)
    return f"{child[0]}/{child[1]}" if child else job_id


@dataclass(frozen=True, slots=True)
class ChildEvent:
    """Where an event of an array's Batch job belongs.

    ``index`` is the child's global index; None for an event of a span's Batch array job itself
    (``arrayProperties.size``/``statusSummary``), which never decides anything: the parent's
    outcome is the children's.
    """

    parent_job_id: str
    index: int | None


def locate_array_event(
    batch_job_id: str, job_name: str, array_index: int | None, array_size: int | None
) -> ChildEvent | None:
    """Which child an array's event is about.

    Parameters
    ----------
    batch_job_id : str
        ``detail.jobId``: ``<span id>:<index>`` for a child, the span's id for the span itself.
    job_name : str
        ``detail.jobName`` (``span_job_name``).
    array_index, array_size : int | None
        ``detail.arrayProperties.index`` / ``.size``.

    Returns
    -------
    ChildEvent | None
        None for a job name this service does not make. A child's global index is the span's
        offset plus ``arrayProperties.index`` (else the ``:<index>`` of its id); an event of a
        one-item span (a plain job: neither) is the span's index 0.
    """
    span = parse_span_job_name(job_name)
    if span is None:
        return None
    parent, offset = span
    if array_index is None and ":" in batch_job_id:
        suffix = batch_job_id.rsplit(":", 1)[1]
        array_index = int(suffix) if suffix.isascii() and suffix.isdigit() else None
        if array_index is None:
            return None
    if array_index is None:
        # The span's array job itself (it has a size), or a one-item span run as a plain job.
        return ChildEvent(parent, None) if array_size is not None else ChildEvent(parent, offset)
    return ChildEvent(parent, offset + array_index)


def child_template(parent: Job, index: int) -> Job:
    """The record of a child before its first event: the parent's machine class, zone and caps, no
    notifications of its own (an array notifies about the parent only).

    A child of an array submitted through the quota and the dispatcher has ``dispatch_state``
    ``Dispatched`` (its units are in use while it runs and given back when it ends). A child withdrawn
    before AWS Batch ever had it (``withdrawn_reason``) is shown ``Terminated`` with its reason, free.
    """
    child = Job(
        job_id=child_job_id(parent.job_id, index),
        account_id=parent.account_id,
        name=parent.name,
        type=JobType.ARRAY_CHILD,
        payload_kind=parent.payload_kind,
        machine_class=parent.machine_class,
        geo_zone=parent.geo_zone,
        credit_constraint=parent.credit_constraint,
        time_constraint=parent.time_constraint,
        notifications=(),
        submitted_at=parent.submitted_at,
        parent_job_id=parent.job_id,
        array_index=index,
        array_size=parent.array_size,
        record_expires_at=parent.record_expires_at,
        compute=parent.compute,
        submitted_by=parent.submitted_by,
        python_version=parent.python_version,
        dispatch_state=DispatchState.DISPATCHED if parent.dispatch_state is not None else None,
    )
    reason = withdrawn_reason(parent, index)
    if reason is None:
        return child
    return replace(
        child,
        status=JobStatus.TERMINATED,
        status_reason=reason,
        status_history=(JobStatus.QUEUED, JobStatus.TERMINATED),
    )


# -- the items: stored once, read by index ---------------------------------------------------------
def encode_items(items: Sequence[Any]) -> tuple[bytes, bytes]:
    """``items.jsonl`` (one compact JSON value a line) and its index: ``len(items) + 1`` big-endian
    64-bit offsets, entry i the first byte of item i and the last the file's size, so a child reads
    its item with two ranged GETs (16 bytes of index, then its line) whatever the array's size."""
    lines = [json.dumps(item, separators=(",", ":"), ensure_ascii=False).encode() + b"\n" for item in items]
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line))
    return b"".join(lines), struct.pack(f">{len(offsets)}Q", *offsets)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_items_jsonl(data: bytes, max_items: int = MAX_UPLOADED_ITEMS) -> list[Any]:
    """The items of a JSON Lines object: one JSON value per line (UTF-8, ``\\n`` or ``\\r\\n``; a
    final newline is optional; no blank lines; ``NaN``/``Infinity`` are not JSON). A leading UTF-8
    byte-order mark (what Windows editors save) is ignored, as RFC 8259 section 8.1 lets a parser do
    and as ``json.loads`` does for bytes.

    Raises
    ------
    ValidationFailed
        ``field="arrayItemsKey"``, naming the first bad line (1-based) and why; or no items, or more
        than ``max_items``.
    """
    data = data.removeprefix(codecs.BOM_UTF8)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad_line = data[: exc.start].count(b"\n") + 1
        raise ValidationFailed(
            f"arrayItemsKey: line {bad_line} is not UTF-8 (byte {exc.start}).", field="arrayItemsKey"
        ) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise ValidationFailed("arrayItemsKey: the object holds no items.", field="arrayItemsKey")
    if len(lines) > max_items:
        raise ValidationFailed(
            f"arrayItemsKey: {len(lines)} items, more than the {max_items} an array takes.",
            field="arrayItemsKey",
        )
    items: list[Any] = []
    for number, line in enumerate(lines, start=1):
        source = line.removesuffix("\r")
        if not source.strip():
            raise ValidationFailed(
                f"arrayItemsKey: line {number} is empty; give one JSON value per line.", field="arrayItemsKey"
            )
        try:
            items.append(json.loads(source, parse_constant=_no_constant))
        except ValueError as exc:
            why = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            raise ValidationFailed(
                f"arrayItemsKey: line {number} is not JSON ({why}).", field="arrayItemsKey"
            ) from None
    return items


def item_range(index_entries: bytes) -> tuple[int, int]:
    """(first byte, last byte) of an item's line in ``items.jsonl``, without its newline, from the
    16 index bytes at ``index * 8`` (an HTTP ``Range`` is inclusive at both ends).

    Raises ``ValueError`` for anything but two ascending offsets.
    """
    if len(index_entries) != 2 * INDEX_ENTRY_BYTES:
        raise ValueError(f"an item's index entry is 16 bytes, not {len(index_entries)}")
    start, end = struct.unpack(">2Q", index_entries)
    if end <= start:
        raise ValueError(f"item offsets {start}..{end} do not describe a line")
    return start, end - 2


# -- roll-up --------------------------------------------------------------------------------------
def initial_counts(size: int) -> dict[str, int]:
    """A new array's ``childStatusCounts``: every child Queued."""
    return {JobStatus.QUEUED.value: size}


def move_count(counts: Mapping[str, int], before: JobStatus, after: JobStatus) -> dict[str, int]:
    """The counts after one child moved from ``before`` to ``after`` (a child not seen yet is
    ``Queued``). Statuses with no child are kept at 0 (as DynamoDB's counters are)."""
    moved = dict(counts)
    if before != after:
        moved[before.value] = moved.get(before.value, 0) - 1
        moved[after.value] = moved.get(after.value, 0) + 1
    return moved


def visible_counts(counts: Mapping[str, int] | None) -> dict[str, int] | None:
    """``childStatusCounts`` as the API shows it: statuses with children only."""
    if counts is None:
        return None
    return {status: n for status, n in counts.items() if n > 0}


def all_final(counts: Mapping[str, int], size: int) -> bool:
    """True when every one of the ``size`` children is Succeeded or Terminated."""
    return sum(counts.get(status, 0) for status in _FINAL) >= size


def children_terminated_reason(terminated: int, size: int, first_index: int, first_reason: str | None) -> str:
    """``3 of 1000 children terminated (first: index 17, ZeroDivisionError: division by zero)``:
    ``first_index`` is the lowest terminated index, ``first_reason`` its ``statusReason``."""
    noun = "child" if size == 1 else "children"
    why = f", {first_reason}" if first_reason else ""
    return f"{terminated} of {size} {noun} terminated (first: index {first_index}{why})"


@dataclass(frozen=True, slots=True)
class ArrayOutcome:
    """How an array ended: ``Succeeded`` iff every child did; else ``Terminated`` with ``reason``."""

    status: JobStatus
    reason: str | None


def array_outcome(
    size: int,
    counts: Mapping[str, int],
    first_terminated: tuple[int, str | None] | None,
    termination_reason: str | None,
) -> ArrayOutcome | None:
    """The parent's final status once every child is final, else None.

    ``first_terminated`` is (lowest terminated index, its reason); ``termination_reason`` is the
    service's own (abort, caps, balance), which wins as it does for a single job.
    """
    if not all_final(counts, size):
        return None
    terminated = counts.get(JobStatus.TERMINATED.value, 0)
    if terminated == 0:
        return ArrayOutcome(JobStatus.SUCCEEDED, None)
    if termination_reason:
        return ArrayOutcome(JobStatus.TERMINATED, termination_reason)
    index, reason = first_terminated if first_terminated is not None else (0, None)
    return ArrayOutcome(JobStatus.TERMINATED, children_terminated_reason(terminated, size, index, reason))


# -- credits --------------------------------------------------------------------------------------
def remaining_cap(credit_constraint: Decimal | None, settled: Decimal) -> Decimal | None:
    """What an array's ``creditConstraint`` leaves for the next child's charge (never below 0), or
    None without a cap: the children's charges never add up past the cap."""
    if credit_constraint is None:
        return None
    return quantize_credits(max(credit_constraint - settled, ZERO))


def array_spent(settled: Decimal, running: Sequence[Decimal], credit_constraint: Decimal | None) -> Decimal:
    """An array's ``creditsSpent`` while it runs: its settled children's charges plus what its
    running children have spent so far (``metering.read_meter``), capped by its ``creditConstraint``."""
    total = quantize_credits(settled + sum(running, ZERO))
    return min(total, credit_constraint) if credit_constraint is not None else total


def result_document(results: Sequence[Any], reprs: Sequence[str], errors: Sequence[tuple[int, str]]) -> bytes:
    """The array's ``result.json``: ``{"result": [...], "resultRepr": "[...]", "errors": [{"index",
    "message"}]}``, children in index order (a failed child's result is null)."""
    document = {
        "result": list(results),
        "resultRepr": "[" + ", ".join(reprs) + "]",
        "errors": [{"index": index, "message": message} for index, message in errors],
    }
    return json.dumps(document, separators=(",", ":")).encode()
