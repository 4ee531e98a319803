"""A Lambda context object for handlers invoked in-process (what Powertools' logger reads)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

LOCAL_ACCOUNT_ID = "000000000000"


@dataclass(frozen=True, slots=True)
class LocalLambdaContext:
    """The attributes of ``LambdaContext`` that handlers and Powertools use.

    ``get_remaining_time_in_millis`` counts down from the function's timeout from creation on; the
    local stack does not enforce the timeout (a handler that overruns it is a bug the log shows).
    """

    function_name: str
    memory_limit_in_mb: int
    timeout_seconds: float
    region: str
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    function_version: str = "$LATEST"
    started_at: float = field(default_factory=time.monotonic)

    @property
    def invoked_function_arn(self) -> str:
        """The function's ARN in the local account."""
        return f"arn:aws:lambda:{self.region}:{LOCAL_ACCOUNT_ID}:function:{self.function_name}"

    @property
    def log_group_name(self) -> str:
        """The log group a Lambda of this name writes to."""
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        """One stream per execution environment, as on Lambda (here: one per function)."""
        return f"local/[{self.function_version}]{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        """Milliseconds left before the function's timeout (never negative)."""
        left = self.timeout_seconds - (time.monotonic() - self.started_at)
        return max(0, int(left * 1000))
