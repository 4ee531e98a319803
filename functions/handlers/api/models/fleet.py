"""Fleet control and audit models (docs/http-api.md version 2 "Quotas and fleet", admin role)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from functions.domain.fleet import MAX_REASON_CHARS, MAX_VCPUS_LIMIT, AuditEntry, QueueState
from functions.domain.text import LABEL_PATTERN
from functions.domain.timefmt import to_api_time
from functions.handlers.api.models.common import ApiModel, WholeNumber
from functions.logic.fleet import MachineClassStatus

StateName = Literal["ENABLED", "DISABLED"]


class DisableClassBody(ApiModel):
    """``POST /admin/machine-classes/{class}/zones/{zone}/disable`` body."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(
        min_length=1,
        max_length=MAX_REASON_CHARS,
        pattern=LABEL_PATTERN,
        description="Why (one line): refused submits answer 503 ClassUnavailable with it.",
    )


class EnableClassBody(ApiModel):
    """``POST /admin/machine-classes/{class}/zones/{zone}/enable`` body (optional)."""

    model_config = ConfigDict(extra="forbid")

    reason: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_REASON_CHARS,
        pattern=LABEL_PATTERN,
        description="Why (one line), for the audit log.",
    )


class CapacityBody(ApiModel):
    """``PUT /admin/machine-classes/{class}/zones/{zone}/capacity`` body."""

    model_config = ConfigDict(extra="forbid")

    # A JSON number without a fraction; "2" and true are refused, as every other count of the API is.
    maxVcpus: WholeNumber = Field(
        ge=0,
        le=MAX_VCPUS_LIMIT,
        description="maxvCpus of each compute environment of the class's job queue (0 stops new instances).",
    )


class ComputeEnvironmentView(ApiModel):
    """A compute environment of a class's job queue."""

    name: str
    state: str = Field(description="AWS Batch's state: ENABLED or DISABLED.")
    maxVcpus: int | None


class MachineClassStateView(ApiModel):
    """A machine class in a geo zone, as operators see it."""

    machineClass: str
    geoZone: str
    state: StateName = Field(description="DISABLED while an operator has the class out of service here.")
    reason: str | None = Field(description="The operator's reason while DISABLED.")
    changedBy: str | None
    changedAt: str | None
    queueState: StateName | None = Field(
        description="The job queue's state in AWS Batch (null: no such queue)."
    )
    runningJobs: int = Field(description="Jobs Starting or Running.")
    queuedJobs: int = Field(description="Jobs Queued.")
    maxVcpus: int = Field(description="The vCPUs its compute environments may run at once, all together.")
    computeEnvironments: list[ComputeEnvironmentView]
    sharedWith: list[str] = Field(
        description="Other classes on these compute environments (capacity is shared)."
    )


class MachineClassStatesView(ApiModel):
    """``GET /admin/machine-classes``."""

    machineClasses: list[MachineClassStateView]


class AuditEntryView(ApiModel):
    """One operator action."""

    entryId: str
    at: str
    actor: str = Field(description="The operator's account id.")
    action: str = Field(
        description=(
            "DisableMachineClass, EnableMachineClass, SetCapacity, GrantCredits, SetQuotas, or CreateAccount "
            "(the local stack's POST /admin/accounts)."
        )
    )
    target: str = Field(description="machine-classes/<class>/zones/<zone> or accounts/<accountId>.")
    before: dict[str, Any]
    after: dict[str, Any]
    reason: str | None


class AuditListView(ApiModel):
    """``GET /admin/audit``: newest first."""

    entries: list[AuditEntryView]
    nextToken: str | None


def machine_class_state_view(status: MachineClassStatus) -> MachineClassStateView:
    """Map a class's status to the API's body."""
    availability = status.availability
    queue_state = status.queue_state if status.queue_state in ("ENABLED", "DISABLED") else None
    return MachineClassStateView(
        machineClass=status.machine_class,
        geoZone=status.geo_zone.value,
        state=QueueState.DISABLED.value if availability.disabled else QueueState.ENABLED.value,
        reason=availability.reason if availability.disabled else None,
        changedBy=availability.changed_by,
        changedAt=to_api_time(availability.changed_at),
        queueState=queue_state,  # type: ignore[arg-type]
        runningJobs=status.load.running,
        queuedJobs=status.load.queued,
        maxVcpus=status.max_vcpus,
        computeEnvironments=[
            ComputeEnvironmentView(name=ce.name, state=ce.state, maxVcpus=ce.max_vcpus)
            for ce in status.compute_environments
        ],
        sharedWith=list(status.shared_with),
    )


def audit_entry_view(entry: AuditEntry) -> AuditEntryView:
    """Map an audit entry to the API's body."""
    return AuditEntryView(
        entryId=entry.entry_id,
        at=to_api_time(entry.at) or "",
        actor=entry.actor,
        action=entry.action.value,
        target=entry.target,
        before=entry.before,
        after=entry.after,
        reason=entry.reason,
    )
