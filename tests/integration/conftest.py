"""Integration fixtures: the handlers in-process on moto (``mock_aws``), with a recording Batch
gateway (moto cannot emit Batch events) and a settable clock."""

from __future__ import annotations

import copy
import json
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.core.botocore_stubber import BotocoreStubber

from functions import bootstrap
from functions.adapters.tables import ALL_TABLES, create_table_request
from functions.domain.jobs import Account, BatchJobState
from functions.domain.machine_classes import MACHINE_CLASSES, GeoZone
from functions.ports import Services
from functions.settings import RouteSettings, Settings, ZoneSettings
from tests.events import JOB_DEFINITION_ARN, QUEUE_ARN, api_event, batch_event
from tests.fakes import (
    FakeComputeEnvironments,
    FakeLambdaContext,
    FakeResolver,
    RecordingBatchGateway,
    RecordingNotifier,
)

ZONE_REGIONS = {GeoZone.UNITED_STATES: "us-east-1", GeoZone.EUROPEAN_UNION: "eu-central-1"}


@dataclass
class Clock:
    """A clock tests move by hand."""

    now: datetime = field(default_factory=lambda: datetime(2026, 11, 29, 17, 20, tzinfo=UTC))
    # A delivery's arrival (``Stack.deliver``), per thread: concurrent deliveries each see their own.
    arrival: threading.local = field(default_factory=threading.local, repr=False, compare=False)

    def __call__(self) -> datetime:
        return getattr(self.arrival, "at", None) or self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def _latest_moment(event: dict[str, Any]) -> datetime:
    """The latest time a ``Batch Job State Change`` envelope speaks of (its ``time``, its detail's and
    its attempts' ``startedAt``/``stoppedAt``)."""
    detail = event.get("detail") or {}
    attempts = [a for a in detail.get("attempts") or [] if isinstance(a, dict)]
    moments = [
        int(source[key])
        for source in (detail, *attempts)
        for key in ("startedAt", "stoppedAt")
        if isinstance(source.get(key), int)
    ]
    if isinstance(event.get("time"), str):
        moments.append(int(datetime.fromisoformat(event["time"].replace("Z", "+00:00")).timestamp() * 1000))
    return datetime.fromtimestamp(max(moments, default=0) / 1000, tz=UTC)


@dataclass
class Stack:
    """The service on moto: settings, services, fakes and shortcuts to call the handlers."""

    settings: Settings
    services: Services
    batch: dict[GeoZone, RecordingBatchGateway]
    notifier: RecordingNotifier
    clock: Clock

    def api(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        from functions.handlers import api

        response = api.handler(api_event(method, path, **kwargs), FakeLambdaContext())
        body = response.get("body") or ""
        content_type = (response.get("headers") or {}).get("Content-Type", "")
        if not content_type:
            content_type = ((response.get("multiValueHeaders") or {}).get("Content-Type") or [""])[0]
        parsed = json.loads(body, parse_float=Decimal) if body and "json" in content_type else body
        return response["statusCode"], parsed

    def deliver(self, event: dict[str, Any]) -> dict[str, Any]:
        """Deliver a ``Batch Job State Change``. An event arrives after what it reports: the handler's
        clock is the latest of the stack's clock and the event's ``time``, ``startedAt`` and
        ``stoppedAt`` (its attempts' too), for this delivery only (the service clamps every Batch time
        into ``[submittedAt, arrival]``: an event from the clock's future would be cut short)."""
        from functions.handlers import batch_events

        self.clock.arrival.at = max(self.clock.now, _latest_moment(event))
        try:
            return batch_events.handler(event, FakeLambdaContext())
        finally:
            self.clock.arrival.at = None

    def tick(self) -> dict[str, Any]:
        from functions.handlers import meter
        from tests.events import scheduled_event

        return meter.handler(scheduled_event(), FakeLambdaContext())

    def start_running(self, body: dict[str, Any], account_id: str = "dev") -> tuple[str, str, int]:
        """Submit ``body`` and deliver RUNNING at the clock's now; DescribeJobs (the meter's
        reconciliation of jobs quiet for 10 minutes) says the same. Returns (job id, batch id, ms)."""
        status, job = self.api("POST", "/jobs", body=body, account_id=account_id)
        assert status == 202, job
        job_id = job["jobId"]
        stored = self.services.store.get_job(job_id)
        assert stored is not None
        assert stored.batch_job_id is not None
        batch_id = stored.batch_job_id
        started = int(self.clock().timestamp() * 1000)
        self.deliver(batch_event(job_id, batch_id, "RUNNING", created_at=started, started_at=started))
        self.batch[stored.geo_zone].known[batch_id] = BatchJobState(
            batch_job_id=batch_id,
            job_name=job_id,
            status="RUNNING",
            status_reason=None,
            created_at_ms=started,
            started_at_ms=started,
            stopped_at_ms=None,
            exit_code=None,
            log_stream_name="s",
            attempt_count=0,
        )
        return job_id, batch_id, started

    def add_account(
        self, account_id: str, credits: str, email: str | None = None, phone: str | None = None
    ) -> None:
        self.services.store.create_account(
            Account(account_id=account_id, credit_balance=Decimal(credits), email=email, phone=phone),
            self.clock(),
        )

    def balance(self, account_id: str) -> Decimal:
        account = self.services.store.get_account(account_id)
        assert account is not None
        return account.credit_balance

    def count_items(self, table: str) -> int:
        client = boto3.client("dynamodb", region_name="us-east-1")
        return int(client.scan(TableName=table, Select="COUNT")["Count"])

    def count_objects(self) -> int:
        total = 0
        for zone, zone_settings in self.settings.zones.items():
            s3 = boto3.client("s3", region_name=ZONE_REGIONS[zone])
            total += int(s3.list_objects_v2(Bucket=zone_settings.bucket).get("KeyCount", 0))
        return total


def make_settings() -> Settings:
    routes = {
        name: RouteSettings(job_queue=QUEUE_ARN, job_definition=JOB_DEFINITION_ARN)
        for name in MACHINE_CLASSES
    }
    return Settings(
        jobs_table="test-jobs",
        accounts_table="test-accounts",
        ledger_table="test-ledger",
        idempotency_table="test-idempotency",
        operations_table="test-operations",
        computes_table="test-computes",
        compute_prefix="remote-batch-test",
        quotas_table="test-quotas",
        email_topic_arn_prefix="arn:aws:sns:us-east-1:123456789012:test-email-",
        home_region="us-east-1",
        zones={
            zone: ZoneSettings(
                region=region, bucket=f"test-data-{region}", log_group="/aws/batch/job", routes=routes
            )
            for zone, region in ZONE_REGIONS.items()
        },
    )


class ReusedClients(boto3.Session):
    """A boto3 session that makes each client (service, region, config, ``AWS_*`` environment) once per
    test process.

    A botocore client is about 10 ms to make and holds no AWS state of its own (moto's stubber, a
    built-in handler, answers it whenever a mock is on), while every ``moto_stack`` made the same six
    to nine again: about half of an integration test's set-up. ``fresh_events`` gives each client back
    the event handlers it was made with, so a test that registers one (a request counter) leaves
    nothing behind for the next.
    """

    def __init__(self) -> None:
        super().__init__()
        self._clients: dict[tuple[str, str | None, object, tuple[tuple[str, str], ...]], tuple[Any, Any]] = {}

    def client(  # type: ignore[override]
        self, service_name: str, region_name: str | None = None, config: Any = None, **kwargs: Any
    ) -> Any:
        if kwargs:
            return super().client(service_name, region_name=region_name, config=config, **kwargs)  # type: ignore[call-overload]
        # A client takes its endpoint, credentials and region from the environment when it is made: a test
        # that points AWS_ENDPOINT_URL at a local stack must not leave a client that calls it.
        aws_environment = tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
        key = (service_name, region_name, config, aws_environment)
        made = self._clients.get(key)
        if made is None:
            client = super().client(service_name, region_name=region_name, config=config)  # type: ignore[call-overload]
            made = self._clients[key] = (client, copy.copy(client.meta.events))
        return made[0]

    def fresh_events(self) -> None:
        """Each client's event handlers as they were when it was made."""
        for client, events in self._clients.values():
            client.meta.events = copy.copy(events)


CLIENTS = ReusedClients()


def create_resources(settings: Settings) -> None:
    """Tables, buckets and log groups on moto, as the CDK app / local stack make them."""
    dynamodb = CLIENTS.client("dynamodb", region_name=settings.home_region)
    names = {
        "Jobs": settings.jobs_table,
        "Accounts": settings.accounts_table,
        "Ledger": settings.ledger_table,
        "Idempotency": settings.idempotency_table,
        "Operations": settings.operations_table,
        "Computes": settings.computes_table,
        "Quotas": settings.quotas_table,
    }
    for spec in ALL_TABLES:
        dynamodb.create_table(**create_table_request(spec, names[spec.logical_name]))
    for zone_settings in settings.zones.values():
        s3 = CLIENTS.client("s3", region_name=zone_settings.region)
        if zone_settings.region == "us-east-1":
            s3.create_bucket(Bucket=zone_settings.bucket)
        else:
            s3.create_bucket(
                Bucket=zone_settings.bucket,
                CreateBucketConfiguration={"LocationConstraint": zone_settings.region},
            )
        CLIENTS.client("logs", region_name=zone_settings.region).create_log_group(
            logGroupName=zone_settings.log_group
        )


@contextmanager
def moto_stack() -> Iterator[Stack]:
    """The service on in-process moto with dev (10000 credits, email) installed as the handlers'
    services, its settings in the environment (the ``stack`` fixture; the benchmarks use it too)."""
    with mock_aws():
        CLIENTS.fresh_events()
        settings = make_settings()
        create_resources(settings)
        clock = Clock()
        gateways = {zone: RecordingBatchGateway() for zone in ZONE_REGIONS}
        notifier = RecordingNotifier()
        services = bootstrap.build_services(
            settings,
            batch_gateways=gateways,
            notifier=notifier,
            clock=clock,
            resolver=FakeResolver(),
            session=CLIENTS,
        )
        bootstrap.install(services)
        for var, value in settings.to_environment().items():
            if var != "AWS_REGION":
                os.environ[var] = value
        built = Stack(settings, services, gateways, notifier, clock)
        built.add_account("dev", "10000", email="dev@example.com")
        try:
            yield built
        finally:
            bootstrap.install(None)


@pytest.fixture
def stack() -> Iterator[Stack]:
    """The service on moto with dev (10000 credits, email) installed as the handlers' services."""
    with moto_stack() as built:
        yield built


# -- AWS Batch resources on moto (fleet control reads and switches them) ---------------------------------
QUEUE_NAME = QUEUE_ARN.rsplit("/", 1)[-1]


def batch_resources(region: str) -> str:
    """A managed compute environment and the tests' job queue on moto; returns the environment's ARN."""
    ec2 = boto3.client("ec2", region_name=region)
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
    subnet = ec2.create_subnet(VpcId=vpc, CidrBlock="10.0.0.0/24")["Subnet"]["SubnetId"]
    group = ec2.create_security_group(GroupName="batch", Description="batch", VpcId=vpc)["GroupId"]
    iam = boto3.client("iam", region_name=region)
    role = iam.create_role(RoleName=f"batch-{region}", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    profile = iam.create_instance_profile(InstanceProfileName=f"batch-{region}")["InstanceProfile"]["Arn"]
    batch = boto3.client("batch", region_name=region)
    environment = batch.create_compute_environment(
        computeEnvironmentName="remote-batch-General-Spot",
        type="MANAGED",
        state="ENABLED",
        computeResources={
            "type": "EC2",
            "minvCpus": 0,
            "maxvCpus": 64,
            "instanceTypes": ["m7i.large"],
            "subnets": [subnet],
            "securityGroupIds": [group],
            "instanceRole": profile,
        },
        serviceRole=role,
    )["computeEnvironmentArn"]
    batch.create_job_queue(
        jobQueueName=QUEUE_NAME,
        state="ENABLED",
        priority=1,
        computeEnvironmentOrder=[{"order": 1, "computeEnvironment": environment}],
    )
    return environment


@pytest.fixture
def fleet_stack(stack: Stack) -> Stack:
    """The moto stack with the tests' job queue and a compute environment in both zones' regions."""
    for zone in stack.settings.zones.values():
        batch_resources(zone.region)
    return stack


@pytest.fixture
def one_request_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Serialize moto's handling of requests: moto is not thread-safe (its backends take no lock),
    while DynamoDB makes each request atomic; this gives moto that and no more, so threaded tests see
    DynamoDB's interleavings of whole requests (tests/integration/test_concurrent_settlement.py)."""
    lock = threading.Lock()
    process_request = BotocoreStubber.process_request

    def serialized(self: Any, request: Any) -> Any:
        with lock:
            return process_request(self, request)

    monkeypatch.setattr(BotocoreStubber, "process_request", serialized)


@pytest.fixture
def computes(stack: Stack) -> FakeComputeEnvironments:
    """The stack with an in-memory AWS Batch for dedicated computes in both zones."""
    fake = FakeComputeEnvironments()
    zones = {zone: replace(z, computes=fake) for zone, z in stack.services.zones.items()}
    stack.services = replace(stack.services, zones=zones)
    bootstrap.install(stack.services)
    return fake


def limit_basic_us(stack: Stack, limit: int) -> None:
    """Set the dev account's Basic quota in UnitedStates to ``limit`` vCPUs (as an admin)."""
    status, body = stack.api(
        "PUT",
        "/admin/accounts/dev/quotas",
        body={"quotas": [{"family": "Basic", "geoZone": "UnitedStates", "limit": limit}]},
        account_id="admin",
        groups="admin",
    )
    assert status == 200, body


def finish(stack: Stack, job_id: str) -> None:
    """Deliver the SUCCEEDED event of a job sent to AWS Batch (1 s of running time)."""
    stored = stack.services.store.get_job(job_id)
    assert stored is not None and stored.batch_job_id is not None
    stack.deliver(
        batch_event(
            job_id,
            stored.batch_job_id,
            "SUCCEEDED",
            started_at=1_764_000_001_000,
            stopped_at=1_764_000_002_000,
        )
    )


class RecordingQueue:
    """A ``DispatchQueue`` that keeps what was sent."""

    inline = False

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.admissions: list[str] = []

    def send(self, job_ids: Any) -> None:
        self.sent.extend(job_ids)

    def request_admission(self, account_ids: Any) -> None:
        self.admissions.extend(account_ids)


def sqs_event(job_ids: list[str], receive_count: int = 1) -> dict[str, Any]:
    return {
        "Records": [
            {
                "messageId": f"m{i}",
                "receiptHandle": f"r{i}",
                "body": json.dumps({"jobId": job_id}),
                "attributes": {
                    "ApproximateReceiveCount": str(receive_count),
                    "SentTimestamp": "1764000000000",
                    "SenderId": "test",
                    "ApproximateFirstReceiveTimestamp": "1764000000000",
                },
                "messageAttributes": {},
                "md5OfBody": "x",
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:dispatch",
                "awsRegion": "us-east-1",
            }
            for i, job_id in enumerate(job_ids)
        ]
    }


@pytest.fixture
def queued(stack: Stack) -> RecordingQueue:
    """The stack with a dispatch queue: POST /jobs answers without calling AWS Batch."""
    recording = RecordingQueue()
    bootstrap.install(replace(stack.services, dispatch=recording))
    stack.services = bootstrap.get_services()
    return recording
