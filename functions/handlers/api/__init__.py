"""api Lambda: the HTTP API of API.md behind API Gateway (REST, proxy integration).

A package of powertools Routers, one per resource (``meta``, ``jobs``, ``job_data``, ``account``,
``admin``; the local stack has no routes of its own: it serves these same ones). The resolver, its
exception handlers and dependencies are in ``app``, the OpenAPI document's set-up in ``openapi``, the
models in ``models``, and the Lambda entry point ``functions.handlers.api.handler`` in ``entry``.
"""

from typing import Any

# Submitters wrapped by powertools idempotency, one per idempotency table (see jobs._idempotent_submit).
# Held here, on the package, so a test that switches credentials can start them afresh.
_idempotent_submitters: dict[str, Any] = {}

from functions.handlers.api.app import (  # noqa: E402 (the cache above is read by jobs at call time)
    API_TITLE,
    API_VERSION,
    IDEMPOTENCY_SECONDS,
    MAX_INLINE_BODY_BYTES,
    Caller,
    allowed_methods,
    app,
    ascii_whole_number,
    current_caller,
    error_response,
)
from functions.handlers.api.entry import handler, single_valued  # noqa: E402
from functions.handlers.api.jobs import canonical_submit  # noqa: E402
from functions.handlers.api.openapi import openapi_json  # noqa: E402

__all__ = [
    "API_TITLE",
    "API_VERSION",
    "IDEMPOTENCY_SECONDS",
    "MAX_INLINE_BODY_BYTES",
    "Caller",
    "allowed_methods",
    "app",
    "ascii_whole_number",
    "canonical_submit",
    "current_caller",
    "error_response",
    "handler",
    "openapi_json",
    "single_valued",
]
