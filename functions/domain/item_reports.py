"""Items of an array run by containers that take many: the per-item reports and the charge split.

A container (an AWS Batch array child) of an array runs items one after another
(``worker.item_loop``) and writes one JSON report per item under its own prefix
(``outputs/<parent>/containers/<batch job id>/<index>.json``)::

    {"index": 17, "startedAt": 1764676800000, "stoppedAt": 1764676801250, "exitCode": 0,
     "status": "Succeeded", "reason": null, "logFirst": 120, "logCount": 4}

(times in ms since the epoch; ``logFirst``/``logCount`` the 0-based sequence number of the item's
first line in the container's console and how many lines it has, counted by the supervisor, so what
an item prints cannot move another item's boundary). A report is written by the job's container:
**untrusted input**. ``parse_item_report`` checks its shape and bounds and clamps its times into the
container's life as AWS Batch reported it, and the money never comes from a report alone:
``split_charge`` divides the container's own charge (its Batch running time, the 60-second minimum
once per container, ``domain.credits``) over the items it ran, weighted by their reported times, so
a report can move credits between the container's own items but never change the container's total.

The split's rule: each item gets ``charge × its ms ÷ all items' ms`` rounded down to the credit
quantum (0.0001); the quanta left over go one each to the items with the largest remainders (ties:
the lower position in the given order). Items that all report 0 ms share the charge equally by the
same rule. The parts are exact Decimals and their sum is the charge exactly.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal
from typing import Any

from functions.domain.credits import CREDIT_QUANTUM, ZERO

#: A report bigger than this is refused unread (a real one is ~200 bytes; a 1,024-character reason
#: escaped as JSON stays under it).
MAX_REPORT_BYTES = 8192
#: Longest ``reason`` kept (longer is cut, as ``statusReason`` is elsewhere).
MAX_REASON_CHARS = 1024
#: Largest log position or count taken (a container's console is far shorter).
MAX_LOG_LINES = 10**9
#: Exit codes a process can end with (0..255; a signal is 128 + its number).
MAX_EXIT_CODE = 255
SUCCEEDED = "Succeeded"
FAILED = "Failed"
#: Item records written in one transaction: DynamoDB's TransactWriteItems takes 100 actions
#: (DynamoDB API reference), less the parent's roll-up, the ledger entry, the balance and two
#: quota counters, with room to spare.
MAX_CONTAINER_ITEMS = 90
_KEYS = frozenset({"index", "startedAt", "stoppedAt", "exitCode", "status", "reason", "logFirst", "logCount"})


class ReportRejected(ValueError):
    """A per-item report that is not one the worker writes (its message says what is wrong)."""


@dataclass(frozen=True, slots=True)
class ItemReport:
    """One item's run in a container, as validated and clamped by ``parse_item_report``.

    ``started_at_ms`` ≤ ``stopped_at_ms``, both inside the container's Batch-reported life;
    ``succeeded`` iff the report said ``Succeeded`` with exit code 0; ``log_first``/``log_count``
    the item's lines in the container's console (0-based sequence numbers).
    """

    index: int
    started_at_ms: int
    stopped_at_ms: int
    exit_code: int
    succeeded: bool
    reason: str | None
    log_first: int
    log_count: int

    @property
    def ran_ms(self) -> int:
        """The item's reported running time, in ms (after clamping)."""
        return self.stopped_at_ms - self.started_at_ms


def _whole(document: dict[str, Any], key: str, low: int, high: int) -> int:
    value = document[key]
    # bool is an int in Python; a report's true/false is not a number.
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ReportRejected(f"{key} must be an integer in {low}..{high}")
    return value


def parse_item_report(
    raw: bytes, *, array_size: int, container_started_ms: int, container_stopped_ms: int
) -> ItemReport:
    """Validate one per-item report and clamp its times into the container's life.

    Parameters
    ----------
    raw : bytes
        The report object's body (job-written).
    array_size : int
        The array's items: ``index`` must be in ``0..array_size - 1``.
    container_started_ms, container_stopped_ms : int
        The container's ``startedAt``/``stoppedAt`` from its AWS Batch event (trusted), ms.

    Returns
    -------
    ItemReport
        With ``startedAt``/``stoppedAt`` clamped into ``[container_started_ms, container_stopped_ms]``
        (a stop before the start becomes the start); ``reason`` cut to ``MAX_REASON_CHARS`` and
        None for a succeeded item.

    Raises
    ------
    ReportRejected
        Too big, not a UTF-8 JSON object, other keys than the eight above, a value of the wrong type
        or out of bounds, a ``status`` other than ``Succeeded``/``Failed``, or ``Succeeded`` with a
        non-zero exit code.
    """
    if len(raw) > MAX_REPORT_BYTES:
        raise ReportRejected(f"a report is at most {MAX_REPORT_BYTES} bytes, not {len(raw)}")
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ReportRejected("a report is a UTF-8 JSON object") from None
    if not isinstance(document, dict) or set(document) != _KEYS:
        raise ReportRejected(f"a report has exactly the keys {sorted(_KEYS)}")
    index = _whole(document, "index", 0, array_size - 1)
    started = _whole(document, "startedAt", 0, 2**53)
    stopped = _whole(document, "stoppedAt", 0, 2**53)
    exit_code = _whole(document, "exitCode", 0, MAX_EXIT_CODE)
    log_first = _whole(document, "logFirst", 0, MAX_LOG_LINES)
    log_count = _whole(document, "logCount", 0, MAX_LOG_LINES)
    status, reason = document["status"], document["reason"]
    if status not in (SUCCEEDED, FAILED):
        raise ReportRejected(f"status must be {SUCCEEDED} or {FAILED}")
    if status == SUCCEEDED and exit_code != 0:
        raise ReportRejected("a Succeeded item has exit code 0")
    if reason is not None and not isinstance(reason, str):
        raise ReportRejected("reason must be a string or null")
    low, high = container_started_ms, max(container_started_ms, container_stopped_ms)
    started = min(max(started, low), high)
    stopped = min(max(stopped, started), high)
    kept = None if status == SUCCEEDED or not reason else " ".join(reason.split())[:MAX_REASON_CHARS]
    return ItemReport(index, started, stopped, exit_code, status == SUCCEEDED, kept, log_first, log_count)


def split_charge(charge: Decimal, weights_ms: Sequence[int]) -> list[Decimal]:
    """Split a container's ``charge`` over its items by their running times (the module's rule).

    Parameters
    ----------
    charge : Decimal
        The container's charge, a multiple of 0.0001 credits, ≥ 0.
    weights_ms : Sequence[int]
        Each item's ``ItemReport.ran_ms`` (≥ 0), in the order the parts are returned.

    Returns
    -------
    list[Decimal]
        One part per weight, each a multiple of 0.0001, summing to ``charge`` exactly.

    Raises
    ------
    ValueError
        No weights, a negative weight, or a charge that is negative or not a multiple of 0.0001.
    """
    if not weights_ms:
        raise ValueError("a charge is split over at least one item")
    if any(w < 0 for w in weights_ms):
        raise ValueError("an item's running time is never negative")
    if charge < 0 or charge != charge.quantize(CREDIT_QUANTUM):
        raise ValueError(f"a charge is a multiple of {CREDIT_QUANTUM} credits >= 0, not {charge}")
    weights = list(weights_ms) if sum(weights_ms) > 0 else [1] * len(weights_ms)
    total = sum(weights)
    quanta = int(charge / CREDIT_QUANTUM)
    floors: list[int] = []
    remainders: list[tuple[int, int]] = []
    for position, weight in enumerate(weights):
        share, remainder = divmod(quanta * weight, total)  # integers: exact
        floors.append(share)
        remainders.append((-remainder, position))
    for _, position in sorted(remainders)[: quanta - sum(floors)]:
        floors[position] += 1
    return [
        (CREDIT_QUANTUM * share).quantize(CREDIT_QUANTUM, rounding=ROUND_FLOOR) + ZERO for share in floors
    ]


@dataclass(frozen=True, slots=True)
class ItemSettlement:
    """What one item of a container ended with: its status, exit code (None for an item the
    container died holding), reason, times (ms), console lines and its part of the container's charge."""

    index: int
    succeeded: bool
    exit_code: int | None
    reason: str | None
    started_at_ms: int
    stopped_at_ms: int
    log_first: int
    log_count: int
    credits: Decimal


@dataclass(frozen=True, slots=True)
class ContainerSettlement:
    """A container's items (index order) and how many of its reports were refused (bad or repeated)."""

    items: tuple[ItemSettlement, ...]
    rejected: int


def settle_container(
    reports: Sequence[bytes],
    held: Sequence[int],
    *,
    array_size: int,
    started_ms: int,
    stopped_ms: int,
    charge: Decimal,
    end_reason: str,
) -> ContainerSettlement:
    """Turn an ended container's reports into its items' outcomes and charges.

    Parameters
    ----------
    reports : Sequence[bytes]
        The bodies under the container's report prefix (untrusted: ``parse_item_report``); a report
        refused, or a second report of an index, is counted in ``rejected`` and changes nothing.
    held : Sequence[int]
        Items this container claimed and never reported (it died running them): each fails with
        ``end_reason``, its time running from the last reported stop to the container's stop, its
        lines from the last reported item's to the console's end (``log_count`` ``MAX_LOG_LINES``).
    array_size : int
        The array's items.
    started_ms, stopped_ms : int
        The container's life from its AWS Batch events (trusted).
    charge : Decimal
        The container's own charge (its Batch running time, the 60-second minimum once), split over
        its items by ``split_charge``; a container with no item keeps it whole (``items`` empty:
        the caller charges it to the array).
    end_reason : str
        Why the container ended when it did not succeed (its ``statusReason``).

    Returns
    -------
    ContainerSettlement
        Items in index order; their credits sum to ``charge`` whenever there is at least one item.
    """
    seen: dict[int, ItemReport] = {}
    rejected = 0
    for raw in reports:
        try:
            report = parse_item_report(
                raw, array_size=array_size, container_started_ms=started_ms, container_stopped_ms=stopped_ms
            )
        except ReportRejected:
            rejected += 1
            continue
        if report.index in seen:
            rejected += 1
            continue
        seen[report.index] = report
    last_stop = max((r.stopped_at_ms for r in seen.values()), default=started_ms)
    end = max(started_ms, stopped_ms)  # every reported stop is clamped at or before it
    # A held item's lines: the console from the last reported item's lines to its end.
    after = max((r.log_first + r.log_count for r in seen.values()), default=0)
    held_only: set[int] = set()
    for index in held:
        if index not in seen and 0 <= index < array_size:
            held_only.add(index)
            seen[index] = ItemReport(index, last_stop, end, 0, False, end_reason, after, MAX_LOG_LINES)
    ordered = [seen[i] for i in sorted(seen)]
    if not ordered:
        return ContainerSettlement((), rejected)
    parts = split_charge(charge, [r.ran_ms for r in ordered])
    items = tuple(
        ItemSettlement(
            r.index,
            r.succeeded,
            r.exit_code if r.index not in held_only else None,
            r.reason,
            r.started_at_ms,
            r.stopped_at_ms,
            r.log_first,
            r.log_count,
            part,
        )
        for r, part in zip(ordered, parts, strict=True)
    )
    return ContainerSettlement(items, rejected)
