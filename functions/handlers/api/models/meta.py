"""Models of ``/machine-classes``, ``/runtime`` and ``/estimate``."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field, WithJsonSchema

from functions.domain.machine_classes import MachineClass
from functions.handlers.api.models.common import (
    MAX_TIME_CONSTRAINT_SECONDS,
    ApiModel,
    Credits,
    CreditsIn,
    TimeConstraintIn,
    _json_number,
    credit_constraint_field,
    geo_zone_field,
    machine_class_field,
)


class MachineClassView(ApiModel):
    """A machine class with its price."""

    name: str
    vcpus: int
    memoryGiB: int
    gpus: int
    gpuType: str | None
    creditsPerHour: Credits


class MachineClassesView(ApiModel):
    """``GET /machine-classes``."""

    machineClasses: list[MachineClassView]


def machine_class_view(machine: MachineClass) -> MachineClassView:
    """Map a machine class to the API's ``MachineClass``."""
    return MachineClassView(
        name=machine.name,
        vcpus=machine.vcpus,
        memoryGiB=machine.memory_gib,
        gpus=machine.gpus,
        gpuType=machine.gpu_type,
        creditsPerHour=machine.credits_per_hour,
    )


class RuntimeView(ApiModel):
    """``GET /runtime`` (extension): what jobs run with."""

    pythonVersion: str = Field(
        description="The Python (major.minor) a job runs on when it names none (POST /jobs pythonVersion)."
    )
    pythonVersions: list[str] = Field(
        description="Every Python (major.minor) jobs run on, oldest first: POST /jobs pythonVersion takes "
        "one of them (the SDK sends its own, so a pickled function runs in the version that made it)."
    )
    interpreters: dict[str, str] = Field(
        description="The local stack: the interpreter each version runs in (found on the machine at "
        'start), e.g. {"3.12": "CPython 3.12.1 (/usr/bin/python3.12)"}; empty when deployed (each '
        "version has its worker image)."
    )


_IGNORED = "As in POST /jobs; not used by the estimate."
#: An array is not estimated whole (each child is charged as one job): estimate one child and multiply.
_NULL_ONLY = {"type": "null", "description": "Refused unless null: estimate one child and multiply."}


class EstimateBody(ApiModel):
    """``POST /estimate`` body: as ``POST /jobs`` (its payload optional and unused) plus ``seconds``."""

    model_config = ConfigDict(extra="forbid")

    seconds: Annotated[
        Decimal,
        BeforeValidator(_json_number),
        WithJsonSchema({"type": "number", "exclusiveMinimum": 0, "maximum": MAX_TIME_CONSTRAINT_SECONDS}),
    ] = Field(gt=0, le=MAX_TIME_CONSTRAINT_SECONDS, description="Seconds of Running time to price.")
    machineClass: str = machine_class_field()
    geoZone: str = geo_zone_field(
        "Automatic | UnitedStates | EuropeanUnion (prices are the same in every zone)."
    )
    creditConstraint: CreditsIn | None = credit_constraint_field("Caps the estimate, as it caps a job.")
    timeConstraint: TimeConstraintIn = Field(
        default=None, description="Cuts the run, as it cuts a job (seconds)."
    )
    code: Any = Field(default=None, description=_IGNORED)
    command: Any = Field(default=None, description=_IGNORED)
    pickle: Any = Field(default=None, description=_IGNORED)
    inputKey: Any = Field(default=None, description=_IGNORED)
    pythonVersion: Any = Field(default=None, description=_IGNORED)
    name: Any = Field(default=None, description=_IGNORED)
    notifications: Any = Field(default=None, description=_IGNORED)
    parallelism: Any = Field(
        default=None,
        description="Ignored: an array is estimated a charge at a time. Without parallelism each item is "
        "one charge (price one item's seconds); with it each container is one charge (price one "
        "container's seconds: the items it runs one after another), split over its items.",
    )
    arrayItems: Annotated[Any, WithJsonSchema(_NULL_ONLY)] = Field(default=None)
    arrayItemsKey: Annotated[Any, WithJsonSchema(_NULL_ONLY)] = Field(default=None)


class EstimateView(ApiModel):
    """``POST /estimate`` → what the run would be charged."""

    credits: Credits = Field(description="Credits the run would be charged.")
    creditsPerHour: Credits = Field(description="The machine class's price.")
    minimumSeconds: int = Field(description="The shortest run charged (seconds).")
    billedSeconds: int = Field(description="Extension: the seconds charged (whole, at least minimumSeconds).")
