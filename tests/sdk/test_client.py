"""Retries, idempotency keys and typed errors of the SDK's HTTP client, against a fake server."""

from __future__ import annotations

import json
import time
from decimal import Decimal

import pytest
from pytest_httpserver import HTTPServer
from werkzeug import Response

import remote_batch as rb
from tests.sdk.conftest import TOKEN, Recorder, error, job, ok


def test_a_post_retried_after_a_gateway_error_carries_the_same_idempotency_key(
    httpserver: HTTPServer, api: rb.Client
) -> None:
    recorder = Recorder(
        error(503, "InternalError", "busy"), Response("", status=504), ok(job(status="Queued"), 202)
    )
    httpserver.expect_request("/jobs", method="POST").respond_with_handler(recorder)

    submitted = rb.submit("2 + 2")

    assert submitted.id == "job-01TEST"
    assert recorder.count == 3
    keys = {r["headers"]["Idempotency-Key"] for r in recorder.requests}
    assert len(keys) == 1 and len(keys.pop()) == 36  # one UUID for the three tries
    assert all(r["headers"]["Authorization"] == f"Bearer {TOKEN}" for r in recorder.requests)
    assert json.loads(recorder.requests[0]["body"]) == {"code": "2 + 2"}


def test_each_submit_gets_its_own_idempotency_key(httpserver: HTTPServer, api: rb.Client) -> None:
    recorder = Recorder(ok(job(status="Queued"), 202))
    httpserver.expect_request("/jobs", method="POST").respond_with_handler(recorder)
    rb.submit("1")
    rb.submit("1")
    keys = [r["headers"]["Idempotency-Key"] for r in recorder.requests]
    assert len(keys) == 2 and keys[0] != keys[1]


def test_429_waits_as_retry_after_says(httpserver: HTTPServer, api: rb.Client) -> None:
    throttled = error(429, "Throttled", "slow down")
    throttled.headers["Retry-After"] = "1"
    recorder = Recorder(throttled, ok(job()))
    httpserver.expect_request("/jobs/job-01TEST").respond_with_handler(recorder)
    started = time.monotonic()
    found = rb.job("job-01TEST")
    assert found.status == "Succeeded"
    assert recorder.count == 2
    assert time.monotonic() - started >= 0.95


def test_429_after_every_retry_is_rate_limited(httpserver: HTTPServer, api: rb.Client) -> None:
    recorder = Recorder(error(429, "Throttled", "Request rate limit reached."))
    httpserver.expect_request("/account").respond_with_handler(recorder)
    with pytest.raises(rb.RateLimited) as caught:
        rb.account()
    assert recorder.count == 6  # the first try and 5 retries
    assert caught.value.status == 429 and caught.value.message == "Request rate limit reached."


def test_a_500_is_a_bug_and_not_retried(httpserver: HTTPServer, api: rb.Client) -> None:
    recorder = Recorder(error(500, "InternalError", "Something failed on our side."))
    httpserver.expect_request("/jobs", method="POST").respond_with_handler(recorder)
    with pytest.raises(rb.InternalError, match="Something failed on our side"):
        rb.submit("1")
    assert recorder.count == 1


def test_a_grant_retried_after_a_gateway_error_carries_one_idempotency_key(
    httpserver: HTTPServer, api: rb.Client
) -> None:
    """The service credits a grant once per ``Idempotency-Key`` (issue 15), so the SDK retries it under
    one key (it did not retry grants at all while the service could not deduplicate them)."""
    recorder = Recorder(
        error(503, "InternalError", "unavailable"),
        ok({"accountId": "alice", "creditBalance": 112.5, "email": None, "phone": None}),
    )
    httpserver.expect_request("/admin/accounts/alice/credits", method="POST").respond_with_handler(recorder)

    account = rb.grant_credits("alice", Decimal("12.5"), "welcome")

    assert account.credit_balance == Decimal("112.5")
    assert recorder.count == 2
    assert {json.dumps(json.loads(r["body"]), sort_keys=True) for r in recorder.requests} == {
        '{"credits": 12.5, "reason": "welcome"}'
    }
    keys = {r["headers"]["Idempotency-Key"] for r in recorder.requests}
    assert len(keys) == 1 and len(keys.pop()) == 36


def test_a_grant_sent_with_its_own_key_sends_that_key(httpserver: HTTPServer, api: rb.Client) -> None:
    recorder = Recorder(ok({"accountId": "alice", "creditBalance": 5, "email": None, "phone": None}))
    httpserver.expect_request("/admin/accounts/alice/credits", method="POST").respond_with_handler(recorder)
    rb.grant_credits("alice", 5, "ticket 4711", idempotency_key="ticket-4711")
    assert recorder.requests[0]["headers"]["Idempotency-Key"] == "ticket-4711"


def test_connection_refused_is_retried_then_reported(api: rb.Client) -> None:
    dead = rb.Client(rb.Profile(endpoint="http://127.0.0.1:9", token=TOKEN))
    failed = r"GET http://127\.0\.0\.1:9/account failed after 5 retries"
    with pytest.raises(rb.ConnectionFailed, match=failed):
        rb.account(client=dead)


@pytest.mark.parametrize(
    ("status", "code", "cls"),
    [
        (400, "ValidationError", rb.ValidationError),
        (401, "Unauthorized", rb.Unauthorized),
        (402, "InsufficientCredits", rb.InsufficientCredits),
        (403, "Forbidden", rb.Forbidden),
        (404, "NotFound", rb.NotFound),
        (409, "JobNotFinished", rb.JobNotFinished),
        (409, "NoOutput", rb.NoOutput),
        (409, "Conflict", rb.Conflict),
        (410, "Expired", rb.Expired),
        (413, "PayloadTooLarge", rb.PayloadTooLarge),
        (400, "QuotaExceeded", rb.QuotaExceeded),
    ],
)
def test_error_codes_become_typed_errors(
    httpserver: HTTPServer, api: rb.Client, status: int, code: str, cls: type[rb.ApiError]
) -> None:
    httpserver.expect_request("/jobs/job-x").respond_with_response(error(status, code, "Say why.", "jobId"))
    with pytest.raises(cls) as caught:
        rb.job("job-x")
    assert type(caught.value) is cls
    assert (caught.value.status, caught.value.code, caught.value.message) == (status, code, "Say why.")
    assert caught.value.field == "jobId"
    assert str(caught.value) == f"{code}: Say why. (field: jobId)"


def test_conflicts_share_a_base_class() -> None:
    assert issubclass(rb.JobNotFinished, rb.Conflict) and issubclass(rb.NoOutput, rb.Conflict)


def test_an_api_gateway_answer_without_our_body_is_typed_by_status(
    httpserver: HTTPServer, api: rb.Client
) -> None:
    httpserver.expect_request("/account").respond_with_json({"message": "Unauthorized"}, status=401)
    with pytest.raises(rb.Unauthorized) as caught:
        rb.account()
    assert caught.value.code == "Unauthorized" and caught.value.message == "Unauthorized"


def test_validation_error_names_the_field(httpserver: HTTPServer, api: rb.Client) -> None:
    httpserver.expect_request("/jobs", method="POST").respond_with_response(
        error(400, "ValidationError", "Unknown machine class 'Nope'.", "machineClass")
    )
    with pytest.raises(rb.ValidationError) as caught:
        rb.submit("1", machine_class="Nope")
    assert caught.value.field == "machineClass"


def test_credits_stay_exact_both_ways(httpserver: HTTPServer, api: rb.Client) -> None:
    recorder = Recorder(ok(job(status="Queued", creditConstraint=0.1234, creditsSpent=0.0167), 202))
    httpserver.expect_request("/jobs", method="POST").respond_with_handler(recorder)
    submitted = rb.submit("1", credit_constraint="0.1234")
    assert b'"creditConstraint": 0.1234' in recorder.requests[0]["body"]
    assert submitted.data["creditsSpent"] == Decimal("0.0167")
    assert isinstance(submitted.data["creditsSpent"], Decimal)
