"""Prerequisites: what a Queued job waits for before it may take quota, and the rule that decides.

A job may be submitted before everything it needs exists: its environment still Building (issue 24),
later a parent job not yet final (issue 25's ``dependsOn``). Such a job is written ``Queued`` in the
dispatch state ``Waiting`` (``functions.domain.jobs.DispatchState``): it holds no quota, is counted
nowhere, is not charged and reaches no dispatcher. Each of its prerequisites is in one of three
standings, and one rule (:func:`judge`) says what becomes of the job:

- some prerequisite is ``Broken`` (it can no longer hold: its build failed, its environment was
  deleted, a parent ended the other way): the job ends ``Terminated``, free, with that prerequisite's
  reason (the first broken one in the job's order);
- else some is ``Pending``: the job waits, its ``statusReason`` the first pending one's reason and how
  many more (``Building environment ml (Python 3.12, 14 packages)``, ``Waiting for job-X (Running)
  and 2 more``);
- else every one is ``Met``: the job is released into the quota's admission like a new submit.

Each kind of prerequisite says its own standing (``functions.logic.waits`` asks its checker); this
module holds the names, the wire form of a prerequisite (:meth:`Prerequisite.id`) and the rule. It
reads no clock and calls nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from functions.domain.batch_reasons import MAX_REASON


class PrerequisiteKind(StrEnum):
    """What a job can wait for."""

    #: An environment's build (``functions.domain.environments``): met when Ready, broken when Failed
    #: or deleted.
    ENVIRONMENT = "environment"


@dataclass(frozen=True, slots=True)
class Prerequisite:
    """One thing a job waits for: its ``kind`` and a ``key`` the kind's checker understands (no ``|``
    in it: :meth:`id` joins them with one)."""

    kind: PrerequisiteKind
    key: str

    @property
    def id(self) -> str:
        """``<kind>|<key>``: how the job record lists it and how its waiters are found."""
        return f"{self.kind.value}|{self.key}"

    @classmethod
    def parse(cls, value: str) -> Prerequisite:
        """The prerequisite of an :meth:`id`. Raises ``ValueError`` for one that is not."""
        kind, separator, key = value.partition("|")
        if not separator or not key or kind not in PrerequisiteKind.__members__.values():
            raise ValueError(f"not a prerequisite id: {value!r}")
        return cls(PrerequisiteKind(kind), key)


class Standing(StrEnum):
    """Where a prerequisite stands for the job that waits for it."""

    PENDING = "Pending"
    MET = "Met"
    BROKEN = "Broken"


@dataclass(frozen=True, slots=True)
class PrerequisiteState:
    """A prerequisite's standing as its checker read it.

    ``reason`` says, for ``Pending``, what the job waits for (its ``statusReason`` while it waits) and,
    for ``Broken``, why it can no longer hold (the job's ``statusReason`` as it ends); None for
    ``Met``. ``value`` is what a met prerequisite gives the job it releases (an environment: its
    build's hash), None when it gives nothing.
    """

    prerequisite: Prerequisite
    standing: Standing
    reason: str | None = None
    value: str | None = None


class Verdict(StrEnum):
    """What :func:`judge` decides for a waiting job."""

    WAIT = "Wait"
    RELEASE = "Release"
    END = "End"


@dataclass(frozen=True, slots=True)
class Judgement:
    """:func:`judge`'s answer: the verdict and the reason that goes with it (the ``statusReason`` to
    wait with, or to end with; None for a release)."""

    verdict: Verdict
    reason: str | None = None


def _clip(reason: str) -> str:
    return reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 1] + "…"


def judge(states: Sequence[PrerequisiteState]) -> Judgement:
    """The rule of this module's docstring over every prerequisite of one job, in the job's order: End
    on the first broken one, else Wait on the first pending one (``<its reason> and N more`` when
    others are pending too), else Release. No prerequisites at all: Release."""
    broken = [s for s in states if s.standing is Standing.BROKEN]
    if broken:
        return Judgement(Verdict.END, _clip(broken[0].reason or "A prerequisite can no longer be met"))
    pending = [s for s in states if s.standing is Standing.PENDING]
    if pending:
        reason = pending[0].reason or "Waiting for a prerequisite"
        if len(pending) > 1:
            reason = f"{reason} and {len(pending) - 1} more"
        return Judgement(Verdict.WAIT, _clip(reason))
    return Judgement(Verdict.RELEASE)
