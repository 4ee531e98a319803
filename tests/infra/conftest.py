"""Synthesize the CDK app once per test session; every infra test reads that one cloud assembly.

cdk-nag runs as a validation plugin during the synth: an unacknowledged finding fails the fixture
(``ValidationFailed``), so every test here also stands on "cdk-nag: 0 unsuppressed errors".
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Synth:
    """The synthesized app: its output folder, the control plane stack and its template."""

    outdir: Path
    stack: Any  # infra.stacks.control_plane.ControlPlaneStack (CDK imports stay inside fixtures)
    template: Any  # aws_cdk.assertions.Template
    template_json: dict[str, Any]

    def logical_id(self, construct: Any) -> str:
        """The CloudFormation logical id of an L2 construct's main resource."""
        return str(self.stack.resolve(construct.node.default_child.logical_id))

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {
            name: resource
            for name, resource in self.template_json["Resources"].items()
            if resource["Type"] == resource_type
        }


@pytest.fixture(scope="session")
def worker_image_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The worker's build context; a stub while worker/Dockerfile does not exist yet.

    The image is only built at deploy time, so synth needs nothing but a Dockerfile to hash.
    """
    worker = REPO_ROOT / "worker"
    if (worker / "Dockerfile").is_file():
        return worker
    stub = tmp_path_factory.mktemp("worker-image")
    (stub / "Dockerfile").write_text("FROM public.ecr.aws/docker/library/python:3.11-slim\n")
    return stub


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory, worker_image_dir: Path) -> Synth:
    from aws_cdk.assertions import Template

    from infra.app import build_app
    from infra.stacks.control_plane import ControlPlaneStack

    outdir = tmp_path_factory.mktemp("cdk.out")
    app = build_app(outdir=str(outdir), context={"workerImageDir": str(worker_image_dir)})
    assembly = app.synth()
    (stack,) = [child for child in app.node.children if isinstance(child, ControlPlaneStack)]
    template_path = Path(assembly.get_stack_artifact(stack.artifact_id).template_full_path)
    return Synth(
        outdir=outdir,
        stack=stack,
        template=Template.from_stack(stack),
        template_json=json.loads(template_path.read_text()),
    )
