"""The adapters' one error translation (``functions.adapters.errors.translate_errors``): each code
AWS returns becomes the exception the logic expects, with the ``ClientError`` as its cause. Codes:
DynamoDB API reference ("Common errors", TransactWriteItems ``CancellationReasons``), Amazon S3
"Error responses", SNS and CloudWatch Logs "Errors"."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError

from functions.adapters.errors import Absent, translate_errors
from functions.domain.errors import ConditionFailed, DeliveryRefused, DependencyFailed, RecordMissing

FAILED = "The store failed ({code})."
BUSY = "The store is busy."


def client_error(code: str, reasons: list[dict[str, Any]] | None = None) -> ClientError:
    response: dict[str, Any] = {"Error": {"Code": code, "Message": "simulated"}}
    if reasons is not None:
        response["CancellationReasons"] = reasons
    return ClientError(response, "Operation")  # type: ignore[arg-type]


def translated(error: Exception, **options: Any) -> BaseException:
    with (
        pytest.raises((ConditionFailed, DependencyFailed, Absent)) as raised,
        translate_errors("svc", "Operation", failed=FAILED, busy=BUSY, **options),
    ):
        raise error
    assert raised.value.__cause__ is error
    return raised.value


@pytest.mark.parametrize(
    ("code", "reasons"),
    [
        ("ConditionalCheckFailedException", None),
        ("TransactionConflictException", None),
        ("TransactionCanceledException", None),
        ("TransactionCanceledException", []),
        ("TransactionCanceledException", [{"Code": "None"}, {"Code": "ConditionalCheckFailed"}]),
        ("TransactionCanceledException", [{"Code": "TransactionConflict"}, {"Code": "None"}]),
    ],
)
def test_a_lost_condition_is_condition_failed(code: str, reasons: list[dict[str, Any]] | None) -> None:
    error = translated(client_error(code, reasons))
    assert type(error) is ConditionFailed
    assert not isinstance(error, RecordMissing)
    assert str(error) == code


@pytest.mark.parametrize(
    "code",
    [
        "ProvisionedThroughputExceededException",
        "ThrottlingException",
        "Throttling",
        "RequestLimitExceeded",
        "TooManyRequestsException",
        "SlowDown",
    ],
)
def test_throttling_is_a_dependency_failure_with_the_busy_sentence(code: str) -> None:
    error = translated(client_error(code))
    assert type(error) is DependencyFailed
    assert str(error) == BUSY


@pytest.mark.parametrize("reason", ["ThrottlingError", "ProvisionedThroughputExceeded"])
def test_a_transaction_cancelled_only_by_throttling_is_busy_not_a_race(reason: str) -> None:
    error = translated(client_error("TransactionCanceledException", [{"Code": reason}, {"Code": "None"}]))
    assert type(error) is DependencyFailed
    assert str(error) == BUSY


def test_a_transaction_cancelled_for_another_reason_is_a_dependency_failure() -> None:
    error = translated(client_error("TransactionCanceledException", [{"Code": "ValidationError"}]))
    assert type(error) is DependencyFailed
    assert str(error) == "The store failed (TransactionCanceledException)."


@pytest.mark.parametrize("code", ["NoSuchKey", "404", "NotFound", "ResourceNotFoundException"])
def test_a_missing_resource_is_absent_only_where_the_call_allows_it(code: str) -> None:
    allowed = translated(client_error(code), absent_ok=True)
    assert type(allowed) is Absent
    assert allowed.code == code
    refused = translated(client_error(code))
    assert type(refused) is DependencyFailed
    assert str(refused) == f"The store failed ({code})."


@pytest.mark.parametrize("code", ["AccessDenied", "AccessDeniedException", "AuthorizationError"])
def test_access_denied_is_a_dependency_failure(code: str) -> None:
    error = translated(client_error(code))
    assert type(error) is DependencyFailed
    assert str(error) == f"The store failed ({code})."


def test_a_permanent_code_is_refused_for_good_with_its_own_sentence() -> None:
    error = translated(client_error("OptedOut"), permanent={"OptedOut"}, refused="Refused ({code}).")
    assert type(error) is DeliveryRefused
    assert str(error) == "Refused (OptedOut)."
    as_failure = translated(
        client_error("ClientException"), permanent={"ClientException"}, refusal=DependencyFailed
    )
    assert type(as_failure) is DependencyFailed
    assert str(as_failure) == "The store failed (ClientException)."


@pytest.mark.parametrize("code", ["InternalServerError", "SomethingNew", ""])
def test_an_unknown_code_is_re_raised_as_a_dependency_failure_caused_by_the_original(code: str) -> None:
    original = client_error(code)
    error = translated(original)
    assert type(error) is DependencyFailed
    assert error.__cause__ is original
    assert str(error) == f"The store failed ({code})."


def test_an_unreachable_endpoint_is_a_dependency_failure_with_its_own_sentence() -> None:
    original = EndpointConnectionError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com")
    error = translated(original, unreachable="Unreachable.")
    assert type(error) is DependencyFailed
    assert str(error) == "Unreachable."


def test_other_exceptions_pass_through_untouched() -> None:
    with pytest.raises(KeyError), translate_errors("svc", "Operation", failed=FAILED):
        raise KeyError("Item")
