"""Tool gates on the synthesized app: cdk-nag (AwsSolutions), cfn-lint, template size, synth time,
and the stacks the app is made of."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.conftest import HOME_REGION, ZONE_REGIONS, Synth, SynthApp

MAX_TEMPLATE_BYTES = 1_000_000
MAX_SYNTH_SECONDS = 60
# W3005: CDK's normal explicit DependsOn pattern. W3010: the VPC's availability zones are explicit
# on purpose (cdk.json context), so synth needs no account lookup.
IGNORED_CHECKS = ["W3005", "W3010"]


def _cfn_lint() -> str:
    beside_python = Path(sys.executable).parent / "cfn-lint"
    found = str(beside_python) if beside_python.exists() else shutil.which("cfn-lint")
    assert found, "cfn-lint is not installed (pip install -e '.[infra]')"
    return found


def test_stacks_and_regions_come_from_context(app_synth: SynthApp) -> None:
    control_plane = app_synth.control_plane.stack

    assert control_plane.stack_name == "RemoteBatch-dev"
    assert control_plane.region == HOME_REGION
    assert {zone: s.stack.stack_name for zone, s in app_synth.zones.items()} == {
        zone: f"RemoteBatch-dev-{zone}" for zone in ZONE_REGIONS
    }
    assert {zone: s.stack.region for zone, s in app_synth.zones.items()} == ZONE_REGIONS
    # Account-agnostic: synth needs no credentials; the deploying account is AWS::AccountId.
    assert all(s.stack.resolve(s.stack.account) == {"Ref": "AWS::AccountId"} for s in app_synth.stacks)
    # Deployed after the compute stacks (ordering only: no cross-stack references).
    assert {dependency.stack_name for dependency in control_plane.dependencies} == {
        s.stack.stack_name for s in app_synth.zones.values()
    }
    for s in app_synth.stacks:
        assert "Fn::ImportValue" not in s.template_path.read_text()


def test_cfn_lint_reports_no_errors(app_synth: SynthApp, capsys: pytest.CaptureFixture[str]) -> None:
    # One process per template, in parallel, each linted against its own region.
    # -i must come after the file names: it takes every following argument (TOOLCHAIN.md).
    runs = {
        s.stack.stack_name: subprocess.Popen(
            [
                _cfn_lint(),
                str(s.template_path),
                "--regions",
                s.stack.region,
                "--format",
                "parseable",
                "-i",
                *IGNORED_CHECKS,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for s in app_synth.stacks
    }
    for stack_name, run in runs.items():
        stdout, stderr = run.communicate(timeout=120)
        findings = stdout.splitlines()
        errors = [line for line in findings if ":E" in line]

        assert run.returncode & 3 == 0, stdout + stderr  # 2: errors, 1: fatal
        assert not errors
        with capsys.disabled():
            print(f"\n{stack_name}: cfn-lint: 0 errors, {len(findings)} warnings", end="")


def _acknowledged(synth: Synth) -> list[str]:
    from aws_cdk import Validations

    return [
        rule
        for construct in synth.stack.node.find_all()
        for entry in construct.node.metadata
        if entry.type == Validations.ACKNOWLEDGED_RULES_METADATA_KEY
        for rule in entry.data
        if "AwsSolutions-" in rule
    ]


def test_cdk_nag_reports_no_unsuppressed_errors(
    app_synth: SynthApp, capsys: pytest.CaptureFixture[str]
) -> None:
    # The session synth ran the AwsSolutions pack on every stack and raised ValidationFailed on any
    # finding left; its report lists no violations (CDK's own "CloudFormation Validate" plugin may
    # list warnings, such as W3010, as suppressed).
    report = json.loads((app_synth.outdir / "validation-report.json").read_text())

    assert all(r["violations"] == [] for r in report["pluginReports"]), report["pluginReports"]
    assert "AwsSolutions" not in {
        r["pluginName"] for r in report["pluginReports"] if r["conclusion"] != "success"
    }
    for s in app_synth.stacks:
        acknowledged = len(_acknowledged(s))
        with capsys.disabled():
            print(
                f"\n{s.stack.stack_name}: cdk-nag: 0 unsuppressed errors, {acknowledged} acknowledged", end=""
            )


def test_every_acknowledgment_has_a_reason(app_synth: SynthApp) -> None:
    from aws_cdk import Validations

    for s in app_synth.stacks:
        for construct in s.stack.node.find_all():
            for entry in construct.node.metadata:
                if entry.type == Validations.ACKNOWLEDGED_RULES_METADATA_KEY:
                    assert all(len(str(reason)) > 40 for reason in entry.data.values()), construct.node.path


def test_cdk_nag_fails_synth_on_an_unacknowledged_finding(tmp_path: Path) -> None:
    from aws_cdk import App, Stack, Validations
    from aws_cdk import aws_sqs as sqs
    from cdk_nag import AwsSolutionsChecks

    # Given an app with the same checks and a queue that breaks AwsSolutions-SQS4 (no TLS-only policy)
    app = App(outdir=str(tmp_path))
    sqs.Queue(Stack(app, "Probe"), "Queue", encryption=sqs.QueueEncryption.SQS_MANAGED)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))

    # When it synthesizes, then the validation fails
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()


def test_templates_are_under_1_mb(app_synth: SynthApp, capsys: pytest.CaptureFixture[str]) -> None:
    for s in app_synth.stacks:
        size = s.template_path.stat().st_size

        assert size < MAX_TEMPLATE_BYTES, s.template_path.name
        with capsys.disabled():
            print(f"\n{s.stack.stack_name}: template {size / 1000:.0f} kB", end="")


def test_synth_is_fast(app_synth: SynthApp, capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        print(f"\nsynth (3 stacks, cdk-nag included): {app_synth.seconds:.1f} s", end="")

    assert app_synth.seconds < MAX_SYNTH_SECONDS
