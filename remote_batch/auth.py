"""Cognito sign-in and token refresh over plain HTTPS (no AWS credentials, no boto3).

The deployed API's authorizer takes the user pool's ID token (infra/constructs/auth.py: a public app
client, no secret, with the ``USER_PASSWORD_AUTH`` and refresh flows). Cognito's ``InitiateAuth`` and
``RespondToAuthChallenge`` are JSON-over-HTTPS calls any client may make: ``POST`` to
``https://cognito-idp.<region>.amazonaws.com/`` with ``X-Amz-Target:
AWSCognitoIdentityProviderService.<Action>`` and ``Content-Type: application/x-amz-json-1.1``
(AWS docs, Amazon Cognito user pools API reference, "InitiateAuth", "RespondToAuthChallenge").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import requests

from remote_batch.errors import ConnectionFailed, LoginFailed

TARGET_PREFIX = "AWSCognitoIdentityProviderService."
CONTENT_TYPE = "application/x-amz-json-1.1"
TIMEOUT_SECONDS = 30.0

#: Asked for the answer to a challenge: ``(challenge name, its parameters)`` → the ``ChallengeResponses``
#: entries besides ``USERNAME`` (e.g. ``{"SOFTWARE_TOKEN_MFA_CODE": "123456"}``).
ChallengeAnswer = Callable[[str, dict[str, Any]], dict[str, str]]


@dataclass(frozen=True)
class Tokens:
    """What a sign-in or refresh gives.

    Attributes
    ----------
    id_token : str
        The JWT the API takes as ``Authorization: Bearer``.
    refresh_token : str | None
        Kept to get the next ID token (a refresh answer carries none: the old one stays valid).
    expires_at : float
        When ``id_token`` expires, seconds since the epoch.
    """

    id_token: str
    refresh_token: str | None
    expires_at: float


def cognito_url(region: str, endpoint: str | None = None) -> str:
    """Cognito's endpoint of ``region`` (or ``endpoint`` when given, e.g. a test server)."""
    return endpoint or f"https://cognito-idp.{region}.amazonaws.com/"


def call(action: str, body: dict[str, Any], region: str, endpoint: str | None = None) -> dict[str, Any]:
    """One Cognito Identity Provider API call. Raises ``LoginFailed`` with Cognito's message
    (``NotAuthorizedException: Incorrect username or password.``), ``ConnectionFailed`` when Cognito
    cannot be reached."""
    try:
        response = requests.post(
            cognito_url(region, endpoint),
            json=body,
            headers={"X-Amz-Target": TARGET_PREFIX + action, "Content-Type": CONTENT_TYPE},
            timeout=TIMEOUT_SECONDS,
        )
    except requests.RequestException as exc:
        raise ConnectionFailed(f"Cognito ({cognito_url(region, endpoint)}) cannot be reached: {exc}") from exc
    try:
        document = response.json()
    except ValueError:
        document = {}
    if response.status_code != 200:
        kind = str(document.get("__type", f"HTTP {response.status_code}")).rsplit("#", 1)[-1]
        raise LoginFailed(
            f"{kind}: {document.get('message') or document.get('Message') or 'sign-in refused'}"
        )
    return dict(document)


def _tokens(result: dict[str, Any], refresh_token: str | None, now: float) -> Tokens:
    return Tokens(
        id_token=str(result["IdToken"]),
        refresh_token=result.get("RefreshToken") or refresh_token,
        expires_at=now + float(result.get("ExpiresIn", 3600)),
    )


def password_login(
    region: str,
    client_id: str,
    username: str,
    password: str,
    *,
    answer: ChallengeAnswer | None = None,
    endpoint: str | None = None,
) -> Tokens:
    """Sign in with ``USER_PASSWORD_AUTH``; answers Cognito's challenges (``SOFTWARE_TOKEN_MFA``,
    ``NEW_PASSWORD_REQUIRED``, ...) with ``answer`` until it gives tokens.

    Raises
    ------
    LoginFailed
        Cognito refused, or it asked a challenge and ``answer`` is None.
    """
    now = time.time()
    document = call(
        "InitiateAuth",
        {
            "AuthFlow": "USER_PASSWORD_AUTH",
            "ClientId": client_id,
            "AuthParameters": {"USERNAME": username, "PASSWORD": password},
        },
        region,
        endpoint,
    )
    while "AuthenticationResult" not in document:
        challenge = str(document.get("ChallengeName") or "")
        if not challenge or answer is None:
            raise LoginFailed(
                f"Cognito asks for {challenge or 'an unknown step'}, which this login cannot answer."
            )
        parameters = dict(document.get("ChallengeParameters") or {})
        responses = {
            "USERNAME": str(parameters.get("USER_ID_FOR_SRP") or username),
            **answer(challenge, parameters),
        }
        document = call(
            "RespondToAuthChallenge",
            {
                "ClientId": client_id,
                "ChallengeName": challenge,
                "Session": document.get("Session"),
                "ChallengeResponses": responses,
            },
            region,
            endpoint,
        )
    return _tokens(document["AuthenticationResult"], None, now)


def refresh(region: str, client_id: str, refresh_token: str, endpoint: str | None = None) -> Tokens:
    """A new ID token from ``REFRESH_TOKEN_AUTH``. Raises ``LoginFailed`` when the refresh token is
    expired or revoked (then ``remote-batch login`` again)."""
    now = time.time()
    document = call(
        "InitiateAuth",
        {
            "AuthFlow": "REFRESH_TOKEN_AUTH",
            "ClientId": client_id,
            "AuthParameters": {"REFRESH_TOKEN": refresh_token},
        },
        region,
        endpoint,
    )
    if "AuthenticationResult" not in document:
        raise LoginFailed("Cognito did not refresh the token; run `remote-batch login` again.")
    return _tokens(document["AuthenticationResult"], refresh_token, now)
