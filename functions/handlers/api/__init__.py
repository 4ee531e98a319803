"""api Lambda: the HTTP API of docs/http-api.md behind API Gateway (REST, proxy integration).

A package of powertools Routers, one per resource (``meta``, ``jobs``, ``job_data``, ``account``,
``admin``; the local stack has no routes of its own: it serves these same ones). The resolver, its
exception handlers and dependencies are in ``app``, the OpenAPI document's set-up in ``openapi``, the
models in ``models``, and the Lambda entry point ``functions.handlers.api.handler`` in ``entry``.
"""

from functions.handlers.api.app import (
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
from functions.handlers.api.entry import handler, single_valued
from functions.handlers.api.jobs import canonical_submit
from functions.handlers.api.openapi import openapi_json

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
