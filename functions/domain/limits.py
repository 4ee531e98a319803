"""Size and time limits of what the API answers (pure: no I/O, no clock).

Source of the numbers: a Lambda behind API Gateway (REST, proxy integration) can return at most 6 MB
(the invoke response, i.e. the proxy response *as JSON*, with the body string escaped inside it:
https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html), and docs/http-api.md promises that
no response body is over 5 MiB. Everything the API inlines is therefore measured as it travels in the
invoke response and kept under ``RESPONSE_BUDGET_BYTES``; what would not fit is served by a presigned
URL instead.
"""

from __future__ import annotations

import json
import math
from datetime import datetime

#: docs/http-api.md: no response body over 5 MiB; a request body over it answers 413 PayloadTooLarge.
MAX_BODY_BYTES = 5 * 1024 * 1024
#: The 413's message, the same from the handler, the local gateway and the deployed WAF rule.
BODY_TOO_LARGE_MESSAGE = "The request body is over 5 MiB; upload large inputs through an upload URL."
#: The same for a body sent without Content-Length (chunked), whose size is known only once read.
BODY_WITHOUT_LENGTH_MESSAGE = (
    "Send the request body with a Content-Length (not chunked); bodies over 5 MiB go through an upload URL."
)
#: What the inlined data of one response may cost on the wire; the rest of the 5 MiB is headroom
#: for the response's other fields and the proxy response's own keys.
RESPONSE_BUDGET_BYTES = 4 * 1024 * 1024
#: Longest life of a presigned URL (seconds): 15 minutes, and never past the job's ``expiresAt``.
PRESIGNED_SECONDS = 15 * 60
#: S3's largest single PUT (bytes): the biggest upload ``POST /jobs/uploads`` signs.
MAX_UPLOAD_BYTES = 5 * 1024**3


def wire_bytes(text: str) -> int:
    """Bytes ``text`` takes as a JSON string in the Lambda invoke response (ASCII-escaped, as the
    Python runtime's ``json.dumps`` writes it): ``"`` and ``\\`` take 2 bytes, a control character 6,
    any other non-ASCII character 6 (12 outside the BMP)."""
    return len(json.dumps(text))


def base64_bytes(size: int) -> int:
    """Length (bytes) of the padded base64 text of ``size`` bytes."""
    return 4 * math.ceil(size / 3)


def presigned_seconds(expires_at: datetime, now: datetime) -> int:
    """``X-Amz-Expires`` of a URL to a job's data: ``min(900, whole seconds until expires_at)``.

    A URL never outlives the data it points at (docs/http-api.md: "Presigned URLs ... never outlive
    ``expiresAt``"). At least 1 (S3's minimum); callers answer 410 once ``now >= expires_at``.
    """
    left = math.floor((expires_at - now).total_seconds())
    return max(1, min(PRESIGNED_SECONDS, left))
