"""moto's request dispatcher with the backend of each signed request remembered.

moto 5's ``DomainDispatcherApplication.get_application`` finds the backend of every request under one
process-wide lock, and on the way lists moto's modules on disk (``backends.list_of_moto_modules``:
a directory walk with an ``isdir`` per entry): a few milliseconds per request, serialized across every
service. A SigV4-signed request's backend follows from its credential scope (service, region) and, for
DynamoDB, its ``X-Amz-Target`` prefix (moto's ``infer_service_region_host``), so the app found for one
such request serves every later request with the same ones. Requests moto resolves from anything else
(its own API, unsigned requests, S3 Control's paths and hosts) are resolved by moto every time.
"""

from __future__ import annotations

import threading
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication


def backend_key(environ: dict[str, Any]) -> tuple[str, str, str] | None:
    """What decides a signed request's backend: (service, region, target prefix), or None when the
    request is one moto resolves another way (moto's API, instance metadata, unsigned, S3 Control)."""
    path = str(environ.get("PATH_INFO", ""))
    if path.startswith(("/moto-api", "/latest/")) or path == "/favicon.ico":
        return None
    auth = environ.get("HTTP_AUTHORIZATION")
    if not isinstance(auth, str) or not auth.startswith("AWS4-HMAC-SHA256 "):
        return None
    try:
        _, _, region, service, _ = auth.split(",")[0].split()[1].split("/")
    except (IndexError, ValueError):
        return None
    service = service.lower()
    if service == "s3" and (
        path.startswith("/v20180820/") or "s3-control" in str(environ.get("HTTP_HOST", ""))
    ):
        return None
    if service not in _REMEMBERED_SERVICES:
        return None
    target = str(environ.get("HTTP_X_AMZ_TARGET", "")).split(".", 1)[0]
    return service, region, target


# The services the local stack calls, whose backend moto derives from the scope alone (others, e.g.
# execute-api, bedrock or sagemaker, look at the path too).
_REMEMBERED_SERVICES = frozenset(
    {"dynamodb", "s3", "sns", "sqs", "logs", "iam", "sts", "batch", "events", "kms", "ecr", "ec2", "lambda"}
)


class RememberingDispatcher(DomainDispatcherApplication):
    """``DomainDispatcherApplication`` that remembers the app of each ``backend_key``."""

    def __init__(self, create_app: Any) -> None:
        super().__init__(create_app)
        self._remembered: dict[tuple[str, str, str], Any] = {}
        self._remembered_lock = threading.Lock()

    def get_application(self, environ: dict[str, Any]) -> Any:
        """The app of the request's backend (moto's own lookup the first time for each key)."""
        key = backend_key(environ)
        if key is None:
            return super().get_application(environ)
        app = self._remembered.get(key)
        if app is None:
            app = super().get_application(environ)
            with self._remembered_lock:
                self._remembered[key] = app
        return app
