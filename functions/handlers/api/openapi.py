"""The OpenAPI document's parts: each route's declared responses (docs/http-api.md's error body at each
error status) and the served document, rewritten where powertools' default says something else.
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.event_handler.depends import build_dependency_tree

from functions.domain.roles import ACTIONS, Scope
from functions.domain.text import ACCOUNT_ID_PATTERN
from functions.handlers.api.app import ACCOUNT_HEADER, ACTION_ATTRIBUTE, API_TITLE, API_VERSION, app
from functions.handlers.api.models import (
    ErrorBody,
)

# -- the OpenAPI document's responses ------------------------------------------------------------------
_ERROR_CONTENT: dict[str, Any] = {"application/json": {"model": ErrorBody}}
_ERROR_WHEN = {
    400: "ValidationError: the body, a query parameter or a header is invalid; field names it",
    401: "Unauthorized: missing, malformed, expired or unknown token",
    402: "InsufficientCredits: the account's credit balance is not positive",
    403: "Forbidden: the caller's role lacks the permission",
    404: "NotFound: no such job or account for this caller",
    409: "JobNotFinished, NoOutput or Conflict (idempotency key reused with another body; job not final)",
    410: "Expired: the job's inputs and outputs passed their retention",
    413: "PayloadTooLarge: the body is over 5 MiB",
    429: "RateLimited (this account's request rate) or Throttled (the service's); retry after Retry-After",
    500: "InternalError: a bug or a failed dependency; no details",
    501: "NotSupported: this deployment does not offer the feature (environments are built locally only)",
    503: "ClassUnavailable: an operator took the machine class out of service in the zone; message says why",
}
# Every route that needs a token can answer these (the authorizer, the throttle, a bug).
_ALWAYS = (401, 429, 500)


def _json(model: Any, description: str = "OK") -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"model": model}}}


def _responses(
    status: int, success: dict[str, Any] | None, *errors: int, auth: bool = True
) -> dict[int, Any]:
    """Responses of one route for ``responses=``: ``success`` at ``status`` (None: no body), and
    docs/http-api.md's error body at each error status, plus 401/429/500 when the route needs a token."""
    declared: dict[int, Any] = {status: success or {"description": "No content"}}
    for code in sorted({*errors, *(_ALWAYS if auth else (500,))}):
        declared[code] = {"description": _ERROR_WHEN[code], "content": _ERROR_CONTENT}
    return declared


_TIME: dict[str, Any] = {"format": "date-time"}

ACTION_EXTENSION = "x-remote-batch-action"
_ACCOUNT_PARAMETER = {
    "name": ACCOUNT_HEADER,
    "in": "header",
    "required": False,
    "description": "The account the request acts in; absent: the caller's own (the token's user id). "
    "A user who is no member of it gets 404 NotFound, whether it exists or not.",
    "schema": {"type": "string", "pattern": ACCOUNT_ID_PATTERN},
}


def route_actions() -> dict[tuple[str, str], list[str]]:
    """Every route of the app (``("GET", "/jobs/{jobId}")``) with the actions its dependencies
    declare (``functions.handlers.api.app.require``): exactly one each, which a test checks."""
    found: dict[tuple[str, str], list[str]] = {}
    # powertools keeps the registered routes here (no public accessor); include_router adds to them.
    for route in app._static_routes + app._dynamic_routes:
        names: list[str] = []
        pending = list(build_dependency_tree(route.func).dependencies)
        while pending:
            node = pending.pop()
            name = getattr(node.depends.dependency, ACTION_ATTRIBUTE, None)
            if name is not None:
                names.append(name)
            pending.extend(node.dependant.dependencies)
        found[(route.method, route.openapi_path)] = names
    return found


def openapi_json() -> str:
    """The OpenAPI 3.1 document, with validation failures as this API answers them: 400 and the
    one error body (powertools documents its own 422 default), the bearer token every route but
    ``/health`` needs, and parameter bounds in JSON Schema's words (powertools writes pydantic's
    ``ge``/``le``, which no JSON Schema tool reads)."""
    # Imported here: powertools' OpenAPI models (about 35 ms of pydantic builds) serve this document
    # only; a request's validation never loads them.
    from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer

    document = json.loads(
        app.get_openapi_json_schema(
            title=API_TITLE,
            version=API_VERSION,
            security_schemes={"bearer": HTTPBearer(bearerFormat="JWT (Cognito); rb_... locally")},
            security=[{"bearer": []}],
        )
    )
    error_schema = ErrorBody.model_json_schema(ref_template="#/components/schemas/{model}")
    components = document.setdefault("components", {}).setdefault("schemas", {})
    components.update(error_schema.pop("$defs", {}))
    components["ErrorBody"] = error_schema
    for path in document.get("paths", {}).values():
        for operation in path.values():
            responses = operation.get("responses", {})
            if "204" in responses:
                responses["204"].pop("content", None)  # powertools adds the return annotation's
            if responses.pop("422", None) is not None and "400" not in responses:
                responses["400"] = {
                    "description": "ValidationError (or another error of docs/http-api.md) in the error body",
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
                }
    document["paths"]["/health"]["get"]["security"] = []
    _document_actions(document)
    _json_schema_bounds(document)
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    return json.dumps(document)


def _document_actions(document: dict[str, Any]) -> None:
    """Name each operation's action (``x-remote-batch-action``, and in its description), and add the
    ``X-Account-Id`` header to the operations that act in an account."""
    for (method, path), names in route_actions().items():
        operation = document.get("paths", {}).get(path, {}).get(method.lower())
        if operation is None or len(names) != 1:
            continue
        operation[ACTION_EXTENSION] = names[0]
        note = f"Action: `{names[0]}` (GET /roles lists the roles that hold it)."
        operation["description"] = (
            f"{operation['description']}\n\n{note}" if operation.get("description") else note
        )
        scope = ACTIONS[names[0]].scope
        if scope is Scope.ACCOUNT:
            operation.setdefault("parameters", []).append(dict(_ACCOUNT_PARAMETER))
        # A denied action is 403; an account the caller is no member of, 404; a bad X-Account-Id, 400.
        errors = {Scope.ACCOUNT: (400, 403, 404), Scope.ADMIN: (403,)}.get(scope, ())
        responses = operation.setdefault("responses", {})
        for code in errors:
            responses.setdefault(
                str(code),
                {
                    "description": _ERROR_WHEN[code],
                    "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}},
                },
            )


_BOUNDS = {"ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum", "lt": "exclusiveMaximum"}


def _json_schema_bounds(node: Any) -> None:
    """Rewrite, in every number schema of ``node``, pydantic's ``ge``/``le``/``gt``/``lt`` (which
    powertools copies where pydantic could not say them: a validator before the type) as JSON
    Schema's ``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum``."""
    if isinstance(node, list):
        for item in node:
            _json_schema_bounds(item)
    elif isinstance(node, dict):
        if node.get("type") in ("integer", "number"):
            for short, keyword in _BOUNDS.items():
                if short in node:
                    value = node.pop(short)
                    node.setdefault(keyword, float(value) if isinstance(value, str) else value)
            node.pop("decimal_places", None)
        for value in node.values():
            _json_schema_bounds(value)
