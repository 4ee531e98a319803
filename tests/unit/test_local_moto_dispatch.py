"""The remembering dispatcher finds the same moto app as moto's own lookup, and leaves to moto the
requests whose backend does not follow from their credential scope."""

from __future__ import annotations

from typing import Any

import pytest
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

from remote_batch_local.moto_dispatch import RememberingDispatcher, backend_key


def _signed(service: str, region: str = "us-east-1", **extra: Any) -> dict[str, Any]:
    scope = f"AKIDEXAMPLE/20261201/{region}/{service}/aws4_request"
    return {
        "PATH_INFO": "/",
        "HTTP_HOST": "127.0.0.1:5000",
        "HTTP_AUTHORIZATION": f"AWS4-HMAC-SHA256 Credential={scope}, SignedHeaders=host, Signature=abc",
        **extra,
    }


DYNAMODB = _signed("dynamodb", HTTP_X_AMZ_TARGET="DynamoDB_20120810.GetItem")
SNS = _signed("sns")
S3 = _signed("s3", PATH_INFO="/bucket/key")


@pytest.mark.parametrize(
    ("environ", "key"),
    [
        (DYNAMODB, ("dynamodb", "us-east-1", "DynamoDB_20120810")),
        (SNS, ("sns", "us-east-1", "")),
        (S3, ("s3", "us-east-1", "")),
        (_signed("s3", PATH_INFO="/v20180820/accesspoint"), None),  # S3 Control
        (_signed("s3", HTTP_HOST="123.s3-control.us-east-1.amazonaws.com"), None),
        (_signed("execute-api"), None),  # not a service the local stack calls
        ({"PATH_INFO": "/moto-api/reset"}, None),
        ({"PATH_INFO": "/", "QUERY_STRING": "Action=ListTopics"}, None),  # unsigned
        ({"PATH_INFO": "/", "HTTP_AUTHORIZATION": "AWS4-HMAC-SHA256 garbage"}, None),
    ],
)
def test_backend_key(environ: dict[str, Any], key: tuple[str, str, str] | None) -> None:
    assert backend_key(environ) == key


def test_the_remembered_app_is_the_one_moto_finds_and_is_looked_up_once() -> None:
    plain = DomainDispatcherApplication(create_backend_app)
    remembering = RememberingDispatcher(create_backend_app)
    lookups: list[str] = []
    original = DomainDispatcherApplication.get_application

    def counted(self: Any, environ: dict[str, Any]) -> Any:
        lookups.append(str(environ.get("PATH_INFO")))
        return original(self, environ)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(DomainDispatcherApplication, "get_application", counted)
        for environ in (DYNAMODB, SNS, S3):
            first = remembering.get_application(dict(environ))
            again = remembering.get_application(dict(environ))
            assert first is again
            assert first.name == plain.get_application(dict(environ)).name
    # Once per key through moto's lookup in the remembering one, plus the plain one's three.
    assert len(lookups) == 6
