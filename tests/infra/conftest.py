"""Synthesize the CDK app once per test session; every infra test reads that one cloud assembly.

cdk-nag runs as a validation plugin during the synth: an unacknowledged finding fails the fixture
(``ValidationFailed``), so every test here also stands on "cdk-nag: 0 unsuppressed errors".
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from functions.domain.machine_classes import GeoZone

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

REPO_ROOT = Path(__file__).resolve().parents[2]
HOME_REGION = "us-east-1"
ZONE_REGIONS = {"UnitedStates": "us-east-1", "EuropeanUnion": "eu-central-1"}
ZONES = [zone.value for zone in GeoZone]


@dataclass(frozen=True)
class Synth:
    """One synthesized stack: the stack object, its template file and parsed template."""

    outdir: Path
    stack: Any  # aws_cdk.Stack (CDK imports stay inside fixtures)
    template: Any  # aws_cdk.assertions.Template
    template_json: dict[str, Any]
    template_path: Path

    def logical_id(self, construct: Any) -> str:
        """The CloudFormation logical id of an L2 construct's main resource."""
        return str(self.stack.resolve(construct.node.default_child.logical_id))

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {
            name: resource
            for name, resource in self.template_json["Resources"].items()
            if resource["Type"] == resource_type
        }


@dataclass(frozen=True)
class SynthApp:
    """The synthesized app: the control plane, one compute stack per zone, and how long it took."""

    outdir: Path
    seconds: float
    control_plane: Synth
    zones: dict[str, Synth]

    @property
    def stacks(self) -> list[Synth]:
        return [self.control_plane, *self.zones.values()]


@pytest.fixture(scope="session")
def worker_image_dir() -> Path:
    """The worker's build context (only hashed at synth; the image is built at deploy time)."""
    worker = REPO_ROOT / "worker"
    assert (worker / "Dockerfile").is_file()
    return worker


def _synth_of(outdir: Path, assembly: Any, stack: Any) -> Synth:
    from aws_cdk.assertions import Template

    template_path = Path(assembly.get_stack_artifact(stack.artifact_id).template_full_path)
    template_json = json.loads(template_path.read_text())
    return Synth(
        outdir=outdir,
        stack=stack,
        # From the file, not Template.from_stack: that would synthesize (and run cdk-nag) again.
        template=Template.from_json(template_json),
        template_json=template_json,
        template_path=template_path,
    )


@pytest.fixture(scope="session")
def app_synth(tmp_path_factory: pytest.TempPathFactory, worker_image_dir: Path) -> SynthApp:
    from infra.app import build_app
    from infra.stacks.compute import ComputeStack
    from infra.stacks.control_plane import ControlPlaneStack

    outdir = tmp_path_factory.mktemp("cdk.out")
    started = time.perf_counter()
    app = build_app(outdir=str(outdir), context={"workerImageDir": str(worker_image_dir)})
    assembly = app.synth()
    seconds = time.perf_counter() - started

    (control_plane,) = [child for child in app.node.children if isinstance(child, ControlPlaneStack)]
    compute = [child for child in app.node.children if isinstance(child, ComputeStack)]
    return SynthApp(
        outdir=outdir,
        seconds=seconds,
        control_plane=_synth_of(outdir, assembly, control_plane),
        zones={stack.names.zone: _synth_of(outdir, assembly, stack) for stack in compute},
    )


@pytest.fixture(scope="session")
def synth(app_synth: SynthApp) -> Synth:
    """The control plane stack (home region)."""
    return app_synth.control_plane


@pytest.fixture(scope="session", params=ZONES)
def compute(request: pytest.FixtureRequest, app_synth: SynthApp) -> Synth:
    """Each geo zone's compute stack in turn."""
    return app_synth.zones[request.param]


PYC_CHECK = Path(__file__).with_name("pyc_check.py")


def check_compiled(target: Path, tmp_path: Path) -> dict[str, Any]:
    """How each module of ``target`` (a folder or a layer zip) was compiled, read by the Lambda
    runtime's Python (``tests/infra/pyc_check.py`` in ``lambda_bundle.runtime_interpreter()``): the
    magic number, cache tag and source-hash key are that interpreter's, not the tests' one's."""
    import subprocess

    from infra import lambda_bundle

    spec = tmp_path / "pyc-check.json"
    report = tmp_path / "pyc-report.json"
    spec.write_text(json.dumps({"folder" if target.is_dir() else "zip": str(target), "report": str(report)}))
    subprocess.run(
        [lambda_bundle.runtime_interpreter(), "-I", "-S", "-B", str(PYC_CHECK), str(spec)],
        check=True,
        timeout=120,
    )
    result: dict[str, Any] = json.loads(report.read_text())
    return result
