"""The process's default connection: ``rb.connect`` sets it, every SDK function without ``client=``
uses it (made on first use by the lookup order of ``remote_batch.config``)."""

from __future__ import annotations

import os
import threading

from remote_batch import config
from remote_batch.client import Client
from remote_batch.config import Profile
from remote_batch.errors import ConfigurationError

#: The environment variable naming the account requests act in (``connect(account=...)`` wins).
ACCOUNT_ENV = "REMOTE_BATCH_ACCOUNT"

_lock = threading.Lock()
_default: Client | None = None


def connect(
    endpoint: str | None = None,
    token: str | None = None,
    *,
    profile: str | None = None,
    account: str | None = None,
) -> Client:
    """Set (and return) the process's default client.

    ``connect(endpoint, token)`` uses those; ``connect(profile="name")`` a stored profile;
    ``connect()`` looks up as ``remote_batch.config`` says (environment, profile, local stack).
    ``account`` (else ``REMOTE_BATCH_ACCOUNT``) is the account every request acts in (``X-Account-Id``);
    neither: the token's own.

    Raises ``ConfigurationError`` when nothing is found or only one of ``endpoint``/``token`` is given.
    """
    global _default  # noqa: PLW0603 (the one default connection of the process, as requests' module API)
    if (endpoint is None) != (token is None):
        raise ConfigurationError("Give both endpoint and token, or neither.")
    acting = account if account is not None else (os.environ.get(ACCOUNT_ENV) or None)
    if endpoint is not None and token is not None:
        client = Client(Profile(endpoint=endpoint, token=token, source="connect()"), account=acting)
    elif profile is not None:
        found = config.load_profile(profile)
        if found is None:
            raise ConfigurationError(
                f"No profile {profile!r} in {config.profiles_path()}; "
                f"run `remote-batch login --profile {profile}`."
            )
        client = Client(found, profile, account=acting)
    else:
        found = config.find_profile()
        name = found.source.removeprefix("profile ") if found.source.startswith("profile ") else None
        client = Client(found, name, account=acting)
    with _lock:
        _default = client
    return client


def default_client() -> Client:
    """The process's default client, connecting (``connect()``) on first use."""
    with _lock:
        client = _default
    return client if client is not None else connect()


def resolve(client: Client | None) -> Client:
    """``client``, or the process's default client when None."""
    return client if client is not None else default_client()
