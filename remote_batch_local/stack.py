"""The local stack, put together: moto, the Lambdas, the executor, the bus, the tickers, the gateway.

``start`` brings it up in dependency order and answers HTTP only once everything is ready
(restored state, built-in accounts, settled leftovers of the last run); ``stop`` takes it down in
the reverse order so that every running job is ended and settled, and the last snapshot is taken
after the last write.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import socket
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from werkzeug.serving import BaseWSGIServer, make_server

from functions.adapters.dynamodb.quotas import rekey_legacy_held_items
from functions.adapters.sns import SnsNotifier
from functions.adapters.tables import ALL_TABLES
from functions.adapters.webhook import WebhookSender
from functions.bootstrap import build_services, get_services, install, utc_now
from functions.domain.environments import BuildOutcome
from functions.domain.machine_classes import GeoZone
from functions.domain.runtime import PYTHON_VERSIONS
from functions.logic import environments
from functions.ports import BuildRequest, Services
from functions.settings import Settings
from remote_batch_local.accounts import LocalAccounts
from remote_batch_local.bus import DELIVERY_WORKERS, EventBus, matches_rule
from remote_batch_local.config import LocalConfig
from remote_batch_local.console import ConsoleFiles
from remote_batch_local.dispatch_queue import LocalDispatchQueue
from remote_batch_local.environments import LocalEnvironmentBuilder
from remote_batch_local.executor import AcceptedJobs, LocalBatchExecutor, LocalBatchGateway
from remote_batch_local.executor.computes import restore_dedicated_computes
from remote_batch_local.files import write_bytes_atomic
from remote_batch_local.gateway import ApiGateway
from remote_batch_local.http_errors import JsonErrorRequestHandler
from remote_batch_local.iam import JobCredentials
from remote_batch_local.job_pythons import LocalPythons, discover
from remote_batch_local.journal import Journal
from remote_batch_local.lambda_context import LOCAL_ACCOUNT_ID
from remote_batch_local.lambdas import LocalLambdas
from remote_batch_local.logstore import InProcessLogs, LogStore
from remote_batch_local.outbox import OutboxNotifier
from remote_batch_local.rate_limit import AccountRateLimiter
from remote_batch_local.recovery import recover_unfinished_jobs, remove_leftover_jobs, resume_undispatched
from remote_batch_local.recovery_accepted import resume_accepted_jobs
from remote_batch_local.resources import (
    NAME_PREFIX,
    AwsClients,
    MotoServer,
    local_settings,
    provision,
    table_name,
)
from remote_batch_local.sandbox import ProcessRegistry
from remote_batch_local.state import SnapshotScope, StateSnapshots
from remote_batch_local.state_disk import StateDisk, StateDiskUnavailable
from remote_batch_local.ticker import Ticker, scheduled_event
from remote_batch_local.tokens import TokenStore
from remote_batch_local.transport import InProcessTransport

logger = logging.getLogger(__name__)

METER_RULE = f"{NAME_PREFIX}-meter"
RECOVERY_DRAIN_SECONDS = 30.0
# The executor's accepted jobs, in the state folder (``executor.accepted``).
ACCEPTED_JOBS_FILE = "batch-accepted.jsonl"
BUS_DRAIN_SECONDS = 30.0
# Seconds between two "alive" stamps: how far a crash's time can be off when recovery bills a job.
ALIVE_INTERVAL = 1.0
EXECUTOR_STOP_SECONDS = 10.0
DISPATCH_STOP_SECONDS = 10.0
# Powertools in the in-process Lambdas: no X-Ray daemon, no CloudWatch metrics; warnings only in the
# console unless the person asks for more (POWERTOOLS_LOG_LEVEL=INFO).
POWERTOOLS_DEFAULTS = {
    "POWERTOOLS_SERVICE_NAME": "remote-batch",
    "POWERTOOLS_TRACE_DISABLED": "true",
    "POWERTOOLS_METRICS_DISABLED": "true",
    "POWERTOOLS_METRICS_NAMESPACE": "RemoteBatch",
    "POWERTOOLS_LOG_LEVEL": "WARNING",
}
# What a job's worker inherits from this process besides the AWS variables (the executor adds PATH).
_WORKER_INHERITS = ("HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "VIRTUAL_ENV")


@dataclass(frozen=True, slots=True)
class Started:
    """What a person needs once the stack is up."""

    endpoint: str
    tokens: dict[str, str]
    credentials_path: Path
    outbox_path: Path
    recovered_jobs: tuple[str, ...]


class LocalStack:
    """The whole service on this machine.

    Parameters
    ----------
    config : LocalConfig
        Home, port, intervals, executor size.
    """

    def __init__(self, config: LocalConfig) -> None:
        self._config = config
        self._moto: MotoServer | None = None
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()
        self._server: BaseWSGIServer | None = None
        self._server_thread: threading.Thread | None = None
        self._tickers: list[Ticker] = []
        self._executor: LocalBatchExecutor | None = None
        self._builder: LocalEnvironmentBuilder | None = None
        self._bus: EventBus | None = None
        self._dispatch_queue: LocalDispatchQueue | None = None
        self._lambdas: LocalLambdas | None = None
        self._snapshots: StateSnapshots | None = None
        self._log_store: LogStore | None = None
        # The home's filesystem, watched for every write of the stack (full or read-only: 503).
        self._disk = StateDisk(config.home, config.disk_reserve_bytes)
        # Set once the last run's leftovers are settled: from then on, a stop is this run's to record.
        self._recovered = False
        # The home's lock (``HOME_LOCK_FILE``), held from start to stop (the kernel drops it if the
        # process dies): one stack a home.
        self._home_lock: int | None = None
        self._reserved_port: socket.socket | None = None

    @property
    def _stopped_at_path(self) -> Path:
        return self._config.state_dir / "stopped_at"

    @property
    def _alive_path(self) -> Path:
        return self._config.state_dir / "alive"

    def start(self) -> Started:
        """Bring the stack up; returns once ``GET /health`` can be answered.

        Raises
        ------
        StateDiskUnavailable
            The home's filesystem is full (below the reserve) or read-only: nothing can be kept.
        PortInUse
            The HTTP port is taken.
        HomeInUse
            Another local stack runs on this home.
        """
        with self._disk.writing():
            self._disk.check()
            # Held until the gateway binds it: moto takes a free port of its own meanwhile, which must
            # not be this one (a restart on the port of a stack that had just died found moto on it).
            self._reserved_port = _reserve_port(self._config.host, self._config.port)
            try:
                return self._start()
            finally:
                self._release_port()

    def _release_port(self) -> None:
        """Let go of the HTTP port held while starting (the gateway binds it next)."""
        if self._reserved_port is not None:
            self._reserved_port.close()
            self._reserved_port = None

    def _start(self) -> Started:
        config = self._config
        self._home_lock = _lock_home(config.home)
        config.state_dir.mkdir(exist_ok=True)

        moto = MotoServer(Journal(config.state_dir / "journal", self._disk), self._disk)
        self._moto = moto
        endpoint = moto.start(config.home / "moto-credentials.json")
        logger.info("moto started endpoint=%s", endpoint)
        settings, pythons = _settings_and_pythons(config)
        os.environ.update(settings.to_environment())
        for name, value in POWERTOOLS_DEFAULTS.items():
            os.environ.setdefault(name, value)
        clients = AwsClients()
        if moto.app is not None:
            # The stack's own requests skip the sockets (its job workers still use HTTP).
            clients.session.events.register("before-send", InProcessTransport(endpoint, moto.app))
        provision(clients, settings)

        snapshots, last_alive = self._restore_state(moto, clients, settings)

        outbox = OutboxNotifier(
            SnsNotifier(
                clients.client("sns", settings.home_region),
                settings.email_topic_arn_prefix,
                # Locally a webhook receiver is a process on this machine (http:// allowed).
                WebhookSender(local=settings.allow_http_webhooks),
            ),
            config.home / "outbox.jsonl",
            disk=self._disk,
        )
        bus = EventBus(
            self._deliver_batch_event,
            config.home / "batch-events.jsonl",
            config.duplicate_events,
            workers=DELIVERY_WORKERS,
            rule=matches_rule,
            disk=self._disk,
        )
        self._bus = bus
        registry = ProcessRegistry(config.home / "processes")
        remove_leftover_jobs(registry)
        executor = LocalBatchExecutor(
            bus,
            lambda region: InProcessLogs(clients.client("logs", region), LOCAL_ACCOUNT_ID, region),
            _worker_environment(endpoint),
            vcpus=config.vcpus,
            registry=registry,
            credentials=JobCredentials(clients.client("iam", settings.home_region)),
            log_limit_bytes=config.log_limit_bytes,
            output_limit_bytes=config.output_limit_bytes,
            process_limit=config.process_limit,
            submit_tps=config.batch_submit_tps,
            warm_workers=config.warm_workers,
            accepted=AcceptedJobs(config.state_dir / ACCEPTED_JOBS_FILE, self._disk),
            disk=self._disk,
            pythons=pythons,
            environments=config.home / "environments",
        )
        self._executor = executor
        self._dispatch_queue = dispatch_queue = LocalDispatchQueue(
            self._dispatch, region=settings.home_region, account=LOCAL_ACCOUNT_ID, disk=self._disk
        )
        gateways = _zone_gateways(executor, settings)
        services = replace(
            build_services(
                settings,
                session=clients.session,
                batch_gateways=gateways,
                notifier=outbox,
                fleets=gateways,
                compute_environments={
                    zone: executor.compute_environments(z.region) for zone, z in settings.zones.items()
                },
                dispatch=dispatch_queue,
            ),
            idle_stop_minute=timedelta(seconds=config.idle_stop_minute),
            environment_builder=self._new_builder(config, settings, clients, pythons),
            # The local stack's packages may come from a mirror on this machine.
            allow_http_indexes=True,
        )
        install(services)
        self._resume_builds()
        restore_dedicated_computes(services, executor, last_alive)
        lambdas = LocalLambdas(settings.home_region)
        self._lambdas = lambdas
        bus.start()
        dispatch_queue.start()

        tokens = TokenStore(config.home / "tokens.json")
        accounts = LocalAccounts(services, tokens, utc_now, config.home / "credentials.json")
        built_in = accounts.ensure_built_in()

        # A clean stop writes its stamp; without it, the last run crashed.
        recovered = _recover(
            clients, settings, bus, last_alive, executor, crashed=not self._stopped_at_path.exists()
        )
        self._stopped_at_path.unlink(missing_ok=True)
        self._stamp_alive()
        self._recovered = True

        self._tickers = [
            Ticker("alive", ALIVE_INTERVAL, _writing_tick(self._disk, "alive", self._stamp_alive)),
            Ticker("meter", config.meter_interval, lambda: self._tick_meter(services, settings)),
            Ticker(
                "snapshot", config.snapshot_interval, _writing_tick(self._disk, "snapshot", snapshots.take)
            ),
        ]
        for ticker in self._tickers:
            ticker.start()

        gateway = ApiGateway(
            tokens=tokens,
            invoke_api=lambdas.invoke_api,
            events=bus,
            accounts=accounts,
            admin_environment=lambdas.api_environment,
            limiter=AccountRateLimiter(config.rate_limit, config.rate_burst),
            dispatch_stats=self._dispatch_numbers,
            disk=self._disk,
            console=ConsoleFiles(),
        )
        # Binding listens at once, but nothing is answered before serve_forever: a request that
        # arrives meanwhile waits, and credentials.json names the bound port before the first answer.
        self._release_port()
        server = make_server(
            config.host, config.port, gateway, threaded=True, request_handler=JsonErrorRequestHandler
        )
        self._server = server
        public = f"http://{config.host}:{server.server_port}"
        accounts.write_credentials(public, built_in)
        self._server_thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
        self._server_thread.start()
        logger.info("local stack ready endpoint=%s", public)
        return Started(
            endpoint=public,
            tokens=built_in,
            credentials_path=config.home / "credentials.json",
            outbox_path=outbox.path,
            recovered_jobs=tuple(recovered),
        )

    def _new_builder(
        self, config: LocalConfig, settings: Settings, clients: AwsClients, pythons: LocalPythons
    ) -> LocalEnvironmentBuilder:
        self._builder = _environment_builder(config, settings, clients, pythons)
        return self._builder

    def _resume_builds(self) -> None:
        """Build again what a previous run took but did not report (once the services are installed:
        a build's report goes through them)."""
        resumed = self._builder.resume() if self._builder is not None else 0
        if resumed:
            logger.info("environment builds resumed count=%d", resumed)

    def stop(self) -> None:
        """Stop serving, end every job (settled through its FAILED event), drain the bus, take the
        last snapshot, stop moto. Safe to call twice and after a partial start."""
        with self._stop_lock:
            if self._stopped.is_set():
                return
            self._stopped.set()
            logger.info("local stack stopping")
            if self._server is not None:
                self._server.shutdown()
                self._server.server_close()
            for ticker in self._tickers:
                ticker.stop()
            if self._dispatch_queue is not None:
                self._dispatch_queue.stop(timeout=DISPATCH_STOP_SECONDS)
            if self._executor is not None:
                self._executor.shutdown(timeout=EXECUTOR_STOP_SECONDS)
            if self._builder is not None:
                self._builder.close()
            if self._bus is not None:
                self._bus.stop(drain=True, timeout=BUS_DRAIN_SECONDS)
            if self._snapshots is not None:
                try:
                    with self._disk.writing():
                        if self._recovered:
                            write_bytes_atomic(self._stopped_at_path, datetime.now(UTC).isoformat().encode())
                        self._snapshots.take()
                except StateDiskUnavailable as refused:
                    # The journal keeps every acknowledged write: the next start replays it instead
                    # (and, without the stop's stamp, settles as after a crash).
                    logger.error("last snapshot not taken at stop error=%s", refused)
            install(None)
            if self._moto is not None:
                self._moto.stop()
            if self._log_store is not None:
                self._log_store.close()
            self._release_home()
            logger.info("local stack stopped")

    def _release_home(self) -> None:
        """Let the home's lock go (another stack may take the home from now on)."""
        if self._home_lock is not None:
            os.close(self._home_lock)
            self._home_lock = None

    # -- wiring ------------------------------------------------------------------------------------
    def _deliver_batch_event(self, envelope: dict[str, Any]) -> None:
        if self._lambdas is None:
            raise RuntimeError("the batch_events function is not loaded yet")
        self._lambdas.deliver_batch_event(envelope)

    def _dispatch(self, event: dict[str, Any]) -> Any:
        if self._lambdas is None:
            raise RuntimeError("the dispatcher function is not loaded yet")
        return self._lambdas.dispatch(event)

    def _dispatch_numbers(self) -> dict[str, Any]:
        """``GET /local/dispatch``: the dispatch queue's numbers and the Batch gateway's SubmitJob counts."""
        numbers: dict[str, Any] = {}
        if self._dispatch_queue is not None:
            stats = self._dispatch_queue.stats()
            numbers["dispatchQueue"] = {
                "sent": stats.sent,
                "deliveries": stats.deliveries,
                "waiting": stats.waiting,
                "deadLetters": stats.dead_letters,
            }
        if self._executor is not None:
            report = self._executor.submit_rate.report()
            numbers["submitJob"] = {
                "tps": report.tps,
                "accepted": report.accepted,
                "throttled": report.throttled,
                "maxInAnySecond": report.max_in_any_second,
            }
        return numbers

    def _tick_meter(self, services: Services, settings: Settings) -> None:
        if self._lambdas is not None:
            self._lambdas.tick_meter(scheduled_event(services.clock(), settings.home_region, METER_RULE))

    def _restore_state(
        self, moto: MotoServer, clients: AwsClients, settings: Settings
    ) -> tuple[StateSnapshots, datetime | None]:
        """Install the job log store, restore the last snapshot and replay the journal on it, then
        turn journaling on and bring held jobs of an older layout to the current one.

        Returns the snapshots and when the last run was last known alive: its clean stop, else its
        last "alive" stamp (at most ``ALIVE_INTERVAL`` before a crash), else its last snapshot.
        """
        config = self._config
        if moto.journaling is None or moto.moto_app is None:
            raise RuntimeError("moto's server did not start")
        scope = _snapshot_scope(settings)
        # The job log store goes into moto before any stream is created: job logs live on disk, not
        # in moto's memory.
        self._log_store = LogStore(config.home / "logs", set(scope.log_groups), self._disk)
        self._log_store.install()
        snapshots = StateSnapshots(
            config.state_dir,
            config.home / "s3",
            scope,
            clients,
            moto.write_counts,
            journal=moto.journaling.journal,
            moto_app=moto.moto_app,
            log_store=self._log_store,
            tables=moto.access.tables if moto.access is not None else None,
        )
        report = snapshots.restore()
        # From here on every acknowledged write is journaled before it is answered.
        moto.journaling.enable()
        self._snapshots = snapshots
        if report.taken_at is not None or report.journal.applied:
            logger.info(
                "state restored items=%d objects=%d log_streams=%d subscriptions=%d taken_at=%s "
                "journal_applied=%d journal_skipped=%d journal_refused=%d",
                report.items,
                report.objects,
                report.log_streams,
                report.subscriptions,
                report.taken_at.isoformat() if report.taken_at else None,
                report.journal.applied,
                report.journal.skipped,
                report.journal.refused,
            )
        # A home from before each family and zone had a range of held jobs of its own: rewrite those
        # (journaled) before anything admits or settles.
        dynamodb = clients.client("dynamodb", settings.home_region)
        if rekeyed := rekey_legacy_held_items(dynamodb, settings.quotas_table):
            logger.info("held jobs rewritten to their family's range count=%d", rekeyed)
        last_alive = self._read_stamp(self._stopped_at_path) or self._read_stamp(self._alive_path)
        return snapshots, last_alive or report.taken_at

    def _stamp_alive(self) -> None:
        """Record that the stack is alive now (read at the next start after a crash)."""
        write_bytes_atomic(self._alive_path, datetime.now(UTC).isoformat().encode())

    @staticmethod
    def _read_stamp(path: Path) -> datetime | None:
        try:
            text = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        try:
            return datetime.fromisoformat(text).astimezone(UTC)
        except ValueError:
            logger.warning("unreadable time stamp ignored path=%s", path)
            return None


class PortInUse(RuntimeError):
    """The HTTP port is taken (another local stack?)."""


class HomeInUse(RuntimeError):
    """Another local stack holds the home's lock: two stacks on one home would each replay, write and
    clean up the other's state (its jobs, its credentials file, its processes)."""


#: The file whose ``flock`` a running stack holds in its home.
HOME_LOCK_FILE = "stack.lock"


def _lock_home(home: Path) -> int:
    """Make the home (mode 0700) if it is new, take its exclusive lock (``flock``, released by the
    kernel when the process ends, so a crashed stack never leaves it held) and write this process's
    pid in it; the lock's descriptor.

    Raises ``HomeInUse`` naming the holder's pid when another stack has it.
    """
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(home / HOME_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError as exc:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise HomeInUse(
            f"{home} is in use by another local stack (pid {holder}); stop it, or set REMOTE_BATCH_HOME "
            "to another folder"
        ) from exc
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _reserve_port(host: str, port: int) -> socket.socket | None:
    """Hold ``port`` bound (not listening: a client polling it meanwhile is refused at once rather
    than left unanswered) until the gateway binds it, so the kernel's choice of a free port for moto
    never takes it; fail before any work when it cannot be bound (a server listens on it). None for
    port 0 (any free port). ``SO_REUSEADDR``: a port whose last stack's connections linger in
    TIME_WAIT is free."""
    if port == 0:
        return None
    reserved = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        reserved.bind((host, port))
    except OSError as exc:
        reserved.close()
        raise PortInUse(
            f"{host}:{port} is in use (another local stack?); set REMOTE_BATCH_PORT to another port"
        ) from exc
    return reserved


def _recover(
    clients: AwsClients,
    settings: Settings,
    bus: EventBus,
    last_alive: datetime | None,
    executor: LocalBatchExecutor,
    *,
    crashed: bool,
) -> list[str]:
    """After the last run (``last_alive``: its last sign of life, its clean stop or its last "alive"
    stamp; None: a fresh home), take back the jobs its executor accepted and had not ended when it
    crashed (``recovery_accepted``), then end the other unfinished jobs through their events, and
    wait a while for them to settle; the ids of the jobs settled."""
    taken_back: set[str] = set()
    accepted = executor.accepted
    if accepted is not None and last_alive is not None and crashed:
        taken_back = resume_accepted_jobs(executor, accepted, bus.emitted_for, last_alive)
    elif accepted is not None:
        # A clean stop ended its jobs itself (its arrays' unstarted children are the settlement's).
        accepted.forget({job.job_id for job in accepted.load()})
    if last_alive is None:
        return []
    # Settle first what the crashed run gave AWS Batch, then resume what it never did: resumed first, a
    # job (or an array's span) the new executor took at once would be read as the crashed run's.
    recovered = recover_unfinished_jobs(
        clients.client("dynamodb", settings.home_region),
        settings,
        bus.publish,
        last_alive,
        emitted_for=bus.emitted_for,
        redeliver=bus.replay,
        taken_back=taken_back,
    )
    resume_undispatched(clients.client("dynamodb", settings.home_region), settings, get_services())
    if recovered and not bus.wait_idle(RECOVERY_DRAIN_SECONDS):
        logger.warning("recovered jobs not settled yet count=%d", len(recovered))
    return recovered


def _writing_tick(disk: StateDisk, name: str, action: Callable[[], object]) -> Callable[[], None]:
    """``action`` for a ticker, its writes watched by ``disk``: a tick the disk refuses (full,
    read-only) is reported and logged in one line, the next tick tries again (the disk's own log says
    once when it starts and stops refusing)."""

    def tick() -> None:
        try:
            with disk.writing():
                action()
        except StateDiskUnavailable as refused:
            logger.debug("tick refused by the state disk ticker=%s error=%s", name, refused)

    return tick


def _zone_gateways(executor: LocalBatchExecutor, settings: Settings) -> dict[GeoZone, LocalBatchGateway]:
    """Each zone's gateway, its job queues (one per machine class) made in the executor's fleet."""
    for zone_settings in settings.zones.values():
        routes = {name: route.job_queue for name, route in zone_settings.routes.items()}
        executor.fleet.add_zone(zone_settings.region, routes)
    return {zone: executor.gateway(z.region, z.log_group) for zone, z in settings.zones.items()}


def _snapshot_scope(settings: Settings) -> SnapshotScope:
    return SnapshotScope(
        tables=tuple(table_name(spec) for spec in ALL_TABLES),
        buckets={zone.bucket: zone.region for zone in settings.zones.values()},
        log_groups=tuple(sorted({(zone.region, zone.log_group) for zone in settings.zones.values()})),
        topic_arn_prefix=settings.email_topic_arn_prefix,
        home_region=settings.home_region,
    )


def _environment_builder(
    config: LocalConfig, settings: Settings, clients: AwsClients, pythons: LocalPythons
) -> LocalEnvironmentBuilder:
    """The builder of environments under ``<home>/environments``, logging to the home region's zone
    (the first zone otherwise) and reporting each build's end to ``environments.record_build``."""
    zone, zone_settings = next(
        ((z, s) for z, s in settings.zones.items() if s.region == settings.home_region),
        next(iter(settings.zones.items())),
    )

    def report(request: BuildRequest, outcome: BuildOutcome) -> None:
        environments.record_build(
            get_services(),
            request.account_id,
            request.name,
            spec_hash=request.spec_hash,
            outcome=outcome,
            now=utc_now(),
            log_stream_name=request.log_stream_name,
        )

    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv") or "uv"
    return LocalEnvironmentBuilder(
        config.home / "environments",
        pythons=pythons,
        logs=clients.client("logs", zone_settings.region),
        log_group=zone_settings.log_group,
        zone=zone,
        report=report,
        uv=uv,
    )


def _settings_and_pythons(config: LocalConfig) -> tuple[Settings, LocalPythons]:
    """The in-process Lambdas' settings and the interpreter of each Python version jobs may choose
    (``job_pythons.discover``), said in the log: the versions found, the one a job naming none runs,
    and the versions missing."""
    pythons = discover(config.home, config.pythons)
    logger.info(
        "job pythons found default=%s %s",
        pythons.default(),
        " ".join(f"{version}={text!r}" for version, text in pythons.descriptions().items()) or "none",
    )
    missing = [version for version in PYTHON_VERSIONS if version not in pythons.by_version]
    if missing:
        logger.warning(
            "no interpreter for python %s: jobs naming it are refused (REMOTE_BATCH_LOCAL_PYTHONS adds some)",
            ", ".join(missing),
        )
    return local_settings(pythons=pythons), pythons


def _worker_environment(endpoint: str) -> dict[str, str]:
    environment = {name: os.environ[name] for name in _WORKER_INHERITS if os.environ.get(name)}
    environment.update(
        {
            "AWS_ENDPOINT_URL": endpoint,
            "MOTO_ACCOUNT_ID": LOCAL_ACCOUNT_ID,
            "PYTHONUNBUFFERED": "1",
            "MPLBACKEND": "Agg",
        }
    )
    return environment
