"""Webhook notifications: a signed HTTPS POST to the account's URL (this service's extension)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import boto3
import pytest
import urllib3
from standardwebhooks import Webhook

from functions import bootstrap
from functions.adapters.dns import SocketResolver
from functions.adapters.sns import SnsNotifier
from functions.adapters.webhook import WebhookSender, sign
from functions.domain.errors import DeliveryRefused, DependencyFailed
from functions.domain.webhook_addresses import non_public_reason
from functions.domain.webhook_signing import SECRET_BYTES, delivery_id, new_secret
from functions.ports import OutgoingNotification
from remote_batch import webhooks
from tests.events import batch_event
from tests.fakes import FakeResolver
from tests.integration.conftest import Clock


class Receiver:
    """A webhook endpoint on 127.0.0.1 that records requests and answers the given statuses (with
    ``headers``); while ``hold`` is set, it records each request and answers nothing until released."""

    def __init__(self, statuses, headers=None):
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.statuses = list(statuses)
        self.hold: threading.Event | None = None
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append((dict(self.headers), body))
                if receiver.hold is not None:
                    receiver.hold.wait(10)
                status = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/remote-batch"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        if self.hold is not None:
            self.hold.set()
        self.server.shutdown()


@pytest.fixture
def receiver():
    made = []

    def make(*statuses, headers=None):
        made.append(Receiver(statuses, headers))
        return made[-1]

    yield make
    for r in made:
        r.close()


def notification(url, secret="whsec_test"):
    return OutgoingNotification(
        job_id="job-1",
        account_id="dev",
        event="JobCompleted",
        method="Webhook",
        to=url,
        subject="s",
        message="m",
        at=Clock()(),
        secret=secret,
        delivery_id=delivery_id("job-1", "JobCompleted#3/Webhook"),
    )


STANDARD_SECRET = new_secret(bytes(range(SECRET_BYTES)))
# A secret of the earlier form (``secrets.token_urlsafe(32)``: base64url, with ``-`` and ``_``).
LEGACY_SECRET = "whsec_" + "q-_" * 14 + "A"


@pytest.mark.parametrize("secret", [STANDARD_SECRET, LEGACY_SECRET], ids=["standard", "earlier-form"])
def test_each_delivery_carries_standard_webhooks_headers_that_verify(receiver, secret):
    endpoint = receiver()

    WebhookSender(local=True).send(notification(endpoint.url, secret), secret)

    ((headers, body),) = endpoint.requests
    assert headers["webhook-id"] == delivery_id("job-1", "JobCompleted#3/Webhook")
    assert headers["webhook-id"].startswith("msg_") and len(headers["webhook-id"]) == 36
    assert headers["webhook-timestamp"] == headers["X-RemoteBatch-Timestamp"]
    assert headers["webhook-signature"].startswith("v1,")
    # Any Standard Webhooks library checks it with the secret in the standard form; the SDK with
    # the secret as shown.
    expected = json.loads(body)
    assert Webhook(webhooks.standard_secret(secret)).verify(body, headers) == expected
    assert webhooks.verify(body, headers, secret) == expected
    # the earlier header stays, for one release
    timestamp = headers["X-RemoteBatch-Timestamp"]
    assert headers["X-RemoteBatch-Signature"] == sign(secret, int(timestamp), body)
    # a changed body or another secret does not verify
    with pytest.raises(webhooks.WebhookVerificationError):
        webhooks.verify(body.replace(b"JobCompleted", b"JobStarting"), headers, secret)
    with pytest.raises(webhooks.WebhookVerificationError):
        webhooks.verify(body, headers, new_secret(b"x" * SECRET_BYTES))


def test_retries_of_one_delivery_carry_the_same_webhook_id(receiver):
    flaky = receiver(503, 500)

    WebhookSender(local=True).send(notification(flaky.url), "whsec_test")

    ids = {headers["webhook-id"] for headers, _ in flaky.requests}
    assert len(flaky.requests) == 3 and ids == {delivery_id("job-1", "JobCompleted#3/Webhook")}


def test_the_meters_retry_of_a_failed_webhook_sends_the_same_delivery_id(stack):
    # Given an account with a webhook, a job that notifies it, and a first publish that fails
    stack.add_account("ana", "100")
    stack.api(
        "PUT", "/account/contacts", body={"webhookUrl": "https://hooks.example.com/rb"}, account_id="ana"
    )
    status, job = stack.api(
        "POST",
        "/jobs",
        body={"code": "1", "notifications": [{"events": ["JobStarting"], "methods": ["Webhook"]}]},
        account_id="ana",
    )
    assert status == 202, job
    batch_id = stack.services.store.get_job(job["jobId"]).batch_job_id
    tried: list[OutgoingNotification] = []
    send = stack.notifier.send

    def record(sent: OutgoingNotification) -> None:
        tried.append(sent)
        send(sent)

    stack.notifier.send = record
    stack.notifier.fail_next = 1

    # When the event's delivery fails and the meter sends it again a minute later
    now_ms = int(stack.clock().timestamp() * 1000)
    stack.deliver(batch_event(job["jobId"], batch_id, "STARTING", created_at=now_ms))
    stack.clock.advance(60)
    stack.tick()

    # Then both attempts carried one delivery id, the notification's
    assert [n.event for n in tried] == ["JobStarting", "JobStarting"]
    assert {n.delivery_id for n in tried} == {delivery_id(job["jobId"], "JobStarting#1/Webhook")}
    assert len(stack.notifier.sent) == 1


def test_a_receiver_that_does_not_answer_costs_the_final_event_one_try_after_its_status(stack):
    # Given a job that notifies a webhook of three events its end makes due, and a receiver that
    # never answers in time
    stack.api("PUT", "/account/contacts", body={"webhookUrl": "https://hooks.example.com/rb"})
    events = ["JobCompleted", "JobSucceeded", "JobStatusChanged"]
    job_id, batch_id, started = stack.start_running(
        {"code": "1", "notifications": [{"events": events, "methods": ["Webhook"]}]}
    )
    stack.notifier.sent.clear()
    seen: list[tuple[str, str]] = []

    def time_out(sent: OutgoingNotification) -> None:
        stored = stack.services.store.get_job(job_id)
        seen.append((sent.event, stored.status.value))
        raise DependencyFailed("the webhook endpoint did not answer")

    stack.notifier.send = time_out

    # When the job's final event is delivered
    stack.deliver(batch_event(job_id, batch_id, "SUCCEEDED", started_at=started, stopped_at=started + 1000))

    # Then the status was written before the one POST tried, and the other two wait for their
    # next attempt without a try of their own
    assert len(seen) == 1 and seen[0][1] == "Succeeded"
    log = stack.services.store.get_job(job_id).notification_log
    failed = [r for r in log if r.outcome == "failed"]
    assert len(failed) == 3
    assert [r.detail.split(" Attempt ")[0] for r in failed] == [
        "Webhook failed: the webhook endpoint did not answer.",
        "Webhook failed: the webhook endpoint did not answer, not tried again in this delivery.",
        "Webhook failed: the webhook endpoint did not answer, not tried again in this delivery.",
    ]
    assert all(" Attempt 1 of 5; next at " in r.detail for r in failed)


def test_signature_is_hmac_sha256_of_timestamp_and_body(receiver):
    endpoint = receiver()
    WebhookSender(local=True).send(notification(endpoint.url), "whsec_test")
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
    WebhookSender(local=True).send(notification(flaky.url), "whsec_test")
    assert len(flaky.requests) == 3  # two failures, then 200
    broken = receiver(503, 503, 503, 503, 503)
    with pytest.raises(DependencyFailed, match="503"):
        WebhookSender(local=True).send(notification(broken.url), "whsec_test")
    assert len(broken.requests) == 3  # the first try and 2 retries; the meter's next tick tries again


def test_a_post_unanswered_within_the_read_timeout_is_not_sent_again_at_once(receiver):
    # Given a receiver that takes the POST and answers later than the sender waits
    slow = receiver()
    slow.hold = threading.Event()
    sender = WebhookSender(local=True, timeout=urllib3.Timeout(connect=2.0, read=0.2))

    # When a notification is sent, Then it fails transiently (the schedule sends it again later)
    with pytest.raises(DependencyFailed, match="did not answer"):
        sender.send(notification(slow.url), "whsec_test")

    # and the receiver, which has the POST, got it once: no duplicate under its webhook-id
    slow.hold.set()
    assert [headers["webhook-id"] for headers, _ in slow.requests] == [
        delivery_id("job-1", "JobCompleted#3/Webhook")
    ]


def test_a_receivers_retry_after_does_not_hold_the_sender(receiver):
    # Given a receiver that answers 503 asking for an hour's pause, then 200
    busy = receiver(503, headers={"Retry-After": "3600"})
    started = time.monotonic()

    WebhookSender(local=True).send(notification(busy.url), "whsec_test")

    # Then the retry came after the sender's own backoff, not the receiver's hour
    assert len(busy.requests) == 2
    assert time.monotonic() - started < 10


def test_a_client_error_is_not_retried(receiver):
    gone = receiver(410)
    with pytest.raises(DependencyFailed, match="410"):
        WebhookSender(local=True).send(notification(gone.url), "whsec_test")
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
    # Standard Webhooks' form: whsec_ + base64 (standard alphabet) of 32 random bytes
    assert len(base64.b64decode(account["webhookSecret"].removeprefix("whsec_"), validate=True)) == 32
    status, again = stack.api("PUT", "/account/contacts", body={"phone": "+15555550100"})
    assert again["webhookSecret"] is None  # not shown again
    assert "webhookSecret" not in stack.api("GET", "/account")[1]


# Issue 9 item 9: every spelling of a non-public address, resolved, refused with 400 field webhookUrl.
NON_PUBLIC_URLS = [
    "https://169.254.169.254/latest/meta-data",
    "https://2852039166/",  # 169.254.169.254 as one decimal number
    "https://0251.0376.0251.0376/",  # octal dotted
    "https://0xa9.0xfe.0xa9.0xfe/",  # hex dotted
    "https://0xa9fea9fe/",  # one hex number
    "https://169.254.43518/",  # a.b.c with a 16-bit last part
    "https://[::ffff:169.254.169.254]/",  # IPv4-mapped IPv6
    "https://[::ffff:a9fe:a9fe]/",
    "https://[64:ff9b::a9fe:a9fe]/",  # NAT64
    "https://[2002:a9fe:a9fe::1]/",  # 6to4 around a link-local address
    "https://[fe80::1]/",
    "https://0.0.0.0/",
    "https://0/",
    "https://10.0.0.5/hook",
    "https://192.168.1.1/",
    "https://100.64.0.1/",  # carrier-grade NAT
    "https://127.0.0.1/hook",
    "https://127.1/",
    "https://017700000001/",
    "https://[::1]/hook",
    "https://224.0.0.1/",  # multicast
    "https://240.0.0.1/",  # reserved
    "https://255.255.255.255/",
    "https://localhost/hook",
    "https://localhost./hook",
    "https://LOCALHOST/hook",
    "https://metadata.google.internal/x",
    "https://metadata.example.com/x",  # a DNS name for 169.254.169.254
    "https://intranet.example.com/x",  # one public and one private record
    "https://no-such-host.example.com/x",  # does not resolve
    "https://user:pw@hooks.example.com/x",
    "https://hooks.example.com:99999/x",
    "https://hooks.example.com/a b",
    "ftp://hooks.example.com/x",
    "http://hooks.example.com/x",
]


@pytest.mark.parametrize("url", NON_PUBLIC_URLS)
def test_webhook_urls_must_reach_a_public_https_host(stack, url):
    status, error = stack.api("PUT", "/account/contacts", body={"webhookUrl": url})
    assert status == 400, (url, error)
    assert error["error"]["field"] == "webhookUrl"
    assert stack.services.store.get_account("dev").webhook_url is None


@pytest.mark.parametrize(
    "url", ["https://hooks.example.com/rb", "https://93.184.215.14/rb", "https://[2606:4700::1111]/x"]
)
def test_public_webhook_urls_are_accepted(stack, url):
    status, account = stack.api("PUT", "/account/contacts", body={"webhookUrl": url})
    assert status == 200, account
    assert account["webhookUrl"] == url


def test_delivery_checks_the_address_again_since_dns_can_change(stack):
    # Given a webhook URL accepted while its host was public
    resolver = stack.services.resolver
    status, _ = stack.api("PUT", "/account/contacts", body={"webhookUrl": "https://hooks.example.com/rb"})
    assert status == 200
    # When its DNS record later points at the metadata service, delivery refuses it for good
    resolver.names["hooks.example.com"] = ["169.254.169.254"]
    sender = WebhookSender(resolver=resolver)
    with pytest.raises(DeliveryRefused, match=r"non-public address \(169.254.169.254 is link-local\)"):
        sender.send(notification("https://hooks.example.com/rb"), "whsec_test")
    resolver.names["hooks.example.com"] = ["::ffff:10.0.0.1"]
    with pytest.raises(DeliveryRefused, match=r"\(10\.0\.0\.1 is private\)"):
        sender.send(notification("https://hooks.example.com/rb"), "whsec_test")


def test_a_deployed_sender_never_posts_to_this_machine(receiver):
    endpoint = receiver()
    with pytest.raises(DeliveryRefused, match=r"127\.0\.0\.1 is loopback"):
        WebhookSender(resolver=FakeResolver()).send(
            notification(endpoint.url.replace("http:", "https:")), "x"
        )
    assert endpoint.requests == []


def test_the_local_sender_posts_only_to_this_machine():
    with pytest.raises(DeliveryRefused, match="only posts webhooks to this machine"):
        WebhookSender(resolver=FakeResolver(), local=True).send(
            notification("http://hooks.example.com/x"), "x"
        )


def test_the_local_stack_accepts_http_to_this_machine_only(stack):
    local = dataclasses.replace(stack.services, allow_http_webhooks=True)
    bootstrap.install(local)
    try:
        for url in ("http://127.0.0.1:8080/hook", "http://localhost:9000/x", "http://[::1]:9000/x"):
            status, account = stack.api("PUT", "/account/contacts", body={"webhookUrl": url})
            assert status == 200, (url, account)
        for url in ("http://hooks.example.com/x", "http://10.0.0.5/x", "http://2852039166/"):
            status, error = stack.api("PUT", "/account/contacts", body={"webhookUrl": url})
            assert (status, error["error"]["field"]) == (400, "webhookUrl"), url
    finally:
        bootstrap.install(stack.services)


def test_a_refused_webhook_is_recorded_failed_and_not_retried(stack):
    # Given dev's webhook whose host now resolves to a private address, and a real SNS notifier
    resolver = stack.services.resolver
    status, _ = stack.api("PUT", "/account/contacts", body={"webhookUrl": "https://hooks.example.com/rb"})
    assert status == 200
    resolver.names["hooks.example.com"] = ["10.0.0.9"]
    sns = boto3.client("sns", region_name="us-east-1")
    notifier = SnsNotifier(sns, stack.settings.email_topic_arn_prefix, WebhookSender(resolver=resolver))
    services = dataclasses.replace(stack.services, notifier=notifier)
    bootstrap.install(services)
    try:
        status, job = stack.api(
            "POST",
            "/jobs",
            body={"code": "1", "notifications": [{"events": ["JobStarting"], "methods": ["Webhook"]}]},
        )
        assert status == 202
        job_id = job["jobId"]
        batch_id = stack.services.store.get_job(job_id).batch_job_id
        stack.deliver(batch_event(job_id, batch_id, "STARTING"))
        for _ in range(5):
            stack.clock.advance(120)
            stack.tick()
    finally:
        bootstrap.install(stack.services)
    log = stack.services.store.get_job(job_id).notification_log
    assert [(r.method, r.outcome, r.detail) for r in log] == [
        (
            "Webhook",
            "failed",
            "Webhook failed: the webhook host hooks.example.com resolves to a non-public address "
            "(10.0.0.9 is private). Not retried.",
        )
    ]


# getaddrinfo decodes every numeric spelling (no network: the C library does it).
@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("2852039166", "169.254.169.254"),
        ("0251.0376.0251.0376", "169.254.169.254"),
        ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
        ("0xa9fea9fe", "169.254.169.254"),
        ("169.254.43518", "169.254.169.254"),
        ("127.1", "127.0.0.1"),
        ("017700000001", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("::ffff:a9fe:a9fe", "::ffff:169.254.169.254"),
    ],
)
def test_every_numeric_spelling_resolves_to_the_address_it_reaches(host, address):
    (resolved,) = SocketResolver().resolve(host, 443)
    assert resolved == address
    assert non_public_reason(resolved) is not None
