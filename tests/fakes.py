"""Fakes of ports for tests (no network)."""

from __future__ import annotations

import socket
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.domain.errors import DependencyFailed
from functions.domain.jobs import BatchJobState
from functions.domain.machine_classes import GeoZone
from functions.ports import BatchSubmission, BuildRequest, EnvironmentState, OutgoingNotification, QueueState


class FakeLambdaContext(LambdaContext):
    """What powertools reads of a Lambda context: powertools' own ``LambdaContext`` (its properties read
    the underscored attributes set here), so the handlers' ``context: LambdaContext`` accepts it."""

    def __init__(self) -> None:
        self._function_name = "remote-batch-test"
        self._function_version = "$LATEST"
        self._invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:remote-batch-test"
        self._memory_limit_in_mb = 256
        self._aws_request_id = str(uuid.uuid4())
        self._log_group_name = "/aws/lambda/remote-batch-test"
        self._log_stream_name = "test"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 30_000


@dataclass
class RecordingBatchGateway:
    """A ``BatchGateway`` that records submissions and terminations; ``fail`` makes submit refuse,
    ``fail_terminate`` refuses that many TerminateJob calls (all calls are in ``terminate_calls``);
    ``find_job_by_name`` finds what was submitted here."""

    submissions: list[BatchSubmission] = field(default_factory=list)
    terminations: list[tuple[str, str]] = field(default_factory=list)
    fail: bool = False
    known: dict[str, BatchJobState] = field(default_factory=dict)
    described: list[list[str]] = field(default_factory=list)
    fail_terminate: int = 0
    terminate_calls: list[tuple[str, str]] = field(default_factory=list)
    # The Batch id each submission got (same order as ``submissions``), and every ListJobs by name.
    submitted_ids: list[str] = field(default_factory=list)
    found_by_name: list[tuple[str, str]] = field(default_factory=list)

    def submit_job(self, submission: BatchSubmission) -> str:
        if self.fail:
            raise DependencyFailed("AWS Batch did not accept the job")
        self.submissions.append(submission)
        batch_job_id = str(uuid.uuid4())
        self.submitted_ids.append(batch_job_id)
        return batch_job_id

    def find_job_by_name(self, job_queue: str, job_name: str) -> str | None:
        self.found_by_name.append((job_queue, job_name))
        for submission, batch_job_id in zip(self.submissions, self.submitted_ids, strict=True):
            if (submission.job_queue, submission.job_name) == (job_queue, job_name):
                return batch_job_id
        return None

    def terminate_job(self, batch_job_id: str, reason: str) -> None:
        self.terminate_calls.append((batch_job_id, reason))
        if self.fail_terminate:
            self.fail_terminate -= 1
            raise DependencyFailed("AWS Batch refused TerminateJob (ThrottlingException)")
        self.terminations.append((batch_job_id, reason))

    def describe_jobs(self, batch_job_ids, observed_at_ms):
        self.described.append(list(batch_job_ids))
        return [self.known[i] for i in batch_job_ids if i in self.known]


@dataclass
class RecordingNotifier:
    """A ``Notifier`` that keeps what it was asked to send; ``fail_next`` refuses that many sends."""

    sent: list[OutgoingNotification] = field(default_factory=list)
    fail_next: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, notification: OutgoingNotification) -> None:
        with self.lock:
            if self.fail_next:
                self.fail_next -= 1
                raise DependencyFailed("SNS refused")
            self.sent.append(notification)


@dataclass
class FakeResolver:
    """A ``HostResolver`` with made-up DNS records for names (no network in tests); numeric hosts in
    any spelling are decoded by the real ``getaddrinfo`` (``AI_NUMERICHOST``: no lookup), and
    ``localhost`` is this machine. Tests change ``names`` to make DNS change."""

    names: dict[str, list[str]] = field(
        default_factory=lambda: {
            "hooks.example.com": ["93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"],
            "metadata.example.com": ["169.254.169.254"],
            "intranet.example.com": ["93.184.215.14", "10.0.0.7"],
        }
    )

    def resolve(self, host: str, port: int) -> list[str]:
        if host in self.names:
            return list(self.names[host])
        if host.rstrip(".") == "localhost":
            return ["127.0.0.1", "::1"]
        try:
            infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
        except (socket.gaierror, UnicodeError):
            return []
        return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass
class FakeComputeEnvironments:
    """``ComputeEnvironments`` in memory, asynchronous as AWS Batch is: a created or updated
    environment or queue reports ``CREATING``/``UPDATING`` on the first describe after the change and
    ``VALID`` from the next; a deleted one ``DELETING``, then it is gone. ``calls`` records every
    call in order (``("set_capacity", name, 4)``); ``fail`` makes the next call raise."""

    environments: dict[str, dict[str, Any]] = field(default_factory=dict)
    queues: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    fail: bool = False
    broken: str | None = None

    def _call(self, *call: Any) -> None:
        self.calls.append(call)
        if self.fail:
            self.fail = False
            raise DependencyFailed("AWS Batch refused the dedicated compute's change (ServerException)")

    @staticmethod
    def _settle(item: dict[str, Any], store: dict[str, dict[str, Any]], name: str) -> None:
        if item["status"] == "DELETING":
            del store[name]
        elif item["status"] in ("CREATING", "UPDATING"):
            item["status"] = "VALID"

    def create_environment(self, name: str, machine: Any) -> None:
        self._call("create_environment", name, machine.name)
        self.environments.setdefault(
            name, {"status": "CREATING", "state": "ENABLED", "min": 0, "max": machine.vcpus}
        )

    def describe_environment(self, name: str) -> EnvironmentState | None:
        item = self.environments.get(name)
        if item is None:
            return None
        status = "INVALID" if self.broken else item["status"]
        state = EnvironmentState(status, item["state"], item["min"], item["max"], item["min"], self.broken)
        self._settle(item, self.environments, name)
        return state

    def set_capacity(self, name: str, vcpus: int) -> None:
        self._call("set_capacity", name, vcpus)
        self.environments[name].update(status="UPDATING", min=vcpus, max=vcpus)

    def disable_environment(self, name: str) -> None:
        self._call("disable_environment", name)
        self.environments[name].update(status="UPDATING", state="DISABLED")

    def delete_environment(self, name: str) -> None:
        self._call("delete_environment", name)
        assert self.environments[name]["state"] == "DISABLED", "AWS deletes only a DISABLED environment"
        assert all(q["environment"] != name for q in self.queues.values()), "its queue must go first"
        self.environments[name]["status"] = "DELETING"

    def create_queue(self, name: str, environment: str) -> None:
        self._call("create_queue", name, environment)
        assert self.environments[environment]["status"] == "VALID", "a queue needs a VALID environment"
        self.queues.setdefault(name, {"status": "CREATING", "state": "ENABLED", "environment": environment})

    def describe_queue(self, name: str) -> QueueState | None:
        item = self.queues.get(name)
        if item is None:
            return None
        state = QueueState(item["status"], item["state"])
        self._settle(item, self.queues, name)
        return state

    def disable_queue(self, name: str) -> None:
        self._call("disable_queue", name)
        self.queues[name].update(status="UPDATING", state="DISABLED")

    def delete_queue(self, name: str) -> None:
        self._call("delete_queue", name)
        assert self.queues[name]["state"] == "DISABLED", "AWS deletes only a DISABLED queue"
        self.queues[name]["status"] = "DELETING"


@dataclass
class RecordingEnvironmentBuilder:
    """An ``EnvironmentBuilder`` that records what it was asked to build (the test reports outcomes)."""

    zone: GeoZone = GeoZone.UNITED_STATES
    requests: list[BuildRequest] = field(default_factory=list)

    def start_build(self, request: BuildRequest) -> None:
        self.requests.append(request)

    def site_packages(self, build_hash: str) -> str | None:
        return None
