"""Tables built from functions/adapters/tables.py (home region), and each zone's data bucket:
retention, protection and its deterministic name."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Match

from functions.adapters.tables import ALL_TABLES, JOBS, TableSpec
from infra import constants
from tests.infra.conftest import Synth


def _table(synth: Synth, spec: TableSpec) -> dict[str, Any]:
    logical_id = synth.logical_id(synth.stack.data.tables[spec.logical_name])
    table: dict[str, Any] = synth.template_json["Resources"][logical_id]
    return table


def _key_schema(partition_key: str, sort_key: str | None) -> list[dict[str, str]]:
    keys = [{"AttributeName": partition_key, "KeyType": "HASH"}]
    if sort_key:
        keys.append({"AttributeName": sort_key, "KeyType": "RANGE"})
    return keys


def test_one_table_per_spec(synth: Synth) -> None:
    synth.template.resource_count_is("AWS::DynamoDB::Table", len(ALL_TABLES))


@pytest.mark.parametrize("spec", ALL_TABLES, ids=lambda spec: spec.logical_name)
def test_table_matches_its_spec(synth: Synth, spec: TableSpec) -> None:
    table = _table(synth, spec)
    props = table["Properties"]

    assert table["DeletionPolicy"] == "Retain"
    assert props["DeletionProtectionEnabled"] is True
    assert "TableName" not in props  # generated: a table a rollback keeps never blocks the retry
    assert props["BillingMode"] == "PAY_PER_REQUEST"
    assert props["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert props["SSESpecification"] == {"SSEEnabled": True}  # AWS-managed key
    assert props["KeySchema"] == _key_schema(spec.partition_key, spec.sort_key)
    assert sorted(a["AttributeName"] for a in props["AttributeDefinitions"]) == sorted(spec.attribute_names())
    if spec.ttl_attribute:
        assert props["TimeToLiveSpecification"] == {"AttributeName": spec.ttl_attribute, "Enabled": True}
    else:
        assert "TimeToLiveSpecification" not in props


@pytest.mark.parametrize("spec", [s for s in ALL_TABLES if s.indexes], ids=lambda spec: spec.logical_name)
def test_table_indexes_match_spec(synth: Synth, spec: TableSpec) -> None:
    props = _table(synth, spec)["Properties"]
    built = {
        index["IndexName"]: index
        for kind in ("GlobalSecondaryIndexes", "LocalSecondaryIndexes")
        for index in props.get(kind, [])
    }

    assert set(built) == {index.name for index in spec.indexes}
    for index in spec.indexes:
        kind = "LocalSecondaryIndexes" if index.local else "GlobalSecondaryIndexes"
        assert built[index.name] in props[kind]
        assert built[index.name]["KeySchema"] == _key_schema(index.partition_key, index.sort_key)
        assert built[index.name]["Projection"]["ProjectionType"] == index.projection
        assert sorted(built[index.name]["Projection"].get("NonKeyAttributes", [])) == sorted(index.included)


def test_the_unfinished_index_key_never_moves_and_it_holds_only_what_its_queries_read(
    synth: Synth,
) -> None:
    # A transition changes lastEventAt: one small index write, not a delete and a put of the whole job.
    props = _table(synth, JOBS)["Properties"]
    (unfinished,) = [i for i in props["GlobalSecondaryIndexes"] if i["IndexName"] == "unfinished"]

    assert unfinished["KeySchema"] == _key_schema("openPartition", "jobId")
    assert unfinished["Projection"] == {
        "ProjectionType": "INCLUDE",
        "NonKeyAttributes": ["lastEventAt", "ttl", "machineClass", "geoZone", "status", "type"],
    }


def _data_bucket(compute: Synth) -> dict[str, Any]:
    bucket: dict[str, Any] = compute.template_json["Resources"][compute.logical_id(compute.stack.data.bucket)]
    return bucket


def test_control_plane_has_no_data_bucket(synth: Synth) -> None:
    # Job data stays in its zone's region: each compute stack owns its bucket. The control plane's
    # buckets are the web console's files and its logs.
    console = synth.stack.console
    assert set(synth.resources("AWS::S3::Bucket")) == {
        synth.logical_id(console.bucket),
        synth.logical_id(console.log_bucket),
    }


def test_bucket_name_carries_stage_account_and_region(compute: Synth) -> None:
    region = compute.stack.region

    assert _data_bucket(compute)["Properties"]["BucketName"] == {
        "Fn::Join": ["", ["remote-batch-dev-data-", {"Ref": "AWS::AccountId"}, f"-{region}"]]
    }


@pytest.mark.parametrize("prefix", ["inputs/", "outputs/", "environment-builds/"])
def test_data_prefixes_expire_after_14_days(compute: Synth, prefix: str) -> None:
    rules = _data_bucket(compute)["Properties"]["LifecycleConfiguration"]["Rules"]

    (rule,) = [r for r in rules if r.get("Prefix") == prefix]
    assert rule["ExpirationInDays"] == 14
    assert rule["Status"] == "Enabled"


def test_incomplete_uploads_are_aborted(compute: Synth) -> None:
    rules = _data_bucket(compute)["Properties"]["LifecycleConfiguration"]["Rules"]

    assert any(
        "Prefix" not in r
        and r["AbortIncompleteMultipartUpload"]["DaysAfterInitiation"]
        == constants.ABORT_INCOMPLETE_UPLOAD_DAYS
        for r in rules
        if "AbortIncompleteMultipartUpload" in r
    )


def test_data_bucket_is_encrypted_private_unversioned_retained_and_logged(compute: Synth) -> None:
    bucket = _data_bucket(compute)
    props = bucket["Properties"]

    # Fixed name: kept on stack deletion or replacement, deleted when its first creation rolls back.
    assert bucket["DeletionPolicy"] == "RetainExceptOnCreate"
    assert bucket["UpdateReplacePolicy"] == "Retain"
    assert props["BucketEncryption"] == {
        "ServerSideEncryptionConfiguration": [{"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
    }
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert props.get("VersioningConfiguration", {}).get("Status") != "Enabled"
    assert props["LoggingConfiguration"]["DestinationBucketName"] == {
        "Ref": compute.logical_id(compute.stack.data.access_log_bucket)
    }


@pytest.mark.parametrize("bucket", ["bucket", "access_log_bucket"])
def test_buckets_deny_requests_without_tls(compute: Synth, bucket: str) -> None:
    logical_id = compute.logical_id(getattr(compute.stack.data, bucket))

    compute.template.has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "Bucket": {"Ref": logical_id},
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Action": "s3:*",
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                )
            },
        },
    )
