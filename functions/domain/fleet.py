"""Fleet control: which machine classes take new jobs in which geo zone, and the audit log of what
operators changed.

An operator takes a (machine class, geo zone) out of service with a reason; while it is out, a
submit for it answers 503 ``ClassUnavailable`` with that reason. What already runs or waits in AWS
Batch is left alone: a job queue in state ``DISABLED`` accepts no new job but still runs the jobs
already in it ("Jobs that are already in the queue can finish", AWS Batch API reference,
``UpdateJobQueue``, ``state``).

Pure rules only: no AWS SDK, no clock (times are passed in).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from functions.domain.errors import ServiceError, ValidationFailed
from functions.domain.machine_classes import MACHINE_CLASSES, GeoZone

# Audit entries are kept as long as job records (docs/architecture.md "Retention": 400 days), then DynamoDB
# TTL
# removes them.
AUDIT_RETENTION = timedelta(days=400)
MAX_REASON_CHARS = 500
# AWS Batch takes any non-negative maxvCpus for a managed compute environment (at least its minvCpus,
# 0 here); the service caps what an operator may type at a bound no region's quota reaches.
MAX_VCPUS_LIMIT = 100_000
FAMILY_PATTERN = re.compile(r"^([A-Za-z]+?)(?=\d)")


class QueueState(StrEnum):
    """An AWS Batch job queue's ``state``."""

    ENABLED = "ENABLED"
    DISABLED = "DISABLED"


class AuditAction(StrEnum):
    """What an operator did (``GET /admin/audit``'s ``action``)."""

    DISABLE_CLASS = "DisableMachineClass"
    ENABLE_CLASS = "EnableMachineClass"
    SET_CAPACITY = "SetCapacity"
    GRANT_CREDITS = "GrantCredits"
    SET_QUOTAS = "SetQuotas"
    CREATE_ACCOUNT = "CreateAccount"  # the local stack's POST /admin/accounts (Cognito makes them deployed)


class ClassUnavailable(ServiceError):
    """A submit for a (machine class, geo zone) an operator took out of service (503); the message
    carries the operator's reason, so it is shown to the client (unlike other 5xx)."""

    status = 503
    code = "ClassUnavailable"
    shown_to_client = True


@dataclass(frozen=True, slots=True)
class ClassAvailability:
    """Whether a machine class takes new jobs in a geo zone.

    Attributes
    ----------
    machine_class : str
        ``Basic2x8``.
    geo_zone : GeoZone
    disabled : bool
        True while an operator has it out of service.
    reason : str | None
        The operator's reason (while disabled; the last one given otherwise is dropped).
    changed_by : str | None
        The operator's account id (Cognito ``sub``) of the last change.
    changed_at : datetime | None
        When the last change was made (UTC).
    version : int
        Counts the changes: each write is conditional on the version it read.
    """

    machine_class: str
    geo_zone: GeoZone
    disabled: bool = False
    reason: str | None = None
    changed_by: str | None = None
    changed_at: datetime | None = None
    version: int = 0

    def view(self) -> dict[str, Any]:
        """The audit log's ``before``/``after`` of this state: ``{"state", "reason"}``."""
        state = QueueState.DISABLED if self.disabled else QueueState.ENABLED
        return {"state": state.value, "reason": self.reason}


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One operator action, as ``GET /admin/audit`` shows it.

    Attributes
    ----------
    entry_id : str
        Unique; deterministic for a request made with an ``Idempotency-Key`` (see
        ``functions.logic.audit.audit_entry_id``).
    at : datetime
        When the change was made (UTC).
    actor : str
        The operator's account id (Cognito ``sub``).
    action : AuditAction
    target : str
        What was changed: ``machine-classes/Basic2x8/zones/EuropeanUnion``, ``accounts/alice``.
    before, after : dict
        The changed state before and after (JSON values).
    reason : str | None
        The operator's reason, when the action takes one.
    """

    entry_id: str
    at: datetime
    actor: str
    action: AuditAction
    target: str
    before: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)
    reason: str | None = None

    @property
    def expires_at(self) -> datetime:
        """When DynamoDB TTL may remove the entry (``at`` + 400 days)."""
        return self.at + AUDIT_RETENTION


def class_target(machine_class: str, geo_zone: GeoZone) -> str:
    """The audit target of a (class, zone): ``machine-classes/Basic2x8/zones/EuropeanUnion``."""
    return f"machine-classes/{machine_class}/zones/{geo_zone.value}"


def account_target(account_id: str) -> str:
    """The audit target of an account: ``accounts/alice``."""
    return f"accounts/{account_id}"


def request_digest(*parts: str) -> str:
    """A stable id (32 hex characters, SHA-256) of a request's identity, e.g. (actor, route, key):
    the same retried request yields the same ledger and audit ids, so a conditional put of them
    makes its change once."""
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


def machine_family(name: str) -> str:
    """A machine class's family, the letters before its first digit: ``Basic2x8`` → ``Basic``,
    ``GPU4xL4`` → ``GPU`` (docs/http-api.md's families: Basic, Memory, Compute, GPU)."""
    found = FAMILY_PATTERN.match(name)
    return found.group(1) if found else name


def check_machine_class(name: str) -> str:
    """``name`` if it is one of docs/http-api.md's machine classes.

    Raises ``ValidationFailed`` (``field="machineClass"``, a path parameter) naming the valid ones.
    """
    if name not in MACHINE_CLASSES:
        raise ValidationFailed(
            f"Unknown machine class {name!r}; valid machine classes are: {', '.join(MACHINE_CLASSES)}.",
            field="machineClass",
        )
    return name


def check_geo_zone(name: str, deployed: list[GeoZone]) -> GeoZone:
    """The geo zone named ``name`` (``Automatic`` is not one here: an operator names the zone).

    Raises ``ValidationFailed`` (``field="geoZone"``) for a name that is no zone of this deployment.
    """
    valid = ", ".join(z.value for z in deployed)
    try:
        zone = GeoZone(name)
    except ValueError:
        raise ValidationFailed(
            f"Unknown geo zone {name!r}; geo zones are: {valid}.", field="geoZone"
        ) from None
    if zone not in deployed:
        raise ValidationFailed(
            f"Geo zone {name} is not deployed here; geo zones are: {valid}.", field="geoZone"
        )
    return zone


def unavailable_message(state: ClassAvailability) -> str:
    """What a refused submit says: ``Basic2x8 is not taking new jobs in EuropeanUnion: <reason>``."""
    message = f"{state.machine_class} is not taking new jobs in {state.geo_zone.value}"
    return f"{message}: {state.reason}" if state.reason else f"{message}."


def ensure_available(state: ClassAvailability | None) -> None:
    """Raise ``ClassUnavailable`` (with the operator's reason) when ``state`` is disabled; None (no
    state stored) is in service."""
    if state is not None and state.disabled:
        raise ClassUnavailable(unavailable_message(state), field="machineClass")


def disabled(state: ClassAvailability, reason: str, actor: str, now: datetime) -> ClassAvailability:
    """``state`` taken out of service with ``reason`` (a new version)."""
    return ClassAvailability(
        machine_class=state.machine_class,
        geo_zone=state.geo_zone,
        disabled=True,
        reason=reason,
        changed_by=actor,
        changed_at=now,
        version=state.version + 1,
    )


def enabled(state: ClassAvailability, actor: str, now: datetime) -> ClassAvailability:
    """``state`` back in service (a new version; the reason is dropped)."""
    return ClassAvailability(
        machine_class=state.machine_class,
        geo_zone=state.geo_zone,
        disabled=False,
        reason=None,
        changed_by=actor,
        changed_at=now,
        version=state.version + 1,
    )
