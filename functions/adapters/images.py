"""Environments' images resolved to digests (``ImageRegistry``): ECR's API for ECR repositories, the OCI
distribution API (``/v2/<name>/manifests/<reference>``) for public registries.

- ECR: ``DescribeImages`` of the tag (or of the digest, to check it exists) in the repository, in the
  registry's region. ``RepositoryNotFoundException`` and ``ImageNotFoundException`` become
  ``ImageNotFound`` naming the repository or the tag; other errors ``DependencyFailed``.
- Any other registry: a reference with ``@sha256:`` is used as is (no call: it cannot move, and a
  private registry's is never looked up with the user's credentials). A tag is resolved by a ``HEAD``
  of its manifest (OCI distribution spec, "Pulling manifests"), anonymously: a ``401`` with a
  ``WWW-Authenticate: Bearer realm=...,service=...,scope=...`` challenge gets an anonymous token from
  the realm (Docker's token authentication, which Docker Hub, ghcr.io and public.ecr.aws all use) and
  the ``HEAD`` is asked again with it. The answer's ``Docker-Content-Digest`` is the digest (of the
  multi-platform index when the tag names one: the runtime picks the platform). ``404``, or ``401``/
  ``403`` with the token, is ``ImageNotFound``; anything else, or no answer, ``DependencyFailed``.

The HTTP side is one injected function (``Fetch``), so tests answer as a registry would with no network.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from functions.adapters.errors import translate_errors
from functions.domain.errors import DependencyFailed, ImageNotFound
from functions.domain.images import ImagePolicy, ImageReference, check_digest

if TYPE_CHECKING:  # the stubs are a dev dependency; the Lambda runtime has no need of them
    from mypy_boto3_ecr import ECRClient

#: What a manifest request accepts: OCI and Docker, single-platform and multi-platform.
MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
#: Seconds an HTTP request to a registry may take.
HTTP_TIMEOUT_SECONDS = 10
_ECR_MISSING = {"RepositoryNotFoundException", "ImageNotFoundException"}
_CHALLENGE_PARAM = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True, slots=True)
class HttpAnswer:
    """A registry's answer: its status, headers (lower-case names) and body."""

    status: int
    headers: Mapping[str, str]
    body: bytes = b""


Fetch = Callable[[str, str, Mapping[str, str]], HttpAnswer]
"""``fetch(method, url, headers)``: one HTTP request. Raises ``OSError`` when there is no answer."""


def urllib_fetch(method: str, url: str, headers: Mapping[str, str]) -> HttpAnswer:
    """``Fetch`` on ``urllib`` (https only: a registry's API and its token realm)."""
    if urllib.parse.urlsplit(url).scheme != "https":
        raise OSError(f"refusing a non-https registry URL {url[:200]!r}")
    request = urllib.request.Request(url, method=method, headers=dict(headers))  # noqa: S310 - https only
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_SECONDS) as response:  # noqa: S310
            return HttpAnswer(
                response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
            )
    except urllib.error.HTTPError as exc:
        return HttpAnswer(exc.code, {k.lower(): v for k, v in exc.headers.items()}, b"")


class RegistryImages:
    """``ImageRegistry`` on ECR (a client per region) and public registries' HTTP API.

    Parameters
    ----------
    policy : ImagePolicy
        Where the deployment's jobs may take images from.
    ecr : Callable[[str], ECRClient]
        The ECR client of a region.
    fetch : Fetch
        One HTTP request (default: ``urllib_fetch``).
    """

    def __init__(
        self, policy: ImagePolicy, ecr: Callable[[str], ECRClient], fetch: Fetch = urllib_fetch
    ) -> None:
        self.policy = policy
        self._ecr = ecr
        self._fetch = fetch

    def resolve(self, image: ImageReference) -> str:
        """The image's digest (see the module docstring). Raises ``ImageNotFound``, ``DependencyFailed``."""
        ecr = image.ecr
        if ecr is not None:
            return self._resolve_ecr(image, ecr[0], ecr[1])
        if image.digest is not None:
            return image.digest
        return self._resolve_http(image)

    def _resolve_ecr(self, image: ImageReference, account: str, region: str) -> str:
        image_id = {"imageDigest": image.digest} if image.digest else {"imageTag": image.tag or "latest"}
        what = f"digest {image.digest}" if image.digest else f"tag {image.tag!r}"
        try:
            with translate_errors(
                "ecr",
                "DescribeImages",
                failed=f"ECR did not describe image {image}; nothing was written. Try again.",
                permanent=_ECR_MISSING,
                refusal=_Missing,
            ):
                response = self._ecr(region).describe_images(
                    registryId=account,
                    repositoryName=image.repository,
                    imageIds=[image_id],  # type: ignore[list-item]
                )
        except _Missing as exc:
            code = getattr(exc.__cause__, "response", {}).get("Error", {}).get("Code")
            if code == "RepositoryNotFoundException":
                raise ImageNotFound(
                    f"image {image}: ECR has no repository {image.repository} in account {account}, {region}"
                ) from None
            raise ImageNotFound(f"image {image}: repository {image.repository} has no {what}") from None
        details = response.get("imageDetails", [])
        if not details or "imageDigest" not in details[0]:
            raise ImageNotFound(f"image {image}: repository {image.repository} has no {what}")
        return check_digest(details[0]["imageDigest"])

    def _resolve_http(self, image: ImageReference) -> str:
        url = f"https://{image.api_host}/v2/{image.repository}/manifests/{image.tag}"
        headers = {"Accept": MANIFEST_TYPES}
        answer = self._ask(url, headers)
        if answer.status == 401:
            token = self._anonymous_token(answer.headers.get("www-authenticate", ""), image)
            answer = self._ask(url, {**headers, "Authorization": f"Bearer {token}"})
        if answer.status in (401, 403, 404):
            raise ImageNotFound(
                f"image {image}: {image.registry} has no tag {image.tag!r} in {image.repository} that "
                "can be pulled without credentials (a private image is named by its digest, with "
                "repositoryCredentials)"
            )
        digest = answer.headers.get("docker-content-digest", "")
        if answer.status != 200 or not digest:
            raise DependencyFailed(
                f"{image.registry} answered {answer.status} for image {image}; nothing was written. "
                "Try again."
            )
        try:
            return check_digest(digest)
        except ValueError:
            raise DependencyFailed(f"{image.registry} gave no sha256 digest for image {image}") from None

    def _ask(self, url: str, headers: Mapping[str, str], method: str = "HEAD") -> HttpAnswer:
        try:
            return self._fetch(method, url, headers)
        except OSError as exc:
            host = urllib.parse.urlsplit(url).hostname
            raise DependencyFailed(f"The registry {host} could not be reached; nothing was written.") from exc

    def _anonymous_token(self, challenge: str, image: ImageReference) -> str:
        """An anonymous pull token from the challenge's realm (Docker's token authentication)."""
        scheme, _, params = challenge.partition(" ")
        values = dict(_CHALLENGE_PARAM.findall(params))
        realm = values.pop("realm", "")
        if scheme.lower() != "bearer" or not realm:
            raise ImageNotFound(f"image {image}: {image.registry} asks for credentials to read it")
        values.setdefault("scope", f"repository:{image.repository}:pull")
        answer = self._ask(f"{realm}?{urllib.parse.urlencode(values)}", {}, method="GET")
        try:
            document = json.loads(answer.body) if answer.status == 200 else {}
        except ValueError:
            document = {}
        token = document.get("token") or document.get("access_token") if isinstance(document, dict) else None
        if not isinstance(token, str) or not token:
            raise ImageNotFound(f"image {image}: {image.registry} gives no anonymous pull of it")
        return token


class _Missing(DependencyFailed):
    """ECR's answer that the repository or the image does not exist (turned into ``ImageNotFound``)."""
