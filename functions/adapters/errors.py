"""One translation of what boto3 raises into the domain's exceptions, shared by every adapter.

Each adapter makes its AWS calls directly on a typed client inside ``translate_errors``; the
context manager sorts the error by its code (botocore's ``ClientError.response["Error"]["Code"]``)
and raises what the logic expects:

======================================================  =============================================
code                                                    raised
======================================================  =============================================
``ConditionalCheckFailedException``,                    ``ConditionFailed(code)``: a lost race, the
``TransactionConflictException``,                       caller re-reads (or treats it as "already
``TransactionCanceledException`` whose reasons hold a   done")
``ConditionalCheckFailed``/``TransactionConflict`` (or
give none)
a code in ``permanent`` (per call)                      ``DeliveryRefused`` (or ``refusal``): the same
                                                        request can never succeed
a code in ``ABSENT_CODES`` when ``absent_ok``           ``Absent``: the adapter answers "nothing there"
throttling (``THROTTLING_CODES``; a cancellation only   ``DependencyFailed(busy)``
for throttling reasons)
anything else, ``AccessDenied`` included                ``DependencyFailed(failed)``
``BotoCoreError`` (endpoint unreachable, timeouts)      ``DependencyFailed(unreachable)``
======================================================  =============================================

The ``ClientError`` is always the ``__cause__`` (``DynamoJobStore`` reads a cancellation's reasons and
the ``ALL_OLD`` item from it); codes are logged, never shown to a caller unless its message asks for
``{code}``. Sources: DynamoDB API reference ("Common errors", TransactWriteItems
``CancellationReasons``), Amazon S3 "Error responses", SNS/CloudWatch Logs API "Errors", botocore's
retry handler's throttling codes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from aws_lambda_powertools import Logger
from botocore.exceptions import BotoCoreError, ClientError

from functions.domain.errors import ConditionFailed, DeliveryRefused, DependencyFailed

logger = Logger(child=True)

# Codes an AWS service (or botocore's retry layer, which names them the same) returns when the
# caller is being rate-limited.
THROTTLING_CODES = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "ThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "ProvisionedThroughputExceededException",
        "RequestThrottled",
        "RequestThrottledException",
        "SlowDown",
    }
)
# A conditional write lost (DynamoDB).
CONDITION_CODES = frozenset({"ConditionalCheckFailedException", "TransactionConflictException"})
TRANSACTION_CANCELED = "TransactionCanceledException"
# TransactWriteItems cancellation reasons (one per item, "None" for an item that was fine).
RACE_REASONS = frozenset({"ConditionalCheckFailed", "TransactionConflict"})
THROTTLING_REASONS = frozenset({"ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded"})
# The object, stream or topic asked for does not exist.
ABSENT_CODES = frozenset({"NoSuchKey", "404", "NotFound", "ResourceNotFoundException"})
# The function's role may not make the call: an IAM gap, logged at error level for the operator.
ACCESS_CODES = frozenset({"AccessDenied", "AccessDeniedException", "AuthorizationError", "403"})


class Absent(Exception):
    """What was asked for does not exist (``ABSENT_CODES``); raised only by calls made with
    ``absent_ok=True``, whose adapter answers None or nothing."""

    def __init__(self, service: str, operation: str, code: str) -> None:
        super().__init__(f"{service} {operation}: {code}")
        self.code = code


def error_code(exc: ClientError) -> str:
    """The error's code (``NoSuchKey``, ``ThrottlingException``...), "" when the response has none."""
    return str(exc.response.get("Error", {}).get("Code", ""))


def cancellation_reasons(exc: ClientError) -> list[str]:
    """The codes of a ``TransactionCanceledException``'s ``CancellationReasons``, one per item in
    request order (``"None"`` for an item that passed); empty when the response carries none."""
    response: Mapping[str, Any] = exc.response
    reasons = response.get("CancellationReasons") or []
    return [str(reason.get("Code", "None")) for reason in reasons]


def _canceled_by_race(reasons: list[str]) -> bool:
    return not reasons or any(r in RACE_REASONS for r in reasons)


@contextmanager
def translate_errors(
    service: str,
    operation: str,
    *,
    failed: str,
    busy: str | None = None,
    unreachable: str | None = None,
    permanent: Collection[str] = frozenset(),
    refused: str | None = None,
    refusal: type[DependencyFailed] = DeliveryRefused,
    absent_ok: bool = False,
) -> Iterator[None]:
    """Run AWS calls; turn what boto3 raises into the domain's exceptions (table in the module doc).

    Parameters
    ----------
    service, operation : str
        For the log line (``"dynamodb"``, ``"UpdateItem"``).
    failed : str
        The caller's sentence for any other failure; ``{code}`` is replaced by the error code.
    busy, unreachable : str | None
        The sentences for throttling and for an unreachable endpoint (default: ``failed``).
    permanent : collection of str
        Codes that mean the request can never succeed: ``refusal`` (``DeliveryRefused``) is raised
        with ``refused`` (default ``failed``).
    absent_ok : bool
        Raise ``Absent`` for ``ABSENT_CODES`` instead of failing.

    Raises
    ------
    ConditionFailed, DeliveryRefused (``refusal``), Absent, DependencyFailed
        As the module's table says; the original error is the ``__cause__``.
    """
    try:
        yield
    except ClientError as exc:
        code = error_code(exc)
        if code in CONDITION_CODES:
            raise ConditionFailed(code) from exc
        reasons = cancellation_reasons(exc) if code == TRANSACTION_CANCELED else []
        if code == TRANSACTION_CANCELED and _canceled_by_race(reasons):
            raise ConditionFailed(code) from exc
        if code in permanent:
            logger.warning("aws request refused", service=service, operation=operation, code=code)
            raise refusal((refused or failed).replace("{code}", code)) from exc
        if absent_ok and code in ABSENT_CODES:
            raise Absent(service, operation, code) from exc
        throttled = code in THROTTLING_CODES or any(r in THROTTLING_REASONS for r in reasons)
        if code in ACCESS_CODES:
            logger.error("aws access denied", service=service, operation=operation, code=code)
        else:
            logger.warning(
                "aws error", service=service, operation=operation, code=code, reasons=reasons or None
            )
        message = busy if throttled and busy is not None else failed
        raise DependencyFailed(message.replace("{code}", code)) from exc
    except BotoCoreError as exc:
        logger.warning("aws unreachable", service=service, operation=operation, error=type(exc).__name__)
        raise DependencyFailed((unreachable or failed).replace("{code}", type(exc).__name__)) from exc
