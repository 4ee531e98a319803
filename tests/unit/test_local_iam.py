"""The local stack's check of presigned URLs: botocore's own URLs pass, altered or expired ones do not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import boto3
import pytest
from botocore.config import Config
from botocore.credentials import Credentials

from remote_batch_local.iam import presigned_signature_valid

ADMIN = Credentials("AKIAADMINADMINADMIN0", "admin-secret")
HOST = "127.0.0.1:5000"


def _url(region: str, key: str, signature_version: str | None = None, expires: int = 900) -> str:
    s3 = boto3.client(
        "s3",
        region_name=region,
        endpoint_url=f"http://{HOST}",
        aws_access_key_id=ADMIN.access_key,
        aws_secret_access_key=ADMIN.secret_key,
        config=Config(signature_version=signature_version) if signature_version else None,
    )
    return str(s3.generate_presigned_url("get_object", Params={"Bucket": "b", "Key": key}, ExpiresIn=expires))


def _environ(url: str, method: str = "GET") -> dict[str, str]:
    """What werkzeug gives moto for a request of ``url``."""
    parts = urlsplit(url)
    return {
        "REQUEST_METHOD": method,
        "PATH_INFO": parts.path,
        "RAW_URI": f"{parts.path}?{parts.query}",
        "QUERY_STRING": parts.query,
        "HTTP_HOST": parts.netloc,
    }


@pytest.mark.parametrize(
    ("region", "version"), [("us-east-1", None), ("eu-central-1", None), ("us-east-1", "s3v4")]
)
@pytest.mark.parametrize("key", ["outputs/job-1/files/a.csv", "outputs/job-1/files/with space & ü.txt"])
def test_botocores_presigned_urls_pass_and_altered_ones_fail(region, version, key):
    url = _url(region, key, version)
    now = datetime.now(UTC)

    assert presigned_signature_valid(_environ(url), ADMIN, now)
    assert not presigned_signature_valid(_environ(url.replace("job-1", "job-2")), ADMIN, now)
    assert not presigned_signature_valid(_environ(url, method="PUT"), ADMIN, now)
    assert not presigned_signature_valid(_environ(url), Credentials(ADMIN.access_key, "other"), now)
    assert not presigned_signature_valid(_environ(url), ADMIN, now + timedelta(seconds=901))


def test_a_presigned_put_needs_the_signed_length_and_type():
    s3 = boto3.client(
        "s3",
        region_name="eu-central-1",
        endpoint_url=f"http://{HOST}",
        aws_access_key_id=ADMIN.access_key,
        aws_secret_access_key=ADMIN.secret_key,
    )
    url = s3.generate_presigned_url(
        "put_object",
        Params={"Bucket": "b", "Key": "inputs/u/payload", "ContentLength": 10, "ContentType": "text/plain"},
        ExpiresIn=900,
    )
    environ = {**_environ(url, method="PUT"), "CONTENT_LENGTH": "10", "CONTENT_TYPE": "text/plain"}
    now = datetime.now(UTC)

    assert presigned_signature_valid(environ, ADMIN, now)
    assert not presigned_signature_valid({**environ, "CONTENT_LENGTH": "11"}, ADMIN, now)
    assert not presigned_signature_valid({**environ, "CONTENT_TYPE": "text/html"}, ADMIN, now)
