"""Powertools' idempotency errors become docs/http-api.md's 409s, and a key still in progress says when to
retry."""

from __future__ import annotations

import json

import pytest
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyValidationError,
)

from functions.domain.errors import Conflict, StillInProgress
from functions.handlers.api.admin_once import idempotency_conflicts
from functions.handlers.api.app import _on_service_error


def test_a_key_still_in_progress_is_409_with_retry_after() -> None:
    with pytest.raises(StillInProgress) as raised, idempotency_conflicts():
        raise IdempotencyAlreadyInProgressError("in progress")
    response = _on_service_error(raised.value)
    assert response.status_code == 409
    assert response.headers["Retry-After"] == "1"
    body = json.loads(str(response.body))
    assert body["error"]["code"] == "Conflict"
    assert (
        body["error"]["message"]
        == "A request with this Idempotency-Key is still being processed; retry shortly."
    )


def test_a_key_reused_with_another_body_is_409_naming_the_header_without_retry_after() -> None:
    with pytest.raises(Conflict) as raised, idempotency_conflicts():
        raise IdempotencyValidationError("other payload")
    assert not isinstance(raised.value, StillInProgress)
    response = _on_service_error(raised.value)
    assert response.status_code == 409
    assert "Retry-After" not in response.headers
    assert json.loads(str(response.body))["error"]["field"] == "Idempotency-Key"
