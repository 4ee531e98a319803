"""Admin actions run once per ``Idempotency-Key``, as ``POST /jobs`` is (powertools idempotency on the
Idempotency table, 24 h): the same key with the same body (and route) answers what the first request
answered and changes nothing; with another body, 409 ``Conflict``.

Each action is also idempotent by itself (a state already set is not set again; a keyed grant has a
deterministic ledger id), so a retry that comes after the 24 h, or after a first attempt that failed
mid-way, still changes nothing twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Protocol

from aws_lambda_powertools.event_handler.openapi.params import Header
from aws_lambda_powertools.utilities.idempotency import (
    DynamoDBPersistenceLayer,
    IdempotencyConfig,
    idempotent_function,
)
from aws_lambda_powertools.utilities.idempotency.exceptions import (
    IdempotencyAlreadyInProgressError,
    IdempotencyValidationError,
)

from functions.domain.errors import Conflict, StillInProgress
from functions.handlers.api.app import IDEMPOTENCY_SECONDS, app
from functions.ports import Services

# The functions powertools idempotency wraps, one per idempotency table and action (``jobs`` keeps its
# submit's under the table's name, an admin action under ``<table>#admin:<action>``): made once per
# process; a test that switches credentials clears it.
IDEMPOTENT_RUNNERS: dict[str, Any] = {}

IdempotencyKeyHeader = Annotated[
    str | None, Header(alias="Idempotency-Key", min_length=1, max_length=128, pattern=r"^[\x21-\x7e]+$")
]
"""The optional ``Idempotency-Key`` header of an admin action (as ``POST /jobs`` takes it)."""


class _RunOnce(Protocol):
    def __call__(self, *, request: dict[str, Any]) -> dict[str, Any]: ...


def _runner(services: Services, action_name: str) -> _RunOnce:
    """The powertools-wrapped runner of one admin action (one persistence layer per action)."""
    table = services.idempotency_table or ""
    cache = IDEMPOTENT_RUNNERS
    slot = f"{table}#admin:{action_name}"
    if slot not in cache:
        persistence = DynamoDBPersistenceLayer(table_name=table)
        config = IdempotencyConfig(
            event_key_jmespath="key",
            payload_validation_jmespath="canonical",
            expires_after_seconds=IDEMPOTENCY_SECONDS,
            raise_on_no_idempotency_key=True,
        )

        def admin_action(request: dict[str, Any]) -> dict[str, Any]:
            answer: dict[str, Any] = request["action"]()
            return answer

        wrapped: _RunOnce = idempotent_function(
            admin_action, data_keyword_argument="request", persistence_store=persistence, config=config
        )
        cache[slot] = (wrapped, config)
    runner, config = cache[slot]
    config.register_lambda_context(app.lambda_context)
    result: _RunOnce = runner
    return result


def run_once(
    services: Services,
    *,
    action_name: str,
    actor: str,
    idempotency_key: str | None,
    canonical: dict[str, Any],
    action: Callable[[], dict[str, Any]],
) -> dict[str, Any]:
    """Run ``action`` (which returns the JSON answer) once per (operator, action, key).

    Without a key, ``action`` just runs. ``canonical`` is what a repeated request must match (the
    path's ids and the body, in one spelling).

    Raises
    ------
    Conflict
        The key was used with another body (``field="Idempotency-Key"``), or its first request is
        still being processed.
    """
    if idempotency_key is None:
        return action()
    request = {
        "key": f"{actor}#{action_name}#{idempotency_key}",
        "canonical": canonical,
        "action": action,  # not hashed: only "key" and "canonical" are
    }
    with idempotency_conflicts():
        return _runner(services, action_name)(request=request)


@contextmanager
def idempotency_conflicts() -> Iterator[None]:
    """Powertools' idempotency errors as docs/http-api.md's 409s: a key used with another body is ``Conflict``
    (``field="Idempotency-Key"``); a key whose first request still runs is ``StillInProgress``
    (``Retry-After: 1``). Used by every route that takes an ``Idempotency-Key``."""
    try:
        yield
    except IdempotencyValidationError:
        raise Conflict(
            "This Idempotency-Key was used with a different body in the last 24 h; use a new key.",
            field="Idempotency-Key",
        ) from None
    except IdempotencyAlreadyInProgressError:
        raise StillInProgress(
            "A request with this Idempotency-Key is still being processed; retry shortly."
        ) from None
