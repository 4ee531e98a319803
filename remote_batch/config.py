"""Where the SDK finds its endpoint and token, and the profiles ``remote-batch login`` writes.

Lookup order (the first that gives an endpoint wins):

1. ``rb.connect(endpoint, token)`` in this process;
2. the environment: ``REMOTE_BATCH_ENDPOINT`` and ``REMOTE_BATCH_TOKEN``;
3. a named profile (``REMOTE_BATCH_PROFILE``, default ``default``) in ``profiles.json`` of the user's
   config directory (``platformdirs.user_config_path("remote-batch")``, e.g.
   ``~/.config/remote-batch/profiles.json`` on Linux), written by ``remote-batch login``;
4. a running local stack's ``.remote-batch/credentials.json`` in the current directory (or
   ``$REMOTE_BATCH_HOME/credentials.json``), written by ``make dev``: its ``dev`` account's token
   (``REMOTE_BATCH_LOCAL_ACCOUNT`` picks another of its accounts, e.g. ``admin``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import platformdirs

from remote_batch.errors import ConfigurationError

APP_NAME = "remote-batch"
PROFILES_FILE = "profiles.json"
DEFAULT_PROFILE = "default"
LOCAL_HOME = ".remote-batch"
LOCAL_ACCOUNT = "dev"


@dataclass
class Profile:
    """One way to reach the service.

    Attributes
    ----------
    endpoint : str
        The API's base URL (``https://abc.execute-api.eu-west-1.amazonaws.com/prod``, ``http://127.0.0.1:8787``).
    token : str | None
        The bearer token: a Cognito ID token (deployed) or a local stack token.
    refresh_token : str | None
        Cognito's refresh token (profiles written by ``login``): the SDK gets a new ``token`` with it
        when ``token`` expires.
    client_id, region : str | None
        The Cognito user pool app client and its region (for the refresh).
    expires_at : float | None
        When ``token`` expires, seconds since the epoch (from Cognito's ``ExpiresIn``).
    username : str | None
        Who signed in (shown by ``remote-batch account``; never used to sign in again).
    cognito_endpoint : str | None
        Cognito's endpoint URL when not ``https://cognito-idp.<region>.amazonaws.com/`` (tests).
    source : str
        Where the profile came from, for messages (``connect()``, ``environment``, ``profile default``,
        ``local stack /path/.remote-batch/credentials.json``). Not stored.
    """

    endpoint: str
    token: str | None = None
    refresh_token: str | None = None
    client_id: str | None = None
    region: str | None = None
    expires_at: float | None = None
    username: str | None = None
    cognito_endpoint: str | None = None
    source: str = field(default="connect()", compare=False)

    def to_json(self) -> dict[str, Any]:
        """The stored form (``source`` left out)."""
        data = asdict(self)
        data.pop("source")
        return {key: value for key, value in data.items() if value is not None}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str) -> Profile:
        """Read a stored profile. Raises ``ConfigurationError`` when it has no ``endpoint``."""
        endpoint = data.get("endpoint")
        if not isinstance(endpoint, str) or not endpoint:
            raise ConfigurationError(f"The {source} has no endpoint; run `remote-batch login` again.")
        known = {name for name in cls.__dataclass_fields__ if name != "source"}
        values = {key: value for key, value in data.items() if key in known}
        return cls(**values, source=source)


def config_dir() -> Path:
    """The user's config directory for remote-batch (``REMOTE_BATCH_CONFIG_DIR`` overrides it)."""
    override = os.environ.get("REMOTE_BATCH_CONFIG_DIR")
    return Path(override) if override else platformdirs.user_config_path(APP_NAME)


def profiles_path() -> Path:
    """``profiles.json`` in ``config_dir()``: ``{"profiles": {"<name>": {<Profile>}}}``."""
    return config_dir() / PROFILES_FILE


def _read_profiles(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"{path} cannot be read ({exc}); fix or delete it.") from exc
    profiles = document.get("profiles") if isinstance(document, dict) else None
    if not isinstance(profiles, dict):
        raise ConfigurationError(f"{path} has no 'profiles' object; fix or delete it.")
    return profiles


def load_profile(name: str) -> Profile | None:
    """The stored profile ``name``, or None when there is none. Raises ``ConfigurationError`` when
    the file or the profile is malformed."""
    path = profiles_path()
    data = _read_profiles(path).get(name)
    if data is None:
        return None
    if not isinstance(data, dict):
        raise ConfigurationError(f"Profile {name!r} in {path} is not an object; run `remote-batch login`.")
    return Profile.from_json(data, f"profile {name}")


def save_profile(name: str, profile: Profile) -> Path:
    """Store ``profile`` as ``name`` (replacing it), the file readable by its owner only (0600).

    Returns the file's path. The file is replaced atomically, so a crash never leaves half of it.
    """
    path = profiles_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    profiles = _read_profiles(path)
    profiles[name] = profile.to_json()
    temporary = path.with_suffix(".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as out:
        json.dump({"profiles": profiles}, out, indent=1, sort_keys=True)
    temporary.replace(path)
    return path


def local_stack_profile(cwd: Path, environ: Mapping[str, str]) -> Profile | None:
    """The local stack's ``credentials.json`` (``make dev`` writes it) as a profile, or None.

    ``{"endpoint": "http://127.0.0.1:8787", "tokens": {"dev": "...", "admin": "..."}}`` (docs/http-api.md,
    "Local
    stack"); the ``dev`` account unless ``REMOTE_BATCH_LOCAL_ACCOUNT`` names another.
    """
    home = environ.get("REMOTE_BATCH_HOME") or LOCAL_HOME
    path = (cwd / home / "credentials.json").resolve()
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"{path} cannot be read ({exc}); restart the local stack.") from exc
    account = environ.get("REMOTE_BATCH_LOCAL_ACCOUNT") or LOCAL_ACCOUNT
    tokens = document.get("tokens") if isinstance(document, dict) else None
    endpoint = document.get("endpoint") if isinstance(document, dict) else None
    if not isinstance(tokens, dict) or not isinstance(endpoint, str):
        raise ConfigurationError(f"{path} is not a local stack's credentials file.")
    token = tokens.get(account)
    if not isinstance(token, str):
        known = ", ".join(sorted(tokens))
        raise ConfigurationError(f"{path} has no account {account!r} (it has: {known}).")
    return Profile(endpoint=endpoint, token=token, source=f"local stack {path}")


def find_profile(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> Profile:
    """The connection by the lookup order of this module's docstring (steps 2 to 4).

    Raises
    ------
    ConfigurationError
        Nothing found (the message lists what was looked at), only one of ``REMOTE_BATCH_ENDPOINT``
        and ``REMOTE_BATCH_TOKEN`` set, a named profile missing, or a malformed file.
    """
    env = os.environ if environ is None else environ
    here = Path.cwd() if cwd is None else cwd
    endpoint, token = env.get("REMOTE_BATCH_ENDPOINT"), env.get("REMOTE_BATCH_TOKEN")
    if endpoint and token:
        return Profile(endpoint=endpoint, token=token, source="environment")
    if endpoint or token:
        missing = "REMOTE_BATCH_TOKEN" if endpoint else "REMOTE_BATCH_ENDPOINT"
        raise ConfigurationError(
            f"{missing} is not set; set both REMOTE_BATCH_ENDPOINT and REMOTE_BATCH_TOKEN."
        )
    named = env.get("REMOTE_BATCH_PROFILE")
    profile = load_profile(named or DEFAULT_PROFILE)
    if profile is not None:
        return profile
    if named:
        raise ConfigurationError(
            f"No profile {named!r} in {profiles_path()}; run `remote-batch login --profile {named}`."
        )
    local = local_stack_profile(here, env)
    if local is not None:
        return local
    raise ConfigurationError(
        "No remote-batch connection: call rb.connect(endpoint, token), set REMOTE_BATCH_ENDPOINT and "
        f"REMOTE_BATCH_TOKEN, run `remote-batch login` (writes {profiles_path()}), or start the local "
        f"stack (`make dev`) and run from its directory (reads {here / LOCAL_HOME / 'credentials.json'})."
    )
