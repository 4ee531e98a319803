"""Deploys that can be retried and torn down: no resource with a fixed physical name survives the
rollback of its own creation (a retry would fail with "already exists"), and the tables are
deletion-protected.

CloudFormation's deletion policies (``Delete``, ``Retain``, ``RetainExceptOnCreate``, ``Snapshot``)
are documented under "DeletionPolicy attribute" in the CloudFormation user guide; only
``RetainExceptOnCreate`` deletes a resource whose creation is rolled back.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from functions.adapters.tables import ALL_TABLES
from tests.infra.conftest import SynthApp

_KEPT_ON_ROLLBACK = frozenset({"Retain", "Snapshot"})


def _physical_name(resource_type: str, properties: dict[str, Any]) -> Any:
    """The resource's own name property, if the template sets one (``BucketName`` for
    ``AWS::S3::Bucket``, ``Name`` for ``AWS::Events::Rule``); None when CloudFormation generates it."""
    kind = resource_type.rsplit("::", 1)[-1]
    for key in (f"{kind}Name", "Name"):
        if key in properties:
            return properties[key]
    return None


def retained_fixed_names(template: Mapping[str, Any]) -> list[str]:
    """Logical ids of resources with a fixed physical name that a rollback of their creation keeps."""
    return [
        logical_id
        for logical_id, resource in template["Resources"].items()
        if resource.get("DeletionPolicy", "Delete") in _KEPT_ON_ROLLBACK
        and _physical_name(resource["Type"], resource.get("Properties", {})) is not None
    ]


def test_no_retained_resource_has_a_fixed_name(
    app_synth: SynthApp, capsys: pytest.CaptureFixture[str]
) -> None:
    for s in app_synth.stacks:
        resources = s.template_json["Resources"]
        named = [
            logical_id
            for logical_id, r in resources.items()
            if _physical_name(r["Type"], r.get("Properties", {})) is not None
        ]
        retained = [
            logical_id
            for logical_id, r in resources.items()
            if r.get("DeletionPolicy") in {*_KEPT_ON_ROLLBACK, "RetainExceptOnCreate"}
        ]

        assert retained_fixed_names(s.template_json) == [], s.stack.stack_name
        with capsys.disabled():
            print(
                f"\n{s.stack.stack_name}: {len(named)} fixed names, {len(retained)} retained, "
                f"0 both without RetainExceptOnCreate",
                end="",
            )


def test_every_zone_keeps_its_fixed_name_bucket_only_past_creation(app_synth: SynthApp) -> None:
    for zone, s in app_synth.zones.items():
        bucket = s.template_json["Resources"][s.logical_id(s.stack.data.bucket)]

        assert "BucketName" in bucket["Properties"], zone
        assert bucket["DeletionPolicy"] == "RetainExceptOnCreate", zone


def test_every_table_is_deletion_protected(app_synth: SynthApp) -> None:

    tables = app_synth.control_plane.resources("AWS::DynamoDB::Table")

    assert len(tables) == len(ALL_TABLES) == 7
    for logical_id, table in tables.items():
        assert table["Properties"]["DeletionProtectionEnabled"] is True, logical_id


def test_the_check_finds_a_retained_fixed_name(tmp_path: Path) -> None:
    from aws_cdk import App, RemovalPolicy, Stack
    from aws_cdk import aws_logs as logs
    from aws_cdk import aws_s3 as s3
    from aws_cdk.assertions import Template

    # Given a bucket and a log group with fixed names that a rollback would keep, and one that it would not
    stack = Stack(App(outdir=str(tmp_path)), "Probe")
    s3.Bucket(stack, "Kept", bucket_name="probe-kept", removal_policy=RemovalPolicy.RETAIN)
    logs.LogGroup(stack, "Snap", log_group_name="/probe", removal_policy=RemovalPolicy.RETAIN)
    s3.Bucket(
        stack, "Fine", bucket_name="probe-fine", removal_policy=RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE
    )
    s3.Bucket(stack, "Generated", removal_policy=RemovalPolicy.RETAIN)

    found = retained_fixed_names(Template.from_stack(stack).to_json())

    # Logical ids are the construct id plus an 8-hex-digit hash.
    assert sorted(re.sub(r"[0-9A-F]{8}$", "", logical_id) for logical_id in found) == ["Kept", "Snap"]
