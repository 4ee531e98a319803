"""The local stack's bearer tokens (what Cognito is when deployed).

A token is ``rb_`` + 32 random bytes (URL-safe base64). Only its SHA-256 is kept, in
``<home>/tokens.json`` (mode 0600): ``{"<sha256 hex>": {"accountId": ..., "roles": [...]}}``. The
plain tokens of the two built-in accounts are written to ``credentials.json`` for the person and the
tests; tokens minted for other accounts are shown once, in the response that created them.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from dataclasses import dataclass
from pathlib import Path

from remote_batch_local.files import read_json, write_json_atomic

TOKEN_PREFIX = "rb_"  # noqa: S105 - a prefix, not a secret
PRIVATE = 0o600


@dataclass(frozen=True, slots=True)
class Principal:
    """Who a token belongs to: the user (``account_id``: a user's id is also the id of the account
    they found, as a Cognito ``sub`` is deployed) and the token's roles (``user``, ``admin``). The
    accounts a user acts in beyond their own are the api's business (``X-Account-Id`` and the
    members of ``functions.domain.roles``), not the token's."""

    account_id: str
    roles: tuple[str, ...]

    @property
    def is_admin(self) -> bool:
        """True when the roles grant the admin routes."""
        return "admin" in self.roles


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class TokenStore:
    """Token digests → principals, persisted at every mint.

    Parameters
    ----------
    path : Path
        ``<home>/tokens.json``; read at construction when it exists.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._lock = threading.Lock()
        stored = read_json(path) or {}
        self._principals = {
            digest: Principal(entry["accountId"], tuple(entry["roles"])) for digest, entry in stored.items()
        }

    def mint(self, account_id: str, roles: tuple[str, ...]) -> str:
        """A new token for ``account_id`` with ``roles``; stored (hashed) before it is returned."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self._lock:
            self._principals[_digest(token)] = Principal(account_id, roles)
            write_json_atomic(
                self._path,
                {d: {"accountId": p.account_id, "roles": list(p.roles)} for d, p in self._principals.items()},
                mode=PRIVATE,
            )
        return token

    def lookup(self, token: str) -> Principal | None:
        """The principal of ``token``, or None for a token this store never minted."""
        if not token.startswith(TOKEN_PREFIX):
            return None
        with self._lock:
            return self._principals.get(_digest(token))
