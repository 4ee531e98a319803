"""Machine classes, geo zones and the one pricing table.

The table is docs/http-api.md's "Machine classes and geo zones" with docs/architecture.md's "Credits" prices:
a credit is
priced near $0.001 of on-demand compute, so the shortest Basic1x8 job (the 60-second minimum) costs
exactly 1 credit.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum

from functions.domain.errors import ValidationFailed

GIB = 1024**3


class GeoZone(StrEnum):
    """Where a job's compute, inputs, outputs and logs live."""

    UNITED_STATES = "UnitedStates"
    EUROPEAN_UNION = "EuropeanUnion"


AUTOMATIC_ZONE = "Automatic"
DEFAULT_ZONE = GeoZone.UNITED_STATES


@dataclass(frozen=True, slots=True)
class MachineClass:
    """One machine class.

    Attributes
    ----------
    name : str
        The class's name as the API spells it (``Basic1x8``).
    vcpus : int
        Virtual CPUs a job of this class gets.
    memory_gib : int
        Memory in GiB.
    gpus : int
        Number of GPUs (0 for CPU classes).
    gpu_type : str | None
        ``L40S`` or ``L4``; None for CPU classes.
    credits_per_hour : Decimal
        Price in credits per hour of Running time.
    """

    name: str
    vcpus: int
    memory_gib: int
    gpus: int
    gpu_type: str | None
    credits_per_hour: Decimal

    @property
    def memory_mib(self) -> int:
        """Memory in MiB, the unit AWS Batch's ``MEMORY`` resource requirement takes."""
        return self.memory_gib * 1024

    @property
    def log_limit_bytes(self) -> int:
        """Most console output (bytes, stdout and stderr together) one job of this class may write
        before it is ended with ``Log limit of … exceeded``: 1 GiB for the Basic classes, 4 GiB for the
        larger ones (their jobs run longer on more cores). A bound of the service, not of AWS:
        CloudWatch Logs itself takes any volume, billed per GB ingested."""
        return (1 if self.name.startswith("Basic") else 4) * GIB

    @property
    def output_limit_bytes(self) -> int:
        """Most bytes of files one job of this class may keep in its working directory (its outputs
        and temporary files) before it is ended with ``Output limit of … exceeded``: 10 GiB for the
        Basic classes, 50 GiB for the larger ones (AWS Batch's default 30 GiB container storage
        grows with the instance's volume; these bound what one job may leave for upload)."""
        return (10 if self.name.startswith("Basic") else 50) * GIB


_CLASSES: tuple[MachineClass, ...] = (
    MachineClass("Basic1x8", 1, 8, 0, None, Decimal(60)),
    MachineClass("Basic2x8", 2, 8, 0, None, Decimal(90)),
    MachineClass("Basic4x16", 4, 16, 0, None, Decimal(180)),
    MachineClass("Memory8x64", 8, 64, 0, None, Decimal(480)),
    MachineClass("Memory16x128", 16, 128, 0, None, Decimal(960)),
    MachineClass("Memory192x1536", 192, 1536, 0, None, Decimal(11500)),
    MachineClass("Compute64x128", 64, 128, 0, None, Decimal(2700)),
    MachineClass("Compute192x384", 192, 384, 0, None, Decimal(8200)),
    MachineClass("GPU1xL40S", 8, 64, 1, "L40S", Decimal(2300)),
    MachineClass("GPU4xL4", 48, 192, 4, "L4", Decimal(4700)),
)

MACHINE_CLASSES: dict[str, MachineClass] = {mc.name: mc for mc in _CLASSES}
DEFAULT_MACHINE_CLASS = "Basic1x8"


def machine_class(name: str) -> MachineClass:
    """Look up a machine class by name.

    Raises
    ------
    ValidationFailed
        ``field="machineClass"``, naming the valid classes, when ``name`` is not one.
    """
    try:
        return MACHINE_CLASSES[name]
    except KeyError:
        valid = ", ".join(MACHINE_CLASSES)
        raise ValidationFailed(
            f"Unknown machine class {name!r}; valid machine classes are: {valid}.", field="machineClass"
        ) from None


def machine_class_of(vcpus: int, memory_mib: int, gpus: int) -> MachineClass | None:
    """The machine class with exactly these resources (what a Batch submission carries), or None.

    Every class has its own (vCPUs, MiB, GPUs) triple, so the answer is unique.
    """
    for candidate in _CLASSES:
        if (candidate.vcpus, candidate.memory_mib, candidate.gpus) == (vcpus, memory_mib, gpus):
            return candidate
    return None


def volume_limit_text(limit_bytes: int) -> str:
    """A volume limit as ``statusReason`` shows it: ``1 GiB``, ``1.5 GiB``, ``300 MiB``, ``512 KiB``,
    ``100 bytes`` (binary units, at most one decimal, trailing ``.0`` dropped)."""
    for unit, size in (("GiB", GIB), ("MiB", 1024**2), ("KiB", 1024)):
        if limit_bytes >= size:
            text = f"{limit_bytes / size:.1f}".removesuffix(".0")
            return f"{text} {unit}"
    return f"{limit_bytes} bytes"


def resolve_geo_zone(requested: str) -> GeoZone:
    """Turn the request's ``geoZone`` (``Automatic`` or a zone name) into a zone.

    Raises
    ------
    ValidationFailed
        ``field="geoZone"`` for anything else.
    """
    if requested == AUTOMATIC_ZONE:
        return DEFAULT_ZONE
    try:
        return GeoZone(requested)
    except ValueError:
        valid = ", ".join([AUTOMATIC_ZONE, *(z.value for z in GeoZone)])
        raise ValidationFailed(
            f"Unknown geo zone {requested!r}; valid geo zones are: {valid}.", field="geoZone"
        ) from None
