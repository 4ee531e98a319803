"""Logging, tracing and metrics of the Lambdas, made once for every handler.

- ``logger``: one powertools ``Logger`` (service ``remote-batch``); the logic layer's ``Logger(child=True)``
  loggers share its handler and keys. Every line carries a ``correlation_id``: the API Gateway request id
  for the api, the EventBridge event id for batch_events and meter (``lambda_entry``'s path).
- ``metrics``: one powertools ``Metrics`` (namespace ``RemoteBatch``), flushed as CloudWatch EMF at the end
  of each invocation. ``MetricsEvents`` is the ``EventCounter`` port the logic layer counts its events on.
- the tracer: a powertools ``Tracer`` made on first use and only when tracing is on (in a Lambda and
  ``POWERTOOLS_TRACE_DISABLED`` not truthy), so the X-Ray SDK is never imported otherwise. It records no
  response (``capture_response=False``: responses hold the once-shown ``webhookSecret`` and presigned URLs)
  and patches boto3/botocore only (the X-Ray ``httplib`` patch would record each webhook URL).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.metrics import MetricResolution, MetricUnit
from aws_lambda_powertools.metrics.functions import is_metrics_disabled

if TYPE_CHECKING:
    from aws_lambda_powertools import Tracer
    from aws_lambda_powertools.utilities.typing import LambdaContext

SERVICE = "remote-batch"
NAMESPACE = "RemoteBatch"
# Only AWS SDK calls become subsegments: their recorded parameters are table, bucket and key names.
PATCHED_MODULES = ("boto3", "botocore")

API_GATEWAY_REQUEST_ID = correlation_paths.API_GATEWAY_REST
EVENT_BRIDGE_EVENT_ID = correlation_paths.EVENT_BRIDGE

# The truthy spellings powertools accepts for its boolean variables (its ``strtobool``).
_TRUTHY = frozenset({"1", "y", "yes", "t", "true", "on"})


class _Metrics(Metrics):
    """powertools ``Metrics`` that keeps nothing while metrics are disabled
    (``POWERTOOLS_METRICS_DISABLED``, as the local stack and the tests run).

    powertools 3.x skips only the flush when disabled: ``add_metric`` still keeps every value and, once
    a metric holds 100 values, prints the whole EMF document to stdout
    (``AmazonCloudWatchEMFProvider.add_metric``), so the local stack's console got a JSON blob every
    100 events.
    """

    def add_metric(
        self, name: str, unit: MetricUnit | str, value: float, resolution: MetricResolution | int = 60
    ) -> None:
        """Add ``value`` to metric ``name`` unless metrics are disabled (then nothing is kept)."""
        if is_metrics_disabled():
            return
        super().add_metric(name=name, unit=unit, value=value, resolution=resolution)


logger = Logger(service=SERVICE)
metrics = _Metrics(namespace=NAMESPACE, service=SERVICE)

Handler = Callable[[dict[str, Any], "LambdaContext"], dict[str, Any]]


def tracing_enabled(environ: dict[str, str] | None = None) -> bool:
    """Whether this process sends traces: in a Lambda (``AWS_LAMBDA_FUNCTION_NAME`` set), not under
    SAM local (``AWS_SAM_LOCAL``), and ``POWERTOOLS_TRACE_DISABLED`` not truthy (powertools' own rule,
    Tracer documentation, "Disabling tracing")."""
    env = os.environ if environ is None else environ
    if env.get("POWERTOOLS_TRACE_DISABLED", "false").strip().lower() in _TRUTHY:
        return False
    return bool(env.get("AWS_LAMBDA_FUNCTION_NAME")) and not env.get("AWS_SAM_LOCAL")


_tracers: list[Tracer | None] = []


def install_tracer(tracer: Tracer | None) -> None:
    """Make ``tracer`` the one every handler records with (None: no tracing at all).

    For tests that record traces; a deployed Lambda never calls it (``get_tracer`` builds its own).
    """
    _tracers.clear()
    _tracers.append(tracer)


def reset_tracer() -> None:
    """Forget the tracer so the next ``get_tracer`` decides again from the environment."""
    _tracers.clear()


def get_tracer() -> Tracer | None:
    """The process's tracer, made on first call when ``tracing_enabled()``, else None.

    The X-Ray SDK is imported here only, and only when tracing is on.
    """
    if not _tracers:
        if tracing_enabled():
            from aws_lambda_powertools import Tracer

            _tracers.append(Tracer(service=SERVICE, patch_modules=PATCHED_MODULES))
        else:
            _tracers.append(None)
    return _tracers[0]


def lambda_entry(correlation_id_path: str, *, capture_error: bool = True) -> Callable[[Handler], Handler]:
    """Decorate a Lambda handler: EMF metrics flushed, the invocation traced without its response, and
    logs with the Lambda context and the correlation id found at ``correlation_id_path`` (a JMESPath
    into the event, e.g. ``API_GATEWAY_REQUEST_ID``); the event itself is never logged.

    ``capture_error=False`` keeps exception messages out of traces (the api's, whose errors may quote
    what a caller sent); the batch_events and meter errors are AWS SDK errors and keep theirs.
    """

    def decorate(handler: Handler) -> Handler:
        # log_event=False whatever POWERTOOLS_LOGGER_LOG_EVENT says: an event holds request bodies.
        logged = logger.inject_lambda_context(
            correlation_id_path=correlation_id_path, clear_state=True, log_event=False
        )(handler)

        @functools.wraps(handler)
        def traced(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
            tracer = get_tracer()
            if tracer is None:
                return logged(event, context)
            recorded = tracer.capture_lambda_handler(
                logged, capture_response=False, capture_error=capture_error
            )
            result: dict[str, Any] = recorded(event, context)
            return result

        flushed: Handler = metrics.log_metrics(traced)
        return flushed

    return decorate


class MetricsEvents:
    """The ``EventCounter`` port on powertools ``Metrics``: each event a CloudWatch metric of the
    ``RemoteBatch`` namespace (unit Count, or None for amounts such as credits)."""

    def count(self, name: str, value: float = 1, *, amount: bool = False) -> None:
        """Add ``value`` to metric ``name`` for this invocation (``amount``: a quantity, not a count)."""
        metrics.add_metric(name=name, unit=MetricUnit.NoUnit if amount else MetricUnit.Count, value=value)
