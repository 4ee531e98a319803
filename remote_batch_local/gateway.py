"""The local API Gateway: HTTP in, REST proxy (v1) events to the api Lambda, HTTP out.

It does what the deployed API Gateway does around the api function: the authorizer (here a
lookup of the local bearer tokens instead of Cognito's JWT check: ``/health`` is open, every other
route needs a known token), the payload limits (API Gateway's 10 MiB, and the deployed WAF rule's
5 MiB and no chunked bodies, ``infra.constructs.api``), the proxy event with the caller's claims in
``requestContext.authorizer.claims``, and the proxy response back to HTTP. It also serves the
local-only routes of docs/http-api.md (admin token): ``GET``/``POST /local/batch-events`` and
``POST /admin/accounts``.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, Protocol

from werkzeug.datastructures import Headers
from werkzeug.exceptions import ClientDisconnected
from werkzeug.wrappers import Request, Response

from functions.domain.errors import Forbidden, PayloadTooLarge, ServiceError, Unauthorized, ValidationFailed
from functions.domain.headers import check_single_valued
from functions.domain.limits import BODY_TOO_LARGE_MESSAGE, BODY_WITHOUT_LENGTH_MESSAGE, MAX_BODY_BYTES
from functions.domain.rate_limits import RATE_LIMITED_CODE, RATE_LIMITED_MESSAGE, retry_after_header
from functions.domain.roles import Role, denial_message, holds
from remote_batch_local.accounts import LocalAccounts, parse_new_account
from remote_batch_local.console import ConsoleFiles
from remote_batch_local.http_errors import HEADER_LINES
from remote_batch_local.lambda_context import LOCAL_ACCOUNT_ID
from remote_batch_local.rate_limit import AccountRateLimiter
from remote_batch_local.state_disk import RETRY_AFTER_SECONDS, DiskStatus, StateDisk, StateDiskUnavailable
from remote_batch_local.tokens import Principal, TokenStore

logger = logging.getLogger(__name__)

# API Gateway's own limit (10 MiB); the deployed WAF web ACL refuses above docs/http-api.md's 5 MiB first.
MAX_GATEWAY_BODY_BYTES = 10 * 1024 * 1024
# One read of a request body (bytes); a body arrives in as many reads as the network splits it into.
BODY_READ_BYTES = 64 * 1024
# A body that ended before its Content-Length: refused (400), never passed on cut short.
TRUNCATED_BODY_MESSAGE = (
    "The request body ended after {received} of the {expected} bytes its Content-Length announced; "
    "send the whole body."
)
STAGE = "local"
HEALTH_PATH = "/health"
BEARER = "bearer "
# Methods that never write: answered while the state disk refuses writes.
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
DISK_UNAVAILABLE_CODE = "ServiceUnavailable"


class BatchEventLog(Protocol):
    """What the local batch-events routes need of the event bus."""

    def emitted_for(self, job_id: str) -> list[dict[str, Any]]:
        """Envelopes emitted for a job and its children, in order."""

    def replay(self, envelopes: Iterable[dict[str, Any]]) -> None:
        """Deliver envelopes again, in the given order."""


def error_response(status: int, code: str, message: str, field: str | None = None) -> Response:
    """docs/http-api.md's error body with ``status``."""
    body = {"error": {"code": code, "message": message, "field": field}}
    return Response(json.dumps(body), status=status, content_type="application/json")


def disk_unavailable_response(status: DiskStatus) -> Response:
    """503 ``ServiceUnavailable`` naming why the state disk takes no writes, with ``Retry-After``."""
    response = error_response(503, DISK_UNAVAILABLE_CODE, status.message)
    response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def _json_response(status: int, value: Any) -> Response:
    return Response(json.dumps(value), status=status, content_type="application/json")


def proxy_event(request: Request, body: bytes, principal: Principal | None, now: datetime) -> dict[str, Any]:
    """The API Gateway REST proxy (v1) event of ``request`` on the ``/{proxy+}`` resource.

    ``principal`` None (``/health``) means the route has no authorizer: no ``authorizer`` key.
    """
    headers: dict[str, str] = {}
    multi_headers: dict[str, list[str]] = {}
    for name, value in request.headers.items():
        headers[name] = value
        multi_headers.setdefault(name, []).append(value)
    query = {key: values[-1] for key, values in request.args.lists()}
    multi_query = dict(request.args.lists())
    try:
        text: str | None = body.decode("utf-8") if body else None
        encoded = False
    except UnicodeDecodeError:
        text, encoded = base64.b64encode(body).decode("ascii"), True
    request_id = str(uuid.uuid4())
    context: dict[str, Any] = {
        "accountId": LOCAL_ACCOUNT_ID,
        "apiId": "local",
        "resourceId": "local",
        "stage": STAGE,
        "requestId": request_id,
        "extendedRequestId": request_id,
        "httpMethod": request.method,
        "path": request.path,
        "resourcePath": "/{proxy+}",
        "protocol": request.environ.get("SERVER_PROTOCOL", "HTTP/1.1"),
        "domainName": request.host,
        "identity": {"sourceIp": request.remote_addr or "127.0.0.1", "userAgent": request.user_agent.string},
        "requestTime": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
        "requestTimeEpoch": int(now.timestamp() * 1000),
    }
    if principal is not None:
        groups = ",".join(role for role in principal.roles if role != "user")
        context["authorizer"] = {
            "claims": {
                "sub": principal.account_id,
                "cognito:username": principal.account_id,
                "cognito:groups": groups,
                "token_use": "id",
            }
        }
    proxy = request.path.lstrip("/")
    return {
        "resource": "/{proxy+}",
        "path": request.path,
        "httpMethod": request.method,
        "headers": headers or None,
        "multiValueHeaders": multi_headers or None,
        "queryStringParameters": query or None,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": {"proxy": proxy} if proxy else None,
        "stageVariables": None,
        "requestContext": context,
        "body": text,
        "isBase64Encoded": encoded,
    }


def http_response(result: Any) -> Response:
    """The HTTP response of a Lambda proxy response (``multiValueHeaders`` win over ``headers``)."""
    if not isinstance(result, dict) or not isinstance(result.get("statusCode"), int):
        logger.error("api returned a malformed proxy response type=%s", type(result).__name__)
        return error_response(500, "InternalError", "The service failed to answer; try again shortly.")
    headers = Headers()
    multi = result.get("multiValueHeaders") or {}
    for name, values in multi.items():
        for value in values:
            headers.add(name, str(value))
    taken = {name.lower() for name in multi}
    for name, value in (result.get("headers") or {}).items():
        if name.lower() not in taken:
            headers.add(name, str(value))
    raw = result.get("body") or ""
    body = base64.b64decode(raw) if result.get("isBase64Encoded") else str(raw).encode("utf-8")
    if body and "content-type" not in {name.lower() for name in headers.keys()}:  # noqa: SIM118
        headers.add("Content-Type", "application/json")
    return Response(body, status=result["statusCode"], headers=headers)


class ApiGateway:
    """The WSGI application the local stack serves.

    Parameters
    ----------
    tokens : TokenStore
        The authorizer's token lookup.
    invoke_api : Callable[[dict], dict]
        The api Lambda (serialized: one request at a time).
    events : BatchEventLog
        The event bus (``/local/batch-events``).
    accounts : LocalAccounts
        Account creation (``POST /admin/accounts``).
    admin_environment : Callable[[], contextlib.AbstractContextManager]
        Held while an admin route writes, as the api function would be.
    clock : Callable[[], datetime]
        ``requestTimeEpoch``'s source.
    limiter : AccountRateLimiter | None
        Each account's request rate (429 ``RateLimited`` with ``Retry-After`` past it); None: no limit.
    dispatch_stats : Callable[[], dict] | None
        The dispatch queue's and the Batch gateway's SubmitJob numbers (``GET /local/dispatch``).
    console : ConsoleFiles | None
        The web console's files (``/console/``, ``/docs/assets/``), served without a token; None: not served.
    disk : StateDisk | None
        The home's filesystem. While it refuses writes (full, read-only), a request that may write
        (any method but GET, HEAD, OPTIONS) is answered 503 ``ServiceUnavailable`` before anything is
        invoked, so nothing of it is written; ``GET /health`` answers the same 503 with the reason; a
        5xx of a request that met the refusal on its way is answered as that 503 too.
    """

    def __init__(
        self,
        *,
        tokens: TokenStore,
        invoke_api: Callable[[dict[str, Any]], dict[str, Any]],
        events: BatchEventLog,
        accounts: LocalAccounts,
        admin_environment: Callable[[], Any],
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        limiter: AccountRateLimiter | None = None,
        dispatch_stats: Callable[[], dict[str, Any]] | None = None,
        disk: StateDisk | None = None,
        console: ConsoleFiles | None = None,
    ) -> None:
        self._console = console
        self._dispatch_stats = dispatch_stats
        self._disk = disk
        self._tokens = tokens
        self._invoke_api = invoke_api
        self._events = events
        self._accounts = accounts
        self._admin_environment = admin_environment
        self._clock = clock
        self._limiter = limiter
        # Each local-only route with its action of the role table (functions.domain.roles), as the
        # api's routes name theirs.
        self._local_routes: dict[
            tuple[str, str], tuple[str, Callable[[Request, bytes, Principal], Response]]
        ] = {
            ("GET", "/local/batch-events"): ("batchEvents/read", self._emitted_events),
            ("POST", "/local/batch-events"): ("batchEvents/replay/action", self._replay_events),
            ("POST", "/admin/accounts"): ("accounts/create/action", self._create_account),
            ("GET", "/local/dispatch"): ("fleet/read", self._dispatch_numbers),
        }

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        request = Request(environ)
        started = time.monotonic()
        try:
            response = self._handle(request)
        except StateDiskUnavailable as refused:
            logger.warning(
                "request refused: the state disk takes no writes method=%s path=%s",
                request.method,
                request.path,
            )
            response = disk_unavailable_response(refused.status)
        except ServiceError as exc:
            if exc.status >= 500:
                logger.error("request failed method=%s path=%s error=%s", request.method, request.path, exc)
                response = error_response(
                    exc.status, exc.code, "The service failed to answer; try again shortly."
                )
            else:
                response = error_response(exc.status, exc.code, exc.message, exc.field)
        except OSError as exc:
            # The gateway's own writes (tokens.json, credentials.json of POST /admin/accounts).
            met = self._disk.report(exc) if self._disk is not None else None
            if met is None:
                logger.exception("request failed method=%s path=%s", request.method, request.path)
                response = error_response(
                    500, "InternalError", "The service failed to answer; try again shortly."
                )
            else:
                response = disk_unavailable_response(met.status)
        except Exception:
            logger.exception("request failed method=%s path=%s", request.method, request.path)
            response = error_response(
                500, "InternalError", "The service failed to answer; try again shortly."
            )
        if response.status_code >= 500 and response.status_code != 503 and self._disk is not None:
            # A write refused on the way (the disk filled after the request was admitted) fails the
            # api function with a 500: the caller is told why, and that retrying later is right.
            status = self._disk.status()
            if status is not None:
                response = disk_unavailable_response(status)
        logger.debug(
            "request method=%s path=%s status=%d ms=%d",
            request.method,
            request.path,
            response.status_code,
            (time.monotonic() - started) * 1000,
        )
        return response(environ, start_response)

    # -- API Gateway's part --------------------------------------------------------------------------
    def _handle(self, request: Request) -> Response:
        if self._console is not None and self._console.serves(request.path):
            return self._console.answer(request)
        if request.path == HEALTH_PATH and self._disk is not None:
            status = self._disk.status()
            if status is not None:
                return disk_unavailable_response(status)
        # Before the token is read: which of two Authorization headers counts is not for us to guess.
        check_single_valued(
            request.environ.get(HEADER_LINES) or [name for name, _ in request.headers.items()]
        )
        principal = None if request.path == HEALTH_PATH else self._authorize(request)
        if principal is not None and self._limiter is not None:
            wait = self._limiter.take(principal.account_id)
            if wait > 0:
                response = error_response(429, RATE_LIMITED_CODE, RATE_LIMITED_MESSAGE)
                response.headers["Retry-After"] = retry_after_header(wait)
                return response
        body = self._read_body(request)
        if self._disk is not None and request.method not in READ_METHODS:
            self._disk.check()
        local_route = self._local_routes.get((request.method, request.path))
        if local_route is not None:
            action, serve = local_route
            if principal is None or not holds(Role.ADMIN if principal.is_admin else None, action):
                raise Forbidden(denial_message(action, None, None))
            return serve(request, body, principal)
        return http_response(self._invoke_api(proxy_event(request, body, principal, self._clock())))

    def _authorize(self, request: Request) -> Principal:
        header = request.headers.get("Authorization")
        if not header:
            raise Unauthorized("Missing Authorization header; send 'Authorization: Bearer <token>'.")
        if not header.lower().startswith(BEARER) or not header[len(BEARER) :].strip():
            raise Unauthorized("Malformed Authorization header; send 'Authorization: Bearer <token>'.")
        principal = self._tokens.lookup(header[len(BEARER) :].strip())
        if principal is None:
            raise Unauthorized(
                "Unknown token; use a token from .remote-batch/credentials.json or POST /admin/accounts."
            )
        return principal

    @staticmethod
    def _read_body(request: Request) -> bytes:
        """The body, refused as the deployed stack refuses it: the WAF web ACL answers 413 to a
        Content-Length over 5 MiB and to a chunked body; API Gateway to anything over 10 MiB.

        The whole ``Content-Length`` is read before anything is invoked: one read of the input stream
        returns what has arrived so far, so it is read until it is complete. A body that ends early
        (the client closed the connection after fewer bytes than it announced) is never passed on:

        Raises
        ------
        ValidationFailed
            400 ``ValidationError`` with ``TRUNCATED_BODY_MESSAGE`` (the client that closed may not
            read it; what matters is that no route ran).
        PayloadTooLarge
            413, as above.
        """
        if "chunked" in request.headers.get("Transfer-Encoding", "").lower():
            raise PayloadTooLarge(BODY_WITHOUT_LENGTH_MESSAGE)
        expected = request.content_length
        if expected is not None and expected > MAX_BODY_BYTES:
            raise PayloadTooLarge(BODY_TOO_LARGE_MESSAGE)
        stream = request.stream
        parts: list[bytes] = []
        received = 0
        while received <= MAX_GATEWAY_BODY_BYTES:
            try:
                part = stream.read(min(BODY_READ_BYTES, MAX_GATEWAY_BODY_BYTES + 1 - received))
            except ClientDisconnected:  # werkzeug: the stream ended before its Content-Length
                part = b""
            if not part:
                break
            parts.append(part)
            received += len(part)
        if received > MAX_GATEWAY_BODY_BYTES:
            raise PayloadTooLarge(BODY_TOO_LARGE_MESSAGE)
        if expected is not None and received < expected:
            logger.info(
                "truncated request body refused method=%s path=%s received=%d content_length=%d",
                request.method,
                request.path,
                received,
                expected,
            )
            raise ValidationFailed(TRUNCATED_BODY_MESSAGE.format(received=received, expected=expected))
        return b"".join(parts)

    # -- local-only routes ---------------------------------------------------------------------------
    def _emitted_events(self, request: Request, body: bytes, principal: Principal) -> Response:
        job_id = request.args.get("jobId")
        if not job_id:
            raise ValidationFailed("jobId is required: GET /local/batch-events?jobId=<id>.", field="jobId")
        return _json_response(200, {"events": self._events.emitted_for(job_id)})

    def _replay_events(self, request: Request, body: bytes, principal: Principal) -> Response:
        parsed = _parse_json(body)
        events = parsed.get("events") if isinstance(parsed, dict) else None
        if not isinstance(events, list):
            raise ValidationFailed(
                'The body must be {"events": [<EventBridge envelope>, ...]}.', field="events"
            )
        for index, envelope in enumerate(events):
            if not isinstance(envelope, dict):
                raise ValidationFailed("Each event must be a JSON object.", field=f"events[{index}]")
        self._events.replay(events)
        return _json_response(202, {"accepted": len(events)})

    def _dispatch_numbers(self, request: Request, body: bytes, principal: Principal) -> Response:
        return _json_response(200, self._dispatch_stats() if self._dispatch_stats else {})

    def _create_account(self, request: Request, body: bytes, principal: Principal) -> Response:
        new = parse_new_account(_parse_json(body))
        with self._admin_environment():
            token = self._accounts.register(new, actor=principal.account_id)
        logger.info("account created account_id=%s", new.account_id)
        return _json_response(201, {"accountId": new.account_id, "token": token})


def _parse_json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, binascii.Error):
        raise ValidationFailed("The request body is not valid JSON.", field=None) from None
    except RecursionError:
        raise ValidationFailed("The request body nests JSON too deeply.", field=None) from None
