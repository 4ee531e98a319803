"""Image environments on moto through the api handler (issue 24 item 3): the image resolved to its
digest at creation (ECR on moto; a public registry through a fake of its HTTP API), Ready with the
digest or Failed naming what is missing, the policy's 400s naming the field with nothing written,
and a job in one submitted with its image pinned by digest."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import boto3
import pytest

from functions import bootstrap
from functions.adapters.images import HttpAnswer, RegistryImages
from functions.domain.images import ImagePolicy
from functions.domain.machine_classes import GeoZone
from functions.logic.batch_submission import IMAGE_PYTHON_VARIABLE
from functions.ports import ImageJob
from tests.integration.conftest import Stack

ACCOUNT = "123456789012"  # moto's
REGION = "eu-west-1"
REPOSITORY = "remote-batch-images/ml"
ECR = f"{ACCOUNT}.dkr.ecr.{REGION}.amazonaws.com"
POLICY = ImagePolicy(ACCOUNT, "remote-batch-images/", "remote-batch/registry/")
HUB_DIGEST = "sha256:" + "ab" * 32
SECRET = f"arn:aws:secretsmanager:{REGION}:{ACCOUNT}:secret:remote-batch/registry/acme-AbCdEf"


class FakeRegistry:
    """Docker Hub's token dance: 401 with a Bearer challenge, an anonymous token, then the digest of
    ``library/python:3.12-slim``; 404 for any other tag."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    def __call__(self, method: str, url: str, headers: Mapping[str, str]) -> HttpAnswer:
        self.asked.append((method, url))
        if url.startswith("https://auth.docker.io/token"):
            return HttpAnswer(200, {}, json.dumps({"token": "anon"}).encode())
        if headers.get("Authorization") != "Bearer anon":
            challenge = 'Bearer realm="https://auth.docker.io/token",service="registry.docker.io"'
            return HttpAnswer(401, {"www-authenticate": challenge})
        if url.endswith("/v2/library/python/manifests/3.12-slim"):
            return HttpAnswer(200, {"docker-content-digest": HUB_DIGEST})
        return HttpAnswer(404, {})


@pytest.fixture
def registry(stack: Stack) -> FakeRegistry:
    fake = FakeRegistry()
    images = RegistryImages(POLICY, lambda region: boto3.client("ecr", region_name=region), fetch=fake)
    stack.services = replace(stack.services, images=images)
    bootstrap.install(stack.services)
    return fake


def _push(tag: str) -> str:
    ecr = boto3.client("ecr", region_name=REGION)
    ecr.create_repository(repositoryName=REPOSITORY)
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json"}
    image = ecr.put_image(repositoryName=REPOSITORY, imageManifest=json.dumps(manifest), imageTag=tag)
    return str(image["image"]["imageId"]["imageDigest"])


def test_an_ecr_image_resolves_to_its_digest_and_a_job_runs_pinned_to_it(
    stack: Stack, registry: FakeRegistry
) -> None:
    digest = _push("v1")
    status, created = stack.api(
        "PUT", "/environments/ml", body={"python": "3.12", "image": f"{ECR}/{REPOSITORY}:v1"}
    )
    assert status == 201, created
    assert (created["status"], created["imageDigest"], created["statusReason"]) == ("Ready", digest, None)
    assert created["hash"] and created["readyAt"] is not None
    # The same spec again is the same environment; it took no build from the account's quota.
    assert (
        stack.api("PUT", "/environments/ml", body={"python": "3.12", "image": f"{ECR}/{REPOSITORY}:v1"})[0]
        == 200
    )

    status, job = stack.api("POST", "/jobs", body={"code": "1", "environment": "ml"})
    assert status == 202, job
    pinned = f"{ECR}/{REPOSITORY}@{digest}"
    assert job["environment"] == {"name": "ml", "hash": created["hash"], "python": "3.12", "image": pinned}
    submission = stack.batch[GeoZone.UNITED_STATES].submissions[-1]
    assert submission.image == ImageJob(pinned, submission.job_definition, None)
    assert submission.job_definition.endswith("-py312:1")
    assert submission.environment[IMAGE_PYTHON_VARIABLE] == "3.12"
    assert "REMOTE_BATCH_ENVIRONMENT_HASH" not in submission.environment


@pytest.mark.parametrize(
    ("image", "fragment"),
    [
        (f"{ECR}/{REPOSITORY}:v2", f"repository {REPOSITORY} has no tag 'v2'"),
        (f"{ECR}/remote-batch-images/none:v1", "ECR has no repository remote-batch-images/none"),
        ("python:3.13-rc", "docker.io has no tag '3.13-rc' in library/python"),
    ],
)
def test_a_missing_image_or_tag_fails_the_environment_naming_it(
    stack: Stack, registry: FakeRegistry, image: str, fragment: str
) -> None:
    _push("v1")
    status, created = stack.api("PUT", "/environments/ml", body={"python": "3.12", "image": image})
    assert status == 201, created
    assert created["status"] == "Failed" and created["imageDigest"] is None
    assert created["statusReason"].startswith("Environment ml failed: image ")
    assert fragment in created["statusReason"]
    status, job = stack.api("POST", "/jobs", body={"code": "1", "environment": "ml"})
    assert status == 400 and job["error"]["field"] == "environment"


def test_a_public_tag_is_resolved_by_the_registry_api_and_a_digest_is_used_as_is(
    stack: Stack, registry: FakeRegistry
) -> None:
    status, hub = stack.api("PUT", "/environments/hub", body={"python": "3.12", "image": "python:3.12-slim"})
    assert (status, hub["status"], hub["imageDigest"]) == (201, "Ready", HUB_DIGEST)
    assert [m for m, _ in registry.asked] == ["HEAD", "GET", "HEAD"]
    registry.asked.clear()
    pinned = "ghcr.io/acme/tool@sha256:" + "cd" * 32
    body = {"python": "3.12", "image": pinned, "repositoryCredentials": SECRET}
    status, private = stack.api("PUT", "/environments/private", body=body)
    assert (status, private["status"], private["imageDigest"]) == (201, "Ready", "sha256:" + "cd" * 32)
    assert private["repositoryCredentials"] == SECRET
    assert registry.asked == []  # nothing to resolve, and never with the user's credentials
    job = stack.api("POST", "/jobs", body={"code": "1", "environment": "private"})[1]
    submission = stack.batch[GeoZone.UNITED_STATES].submissions[-1]
    assert submission.image == ImageJob(pinned, submission.job_definition, SECRET)
    assert job["environment"]["image"] == pinned


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"image": "python:3.12-slim", "requirements": ["six==1.16.0"]}, "requirements"),
        ({"image": "python:3.12-slim", "repositoryCredentials": "not-an-arn"}, "repositoryCredentials"),
        (
            {
                "image": "ghcr.io/a/b@sha256:" + "0" * 64,
                "repositoryCredentials": SECRET.replace("remote-batch/registry/", ""),
            },
            "repositoryCredentials",
        ),
        ({"image": "ghcr.io/a/b:v1", "repositoryCredentials": SECRET}, "image"),
        ({"image": f"{ECR}/{REPOSITORY}:v1", "repositoryCredentials": SECRET}, "repositoryCredentials"),
        ({"image": f"210987654321.dkr.ecr.{REGION}.amazonaws.com/{REPOSITORY}:v1"}, "image"),
        ({"image": f"{ECR}/other/repo:v1"}, "image"),
        ({"repositoryCredentials": SECRET}, "repositoryCredentials"),
    ],
)
def test_images_the_deployment_may_not_pull_are_400_naming_the_field_and_write_nothing(
    stack: Stack, registry: FakeRegistry, body: dict[str, Any], field: str
) -> None:
    before = stack.count_items(stack.settings.computes_table)
    status, answer = stack.api("PUT", "/environments/ml", body={"python": "3.12", **body})
    assert status == 400, answer
    assert answer["error"]["field"] == field
    assert stack.count_items(stack.settings.computes_table) == before
    assert registry.asked == []
