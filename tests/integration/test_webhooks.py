"""Webhook notifications: a signed HTTPS POST to the account's URL (this service's extension)."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from functions.adapters.webhook import WebhookSender, sign
from functions.domain.errors import DependencyFailed
from functions.ports import OutgoingNotification
from tests.integration.conftest import Clock


class Receiver:
    """A webhook endpoint on 127.0.0.1 that records requests and answers the given statuses."""

    def __init__(self, statuses):
        self.requests = []
        self.statuses = list(statuses)
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((dict(self.headers), body))
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/remote-batch"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


@pytest.fixture
def receiver():
    made = []

    def make(*statuses):
        made.append(Receiver(statuses))
        return made[-1]

    yield make
    for r in made:
        r.close()


def notification(url):
    return OutgoingNotification(
        job_id="job-1",
        account_id="dev",
        event="JobCompleted",
        method="Webhook",
        to=url,
        subject="s",
        message="m",
        at=Clock()(),
        secret="whsec_test",
    )


def test_signature_is_hmac_sha256_of_timestamp_and_body(receiver):
    endpoint = receiver()
    WebhookSender().send(notification(endpoint.url), "whsec_test")
    ((headers, body),) = endpoint.requests
    timestamp = headers["X-RemoteBatch-Timestamp"]
    expected = hmac.new(b"whsec_test", f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    assert headers["X-RemoteBatch-Signature"] == f"sha256={expected}"
    assert sign("whsec_test", int(timestamp), body) == f"sha256={expected}"
    assert json.loads(body) == {
        "jobId": "job-1",
        "accountId": "dev",
        "event": "JobCompleted",
        "subject": "s",
        "message": "m",
        "at": "2026-11-29T17:20:00Z",
    }


def test_server_errors_are_retried_with_backoff_then_reported(receiver):
    flaky = receiver(503, 500)
    WebhookSender().send(notification(flaky.url), "whsec_test")
    assert len(flaky.requests) == 3  # two failures, then 200
    broken = receiver(503, 503, 503, 503, 503)
    with pytest.raises(DependencyFailed, match="503"):
        WebhookSender().send(notification(broken.url), "whsec_test")
    assert len(broken.requests) == 3  # the first try and 2 retries; the meter's next tick tries again


def test_a_client_error_is_not_retried(receiver):
    gone = receiver(410)
    with pytest.raises(DependencyFailed, match="410"):
        WebhookSender().send(notification(gone.url), "whsec_test")
    assert len(gone.requests) == 1


def test_webhook_url_secret_shown_once_and_https_required(stack):
    status, error = stack.api("PUT", "/account/contacts", body={"webhookUrl": "http://example.com/hook"})
    assert status == 400
    assert error["error"]["field"] == "webhookUrl"
    status, account = stack.api(
        "PUT", "/account/contacts", body={"webhookUrl": "https://hooks.example.com/rb"}
    )
    assert status == 200
    assert account["webhookUrl"] == "https://hooks.example.com/rb"
    assert account["webhookSecret"].startswith("whsec_")
    status, again = stack.api("PUT", "/account/contacts", body={"phone": "+15555550100"})
    assert again["webhookSecret"] is None  # not shown again
    assert "webhookSecret" not in stack.api("GET", "/account")[1]


@pytest.mark.parametrize(
    "url",
    [
        "https://169.254.169.254/latest/meta-data",
        "https://10.0.0.5/hook",
        "https://127.0.0.1/hook",
        "https://[::1]/hook",
        "https://localhost/hook",
        "https://metadata.google.internal/x",
        "https://user:pw@hooks.example.com/x",
        "ftp://hooks.example.com/x",
    ],
)
def test_webhook_urls_must_reach_a_public_https_host(stack, url):
    status, error = stack.api("PUT", "/account/contacts", body={"webhookUrl": url})
    assert status == 400, url
    assert error["error"]["field"] == "webhookUrl"
