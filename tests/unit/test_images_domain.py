"""Image references as Docker spells them (``functions.domain.images``), and where a deployment's jobs
may take them from."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from functions.domain.environments import EnvironmentSpec, EnvironmentStatus, image_environment
from functions.domain.errors import ValidationFailed
from functions.domain.images import ImagePolicy, check_image_source, image_hash, parse_image

DIGEST = "sha256:" + "0123456789abcdef" * 4
POLICY = ImagePolicy("123456789012", "remote-batch-dev-images/", "remote-batch/dev/registry/")


@pytest.mark.parametrize(
    ("reference", "registry", "repository", "tag", "digest"),
    [
        ("python:3.12-slim", "docker.io", "library/python", "3.12-slim", None),
        ("python", "docker.io", "library/python", "latest", None),
        ("pytorch/pytorch:2.5.1-cuda12.4", "docker.io", "pytorch/pytorch", "2.5.1-cuda12.4", None),
        ("ghcr.io/acme/tool@" + DIGEST, "ghcr.io", "acme/tool", None, DIGEST),
        ("localhost:5000/a/b:c", "localhost:5000", "a/b", "c", None),
        (
            "public.ecr.aws/docker/library/python:3.12",
            "public.ecr.aws",
            "docker/library/python",
            "3.12",
            None,
        ),
        (
            "123456789012.dkr.ecr.eu-west-1.amazonaws.com/remote-batch-dev-images/ml:v1@" + DIGEST,
            "123456789012.dkr.ecr.eu-west-1.amazonaws.com",
            "remote-batch-dev-images/ml",
            "v1",
            DIGEST,
        ),
    ],
)
def test_references_parse_as_docker_reads_them(
    reference: str, registry: str, repository: str, tag: str | None, digest: str | None
) -> None:
    image = parse_image(reference)
    assert (image.registry, image.repository, image.tag, image.digest) == (registry, repository, tag, digest)
    assert image.pinned(DIGEST) == f"{registry}/{repository}@{DIGEST}"


def test_an_ecr_registry_names_its_account_and_region_and_docker_hub_its_api_host() -> None:
    ecr = parse_image("123456789012.dkr.ecr.eu-west-1.amazonaws.com/remote-batch-dev-images/ml:v1")
    assert ecr.ecr == ("123456789012", "eu-west-1")
    assert parse_image("ghcr.io/a/b:1").ecr is None
    assert parse_image("python:3.12").api_host == "registry-1.docker.io"
    assert check_image_source(str(ecr), None, POLICY) == ecr


@pytest.mark.parametrize(
    ("reference", "credentials", "field"),
    [
        ("123456789012.dkr.ecr.eu-west-1.amazonaws.com/other/ml:v1", None, "image"),
        ("210987654321.dkr.ecr.eu-west-1.amazonaws.com/remote-batch-dev-images/ml:v1", None, "image"),
        (
            "ghcr.io/a/b:v1",
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:remote-batch/dev/registry/x",
            "image",
        ),
        (
            "ghcr.io/a/b@" + DIGEST,
            "arn:aws:secretsmanager:eu-west-1:123456789012:secret:other/x",
            "repositoryCredentials",
        ),
        ("ghcr.io/a/b@" + DIGEST, "arn:aws:s3:::bucket/key", "repositoryCredentials"),
    ],
)
def test_sources_outside_the_policy_are_refused_naming_the_field(
    reference: str, credentials: str | None, field: str
) -> None:
    with pytest.raises(ValidationFailed) as refused:
        check_image_source(reference, credentials, POLICY)
    assert refused.value.field == field


def test_an_image_environment_is_final_at_once() -> None:
    now = datetime(2026, 12, 2, tzinfo=UTC)
    spec = EnvironmentSpec("3.12", image="python:3.12-slim")

    ready = image_environment("alice", "ml", spec, now, digest=DIGEST, error=None)
    failed = image_environment("alice", "ml", spec, now, digest=None, error="image x: no tag 'y'")

    assert (ready.status, ready.image_digest, ready.ready_at) == (EnvironmentStatus.READY, DIGEST, now)
    assert ready.pinned_image == f"docker.io/library/python@{DIGEST}"
    assert ready.hash == image_hash("3.12", f"docker.io/library/python@{DIGEST}", None)
    assert (failed.status, failed.status_reason) == (
        EnvironmentStatus.FAILED,
        "Environment ml failed: image x: no tag 'y'",
    )
    assert failed.hash is None and failed.pinned_image is None
