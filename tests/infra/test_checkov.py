"""checkov (an infrastructure scanner independent of cdk-nag) over every synthesized template, with each
accepted finding acknowledged, with its reason, in ``tests/infra/checkov_acknowledgments.toml``.

checkov runs from its own venv (``build/checkov``, ``make checkov``; ``infra/checkov-requirements.txt``
says why), one process per template in parallel, offline (``--skip-download``).
"""

from __future__ import annotations

import fnmatch
import json
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.infra.conftest import REPO_ROOT, SynthApp

ACKNOWLEDGMENTS = Path(__file__).with_name("checkov_acknowledgments.toml")
CHECKOV = REPO_ROOT / "build" / "checkov" / "bin" / "checkov"
CHECKOV_SECONDS = 180
MIN_REASON_CHARACTERS = 40


@dataclass(frozen=True)
class Finding:
    """One failed checkov check: ``resource`` is ``<stack>/<logical id>``."""

    check: str
    resource: str
    name: str

    def __str__(self) -> str:
        return f"{self.check} {self.resource}: {self.name}"


@dataclass(frozen=True)
class Scan:
    """What checkov reported over the templates: passed and failed check counts, and the failures."""

    passed: int
    failed: int
    findings: list[Finding]


def load_acknowledgments(path: Path = ACKNOWLEDGMENTS) -> list[dict[str, str]]:
    entries: list[dict[str, str]] = tomllib.loads(path.read_text())["acknowledged"]
    return entries


def acknowledged_by(finding: Finding, entries: list[dict[str, str]]) -> list[int]:
    """Indexes of the entries that acknowledge ``finding`` (check id exact, resource glob)."""
    return [
        index
        for index, entry in enumerate(entries)
        if entry["check"] == finding.check and fnmatch.fnmatchcase(finding.resource, entry["resource"])
    ]


def findings_of(stack_name: str, report: dict[str, Any]) -> list[Finding]:
    """The failed checks of one template's JSON report (``checkov -o json``); a resource is named
    ``<type>.<logical id>`` there."""
    return [
        Finding(
            failed["check_id"], f"{stack_name}/{failed['resource'].rsplit('.', 1)[1]}", failed["check_name"]
        )
        for failed in report["results"]["failed_checks"]
    ]


@pytest.fixture(scope="module")
def scan(app_synth: SynthApp) -> Scan:
    """checkov over the three templates, printed (run with -s) for the record."""
    assert CHECKOV.exists(), f"{CHECKOV} is missing: run `make checkov` (its own venv)"
    runs = {
        s.stack.stack_name: subprocess.Popen(
            [
                str(CHECKOV),
                "--file",
                str(s.template_path),
                "--framework",
                "cloudformation",
                "--output",
                "json",
                "--compact",
                "--quiet",
                "--skip-download",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for s in app_synth.stacks
    }
    passed = failed = 0
    found: list[Finding] = []
    for stack_name, run in runs.items():
        stdout, stderr = run.communicate(timeout=CHECKOV_SECONDS)
        # checkov exits 1 when a check failed; anything else (2: its own error) is a broken run.
        assert run.returncode in (0, 1), stderr
        report = json.loads(stdout)
        assert report["summary"]["parsing_errors"] == 0, report["summary"]
        passed += report["summary"]["passed"]
        failed += report["summary"]["failed"]
        found += findings_of(stack_name, report)
    entries = load_acknowledgments()
    unacknowledged = [f for f in found if not acknowledged_by(f, entries)]
    print(
        f"\ncheckov: {len(app_synth.stacks)} templates, {passed} passed, {failed} failed, "
        f"{failed - len(unacknowledged)} acknowledged, {len(unacknowledged)} unacknowledged"
    )
    for finding in found:
        print(f"  {finding}{'' if acknowledged_by(finding, entries) else '  <- NOT ACKNOWLEDGED'}")
    return Scan(passed, failed, found)


def test_checkov_ran_its_cloudformation_checks(scan: Scan) -> None:
    # Hundreds of checks over ~280 resources: a scan that checked nothing would pass vacuously.
    assert scan.passed > 300
    assert scan.failed == len(scan.findings)


def test_no_unacknowledged_finding(scan: Scan) -> None:
    entries = load_acknowledgments()

    unacknowledged = [str(finding) for finding in scan.findings if not acknowledged_by(finding, entries)]

    assert unacknowledged == [], "\n".join(unacknowledged)


def test_every_acknowledgment_has_a_reason_and_still_applies(scan: Scan) -> None:
    entries = load_acknowledgments()

    used = {index for finding in scan.findings for index in acknowledged_by(finding, entries)}

    assert [e for e in entries if len(e.get("reason", "").strip()) < MIN_REASON_CHARACTERS] == []
    assert [
        f"{entries[i]['check']} {entries[i]['resource']}" for i in range(len(entries)) if i not in used
    ] == []


def test_a_finding_without_acknowledgment_fails(tmp_path: Path) -> None:
    path = tmp_path / "acks.toml"
    path.write_text('[[acknowledged]]\ncheck = "CKV_AWS_27"\nresource = "other/*"\nreason = "x"\n')
    finding = Finding("CKV_AWS_27", "RemoteBatch-dev/DispatchQueue716BFD35", "SQS encrypted")

    assert acknowledged_by(finding, load_acknowledgments(path)) == []
    assert acknowledged_by(finding, load_acknowledgments()) != []


def test_findings_are_named_by_stack_and_logical_id() -> None:
    report = {
        "results": {
            "failed_checks": [
                {
                    "check_id": "CKV_AWS_59",
                    "resource": "AWS::ApiGateway::Method.ApiGET1",
                    "check_name": "open",
                }
            ]
        }
    }

    assert findings_of("RemoteBatch-dev", report) == [
        Finding("CKV_AWS_59", "RemoteBatch-dev/ApiGET1", "open")
    ]
