"""The API's models of environments (``/environments``), and their mapping from the domain."""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field

from functions.domain.environments import (
    MAX_EXTRA_INDEXES,
    MAX_REQUIREMENT_CHARS,
    MAX_REQUIREMENTS,
    MAX_URL_CHARS,
    Environment,
    EnvironmentSpec,
)
from functions.domain.runtime import PYTHON_VERSIONS
from functions.domain.timefmt import to_api_time
from functions.handlers.api.models.common import ApiModel
from functions.handlers.api.models.job_data import LogEventView

EnvironmentStatusName = Literal["Building", "Ready", "Failed"]


class EnvironmentSpecBody(ApiModel):
    """``PUT /environments/{name}`` body: what the environment holds.

    The lengths here bound the body; what each value must be (a version this deployment runs, PEP 508
    lines, https indexes, an image reference) is checked by ``functions.domain.environments.check_spec``,
    each a 400 naming the field."""

    model_config = ConfigDict(extra="forbid")

    python: str = Field(
        min_length=1,
        max_length=20,
        description="major.minor, one of GET /runtime's versions.",
        json_schema_extra={"examples": list(PYTHON_VERSIONS)},
    )
    # One more than the most taken: a list over the limit gets the domain's message, not pydantic's.
    requirements: list[str] = Field(
        default_factory=list,
        max_length=MAX_REQUIREMENTS + 1,
        description=f"PEP 508 requirement lines (at most {MAX_REQUIREMENTS}, each at most "
        f"{MAX_REQUIREMENT_CHARS} characters), such as numpy==2.1.* or six==1.16.0.",
    )
    indexUrl: str | None = Field(
        default=None, max_length=MAX_URL_CHARS + 1, description="An https package index instead of PyPI."
    )
    extraIndexUrls: list[str] = Field(
        default_factory=list, max_length=MAX_EXTRA_INDEXES + 1, description="More https package indexes."
    )
    image: str | None = Field(
        default=None,
        max_length=MAX_URL_CHARS + 1,
        description="A container image to run in instead of the service's worker image: an ECR "
        "repository of this deployment (<account>.dkr.ecr.<region>.amazonaws.com/<repo>:<tag>) or a "
        "public image (python:3.12-slim, public.ecr.aws/..., ghcr.io/...); it needs python3 >= 3.9 of "
        "the environment's python version. Resolved to its digest at creation; a private registry's "
        "is named by digest (repo@sha256:...). Not with requirements.",
    )
    repositoryCredentials: str | None = Field(
        default=None,
        max_length=MAX_URL_CHARS + 1,
        description="A private registry's pull secret: the ARN of a Secrets Manager secret under the "
        "deployment's registry prefix (docs/deploy.md).",
    )

    def to_spec(self) -> EnvironmentSpec:
        """The domain's spec of this body (not yet checked)."""
        return EnvironmentSpec(
            python=self.python,
            requirements=tuple(self.requirements),
            index_url=self.indexUrl,
            extra_index_urls=tuple(self.extraIndexUrls),
            image=self.image,
            repository_credentials=self.repositoryCredentials,
        )


class PackageView(ApiModel):
    """One package of the resolved lock."""

    name: str
    version: str


class EnvironmentView(ApiModel):
    """An environment (``GET /environments/{name}``)."""

    name: str
    python: str
    requirements: list[str]
    indexUrl: str | None
    extraIndexUrls: list[str]
    image: str | None
    repositoryCredentials: str | None
    imageDigest: str | None = Field(
        description="The digest (sha256:...) the image resolved to at creation; jobs run it by digest."
    )
    status: EnvironmentStatusName
    statusReason: str | None
    hash: str | None = Field(
        description="The build's identity: SHA-256 of (python, lock, platform); null until resolved."
    )
    packages: list[PackageView] = Field(description="The resolved lock (empty until Ready).")
    sizeBytes: int = Field(description="What the installed files take, unpacked (bytes; 0 until Ready).")
    createdAt: str
    readyAt: str | None = Field(description="When it became Ready; null otherwise.")
    failedAt: str | None = Field(description="When it became Failed; null otherwise.")


class EnvironmentSummaryView(ApiModel):
    """An environment in ``GET /environments``: its state without the requirement and package lists
    (``GET /environments/{name}`` has them)."""

    name: str
    python: str
    image: str | None
    imageDigest: str | None
    status: EnvironmentStatusName
    statusReason: str | None
    hash: str | None
    sizeBytes: int
    createdAt: str
    readyAt: str | None
    failedAt: str | None


class EnvironmentListView(ApiModel):
    """``GET /environments``: a page of the account's environments by name."""

    environments: list[EnvironmentSummaryView]
    nextToken: str | None = Field(description="Pass back for the next page; null on the last.")


class EnvironmentLogView(ApiModel):
    """``GET /environments/{name}/log``: the build's output."""

    name: str
    events: list[LogEventView]
    nextToken: str | None = Field(default=None, description="More lines follow; pass it back.")


def environment_view(environment: Environment) -> EnvironmentView:
    """Map an environment."""
    spec = environment.spec
    return EnvironmentView(
        # Only named environments reach /environments (an unnamed one is a job's inline spec).
        name=environment.name or "",
        python=spec.python,
        requirements=list(spec.requirements),
        indexUrl=spec.index_url,
        extraIndexUrls=list(spec.extra_index_urls),
        image=spec.image,
        repositoryCredentials=spec.repository_credentials,
        imageDigest=environment.image_digest,
        status=environment.status.value,
        statusReason=environment.status_reason,
        hash=environment.hash,
        packages=[PackageView(name=p.name, version=p.version) for p in environment.packages],
        sizeBytes=environment.size_bytes,
        createdAt=to_api_time(environment.created_at) or "",
        readyAt=to_api_time(environment.ready_at) if environment.ready_at else None,
        failedAt=to_api_time(environment.failed_at) if environment.failed_at else None,
    )


def environment_summary_view(environment: Environment) -> EnvironmentSummaryView:
    """Map an environment for the list."""
    return EnvironmentSummaryView(
        name=environment.name or "",  # the list holds named environments only
        python=environment.spec.python,
        image=environment.spec.image,
        imageDigest=environment.image_digest,
        status=environment.status.value,
        statusReason=environment.status_reason,
        hash=environment.hash,
        sizeBytes=environment.size_bytes,
        createdAt=to_api_time(environment.created_at) or "",
        readyAt=to_api_time(environment.ready_at) if environment.ready_at else None,
        failedAt=to_api_time(environment.failed_at) if environment.failed_at else None,
    )
