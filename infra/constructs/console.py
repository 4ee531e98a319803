"""The web console in the cloud: a private S3 bucket behind CloudFront, signing in with Cognito.

One CloudFront distribution is the console's origin and the API's: ``/console/*`` comes from the
console bucket (private, read by CloudFront alone through an origin access control), every other path
goes to the REST API's stage, uncached, with the viewer's headers but ``Host`` (so the Cognito
authorizer sees ``Authorization``). The console therefore calls the API on its own origin, as it does
on the local stack (docs/local-stack.md), and needs no CORS.

Sign-in is Cognito's managed login on the user pool's domain: the console client is public (no
secret), authorization code grant only, and the console sends a PKCE challenge (RFC 7636); its callback
and sign-out URL is ``https://<distribution>/console/``. The console reads where to sign in from
``/console/config.json``, which ``make deploy-console`` (``infra/console_upload.py``) writes next to
the built files it uploads, from the stack's outputs, with the operator's own credentials: the stack
holds no deploy-time function (CDK's BucketDeployment would need ``s3:GetObject*``/``s3:List*``/
``s3:DeleteObject*`` wildcards on the bucket)::

    {"signIn": "cognito", "authority": "https://<prefix>.auth.<region>.amazoncognito.com",
     "clientId": "...", "redirectUri": "https://<distribution>/console/", "scopes": [...]}

Every console response carries a strict Content-Security-Policy (scripts and styles from the
console's own origin only, no inline script, no frames) and the other security headers.

A CloudFront Function on the console's behaviour answers a folder (``/console/``) and a path without
a file extension (a page of the single-page app) with ``/console/index.html``.
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cloudfront as cloudfront
from aws_cdk import aws_cloudfront_origins as origins
from aws_cdk import aws_cognito as cognito
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra import constants

#: Where the console is served (the local stack serves it at the same path).
CONSOLE_PATH = "/console/"
#: The OAuth scopes the console asks for: the ID token's claims (``sub``, ``email``, groups).
CONSOLE_SCOPES = (cognito.OAuthScope.OPENID, cognito.OAuthScope.EMAIL, cognito.OAuthScope.PROFILE)
#: The scope names as the console's config.json lists them.
CONSOLE_SCOPE_NAMES = ("openid", "email", "profile")

# A folder or an extensionless path under /console/ is a page of the single-page app.
_INDEX_REWRITE = """\
function handler(event) {
  var request = event.request;
  var uri = request.uri;
  if (uri === '/console' || uri.endsWith('/') || uri.split('/').pop().indexOf('.') === -1) {
    request.uri = '/console/index.html';
  }
  return request;
}
"""


def content_security_policy(sign_in_origin: str) -> str:
    """The console's CSP: its own origin for scripts, styles, images and API calls, plus the token
    endpoint of ``sign_in_origin`` (the Cognito domain); no inline script, no plugins, no framing."""
    return "; ".join(
        (
            "default-src 'none'",
            "script-src 'self'",
            "style-src 'self'",
            "img-src 'self' data: blob:",
            "font-src 'self'",
            f"connect-src 'self' {sign_in_origin}",
            "base-uri 'none'",
            f"form-action 'self' {sign_in_origin}",
            "frame-ancestors 'none'",
            "object-src 'none'",
        )
    )


class Console(Construct):
    """The console bucket, the CloudFront distribution and the Cognito sign-in.

    Parameters
    ----------
    rest_api : apigw.RestApi
        The API the distribution's default behaviour forwards to.
    user_pool : cognito.UserPool
        The pool whose ID tokens the API accepts; the console signs in through its domain.
    domain_prefix : str
        The Cognito domain's prefix (``<prefix>.auth.<region>.amazoncognito.com``), unique in the region.

    Attributes
    ----------
    bucket, log_bucket : s3.Bucket
        The console's files under ``console/`` (private); CloudFront's and the console bucket's
        access logs.
    distribution : cloudfront.Distribution
    client : cognito.UserPoolClient
        The console's public app client (authorization code grant with PKCE).
    domain : cognito.UserPoolDomain
    url : str
        ``https://<distribution domain>/console/``.
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        rest_api: apigw.RestApi,
        user_pool: cognito.UserPool,
        domain_prefix: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.log_bucket = self._build_log_bucket()
        self.bucket = self._build_bucket(self.log_bucket)
        self.domain = user_pool.add_domain(
            "SignIn", cognito_domain=cognito.CognitoDomainOptions(domain_prefix=domain_prefix)
        )
        sign_in_origin = self.domain.base_url()
        self.distribution = self._build_distribution(rest_api, sign_in_origin)
        self.url = f"https://{self.distribution.distribution_domain_name}{CONSOLE_PATH}"
        self.client = user_pool.add_client(
            "ConsoleClient",
            user_pool_client_name=f"{constants.SERVICE_NAME}-console",
            generate_secret=False,
            auth_flows=cognito.AuthFlow(user_srp=True),
            o_auth=cognito.OAuthSettings(
                flows=cognito.OAuthFlows(authorization_code_grant=True),
                scopes=list(CONSOLE_SCOPES),
                callback_urls=[self.url],
                logout_urls=[self.url],
            ),
            supported_identity_providers=[cognito.UserPoolClientIdentityProvider.COGNITO],
            prevent_user_existence_errors=True,
            id_token_validity=Duration.hours(1),
            access_token_validity=Duration.hours(1),
        )

    def _build_log_bucket(self) -> s3.Bucket:
        # CloudFront's standard logs are delivered with an ACL: the log bucket keeps ACLs enabled
        # (object writer), every other bucket of the app enforces bucket-owner ownership.
        return s3.Bucket(
            self,
            "LogBucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.OBJECT_WRITER,
            enforce_ssl=True,
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireLogs", expiration=Duration.days(constants.ACCESS_LOG_RETENTION_DAYS)
                )
            ],
            removal_policy=RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
        )

    def _build_bucket(self, log_bucket: s3.Bucket) -> s3.Bucket:
        return s3.Bucket(
            self,
            "Bucket",
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            enforce_ssl=True,
            versioned=True,
            server_access_logs_bucket=log_bucket,
            server_access_logs_prefix="console-bucket/",
            lifecycle_rules=[
                s3.LifecycleRule(
                    id="ExpireReplacedAssets",
                    noncurrent_version_expiration=Duration.days(constants.ACCESS_LOG_RETENTION_DAYS),
                )
            ],
            # Kept when the stack is deleted (CloudFormation cannot delete a bucket that holds files);
            # it has no fixed name, so a new deploy makes a new one.
            removal_policy=RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE,
        )

    def _build_distribution(self, rest_api: apigw.RestApi, sign_in_origin: str) -> cloudfront.Distribution:
        headers = cloudfront.ResponseHeadersPolicy(
            self,
            "Headers",
            comment=f"{Stack.of(self).stack_name} console: CSP and security headers",
            security_headers_behavior=cloudfront.ResponseSecurityHeadersBehavior(
                content_security_policy=cloudfront.ResponseHeadersContentSecurityPolicy(
                    content_security_policy=content_security_policy(sign_in_origin), override=True
                ),
                content_type_options=cloudfront.ResponseHeadersContentTypeOptions(override=True),
                frame_options=cloudfront.ResponseHeadersFrameOptions(
                    frame_option=cloudfront.HeadersFrameOption.DENY, override=True
                ),
                referrer_policy=cloudfront.ResponseHeadersReferrerPolicy(
                    referrer_policy=cloudfront.HeadersReferrerPolicy.NO_REFERRER, override=True
                ),
                strict_transport_security=cloudfront.ResponseHeadersStrictTransportSecurity(
                    access_control_max_age=Duration.days(365), include_subdomains=True, override=True
                ),
            ),
        )
        pages = cloudfront.Function(
            self,
            "Pages",
            code=cloudfront.FunctionCode.from_inline(_INDEX_REWRITE),
            runtime=cloudfront.FunctionRuntime.JS_2_0,
            comment="console: folders and app pages answer with index.html",
        )
        console = cloudfront.BehaviorOptions(
            origin=origins.S3BucketOrigin.with_origin_access_control(self.bucket),
            viewer_protocol_policy=cloudfront.ViewerProtocolPolicy.REDIRECT_TO_HTTPS,
            allowed_methods=cloudfront.AllowedMethods.ALLOW_GET_HEAD,
            cache_policy=cloudfront.CachePolicy.CACHING_OPTIMIZED,
            response_headers_policy=headers,
            function_associations=[
                cloudfront.FunctionAssociation(
                    function=pages, event_type=cloudfront.FunctionEventType.VIEWER_REQUEST
                )
            ],
        )
        return cloudfront.Distribution(
            self,
            "Distribution",
            comment=f"{Stack.of(self).stack_name}: the console ({CONSOLE_PATH}) and the API",
            default_behavior=cloudfront.BehaviorOptions(
                origin=origins.RestApiOrigin(rest_api),
                viewer_protocol_policy=cloudfront.ViewerProtocolPolicy.HTTPS_ONLY,
                allowed_methods=cloudfront.AllowedMethods.ALLOW_ALL,
                cache_policy=cloudfront.CachePolicy.CACHING_DISABLED,
                origin_request_policy=cloudfront.OriginRequestPolicy.ALL_VIEWER_EXCEPT_HOST_HEADER,
            ),
            additional_behaviors={f"{CONSOLE_PATH}*": console, CONSOLE_PATH.rstrip("/"): console},
            http_version=cloudfront.HttpVersion.HTTP2_AND_3,
            price_class=cloudfront.PriceClass.PRICE_CLASS_100,
            enable_logging=True,
            log_bucket=self.log_bucket,
            log_file_prefix="cloudfront/",
        )
