"""Instance pools are checked per region at synth against infra/instance_offerings.json, the table
generated from moto's EC2 instance-type offerings (``make instance-offerings``)."""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from infra import constants
from infra.config import ConfigError, DeploymentConfig
from infra.instance_offerings import (
    InstanceTypesNotOffered,
    check_pools,
    format_table,
    generate,
    load_table,
    pool_instance_types,
)
from tests.infra.conftest import REPO_ROOT

EU_WEST_1 = {
    "homeRegion": "us-east-1",
    "geoZoneRegions": {"UnitedStates": "us-east-1", "EuropeanUnion": "eu-west-1"},
    "availabilityZones": {
        "us-east-1": ["us-east-1a", "us-east-1b"],
        "eu-west-1": ["eu-west-1a", "eu-west-1b"],
    },
}


def _context(**overrides: Any) -> dict[str, Any]:
    context: dict[str, Any] = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    return {**context, **overrides}


def test_the_committed_table_is_what_the_installed_moto_generates() -> None:
    import moto

    recorded = re.match(r"moto (\S+):", load_table()["source"])
    assert recorded, "the table's source names the moto version it was generated from"
    if recorded.group(1) != metadata.version("moto"):
        # Another moto (a fresh clone resolves `moto>=5.1` anew) may carry newer offerings data.
        pytest.skip(f"table from moto {recorded.group(1)}, moto {metadata.version('moto')} installed")
    generated = generate(pool_instance_types(constants.COMPUTE_POOLS.values()), Path(moto.__file__).parent)

    # A stale table (a pool changed, moto upgraded) fails here: run `make instance-offerings`.
    assert (REPO_ROOT / "infra" / "instance_offerings.json").read_text() == format_table(generated)
    assert generated["types"] == ["c7i", "g6", "g6e", "m7i", "r7i", "r8i.96xlarge", "x8i.48xlarge"]
    assert len(generated["regions"]) >= 25


def test_the_default_regions_offer_every_pool() -> None:
    table = load_table()

    for region in ("us-east-1", "eu-central-1"):
        assert set(table["regions"][region]) == set(table["types"]), region
        check_pools(region, constants.COMPUTE_POOLS, table)


def test_a_region_without_g6_and_g6e_fails_the_synth_naming_region_and_types() -> None:
    from infra.app import build_app

    expected = (
        "region eu-west-1 does not offer g6e (pool GpuL40S: GPU1xL40S); g6 (pool GpuL4: GPU4xL4). "
        "Choose a region that offers them"
    )
    with pytest.raises(ConfigError, match=re.escape(expected)):
        DeploymentConfig.from_context(_context(**EU_WEST_1).get)
    with pytest.raises(ConfigError, match=re.escape(expected)):
        build_app(context=EU_WEST_1)


def test_a_region_the_table_does_not_know_is_refused() -> None:
    with pytest.raises(
        InstanceTypesNotOffered,
        match=re.escape("region xx-nowhere-1 is not in infra/instance_offerings.json"),
    ):
        check_pools("xx-nowhere-1", constants.COMPUTE_POOLS)


def test_a_type_the_table_was_not_built_for_asks_for_regeneration() -> None:
    pools = {"General": constants.ComputePool("General", ("m8i",), max_vcpus=8, root_volume_gib=30)}

    with pytest.raises(InstanceTypesNotOffered, match=r"does not list m8i: run `make instance-offerings`"):
        check_pools("us-east-1", pools)


def test_instance_pools_context_gives_a_pool_other_types_in_one_region() -> None:
    # ap-south-2 offers r8i.96xlarge but not x8i.48xlarge.
    context = _context(
        geoZoneRegions={"UnitedStates": "us-east-1", "EuropeanUnion": "ap-south-2"},
        availabilityZones={"us-east-1": ["us-east-1a"], "ap-south-2": ["ap-south-2a"]},
    )
    with pytest.raises(
        ConfigError, match=r"region ap-south-2 does not offer x8i\.48xlarge \(pool HighMemory"
    ):
        DeploymentConfig.from_context(context.get)

    context["instancePools"] = json.dumps({"ap-south-2": {"HighMemory": ["r8i.96xlarge"]}})
    config = DeploymentConfig.from_context(context.get)

    assert config.instance_pools["ap-south-2"]["HighMemory"].instance_types == ("r8i.96xlarge",)
    assert config.instance_pools["ap-south-2"]["HighMemory"].on_demand_first is True
    assert config.instance_pools["us-east-1"] == constants.COMPUTE_POOLS


@pytest.mark.parametrize(
    "instance_pools",
    [
        {"eu-west-3": {"General": ["m7i"]}},  # no geo zone there
        {"eu-central-1": {"Tiny": ["t3"]}},  # no such pool
        {"eu-central-1": {"General": []}},
        {"eu-central-1": {"General": "m7i"}},
    ],
)
def test_bad_instance_pools_are_refused(instance_pools: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="instancePools"):
        DeploymentConfig.from_context(_context(instancePools=instance_pools).get)


def test_the_deploy_guides_examples_name_regions_that_offer_every_pool() -> None:
    guide = (REPO_ROOT / "docs" / "deploy.md").read_text()
    examples = re.findall(r"geoZoneRegions=(\{[^}]*\})", guide)

    assert examples
    for example in examples:
        for region in json.loads(example).values():
            check_pools(region, constants.COMPUTE_POOLS)
