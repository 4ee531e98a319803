"""The ``notifications`` grammar of docs/http-api.md (RemoteJobNotifications) and which status events are due.

Accepted forms:

- ``"Automatic"`` (the default) = ``[{"events": ["JobStarting", "JobCompleted", {"JobCreditsUsed": 20000}],
  "methods": ["Email"]}]``
- ``"None"`` = ``[]``
- one event name, e.g. ``"JobCompleted"`` = ``[{"events": ["JobCompleted"], "methods": ["Email"]}]``
- a list of rules ``{"events": [...], "methods": [...]}``; a lone rule object is taken as a list of one,
  and a lone event or method where a list is expected as a list of one.

Events: JobStarting, JobStarted, JobCompleted, JobSucceeded, JobTerminated, JobStatusChanged, Hourly,
Daily, ``{"HoursElapsed": n}``, ``{"JobCreditsUsed": n}`` (n > 0), and this service's extension
TimeConstraintNear (once, when a job has used 80% of its ``timeConstraint``, like Slurm's
TIME_LIMIT_80). Methods: Email, SMS, and the extension Webhook (a signed HTTPS POST).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from functions.domain.credits import credits_text
from functions.domain.errors import ValidationFailed
from functions.domain.status import JobStatus
from functions.domain.text import ASCII_DECIMAL

STATUS_EVENTS = (
    "JobStarting",
    "JobStarted",
    "JobCompleted",
    "JobSucceeded",
    "JobTerminated",
    "JobStatusChanged",
)
PERIODIC_EVENTS = ("Hourly", "Daily", "TimeConstraintNear")
PARAMETERIZED_EVENTS = ("HoursElapsed", "JobCreditsUsed")
METHODS = ("Email", "SMS", "Webhook")

AUTOMATIC = "Automatic"
# HoursElapsed (hours) and JobCreditsUsed (credits) parameters: 4 decimal places, like credits.
PARAMETER_QUANTUM = Decimal("0.0001")
PARAMETER_LIMIT = Decimal(10) ** 11
# Bounds that keep a job record well inside DynamoDB's 400 KB item limit.
MAX_RULES = 20
MAX_EVENTS_PER_RULE = 20
NONE = "None"

# The events a job fires when it enters each status (docs/http-api.md "Notifications").
EVENTS_ON_ENTERING: dict[JobStatus, tuple[str, ...]] = {
    JobStatus.QUEUED: ("JobStatusChanged",),
    JobStatus.STARTING: ("JobStarting", "JobStatusChanged"),
    JobStatus.RUNNING: ("JobStarted", "JobStatusChanged"),
    JobStatus.SUCCEEDED: ("JobCompleted", "JobSucceeded", "JobStatusChanged"),
    JobStatus.TERMINATED: ("JobCompleted", "JobTerminated", "JobStatusChanged"),
}


@dataclass(frozen=True, slots=True)
class EventSpec:
    """One event of a rule: a name, and for HoursElapsed / JobCreditsUsed its positive parameter."""

    name: str
    parameter: Decimal | None = None

    def to_json(self) -> str | dict[str, int | float]:
        """The normalized JSON form: the name, or ``{name: n}``."""
        if self.parameter is None:
            return self.name
        value = self.parameter
        number: int | float = int(value) if value == value.to_integral_value() else float(value)
        return {self.name: number}


@dataclass(frozen=True, slots=True)
class NotificationRule:
    """Events to watch and the methods to tell them by."""

    events: tuple[EventSpec, ...]
    methods: tuple[str, ...]

    def to_json(self) -> dict[str, list[Any]]:
        """The normalized JSON form ``{"events": [...], "methods": [...]}``."""
        return {"events": [e.to_json() for e in self.events], "methods": list(self.methods)}


AUTOMATIC_RULES: tuple[NotificationRule, ...] = (
    NotificationRule(
        events=(
            EventSpec("JobStarting"),
            EventSpec("JobCompleted"),
            EventSpec("JobCreditsUsed", Decimal(20000)),
        ),
        methods=("Email",),
    ),
)


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else [value]


def _parse_event(raw: Any, path: str) -> EventSpec:
    valid = ", ".join([*STATUS_EVENTS, *PERIODIC_EVENTS, *(f'{{"{p}": n}}' for p in PARAMETERIZED_EVENTS)])
    if isinstance(raw, str):
        if raw in STATUS_EVENTS or raw in PERIODIC_EVENTS:
            return EventSpec(raw)
        if raw in PARAMETERIZED_EVENTS:
            raise ValidationFailed(f'Event {raw} takes a number: {{"{raw}": n}} with n > 0.', field=path)
        raise ValidationFailed(f"Unknown notification event {raw!r}; valid events are: {valid}.", field=path)
    if isinstance(raw, dict) and len(raw) == 1:
        ((name, value),) = raw.items()
        if name not in PARAMETERIZED_EVENTS:
            raise ValidationFailed(
                f"Unknown notification event {name!r}; valid events are: {valid}.", field=path
            )
        field = f"{path}.{name}"
        # A string is read as the number it spells in ASCII ("3", "0.5"); Decimal() alone would also
        # take Arabic-Indic or full-width digits and surrounding whitespace.
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float | str | Decimal)
            or (isinstance(value, str) and ASCII_DECIMAL.fullmatch(value) is None)
        ):
            raise ValidationFailed(f"{name} must be a number greater than 0, got {value!r}.", field=field)
        try:
            number = Decimal(str(value))
        except InvalidOperation:
            raise ValidationFailed(
                f"{name} must be a number greater than 0, got {value!r}.", field=field
            ) from None
        if not number.is_finite() or number <= 0:
            raise ValidationFailed(
                f"{name} must be a number greater than 0, got {credits_text(number)}.", field=field
            )
        # Bound first: quantize raises InvalidOperation once the result needs more digits than the
        # context's precision (28), e.g. 1e24 to 4 places.
        if number >= PARAMETER_LIMIT or number != number.quantize(PARAMETER_QUANTUM):
            raise ValidationFailed(
                f"{name} takes at most 4 decimal places and less than {PARAMETER_LIMIT:,}, "
                f"got {credits_text(number)}.",
                field=field,
            )
        return EventSpec(name, number)
    raise ValidationFailed(f"A notification event is a name or a one-key object; got {raw!r}.", field=path)


def _parse_rule(raw: Any, path: str) -> NotificationRule:
    if not isinstance(raw, dict):
        raise ValidationFailed(
            'A notification rule is an object {"events": [...], "methods": [...]}.', field=path
        )
    unknown = sorted(set(raw) - {"events", "methods"})
    if unknown:
        raise ValidationFailed(
            f"Unknown key {unknown[0]!r} in a notification rule; a rule has events and methods.",
            field=f"{path}.{unknown[0]}",
        )
    if "events" not in raw:
        raise ValidationFailed("A notification rule needs events.", field=f"{path}.events")
    events_raw = _as_list(raw["events"])
    if len(events_raw) > MAX_EVENTS_PER_RULE:
        raise ValidationFailed(
            f"A notification rule has at most {MAX_EVENTS_PER_RULE} events, got {len(events_raw)}.",
            field=f"{path}.events",
        )
    if not events_raw:
        raise ValidationFailed("A notification rule needs at least one event.", field=f"{path}.events")
    events = tuple(_parse_event(e, f"{path}.events[{i}]") for i, e in enumerate(events_raw))
    methods_raw = _as_list(raw.get("methods", ["Email"]))
    if not methods_raw:
        raise ValidationFailed("A notification rule needs at least one method.", field=f"{path}.methods")
    methods: list[str] = []
    for i, method in enumerate(methods_raw):
        if method not in METHODS:
            raise ValidationFailed(
                f"Unknown notification method {method!r}; valid methods are: {', '.join(METHODS)}.",
                field=f"{path}.methods[{i}]",
            )
        if method not in methods:
            methods.append(method)
    return NotificationRule(events=tuple(dict.fromkeys(events)), methods=tuple(methods))


def normalize_notifications(spec: Any, field: str = "notifications") -> tuple[NotificationRule, ...]:
    """Turn any accepted ``notifications`` form into rules.

    Parameters
    ----------
    spec : Any
        The request's ``notifications`` value (None means ``Automatic``).
    field : str
        JSON path of the value, for error messages.

    Returns
    -------
    tuple[NotificationRule, ...]
        The rules; empty for ``"None"``.

    Raises
    ------
    ValidationFailed
        With ``field`` pointing into the spec (e.g. ``notifications[0].events[1]``).
    """
    if spec is None or spec == AUTOMATIC:
        return AUTOMATIC_RULES
    if spec == NONE:
        return ()
    if isinstance(spec, str):
        return (NotificationRule(events=(_parse_event(spec, field),), methods=("Email",)),)
    if isinstance(spec, dict):
        return (_parse_rule(spec, f"{field}[0]"),)
    if isinstance(spec, list):
        if len(spec) > MAX_RULES:
            raise ValidationFailed(
                f"notifications has at most {MAX_RULES} rules, got {len(spec)}.", field=field
            )
        return tuple(_parse_rule(rule, f"{field}[{i}]") for i, rule in enumerate(spec))
    raise ValidationFailed(
        'notifications is "Automatic", "None", an event name, or a list of {"events", "methods"} rules.',
        field=field,
    )


def notifications_json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12, as OpenAPI 3.1 uses) of every form ``normalize_notifications`` takes.

    Parameters are numbers > 0 and < ``PARAMETER_LIMIT`` with at most 4 decimal places (``multipleOf``
    0.0001); rules and events per rule are bounded by ``MAX_RULES`` and ``MAX_EVENTS_PER_RULE``.
    """
    names = [*STATUS_EVENTS, *PERIODIC_EVENTS]
    parameter = {
        "type": "number",
        "exclusiveMinimum": 0,
        "exclusiveMaximum": int(PARAMETER_LIMIT),
        "multipleOf": float(PARAMETER_QUANTUM),
    }
    event: dict[str, Any] = {
        "anyOf": [
            {"type": "string", "enum": names},
            *(
                {
                    "type": "object",
                    "properties": {p: parameter},
                    "required": [p],
                    "additionalProperties": False,
                }
                for p in PARAMETERIZED_EVENTS
            ),
        ]
    }
    method = {"type": "string", "enum": list(METHODS)}
    rule = {
        "type": "object",
        "properties": {
            "events": {
                "anyOf": [
                    event,
                    {"type": "array", "items": event, "minItems": 1, "maxItems": MAX_EVENTS_PER_RULE},
                ]
            },
            "methods": {"anyOf": [method, {"type": "array", "items": method, "minItems": 1}]},
        },
        "required": ["events"],
        "additionalProperties": False,
    }
    return {
        "anyOf": [
            {"type": "null"},
            {"type": "string", "enum": [AUTOMATIC, NONE, *names]},
            rule,
            {"type": "array", "items": rule, "maxItems": MAX_RULES},
        ]
    }


def rules_to_json(rules: Sequence[NotificationRule]) -> list[dict[str, list[Any]]]:
    """The normalized JSON form of ``rules`` that the API returns and the job record stores."""
    return [rule.to_json() for rule in rules]


def rules_from_json(data: Sequence[dict[str, Any]]) -> tuple[NotificationRule, ...]:
    """Read back rules stored by ``rules_to_json`` (already valid)."""
    return normalize_notifications(list(data)) if data else ()


@dataclass(frozen=True, slots=True)
class DueNotification:
    """A notification a job owes: its exactly-once key, the event, the method and the status entered.

    ``key`` is ``"{event}#{occurrence}/{method}"``, e.g. ``JobStarting#1/Email``; occurrence is the
    index of the status entry in the job's history, so a retry's second start is a new occurrence.
    For a progress event, occurrence is the highest threshold reached and ``covers`` how many
    thresholds this one message stands for (those reached since the last message).
    """

    key: str
    event: str
    method: str
    status: JobStatus
    occurrence: int
    covers: int = 1


def due_status_notifications(
    rules: Sequence[NotificationRule], entered: Sequence[JobStatus]
) -> list[DueNotification]:
    """The status notifications a job owes for the statuses it entered.

    Parameters
    ----------
    rules : Sequence[NotificationRule]
        The job's normalized rules.
    entered : Sequence[JobStatus]
        The job's status history; index 0 is the Queued status it was submitted in (no event).

    Returns
    -------
    list[DueNotification]
        In history order, one per (status event, method) the rules ask for.
    """
    due: list[DueNotification] = []
    for occurrence, status in enumerate(entered):
        if occurrence == 0:
            continue
        for event in EVENTS_ON_ENTERING[status]:
            for rule in rules:
                if any(spec.name == event for spec in rule.events):
                    for method in rule.methods:
                        key = f"{event}#{occurrence}/{method}"
                        if all(d.key != key for d in due):
                            due.append(DueNotification(key, event, method, status, occurrence))
    return due
