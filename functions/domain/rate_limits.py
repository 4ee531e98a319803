"""Per-account request rate limit of the API: 429 ``RateLimited`` with ``Retry-After``.

One limit, two enforcers:
- Deployed: a rate-based rule of the stage's WAF web ACL (``infra/constructs/api.py``), aggregated on
  the ``Authorization`` header (the caller's Cognito ID token, so per signed-in user of an account),
  ``ACCOUNT_REQUESTS_PER_SECOND`` × 60 requests per 60-second window. Why not API Gateway usage
  plans: a usage plan only identifies a caller by an API key, which comes either from the client's
  ``X-API-Key`` header (a second secret docs/http-api.md's Bearer-only contract does not have) or from a
  Lambda
  authorizer's ``usageIdentifierKey`` (a Cognito user-pool authorizer cannot return one), so it
  would take our own JWT-checking authorizer in front of every request plus one API key per account
  created and kept in step with Cognito (10,000 keys per region by default). The WAF rule needs
  neither, counts before API Gateway and the api Lambda spend anything, and its answer carries the
  same error body and ``Retry-After``. The stage's own throttle (``Throttled``) stays as the
  service-wide ceiling.
- Local stack: a token bucket per account in the local gateway (``TokenBucket``), the same rate,
  ``ACCOUNT_BURST`` requests of burst; ``REMOTE_BATCH_RATE_LIMIT`` / ``REMOTE_BATCH_RATE_BURST``
  change them.

Pure: no clock reads (time is passed in, seconds of a monotonic clock).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

ACCOUNT_REQUESTS_PER_SECOND = 100
ACCOUNT_BURST = 200
# WAF counts requests over a window (60, 120, 300 or 600 s) and notices a rate going back under the
# limit within about 30 s (AWS WAF Developer Guide, "Rate-based rule caveats"): what it tells clients.
WAF_EVALUATION_WINDOW_SECONDS = 60
WAF_RETRY_AFTER_SECONDS = 30
RATE_LIMITED_CODE = "RateLimited"
RATE_LIMITED_MESSAGE = (
    "Too many requests from this account: retry after the number of seconds Retry-After gives."
)


@dataclass(slots=True)
class TokenBucket:
    """A token bucket: ``rate`` tokens a second up to ``capacity``; a request takes one.

    Attributes
    ----------
    rate : float
        Tokens added per second (> 0).
    capacity : float
        Most tokens held (the burst, >= 1).
    tokens : float
        Tokens now (starts full).
    updated : float | None
        When ``tokens`` was last computed (seconds, monotonic); None before the first request.
    """

    rate: float
    capacity: float
    tokens: float = -1.0
    updated: float | None = None

    def take(self, now: float) -> float:
        """Take a token at ``now`` (seconds). Returns 0 when taken, else the seconds until one is
        there (nothing taken)."""
        if self.updated is None or self.tokens < 0:
            self.tokens = self.capacity
        else:
            self.tokens = min(self.capacity, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens >= 1:
            self.tokens -= 1
            return 0.0
        return (1 - self.tokens) / self.rate


def retry_after_header(wait_seconds: float) -> str:
    """``Retry-After``'s value (RFC 9110 §10.2.3: whole seconds): the wait rounded up, at least 1."""
    return str(max(1, math.ceil(wait_seconds)))
