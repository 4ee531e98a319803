"""The CDK app: ``python -m infra.app`` (cdk.json runs it; ``CDK_OUTDIR`` picks the output folder).

Stacks (names, regions and stage from context: see ``infra/config.py``):
- ``<prefix>-<stage>-<Zone>`` per geo zone, in the zone's region: data bucket, VPC, Batch.
- ``<prefix>-<stage>`` in the home region: API, functions, tables, topics, rules, Cognito; it
  depends on the compute stacks (deployed after them) but references them only by name.

Stacks name their region but not their account, so ``cdk synth`` needs no credentials; the account
is the deploying one (``AWS::AccountId``).
"""

from __future__ import annotations

import json
from typing import Any

from aws_cdk import App, Environment, Tags, Validations
from cdk_nag import AwsSolutionsChecks

from infra import constants
from infra.config import DeploymentConfig
from infra.stacks.compute import ComputeStack
from infra.stacks.control_plane import ControlPlaneStack


def cdk_json_context() -> dict[str, Any]:
    """The ``context`` of the repo's cdk.json, so every way of running the app sees the same flags."""
    cdk_json = constants.REPO_ROOT / "cdk.json"
    context: dict[str, Any] = json.loads(cdk_json.read_text()).get("context", {})
    return context


def build_app(outdir: str | None = None, context: dict[str, Any] | None = None) -> App:
    """Build the app with its stacks and the cdk-nag AwsSolutions checks (run at synth).

    Parameters
    ----------
    outdir : str, optional
        Cloud assembly folder; default ``CDK_OUTDIR`` (set by the CLI) or a temporary folder.
    context : dict, optional
        Overrides on top of cdk.json's context.

    Raises
    ------
    infra.config.ConfigError
        The context does not describe a deployable service.
    """
    app = App(outdir=outdir, context={**cdk_json_context(), **(context or {})})
    config = DeploymentConfig.from_context(app.node.try_get_context)
    zones = config.all_zone_names()

    compute_stacks = [
        ComputeStack(
            app,
            config.compute_stack_name(zone.zone),
            names=zone,
            home_region=config.home_region,
            availability_zones=config.availability_zones[zone.region],
            worker_image_dir=config.worker_image_dir,
            pools=config.instance_pools[zone.region],
            replicas=[other for other in zones if other != zone],
            env=Environment(region=zone.region),
            description=f"{constants.SERVICE_NAME} ({config.stage}): {zone.zone} data and Batch compute",
        )
        for zone in zones
    ]
    control_plane = ControlPlaneStack(
        app,
        config.control_plane_stack_name,
        zones=zones,
        console_domain_prefix=config.console_domain_prefix,
        env=Environment(region=config.home_region),
        description=f"{constants.SERVICE_NAME} ({config.stage}): API, functions, tables, events",
    )
    for stack in compute_stacks:
        # Deploy order only (no references): queues, definitions and buckets exist before the API
        # can submit to them.
        control_plane.node.add_dependency(stack)
        Tags.of(stack).add("geoZone", stack.names.zone)
    Tags.of(app).add("service", constants.SERVICE_NAME)
    Tags.of(app).add("stage", config.stage)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


def main() -> None:
    build_app().synth()


if __name__ == "__main__":
    main()
