"""The REST API: API Gateway in front of the api Lambda, with a Cognito authorizer.

Routing lives in the Lambda (Powertools resolver); API Gateway has one ``{proxy+}`` resource that
requires a Cognito ID token, plus ``GET /health`` without auth. Errors that API Gateway answers
itself (bad token, throttling, its own 5XX) use docs/http-api.md's error body through gateway responses.

A WAF web ACL on the stage answers docs/http-api.md's 413 to bodies the api Lambda could not even receive:
Lambda's invoke payload is at most 6 MB, so a 6–10 MB body (under API Gateway's own 10 MiB) would
otherwise fail the invoke and reach the client as a 502. The rule reads the ``Content-Length``
header (WAF sees only the first 8–64 KB of a body, but every header), and a chunked body, whose size
no header tells, is refused with the same 413 asking for a Content-Length.

The same web ACL limits each caller's request rate: a rate-based rule aggregated on the
``Authorization`` header (the caller's Cognito ID token) answers 429 ``RateLimited`` with
``Retry-After`` past ``ACCOUNT_REQUESTS_PER_SECOND`` a second over a minute
(``functions/domain/rate_limits.py`` says why this and not API Gateway usage plans). The stage's own
throttle stays the service-wide ceiling (429 ``Throttled``, ``Retry-After: 1``).
"""

from __future__ import annotations

import json

from aws_cdk import RemovalPolicy
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cognito as cognito
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_wafv2 as wafv2
from constructs import Construct

from functions.domain.limits import BODY_TOO_LARGE_MESSAGE, BODY_WITHOUT_LENGTH_MESSAGE
from functions.domain.rate_limits import (
    ACCOUNT_REQUESTS_PER_SECOND,
    RATE_LIMITED_CODE,
    RATE_LIMITED_MESSAGE,
    WAF_EVALUATION_WINDOW_SECONDS,
    WAF_RETRY_AFTER_SECONDS,
)
from infra import constants

_JSON = "application/json"


def error_body(code: str, message: str) -> str:
    """docs/http-api.md's error body as a mapping template; ``message`` may be a VTL expression (already
    quoted)."""
    return f'{{"error": {{"code": "{code}", "message": {message}, "field": null}}}}'


# (response type, status code or None to keep API Gateway's, docs/http-api.md code, message as a JSON string).
_GATEWAY_RESPONSES: tuple[tuple[apigw.ResponseType, str | None, str, str], ...] = (
    (
        apigw.ResponseType.UNAUTHORIZED,
        "401",
        "Unauthorized",
        '"Missing, malformed, expired or unknown token: sign in again and send it as Authorization: Bearer."',
    ),
    (
        apigw.ResponseType.ACCESS_DENIED,
        "403",
        "Forbidden",
        '"Your role does not allow this request."',
    ),
    # The only path {proxy+} does not cover is "/": answer it like any unknown route.
    (
        apigw.ResponseType.MISSING_AUTHENTICATION_TOKEN,
        "404",
        "NotFound",
        '"No such route: see the API reference."',
    ),
    (
        apigw.ResponseType.REQUEST_TOO_LARGE,
        "413",
        "PayloadTooLarge",
        '"The request body is too large: upload inputs with an upload URL instead."',
    ),
    (
        apigw.ResponseType.THROTTLED,
        "429",
        "Throttled",
        '"Too many requests: retry after a short wait."',
    ),
    (apigw.ResponseType.DEFAULT_4_XX, None, "ValidationError", "$context.error.messageString"),
    (
        apigw.ResponseType.DEFAULT_5_XX,
        None,
        "InternalError",
        '"The service failed to answer: retry later."',
    ),
)


# A decimal Content-Length over functions.domain.limits.MAX_BODY_BYTES (5,242,880): digit by digit
# from the limit up, and any number of 8 digits or more (tests/infra/test_api.py checks the boundaries).
CONTENT_LENGTH_OVER_LIMIT_REGEX = (
    r"^0*([1-9]\d{7,}|[6-9]\d{6}|5[3-9]\d{5}|52[5-9]\d{4}|524[3-9]\d{3}|5242[9]\d{2}|52428[9]\d|524288[1-9])$"
)


class Api(Construct):
    """The public HTTP API.

    Parameters
    ----------
    handler : lambda_.IFunction
        The api Lambda: every route.
    user_pool : cognito.IUserPool
        Whose ID tokens authorize requests.

    Attributes
    ----------
    rest_api : apigw.RestApi
    authorizer : apigw.CognitoUserPoolsAuthorizer
    access_log_group : logs.LogGroup
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: lambda_.IFunction,
        user_pool: cognito.IUserPool,
    ) -> None:
        super().__init__(scope, construct_id)
        self.access_log_group = self._build_access_log_group()
        self.rest_api = self._build_rest_api(self.access_log_group)
        self.authorizer = self._build_authorizer(user_pool)
        self._build_routes(handler)
        self._build_gateway_responses()
        self.web_acl = self._build_body_size_guard()

    @property
    def url(self) -> str:
        """The stage's invoke URL (``https://…/v1/``)."""
        return self.rest_api.url

    def _build_access_log_group(self) -> logs.LogGroup:
        return logs.LogGroup(
            self,
            "AccessLogGroup",
            retention=logs.RetentionDays.ONE_MONTH,
            removal_policy=RemovalPolicy.DESTROY,
        )

    def _build_rest_api(self, access_log_group: logs.ILogGroup) -> apigw.RestApi:
        return apigw.RestApi(
            self,
            "RestApi",
            rest_api_name=constants.SERVICE_NAME,
            description=f"{constants.SERVICE_NAME} HTTP API, version 1 (docs/http-api.md)",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            # No binary media types: no route answers bytes (preview.png is a 303 to S3), so no
            # response depends on the client's Accept header being exactly a binary type.
            cloud_watch_role=True,
            cloud_watch_role_removal_policy=RemovalPolicy.RETAIN,
            deploy_options=apigw.StageOptions(
                stage_name=constants.API_STAGE_NAME,
                access_log_destination=apigw.LogGroupLogDestination(access_log_group),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=True,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=True,
                ),
                logging_level=apigw.MethodLoggingLevel.ERROR,
                metrics_enabled=True,
                tracing_enabled=True,
                throttling_rate_limit=constants.API_THROTTLE_RATE_PER_SECOND,
                throttling_burst_limit=constants.API_THROTTLE_BURST,
            ),
        )

    def _build_authorizer(self, user_pool: cognito.IUserPool) -> apigw.CognitoUserPoolsAuthorizer:
        return apigw.CognitoUserPoolsAuthorizer(
            self,
            "CognitoAuthorizer",
            cognito_user_pools=[user_pool],
            identity_source=apigw.IdentitySource.header("Authorization"),
        )

    def _build_routes(self, handler: lambda_.IFunction) -> None:
        integration = apigw.LambdaIntegration(handler, proxy=True)
        self.health_method = self.rest_api.root.add_resource(constants.HEALTH_PATH).add_method(
            "GET", integration, authorization_type=apigw.AuthorizationType.NONE
        )
        # A plain {proxy+} resource, not add_proxy(): add_proxy also puts an ANY method on "/" that
        # does not inherit the authorizer. "/" has no method, so API Gateway answers it 404 (below).
        self.proxy = self.rest_api.root.add_resource("{proxy+}")
        self.proxy_method = self.proxy.add_method(
            "ANY",
            integration,
            authorizer=self.authorizer,
            authorization_type=apigw.AuthorizationType.COGNITO,
        )

    def _build_gateway_responses(self) -> None:
        for response_type, status_code, code, message in _GATEWAY_RESPONSES:
            # The stage throttle is a token bucket refilled every second: retry after 1 s.
            throttled = response_type.response_type == apigw.ResponseType.THROTTLED.response_type
            headers = {"Retry-After": "'1'"} if throttled else None
            self.rest_api.add_gateway_response(
                f"{code}{status_code or 'Default'}Response",
                type=response_type,
                status_code=status_code,
                response_headers=headers,
                templates={_JSON: error_body(code, message)},
            )

    def _build_body_size_guard(self) -> wafv2.CfnWebACL:
        """The regional web ACL on the stage: 413 with docs/http-api.md's body for a Content-Length over 5 MiB
        and for a chunked body; everything else goes on to API Gateway."""
        bodies = {
            "PayloadTooLarge": error_body("PayloadTooLarge", json.dumps(BODY_TOO_LARGE_MESSAGE)),
            "LengthRequired": error_body("PayloadTooLarge", json.dumps(BODY_WITHOUT_LENGTH_MESSAGE)),
            RATE_LIMITED_CODE: error_body(RATE_LIMITED_CODE, json.dumps(RATE_LIMITED_MESSAGE)),
        }
        rules = [
            self._block_413(
                "BodyOverLimit",
                0,
                "PayloadTooLarge",
                wafv2.CfnWebACL.StatementProperty(
                    regex_match_statement=wafv2.CfnWebACL.RegexMatchStatementProperty(
                        regex_string=CONTENT_LENGTH_OVER_LIMIT_REGEX,
                        field_to_match=wafv2.CfnWebACL.FieldToMatchProperty(
                            single_header={"Name": "content-length"}
                        ),
                        text_transformations=[
                            wafv2.CfnWebACL.TextTransformationProperty(priority=0, type="NONE")
                        ],
                    )
                ),
            ),
            self._block_413(
                "ChunkedBody",
                1,
                "LengthRequired",
                wafv2.CfnWebACL.StatementProperty(
                    byte_match_statement=wafv2.CfnWebACL.ByteMatchStatementProperty(
                        search_string="chunked",
                        positional_constraint="CONTAINS",
                        field_to_match=wafv2.CfnWebACL.FieldToMatchProperty(
                            single_header={"Name": "transfer-encoding"}
                        ),
                        text_transformations=[
                            wafv2.CfnWebACL.TextTransformationProperty(priority=0, type="LOWERCASE")
                        ],
                    )
                ),
            ),
            self._rate_limit_rule(2),
        ]
        web_acl = wafv2.CfnWebACL(
            self,
            "BodySizeGuard",
            scope="REGIONAL",
            description=(
                f"{constants.SERVICE_NAME} - 413 PayloadTooLarge for request bodies over 5 MiB, "
                "429 RateLimited per caller"
            ),
            default_action=wafv2.CfnWebACL.DefaultActionProperty(allow={}),
            custom_response_bodies={
                key: wafv2.CfnWebACL.CustomResponseBodyProperty(content_type="APPLICATION_JSON", content=body)
                for key, body in bodies.items()
            },
            rules=rules,
            visibility_config=wafv2.CfnWebACL.VisibilityConfigProperty(
                cloud_watch_metrics_enabled=True,
                metric_name=f"{constants.SERVICE_NAME}-body-size-guard",
                sampled_requests_enabled=True,
            ),
        )
        wafv2.CfnWebACLAssociation(
            self,
            "BodySizeGuardAssociation",
            resource_arn=self.rest_api.deployment_stage.stage_arn,
            web_acl_arn=web_acl.attr_arn,
        )
        return web_acl

    @staticmethod
    def _rate_limit_rule(priority: int) -> wafv2.CfnWebACL.RuleProperty:
        """429 ``RateLimited`` with ``Retry-After`` to a caller (its ``Authorization`` header: one
        Cognito ID token) past ``ACCOUNT_REQUESTS_PER_SECOND`` a second over the evaluation window.
        Requests without the header are not counted (API Gateway's authorizer refuses them)."""
        return wafv2.CfnWebACL.RuleProperty(
            name="RequestsPerCaller",
            priority=priority,
            statement=wafv2.CfnWebACL.StatementProperty(
                rate_based_statement=wafv2.CfnWebACL.RateBasedStatementProperty(
                    limit=ACCOUNT_REQUESTS_PER_SECOND * WAF_EVALUATION_WINDOW_SECONDS,
                    evaluation_window_sec=WAF_EVALUATION_WINDOW_SECONDS,
                    aggregate_key_type="CUSTOM_KEYS",
                    custom_keys=[
                        wafv2.CfnWebACL.RateBasedStatementCustomKeyProperty(
                            header=wafv2.CfnWebACL.RateLimitHeaderProperty(
                                name="authorization",
                                text_transformations=[
                                    wafv2.CfnWebACL.TextTransformationProperty(priority=0, type="NONE")
                                ],
                            )
                        )
                    ],
                )
            ),
            action=wafv2.CfnWebACL.RuleActionProperty(
                block=wafv2.CfnWebACL.BlockActionProperty(
                    custom_response=wafv2.CfnWebACL.CustomResponseProperty(
                        response_code=429,
                        custom_response_body_key=RATE_LIMITED_CODE,
                        response_headers=[
                            wafv2.CfnWebACL.CustomHTTPHeaderProperty(
                                name="Retry-After", value=str(WAF_RETRY_AFTER_SECONDS)
                            )
                        ],
                    )
                )
            ),
            visibility_config=wafv2.CfnWebACL.VisibilityConfigProperty(
                cloud_watch_metrics_enabled=True,
                metric_name=f"{constants.SERVICE_NAME}-RequestsPerCaller",
                sampled_requests_enabled=True,
            ),
        )

    @staticmethod
    def _block_413(
        name: str, priority: int, body_key: str, statement: wafv2.CfnWebACL.StatementProperty
    ) -> wafv2.CfnWebACL.RuleProperty:
        return wafv2.CfnWebACL.RuleProperty(
            name=name,
            priority=priority,
            statement=statement,
            action=wafv2.CfnWebACL.RuleActionProperty(
                block=wafv2.CfnWebACL.BlockActionProperty(
                    custom_response=wafv2.CfnWebACL.CustomResponseProperty(
                        response_code=413, custom_response_body_key=body_key
                    )
                )
            ),
            visibility_config=wafv2.CfnWebACL.VisibilityConfigProperty(
                cloud_watch_metrics_enabled=True,
                metric_name=f"{constants.SERVICE_NAME}-{name}",
                sampled_requests_enabled=True,
            ),
        )
