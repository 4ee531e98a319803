"""The deployment's shape, read from CDK context (cdk.json, overridden by ``cdk synth -c key=value``).

Context keys:
- ``stage``: part of stack and resource names (``dev``); lowercase letters and digits.
- ``stackNamePrefix``: stacks are ``<prefix>-<stage>`` (control plane) and ``<prefix>-<stage>-<Zone>``.
- ``homeRegion``: the control plane's region.
- ``geoZoneRegions``: ``{"UnitedStates": "us-east-1", "EuropeanUnion": "eu-central-1"}``; one region
  per zone, each zone in its own region.
- ``availabilityZones``: ``{"us-east-1": ["us-east-1a", ...], ...}``: explicit, so synth needs no
  account lookup.
- ``workerImageDir``: the worker image's build context, relative to the repo (``worker``).
- ``consoleDomainPrefix`` (optional): the Cognito sign-in domain's prefix, unique in the home region
  (default ``remote-batch-<stage>-<account id>``); lowercase letters, digits and hyphens.
- ``instancePools`` (optional): ``{"<region>": {"<pool>": ["<type or family>", ...]}}`` gives a
  compute pool (``infra/constants.py`` ``COMPUTE_POOLS``) other instance types in one region.
  Every zone region's pools are checked against ``infra/instance_offerings.json``: a region that
  lacks one of its pools' types fails the synth, naming the region, the type and the pool.

A mapping given with ``-c`` arrives as a string: it is parsed as JSON.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk import Aws

from functions.domain.machine_classes import GeoZone
from infra import constants
from infra.instance_offerings import InstanceTypesNotOffered, check_pools
from infra.naming import ZoneNames

ContextReader = Callable[[str], Any]
"""``app.node.try_get_context``: a key's value, or None."""


# Cognito's rule for a domain prefix (CreateUserPoolDomain): lowercase letters, digits and hyphens,
# not at either end, and none of the reserved words.
_DOMAIN_PREFIX = r"(?!.*(?:aws|amazon|cognito))[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"


class ConfigError(ValueError):
    """The CDK context does not describe a deployable service."""


@dataclass(frozen=True)
class DeploymentConfig:
    """Stage, stack names, regions and availability zones of one deployment."""

    stage: str
    stack_name_prefix: str
    home_region: str
    zone_regions: dict[str, str]
    availability_zones: dict[str, tuple[str, ...]]
    worker_image_dir: Path
    console_domain_prefix: str
    instance_pools: dict[str, dict[str, constants.ComputePool]]
    """Every zone region → its compute pools (``COMPUTE_POOLS`` with the ``instancePools`` overrides)."""

    @classmethod
    def from_context(cls, context: ContextReader) -> DeploymentConfig:
        """Read and validate the context.

        Raises
        ------
        ConfigError
            Naming the key that is missing or malformed, or the region that does not offer one of
            its compute pools' instance types.
        """
        stage = str(context(constants.CONTEXT_STAGE) or constants.DEFAULT_STAGE)
        if not re.fullmatch(constants.STAGE_PATTERN, stage):
            raise ConfigError(f"context stage={stage!r} must match {constants.STAGE_PATTERN}")
        home_region = _required(context, constants.CONTEXT_HOME_REGION)
        zone_regions = {
            str(k): str(v) for k, v in _mapping(context, constants.CONTEXT_GEO_ZONE_REGIONS).items()
        }
        unknown = sorted(set(zone_regions) - {zone.value for zone in GeoZone})
        if unknown or not zone_regions:
            raise ConfigError(f"context geoZoneRegions: unknown or no geo zones {unknown}")
        if len(set(zone_regions.values())) != len(zone_regions):
            raise ConfigError("context geoZoneRegions: each geo zone needs its own region")
        azs = _mapping(context, constants.CONTEXT_AVAILABILITY_ZONES)
        missing = sorted(region for region in zone_regions.values() if not azs.get(region))
        if missing:
            raise ConfigError(f"context availabilityZones has no zones for regions {missing}")
        worker_dir = Path(
            str(context(constants.CONTEXT_WORKER_IMAGE_DIR) or constants.DEFAULT_WORKER_IMAGE_DIR)
        )
        instance_pools = _instance_pools(context, list(zone_regions.values()))
        stack_name_prefix = str(context(constants.CONTEXT_STACK_NAME_PREFIX) or constants.STACK_NAME_PREFIX)
        domain_prefix = str(
            context(constants.CONTEXT_CONSOLE_DOMAIN_PREFIX)
            or f"{constants.SERVICE_NAME}-{stage}-{Aws.ACCOUNT_ID}"
        )
        if context(constants.CONTEXT_CONSOLE_DOMAIN_PREFIX) and not re.fullmatch(
            _DOMAIN_PREFIX, domain_prefix
        ):
            raise ConfigError(
                f"context consoleDomainPrefix={domain_prefix!r} must be 1 to 63 lowercase letters, digits "
                "or hyphens, neither starting nor ending with a hyphen, without 'aws', 'amazon' or 'cognito'"
            )
        return cls(
            stage=stage,
            stack_name_prefix=stack_name_prefix,
            home_region=home_region,
            zone_regions=zone_regions,
            availability_zones={region: tuple(azs[region]) for region in zone_regions.values()},
            worker_image_dir=worker_dir if worker_dir.is_absolute() else constants.REPO_ROOT / worker_dir,
            console_domain_prefix=domain_prefix,
            instance_pools=instance_pools,
        )

    @property
    def control_plane_stack_name(self) -> str:
        return f"{self.stack_name_prefix}-{self.stage}"

    def compute_stack_name(self, zone: str) -> str:
        return f"{self.stack_name_prefix}-{self.stage}-{zone}"

    def zone_names(self, zone: str, account: str = Aws.ACCOUNT_ID) -> ZoneNames:
        """The zone's physical names; ``account`` defaults to the deploying account (a token)."""
        return ZoneNames(zone=zone, region=self.zone_regions[zone], stage=self.stage, account=account)

    def all_zone_names(self, account: str = Aws.ACCOUNT_ID) -> list[ZoneNames]:
        return [self.zone_names(zone, account) for zone in self.zone_regions]


def _instance_pools(
    context: ContextReader, regions: list[str]
) -> dict[str, dict[str, constants.ComputePool]]:
    overrides = (
        _mapping(context, constants.CONTEXT_INSTANCE_POOLS)
        if context(constants.CONTEXT_INSTANCE_POOLS)
        else {}
    )
    unknown_regions = sorted(set(overrides) - set(regions))
    if unknown_regions:
        raise ConfigError(f"context instancePools names regions of no geo zone: {unknown_regions}")
    pools_by_region = {}
    for region in regions:
        pools = dict(constants.COMPUTE_POOLS)
        for pool_name, types in dict(overrides.get(region) or {}).items():
            if pool_name not in pools:
                raise ConfigError(
                    f"context instancePools[{region}]: unknown pool {pool_name!r}; pools are {sorted(pools)}"
                )
            if not isinstance(types, list) or not types or not all(isinstance(t, str) and t for t in types):
                raise ConfigError(f"context instancePools[{region}][{pool_name}] must be a list of types")
            pools[pool_name] = dataclasses.replace(pools[pool_name], instance_types=tuple(types))
        try:
            check_pools(region, pools)
        except InstanceTypesNotOffered as exc:
            raise ConfigError(str(exc)) from exc
        pools_by_region[region] = pools
    return pools_by_region


def _required(context: ContextReader, key: str) -> str:
    value = context(key)
    if not value:
        raise ConfigError(f"context {key} is missing (cdk.json or -c {key}=...)")
    return str(value)


def _mapping(context: ContextReader, key: str) -> dict[str, Any]:
    value = context(key)
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise ConfigError(f"context {key} is not a JSON object: {value!r}") from exc
    if not isinstance(value, dict):
        raise ConfigError(f"context {key} must be a mapping, got {value!r}")
    return value
