"""Tool gates on the synthesized app: cdk-nag (AwsSolutions), cfn-lint, template size."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.conftest import Synth

pytestmark = pytest.mark.infra

MAX_TEMPLATE_BYTES = 1_000_000


def _templates(synth: Synth) -> list[Path]:
    return sorted(synth.outdir.glob("*.template.json"))


def _cfn_lint() -> str:
    beside_python = Path(sys.executable).parent / "cfn-lint"
    found = str(beside_python) if beside_python.exists() else shutil.which("cfn-lint")
    assert found, "cfn-lint is not installed (pip install -e '.[infra]')"
    return found


def test_cfn_lint_reports_no_errors(synth: Synth, capsys: pytest.CaptureFixture[str]) -> None:
    for template in _templates(synth):
        # -i must come after the file names: it takes every following argument (TOOLCHAIN.md).
        result = subprocess.run(
            [_cfn_lint(), str(template), "--format", "parseable", "-i", "W3005"],
            capture_output=True,
            text=True,
            check=False,
        )
        findings = result.stdout.splitlines()
        errors = [line for line in findings if ":E" in line]

        assert result.returncode & 3 == 0, result.stdout + result.stderr  # 2: errors, 1: fatal
        assert not errors
        with capsys.disabled():
            print(
                f"\n{template.stem.removesuffix('.template')}: cfn-lint: 0 errors, {len(findings)} warnings"
            )


def test_cdk_nag_reports_no_unsuppressed_errors(synth: Synth, capsys: pytest.CaptureFixture[str]) -> None:
    from aws_cdk import Validations

    # The session synth ran the AwsSolutions pack and raised ValidationFailed on any finding left;
    # its report lists no plugin violations.
    report = json.loads((synth.outdir / "validation-report.json").read_text())
    acknowledged = [
        rule
        for construct in synth.stack.node.find_all()
        for entry in construct.node.metadata
        if entry.type == Validations.ACKNOWLEDGED_RULES_METADATA_KEY
        for rule in entry.data
        if "AwsSolutions-" in rule
    ]

    assert report["pluginReports"] == []
    with capsys.disabled():
        print(f"\n{synth.stack.stack_name}: cdk-nag: 0 unsuppressed errors, {len(acknowledged)} acknowledged")


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


def test_templates_are_under_1_mb(synth: Synth) -> None:
    templates = _templates(synth)

    assert templates
    for template in templates:
        assert template.stat().st_size < MAX_TEMPLATE_BYTES, template.name
