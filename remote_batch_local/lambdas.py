"""The four Lambda functions, invoked in-process with the execution model of Lambda.

Invocations run concurrently, as on AWS, where each concurrent invocation gets an execution
environment of its own: each runs in its caller's thread (an HTTP request's, a bus worker's, the
meter ticker's), and the per-invocation state the handlers keep on module-level powertools objects
(the api resolver's event and context, the logger's keys, the metrics) is kept per thread
(``remote_batch_local.confinement``). Races between invocations are the service's to guard, as on
AWS: conditional writes and transactions, idempotency records. The handler modules are imported on
first construction, after ``functions.bootstrap.install`` has put the local services in place.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from remote_batch_local.confinement import confine_logger, confine_metrics, confine_resolver
from remote_batch_local.lambda_context import LocalLambdaContext

logger = logging.getLogger(__name__)

# The same memory and timeouts the CDK app gives the deployed functions (infra/constants.py).
_MEMORY_MIB = {"api": 1024, "batch_events": 512, "meter": 1024, "dispatcher": 512}
_TIMEOUT_SECONDS = {"api": 29, "batch_events": 60, "meter": 55, "dispatcher": 60}
_FUNCTION_PREFIX = "remote-batch-local-"


@dataclass
class _Function:
    """One function: its handler, and how many invocations of it are running (and their peak)."""

    name: str
    handler: Callable[[dict[str, Any], Any], Any]
    region: str
    _guard: threading.Lock = field(default_factory=threading.Lock)
    running: int = 0
    peak: int = 0

    @contextmanager
    def running_one(self) -> Iterator[None]:
        """Counted as one invocation in flight while held."""
        with self._guard:
            self.running += 1
            self.peak = max(self.peak, self.running)
        try:
            yield
        finally:
            with self._guard:
                self.running -= 1

    def invoke(self, event: dict[str, Any]) -> Any:
        context = LocalLambdaContext(
            function_name=_FUNCTION_PREFIX + self.name.replace("_", "-"),
            memory_limit_in_mb=_MEMORY_MIB[self.name],
            timeout_seconds=_TIMEOUT_SECONDS[self.name],
            region=self.region,
        )
        with self.running_one():
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
        from functions.handlers.api.app import app as resolver
        from functions.observability import logger as powertools_logger
        from functions.observability import metrics

        confine_resolver(resolver)
        confine_logger(powertools_logger)
        confine_metrics(metrics)
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
        """Run gateway-side work (the local-only admin routes) as one more api invocation."""
        with self._api.running_one():
            yield

    def in_flight(self) -> dict[str, tuple[int, int]]:
        """Per function (``api``, ``dispatcher``, ``batch_events``, ``meter``): invocations running now
        and the most that ran at once since the start."""
        functions = (self._api, self._dispatcher, self._batch_events, self._meter)
        return {f.name: (f.running, f.peak) for f in functions}
