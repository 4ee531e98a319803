"""The api's resolver in one place: the app, the constants of its contract, the exception handlers
that turn every failure into docs/http-api.md's one error body, and the dependencies routes take (the caller,
the services).

Routes parse and validate (powertools ``APIGatewayRestResolver`` with pydantic models), call one
logic function, and answer with the API's models; they live in the routers beside this module
(``meta``, ``jobs``, ``job_data``, ``account``, ``admin``), included by ``entry``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from typing import Annotated, Any, TypeVar

from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Depends, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)

from functions.bootstrap import get_services
from functions.domain import roles
from functions.domain.computes import NAME_PATTERN as COMPUTE_NAME_PATTERN
from functions.domain.environments import NAME_PATTERN as ENVIRONMENT_NAME_PATTERN
from functions.domain.errors import (
    Forbidden,
    ServiceError,
    Unauthorized,
    ValidationFailed,
)
from functions.domain.limits import MAX_BODY_BYTES
from functions.domain.roles import Role, Scope
from functions.domain.text import (
    ACCOUNT_ID_PATTERN,
    CLOCK_PATTERN,
    NO_NUL_PATTERN,
    full_match,
    is_ascii_digits,
)
from functions.handlers.api.models import (
    ErrorBody,
    ErrorDetail,
)
from functions.logic import members
from functions.observability import logger
from functions.ports import Services

app = APIGatewayRestResolver(enable_validation=True)

MAX_INLINE_BODY_BYTES = MAX_BODY_BYTES
IDEMPOTENCY_SECONDS = 24 * 3600
API_TITLE = "remote-batch"
API_VERSION = "1"
# The header naming the account a request acts in (absent: the caller's own account).
ACCOUNT_HEADER = "X-Account-Id"


# -- errors: one body for every failure ---------------------------------------------------------------
def error_response(status: int, code: str, message: str, field: str | None = None) -> Response[str]:
    """docs/http-api.md's error body ``{"error": {"code", "message", "field"}}`` with ``status``."""
    body = ErrorBody(error=ErrorDetail(code=code, message=message, field=field))
    return Response(status, content_types.APPLICATION_JSON, body.model_dump_json())


_E = TypeVar("_E", bound=Exception)
ErrorHandler = Callable[[_E], Response[str]]


def exception_handler(exc_class: type[_E]) -> Callable[[ErrorHandler[_E]], ErrorHandler[_E]]:
    """``app.exception_handler(exc_class)`` with types: registers ``handler`` for ``exc_class`` (and its
    subclasses) exactly as Powertools does, and returns it unchanged. Powertools' decorator is
    unannotated, so using it directly would leave each handler untyped under mypy strict."""

    def register(handler: ErrorHandler[_E]) -> ErrorHandler[_E]:
        app.exception_handler(exc_class)(handler)
        return handler

    return register


# Header parameters come back lower-cased from validation; errors name them as clients send them.
_HEADER_NAMES = {"idempotency-key": "Idempotency-Key"}


def _field_path(location: tuple[Any, ...] | list[Any]) -> str | None:
    parts = list(location)
    if parts and parts[0] == "header" and len(parts) > 1:
        return _HEADER_NAMES.get(str(parts[1]).lower(), str(parts[1]))
    if parts and parts[0] in ("body", "query", "path", "header"):
        parts = parts[1:]
    path = ""
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or None


# What a value that fails a field's pattern must look like, by the field's last name.
_PATTERN_RULES = {
    "phone": "must be E.164: a + then the country code and number, 15 ASCII digits at most (+15555550100)",
    "email": "must be an email address in ASCII, like a@example.com",
    "webhookUrl": "must be an https:// URL of visible ASCII characters (an internationalized host as xn--)",
    "name": "must be one line of visible text: no control or bidirectional formatting characters",
    "reason": "must be one line of visible text: no control or bidirectional formatting characters",
    "pickle": "must be base64 (standard alphabet, padded)",
    "Idempotency-Key": "must be 1 to 128 visible ASCII characters (letters, digits, punctuation)",
    "pythonVersion": "must be a Python 3 major.minor version such as 3.12 (GET /runtime names the worker's)",
    "userId": "must be a user id: 1 to 128 letters, digits or . _ @ - (starting with a letter or digit)",
}


# What a value that fails a pattern must look like, by the pattern (before the field's name: one
# field name, e.g. "name", is a job's label in one route and a compute's name in another).
_PATTERN_RULES_BY_PATTERN = {
    COMPUTE_NAME_PATTERN: "must be 2 to 32 letters, digits or hyphens, starting with a letter",
    ENVIRONMENT_NAME_PATTERN: "must be 2 to 64 letters, digits, '.', '_' or '-', starting with a letter",
    CLOCK_PATTERN: "must be a 24-hour time HH:MM, such as 08:00 or 18:30",
    NO_NUL_PATTERN: "holds a character this field does not take (a NUL)",
}


def _validation_message(error: dict[str, Any], field: str | None) -> str:
    kind = error.get("type", "")
    if kind == "json_invalid":
        return "The request body is not valid JSON."
    if kind == "string_pattern_mismatch" and field:
        name = re.sub(r"\[[0-9]+\]$", "", field).rsplit(".", 1)[-1]
        pattern = str((error.get("ctx") or {}).get("pattern", ""))
        rule = _PATTERN_RULES_BY_PATTERN.get(pattern) or _PATTERN_RULES.get(
            name, f"must match the pattern {pattern}"
        )
        return f"{field} {rule}; got {error.get('input')!r}."
    if kind == "extra_forbidden":
        return (
            f"Unknown field {field!r}; GET /openapi.json (or docs/http-api.md) lists the fields this "
            "route takes."
        )
    if kind == "missing":
        return f"{field} is required." if field else "A JSON body is required."
    message = str(error.get("msg", "invalid value"))
    message = message.removeprefix("Value error, ")
    message = message[0].upper() + message[1:] if message else message
    return f"{field}: {message}." if field else f"{message}."


@exception_handler(RequestValidationError)
def _on_request_validation(exc: RequestValidationError) -> Response[str]:
    first = exc.errors()[0] if exc.errors() else {}
    field = None if first.get("type") == "json_invalid" else _field_path(first.get("loc", ()))
    return error_response(400, "ValidationError", _validation_message(first, field), field)


@exception_handler(RequestUnsupportedContentType)
def _on_unsupported_content_type(exc: RequestUnsupportedContentType) -> Response[str]:
    return error_response(
        400, "ValidationError", "The request body must be JSON (Content-Type: application/json)."
    )


@exception_handler(ServiceError)
def _on_service_error(exc: ServiceError) -> Response[str]:
    if exc.status >= 500 and not exc.shown_to_client:
        logger.exception("request failed", code=exc.code)
        return error_response(exc.status, exc.code, "The service failed to answer; try again shortly.")
    response = error_response(exc.status, exc.code, exc.message, exc.field)
    retry_after = getattr(exc, "retry_after_seconds", None)
    if retry_after is not None:
        response.headers["Retry-After"] = str(retry_after)
    return response


@app.not_found
def _on_not_found(exc: NotFoundError) -> Response[str]:
    event = app.current_event
    allowed = allowed_methods(event.path)
    # A path a route has for this very method did not route (an id no route takes): no such thing.
    if allowed and event.http_method.upper() not in allowed:
        # RFC 9110 section 15.5.6: the resource exists, the method does not; Allow lists those that do.
        response = error_response(
            405,
            "MethodNotAllowed",
            f"{event.http_method} is not a method of {event.path}; use {', '.join(allowed)}.",
        )
        response.headers["Allow"] = ", ".join(allowed)
        return response
    return error_response(404, "NotFound", f"No route {event.http_method} {event.path}.")


@cache
def _route_table() -> tuple[tuple[re.Pattern[str], int, tuple[str, ...]], ...]:
    """Each path of the OpenAPI document (``/jobs/{jobId}``) as a pattern, with its number of path
    parameters and its methods."""
    document = app.get_openapi_schema(title=API_TITLE, version=API_VERSION)
    table = []
    for path, item in (document.paths or {}).items():
        pattern = re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(path))
        methods = tuple(m.upper() for m in ("get", "put", "post", "delete", "patch") if getattr(item, m))
        table.append((re.compile(pattern), path.count("{"), methods))
    return tuple(table)


def allowed_methods(path: str) -> list[str]:
    """The methods the route at ``path`` takes (sorted), or [] when no route has that path.

    A literal segment wins over a path parameter, as API Gateway picks the most specific resource:
    ``/jobs/uploads`` is that resource, not ``/jobs/{jobId}`` with the id ``uploads``.
    """
    matches = [(params, ms) for pattern, params, ms in _route_table() if pattern.fullmatch(path)]
    if not matches:
        return []
    fewest = min(params for params, _ in matches)
    return sorted({m for params, ms in matches if params == fewest for m in ms})


@exception_handler(Exception)
def _on_bug(exc: Exception) -> Response[str]:
    logger.exception("unhandled error")
    return error_response(500, "InternalError", "The service failed to answer; try again shortly.")


# -- identity and access -----------------------------------------------------------------------------
# The attribute a ``require`` dependency carries its action's name in (read by ``route_actions``).
ACTION_ATTRIBUTE = "remote_batch_action"


@dataclass(frozen=True, slots=True)
class Caller:
    """Who is calling and where: ``account_id`` the account the request acts in (the token's own
    until ``require`` resolved ``X-Account-Id``), ``user_id`` the token's user (Cognito ``sub``),
    ``roles`` the token's (``user``, ``admin``), ``role`` the user's role in ``account_id`` (set by
    ``require`` for account actions), and the email claim."""

    account_id: str
    roles: tuple[str, ...]
    email: str | None
    user_id: str
    role: Role | None = None

    @property
    def is_admin(self) -> bool:
        """True when the token carries the service's admin role."""
        return Role.ADMIN.value in self.roles


def current_caller() -> Caller:
    """The caller from the authorizer's claims (Cognito; the local gateway mints the same shape),
    acting in their own account.

    Raises
    ------
    Unauthorized
        No authorizer claims: the request did not pass an authorizer.
    """
    claims = app.current_event.request_context.authorizer.claims or {}
    user_id = claims.get("sub")
    if not user_id:
        raise Unauthorized("A valid Authorization: Bearer <token> header is required.")
    raw_groups = str(claims.get("cognito:groups") or "")
    groups = [g for g in raw_groups.strip("[]").replace(",", " ").split() if g]
    return Caller(
        account_id=str(user_id), roles=("user", *groups), email=claims.get("email"), user_id=str(user_id)
    )


ServicesDep = Annotated[Services, Depends(get_services)]
CallerDep = Annotated[Caller, Depends(current_caller)]


def requested_account() -> str | None:
    """The ``X-Account-Id`` header's account id, or None when the request has none.

    Raises ``ValidationFailed`` (field ``X-Account-Id``) for a value no account id can be.
    """
    value = app.current_event.headers.get(ACCOUNT_HEADER)  # case-insensitive in powertools 3
    if value is None:
        return None
    if not full_match(ACCOUNT_ID_PATTERN, value):
        raise ValidationFailed(
            f"{ACCOUNT_HEADER} must be an account id: 1 to 128 letters, digits or . _ @ - "
            "(starting with a letter or digit).",
            field=ACCOUNT_HEADER,
        )
    return value


def require(name: str) -> Callable[..., Caller | None]:
    """The dependency a route declares its one action with: ``Depends(require("jobs/write"))``.

    The dependency answers the caller acting in the request's account (``X-Account-Id``, else their
    own) with their role there, once the action is theirs; ``/health``'s public action needs no token
    (None). A route's action is read back by ``functions.handlers.api.openapi.route_actions``.

    Raises
    ------
    KeyError
        At import, for an action ``functions.domain.roles.ACTIONS`` does not have.

    The dependency raises ``Unauthorized`` (no token), ``NotFound`` (no member of the account: the
    same whether it exists, docs/http-api.md's tenant isolation), ``Forbidden`` naming the missing action, and
    ``ValidationFailed`` for a malformed ``X-Account-Id``.
    """
    wanted = roles.action(name)
    dependency: Callable[..., Caller | None]
    if wanted.scope is Scope.PUBLIC:

        def public() -> None:
            return None

        dependency = public
    elif wanted.scope is Scope.SERVICE:

        def service(caller: CallerDep) -> Caller:
            return caller

        dependency = service
    elif wanted.scope is Scope.ADMIN:

        def admin(caller: CallerDep) -> Caller:
            if not caller.is_admin:
                raise Forbidden(roles.denial_message(name, None, None))
            return replace(caller, role=Role.ADMIN)

        dependency = admin
    else:

        def account(caller: CallerDep, services: ServicesDep) -> Caller:
            account_id = requested_account() or caller.user_id
            role = members.resolve_role(services, account_id, caller.user_id, caller.is_admin)
            if not roles.holds(role, name):
                raise Forbidden(roles.denial_message(name, role, account_id))
            return replace(caller, account_id=account_id, role=role)

        dependency = account
    setattr(dependency, ACTION_ATTRIBUTE, name)
    return dependency


def ascii_whole_number(value: Any) -> Any:
    """A query string's whole number as ASCII digits only: pydantic alone would read ``" 2\n"``,
    ``"+2"``, ``"1_0"`` as numbers (and Python's int() reads Arabic-Indic or full-width digits)."""
    if isinstance(value, str) and not is_ascii_digits(value):
        raise ValueError("must be a whole number written with the digits 0-9")
    return value
