"""The SDK's errors: one class per error code of docs/http-api.md's error table, and ``RemoteJobError``.

Every failure of the HTTP API comes back as ``{"error": {"code", "message", "field"}}`` (docs/http-api.md,
"Conventions"); ``raise_for_error`` turns such a response into the ``ApiError`` subclass named by its
code, so callers catch ``rb.NotFound`` or ``rb.ValidationError`` instead of reading status codes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from remote_batch.environments import Environment
    from remote_batch.jobs import Job


class RemoteBatchError(Exception):
    """Base class of every error the SDK raises."""


class ConfigurationError(RemoteBatchError):
    """No endpoint or token could be found, or a profile is malformed; the message says what to do."""


class ConnectionFailed(RemoteBatchError):
    """The endpoint could not be reached, even after the retries (connection refused, DNS, timeouts)."""


class LoginFailed(RemoteBatchError):
    """Cognito refused the sign-in or the refresh (wrong password, unknown client, expired refresh token)."""


class ApiError(RemoteBatchError):
    """An error answer of the API (docs/http-api.md's error body).

    Attributes
    ----------
    status : int
        The HTTP status (400, 401, ...).
    code : str
        docs/http-api.md's error code (``ValidationError``, ``NotFound``, ...).
    message : str
        The API's sentence a person can act on.
    field : str | None
        The offending field's JSON path (``machineClass``, ``notifications[0].events``) or None.
    """

    def __init__(self, status: int, code: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field

    def __str__(self) -> str:
        suffix = f" (field: {self.field})" if self.field else ""
        return f"{self.code}: {self.message}{suffix}"


class ValidationError(ApiError):
    """400 ``ValidationError``: the body or query failed validation; ``field`` names the field."""


class Unauthorized(ApiError):
    """401: missing, malformed, expired or unknown token."""


class InsufficientCredits(ApiError):
    """402: a submit while the account's credit balance is not positive."""


class Forbidden(ApiError):
    """403: the role lacks the permission (e.g. an admin route)."""


class NotFound(ApiError):
    """404: no such job for this account (or no such route / preview)."""


class Conflict(ApiError):
    """409 ``Conflict``: idempotency key reused with another body, or a delete of a job not final."""


class JobNotFinished(Conflict):
    """409 ``JobNotFinished``: a result asked for before the job is final."""


class NoOutput(Conflict):
    """409 ``NoOutput``: the job ended without output (e.g. its CreditConstraint discarded it)."""


class Expired(ApiError):
    """410: the job's inputs and outputs passed their 14-day retention."""


class PayloadTooLarge(ApiError):
    """413: an inline body over 5 MiB (the SDK uploads large inputs itself)."""


class RateLimited(ApiError):
    """429 (``Throttled`` or ``RateLimited``) still answered after the SDK's retries."""


class QuotaExceeded(ApiError):
    """400 ``QuotaExceeded``: the job is larger than the account's quota."""


class ClassUnavailable(ApiError):
    """503 ``ClassUnavailable``: the machine class is disabled in that zone."""


class NotSupported(ApiError):
    """501 ``NotSupported``: a feature this deployment does not offer (the message says which)."""


class InternalError(ApiError):
    """500 (or an unexpected answer): a bug of the service; the message never carries its stack trace."""


#: docs/http-api.md's error codes → classes. ``Throttled`` is version 1's name of ``RateLimited``.
ERROR_CLASSES: dict[str, type[ApiError]] = {
    "ValidationError": ValidationError,
    "Unauthorized": Unauthorized,
    "InsufficientCredits": InsufficientCredits,
    "Forbidden": Forbidden,
    "NotFound": NotFound,
    "Conflict": Conflict,
    "JobNotFinished": JobNotFinished,
    "NoOutput": NoOutput,
    "Expired": Expired,
    "PayloadTooLarge": PayloadTooLarge,
    "Throttled": RateLimited,
    "RateLimited": RateLimited,
    "QuotaExceeded": QuotaExceeded,
    "ClassUnavailable": ClassUnavailable,
    "NotSupported": NotSupported,
    "InternalError": InternalError,
}

_BY_STATUS: dict[int, type[ApiError]] = {
    400: ValidationError,
    401: Unauthorized,
    402: InsufficientCredits,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Expired,
    413: PayloadTooLarge,
    429: RateLimited,
    501: NotSupported,
}


def api_error(status: int, body: Any) -> ApiError:
    """The ``ApiError`` for an error answer: its class from ``body["error"]["code"]``, else from the
    status (API Gateway's own answers, e.g. ``{"message": "Unauthorized"}``, carry no code)."""
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, dict) and isinstance(detail.get("code"), str):
        code = str(detail["code"])
        message = str(detail.get("message") or code)
        field = detail.get("field")
        cls = ERROR_CLASSES.get(code) or _BY_STATUS.get(status, InternalError)
        return cls(status, code, message, field if isinstance(field, str) else None)
    fallback = _BY_STATUS.get(status, InternalError)
    said = body.get("message") if isinstance(body, dict) else None
    text = str(said) if said else f"The service answered HTTP {status} without an error body."
    return fallback(status, fallback.__name__, text, None)


class RemoteJobError(RemoteBatchError):
    """A job ended ``Terminated``: its code raised, its command failed, or a constraint ended it.

    Attributes
    ----------
    job : Job
        The job (``job.status_reason``, ``job.log`` say more).
    type : str | None
        The remote exception's class name (``ZeroDivisionError``), or None when no exception was
        raised (a command's exit code, a TimeConstraint, an abort).
    message : str
        The remote exception's message, else the job's ``statusReason``.
    traceback : str
        The remote traceback as the worker formatted it (the user's frames only), or "".
    """

    def __init__(self, job: Job, type_name: str | None, message: str, traceback: str = "") -> None:
        self.job = job
        self.type = type_name
        self.message = message
        self.traceback = traceback
        head = f"{type_name}: {message}" if type_name else message
        super().__init__(f"Job {job.id} was Terminated: {head}")

    def __str__(self) -> str:
        text = str(self.args[0])
        return f"{text}\n\nRemote traceback:\n{self.traceback.rstrip()}" if self.traceback else text


class EnvironmentFailed(RemoteBatchError):
    """An environment's build ended ``Failed``: its requirements did not resolve or install, or the
    build reached its time or size limit.

    Attributes
    ----------
    environment : Environment
        The environment (``environment.log()`` holds the resolver's and installer's whole output).
    reason : str
        Its ``statusReason``: ``Environment ml failed: <the first error line>``, or the limit reached.
    """

    def __init__(self, environment: Environment, reason: str) -> None:
        super().__init__(reason)
        self.environment = environment
        self.reason = reason
