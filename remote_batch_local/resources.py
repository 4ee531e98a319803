"""The AWS side of the local stack: moto's server, the resources the service needs, its settings.

The names mirror the deployed stack with a ``remote-batch-local`` prefix; the account is
``000000000000`` (moto serves it when ``MOTO_ACCOUNT_ID`` says so), the same account the local
executor puts in its Batch ARNs.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import boto3
from botocore.config import Config
from botocore.credentials import Credentials
from moto.server import ThreadedMotoServer
from werkzeug.serving import make_server

from functions.adapters.tables import ALL_TABLES, TableSpec, create_table_request
from functions.domain.machine_classes import MACHINE_CLASSES, GeoZone
from functions.settings import RouteSettings, Settings, ZoneSettings
from remote_batch_local.files import write_bytes_atomic
from remote_batch_local.iam import MOTO_API_TOKEN_HEADER, IamGate, create_admin, new_api_token
from remote_batch_local.job_pythons import LocalPythons
from remote_batch_local.journal import Journal, JournalingApp
from remote_batch_local.lambda_context import LOCAL_ACCOUNT_ID
from remote_batch_local.moto_access import MotoAccess
from remote_batch_local.state_disk import StateDisk

logger = logging.getLogger(__name__)

NAME_PREFIX = "remote-batch-local"
HOME_REGION = "us-east-1"
ZONE_REGIONS: Mapping[GeoZone, str] = {
    GeoZone.UNITED_STATES: "us-east-1",
    GeoZone.EUROPEAN_UNION: "eu-central-1",
}
JOB_LOG_GROUP = "/aws/batch/job"
JOB_QUEUE_NAME = NAME_PREFIX
JOB_DEFINITION = "remote-batch-worker:1"
# Each account's email topic is named <this><digest> (functions/adapters/sns.py), made when its email is set.
EMAIL_TOPIC_NAME_PREFIX = f"{NAME_PREFIX}-email-"
RETENTION_DAYS = 14
DATA_PREFIXES = ("inputs/", "outputs/")
CREDENTIAL = "testing"

_CLIENT_CONFIG = Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=5, read_timeout=60)


def table_name(spec: TableSpec) -> str:
    """The local name of a table: ``remote-batch-local-<logical name, lower case>``."""
    return f"{NAME_PREFIX}-{spec.logical_name.lower()}"


def bucket_name(region: str) -> str:
    """The local bucket of a zone's region."""
    return f"{NAME_PREFIX}-{region}"


def local_settings(environ: Mapping[str, str] | None = None, pythons: LocalPythons | None = None) -> Settings:
    """The settings of the in-process Lambdas: local tables, topic, and both geo zones; and
    ``REMOTE_BATCH_ARRAY_SPAN_SIZE`` from ``environ`` (the process's by default) when it is set,
    as the deployed Lambdas take it (most children per AWS Batch array job). ``pythons``: the
    versions jobs run on are those found (``job_pythons.discover``); None: this interpreter's only."""
    environ = os.environ if environ is None else environ
    span_size = environ.get("REMOTE_BATCH_ARRAY_SPAN_SIZE")
    # Validated (1..10,000) by the settings model, as the Lambdas' environment is.
    optional: dict[str, Any] = {"array_span_size": span_size} if span_size else {}
    zones = {}
    for zone, region in ZONE_REGIONS.items():
        # One job queue per machine class, as deployed (the executor's LocalFleet makes them).
        arn = f"arn:aws:batch:{region}:{LOCAL_ACCOUNT_ID}"
        routes = {
            name: RouteSettings.model_validate(
                {
                    "jobQueue": f"{arn}:job-queue/{JOB_QUEUE_NAME}-{name}",
                    "jobDefinition": f"{arn}:job-definition/{JOB_DEFINITION}",
                }
            )
            for name in MACHINE_CLASSES
        }
        zones[zone] = ZoneSettings.model_validate(
            {"region": region, "bucket": bucket_name(region), "logGroup": JOB_LOG_GROUP, "routes": routes}
        )
    tables = {spec.logical_name: table_name(spec) for spec in ALL_TABLES}
    return Settings(
        jobs_table=tables["Jobs"],
        accounts_table=tables["Accounts"],
        ledger_table=tables["Ledger"],
        idempotency_table=tables["Idempotency"],
        operations_table=tables["Operations"],
        computes_table=tables["Computes"],
        compute_prefix=NAME_PREFIX,
        quotas_table=tables["Quotas"],
        # One dispatcher execution environment locally (LocalDispatchQueue delivers one batch at a time).
        dispatch_concurrency=1,
        email_topic_arn_prefix=f"arn:aws:sns:{HOME_REGION}:{LOCAL_ACCOUNT_ID}:{EMAIL_TOPIC_NAME_PREFIX}",
        home_region=HOME_REGION,
        zones=zones,
        # Locally a webhook receiver is a process on this machine, without a TLS certificate.
        allow_http_webhooks=True,
        **_python_settings(pythons),
        **optional,
    )


def _python_settings(pythons: LocalPythons | None) -> dict[str, Any]:
    """The Python versions jobs run on here: those found, the default, and each one's interpreter."""
    own = f"{sys.version_info.major}.{sys.version_info.minor}"
    if pythons is None or pythons.default() is None:
        return {"python_versions": (own,), "default_python": own}
    return {
        "python_versions": pythons.versions,
        "default_python": pythons.default(),
        "python_interpreters": pythons.descriptions(),
    }


# Operations that change what a snapshot keeps, by the X-Amz-Target prefix of the JSON protocols.
_JSON_WRITES = {
    "DynamoDB_20120810": (
        "dynamodb",
        frozenset(
            {
                "PutItem",
                "UpdateItem",
                "DeleteItem",
                "BatchWriteItem",
                "TransactWriteItems",
                "ExecuteStatement",
            }
            | {"BatchExecuteStatement", "ExecuteTransaction", "CreateTable", "DeleteTable", "UpdateTable"}
        ),
    ),
    "Logs_20140328": (
        "logs",
        frozenset({"PutLogEvents", "CreateLogStream", "DeleteLogStream", "DeleteLogGroup"}),
    ),
}
_CREDENTIAL_SCOPE = re.compile(r"Credential=[^/]+/[0-9]{8}/[^/]+/([a-z0-9-]+)/aws4_request")


def _written_service(environ: Mapping[str, Any]) -> str | None:
    """The service a moto request may have changed the state of (None for reads)."""
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        prefix, _, operation = target.partition(".")
        service, writes = _JSON_WRITES.get(prefix, ("", frozenset()))
        return service if operation in writes else None
    if environ.get("REQUEST_METHOD") not in ("PUT", "POST", "DELETE"):
        return None
    found = _CREDENTIAL_SCOPE.search(environ.get("HTTP_AUTHORIZATION", "")) or _CREDENTIAL_SCOPE.search(
        unquote(environ.get("QUERY_STRING", "")).replace("X-Amz-Credential=", "Credential=")
    )
    scope = str(found.group(1)) if found else ""
    return scope if scope in ("s3", "sns") else None


class WriteCounter:
    """WSGI middleware in front of moto: counts the completed requests that may write, per service.

    The count goes up after moto has answered, so a snapshot that reads the counts before it
    exports sees every write that finished before, and the next snapshot catches the rest.
    """

    def __init__(self, app: Callable[..., Any]) -> None:
        self._app = app
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        service = _written_service(environ)
        try:
            return self._app(environ, start_response)
        finally:
            if service is not None:
                with self._lock:
                    self._counts[service] = self._counts.get(service, 0) + 1

    def counts(self) -> dict[str, int]:
        """Writes seen so far, by service (``dynamodb``, ``s3``, ``logs``, ``sns``)."""
        with self._lock:
            return dict(self._counts)


class _CountingMotoServer(ThreadedMotoServer):
    """``ThreadedMotoServer`` serving ``app`` (moto's application behind our middlewares).

    Overrides the thread entry of moto 5's ThreadedMotoServer (same server, same handler), the only
    place the application can be wrapped.
    """

    def __init__(self, app: Callable[..., Any]) -> None:
        super().__init__(ip_address="127.0.0.1", port=0, verbose=False)
        self._app = app

    def _server_entry(self) -> None:
        from moto.moto_server.werkzeug_app import MotoRequestHandler

        app = self._app
        self._server = make_server(
            self._ip_address, self._port, app, threaded=True, request_handler=MotoRequestHandler
        )
        self._server_ready_event.set()
        self._server.serve_forever()


class MotoServer:
    """moto's server in this process, on a free port of 127.0.0.1, counting writes and journaling
    the acknowledged ones (``journal.JournalingApp``, off until ``journaling.enable()``).

    ``start`` points every boto3 client of this process at it: ``AWS_ENDPOINT_URL``, the keys of the
    stack's own IAM user (allowed everything), the home region, and ``MOTO_ACCOUNT_ID`` so resources
    live in the local account. From then on moto enforces IAM on every request (``IamGate``): jobs get
    users of their own (``JobCredentials``), allowed only their own inputs and outputs.

    Requests pass, in order: the write counter, the IAM gate (refused requests reach nothing
    further), the journal (which records the writes moto acknowledged), the service locks
    (``access``: moto's backends are not thread-safe; it also keeps the tables' images for the
    snapshots), moto. A journal replay goes straight to moto (``moto_app``): its records were
    authorized when first answered, and it runs before anything else uses moto.

    Parameters
    ----------
    journal : Journal
        Where acknowledged writes go.
    disk : StateDisk | None
        The home's filesystem: while it refuses writes, the journal refuses them before moto applies
        them (``JournalingApp``).
    """

    def __init__(self, journal: Journal, disk: StateDisk | None = None) -> None:
        self._server: Any = None
        self.endpoint = ""
        self._journal = journal
        self._disk = disk
        self.writes: WriteCounter | None = None
        # The server's whole application (every middleware, then moto), for in-process requests.
        self.app: Callable[..., Any] | None = None
        self.journaling: JournalingApp | None = None
        self.moto_app: Callable[..., Any] | None = None
        self.access: MotoAccess | None = None
        self.gate: IamGate | None = None
        self.admin: Credentials | None = None
        self.api_token = ""

    def write_counts(self) -> dict[str, int]:
        """Writes seen by the server so far, by service."""
        return self.writes.counts() if self.writes is not None else {}

    def start(self, credentials_path: Path) -> str:
        """Start the server, write ``credentials_path`` (``write_credentials``); returns its endpoint URL."""
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        os.environ["MOTO_ACCOUNT_ID"] = LOCAL_ACCOUNT_ID
        from moto.moto_server.werkzeug_app import create_backend_app

        from remote_batch_local import moto_keys, moto_transactions
        from remote_batch_local.moto_dispatch import RememberingDispatcher

        moto_transactions.install()
        moto_keys.install()
        self.moto_app = RememberingDispatcher(create_backend_app)
        self.access = MotoAccess(self.moto_app, LOCAL_ACCOUNT_ID, HOME_REGION)
        self.journaling = JournalingApp(self.access, self._journal, self._disk)
        self.gate = IamGate(self.journaling)
        self.writes = WriteCounter(self.gate)
        self.app = self.writes
        self._server = _CountingMotoServer(self.writes)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        os.environ.pop("AWS_PROFILE", None)
        os.environ.pop("AWS_SESSION_TOKEN", None)
        # Before enforcement, with moto's fake key: the stack's own user.
        bootstrap = boto3.client(
            "iam",
            region_name=HOME_REGION,
            endpoint_url=self.endpoint,
            aws_access_key_id=CREDENTIAL,
            aws_secret_access_key=CREDENTIAL,
        )
        self.admin = create_admin(bootstrap)
        self.api_token = new_api_token()
        self.gate.enable(self.admin, self.api_token)
        os.environ.update(
            {
                "AWS_ENDPOINT_URL": self.endpoint,
                "AWS_ACCESS_KEY_ID": self.admin.access_key,
                "AWS_SECRET_ACCESS_KEY": self.admin.secret_key,
                "AWS_DEFAULT_REGION": HOME_REGION,
                "AWS_REGION": HOME_REGION,
            }
        )
        self.write_credentials(credentials_path)
        return self.endpoint

    def write_credentials(self, path: Path) -> None:
        """Write the endpoint, the stack's keys and the ``/moto-api/`` token to ``path`` (mode 0600),
        for a person (or a test) inspecting moto: ``{"endpoint", "accessKeyId", "secretAccessKey",
        "motoApiToken", "motoApiHeader"}``."""
        if self.admin is None:
            raise RuntimeError("the moto server is not started")
        body = {
            "endpoint": self.endpoint,
            "accessKeyId": self.admin.access_key,
            "secretAccessKey": self.admin.secret_key,
            "motoApiToken": self.api_token,
            "motoApiHeader": MOTO_API_TOKEN_HEADER,
        }
        write_bytes_atomic(path, json.dumps(body, indent=2).encode(), mode=0o600)

    def stop(self) -> None:
        """Stop the server (everything it held is gone; the snapshot and journal keep what matters)."""
        if self._server is not None:
            self._server.stop()
            self._server = None
            self._journal.close()


class AwsClients:
    """boto3 clients on the moto server, one per (service, region), made on first use.

    boto3 clients are thread-safe once made; making them is not, hence the lock.
    """

    def __init__(self) -> None:
        self._session = boto3.Session()
        self._clients: dict[tuple[str, str], Any] = {}
        self._lock = threading.Lock()

    @property
    def session(self) -> boto3.Session:
        """The session the clients come from (for ``build_services``)."""
        return self._session

    def client(self, service: str, region: str = HOME_REGION) -> Any:
        """The client of ``service`` in ``region``."""
        with self._lock:
            key = (service, region)
            if key not in self._clients:
                make: Any = self._session.client  # typed per service literal; the name is dynamic here
                self._clients[key] = make(service, region_name=region, config=_CLIENT_CONFIG)
            return self._clients[key]


def provision(clients: AwsClients, settings: Settings) -> None:
    """Create the tables, buckets (with the 14-day lifecycle) and job log groups; each account's email
    topic is made when its email is set.

    Run once per start, on a fresh moto server.
    """
    dynamodb = clients.client("dynamodb", settings.home_region)
    for spec in ALL_TABLES:
        name = table_name(spec)
        dynamodb.create_table(**create_table_request(spec, name))
        if spec.ttl_attribute:
            dynamodb.update_time_to_live(
                TableName=name, TimeToLiveSpecification={"Enabled": True, "AttributeName": spec.ttl_attribute}
            )
    for zone in settings.zones.values():
        s3 = clients.client("s3", zone.region)
        if zone.region == "us-east-1":
            s3.create_bucket(Bucket=zone.bucket)
        else:
            s3.create_bucket(
                Bucket=zone.bucket, CreateBucketConfiguration={"LocationConstraint": zone.region}
            )
        s3.put_bucket_lifecycle_configuration(
            Bucket=zone.bucket,
            LifecycleConfiguration={
                "Rules": [
                    {
                        "ID": f"expire-{prefix.rstrip('/')}",
                        "Filter": {"Prefix": prefix},
                        "Status": "Enabled",
                        "Expiration": {"Days": RETENTION_DAYS},
                    }
                    for prefix in DATA_PREFIXES
                ]
            },
        )
        logs = clients.client("logs", zone.region)
        logs.create_log_group(logGroupName=zone.log_group)
        logs.put_retention_policy(logGroupName=zone.log_group, retentionInDays=RETENTION_DAYS)
