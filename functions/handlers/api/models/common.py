"""Models and types every resource shares: credits in and out, JSON number checks, the error body."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
)

from functions.domain.credits import MAX_CREDITS
from functions.domain.machine_classes import MACHINE_CLASSES, GeoZone


class ApiModel(BaseModel):
    """The base of the API's request and response models: each is built on its first use
    (``defer_build``), so a cold start builds the few models its request needs, not the ~45 of every
    route (pydantic merges a subclass's ``model_config`` with this one)."""

    model_config = ConfigDict(defer_build=True)


def _credits_json(value: Decimal) -> float:
    # A quantized Decimal (≤ 4 places, < 1e11) round-trips exactly through a float's shortest repr,
    # so clients get a JSON number that reads back as the same decimal.
    return float(value)


Credits = Annotated[Decimal, PlainSerializer(_credits_json, return_type=float, when_used="json")]

# The longest timeConstraint: 30 days of Running time.
MAX_TIME_CONSTRAINT_SECONDS = 30 * 24 * 3600


def _json_number(value: Any) -> Any:
    """Credits arrive as JSON numbers: a string or a boolean is refused, not converted."""
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise ValueError("must be a number")
    return Decimal(str(value))


def _json_integer(value: Any) -> Any:
    """Whole numbers arrive as JSON numbers: ``600`` and ``600.0`` are the same number (JSON has one
    number type); a string, a boolean or a fraction is refused, not converted."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be a whole number")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("must be a whole number")
        return int(value)
    return value


# Credits in a request: a JSON number > 0, < MAX_CREDITS, at most 4 decimal places (docs/http-api.md).
CreditsIn = Annotated[
    Decimal,
    BeforeValidator(_json_number),
    WithJsonSchema(
        {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": int(MAX_CREDITS), "multipleOf": 0.0001}
    ),
]

# A count in a request (a compute's count, a quota limit, maxVcpus): a JSON number without a fraction,
# as JSON Schema's "integer" (2 and 2.0 alike); a string or a boolean is refused, not converted.
WholeNumber = Annotated[int, BeforeValidator(_json_integer)]

# timeConstraint in a request: whole seconds of Running time, > 0, at most 30 days, or null.
TimeConstraintIn = (
    Annotated[int, BeforeValidator(_json_integer), Field(gt=0, le=MAX_TIME_CONSTRAINT_SECONDS)] | None
)


def machine_class_field() -> Any:
    """``machineClass`` of ``POST /jobs`` and ``POST /estimate``: a name from ``GET /machine-classes``
    (``Basic1x8`` when absent)."""
    return Field(
        default="Basic1x8",
        description="A name from GET /machine-classes.",
        json_schema_extra={"enum": list(MACHINE_CLASSES)},
    )


def geo_zone_field(description: str) -> Any:
    """``geoZone`` of ``POST /jobs`` and ``POST /estimate`` (``Automatic`` when absent), described by
    ``description``."""
    return Field(
        default="Automatic",
        description=description,
        json_schema_extra={"enum": ["Automatic", *(zone.value for zone in GeoZone)]},
    )


def credit_constraint_field(description: str) -> Any:
    """``creditConstraint`` of ``POST /jobs`` and ``POST /estimate`` (a ``CreditsIn`` or null, the
    default), described by ``description``."""
    return Field(default=None, gt=0, lt=MAX_CREDITS, decimal_places=4, description=description)


class HealthView(ApiModel):
    """``GET /health``."""

    status: Literal["ok"]


class ErrorDetail(ApiModel):
    """The one error body of every failure."""

    code: str
    message: str
    field: str | None


class ErrorBody(ApiModel):
    """``{"error": {"code", "message", "field"}}``."""

    error: ErrorDetail
