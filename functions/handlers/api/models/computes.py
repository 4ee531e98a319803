"""The API's models of dedicated computes (``/account/computes``), and their mapping from the domain."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from functions.domain.computes import (
    MAX_COUNT,
    MAX_DAILY_SCHEDULES,
    MAX_IDLE_STOP_MINUTES,
    Compute,
    Schedules,
)
from functions.domain.machine_classes import MACHINE_CLASSES
from functions.domain.text import CLOCK_PATTERN
from functions.domain.timefmt import to_api_time
from functions.handlers.api.models.common import ApiModel, Credits, WholeNumber, geo_zone_field

ComputeStatusName = Literal["Creating", "Starting", "Running", "Stopping", "Stopped", "Deleting", "Failed"]
_CLOCK = CLOCK_PATTERN


class PutComputeBody(ApiModel):
    """``PUT /account/computes/{name}`` body."""

    model_config = ConfigDict(extra="forbid")

    machineClass: str = Field(
        min_length=1,
        max_length=64,
        description="A name from GET /machine-classes.",
        json_schema_extra={"enum": list(MACHINE_CLASSES)},
    )
    geoZone: str = geo_zone_field("Automatic | UnitedStates | EuropeanUnion.")
    # Strict: a JSON number, not "2" (as creditConstraint and the other numbers of this API).
    count: WholeNumber = Field(
        default=1, ge=1, le=MAX_COUNT, description=f"Machines of the class (1..{MAX_COUNT})."
    )


class DailyScheduleModel(ApiModel):
    """Start and/or stop the compute every day at a local time."""

    model_config = ConfigDict(extra="forbid")

    start: str | None = Field(default=None, pattern=_CLOCK, description="HH:MM (24 h) local time to start.")
    stop: str | None = Field(default=None, pattern=_CLOCK, description="HH:MM (24 h) local time to stop.")
    timeZone: str = Field(
        min_length=1, max_length=64, description="IANA time zone, e.g. Europe/Berlin or UTC."
    )


class SchedulesBody(ApiModel):
    """``PUT /account/computes/{name}/schedules`` body (replaces the compute's schedules)."""

    model_config = ConfigDict(extra="forbid")

    idleStopMinutes: int | None = Field(
        default=None,
        ge=1,
        le=MAX_IDLE_STOP_MINUTES,
        description="Stop the compute once no job has run on it for this many minutes (null: never).",
    )
    daily: list[DailyScheduleModel] = Field(default_factory=list, max_length=MAX_DAILY_SCHEDULES)


class ComputeView(ApiModel):
    """docs/http-api.md's ``Compute``."""

    name: str
    machineClass: str
    geoZone: str
    count: int
    vcpus: int = Field(description="Extension: count x the class's vCPUs (held of the quota until deleted).")
    creditsPerHour: Credits = Field(description="Extension: what an hour Running costs (class rate x count).")
    status: ComputeStatusName
    statusReason: str | None
    schedules: SchedulesBody
    creditsSpent: Credits = Field(description="Credits settled so far (every run).")
    runningSeconds: int = Field(description="Extension: seconds billed so far (every run).")
    runningSince: str | None = Field(
        description="Extension: when the current billed run began: its start request (null unless "
        "Starting or Running)."
    )
    startPending: bool = Field(
        description="Extension: a start waits: a Creating compute starts once it is ready, a Stopping "
        "one once it has stopped; a stop cancels it."
    )
    createdAt: str


class ComputeListView(ApiModel):
    """``GET /account/computes``."""

    computes: list[ComputeView]


def schedules_view(schedules: Schedules) -> SchedulesBody:
    """Map schedules to the API's shape."""
    return SchedulesBody(
        idleStopMinutes=schedules.idle_stop_minutes,
        daily=[
            DailyScheduleModel(
                start=d.start.strftime("%H:%M") if d.start else None,
                stop=d.stop.strftime("%H:%M") if d.stop else None,
                timeZone=d.time_zone,
            )
            for d in schedules.daily
        ],
    )


def compute_view(compute: Compute) -> ComputeView:
    """Map a compute to the API's ``Compute``."""
    return ComputeView(
        name=compute.name,
        machineClass=compute.machine_class,
        geoZone=compute.geo_zone.value,
        count=compute.count,
        vcpus=compute.vcpus,
        creditsPerHour=compute.credits_per_hour,
        status=compute.status.value,
        statusReason=compute.status_reason,
        schedules=schedules_view(compute.schedules),
        creditsSpent=compute.credits_spent,
        runningSeconds=compute.running_seconds,
        runningSince=to_api_time(compute.running_since),
        startPending=compute.start_pending,
        createdAt=to_api_time(compute.created_at) or "",
    )
