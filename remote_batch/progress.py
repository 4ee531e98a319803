"""``Job.wait(progress=True)``'s and ``Environment.wait(progress=True)``'s display: a live rich line (or
bar, for an array) on a terminal, plain lines when the output is not one (a log file, CI), nothing when
disabled."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Generic, TextIO, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from remote_batch.terminal import cell, size_text, visible

if TYPE_CHECKING:
    from remote_batch.environments import Environment
    from remote_batch.jobs import Job

Watched = TypeVar("Watched")


class Display(Generic[Watched]):
    """What ``watch`` yields: ``show(job)`` after each refresh, ``echo(text)`` for a line (a log line)
    printed above the live status."""

    def __init__(
        self, show: Callable[[Watched], None], echo: Callable[[str], None], live: bool = False
    ) -> None:
        self.show = show
        self.echo = echo
        self.live = live


def describe(job: Job, elapsed: float) -> str:
    """One line of a job's progress: ``job-01.. Running 12 s, 0.2 credits[, 7/10 children done]``,
    its text shown as ``terminal.visible`` shows it."""
    data = job.data
    text = f"{job.id} {data.get('status')} {elapsed:.0f} s, {data.get('creditsSpent')} credits"
    counts = data.get("childStatusCounts")
    if counts:
        done = sum(counts.get(s, 0) for s in ("Succeeded", "Terminated"))
        text += f", {done}/{data.get('arraySize') or sum(counts.values())} children done"
    if data.get("statusReason"):
        text += f" ({data['statusReason']})"
    return visible(text)


@contextmanager
def watch(job: Job, enabled: bool, stream: TextIO | None = None) -> Iterator[Display[Job]]:
    """A ``Display`` to call after each refresh of ``job`` while waiting for it (``stream``: stderr
    unless given).

    On a terminal: a rich progress display, updated in place (a bar of children done for an array,
    a spinner otherwise), log lines printed above it. Elsewhere: one plain line each time the
    status, credits or children change. ``enabled=False``: status shows nothing (lines still print).
    Log lines go out as the job wrote them only when the stream is no terminal; on one, their control
    characters are escaped (``terminal.visible``), as ``remote-batch logs`` shows them.
    """
    out = stream or sys.stderr
    console = Console(file=out, highlight=False)

    def plain_echo(text: str) -> None:
        print(visible(text) if console.is_terminal else text, file=out, flush=True)

    if not enabled:
        yield Display(lambda _job: None, plain_echo)
        return
    start = time.monotonic()
    if not console.is_terminal:
        last: list[str] = [""]

        def plain(current: Job) -> None:
            data = current.data
            key = f"{data.get('status')}|{data.get('creditsSpent')}|{data.get('childStatusCounts')}"
            if key != last[0]:
                last[0] = key
                plain_echo(describe(current, time.monotonic() - start))

        yield Display(plain, plain_echo)
        return
    is_array = job.type == "Array"
    columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
    if is_array:
        columns += [BarColumn(), MofNCompleteColumn()]
    columns.append(TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(cell(job.id), total=job.data.get("arraySize") if is_array else None)

        def live(current: Job) -> None:
            data = current.data
            counts = data.get("childStatusCounts") or {}
            done = sum(counts.get(s, 0) for s in ("Succeeded", "Terminated"))
            status = str(data.get("status"))
            mark = {"Succeeded": "[green]✔[/green] ", "Terminated": "[red]✘[/red] "}.get(status, "")
            credits = cell(data.get("creditsSpent"))
            description = f"{mark}{cell(current.id)} [bold]{cell(status)}[/bold] {credits} credits"
            if data.get("statusReason") and status in ("Queued", "Terminated"):
                description += f" ({cell(data['statusReason'])})"
            bar.update(task, description=description, completed=done if is_array else None)
            if status in ("Succeeded", "Terminated"):
                size = data.get("arraySize") or 1
                bar.update(task, total=size, completed=size)

        def echo(text: str) -> None:
            bar.console.print(cell(text), markup=True, highlight=False, soft_wrap=True)

        yield Display(live, echo, live=True)


def describe_build(environment: Environment, elapsed: float) -> str:
    """One line of a build's progress: ``environment ml Building 12 s (Python 3.12, 3 requirements)``,
    then the packages and size once Ready or the reason once Failed, shown as ``terminal.visible``
    shows it."""
    data = environment.data or {}
    status = data.get("status")
    count = len(environment.requirements)
    text = (
        f"environment {environment.name} {status} {elapsed:.0f} s "
        f"(Python {environment.python}, {count} requirement{'' if count == 1 else 's'})"
    )
    if status == "Ready":
        packages = len(data.get("packages") or [])
        size = size_text(data.get("sizeBytes"))
        text += f": {packages} package{'' if packages == 1 else 's'}, {size}"
    if data.get("statusReason"):
        text += f": {data['statusReason']}"
    return visible(text)


@contextmanager
def watch_build(
    environment: Environment, enabled: bool, stream: TextIO | None = None
) -> Iterator[Display[Environment]]:
    """A ``Display`` to call after each refresh of ``environment`` while its build runs (``stream``:
    stderr unless given): on a terminal a spinner line updated in place with the build log printed
    above it (control characters escaped); elsewhere a plain line each time the status changes and
    the log lines as written; nothing when ``enabled`` is False."""
    out = stream or sys.stderr
    console = Console(file=out, highlight=False)

    def plain_echo(text: str) -> None:
        print(visible(text) if console.is_terminal else text, file=out, flush=True)

    if not enabled:
        yield Display(lambda _environment: None, lambda _text: None)
        return
    start = time.monotonic()
    if not console.is_terminal:
        last: list[object] = [None]

        def plain(current: Environment) -> None:
            status = (current.data or {}).get("status")
            if status != last[0]:
                last[0] = status
                plain_echo(describe_build(current, time.monotonic() - start))

        yield Display(plain, plain_echo)
        return
    with Progress(
        SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console
    ) as bar:
        task = bar.add_task(cell(f"environment {environment.name}"), total=None)

        def live(current: Environment) -> None:
            status = str((current.data or {}).get("status"))
            mark = {"Ready": "[green]✔[/green] ", "Failed": "[red]✘[/red] "}.get(status, "")
            line = cell(describe_build(current, time.monotonic() - start))
            bar.update(task, description=f"{mark}{line}")
            if status != "Building":
                bar.update(task, total=1, completed=1)

        def echo(text: str) -> None:
            bar.console.print(cell(text), markup=True, highlight=False, soft_wrap=True)

        yield Display(live, echo, live=True)
