"""Machine classes, the pricing table and geo zones (docs/http-api.md "Machine classes", docs/architecture.md
"Credits")."""

from decimal import Decimal

import pytest

from functions.domain.errors import ValidationFailed
from functions.domain.machine_classes import (
    DEFAULT_MACHINE_CLASS,
    MACHINE_CLASSES,
    GeoZone,
    machine_class,
    resolve_geo_zone,
)

# name: (vcpus, memoryGiB, gpus, gpuType) from docs/http-api.md, credits/hour from docs/architecture.md, in
# docs/http-api.md's order.
EXPECTED = {
    "Basic1x8": (1, 8, 0, None, Decimal(60)),
    "Basic2x8": (2, 8, 0, None, Decimal(90)),
    "Basic4x16": (4, 16, 0, None, Decimal(180)),
    "Memory8x64": (8, 64, 0, None, Decimal(480)),
    "Memory16x128": (16, 128, 0, None, Decimal(960)),
    "Memory192x1536": (192, 1536, 0, None, Decimal(11500)),
    "Compute64x128": (64, 128, 0, None, Decimal(2700)),
    "Compute192x384": (192, 384, 0, None, Decimal(8200)),
    "GPU1xL40S": (8, 64, 1, "L40S", Decimal(2300)),
    "GPU4xL4": (48, 192, 4, "L4", Decimal(4700)),
}


def test_exactly_the_ten_classes_in_api_order():
    assert list(MACHINE_CLASSES) == list(EXPECTED)


@pytest.mark.parametrize(("name", "expected"), EXPECTED.items())
def test_class_matches_api_and_pricing_table(name, expected):
    vcpus, memory_gib, gpus, gpu_type, credits_per_hour = expected

    mc = machine_class(name)

    assert mc.name == name
    assert (mc.vcpus, mc.memory_gib, mc.gpus, mc.gpu_type) == (vcpus, memory_gib, gpus, gpu_type)
    assert isinstance(mc.credits_per_hour, Decimal)
    assert mc.credits_per_hour == credits_per_hour
    assert mc.memory_mib == memory_gib * 1024


def test_default_class_is_basic1x8():
    assert DEFAULT_MACHINE_CLASS == "Basic1x8"
    assert machine_class(DEFAULT_MACHINE_CLASS) is MACHINE_CLASSES["Basic1x8"]


@pytest.mark.parametrize("name", ["Nope", "", "basic1x8", "Basic1x8 ", "GPU1xL4", "Basic"])
def test_unknown_class_is_a_validation_error_naming_every_valid_class(name):
    with pytest.raises(ValidationFailed) as caught:
        machine_class(name)

    assert caught.value.field == "machineClass"
    assert caught.value.status == 400
    assert caught.value.code == "ValidationError"
    for valid in EXPECTED:
        assert valid in caught.value.message


@pytest.mark.parametrize(
    ("requested", "zone"),
    [
        ("Automatic", GeoZone.UNITED_STATES),
        ("UnitedStates", GeoZone.UNITED_STATES),
        ("EuropeanUnion", GeoZone.EUROPEAN_UNION),
    ],
)
def test_resolve_geo_zone(requested, zone):
    assert resolve_geo_zone(requested) is zone


def test_geo_zone_values_are_the_api_names():
    assert {z.value for z in GeoZone} == {"UnitedStates", "EuropeanUnion"}


@pytest.mark.parametrize("requested", ["", "automatic", "unitedstates", "US", "EU", "Mars", " UnitedStates"])
def test_unknown_geo_zone_is_a_validation_error(requested):
    with pytest.raises(ValidationFailed) as caught:
        resolve_geo_zone(requested)

    assert caught.value.field == "geoZone"
    for valid in ("Automatic", "UnitedStates", "EuropeanUnion"):
        assert valid in caught.value.message


def test_volume_limits_by_class_and_their_text() -> None:
    from functions.domain.machine_classes import GIB, machine_class_of, volume_limit_text

    basic = MACHINE_CLASSES["Basic1x8"]
    assert (basic.log_limit_bytes, basic.output_limit_bytes) == (GIB, 10 * GIB)
    memory = MACHINE_CLASSES["Memory8x64"]
    assert (memory.log_limit_bytes, memory.output_limit_bytes) == (4 * GIB, 50 * GIB)
    assert machine_class_of(8, 64 * 1024, 1) is MACHINE_CLASSES["GPU1xL40S"]
    assert machine_class_of(8, 64 * 1024, 0) is memory
    assert machine_class_of(3, 1024, 0) is None
    assert [volume_limit_text(n) for n in (GIB, 3 * GIB // 2, 48 * 1024**2, 512 * 1024, 100)] == [
        "1 GiB",
        "1.5 GiB",
        "48 MiB",
        "512 KiB",
        "100 bytes",
    ]
