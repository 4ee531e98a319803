"""The CDK app: ``python -m infra.app`` (cdk.json runs it; ``CDK_OUTDIR`` picks the output folder).

Context (cdk.json, or ``cdk synth -c key=value``):
- ``stage``: suffix of the stack name (default ``dev``).
- ``workerImageDir``: the worker image's build context, relative to the repo (default ``worker``).

Stacks are environment-agnostic (no account or region), so ``cdk synth`` needs no credentials.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aws_cdk import App, Tags, Validations
from cdk_nag import AwsSolutionsChecks

from infra import constants
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
    """
    app = App(outdir=outdir, context={**cdk_json_context(), **(context or {})})
    stage = str(app.node.try_get_context(constants.CONTEXT_STAGE) or constants.DEFAULT_STAGE)
    worker_dir = Path(
        str(
            app.node.try_get_context(constants.CONTEXT_WORKER_IMAGE_DIR) or constants.DEFAULT_WORKER_IMAGE_DIR
        )
    )
    if not worker_dir.is_absolute():
        worker_dir = constants.REPO_ROOT / worker_dir

    ControlPlaneStack(
        app,
        f"{constants.STACK_NAME_PREFIX}-{stage}",
        worker_image_dir=worker_dir,
        description=f"{constants.SERVICE_NAME} ({stage}): API, functions, data, Batch compute",
    )
    Tags.of(app).add("service", constants.SERVICE_NAME)
    Tags.of(app).add("stage", stage)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


def main() -> None:
    build_app().synth()


if __name__ == "__main__":
    main()
