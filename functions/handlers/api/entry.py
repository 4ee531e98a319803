"""api Lambda's entry point: the app with its routers included (in the order the OpenAPI document
lists them), and the checks of a proxy event before the resolver sees it.
"""

from __future__ import annotations

import base64
import binascii
import json
import sys
from typing import Any

from aws_lambda_powertools.event_handler import content_types
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.domain.errors import (
    PayloadTooLarge,
    ValidationFailed,
)
from functions.domain.headers import check_single_valued
from functions.domain.limits import BODY_TOO_LARGE_MESSAGE
from functions.domain.text import first_surrogate_path
from functions.handlers.api import (
    account,
    admin,
    computes,
    environments,
    fleet,
    job_data,
    jobs,
    members,
    meta,
    quotas,
)
from functions.handlers.api.app import (
    MAX_INLINE_BODY_BYTES,
    app,
)
from functions.handlers.api.models import (
    ErrorBody,
    ErrorDetail,
)
from functions.observability import API_GATEWAY_REQUEST_ID, lambda_entry

for _router in (
    meta.router,
    jobs.router,
    job_data.router,
    account.router,
    quotas.router,
    computes.router,
    environments.router,
    members.router,
    admin.router,
    fleet.router,
):
    app.include_router(_router)


# -- entry point -------------------------------------------------------------------------------------
@lambda_entry(API_GATEWAY_REQUEST_ID, capture_error=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """API Gateway REST proxy event → proxy response."""
    body = event.get("body") or ""
    size = len(body) * 3 // 4 if event.get("isBase64Encoded") else len(body.encode())
    if size > MAX_INLINE_BODY_BYTES:
        exc = PayloadTooLarge(BODY_TOO_LARGE_MESSAGE)
        return _proxy_error(
            exc.status, ErrorBody(error=ErrorDetail(code=exc.code, message=exc.message, field=None))
        )
    path = str(event.get("path") or "")
    if not path.isprintable():
        # No route has a control character in its path; powertools' "$" would match before a
        # trailing newline and serve /jobs/<id>%0A as /jobs/<id>.
        body = ErrorBody(error=ErrorDetail(code="NotFound", message="No route for this path.", field=None))
        return _proxy_error(404, body)
    try:
        check_single_valued(_header_lines(event))
    except ValidationFailed as exc:
        return _proxy_error(
            exc.status, ErrorBody(error=ErrorDetail(code=exc.code, message=exc.message, field=exc.field))
        )
    resolved = _json_body(single_valued(event))
    if isinstance(resolved, ErrorBody):
        return _proxy_error(400, resolved)
    return app.resolve(resolved, context)


def _header_lines(event: dict[str, Any]) -> list[str]:
    """The name of each header line the request sent (``multiValueHeaders``: one per value), or
    each name of ``headers`` when the event has no multi-valued view."""
    multi = event.get("multiValueHeaders")
    if multi:
        return [name for name, values in multi.items() for _ in values or ()]
    return list(event.get("headers") or {})


def single_valued(event: dict[str, Any]) -> dict[str, Any]:
    """Each query parameter and header once, with its last value, as API Gateway REST puts it in
    ``queryStringParameters`` / ``headers`` ("the last value wins", AWS docs: "Set up a proxy
    integration with a proxy resource", multi-value parameters).

    powertools validates from ``multiValueQueryStringParameters`` when it is set, where
    ``?limit=500&limit=2`` is the list ``["500", "2"]`` a scalar parameter cannot take; every route
    takes scalars, so both views are made to say what ``queryStringParameters`` says.
    """
    multi_query = event.get("multiValueQueryStringParameters") or {}
    query = {**(event.get("queryStringParameters") or {})}
    query.update({name: values[-1] for name, values in multi_query.items() if values})
    multi_headers = event.get("multiValueHeaders") or {}
    headers = {**(event.get("headers") or {})}
    headers.update({name: values[-1] for name, values in multi_headers.items() if values})
    return {
        **event,
        "queryStringParameters": query or None,
        "multiValueQueryStringParameters": {k: [v] for k, v in query.items()} or None,
        "headers": headers or None,
        "multiValueHeaders": {k: [v] for k, v in headers.items()} or None,
    }


def _error_body(message: str) -> ErrorBody:
    return ErrorBody(error=ErrorDetail(code="ValidationError", message=message, field=None))


def _proxy_error(status: int, body: ErrorBody) -> dict[str, Any]:
    return {
        "statusCode": status,
        "headers": {"Content-Type": content_types.APPLICATION_JSON},
        "body": body.model_dump_json(),
        "isBase64Encoded": False,
    }


class _NotStandardJson(ValueError):
    """A body Python's parser would take but JSON (RFC 8259) or the service does not."""


def _refuse_constant(name: str) -> Any:
    """``NaN``/``Infinity``/``-Infinity``: Python's parser takes them, JSON (RFC 8259 §6) does not."""
    raise _NotStandardJson(f"The request body holds {name}, which is not JSON (RFC 8259); send a number.")


def _bounded_int(digits: str) -> int:
    """An integer literal; one longer than Python's int conversion limit (``sys.get_int_max_str_digits``,
    4300 digits by default) is refused with a 400 instead of escaping as a ``ValueError``.

    Raises ``_NotStandardJson``.
    """
    limit = sys.get_int_max_str_digits()
    if limit and len(digits.lstrip("-")) > limit:
        raise _NotStandardJson(f"The request body holds an integer of more than {limit} digits.")
    return int(digits)


def _json_body(event: dict[str, Any]) -> dict[str, Any] | ErrorBody:
    """Bodies are JSON whatever the Content-Type says (curl -d sends form encoding by default), an
    empty body too: the Content-Type is set to JSON on every request, so no route ever answers an
    unsupported media type with a 500.

    Returns the event to resolve, or the error for a body that is not UTF-8, nests too deeply or
    holds a lone surrogate (what the JSON parser itself cannot report as a validation error).
    """
    raw = event.get("body") or ""
    try:
        text = base64.b64decode(raw).decode("utf-8") if event.get("isBase64Encoded") else raw
        document = json.loads(text, parse_constant=_refuse_constant, parse_int=_bounded_int) if text else None
    except (UnicodeDecodeError, binascii.Error):
        return _error_body("The request body is not UTF-8 text.")
    except RecursionError:
        return _error_body("The request body nests JSON too deeply.")
    except _NotStandardJson as exc:
        return _error_body(str(exc))
    except ValueError:
        pass  # not JSON (or empty): the resolver's validation answers that, with its field
    else:
        # JSON's "\ud800" escape makes a lone surrogate, which no store, process or message carries.
        where = first_surrogate_path(document)
        if where is not None:
            return ErrorBody(
                error=ErrorDetail(
                    code="ValidationError",
                    message=f"{where or 'The body'} holds a lone surrogate (\\ud800..\\udfff), which is "
                    "not text; send UTF-8 text.",
                    field=where or None,
                )
            )
        event = {**event, "body": text, "isBase64Encoded": False}
    headers = {k: v for k, v in (event.get("headers") or {}).items() if k.lower() != "content-type"}
    multi = {k: v for k, v in (event.get("multiValueHeaders") or {}).items() if k.lower() != "content-type"}
    headers["Content-Type"] = content_types.APPLICATION_JSON
    multi["Content-Type"] = [content_types.APPLICATION_JSON]
    return {**event, "headers": headers, "multiValueHeaders": multi}
