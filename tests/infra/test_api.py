"""API Gateway: Cognito on every method but GET /health, docs/http-api.md's error body on gateway errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.infra.conftest import Synth


def _path_of(synth: Synth, resource_id: dict[str, Any]) -> str:
    """The full path of an AWS::ApiGateway::Resource (or "/" for the root)."""
    resources = synth.template_json["Resources"]
    parts: list[str] = []
    while "Ref" in resource_id:
        resource = resources[resource_id["Ref"]]["Properties"]
        parts.insert(0, resource["PathPart"])
        resource_id = resource["ParentId"]
    return "/" + "/".join(parts)


def _methods(synth: Synth) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (method["Properties"]["HttpMethod"], _path_of(synth, method["Properties"]["ResourceId"])): method[
            "Properties"
        ]
        for method in synth.resources("AWS::ApiGateway::Method").values()
    }


def test_routes_are_health_and_proxy(synth: Synth) -> None:
    assert set(_methods(synth)) == {("GET", "/health"), ("ANY", "/{proxy+}")}


def test_every_method_but_health_uses_the_cognito_authorizer(synth: Synth) -> None:
    authorizer = synth.logical_id(synth.stack.api.authorizer)

    for (verb, path), method in _methods(synth).items():
        if (verb, path) == ("GET", "/health"):
            assert method["AuthorizationType"] == "NONE"
        else:
            assert method["AuthorizationType"] == "COGNITO_USER_POOLS", path
            assert method["AuthorizerId"] == {"Ref": authorizer}, path


def test_authorizer_trusts_the_user_pool(synth: Synth) -> None:
    synth.template.has_resource_properties(
        "AWS::ApiGateway::Authorizer",
        {
            "Type": "COGNITO_USER_POOLS",
            "IdentitySource": "method.request.header.Authorization",
            "ProviderARNs": [{"Fn::GetAtt": [synth.logical_id(synth.stack.auth.user_pool), "Arn"]}],
        },
    )


def test_admin_group_exists(synth: Synth) -> None:
    synth.template.has_resource_properties("AWS::Cognito::UserPoolGroup", {"GroupName": "admin"})


def test_client_signs_in_with_srp_or_password_without_a_secret(synth: Synth) -> None:
    client = synth.template_json["Resources"][synth.logical_id(synth.stack.auth.client)]

    assert client["Properties"]["GenerateSecret"] is False
    assert set(client["Properties"]["ExplicitAuthFlows"]) == {
        "ALLOW_USER_SRP_AUTH",
        "ALLOW_USER_PASSWORD_AUTH",
        "ALLOW_REFRESH_TOKEN_AUTH",
    }
    assert "AllowedOAuthFlows" not in client["Properties"]  # no grant on the sign-in domain


@pytest.mark.parametrize(
    ("response_type", "status", "code"),
    [
        ("UNAUTHORIZED", "401", "Unauthorized"),
        ("ACCESS_DENIED", "403", "Forbidden"),
        ("THROTTLED", "429", "Throttled"),
        ("DEFAULT_4XX", None, "ValidationError"),
        ("DEFAULT_5XX", None, "InternalError"),
    ],
)
def test_gateway_errors_use_the_api_error_body(
    synth: Synth, response_type: str, status: str | None, code: str
) -> None:
    (response,) = [
        r["Properties"]
        for r in synth.resources("AWS::ApiGateway::GatewayResponse").values()
        if r["Properties"]["ResponseType"] == response_type
    ]
    # API Gateway substitutes $context.error.messageString with a quoted JSON string.
    body = json.loads(
        response["ResponseTemplates"]["application/json"].replace(
            "$context.error.messageString", '"Invalid request body"'
        )
    )

    assert response.get("StatusCode") == status
    assert body == {"error": {"code": code, "message": body["error"]["message"], "field": None}}
    assert body["error"]["message"]


def test_stage_logs_access_and_throttles(synth: Synth) -> None:
    (stage,) = synth.resources("AWS::ApiGateway::Stage").values()
    props = stage["Properties"]

    destination = json.dumps(props["AccessLogSetting"]["DestinationArn"])
    assert json.dumps({"Ref": synth.logical_id(synth.stack.api.access_log_group)}) in destination
    assert props["AccessLogSetting"]["Format"]
    assert props["TracingEnabled"] is True
    (settings,) = props["MethodSettings"]
    assert settings["ThrottlingRateLimit"] > 0
    assert settings["ThrottlingBurstLimit"] > 0
    assert settings["LoggingLevel"] == "ERROR"


def test_a_waf_web_acl_on_the_stage_answers_413_to_bodies_over_5_mib(synth: Synth) -> None:
    import re

    from functions.domain.limits import BODY_TOO_LARGE_MESSAGE, MAX_BODY_BYTES
    from infra.constructs.api import CONTENT_LENGTH_OVER_LIMIT_REGEX

    acls = synth.resources("AWS::WAFv2::WebACL")
    assert len(acls) == 1
    ((acl_id, acl),) = acls.items()
    properties = acl["Properties"]
    assert properties["Scope"] == "REGIONAL"
    assert properties["DefaultAction"] == {"Allow": {}}
    body = json.loads(properties["CustomResponseBodies"]["PayloadTooLarge"]["Content"])
    assert body == {"error": {"code": "PayloadTooLarge", "message": BODY_TOO_LARGE_MESSAGE, "field": None}}
    rules = {rule["Name"]: rule for rule in properties["Rules"]}
    over = rules["BodyOverLimit"]
    assert over["Action"]["Block"]["CustomResponse"] == {
        "ResponseCode": 413,
        "CustomResponseBodyKey": "PayloadTooLarge",
    }
    statement = over["Statement"]["RegexMatchStatement"]
    assert statement["FieldToMatch"] == {"SingleHeader": {"Name": "content-length"}}
    chunked = rules["ChunkedBody"]
    assert chunked["Action"]["Block"]["CustomResponse"]["ResponseCode"] == 413
    assert chunked["Statement"]["ByteMatchStatement"]["FieldToMatch"] == {
        "SingleHeader": {"Name": "transfer-encoding"}
    }
    associations = synth.resources("AWS::WAFv2::WebACLAssociation")
    assert [a["Properties"]["WebACLArn"] for a in associations.values()] == [{"Fn::GetAtt": [acl_id, "Arn"]}]
    stage = synth.logical_id(synth.stack.api.rest_api.deployment_stage)
    arn = json.dumps(next(iter(associations.values()))["Properties"]["ResourceArn"])
    assert f'"/stages/", {{"Ref": "{stage}"}}' in arn

    # The regex is exactly "a decimal number over the limit".
    pattern = re.compile(statement["RegexString"])
    assert statement["RegexString"] == CONTENT_LENGTH_OVER_LIMIT_REGEX
    samples = {0, 1, 7_000_000, 10**7, 10**12, *range(MAX_BODY_BYTES - 1200, MAX_BODY_BYTES + 1200)}
    samples |= {int(str(MAX_BODY_BYTES)[:i] + "9" * (7 - i)) for i in range(8)}
    samples |= {int(str(MAX_BODY_BYTES)[:i] + "0" * (7 - i)) for i in range(1, 8)}
    for value in sorted(samples):
        assert bool(pattern.fullmatch(str(value))) == (value > MAX_BODY_BYTES), value
    assert pattern.fullmatch("0005242881") and not pattern.fullmatch("05242880")


def test_no_binary_media_types(synth: Synth) -> None:
    (rest_api,) = synth.resources("AWS::ApiGateway::RestApi").values()
    assert "BinaryMediaTypes" not in rest_api["Properties"]


def test_the_web_acl_limits_each_callers_rate_with_429_rate_limited_and_retry_after(synth: Synth) -> None:
    from functions.domain.rate_limits import ACCOUNT_REQUESTS_PER_SECOND, RATE_LIMITED_MESSAGE

    ((_, acl),) = synth.resources("AWS::WAFv2::WebACL").items()
    properties = acl["Properties"]
    rule = {r["Name"]: r for r in properties["Rules"]}["RequestsPerCaller"]
    statement = rule["Statement"]["RateBasedStatement"]
    assert statement["EvaluationWindowSec"] == 60
    assert statement["Limit"] == ACCOUNT_REQUESTS_PER_SECOND * 60
    assert statement["AggregateKeyType"] == "CUSTOM_KEYS"
    assert statement["CustomKeys"] == [
        {"Header": {"Name": "authorization", "TextTransformations": [{"Priority": 0, "Type": "NONE"}]}}
    ]
    response = rule["Action"]["Block"]["CustomResponse"]
    assert response["ResponseCode"] == 429
    assert response["ResponseHeaders"] == [{"Name": "Retry-After", "Value": "30"}]
    body = json.loads(properties["CustomResponseBodies"][response["CustomResponseBodyKey"]]["Content"])
    assert body == {"error": {"code": "RateLimited", "message": RATE_LIMITED_MESSAGE, "field": None}}


def test_the_stage_throttle_says_when_to_retry(synth: Synth) -> None:
    (throttled,) = [
        r["Properties"]
        for r in synth.resources("AWS::ApiGateway::GatewayResponse").values()
        if r["Properties"]["ResponseType"] == "THROTTLED"
    ]
    assert throttled["ResponseParameters"] == {"gatewayresponse.header.Retry-After": "'1'"}
