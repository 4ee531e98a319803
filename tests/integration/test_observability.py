"""functions/observability.py: nothing secret in traces or logs, a correlation id on every log line,
one metric per meaningful event, and no X-Ray SDK unless tracing is on."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from aws_lambda_powertools import Tracer
from aws_xray_sdk.core.recorder import AWSXRayRecorder

from functions import observability
from functions.handlers import api, batch_events, meter
from tests.events import api_event, batch_event, scheduled_event
from tests.fakes import FakeLambdaContext


class CapturingEmitter:
    """An X-Ray emitter that keeps each segment or subsegment sent, as the daemon would get it (JSON)."""

    def __init__(self) -> None:
        self.documents: list[str] = []

    def send_entity(self, entity: Any) -> None:
        self.documents.append(entity.serialize())

    def set_daemon_address(self, address: str | None) -> None:
        """The daemon address is not used: nothing leaves the process."""


@pytest.fixture
def recorder() -> Iterator[tuple[AWSXRayRecorder, CapturingEmitter]]:
    """A real X-Ray recorder behind a powertools Tracer installed as the handlers' tracer."""
    emitter = CapturingEmitter()
    xray = AWSXRayRecorder()
    xray.configure(emitter=emitter, sampling=False, context_missing="LOG_ERROR", service="remote-batch")
    tracer = Tracer(service=observability.SERVICE, provider=xray, auto_patch=False, disabled=False)
    observability.install_tracer(tracer)
    try:
        yield xray, emitter
    finally:
        observability.reset_tracer()
        Tracer._reset_config()  # powertools shares one config among Tracer instances


class LogLines:
    """Every line the handlers log (DEBUG and up), formatted by the service logger's own formatter."""

    def __init__(self) -> None:
        self.stream = io.StringIO()

    def read(self) -> list[dict[str, Any]]:
        """The lines logged since the last read, parsed (each is one JSON document)."""
        text = self.stream.getvalue()
        self.stream.seek(0)
        self.stream.truncate()
        return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def logs() -> Iterator[LogLines]:
    lines = LogLines()
    handler = logging.StreamHandler(lines.stream)
    handler.setFormatter(observability.logger.registered_formatter)
    # The service logger and its children (the logic layer's ``Logger(child=True)``).
    loggers = [
        logging.getLogger(name)
        for name in list(logging.root.manager.loggerDict)
        if name == observability.SERVICE or name.startswith(observability.SERVICE + ".")
    ]
    levels = [each.level for each in loggers]
    service_logger = logging.getLogger(observability.SERVICE)
    service_logger.addHandler(handler)
    for each in loggers:
        each.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        service_logger.removeHandler(handler)
        for each, level in zip(loggers, levels, strict=True):
            each.setLevel(level)


def call_api(method: str, path: str, body: Any) -> tuple[str, dict[str, Any]]:
    event = api_event(method, path, body=body)
    response = api.handler(event, FakeLambdaContext())
    return event["requestContext"]["requestId"], {
        "status": response["statusCode"],
        **json.loads(response["body"], parse_float=Decimal),
    }


def test_the_webhook_secret_and_presigned_urls_reach_no_trace_and_no_log(stack, recorder, logs) -> None:
    xray, emitter = recorder
    xray.begin_segment("remote-batch-api")
    contacts_id, contacts = call_api(
        "PUT", "/account/contacts", {"webhookUrl": "https://hooks.example.com/rb"}
    )
    upload_id, upload = call_api("POST", "/jobs/uploads", {"size": 1234, "contentType": "text/x-python"})
    xray.end_segment()
    secret = contacts["webhookSecret"]
    url = upload["uploadUrl"]
    signature = parse_qs(urlsplit(url).query)["X-Amz-Signature"][0]
    assert contacts["status"] == 200
    assert secret.startswith("whsec_")
    assert upload["status"] == 201
    assert len(signature) == 64

    recorded = "\n".join(emitter.documents)
    # What was recorded: the segment and the handler's subsegment, annotated (so the search below
    # searched something).
    segments = [json.loads(document) for document in emitter.documents]
    handler_subsegments = [
        sub for segment in segments for sub in segment.get("subsegments", []) if sub["name"] == "## handler"
    ]
    assert len(handler_subsegments) == 2
    assert all(sub["annotations"]["Service"] == "remote-batch" for sub in handler_subsegments)
    assert "ColdStart" in handler_subsegments[0]["annotations"]
    for needle in (secret, secret.removeprefix("whsec_"), signature, url, "X-Amz-Credential"):
        assert needle not in recorded
    assert all("metadata" not in sub for sub in handler_subsegments)

    lines = logs.read()
    assert lines, "the handlers logged nothing"
    text = json.dumps(lines)
    for needle in (secret, secret.removeprefix("whsec_"), signature, "X-Amz-Credential"):
        assert needle not in text
    assert "hooks.example.com/rb" not in text  # the request body was not logged
    # Every line names its API Gateway request.
    assert {line["correlation_id"] for line in lines} <= {contacts_id, upload_id}
    assert all(line.get("correlation_id") for line in lines)


def test_the_recorder_would_have_seen_a_captured_response(recorder) -> None:
    """The same recorder keeps what a method traced with powertools' default (capture_response=True)
    returns: the test above would see a secret that reached the trace."""
    xray, emitter = recorder
    tracer = observability.get_tracer()
    assert tracer is not None

    @tracer.capture_method
    def leaky() -> dict[str, str]:
        return {"webhookSecret": "whsec_canary"}

    xray.begin_segment("control")
    leaky()
    xray.end_segment()
    assert "whsec_canary" in "\n".join(emitter.documents)


def test_event_lines_carry_the_eventbridge_event_id(stack, logs) -> None:
    status, job = stack.api("POST", "/jobs", body={"code": "1", "notifications": []})
    assert status == 202, job
    logs.read()  # the api's lines are checked above
    stored = stack.services.store.get_job(job["jobId"])
    assert stored is not None and stored.batch_job_id is not None
    event = batch_event(job["jobId"], stored.batch_job_id, "RUNNING", created_at=1, started_at=2)
    batch_events.handler(event, FakeLambdaContext())
    tick = scheduled_event()
    meter.handler(tick, FakeLambdaContext())
    lines = logs.read()
    assert {line["correlation_id"] for line in lines} == {event["id"], tick["id"]}


class RecordingMetrics:
    """Stands in for the powertools ``Metrics`` behind ``MetricsEvents``."""

    def __init__(self) -> None:
        self.added: list[tuple[str, str, float]] = []

    def add_metric(self, name: str, unit: Any, value: float) -> None:
        self.added.append((name, str(unit.value), value))

    def total(self, name: str) -> float:
        return sum(value for metric, _, value in self.added if metric == name)


@pytest.fixture
def metrics(monkeypatch: pytest.MonkeyPatch) -> RecordingMetrics:
    recording = RecordingMetrics()
    monkeypatch.setattr(observability, "metrics", recording)
    return recording


def test_each_meaningful_event_is_one_metric(stack, metrics) -> None:
    stack.add_account("tester", "100", email="tester@example.com")
    body = {"code": "1", "notifications": [{"events": ["JobCompleted"], "methods": ["Email"]}]}
    job_id, batch_id, started = stack.start_running(body, account_id="tester")
    status, second = stack.api("POST", "/jobs", body={"code": "2", "notifications": []}, account_id="tester")
    assert status == 202
    assert metrics.total("JobsSubmitted") == 2

    assert stack.api("POST", f"/jobs/{second['jobId']}/abort", account_id="tester")[0] == 202
    assert metrics.total("JobsAborted") == 1

    # Two hours on the first job's machine class, settled once.
    stopped = started + 2 * 3600 * 1000
    stack.deliver(
        batch_event(job_id, batch_id, "SUCCEEDED", created_at=started, started_at=started, stopped_at=stopped)
    )
    charged = [(unit, value) for name, unit, value in metrics.added if name == "CreditsCharged"]
    assert charged == [("None", float(Decimal("100") - stack.balance("tester")))]
    assert charged[0][1] > 0
    assert metrics.total("NotificationsSent") == 1
    assert ("JobsSubmitted", "Count", 1) in metrics.added


def test_the_meter_reports_stuck_jobs(stack, metrics) -> None:
    body = {"code": "1", "timeConstraint": 600, "notifications": []}
    job_id, _, _ = stack.start_running(body)
    assert stack.tick()["stuck"] == 0
    assert ("StuckJobs", "Count", 0) in metrics.added
    stack.clock.advance(600 + 14 * 60)  # within the margin: Batch's end may still be on its way
    assert stack.tick()["stuck"] == 0
    stack.clock.advance(2 * 60)
    report = stack.tick()
    assert report["stuck"] == 1
    assert [m for m in metrics.added if m[0] == "StuckJobs"][-1] == ("StuckJobs", "Count", 1)


def test_without_tracing_the_xray_sdk_is_never_imported() -> None:
    code = (
        "import sys\n"
        "from functions import observability\n"
        "from functions.handlers import api, batch_events, meter\n"
        "assert observability.get_tracer() is None\n"
        "print(sorted(m for m in sys.modules if m.startswith('aws_xray_sdk')))\n"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": ".",
        "AWS_REGION": "us-east-1",
        "AWS_LAMBDA_FUNCTION_NAME": "remote-batch-api",
        "POWERTOOLS_TRACE_DISABLED": "true",
    }
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("environ", "enabled"),
    [
        ({"AWS_LAMBDA_FUNCTION_NAME": "f"}, True),
        ({"AWS_LAMBDA_FUNCTION_NAME": "f", "POWERTOOLS_TRACE_DISABLED": "false"}, True),
        ({"AWS_LAMBDA_FUNCTION_NAME": "f", "POWERTOOLS_TRACE_DISABLED": "1"}, False),
        ({"AWS_LAMBDA_FUNCTION_NAME": "f", "POWERTOOLS_TRACE_DISABLED": "TRUE"}, False),
        ({"AWS_LAMBDA_FUNCTION_NAME": "f", "AWS_SAM_LOCAL": "true"}, False),
        ({}, False),
    ],
)
def test_tracing_is_on_in_a_lambda_unless_disabled(environ: dict[str, str], enabled: bool) -> None:
    assert observability.tracing_enabled(environ) is enabled


def test_events_are_never_logged_even_when_the_environment_asks(
    monkeypatch: pytest.MonkeyPatch, logs
) -> None:
    monkeypatch.setenv("POWERTOOLS_LOGGER_LOG_EVENT", "true")  # read when a handler is decorated

    @observability.lambda_entry(observability.EVENT_BRIDGE_EVENT_ID)
    def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
        observability.logger.info("handled")
        return {}

    handler({"id": "evt-1", "detail": {"webhookSecret": "whsec_canary"}}, FakeLambdaContext())
    lines = logs.read()
    assert [line["message"] for line in lines] == ["handled"]
    assert lines[0]["correlation_id"] == "evt-1"
    assert "whsec_canary" not in json.dumps(lines)
