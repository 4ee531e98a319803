"""Models of ``/machine-classes``."""

from __future__ import annotations

from pydantic import (
    BaseModel,
)

from functions.domain.machine_classes import MachineClass
from functions.handlers.api.models.common import Credits


class MachineClassView(BaseModel):
    """A machine class with its price."""

    name: str
    vcpus: int
    memoryGiB: int
    gpus: int
    gpuType: str | None
    creditsPerHour: Credits


class MachineClassesView(BaseModel):
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
