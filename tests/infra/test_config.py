"""The deployment's shape from CDK context: defaults from cdk.json, overrides as ``-c key=value``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra.config import ConfigError, DeploymentConfig
from infra.naming import ZoneNames
from tests.infra.conftest import REPO_ROOT


def _cdk_json_context(**overrides: Any) -> dict[str, Any]:
    context: dict[str, Any] = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    return {**context, **overrides}


def test_cdk_json_describes_two_zones_in_their_regions() -> None:
    config = DeploymentConfig.from_context(_cdk_json_context().get)

    assert config.stage == "dev"
    assert config.home_region == "us-east-1"
    assert config.zone_regions == {"UnitedStates": "us-east-1", "EuropeanUnion": "eu-central-1"}
    assert config.control_plane_stack_name == "RemoteBatch-dev"
    assert config.compute_stack_name("EuropeanUnion") == "RemoteBatch-dev-EuropeanUnion"
    assert all(len(azs) >= 2 for azs in config.availability_zones.values())
    assert config.worker_image_dir == REPO_ROOT / "worker"


def test_cli_overrides_arrive_as_strings_and_json() -> None:
    # Given what `cdk synth -c stage=prod -c 'geoZoneRegions={...}'` passes to the app
    context = _cdk_json_context(
        stage="prod",
        homeRegion="eu-west-1",  # the control plane needs no instances: any region
        # Zone regions must offer every pool's instance types (eu-west-1 has no g6/g6e).
        geoZoneRegions=json.dumps({"UnitedStates": "us-east-2", "EuropeanUnion": "eu-north-1"}),
        availabilityZones=json.dumps(
            {"us-east-2": ["us-east-2a", "us-east-2b"], "eu-north-1": ["eu-north-1a"]}
        ),
    )

    config = DeploymentConfig.from_context(context.get)

    assert config.control_plane_stack_name == "RemoteBatch-prod"
    assert config.zone_regions["UnitedStates"] == "us-east-2"
    assert config.availability_zones["us-east-2"] == ("us-east-2a", "us-east-2b")


@pytest.mark.parametrize(
    "overrides",
    [
        {"stage": "Prod"},  # uppercase: invalid in bucket names
        {"stage": "dev-2"},  # hyphen: one stage's name prefix would match another's
        {"stage": "averyveryverylongstage"},  # bucket names are at most 63 characters
        {"homeRegion": ""},
        {"geoZoneRegions": {"Mars": "us-east-1"}},
        {"geoZoneRegions": {"UnitedStates": "us-east-1", "EuropeanUnion": "us-east-1"}},
        {"geoZoneRegions": "not json"},
        {"availabilityZones": {"us-east-1": ["us-east-1a"]}},  # none for eu-central-1
    ],
)
def test_bad_context_is_refused(overrides: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        DeploymentConfig.from_context(_cdk_json_context(**overrides).get)


def test_names_are_deterministic_and_fit_aws_limits() -> None:
    names = ZoneNames(zone="EuropeanUnion", region="ap-southeast-5", stage="a" * 12, account="123456789012")

    assert names.job_queue_name("Memory192x1536") == f"remote-batch-{'a' * 12}-Memory192x1536"
    assert len(names.bucket_name) <= 63
    assert names.bucket_name == f"remote-batch-{'a' * 12}-data-123456789012-ap-southeast-5"
    assert names.job_log_group_name == f"/remote-batch/{'a' * 12}/jobs"
