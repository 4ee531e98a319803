"""Per-invocation state of the Lambdas' module-level objects, kept per thread on the local stack.

On AWS each concurrent invocation of a function runs in an execution environment of its own (its own
interpreter, hence its own module globals), and an environment serves one invocation at a time (AWS
Lambda Developer Guide, "Lambda execution environment" and "Understanding Lambda function scaling").
The handlers rely on that: they keep what belongs to the current invocation on module-level
powertools objects:

- the api's ``APIGatewayRestResolver`` (``functions.handlers.api.app.app``): the current event and
  Lambda context (powertools 3 stores them as class attributes of ``BaseRouter`` in ``resolve``) and
  the per-request ``context`` dict (the matched route, its arguments, the parsed request);
- the ``Logger``'s formatter (``functions.observability.logger``): the keys of the invocation (the
  Lambda context's fields and the correlation id, reset by ``inject_lambda_context(clear_state=True)``);
- the ``Metrics`` provider (``functions.observability.metrics``): the metrics, dimensions and metadata
  added during the invocation, flushed and cleared at its end.

Everything else the handlers reach is safe to share between threads: boto3 clients (made once under a
lock, ``functions.bootstrap.LazyClient``), the stateless adapters, the installed ``Services``, and
powertools idempotency (one persistence layer per table; its config's Lambda context is only read for
the remaining time, the same function's for every caller).

The local stack runs many invocations of one function at once in threads of one process. ``confine``
gives each thread its own copy of the attributes above, so concurrent invocations behave as if each
had its environment: a thread's first read of an attribute gets a fresh value (a copy of the one the
object held when it was confined), later reads and writes stay in that thread. Only the objects
passed to it change (their class is swapped for a subclass with one property per attribute);
``functions/`` is unchanged and runs on AWS as before.
"""

from __future__ import annotations

import copy
import functools
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

_MISSING = object()
# The attributes of each object that hold one invocation's state, and how a new thread starts them.
RESOLVER_ATTRIBUTES = ("current_event", "lambda_context", "context")
FORMATTER_ATTRIBUTES = ("log_format",)
METRICS_PROVIDER_ATTRIBUTES = ("metric_set", "dimension_set", "dimension_sets", "metadata_set", "timestamp")


def _confined_property(name: str, local: threading.local, initial: Callable[[], Any]) -> property:
    def get(self: Any) -> Any:
        value = getattr(local, name, _MISSING)
        if value is _MISSING:
            value = initial()
            setattr(local, name, value)
        return value

    def set_(self: Any, value: Any) -> None:
        setattr(local, name, value)

    return property(get, set_, doc=f"``{name}`` of the calling thread (remote_batch_local.confinement).")


def confine(
    target: Any,
    attributes: Iterable[str],
    methods: Mapping[str, Callable[..., Any]] | None = None,
    start_empty: Iterable[str] = (),
) -> threading.local:
    """Make ``attributes`` of ``target`` per-thread (see the module docstring). Idempotent: a target
    already confined keeps its storage (the handlers' objects live as long as the process, the local
    stack may be started more than once in it).

    Parameters
    ----------
    target : object
        An instance whose class may be swapped (a plain Python class).
    attributes : Iterable[str]
        Attribute names. A thread that reads one first gets a deep copy of the value ``target`` held
        (on the instance, else on its class) when it was confined, or None when it held none.
    methods : Mapping[str, Callable] | None
        Methods of the subclass (they reach the original ones with ``super(type(self), self)``).
    start_empty : Iterable[str]
        Those of ``attributes`` a thread starts as None whatever ``target`` held.

    Returns
    -------
    threading.local
        The per-thread storage (for tests).
    """
    cls = type(target)
    existing: threading.local | None = cls.__dict__.get("__confined__")
    if existing is not None:
        return existing
    local = threading.local()
    namespace: dict[str, Any] = {"__confined__": local, "__module__": cls.__module__, **(methods or {})}
    empty = set(start_empty)
    for name in attributes:
        base = target.__dict__.pop(name, getattr(cls, name, None))
        if name in empty:
            base = None
        namespace[name] = _confined_property(name, local, functools.partial(copy.deepcopy, base))
    target.__class__ = type(f"ThreadConfined{cls.__name__}", (cls,), namespace)
    return local


def confine_resolver(resolver: Any) -> threading.local:
    """Confine a powertools REST resolver: the event, the Lambda context and the request context.

    ``resolve`` (powertools 3.37, ``ApiGatewayResolver.resolve``) stores the event and the context on
    ``BaseRouter`` itself, for every resolver and router of the process; the subclass sets the calling
    thread's copies first (the event as ``_to_proxy_event`` makes it), and every reader (the routes'
    dependencies, the routers, the validation middleware) reads them through the resolver instance.
    """

    def resolve(self: Any, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        self.lambda_context = context
        answer: dict[str, Any] = super(type(self), self).resolve(event, context)
        return answer

    def _to_proxy_event(self: Any, event: dict[str, Any]) -> Any:
        proxy = super(type(self), self)._to_proxy_event(event)
        self.current_event = proxy
        return proxy

    return confine(
        resolver,
        RESOLVER_ATTRIBUTES,
        {"resolve": resolve, "_to_proxy_event": _to_proxy_event},
        start_empty=("current_event", "lambda_context"),
    )


def confine_logger(logger: Any) -> threading.local:
    """Confine a powertools ``Logger``'s keys (its registered formatter's ``log_format``)."""
    return confine(logger.registered_formatter, FORMATTER_ATTRIBUTES)


def confine_metrics(metrics: Any) -> threading.local:
    """Confine a powertools ``Metrics``' metrics, dimensions, metadata and time stamp (its provider's)."""
    return confine(metrics.provider, METRICS_PROVIDER_ATTRIBUTES)
