"""IAM on the local moto server: the stack's own user, a user per job, and enforcement per request.

moto evaluates IAM policies (``moto.iam.access_control``) only once authentication is switched on,
and then for every caller of the process: its switch (``INITIAL_NO_AUTH_ACTION_COUNT``) is global.
The local stack switches it on for its own server only, request by request:

- ``IamGate`` (WSGI middleware in front of moto) lets a request through only when it is signed with
  SigV4 in its ``Authorization`` header, or is a presigned URL whose signature it verifies with the
  stack's own secret (moto never checks those); ``/moto-api/`` (which can read or reset everything)
  needs the stack's token. Then the request runs with enforcement on.
- With enforcement on, moto checks the signature against the user's secret and the action against
  the user's policies, as AWS does: the stack's admin user may do anything, a job's user only what
  ``functions.domain.job_policy`` allows (the cloud job role's policy, narrowed to the job's keys).
- ``JobCredentials`` makes that user when a job starts and deletes it when the job ends.

The admin user's keys and the ``/moto-api/`` token live in the stack's environment and in
``.remote-batch/moto-credentials.json`` (mode 0600), which no sandboxed job can see.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import secrets
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from botocore.auth import HmacV1QueryAuth, S3SigV4QueryAuth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from functions.domain.job_policy import job_policy_document
from functions.ports import BatchSubmission

logger = logging.getLogger(__name__)

ADMIN_USER = "remote-batch-local-admin"
ADMIN_POLICY = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
JOB_USER_PREFIX = "remote-batch-job-"
JOB_POLICY_NAME = "job"
# The submission tag naming the job's account (functions.logic.submission).
ACCOUNT_TAG = "remote-batch:accountId"
MOTO_API_PREFIX = "/moto-api"
MOTO_API_TOKEN_HEADER = "X-Remote-Batch-Moto-Api-Token"  # noqa: S105 - a header name
SIGV4_ALGORITHM = "AWS4-HMAC-SHA256"
SIGV4_TIMESTAMP = "%Y%m%dT%H%M%SZ"

# Set while a request that passed the gate runs in moto: moto then authenticates and authorizes it.
_enforcing: ContextVar[bool] = ContextVar("remote_batch_moto_iam", default=False)


def install_enforcement() -> None:
    """Make moto authenticate and authorize the requests ``IamGate`` marks (once per process).

    Replaces ``ActionAuthenticatorMixin._authenticate_and_authorize_action`` (moto 5): a marked
    request gets moto's own checks (signature, then the action against the caller's policies) whatever
    ``INITIAL_NO_AUTH_ACTION_COUNT`` says; any other request (moto used in-process by tests, say) is
    handled as before.
    """
    from moto.core.authorization import ActionAuthenticatorMixin

    original = ActionAuthenticatorMixin._authenticate_and_authorize_action
    if getattr(original, "remote_batch_gate", False):
        return

    def authenticate_and_authorize(self: Any, iam_request_cls: type, resource: str = "*") -> None:
        if not _enforcing.get():
            original(self, iam_request_cls, resource)
            return
        path = self.raw_path
        query = self.uri.partition("?")[2]
        iam_request = iam_request_cls(
            account_id=self.current_account,
            method=self.method,
            path=f"{path}?{query}" if query else path,
            data=self.data,
            body=self.raw_body,
            headers=self.headers,
            action=self._get_action(),
        )
        iam_request.check_signature()
        iam_request.check_action_permitted(resource)

    authenticate_and_authorize.remote_batch_gate = True  # type: ignore[attr-defined]
    ActionAuthenticatorMixin._authenticate_and_authorize_action = authenticate_and_authorize  # type: ignore[method-assign]


def _forbidden(start_response: Callable[..., Any], code: str, message: str) -> list[bytes]:
    body = (
        '<?xml version="1.0" encoding="UTF-8"?>'
        f"<Error><Code>{code}</Code><Message>{message}</Message></Error>"
    ).encode()
    start_response("403 Forbidden", [("Content-Type", "application/xml"), ("Content-Length", str(len(body)))])
    return [body]


class _ExpiringHmacV1QueryAuth(HmacV1QueryAuth):
    """botocore's SigV2 query signer with the ``Expires`` of a received URL (not now + expires)."""

    def __init__(self, credentials: Credentials, expires_at: str) -> None:
        super().__init__(credentials)
        self._expires_at = expires_at

    def _get_date(self) -> str:
        return self._expires_at


def presigned_signature_valid(environ: Mapping[str, Any], credentials: Credentials, now: datetime) -> bool:
    """Whether a presigned S3 URL was signed with ``credentials`` and has not expired at ``now``.

    SigV2 (``AWSAccessKeyId``, ``Expires``, ``Signature``: what botocore makes in us-east-1) or
    SigV4 (``X-Amz-*``), both recomputed with botocore's own signers (``presigned_v2_valid``,
    ``presigned_v4_valid``).
    """
    if "X-Amz-Signature=" in environ.get("QUERY_STRING", ""):
        return presigned_v4_valid(environ, credentials, now)
    return presigned_v2_valid(environ, credentials, now)


def presigned_v2_valid(environ: Mapping[str, Any], credentials: Credentials, now: datetime) -> bool:
    """SigV2 query authentication ("Signing and Authenticating REST Requests", Amazon S3 API,
    "Query String Request Authentication Alternative"): the signature of the method, Content-MD5,
    Content-Type, ``Expires`` and the canonical resource, with the secret of ``credentials``."""
    query = dict(parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True))
    try:
        key_id, expires, signature = query["AWSAccessKeyId"], query["Expires"], query["Signature"]
        expired = int(expires) < now.timestamp()
    except (KeyError, ValueError):
        return False
    if key_id != credentials.access_key or expired:
        return False
    headers = {
        name: environ[variable]
        for name, variable in (("Content-MD5", "HTTP_CONTENT_MD5"), ("Content-Type", "CONTENT_TYPE"))
        if environ.get(variable)
    }
    raw_path = environ.get("RAW_URI", environ.get("PATH_INFO", "")).split("?", 1)[0]
    split = urlsplit(f"http://{environ.get('HTTP_HOST', '')}{raw_path}?{environ.get('QUERY_STRING', '')}")
    auth = _ExpiringHmacV1QueryAuth(credentials, expires)
    expected = auth.get_signature(environ.get("REQUEST_METHOD", "GET"), split, headers)
    return hmac.compare_digest(expected, signature)


def presigned_v4_valid(environ: Mapping[str, Any], credentials: Credentials, now: datetime) -> bool:
    """Whether a presigned S3 URL (SigV4 query authentication) was signed with ``credentials`` and
    has not expired at ``now``.

    Recomputes the signature with botocore's ``S3SigV4QueryAuth`` from the request as received: the
    method, the raw path, every query parameter but ``X-Amz-Signature``, and the headers named in
    ``X-Amz-SignedHeaders`` (AWS Signature Version 4, "Authenticating Requests: Using Query
    Parameters").
    """
    pairs = parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True)
    query = dict(pairs)
    try:
        signature = query["X-Amz-Signature"]
        key_id, date, region, service, _ = query["X-Amz-Credential"].split("/")
        signed_at = datetime.strptime(query["X-Amz-Date"], SIGV4_TIMESTAMP).replace(tzinfo=UTC)
        expires = int(query["X-Amz-Expires"])
        signed_headers = query["X-Amz-SignedHeaders"].split(";")
    except (KeyError, ValueError):
        return False
    if key_id != credentials.access_key or query.get("X-Amz-Algorithm") != SIGV4_ALGORITHM:
        return False
    if not 0 <= (now - signed_at).total_seconds() <= expires:
        return False
    headers = {}
    for name in signed_headers:
        # WSGI keeps these two out of the HTTP_ variables (PEP 3333).
        variable = {"content-type": "CONTENT_TYPE", "content-length": "CONTENT_LENGTH"}.get(name)
        value = environ.get(variable or "HTTP_" + name.upper().replace("-", "_"))
        if value is None:
            return False
        headers[name] = value
    raw_path = environ.get("RAW_URI", environ.get("PATH_INFO", "")).split("?", 1)[0]
    unsigned = urlencode([(k, v) for k, v in pairs if k != "X-Amz-Signature"], quote_via=quote)
    request = AWSRequest(
        method=environ.get("REQUEST_METHOD", "GET"),
        url=f"http://{headers.get('host', environ.get('HTTP_HOST', ''))}{raw_path}?{unsigned}",
        headers=headers,
    )
    request.context["timestamp"] = query["X-Amz-Date"]
    auth = S3SigV4QueryAuth(credentials, service, region, expires=expires)
    canonical = auth.canonical_request(request)
    expected = auth.signature(auth.string_to_sign(request, canonical), request)
    return hmac.compare_digest(expected, signature) and date == query["X-Amz-Date"][:8]


class IamGate:
    """WSGI middleware in front of moto: what may reach it, and with enforcement on (module docstring).

    Until ``enable`` it passes everything (the stack provisions itself first).
    """

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app
        self._admin: Credentials | None = None
        self._api_token: str | None = None

    def enable(self, admin: Credentials, api_token: str) -> None:
        """Enforce from now on; presigned URLs must be signed with ``admin``; ``/moto-api/`` needs
        ``api_token`` in the ``X-Remote-Batch-Moto-Api-Token`` header."""
        install_enforcement()
        self._admin = admin
        self._api_token = api_token

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if self._admin is None or self._api_token is None:
            return self._app(environ, start_response)
        refusal = self._refusal(environ, self._admin, self._api_token)
        if refusal is not None:
            return _forbidden(start_response, *refusal)
        if not environ.get("HTTP_AUTHORIZATION"):  # /moto-api/ with the token, or a valid presigned URL
            return self._app(environ, start_response)
        token = _enforcing.set(True)
        try:
            return self._app(environ, start_response)
        finally:
            _enforcing.reset(token)

    @staticmethod
    def _refusal(environ: Mapping[str, Any], admin: Credentials, api_token: str) -> tuple[str, str] | None:
        """Why a request may not reach moto (error code, message), or None when it may."""
        if environ.get("PATH_INFO", "").startswith(MOTO_API_PREFIX):
            given = environ.get("HTTP_" + MOTO_API_TOKEN_HEADER.upper().replace("-", "_"), "")
            if not hmac.compare_digest(given, api_token):
                return "AccessDenied", "moto-api needs the local stack's token"
            return None
        authorization = environ.get("HTTP_AUTHORIZATION", "")
        if authorization:
            signed = authorization.startswith(SIGV4_ALGORITHM + " ")
            return None if signed else ("AccessDenied", "Only Signature Version 4 is accepted")
        query = environ.get("QUERY_STRING", "")
        if "X-Amz-Signature=" not in query and "Signature=" not in query:
            return "AccessDenied", "Anonymous requests are not allowed"
        if not presigned_signature_valid(environ, admin, datetime.now(UTC)):
            return "SignatureDoesNotMatch", "The presigned URL is invalid or expired"
        return None


def create_admin(iam: Any) -> Credentials:
    """Create the stack's IAM user (allowed everything) on a fresh moto server; returns its keys."""
    iam.create_user(UserName=ADMIN_USER)
    iam.put_user_policy(UserName=ADMIN_USER, PolicyName="admin", PolicyDocument=json.dumps(ADMIN_POLICY))
    key = iam.create_access_key(UserName=ADMIN_USER)["AccessKey"]
    return Credentials(key["AccessKeyId"], key["SecretAccessKey"])


def new_api_token() -> str:
    """A fresh ``/moto-api/`` token (256 random bits)."""
    return secrets.token_urlsafe(32)


class JobCredentials:
    """An IAM user per job on the local moto server, allowed only the job's own inputs and outputs.

    Parameters
    ----------
    iam : Any
        A boto3 IAM client signed by the stack's admin user.
    """

    def __init__(self, iam: Any) -> None:
        self._iam = iam

    @staticmethod
    def user_name(batch_job_id: str) -> str:
        """The job's IAM user: ``remote-batch-job-<Batch job id>`` (at most 64 characters)."""
        return f"{JOB_USER_PREFIX}{batch_job_id}"[:64]

    def issue(self, batch_job_id: str, submission: BatchSubmission) -> dict[str, str]:
        """Create the job's user and keys; returns ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY``.

        Its policy is ``job_policy_document`` for the job's bucket, id and account
        (``REMOTE_BATCH_BUCKET`` and ``REMOTE_BATCH_JOB_ID`` of the submission's environment, its
        ``remote-batch:accountId`` tag: set by the service, not the user); without them the user may
        do nothing.

        Raises
        ------
        botocore.exceptions.ClientError
            When moto refuses (the user is removed again).
        """
        user = self.user_name(batch_job_id)
        tags = [{"Key": "remote-batch:batchJobId", "Value": batch_job_id}]
        try:
            self._iam.create_user(UserName=user, Tags=tags)
        except self._iam.exceptions.EntityAlreadyExistsException:
            # Left by an attempt a crash cut (the job runs again after the restart): made anew.
            self.revoke(batch_job_id)
            self._iam.create_user(UserName=user, Tags=tags)
        try:
            environment = submission.environment
            bucket, job_id = environment.get("REMOTE_BATCH_BUCKET"), environment.get("REMOTE_BATCH_JOB_ID")
            if bucket and job_id:
                account_id = (submission.tags or {}).get(ACCOUNT_TAG)
                document = job_policy_document(f"arn:aws:s3:::{bucket}", job_id, account_id)
                self._iam.put_user_policy(
                    UserName=user, PolicyName=JOB_POLICY_NAME, PolicyDocument=json.dumps(document)
                )
            key = self._iam.create_access_key(UserName=user)["AccessKey"]
        except ClientError:
            self.revoke(batch_job_id)
            raise
        return {"AWS_ACCESS_KEY_ID": key["AccessKeyId"], "AWS_SECRET_ACCESS_KEY": key["SecretAccessKey"]}

    def revoke(self, batch_job_id: str) -> None:
        """Delete the job's keys, policy and user (what exists of them); errors are logged."""
        user = self.user_name(batch_job_id)
        try:
            with contextlib.suppress(self._iam.exceptions.NoSuchEntityException):
                for key in self._iam.list_access_keys(UserName=user)["AccessKeyMetadata"]:
                    self._iam.delete_access_key(UserName=user, AccessKeyId=key["AccessKeyId"])
            with contextlib.suppress(self._iam.exceptions.NoSuchEntityException):
                self._iam.delete_user_policy(UserName=user, PolicyName=JOB_POLICY_NAME)
            with contextlib.suppress(self._iam.exceptions.NoSuchEntityException):
                self._iam.delete_user(UserName=user)
        except ClientError as exc:
            logger.warning("job credentials not revoked user=%s error=%s", user, exc)
