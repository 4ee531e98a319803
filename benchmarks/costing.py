"""The control-plane cost of one job, from what it asked of AWS and the one price table
(``benchmarks/aws_prices.toml``: us-east-1 list prices with their source pages and the date they
were written down).

Pure arithmetic on ``Decimal``: :func:`job_cost` takes the counts a benchmark measured
(:class:`ControlPlaneUsage`) and returns each line's dollars and the total as a share of a credit.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

PRICES_FILE = Path(__file__).with_name("aws_prices.toml")
MILLION = Decimal(1_000_000)
MIB_PER_GB = Decimal(1024)  # Lambda bills GB-seconds of the configured memory in MiB / 1024


@dataclass(frozen=True)
class Prices:
    """The price table: ``sections[section][name]`` as Decimal dollars, plus its metadata."""

    sections: Mapping[str, Mapping[str, Decimal]]
    written: str
    status: str
    sources: Mapping[str, str]

    def __getitem__(self, path: str) -> Decimal:
        """``prices["dynamodb.write_request_unit_per_million"]``; ``KeyError`` names what is missing."""
        section, _, name = path.partition(".")
        try:
            return self.sections[section][name]
        except KeyError:
            raise KeyError(f"{PRICES_FILE.name} has no price {path!r}") from None


def load_prices(path: Path = PRICES_FILE) -> Prices:
    """Read the price table. Every value other than ``source`` is a decimal string (``"0.625"``).

    Raises ``ValueError`` when a section has no ``source`` or a price is not a decimal string.
    """
    document: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))
    meta = document.pop("meta")
    sections: dict[str, dict[str, Decimal]] = {}
    sources: dict[str, str] = {}
    for section, values in document.items():
        if "source" not in values:
            raise ValueError(f"{path.name} [{section}] names no source")
        sources[section] = str(values["source"])
        prices: dict[str, Decimal] = {}
        for name, value in values.items():
            if name == "source":
                continue
            if not isinstance(value, str):
                raise ValueError(f"{path.name} [{section}] {name}: write prices as decimal strings")
            prices[name] = Decimal(value)
        sections[section] = prices
    return Prices(
        sections=sections, written=str(meta["written"]), status=str(meta["status"]), sources=sources
    )


@dataclass(frozen=True)
class LambdaInvocation:
    """One invocation: which function, its configured memory (MiB) and how long it ran (seconds)."""

    function: str
    memory_mib: int
    seconds: float

    def billed_gb_seconds(self) -> Decimal:
        """GB-seconds Lambda bills: the duration rounded up to the millisecond × memory / 1024."""
        milliseconds = max(1, math.ceil(self.seconds * 1000))
        return Decimal(milliseconds) / 1000 * Decimal(self.memory_mib) / MIB_PER_GB


@dataclass(frozen=True)
class ControlPlaneUsage:
    """What one job asked of AWS outside its own compute.

    DynamoDB request units (read units may be halves), S3 requests by price class, Lambda invocations,
    API Gateway requests, EventBridge events (custom ones are charged; AWS service events are not),
    SNS publishes and deliveries by protocol (``{"Email": 2}``).
    """

    dynamodb_write_units: int
    dynamodb_read_units: Decimal
    s3_puts: int
    s3_gets: int
    lambda_invocations: tuple[LambdaInvocation, ...]
    api_requests: int
    custom_events: int = 0
    aws_service_events: int = 0
    sns_publishes: int = 0
    deliveries: Mapping[str, int] = field(default_factory=dict)


_DELIVERY_PRICES = {
    "Email": ("sns.email_deliveries_per_hundred_thousand", Decimal(100_000)),
    "Webhook": ("sns.http_deliveries_per_million", MILLION),
}


def job_cost(usage: ControlPlaneUsage, prices: Prices) -> dict[str, Any]:
    """Dollars per line and in all, and the total as a share of one credit (``creditShare``, e.g.
    ``Decimal("0.118")`` for 11.8 %).

    Raises ``KeyError`` for a delivery method with no price (SMS prices vary by country: not here).
    """
    lines: dict[str, Decimal] = {
        "dynamodbWrites": usage.dynamodb_write_units
        * prices["dynamodb.write_request_unit_per_million"]
        / MILLION,
        "dynamodbReads": usage.dynamodb_read_units
        * prices["dynamodb.read_request_unit_per_million"]
        / MILLION,
        "s3Puts": usage.s3_puts * prices["s3.put_copy_post_list_per_thousand"] / 1000,
        "s3Gets": usage.s3_gets * prices["s3.get_select_other_per_thousand"] / 1000,
        "lambdaRequests": len(usage.lambda_invocations) * prices["lambda.requests_per_million"] / MILLION,
        "lambdaDuration": sum((i.billed_gb_seconds() for i in usage.lambda_invocations), Decimal(0))
        * prices["lambda.gb_second_x86_64"],
        "apiGateway": usage.api_requests * prices["api_gateway.rest_requests_per_million"] / MILLION,
        "eventBridge": usage.custom_events * prices["eventbridge.custom_events_per_million"] / MILLION
        + usage.aws_service_events * prices["eventbridge.aws_service_events_per_million"] / MILLION,
        "snsPublishes": usage.sns_publishes * prices["sns.publish_requests_per_million"] / MILLION,
        "snsDeliveries": Decimal(0),
    }
    for method, count in usage.deliveries.items():
        if method not in _DELIVERY_PRICES:
            raise KeyError(f"no price for {method} deliveries in {PRICES_FILE.name}")
        price, per = _DELIVERY_PRICES[method]
        lines["snsDeliveries"] += count * prices[price] / per
    total = sum(lines.values(), Decimal(0))
    return {
        "lines": lines,
        "totalUsd": total,
        "creditUsd": prices["credit.usd"],
        "creditShare": total / prices["credit.usd"],
    }
