"""The HTTP client of the SDK: docs/http-api.md's routes over ``requests``, with urllib3's ``Retry``.

Transient failures are retried by urllib3's ``Retry`` mounted on the session, never by a loop of ours:
connection errors, reads that broke after the request was sent, 429 (waiting as ``Retry-After`` says)
and 502/503/504, with exponential backoff. A request that may have been received before it failed is
only repeated when repeating it is harmless: GET, PUT and DELETE are idempotent, and every POST the SDK
sends carries an ``Idempotency-Key`` (docs/http-api.md, "Submit": the same key and body within 24 h returns
the
same job and starts nothing new). The one POST the service does not deduplicate (an admin's credit
grant) is retried only when it never reached the service (connect errors) or was throttled (429).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from remote_batch import auth
from remote_batch.config import Profile, save_profile
from remote_batch.errors import ConfigurationError, ConnectionFailed, api_error
from remote_batch.json_codec import decode, to_json_number

#: Seconds to connect and to read one response.
CONNECT_TIMEOUT = 10.0
READ_TIMEOUT = 60.0
#: Retries of one request, and urllib3's backoff: 0.5 s, 1 s, 2 s, ... at most 20 s between tries.
RETRIES = 5
BACKOFF_FACTOR = 0.5
BACKOFF_MAX = 20.0
RETRY_STATUSES = (429, 502, 503, 504)
#: A token is refreshed this many seconds before it expires.
REFRESH_MARGIN_SECONDS = 60.0
USER_AGENT = "remote-batch-python"
#: The header naming the account a request acts in (docs/http-api.md extension; absent: the token's own).
ACCOUNT_HEADER = "X-Account-Id"


def path_segment(value: str, what: str = "id") -> str:
    """``value`` (a job id, a user id, an account id) as one URL path segment, percent-encoded with
    nothing left unescaped but RFC 3986's unreserved characters, so that no id reaches another route
    (``../account`` or ``x?y`` stay one segment, which the API answers 404).

    Raises ``ValueError`` naming ``what`` for an empty value or a dot segment (``.``, ``..``).
    """
    if value in ("", ".", ".."):
        raise ValueError(f"{what} {value!r} is not an id")
    return quote(value, safe="")


def retry_policy(*, repeatable: bool = True) -> Retry:
    """urllib3's ``Retry`` of the SDK.

    ``repeatable`` requests (every method, POSTs carrying an Idempotency-Key) are retried on connect
    and read errors and on 429/502/503/504; others only on connect errors and 429 (never read errors
    or gateway errors, after which the service may have acted). ``Retry-After`` is honoured.
    """
    if repeatable:
        return Retry(
            total=RETRIES,
            connect=RETRIES,
            read=RETRIES,
            status=RETRIES,
            other=0,
            allowed_methods=None,  # every method: the unsafe ones are made repeatable by their key
            status_forcelist=RETRY_STATUSES,
            backoff_factor=BACKOFF_FACTOR,
            backoff_max=BACKOFF_MAX,
            respect_retry_after_header=True,
            raise_on_status=False,  # the last answer's error body becomes a typed error
            raise_on_redirect=False,
            redirect=0,
        )
    return Retry(
        total=RETRIES,
        connect=RETRIES,
        read=0,
        status=RETRIES,
        other=0,
        allowed_methods=None,
        status_forcelist=(429,),
        backoff_factor=BACKOFF_FACTOR,
        backoff_max=BACKOFF_MAX,
        respect_retry_after_header=True,
        raise_on_status=False,
        raise_on_redirect=False,
        redirect=0,
    )


def _session(retry: Retry) -> requests.Session:
    session = requests.Session()
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.headers["User-Agent"] = USER_AGENT
    return session


class Client:
    """One connection to a remote-batch API (deployed or local).

    Parameters
    ----------
    profile : Profile
        Endpoint and token (and, for a Cognito profile, what refreshes the token).
    profile_name : str | None
        The stored profile it came from: a refreshed token is written back to it.
    account : str | None
        The account every request acts in (sent as ``X-Account-Id``); None: the token's own account.
        The token's user must be a member of it (``rb.members``).
    """

    def __init__(self, profile: Profile, profile_name: str | None = None, account: str | None = None) -> None:
        if not profile.token:
            raise ConfigurationError(f"The {profile.source} has no token; run `remote-batch login`.")
        self.profile = profile
        self.profile_name = profile_name
        self.account = account
        self.endpoint = profile.endpoint.rstrip("/")
        self._session = _session(retry_policy(repeatable=True))
        self._once_session = _session(retry_policy(repeatable=False))
        # Presigned URLs (uploads, outputs, previews) carry their own signature: no Authorization.
        self._plain_session = _session(retry_policy(repeatable=True))

    def __repr__(self) -> str:
        acting = f", account {self.account!r}" if self.account else ""
        return f"Client({self.endpoint!r}, from {self.profile.source}{acting})"

    # -- tokens ----------------------------------------------------------------------------------
    def _can_refresh(self) -> bool:
        profile = self.profile
        return bool(profile.refresh_token and profile.client_id and profile.region)

    def _refresh(self) -> None:
        profile = self.profile
        assert profile.refresh_token is not None
        assert profile.client_id is not None
        assert profile.region is not None
        tokens = auth.refresh(
            profile.region, profile.client_id, profile.refresh_token, profile.cognito_endpoint
        )
        profile.token, profile.expires_at = tokens.id_token, tokens.expires_at
        profile.refresh_token = tokens.refresh_token
        if self.profile_name is not None:
            save_profile(self.profile_name, profile)

    def _token(self) -> str:
        expires_at = self.profile.expires_at
        if (
            self._can_refresh()
            and expires_at is not None
            and expires_at - REFRESH_MARGIN_SECONDS < time.time()
        ):
            self._refresh()
        return str(self.profile.token)

    # -- requests --------------------------------------------------------------------------------
    def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        idempotency_key: str | None = None,
        repeatable: bool = True,
        ok: tuple[int, ...] = (200, 201, 202, 204),
    ) -> requests.Response:
        """Send one API request (retried as the module says) and return its response.

        Parameters
        ----------
        body : JSON value or None
            Sent as JSON (``Decimal`` as numbers).
        idempotency_key : str | None
            Sent as ``Idempotency-Key``; ``POST`` requests get a fresh UUID when None and ``repeatable``.
        repeatable : bool
            False for a request the service does not deduplicate (see ``retry_policy``).
        ok : tuple of int
            Statuses that are answers, not errors (e.g. 303 for the preview).

        Raises
        ------
        ApiError
            The subclass of the error body's code (``NotFound``, ``ValidationError`` ...).
        ConnectionFailed
            No answer after the retries.
        """
        headers = {"Accept": "application/json"}
        if self.account is not None:
            headers[ACCOUNT_HEADER] = self.account
        if body is not None:
            headers["Content-Type"] = "application/json"
        if method == "POST" and repeatable:
            headers["Idempotency-Key"] = idempotency_key or str(uuid.uuid4())
        data = None if body is None else json.dumps(body, default=to_json_number).encode()
        session = self._session if repeatable else self._once_session
        url = self.endpoint + path
        for attempt in range(2):
            headers["Authorization"] = f"Bearer {self._token()}"
            try:
                response = session.request(
                    method,
                    url,
                    params=params,
                    data=data,
                    headers=headers,
                    timeout=(CONNECT_TIMEOUT, READ_TIMEOUT),
                    allow_redirects=False,
                )
            except requests.RequestException as exc:
                raise ConnectionFailed(f"{method} {url} failed after {RETRIES} retries: {exc}") from exc
            # An expired Cognito token: refresh it once and send the request again.
            if response.status_code == 401 and attempt == 0 and self._can_refresh():
                self._refresh()
                continue
            break
        if response.status_code not in ok:
            try:
                document = decode(response)
            except ValueError:
                document = None
            raise api_error(response.status_code, document)
        return response

    def get(self, path: str, **params: Any) -> Any:
        """``GET path`` → its JSON body (``None`` parameters left out)."""
        query = {name: value for name, value in params.items() if value is not None}
        return decode(self.request("GET", path, params=query))

    def post(self, path: str, body: Any = None, *, idempotency_key: str | None = None) -> Any:
        """``POST path`` with a JSON body and an ``Idempotency-Key`` → its JSON body."""
        return decode(self.request("POST", path, body=body, idempotency_key=idempotency_key))

    def pages(self, path: str, key: str, **params: Any) -> Iterator[dict[str, Any]]:
        """Every item of a paged list route (``{"<key>": [...], "nextToken": ...}``), page after page."""
        token: str | None = None
        while True:
            page = self.get(path, **params, nextToken=token)
            yield from page.get(key) or []
            token = page.get("nextToken")
            if not token:
                return

    def download(self, url: str) -> requests.Response:
        """GET a presigned URL (no Authorization header: the URL is its own credential), streamed.

        Raises ``ConnectionFailed`` when it cannot be fetched, ``Expired`` when it no longer works."""
        try:
            response = self._plain_session.get(url, timeout=(CONNECT_TIMEOUT, READ_TIMEOUT), stream=True)
        except requests.RequestException as exc:
            raise ConnectionFailed(f"GET {url.split('?', 1)[0]} failed: {exc}") from exc
        if response.status_code != 200:
            raise api_error(
                410 if response.status_code in (400, 403) else response.status_code,
                {"message": f"The presigned URL answered HTTP {response.status_code}; ask for a new one."},
            )
        return response

    def upload(self, url: str, data: bytes, headers: Mapping[str, str]) -> None:
        """PUT ``data`` to a presigned upload URL with exactly the signed ``headers``.

        Raises ``ConnectionFailed`` or ``ApiError`` when the store refuses it."""
        try:
            response = self._plain_session.put(
                url, data=data, headers=dict(headers), timeout=(CONNECT_TIMEOUT, READ_TIMEOUT)
            )
        except requests.RequestException as exc:
            raise ConnectionFailed(f"PUT {url.split('?', 1)[0]} failed: {exc}") from exc
        if response.status_code not in (200, 201, 204):
            raise api_error(
                response.status_code, {"message": f"The upload was refused (HTTP {response.status_code})."}
            )
