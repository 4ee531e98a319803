"""The console in the cloud: a private bucket behind CloudFront, the API on the same origin, Cognito sign-in
by authorization code with PKCE, a strict CSP (infra/constructs/console.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from infra.config import ConfigError, DeploymentConfig
from infra.constructs.console import _INDEX_REWRITE
from tests.infra.conftest import Synth


def _one(synth: Synth, resource_type: str) -> dict[str, Any]:
    (resource,) = synth.resources(resource_type).values()
    properties: dict[str, Any] = resource["Properties"]
    return properties


def _distribution(synth: Synth) -> dict[str, Any]:
    config: dict[str, Any] = _one(synth, "AWS::CloudFront::Distribution")["DistributionConfig"]
    return config


def _console_bucket(synth: Synth) -> tuple[str, dict[str, Any]]:
    logical_id = synth.logical_id(synth.stack.console.bucket)
    return logical_id, synth.template_json["Resources"][logical_id]["Properties"]


def test_the_console_bucket_is_private_encrypted_and_tls_only(synth: Synth) -> None:
    logical_id, bucket = _console_bucket(synth)
    assert bucket["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    assert bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"][0][
        "ServerSideEncryptionByDefault"
    ] == {"SSEAlgorithm": "AES256"}
    assert "LoggingConfiguration" in bucket
    (policy,) = [
        p["Properties"]["PolicyDocument"]
        for p in synth.resources("AWS::S3::BucketPolicy").values()
        if p["Properties"]["Bucket"] == {"Ref": logical_id}
    ]
    statements = policy["Statement"]
    assert {
        "Action": "s3:*",
        "Condition": {"Bool": {"aws:SecureTransport": "false"}},
        "Effect": "Deny",
    }.items() <= statements[0].items()
    # Only CloudFront reads it: s3:GetObject for the service principal, on this distribution alone.
    reads = [s for s in statements if s["Effect"] == "Allow"]
    assert [s["Principal"] for s in reads] == [{"Service": "cloudfront.amazonaws.com"}]
    assert reads[0]["Action"] == "s3:GetObject"
    assert "AWS:SourceArn" in json.dumps(reads[0]["Condition"])


def test_console_paths_come_from_the_bucket_and_every_other_path_from_the_api_uncached(synth: Synth) -> None:
    config = _distribution(synth)
    origins = {origin["Id"]: origin for origin in config["Origins"]}
    default = config["DefaultCacheBehavior"]
    api_origin = origins[default["TargetOriginId"]]
    assert (
        "CustomOriginConfig" in api_origin
        and api_origin["CustomOriginConfig"]["OriginProtocolPolicy"] == "https-only"
    )
    assert "execute-api" in json.dumps(api_origin["DomainName"])
    assert default["ViewerProtocolPolicy"] == "https-only"
    assert set(default["AllowedMethods"]) == {"GET", "HEAD", "OPTIONS", "PUT", "PATCH", "POST", "DELETE"}
    # CachingDisabled and AllViewerExceptHostHeader (AWS managed policies): the authorizer sees the token.
    assert default["CachePolicyId"] == "4135ea2d-6df8-44a3-9df3-4b5a84be39ad"
    assert default["OriginRequestPolicyId"] == "b689b0a8-53d0-40ab-baf2-68738e2966ac"

    behaviors = {b["PathPattern"]: b for b in config["CacheBehaviors"]}
    assert set(behaviors) == {"/console/*", "/console"}
    for behavior in behaviors.values():
        origin = origins[behavior["TargetOriginId"]]
        assert "S3OriginConfig" in origin and "OriginAccessControlId" in origin
        assert behavior["ViewerProtocolPolicy"] == "redirect-to-https"
        assert behavior["AllowedMethods"] == ["GET", "HEAD"]
        assert [f["EventType"] for f in behavior["FunctionAssociations"]] == ["viewer-request"]
        assert "ResponseHeadersPolicyId" in behavior
    assert config["Logging"]["Prefix"] == "cloudfront/"


def test_console_responses_carry_a_strict_content_security_policy(synth: Synth) -> None:
    headers = _one(synth, "AWS::CloudFront::ResponseHeadersPolicy")["ResponseHeadersPolicyConfig"]
    security = headers["SecurityHeadersConfig"]
    csp = json.dumps(security["ContentSecurityPolicy"]["ContentSecurityPolicy"])
    for directive in (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
    ):
        assert directive in csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert security["FrameOptions"]["FrameOption"] == "DENY"
    assert security["ContentTypeOptions"]["Override"] is True
    assert security["StrictTransportSecurity"]["AccessControlMaxAgeSec"] == 365 * 24 * 3600


def test_the_console_signs_in_by_authorization_code_on_the_pools_own_domain(synth: Synth) -> None:
    clients = {
        c["Properties"]["ClientName"]: c["Properties"]
        for c in synth.resources("AWS::Cognito::UserPoolClient").values()
    }
    console = clients["remote-batch-console"]
    assert console["GenerateSecret"] is False  # a public client: the browser holds no secret, PKCE instead
    assert console["AllowedOAuthFlows"] == ["code"]
    assert console["AllowedOAuthFlowsUserPoolClient"] is True
    assert set(console["AllowedOAuthScopes"]) == {"openid", "email", "profile"}
    assert console["SupportedIdentityProviders"] == ["COGNITO"]
    (callback,) = console["CallbackURLs"]
    assert console["LogoutURLs"] == [callback]
    rendered = json.dumps(callback)
    assert rendered.endswith('/console/"]]}') and "DomainName" in rendered
    # The SDK's client keeps its flows and has no OAuth.
    assert "AllowedOAuthFlows" not in clients["remote-batch-sdk"]
    domain = _one(synth, "AWS::Cognito::UserPoolDomain")
    assert "remote-batch-dev-" in json.dumps(domain["Domain"])


def test_the_console_url_is_an_output(synth: Synth) -> None:
    outputs = synth.template_json["Outputs"]
    assert outputs["ConsoleUrl"]["Value"]["Fn::Join"][1][-1] == "/console/"


@pytest.mark.parametrize(
    ("uri", "served"),
    [
        ("/console", "/console/index.html"),
        ("/console/", "/console/index.html"),
        ("/console/jobs/job-1", "/console/index.html"),
        ("/console/assets/app.js", "/console/assets/app.js"),
        ("/console/config.json", "/console/config.json"),
    ],
)
def test_folders_and_app_pages_are_answered_with_the_index(uri: str, served: str, tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node is not None
    script = tmp_path / "rewrite.js"
    script.write_text(
        _INDEX_REWRITE + f"\nconsole.log(handler({{request: {{uri: {json.dumps(uri)}}}}}).uri);\n"
    )
    ran = subprocess.run([node, str(script)], capture_output=True, text=True, timeout=30, check=True)
    assert ran.stdout.strip() == served


def test_a_bad_sign_in_domain_prefix_is_refused_naming_the_key() -> None:
    context = {
        "homeRegion": "us-east-1",
        "geoZoneRegions": {"UnitedStates": "us-east-1"},
        "availabilityZones": {"us-east-1": ["us-east-1a"]},
    }
    for bad in ("Remote", "aws-console", "-x", "x" * 64, "my_console"):
        with pytest.raises(ConfigError, match="consoleDomainPrefix"):
            DeploymentConfig.from_context({**context, "consoleDomainPrefix": bad}.get)
    assert DeploymentConfig.from_context(
        {**context, "consoleDomainPrefix": "my-console-1"}.get
    ).console_domain_prefix == ("my-console-1")
