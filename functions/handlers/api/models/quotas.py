"""Models of the quota routes: ``GET /account/quotas`` and ``PUT /admin/accounts/{accountId}/quotas``."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from functions.domain.quotas import MAX_LIMIT
from functions.handlers.api.models.common import ApiModel, WholeNumber
from functions.logic.quotas import QuotaReport

FamilyName = Literal["Basic", "Memory", "Compute", "GPU"]
ZoneName = Literal["UnitedStates", "EuropeanUnion"]


class QuotaView(ApiModel):
    """One machine family in one geo zone: its limit, what the account's jobs hold (``inUse``), what
    its held jobs wait for (``queued``: an array's children not yet in a span count there) and what
    its dedicated computes reserve (``reserved``), in ``unit`` (vCPUs; GPUs for the GPU family). A job
    (an array's span) is admitted, and a compute created, only while ``inUse + reserved`` plus its own
    units stay within ``limit``."""

    family: FamilyName
    geoZone: ZoneName
    unit: Literal["vCPU", "GPU"]
    limit: int
    inUse: int
    queued: int
    reserved: int = Field(description="Units reserved by the account's dedicated computes (Stopped ones too)")


class QuotaTotalView(ApiModel):
    """The account's total over every family and zone, in vCPUs."""

    unit: Literal["vCPU"] = "vCPU"
    limit: int
    inUse: int
    queued: int
    reserved: int = Field(description="vCPUs reserved by the account's dedicated computes (Stopped ones too)")


class QuotasView(ApiModel):
    """``GET /account/quotas`` (and the answer of the admin's ``PUT``)."""

    quotas: list[QuotaView]
    total: QuotaTotalView


class QuotaLimitIn(ApiModel):
    """One limit an operator sets."""

    model_config = ConfigDict(extra="forbid")

    family: FamilyName
    geoZone: ZoneName
    # A JSON number without a fraction; "2" and true are refused, as every other count of the API is.
    limit: WholeNumber = Field(ge=0, le=MAX_LIMIT, description="vCPUs (GPUs for the GPU family) held at once")


class QuotasBody(ApiModel):
    """``PUT /admin/accounts/{accountId}/quotas``: the listed entries replace those limits (others keep
    theirs); ``total`` (vCPUs) replaces the total when given (null: back to the default)."""

    model_config = ConfigDict(extra="forbid")

    quotas: list[QuotaLimitIn] = Field(default_factory=list, max_length=8)
    total: WholeNumber | None = Field(default=None, ge=0, le=MAX_LIMIT)


def quotas_view(report: QuotaReport) -> QuotasView:
    """The API's view of a quota report."""
    return QuotasView(
        quotas=[
            QuotaView(
                family=line.key.family.value,
                geoZone=line.key.zone.value,
                unit=line.unit.value,
                limit=line.limit,
                inUse=line.in_use,
                queued=line.queued,
                reserved=line.reserved,
            )
            for line in report.lines
        ],
        total=QuotaTotalView(
            limit=report.total_limit,
            inUse=report.total_in_use,
            queued=report.total_queued,
            reserved=report.total_reserved,
        ),
    )
