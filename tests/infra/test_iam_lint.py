"""Every policy in every synthesized template passes parliament (an IAM linter that knows each action's
resource types and condition keys), with each accepted finding acknowledged, with its reason, in
``tests/infra/iam_acknowledgments.toml``.

Policies are linted as a deploy would create them: intrinsics resolved into concrete ARNs by
``tests/infra/cfn_resolver.py`` (moto's account id, each stack's region), so parliament can match each
ARN against the resource types the action supports.
"""

from __future__ import annotations

import fnmatch
import json
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.infra.cfn_resolver import TemplateResolver
from tests.infra.conftest import Synth, SynthApp

ACKNOWLEDGMENTS = Path(__file__).with_name("iam_acknowledgments.toml")

# Where each resource type keeps its policy document.
_DOCUMENTS = {
    "AWS::IAM::Policy": "PolicyDocument",
    "AWS::IAM::ManagedPolicy": "PolicyDocument",
    "AWS::SNS::TopicPolicy": "PolicyDocument",
    "AWS::SQS::QueuePolicy": "PolicyDocument",
    "AWS::S3::BucketPolicy": "PolicyDocument",
    "AWS::KMS::Key": "KeyPolicy",
}


@dataclass(frozen=True)
class Finding:
    """One parliament finding: ``policy`` is ``<stack>/<policy>``, ``issue`` parliament's code."""

    policy: str
    issue: str
    detail: str

    def __str__(self) -> str:
        return f"{self.policy}: {self.issue} {self.detail}"


def resolver_of(synth: Synth) -> TemplateResolver:
    """The resolver of one synthesized stack (its own region; moto's account)."""
    region = synth.stack.resolve(synth.stack.region)
    assert isinstance(region, str), "stacks name their region (infra/app.py)"
    return TemplateResolver(synth.template_json, stack_name=synth.stack.stack_name, region=region)


def template_policies(synth: Synth) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every policy document of a stack, resolved: identity policies (``AWS::IAM::Policy``,
    ``AWS::IAM::ManagedPolicy``, a role's inline ``Policies``), trust policies and resource policies
    (topic, queue, bucket, key). Yields (``<stack>/<policy>``, document)."""
    resolver = resolver_of(synth)
    stack = synth.stack.stack_name
    for logical_id, resource in synth.template_json["Resources"].items():
        props = resource.get("Properties", {})
        key = _DOCUMENTS.get(resource["Type"])
        if key and key in props:
            yield f"{stack}/{logical_id}", resolver.resolve(props[key])
        if resource["Type"] == "AWS::IAM::Role":
            yield f"{stack}/{logical_id}/trust", resolver.resolve(props["AssumeRolePolicyDocument"])
            for policy in props.get("Policies", []):
                yield (
                    f"{stack}/{logical_id}/{policy['PolicyName']}",
                    resolver.resolve(policy["PolicyDocument"]),
                )


def lint(name: str, document: dict[str, Any]) -> list[Finding]:
    """parliament's findings (its own and its community auditors') on one resolved document."""
    from parliament import analyze_policy_string

    policy = analyze_policy_string(json.dumps(document), include_community_auditors=True)
    return [Finding(name, finding.issue, _detail(finding.detail)) for finding in policy.findings]


def _detail(detail: Any) -> str:
    return detail if isinstance(detail, str) else json.dumps(detail, sort_keys=True, default=str)


def load_acknowledgments(path: Path = ACKNOWLEDGMENTS) -> list[dict[str, str]]:
    entries: list[dict[str, str]] = tomllib.loads(path.read_text())["acknowledged"]
    return entries


def acknowledged_by(finding: Finding, entries: list[dict[str, str]]) -> list[int]:
    """Indexes of the entries that acknowledge ``finding`` (issue, policy glob, detail substring)."""
    return [
        index
        for index, entry in enumerate(entries)
        if entry["issue"] == finding.issue
        and fnmatch.fnmatchcase(finding.policy, entry["policy"])
        and entry.get("detail", "") in finding.detail
    ]


@pytest.fixture(scope="module")
def findings(app_synth: SynthApp) -> list[Finding]:
    """parliament over every policy of the three templates, printed (run with -s) for the record."""
    policies = [policy for synth in app_synth.stacks for policy in template_policies(synth)]
    found = [finding for name, document in policies for finding in lint(name, document)]
    entries = load_acknowledgments()
    print(
        f"\nparliament: {len(policies)} policies in {len(app_synth.stacks)} templates, {len(found)} findings"
    )
    for finding in found:
        reasons = [entries[i]["reason"].split(":")[0][:90] for i in acknowledged_by(finding, entries)]
        print(f"  {str(finding)[:160]}\n    acknowledged: {reasons[0] if reasons else 'NO'}")
    return found


def test_every_policy_of_every_template_is_linted(app_synth: SynthApp) -> None:
    names = [name for synth in app_synth.stacks for name, _ in template_policies(synth)]

    # The three functions' default policies and each zone's job role are among them.
    for role in (
        "FunctionsApiRoleDefaultPolicy",
        "FunctionsBatchEventsRoleDefaultPolicy",
        "FunctionsMeterRole",
    ):
        assert [n for n in names if n.startswith(f"RemoteBatch-dev/{role}")], role
    for zone in ("UnitedStates", "EuropeanUnion"):
        assert [n for n in names if n.startswith(f"RemoteBatch-dev-{zone}/ComputeJobRoleDefaultPolicy")]
    assert len(names) > 30


def test_no_unexplained_finding(findings: list[Finding]) -> None:
    entries = load_acknowledgments()

    unexplained = [str(finding) for finding in findings if not acknowledged_by(finding, entries)]

    assert unexplained == [], "\n".join(map(str, unexplained))


def test_every_acknowledgment_has_a_reason_and_still_applies(findings: list[Finding]) -> None:
    entries = load_acknowledgments()

    used = {index for finding in findings for index in acknowledged_by(finding, entries)}

    assert [e for e in entries if len(e.get("reason", "").strip()) < 40] == []
    assert [
        entries[i]["policy"] + " " + entries[i]["issue"] for i in range(len(entries)) if i not in used
    ] == []


def test_the_issue_8_statements_would_be_findings() -> None:
    """The linter does catch what issue 8 found: actions on resource types they do not support and a
    condition key the action does not have (so the acknowledgments cannot hide a real mistake)."""
    document = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": ["sns:Unsubscribe", "sns:GetSubscriptionAttributes"],
                "Resource": "arn:aws:sns:us-east-1:123456789012:topic:*",
            },
            {
                "Effect": "Allow",
                "Action": "batch:TagResource",
                "Resource": "arn:aws:batch:us-east-1:123456789012:job/*",
                "Condition": {"StringEquals": {"batch:CreateAction": "SubmitJob"}},
            },
            {
                "Effect": "Allow",
                "Action": "batch:SubmitJob",
                "Resource": "arn:aws:batch:us-east-1:123456789012:job-queue/q",
            },
        ],
    }

    issues = sorted({finding.issue for finding in lint("example", document)})

    assert issues == ["RESOURCE_MISMATCH", "UNKNOWN_CONDITION_FOR_ACTION"]


def test_a_finding_without_acknowledgment_fails(tmp_path: Path) -> None:
    path = tmp_path / "acks.toml"
    path.write_text('[[acknowledged]]\nissue = "RESOURCE_STAR"\npolicy = "other/*"\nreason = "x"\n')
    finding = Finding("RemoteBatch-dev/P", "RESOURCE_STAR", '["sns:Publish"]')

    assert acknowledged_by(finding, load_acknowledgments(path)) == []
