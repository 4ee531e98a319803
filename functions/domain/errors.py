"""Domain errors. Each carries the HTTP status and docs/http-api.md error code it maps to.

The api handler maps every ``ServiceError`` to docs/http-api.md's error body in one place; adapters turn
``ClientError`` codes into these (``raise ... from exc``).
"""

from __future__ import annotations


class ServiceError(Exception):
    """Base of every error a client can be told about.

    Attributes
    ----------
    status : int
        HTTP status code.
    code : str
        docs/http-api.md error code.
    field : str | None
        JSON path of the offending field, when one is to blame.
    shown_to_client : bool
        A 5xx whose message is meant for the client (an operator's reason); other 5xx messages are
        replaced by a generic sentence.
    """

    status = 500
    code = "InternalError"
    shown_to_client = False

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class ValidationFailed(ServiceError):
    """The request's body or query is invalid (400)."""

    status = 400
    code = "ValidationError"


class QuotaExceeded(ServiceError):
    """A job that alone needs more than its account's quota for its machine family and geo zone, or
    more than its total (400): it could never be admitted (``functions.domain.quotas``)."""

    status = 400
    code = "QuotaExceeded"


class Unauthorized(ServiceError):
    """Missing, malformed, expired or unknown token (401)."""

    status = 401
    code = "Unauthorized"


class InsufficientCredits(ServiceError):
    """Submit while the account's balance is not positive (402)."""

    status = 402
    code = "InsufficientCredits"


class Forbidden(ServiceError):
    """Authenticated, but the role lacks the permission (403)."""

    status = 403
    code = "Forbidden"


class NotFound(ServiceError):
    """No such resource for this account (404); another account's job is also this."""

    status = 404
    code = "NotFound"


class JobNotFinished(ServiceError):
    """Result asked before the job reached a final status (409)."""

    status = 409
    code = "JobNotFinished"


class NoOutput(ServiceError):
    """The job ended without output (409)."""

    status = 409
    code = "NoOutput"


class Conflict(ServiceError):
    """Idempotency key reused with another body, or an operation the job's state forbids (409)."""

    status = 409
    code = "Conflict"


class StillInProgress(Conflict):
    """The first request with this Idempotency-Key is still running (409 with ``Retry-After``)."""

    retry_after_seconds = 1


class Expired(ServiceError):
    """The job's inputs/outputs passed their 14-day retention (410)."""

    status = 410
    code = "Expired"


class PayloadTooLarge(ServiceError):
    """Inline body over 5 MiB (413)."""

    status = 413
    code = "PayloadTooLarge"


class Throttled(ServiceError):
    """Request rate limit (429)."""

    status = 429
    code = "Throttled"


class NotSupported(ServiceError):
    """A feature this deployment does not offer (501), e.g. building environments where no builder
    is wired: the same request cannot succeed here, so the message says so."""

    status = 501
    code = "NotSupported"
    shown_to_client = True


class DependencyFailed(ServiceError):
    """An AWS dependency failed; nothing the client did (500, no details leak)."""

    status = 500
    code = "InternalError"


class BatchRefused(DependencyFailed):
    """AWS Batch refused a request for good (its ``ClientException``: an unknown queue or definition,
    bad parameters): sending the same request again cannot succeed."""


class DeliveryRefused(DependencyFailed):
    """A notification the provider refused for good (SNS ``InvalidParameter``, ``EndpointDisabled``,
    ``NotFound``, an opted-out phone; a webhook answering 4xx or pointing at a non-public address):
    sending it again cannot succeed, so it is recorded failed and never retried."""


class ConditionFailed(Exception):
    """A conditional write lost: the item was not in the state the write required.

    Not a client error: logic catches it (a replayed event, a concurrent writer).
    """


class RecordMissing(NotFound, ConditionFailed):
    """A write targeted a record that does not exist: deleted, never written, or past its TTL.

    The store raises it instead of letting an update create a stub item. It is a ``NotFound``
    (a route answers 404) and a ``ConditionFailed`` (event logic re-reads, finds nothing, and
    ignores the event).
    """


class UnreadableRecord(DependencyFailed):
    """A stored item lacks what a record of its kind must have (a stub, a partial write).

    ``key`` names it; readers that list many records log it, count it, and skip it.
    """

    def __init__(self, message: str, key: str) -> None:
        super().__init__(message)
        self.key = key


class ImageNotFound(Exception):
    """An environment's image does not exist where its reference points (no such repository, tag or
    digest, or the registry refuses it to anonymous pulls). Not a client error: the environment is
    created ``Failed`` with the message, which names the image and what is missing."""
