"""The credit charge rule (docs/architecture.md "Credits").

A job is charged for its Running time: ``ceil(seconds) × creditsPerHour / 3600``, with a minimum of
60 seconds, rounded half-up to 4 decimal places, then capped by the job's ``creditConstraint`` and
by what the account has left. Queued and Starting time are free. All amounts are ``Decimal``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation

from functions.domain.errors import ValidationFailed

CREDIT_QUANTUM = Decimal("0.0001")
MINIMUM_CHARGED_SECONDS = 60
SECONDS_PER_HOUR = Decimal(3600)
ZERO = Decimal("0.0000")
# Amounts stay below 10^11 credits so they are exact as JSON numbers (15 significant digits).
MAX_CREDITS = Decimal(10) ** 11


def quantize_credits(amount: Decimal) -> Decimal:
    """Round an amount of credits half-up to 4 decimal places."""
    return amount.quantize(CREDIT_QUANTUM, rounding=ROUND_HALF_UP)


def credits_text(amount: Decimal | int) -> str:
    """An amount as the service's messages write it: plain digits, no exponent, no trailing zeros
    (``Decimal("1E+2")`` → ``100``, ``Decimal("0.5000")`` → ``0.5``)."""
    return f"{Decimal(amount).normalize():f}"


def parse_credits(value: Decimal | int | str, field: str) -> Decimal:
    """Validate a credits amount from a request: positive, below ``MAX_CREDITS``, at most 4 decimal
    places.

    Raises
    ------
    ValidationFailed
        When the amount is not a finite positive number below ``MAX_CREDITS`` with at most 4
        decimal places; the message shows the amount as credits (text as sent).
    """
    shown = repr(value) if isinstance(value, str) else credits_text(value)
    problem = ValidationFailed(f"{field} must be a positive number of credits, got {shown}.", field=field)
    try:
        amount = Decimal(str(value))
        if not amount.is_finite() or amount <= 0:
            raise problem
        if amount >= MAX_CREDITS:
            raise ValidationFailed(
                f"{field} must be less than {MAX_CREDITS:,} credits, got {shown}.", field=field
            )
        exact = amount == amount.quantize(CREDIT_QUANTUM)
    except InvalidOperation:
        raise problem from None
    if not exact:
        raise ValidationFailed(f"{field} has more than 4 decimal places: {value}.", field=field)
    return quantize_credits(amount)


def billable_seconds(running_ms: int) -> int:
    """Seconds billed for ``running_ms`` milliseconds of Running time: rounded up, at least 60."""
    return max(MINIMUM_CHARGED_SECONDS, math.ceil(max(running_ms, 0) / 1000))


def running_cost(running_ms: int, credits_per_hour: Decimal) -> Decimal:
    """What ``running_ms`` milliseconds of Running time cost before any cap, in credits.

    Parameters
    ----------
    running_ms : int
        Running time in milliseconds (``stoppedAt - startedAt`` of the final attempt).
    credits_per_hour : Decimal
        The machine class's price.

    Returns
    -------
    Decimal
        ``ceil(seconds) × credits_per_hour / 3600`` with the 60-second minimum, half-up to 4 places.
    """
    return quantize_credits(Decimal(billable_seconds(running_ms)) * credits_per_hour / SECONDS_PER_HOUR)


@dataclass(frozen=True, slots=True)
class Charge:
    """The settled charge of one job.

    Attributes
    ----------
    credits : Decimal
        What is taken from the balance: ``min(cost, creditConstraint, balance)``, never negative.
    cost : Decimal
        The uncapped running cost.
    unbilled : Decimal
        ``cost - credits`` that the balance could not cover (the creditConstraint's cut is not
        unbilled: the user asked for that cap).
    """

    credits: Decimal
    cost: Decimal
    unbilled: Decimal


def settle_charge(
    running_ms: int | None,
    credits_per_hour: Decimal,
    credit_constraint: Decimal | None,
    balance: Decimal,
) -> Charge:
    """Compute a job's final charge.

    Parameters
    ----------
    running_ms : int | None
        Running time of the final attempt in milliseconds; None when the job never reached Running
        (it costs nothing).
    credits_per_hour : Decimal
        The machine class's price.
    credit_constraint : Decimal | None
        The job's cap in credits, or None for no cap.
    balance : Decimal
        The account's balance before this charge.

    Returns
    -------
    Charge
        Credits to take, never more than the cap nor more than a non-negative balance.
    """
    if running_ms is None:
        return Charge(ZERO, ZERO, ZERO)
    cost = running_cost(running_ms, credits_per_hour)
    capped = min(cost, credit_constraint) if credit_constraint is not None else cost
    credits = quantize_credits(max(min(capped, balance), ZERO))
    return Charge(credits=credits, cost=cost, unbilled=quantize_credits(capped - credits))


def accrued_cost(running_ms: int, credits_per_hour: Decimal) -> Decimal:
    """What ``running_ms`` of Running time has cost so far: ``ceil(seconds) × rate / 3600``, half-up
    to 4 places, without the 60-second minimum (that is a settlement rule: a job that ends before
    60 s is charged 60 s, but 3 s into a run it has used 3 s of its caps)."""
    seconds = math.ceil(max(running_ms, 0) / 1000)
    return quantize_credits(Decimal(seconds) * credits_per_hour / SECONDS_PER_HOUR)


def spent_so_far(running_ms: int, credits_per_hour: Decimal, credit_constraint: Decimal | None) -> Decimal:
    """Credits a Running job has spent by now (``accrued_cost``), capped by its ``creditConstraint``.

    Used by the meter to refresh ``creditsSpent`` and to enforce the caps; the 60-second minimum and
    the account balance apply at settlement.
    """
    cost = accrued_cost(running_ms, credits_per_hour)
    return min(cost, credit_constraint) if credit_constraint is not None else cost


def estimate_credits(
    seconds: Decimal,
    credits_per_hour: Decimal,
    credit_constraint: Decimal | None = None,
    time_constraint: int | None = None,
) -> tuple[Decimal, int]:
    """What a run of ``seconds`` of Running time would be charged, by the settlement's rules
    (``running_cost``: whole seconds rounded up, the 60-second minimum, half-up to 4 places), the run
    cut at ``time_constraint`` seconds and the charge capped at ``credit_constraint``, as a job's
    would be.

    Returns ``(credits, billed seconds)``. ``seconds`` must be positive (the API validates it).
    """
    running = min(seconds, Decimal(time_constraint)) if time_constraint is not None else seconds
    running_ms = math.ceil(running * 1000)
    cost = running_cost(running_ms, credits_per_hour)
    credits = min(cost, credit_constraint) if credit_constraint is not None else cost
    return quantize_credits(credits), billable_seconds(running_ms)
