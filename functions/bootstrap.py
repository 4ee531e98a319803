"""The composition root: builds the adapters once per Lambda cold start.

Handlers get their ``Services`` from ``get_services()``. The local stack and tests build their own
(with ``build_services`` and a local Batch gateway / notifier, or fakes) and ``install`` them.

Each AWS client is made on its first use (``LazyClient``): making one loads its service model (10 to
40 ms each), and a function uses few of the up to 3 + 3 per zone it is given (the meter: DynamoDB,
rarely SNS or Batch; an api request: DynamoDB and one zone's S3).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import boto3
from botocore.config import Config

from functions.adapters.batch import AwsBatchGateway
from functions.adapters.batch_computes import AwsComputeEnvironments, SsmComputeTemplate
from functions.adapters.batch_definitions import CachedJobDefinitions
from functions.adapters.batch_fleet import AwsBatchFleet
from functions.adapters.dns import SocketResolver
from functions.adapters.dynamodb import DynamoJobStore
from functions.adapters.dynamodb.computes import DynamoComputeStore
from functions.adapters.dynamodb.environments import DynamoEnvironmentStore
from functions.adapters.dynamodb.operations import DynamoOperationsStore
from functions.adapters.images import RegistryImages
from functions.adapters.logs import CloudWatchLogReader
from functions.adapters.s3 import S3BlobStore
from functions.adapters.sns import SnsEmailSubscriptions, SnsNotifier
from functions.adapters.sqs import SqsDispatchQueue
from functions.adapters.webhook import WebhookSender
from functions.domain.machine_classes import GeoZone
from functions.logic.dispatch import send_now
from functions.logic.quotas import admit_and_enqueue
from functions.observability import MetricsEvents
from functions.ports import (
    BatchGateway,
    BatchRoute,
    Clock,
    ComputeEnvironments,
    DispatchQueue,
    EventCounter,
    FleetControl,
    HostResolver,
    InlineDispatch,
    Notifier,
    Services,
    ZoneServices,
)
from functions.settings import Settings, load_settings

# Standard retry mode: exponential backoff with jitter on throttling and 5xx (botocore's own).
_BOTO_CONFIG = Config(retries={"mode": "standard", "max_attempts": 5}, connect_timeout=5, read_timeout=30)
# Presigned URLs: SigV4 (buckets made since mid-2020 refuse SigV2) on the region's virtual-hosted
# endpoint, https://<bucket>.s3.<region>.amazonaws.com, us-east-1 included (botocore's default there is
# the global endpoint). The endpoint is left to botocore's resolver so AWS_ENDPOINT_URL (the local
# stack's moto server) still wins; an IP endpoint falls back to path style, which moto serves.
S3_CONFIG = _BOTO_CONFIG.merge(
    Config(
        signature_version="s3v4",
        s3={"addressing_style": "virtual", "us_east_1_regional_endpoint": "regional"},
    )
)


class LazyClient:
    """A boto3 client made by ``make`` on the first attribute read (an operation, ``exceptions``,
    ``meta``), then used as is: it stands where the adapters take a client.

    ``lock`` serializes the making (boto3 sessions are not thread-safe; the clients they make are),
    so share one lock among the clients of one session.
    """

    def __init__(self, make: Callable[[], Any], lock: threading.Lock) -> None:
        self._make = make
        self._lock = lock
        self._client: Any = None

    @property
    def made(self) -> bool:
        """Whether the client has been made (for tests)."""
        return self._client is not None

    def __getattr__(self, name: str) -> Any:
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    self._client = self._make()
                client = self._client
        return getattr(client, name)


def utc_now() -> datetime:
    """The wall clock as an aware UTC datetime (the only clock read of the Lambdas)."""
    return datetime.now(UTC)


def _admit_inline(services: Services, account_ids: Sequence[str]) -> None:
    """Each account's admission now, and the admitted jobs sent (``quotas.admit_and_enqueue``)."""
    for account_id in account_ids:
        admit_and_enqueue(services, account_id)


def inline_dispatch() -> InlineDispatch:
    """The dispatch where there is no queue (tests, the local stack's helpers, a deployment without
    ``REMOTE_BATCH_DISPATCH_QUEUE_URL``): the dispatcher's handling of each message runs within the call
    that sends it (``ports.InlineDispatch``)."""
    return InlineDispatch(send_jobs=send_now, admit_accounts=_admit_inline)


def build_services(
    settings: Settings,
    *,
    session: boto3.Session | None = None,
    batch_gateways: Mapping[GeoZone, BatchGateway] | None = None,
    notifier: Notifier | None = None,
    clock: Clock = utc_now,
    resolver: HostResolver | None = None,
    events: EventCounter | None = None,
    fleets: Mapping[GeoZone, FleetControl] | None = None,
    compute_environments: Mapping[GeoZone, ComputeEnvironments] | None = None,
    dispatch: DispatchQueue | None = None,
) -> Services:
    """Build every adapter from ``settings``.

    Parameters
    ----------
    settings : Settings
        Table names, topic, zones.
    session : boto3.Session | None
        The session to make clients from (default: a new one from the environment).
    batch_gateways : Mapping[GeoZone, BatchGateway] | None
        Replaces AWS Batch per zone (the local stack's executor); default: AWS Batch clients.
    notifier : Notifier | None
        Replaces the SNS notifier (the local stack wraps it to also write its outbox).
    clock : Clock
        Source of "now".
    resolver : HostResolver | None
        Resolves webhook hosts (default: the C library's resolver).
    events : EventCounter | None
        Where the logic counts its events (default: CloudWatch metrics through powertools).
    fleets : Mapping[GeoZone, FleetControl] | None
        Replaces the operators' AWS Batch switches per zone (the local executor's); default: AWS Batch.
    compute_environments : Mapping[GeoZone, ComputeEnvironments] | None
        Replaces AWS Batch's dedicated compute environments per zone (the local executor's); default:
        AWS Batch in each zone that has a ``computeTemplate``.
    dispatch : DispatchQueue | None
        Where admitted jobs go (the local stack's queue); default: the SQS queue of
        ``REMOTE_BATCH_DISPATCH_QUEUE_URL``, or without one ``inline_dispatch()`` (jobs are sent
        within the admitting call).
    """
    session = session or boto3.Session()
    lock = threading.Lock()

    def client(service: str, region: str, config: Config = _BOTO_CONFIG) -> Any:
        def make() -> Any:
            return session.client(service, region_name=region, config=config)  # type: ignore[call-overload]

        return LazyClient(make, lock)

    dynamodb = client("dynamodb", settings.home_region)
    store = DynamoJobStore(
        dynamodb,
        settings.jobs_table,
        settings.accounts_table,
        settings.ledger_table,
        clock=clock,
        quotas_table=settings.quotas_table,
    )
    if dispatch is None and settings.dispatch_queue_url:
        dispatch = SqsDispatchQueue(client("sqs", settings.home_region), settings.dispatch_queue_url)
    elif dispatch is None:
        dispatch = inline_dispatch()
    sns = client("sns", settings.home_region)
    resolver = resolver or SocketResolver()
    if notifier is None:
        webhooks = WebhookSender(resolver=resolver, local=settings.allow_http_webhooks)
        notifier = SnsNotifier(sns, settings.email_topic_arn_prefix, webhooks)
    zones: dict[GeoZone, ZoneServices] = {}
    for zone, zone_settings in settings.zones.items():
        region = zone_settings.region
        s3 = client("s3", region, S3_CONFIG)
        logs = client("logs", region)
        batch_client = client("batch", region)
        if batch_gateways is not None and zone in batch_gateways:
            gateway = batch_gateways[zone]
        else:
            # Image environments' jobs get their definitions registered per image and class.
            definitions = (
                CachedJobDefinitions(batch_client, dynamodb, settings.computes_table, region)
                if settings.images is not None
                else None
            )
            gateway = AwsBatchGateway(batch_client, definitions)
        fleet = fleets[zone] if fleets is not None and zone in fleets else AwsBatchFleet(batch_client)
        computes: ComputeEnvironments | None = None
        if compute_environments is not None and zone in compute_environments:
            computes = compute_environments[zone]
        elif zone_settings.compute_template_parameter is not None:
            tags = {"remote-batch:prefix": settings.compute_prefix}
            loader = SsmComputeTemplate(client("ssm", region), zone_settings.compute_template_parameter, tags)
            computes = AwsComputeEnvironments(batch_client, loader, tags)
        zones[zone] = ZoneServices(
            blobs=S3BlobStore(s3, zone_settings.bucket),
            batch=gateway,
            logs=CloudWatchLogReader(logs, zone_settings.log_group),
            routes={
                name: BatchRoute(job_queue=r.job_queue, job_definition=r.job_definition)
                for name, r in zone_settings.routes.items()
            },
            bucket=zone_settings.bucket,
            region=region,
            fleet=fleet,
            computes=computes,
        )
    return Services(
        store=store,
        notifier=notifier,
        subscriptions=SnsEmailSubscriptions(sns, settings.email_topic_arn_prefix, settings.email_topic_key),
        zones=zones,
        clock=clock,
        events=events or MetricsEvents(),
        idempotency_table=settings.idempotency_table,
        allowed_zones=tuple(zones),
        allow_http_webhooks=settings.allow_http_webhooks,
        sms_per_account_per_hour=settings.sms_per_account_per_hour,
        resolver=resolver,
        python=settings.python_runtime,
        array_span_size=settings.array_span_size,
        operations=DynamoOperationsStore(
            dynamodb,
            settings.operations_table,
            settings.jobs_table,
            settings.accounts_table,
            settings.ledger_table,
            clock=clock,
            quotas_table=settings.quotas_table,
        ),
        compute_store=DynamoComputeStore(
            dynamodb,
            settings.computes_table,
            settings.accounts_table,
            settings.ledger_table,
            settings.quotas_table,
        ),
        compute_prefix=settings.compute_prefix,
        environment_store=DynamoEnvironmentStore(dynamodb, settings.computes_table),
        images=(
            RegistryImages(settings.images.policy, lambda region: client("ecr", region))
            if settings.images is not None
            else None
        ),
        dispatch=dispatch,
    )


@lru_cache(maxsize=1)
def _from_environment() -> Services:
    return build_services(load_settings())


_installed: list[Services] = []


def install(services: Services | None) -> None:
    """Make ``services`` what every handler in this process uses (None: back to the environment's).

    For the local stack and tests; a deployed Lambda never calls it.
    """
    _installed.clear()
    if services is not None:
        _installed.append(services)


def get_services() -> Services:
    """The installed services, else those built from the environment (once per cold start).

    Raises
    ------
    functions.settings.SettingsError
        When the environment is incomplete.
    """
    return _installed[0] if _installed else _from_environment()
