"""An environment's own container image (issue 24 item 3): the reference, where it may come from, and
how a job runs in it.

A spec's ``image`` is a reference (``[registry/]repository[:tag][@sha256:digest]``,
:func:`functions.domain.environments.check_image`). The service runs a job in an image pinned by its
**digest**, never by a tag that may move: the environment resolves the tag once, at creation
(``functions.ports.ImageRegistry``: ECR's ``DescribeImages`` for an ECR repository, the registry's HTTP
API for a public one), and is Ready with the digest or Failed with a reason naming the missing image
or tag. A reference that carries ``@sha256:`` is used as is (nothing to resolve).

Where an image may come from (:class:`ImagePolicy`, the deployment's settings):

- an **ECR** repository of the deployment's own account whose name starts with the policy's
  ``repository_prefix``: the job's execution role may pull exactly those (``ecr:BatchGetImage`` and
  ``ecr:GetDownloadUrlForLayer`` on ``repository/<prefix>*``), so another repository is refused at once
  (400 on ``image``) instead of failing at the pull;
- a **public** registry (Docker Hub's ``python:3.12-slim``, ``public.ecr.aws/...``, ``ghcr.io/...``),
  pulled anonymously;
- a **private** registry with ``repositoryCredentials``: the ARN of a Secrets Manager secret
  (``{"username": ..., "password": ...}``, as ECS's private registry authentication takes it) whose
  name starts with the policy's ``secret_prefix``; the execution role may read only those. The
  service never reads the secret itself, so such a reference must carry its digest.

Pure: no clock, no calls.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from functions.domain.errors import ValidationFailed

#: Docker Hub, where a reference without a registry goes (``python:3.12-slim``), and its API host.
DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"
#: The tag a reference without one names (Docker's default).
DEFAULT_TAG = "latest"
#: The Python a job side needs in an image (``worker/job_side.py`` is written for it).
MIN_IMAGE_PYTHON = (3, 9)

# How a job runs in its own image (``functions.adapters.batch_definitions`` registers it; the worker
# keeps the same names in ``worker.job_side``, a test holds them equal): a multi-container job whose
# supervisor container (the service's worker image) hands the job to the job container (the user's
# image) through a shared volume.
#: The containers' names in the job definition.
SUPERVISOR_CONTAINER = "supervisor"
JOB_CONTAINER = "job"
#: Where the shared volume is mounted in both containers.
EXCHANGE_PATH = "/remote-batch/exchange"
#: The supervisor's variable naming that folder: set, it runs the job side in the job container.
EXCHANGE_VARIABLE = "REMOTE_BATCH_EXCHANGE_DIR"
#: The job container's program (``python3 -I -c CONTAINER_LAUNCHER EXCHANGE_PATH``): wait until the
#: supervisor has put the job side's modules in the folder (``ready``), then run them
#: (``worker.job_side.container_main``).
CONTAINER_LAUNCHER = (
    "import os, sys, time\n"
    "folder = sys.argv[1]\n"
    "while not os.path.exists(os.path.join(folder, 'ready')):\n"
    "    time.sleep(0.1)\n"
    "sys.path.insert(0, os.path.join(folder, 'lib'))\n"
    "from worker.job_side import container_main\n"
    "container_main(folder)\n"
)

_ECR_REGISTRY = re.compile(
    r"^(?P<account>[0-9]{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z]{2}(?:-[a-z]+)+-[0-9])\.amazonaws\.com(?:\.cn)?$"
)
_SECRET_ARN = re.compile(
    r"^arn:aws(?:-[a-z]+)*:secretsmanager:(?P<region>[a-z]{2}(?:-[a-z]+)+-[0-9]):(?P<account>[0-9]{12}):"
    r"secret:(?P<name>[A-Za-z0-9/_+=.@-]{1,512})$"
)
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class ImageReference:
    """A parsed image reference.

    Attributes
    ----------
    registry : str
        The registry host (``docker.io`` when the reference names none).
    repository : str
        The repository path (Docker Hub's official images get ``library/``: ``library/python``).
    tag : str | None
        The tag (``latest`` when neither a tag nor a digest is given); None with a digest alone.
    digest : str | None
        ``sha256:<64 hex>`` when the reference carries one.
    """

    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def ecr(self) -> tuple[str, str] | None:
        """``(account, region)`` of an ECR registry; None for any other."""
        found = _ECR_REGISTRY.fullmatch(self.registry)
        return (found["account"], found["region"]) if found else None

    @property
    def api_host(self) -> str:
        """The host of the registry's HTTP API (Docker Hub's differs from its name)."""
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry

    def pinned(self, digest: str) -> str:
        """The reference a job definition names: ``registry/repository@digest`` (no tag: it cannot
        move)."""
        return f"{self.registry}/{self.repository}@{digest}"

    def __str__(self) -> str:
        tag = f":{self.tag}" if self.tag else ""
        digest = f"@{self.digest}" if self.digest else ""
        return f"{self.registry}/{self.repository}{tag}{digest}"


def parse_image(reference: str) -> ImageReference:
    """The parts of a reference :func:`functions.domain.environments.check_image` accepted.

    Docker's rule for the first component: it is a registry when it holds a ``.`` or a ``:`` or is
    ``localhost`` (docker/distribution ``reference/normalize.go``); otherwise the reference is Docker
    Hub's, and a one-component repository is an official image under ``library/``.
    """
    rest, _, digest = reference.partition("@")
    first, slash, remainder = rest.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, remainder
    else:
        registry, path = DOCKER_HUB, rest
    name, colon, tag = path.rpartition(":") if ":" in path.rsplit("/", 1)[-1] else (path, "", "")
    repository = name if colon else path
    if registry == DOCKER_HUB and "/" not in repository:
        repository = f"library/{repository}"
    if not tag and not digest:
        tag = DEFAULT_TAG
    return ImageReference(registry, repository, tag or None, digest or None)


@dataclass(frozen=True, slots=True)
class ImagePolicy:
    """Where this deployment's jobs may take images from (its settings; see the module docstring).

    ``account`` is the deployment's AWS account (ECR repositories of another are refused);
    ``repository_prefix`` the start of the ECR repository names the execution role may pull;
    ``secret_prefix`` the start of the Secrets Manager secret names it may read.
    """

    account: str
    repository_prefix: str
    secret_prefix: str


def check_repository_credentials(arn: str, policy: ImagePolicy) -> str:
    """``arn`` if it is a Secrets Manager secret ARN of the deployment's account whose name starts with
    the policy's prefix; else ``ValidationFailed`` on ``repositoryCredentials``."""
    found = _SECRET_ARN.fullmatch(arn)
    if found is None:
        raise ValidationFailed(
            f"repositoryCredentials {arn[:200]!r} is not a Secrets Manager secret ARN "
            "(arn:aws:secretsmanager:<region>:<account>:secret:<name>).",
            field="repositoryCredentials",
        )
    if found["account"] != policy.account or not found["name"].startswith(policy.secret_prefix):
        raise ValidationFailed(
            f"repositoryCredentials must name a secret of account {policy.account} whose name starts "
            f"with {policy.secret_prefix!r}: jobs may read only those (docs/deploy.md).",
            field="repositoryCredentials",
        )
    return arn


def check_image_source(
    reference: str, repository_credentials: str | None, policy: ImagePolicy
) -> ImageReference:
    """The parsed reference, if jobs of this deployment may pull it.

    Raises
    ------
    ValidationFailed
        ``image``: an ECR repository of another account or outside ``repository_prefix``; a private
        registry's reference (``repositoryCredentials`` given) without ``@sha256:``.
        ``repositoryCredentials``: not a secret ARN under the policy (:func:`check_repository_credentials`),
        or given for an ECR image (ECR images pull with the execution role).
    """
    image = parse_image(reference)
    ecr = image.ecr
    if ecr is not None:
        account, _region = ecr
        if repository_credentials is not None:
            raise ValidationFailed(
                "An ECR image is pulled with the job's execution role; leave repositoryCredentials null.",
                field="repositoryCredentials",
            )
        if account != policy.account or not image.repository.startswith(policy.repository_prefix):
            raise ValidationFailed(
                f"image {reference[:200]!r}: jobs here pull ECR images of account {policy.account} in "
                f"repositories named {policy.repository_prefix}* only (docs/deploy.md).",
                field="image",
            )
        return image
    if repository_credentials is not None:
        check_repository_credentials(repository_credentials, policy)
        if image.digest is None:
            raise ValidationFailed(
                f"image {reference[:200]!r}: a private registry's image is named by its digest "
                "(repository@sha256:...), which the service does not look up with your credentials.",
                field="image",
            )
    return image


def check_digest(digest: str) -> str:
    """``digest`` if it is ``sha256:<64 lower-case hex>``; else ``ValueError`` (a registry's answer)."""
    if not _DIGEST.fullmatch(digest):
        raise ValueError(f"{digest[:100]!r} is not a sha256 digest")
    return digest


def image_hash(python: str, pinned: str, repository_credentials: str | None) -> str:
    """An image environment's identity: the hex SHA-256 of (python, the pinned image, the credentials'
    ARN), so the same image asked twice is one identity, and a moved tag is another."""
    value = {"python": python, "image": pinned, "repositoryCredentials": repository_credentials}
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()
