"""The four Lambda functions, invoked in-process with the execution model of Lambda.

One execution environment per function: each function serves one invocation at a time (its
handler, like Powertools' resolver, keeps per-request state in module globals and is not
thread-safe). The handler modules are imported on first construction, after
``functions.bootstrap.install`` has put the local services in place.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

from remote_batch.local.lambda_context import LocalLambdaContext

logger = logging.getLogger(__name__)

# The same memory and timeouts the CDK app gives the deployed functions (infra/constants.py).
_MEMORY_MIB = {"api": 1024, "batch_events": 512, "meter": 1024, "dispatcher": 512}
_TIMEOUT_SECONDS = {"api": 29, "batch_events": 60, "meter": 55, "dispatcher": 60}
_FUNCTION_PREFIX = "remote-batch-local-"


@dataclass
class _Function:
    """One function and the lock that makes it one execution environment."""

    name: str
    handler: Callable[[dict[str, Any], Any], Any]
    region: str
    lock: threading.Lock = field(default_factory=threading.Lock)

    def invoke(self, event: dict[str, Any]) -> Any:
        with self.lock:
            context = LocalLambdaContext(
                function_name=_FUNCTION_PREFIX + self.name.replace("_", "-"),
                memory_limit_in_mb=_MEMORY_MIB[self.name],
                timeout_seconds=_TIMEOUT_SECONDS[self.name],
                region=self.region,
            )
            return self.handler(event, context)


class LocalLambdas:
    """The api, batch_events, meter and dispatcher functions of ``functions.handlers``.

    Parameters
    ----------
    region : str
        The home region (in the functions' ARNs).
    """

    def __init__(self, region: str) -> None:
        from functions.handlers import api, batch_events, dispatcher, meter

        self._api = _Function("api", api.handler, region)
        self._dispatcher = _Function("dispatcher", dispatcher.handler, region)
        self._batch_events = _Function("batch_events", batch_events.handler, region)
        self._meter = _Function("meter", meter.handler, region)

    def invoke_api(self, event: dict[str, Any]) -> dict[str, Any]:
        """Invoke the api function with an API Gateway REST proxy event; returns its proxy response."""
        response: dict[str, Any] = self._api.invoke(event)
        return response

    def deliver_batch_event(self, envelope: dict[str, Any]) -> None:
        """Invoke the batch_events function with one EventBridge envelope (errors propagate)."""
        self._batch_events.invoke(envelope)

    def tick_meter(self, envelope: dict[str, Any]) -> Any:
        """Invoke the meter function with one scheduled-event envelope."""
        return self._meter.invoke(envelope)

    def dispatch(self, event: dict[str, Any]) -> Any:
        """Invoke the dispatcher function with an SQS event; returns its partial batch response."""
        return self._dispatcher.invoke(event)

    @contextmanager
    def api_environment(self) -> Iterator[None]:
        """Run gateway-side work (the local-only admin routes) as if inside the api function."""
        with self._api.lock:
            yield

    @contextmanager
    def quiesced(self) -> Iterator[None]:
        """Hold every function idle, so the tables can be read as one consistent snapshot.

        Every DynamoDB write of the service happens inside a function. A function may deliver to
        another synchronously (api, meter or dispatcher → batch_events through the bus), never the
        reverse, so taking the locks outermost first cannot deadlock.
        """
        with ExitStack() as stack:
            for function in (self._api, self._meter, self._dispatcher, self._batch_events):
                stack.enter_context(function.lock)
            yield
