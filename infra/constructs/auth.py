"""The Cognito user pool whose ID tokens the API accepts (docs/http-api.md: the account id is the ``sub``
claim)."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_cognito as cognito
from constructs import Construct

from infra import constants

ADMIN_GROUP = "admin"


class Auth(Construct):
    """Users, the ``admin`` group, and the app client the SDK and CLI sign in with.

    Accounts are created by an administrator (no self sign-up): credits are granted, not bought here.

    Attributes
    ----------
    user_pool : cognito.UserPool
    client : cognito.UserPoolClient
        Public client (no secret): SRP, password (``aws cognito-idp initiate-auth``) and refresh-token
        flows; no OAuth grants (the web console's client, ``infra.constructs.console``, has those).
    admin_group : cognito.UserPoolGroup
        Members get the ``admin`` role (docs/http-api.md "Admin").
    """

    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        self.user_pool = self._build_user_pool()
        self.client = self._build_client(self.user_pool)
        self.admin_group = self._build_admin_group(self.user_pool)

    def _build_user_pool(self) -> cognito.UserPool:
        return cognito.UserPool(
            self,
            "UserPool",
            self_sign_up_enabled=False,
            sign_in_aliases=cognito.SignInAliases(email=True),
            auto_verify=cognito.AutoVerifiedAttrs(email=True),
            account_recovery=cognito.AccountRecovery.EMAIL_ONLY,
            mfa=cognito.Mfa.OPTIONAL,
            mfa_second_factor=cognito.MfaSecondFactor(otp=True, sms=False),
            password_policy=cognito.PasswordPolicy(
                min_length=12,
                require_lowercase=True,
                require_uppercase=True,
                require_digits=True,
                require_symbols=True,
                temp_password_validity=Duration.days(3),
            ),
            feature_plan=cognito.FeaturePlan.ESSENTIALS,
            deletion_protection=True,
            removal_policy=RemovalPolicy.RETAIN,
        )

    def _build_client(self, user_pool: cognito.UserPool) -> cognito.UserPoolClient:
        return user_pool.add_client(
            "SdkClient",
            user_pool_client_name=f"{constants.SERVICE_NAME}-sdk",
            generate_secret=False,
            # SRP for SDKs; USER_PASSWORD_AUTH so an operator or a script can get a token with the
            # AWS CLI (`initiate-auth`), the password going to Cognito over TLS only.
            auth_flows=cognito.AuthFlow(user_srp=True, user_password=True),
            # No OAuth: CDK's default would allow the implicit and code grants to https://example.com on
            # the pool's sign-in domain (the console has a client of its own for that).
            disable_o_auth=True,
            prevent_user_existence_errors=True,
        )

    def _build_admin_group(self, user_pool: cognito.UserPool) -> cognito.UserPoolGroup:
        return user_pool.add_group(
            "AdminGroup", group_name=ADMIN_GROUP, description="Administrators: may grant credits"
        )
