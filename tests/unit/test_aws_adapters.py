"""The S3, SNS and CloudWatch Logs adapters at their boundary: the exact requests they send (botocore's
``Stubber`` checks each against the expected parameters and the service's own model), what they make
of each answer, and how each refusal becomes the domain's exception. Shapes: Amazon S3 API reference
(PutObject, GetObject, ListObjectsV2, DeleteObjects: at most 1000 keys), SNS Publish, CloudWatch Logs
GetLogEvents (``nextForwardToken`` repeats at the stream's end)."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qs, urlsplit

import boto3
import pytest
from botocore.config import Config
from botocore.response import StreamingBody
from botocore.stub import Stubber

from functions.adapters.logs import CloudWatchLogReader
from functions.adapters.s3 import DELETE_BATCH_SIZE, S3BlobStore
from functions.adapters.sns import SnsNotifier, email_topic_arn
from functions.bootstrap import S3_CONFIG
from functions.domain.errors import DeliveryRefused, DependencyFailed, PayloadTooLarge
from functions.ports import LogEvent, ObjectInfo, OutgoingNotification, StoredObject

BUCKET = "remote-batch-data-us"
KEY = "outputs/job-01JDXYZ0000000000000000000/result.json"
PREFIX = "arn:aws:sns:us-east-1:123456789012:remote-batch-dev-email-"
GROUP = "/aws/batch/job"
STREAM = "remote-batch-worker/default/3f1c9a52"


def make_client(service: str, config: Config | None = None) -> Any:
    make: Any = boto3.client  # the service name is a plain str here, not one of the stubs' literals
    return make(
        service,
        region_name="us-east-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="secret",
        config=config,
    )


@pytest.fixture
def s3() -> Any:
    return make_client("s3", S3_CONFIG)  # as functions.bootstrap builds it: SigV4, virtual-hosted


@pytest.fixture
def s3_stub(s3: Any) -> Any:
    with Stubber(s3) as stub:
        yield stub
        stub.assert_no_pending_responses()


@pytest.fixture
def blobs(s3: Any) -> S3BlobStore:
    return S3BlobStore(s3, BUCKET)


def body(data: bytes) -> StreamingBody:
    return StreamingBody(io.BytesIO(data), len(data))


# -- S3 ------------------------------------------------------------------------------------------


def test_put_stores_the_bytes_with_their_content_type(s3_stub: Any, blobs: S3BlobStore) -> None:
    s3_stub.add_response(
        "put_object",
        {"ETag": '"x"'},
        {"Bucket": BUCKET, "Key": KEY, "Body": b'{"a": 1}', "ContentType": "application/json"},
    )
    blobs.put(KEY, b'{"a": 1}', "application/json")


def test_get_reads_the_object_and_a_missing_key_is_none(s3_stub: Any, blobs: S3BlobStore) -> None:
    s3_stub.add_response(
        "get_object", {"Body": body(b"42"), "ContentLength": 2}, {"Bucket": BUCKET, "Key": KEY}
    )
    s3_stub.add_client_error(
        "get_object",
        service_error_code="NoSuchKey",
        http_status_code=404,
        expected_params={"Bucket": BUCKET, "Key": KEY},
    )
    assert blobs.get(KEY, max_bytes=2) == b"42"
    assert blobs.get(KEY) is None


def test_get_of_an_object_over_the_limit_is_refused_unread(s3_stub: Any, blobs: S3BlobStore) -> None:
    s3_stub.add_response(
        "get_object", {"Body": body(b"123"), "ContentLength": 3}, {"Bucket": BUCKET, "Key": KEY}
    )
    with pytest.raises(PayloadTooLarge, match=r"^result.json is over 2 bytes.$"):
        blobs.get(KEY, max_bytes=2)


def test_copy_is_a_copy_object_within_the_bucket_and_a_missing_source_is_returned(
    s3_stub: Any, blobs: S3BlobStore
) -> None:
    # Given S3 copying the first object and finding no second one
    copied = {
        "Bucket": BUCKET,
        "Key": "inputs/c/from/p/files/a",
        "CopySource": {"Bucket": BUCKET, "Key": "outputs/p/files/a"},
    }
    s3_stub.add_response("copy_object", {"CopyObjectResult": {"ETag": '"x"'}}, copied)
    gone = {
        "Bucket": BUCKET,
        "Key": "inputs/c/from/p/files/b",
        "CopySource": {"Bucket": BUCKET, "Key": "outputs/p/files/b"},
    }
    s3_stub.add_client_error(
        "copy_object", service_error_code="NoSuchKey", http_status_code=404, expected_params=gone
    )
    s3_stub.add_client_error(
        "copy_object", service_error_code="AccessDenied", http_status_code=403, expected_params=copied
    )

    # Then (one pair a call, so the stub's order holds) a copy answers nothing missing, a missing
    # source is named, and a refusal is a dependency failure
    assert blobs.copy([("outputs/p/files/a", "inputs/c/from/p/files/a")]) == ()
    assert blobs.copy([("outputs/p/files/b", "inputs/c/from/p/files/b")]) == ("outputs/p/files/b",)
    with pytest.raises(DependencyFailed, match=r"^The job's data could not be copied; try again shortly.$"):
        blobs.copy([("outputs/p/files/a", "inputs/c/from/p/files/a")])
    assert blobs.copy([]) == ()


@pytest.mark.parametrize("code", ["AccessDenied", "SlowDown", "InternalError"])
def test_get_that_s3_refuses_is_a_dependency_failure(s3_stub: Any, blobs: S3BlobStore, code: str) -> None:
    s3_stub.add_client_error("get_object", service_error_code=code, http_status_code=403)
    with pytest.raises(DependencyFailed, match=r"^The job's data could not be read; try again shortly.$"):
        blobs.get(KEY)


def test_describe_is_a_head_and_a_404_is_none(s3_stub: Any, blobs: S3BlobStore) -> None:
    s3_stub.add_response(
        "head_object", {"ContentLength": 7, "ContentType": "text/plain"}, {"Bucket": BUCKET, "Key": KEY}
    )
    s3_stub.add_client_error("head_object", service_error_code="404", http_status_code=404)
    assert blobs.describe(KEY) == ObjectInfo(key=KEY, size=7, content_type="text/plain")
    assert blobs.size(KEY) is None


def test_delete_prefix_lists_every_page_and_deletes_1000_keys_a_request(
    s3_stub: Any, blobs: S3BlobStore
) -> None:
    prefix = "outputs/job-01JDXYZ0000000000000000000/"
    keys = [f"{prefix}part-{i:04d}" for i in range(DELETE_BATCH_SIZE + 1)]
    s3_stub.add_response(
        "list_objects_v2",
        {
            "Contents": [{"Key": k, "Size": 1} for k in keys[:1000]],
            "IsTruncated": True,
            "NextContinuationToken": "t1",
        },
        {"Bucket": BUCKET, "Prefix": prefix},
    )
    s3_stub.add_response(
        "list_objects_v2",
        {"Contents": [{"Key": keys[1000], "Size": 1}], "IsTruncated": False},
        {"Bucket": BUCKET, "Prefix": prefix, "ContinuationToken": "t1"},
    )
    for chunk in (keys[:1000], keys[1000:]):
        s3_stub.add_response(
            "delete_objects",
            {"Deleted": [{"Key": k} for k in chunk]},
            {"Bucket": BUCKET, "Delete": {"Objects": [{"Key": k} for k in chunk], "Quiet": True}},
        )
    assert DELETE_BATCH_SIZE == 1000
    assert blobs.delete_prefix(prefix) == 1001


def test_list_that_s3_refuses_is_a_dependency_failure(s3_stub: Any, blobs: S3BlobStore) -> None:
    s3_stub.add_client_error("list_objects_v2", service_error_code="AccessDenied", http_status_code=403)
    with pytest.raises(DependencyFailed, match=r"^The job's data could not be listed; try again shortly.$"):
        blobs.list("outputs/")


def test_presigned_urls_sign_the_method_the_expiry_and_for_a_put_its_size_and_type(
    blobs: S3BlobStore,
) -> None:
    get = urlsplit(blobs.presigned_get(KEY, 900))
    put = urlsplit(blobs.presigned_put(KEY, 600, 1234, "application/octet-stream"))
    assert get.path.endswith(f"/{KEY}") and put.path.endswith(f"/{KEY}")
    get_query, put_query = parse_qs(get.query), parse_qs(put.query)
    assert get_query["X-Amz-Expires"] == ["900"]
    assert get_query["X-Amz-SignedHeaders"] == ["host"]
    assert put_query["X-Amz-Expires"] == ["600"]
    assert put_query["X-Amz-SignedHeaders"] == ["content-length;content-type;host"]
    assert get_query["X-Amz-Algorithm"] == put_query["X-Amz-Algorithm"] == ["AWS4-HMAC-SHA256"]


# -- SNS -----------------------------------------------------------------------------------------


@pytest.fixture
def sns() -> Any:
    return make_client("sns")


@pytest.fixture
def sns_stub(sns: Any) -> Any:
    with Stubber(sns) as stub:
        yield stub
        stub.assert_no_pending_responses()


def notification(method: str, to: str) -> OutgoingNotification:
    return OutgoingNotification(
        job_id="job-01JDXYZ0000000000000000000",
        account_id="alice",
        event="JobCompleted",
        method=method,
        to=to,
        subject="Job job-01JDXYZ completed\n",
        message="Your job completed. " * 10,
        at=datetime(2026, 12, 1, 1, 0, tzinfo=UTC),
    )


def test_an_email_is_published_to_the_accounts_own_topic_with_a_clean_subject(
    sns_stub: Any, sns: Any
) -> None:
    sns_stub.add_response(
        "publish",
        {"MessageId": "m-1"},
        {
            "TopicArn": email_topic_arn(PREFIX, "alice", "alice@example.com"),
            "Subject": "Job job-01JDXYZ completed?",
            "Message": "Your job completed. " * 10,
        },
    )
    SnsNotifier(sns, PREFIX).send(notification("Email", "alice@example.com"))


def test_an_sms_is_a_transactional_publish_to_the_phone_cut_to_140_characters(
    sns_stub: Any, sns: Any
) -> None:
    sns_stub.add_response(
        "publish",
        {"MessageId": "m-2"},
        {
            "PhoneNumber": "+15555550100",
            "Message": ("Your job completed. " * 10)[:140],
            "MessageAttributes": {
                "AWS.SNS.SMS.SMSType": {"DataType": "String", "StringValue": "Transactional"}
            },
        },
    )
    SnsNotifier(sns, PREFIX).send(notification("SMS", "+15555550100"))


@pytest.mark.parametrize(
    ("code", "raised", "message"),
    [
        ("OptedOut", DeliveryRefused, "SNS refused the SMS notification (OptedOut)."),
        ("InvalidParameter", DeliveryRefused, "SNS refused the SMS notification (InvalidParameter)."),
        ("Throttled", DependencyFailed, "SNS did not take the SMS notification (Throttled)."),
        ("InternalError", DependencyFailed, "SNS did not take the SMS notification (InternalError)."),
    ],
)
def test_a_publish_sns_refuses_is_refused_for_good_or_left_to_retry(
    sns_stub: Any, sns: Any, code: str, raised: type[Exception], message: str
) -> None:
    sns_stub.add_client_error("publish", service_error_code=code, http_status_code=400)
    with pytest.raises(raised) as caught:
        SnsNotifier(sns, PREFIX).send(notification("SMS", "+15555550100"))
    assert type(caught.value) is raised
    assert str(caught.value) == message


# -- CloudWatch Logs -----------------------------------------------------------------------------


@pytest.fixture
def logs() -> Any:
    return make_client("logs")


@pytest.fixture
def logs_stub(logs: Any) -> Any:
    with Stubber(logs) as stub:
        yield stub
        stub.assert_no_pending_responses()


def page(token: str, *messages: tuple[int, str]) -> dict[str, Any]:
    return {
        "events": [{"timestamp": ts, "message": m, "ingestionTime": ts} for ts, m in messages],
        "nextForwardToken": token,
        "nextBackwardToken": "b",
    }


def test_get_log_events_is_read_page_by_page_from_the_since_time_until_the_token_repeats(
    logs_stub: Any, logs: Any
) -> None:
    base = {
        "logGroupName": GROUP,
        "logStreamName": STREAM,
        "startFromHead": True,
        "startTime": 1_764_000_000_000,
    }
    logs_stub.add_response("get_log_events", page("f/1", (1_764_000_000_000, "one")), base)
    logs_stub.add_response(
        "get_log_events", page("f/2", (1_764_000_001_500, "two")), base | {"nextToken": "f/1"}
    )
    logs_stub.add_response(
        "get_log_events", page("f/2", (1_764_000_002_000, "three")), base | {"nextToken": "f/2"}
    )
    reader = CloudWatchLogReader(logs, GROUP)
    events = list(reader.events(STREAM, datetime.fromtimestamp(1_764_000_000, tz=UTC)))
    assert events == [
        LogEvent(datetime(2025, 11, 24, 16, 0, tzinfo=UTC), "one"),
        LogEvent(datetime(2025, 11, 24, 16, 0, 1, 500_000, tzinfo=UTC), "two"),
        LogEvent(datetime(2025, 11, 24, 16, 0, 2, tzinfo=UTC), "three"),
    ]


def test_a_stream_that_does_not_exist_has_no_events_and_is_already_deleted(logs_stub: Any, logs: Any) -> None:
    logs_stub.add_client_error(
        "get_log_events", service_error_code="ResourceNotFoundException", http_status_code=400
    )
    logs_stub.add_client_error(
        "delete_log_stream",
        service_error_code="ResourceNotFoundException",
        http_status_code=400,
        expected_params={"logGroupName": GROUP, "logStreamName": STREAM},
    )
    reader = CloudWatchLogReader(logs, GROUP)
    assert list(reader.events(STREAM, None)) == []
    reader.delete(STREAM)


def test_a_log_read_cloudwatch_refuses_is_a_dependency_failure(logs_stub: Any, logs: Any) -> None:
    logs_stub.add_client_error(
        "get_log_events", service_error_code="ThrottlingException", http_status_code=400
    )
    with pytest.raises(DependencyFailed, match=r"^The job's log could not be read; try again shortly.$"):
        list(CloudWatchLogReader(logs, GROUP).events(STREAM, None))


def test_stored_objects_are_listed_with_their_sizes(s3_stub: Any, blobs: S3BlobStore) -> None:
    s3_stub.add_response(
        "list_objects_v2",
        {
            "Contents": [{"Key": "outputs/a", "Size": 5}, {"Key": "outputs/b", "Size": 0}],
            "IsTruncated": False,
        },
        {"Bucket": BUCKET, "Prefix": "outputs/"},
    )
    assert blobs.list("outputs/") == [StoredObject("outputs/a", 5), StoredObject("outputs/b", 0)]
