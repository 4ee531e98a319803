"""``make deploy-console``: the built console to its bucket under ``console/``, its sign-in config, stale
files removed, the distribution's cache invalidated (infra/console_upload.py), on moto's S3."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import ANY, Stubber
from moto import mock_aws

from infra.console_upload import OUTPUTS, UploadError, main, stack_outputs, upload

BUCKET = "remote-batch-console-test"
OUTPUT_VALUES = {
    "ConsoleBucketName": BUCKET,
    "ConsoleDistributionId": "E2EXAMPLE12345",
    "ConsoleClientId": "client123",
    "ConsoleSignInUrl": "https://remote-batch-dev-1.auth.us-east-1.amazoncognito.com",
    "ConsoleUrl": "https://d111111abcdef8.cloudfront.net/console/",
}


@pytest.fixture
def s3() -> Iterator[Any]:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket=BUCKET)
        yield client


def _build(tmp_path: Path) -> Path:
    build = tmp_path / "console"
    (build / "assets").mkdir(parents=True)
    (build / "index.html").write_text("<!doctype html><script type=module src=assets/app-1a2b.js></script>")
    (build / "assets" / "app-1a2b.js").write_text("export {};")
    (build / "assets" / "app-1a2b.css").write_text("body{}")
    return build


def _cloudfront() -> tuple[Any, Stubber]:
    client = boto3.client("cloudfront", region_name="us-east-1")
    stubber = Stubber(client)
    stubber.add_response(
        "create_invalidation",
        {
            "Location": "x",
            "Invalidation": {
                "Id": "I1",
                "Status": "InProgress",
                "CreateTime": "2026-12-02T00:00:00Z",
                "InvalidationBatch": {
                    "Paths": {"Quantity": 1, "Items": ["/console/*"]},
                    "CallerReference": "r",
                },
            },
        },
        {
            "DistributionId": "E2EXAMPLE12345",
            "InvalidationBatch": {"Paths": {"Quantity": 1, "Items": ["/console/*"]}, "CallerReference": ANY},
        },
    )
    return client, stubber


def test_the_build_goes_under_console_with_its_types_and_index_last(s3: Any, tmp_path: Path) -> None:
    s3.put_object(Bucket=BUCKET, Key="console/assets/app-old.js", Body=b"old")
    s3.put_object(Bucket=BUCKET, Key="elsewhere.txt", Body=b"not the console's")
    cloudfront, stubber = _cloudfront()
    with stubber:
        written = upload(s3, cloudfront, _build(tmp_path), OUTPUT_VALUES)
        stubber.assert_no_pending_responses()

    assert written == [
        "console/assets/app-1a2b.css",
        "console/assets/app-1a2b.js",
        "console/index.html",
        "console/config.json",
    ]
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"])
    assert keys == sorted([*written, "elsewhere.txt"])  # the stale asset is gone, the rest of the bucket kept
    index = s3.get_object(Bucket=BUCKET, Key="console/index.html")
    assert (index["ContentType"], index["CacheControl"]) == ("text/html", "no-cache")
    script = s3.get_object(Bucket=BUCKET, Key="console/assets/app-1a2b.js")
    assert script["ContentType"] in ("text/javascript", "application/javascript")
    assert script["CacheControl"] == "public, max-age=31536000, immutable"
    config = json.loads(s3.get_object(Bucket=BUCKET, Key="console/config.json")["Body"].read())
    assert config == {
        "signIn": "cognito",
        "authority": OUTPUT_VALUES["ConsoleSignInUrl"],
        "clientId": "client123",
        "redirectUri": OUTPUT_VALUES["ConsoleUrl"],
        "scopes": ["openid", "email", "profile"],
    }


def test_a_missing_build_is_refused_before_anything_is_written(s3: Any, tmp_path: Path) -> None:
    cloudfront, stubber = _cloudfront()
    with stubber, pytest.raises(UploadError, match="make console"):
        upload(s3, cloudfront, tmp_path / "none", OUTPUT_VALUES)
    assert s3.list_objects_v2(Bucket=BUCKET).get("KeyCount") == 0


def test_a_stack_without_the_console_outputs_names_them() -> None:
    client = boto3.client("cloudformation", region_name="us-east-1")
    stubber = Stubber(client)
    outputs = [{"OutputKey": "ApiUrl", "OutputValue": "https://api"}]
    stack = {
        "StackName": "RemoteBatch-dev",
        "CreationTime": "2026-12-02T00:00:00Z",
        "StackStatus": "CREATE_COMPLETE",
        "Outputs": outputs,
    }
    stubber.add_response("describe_stacks", {"Stacks": [stack]}, {"StackName": "RemoteBatch-dev"})
    with stubber, pytest.raises(UploadError) as refused:
        stack_outputs(client, "RemoteBatch-dev")
    assert all(name in str(refused.value) for name in OUTPUTS)


def test_the_command_line_exits_2_naming_the_stack_it_cannot_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with mock_aws():  # no stack deployed
        code = main(["--stack", "RemoteBatch-none", "--region", "us-east-1", "--build", str(tmp_path)])
    assert code == 2
    message = capsys.readouterr().err
    assert (
        message.startswith("console upload: cannot read stack RemoteBatch-none")
        and "does not exist" in message
    )
