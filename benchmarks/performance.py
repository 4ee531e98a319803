"""Issue 14's table in one run: requests and write units per job, S3 PUTs, the batch_events rate,
the handlers' cold import, the local round trip, a 200-job burst and the control-plane cost of a job.

Each figure is a ratio with the absolute figures it comes from (a shared machine's times vary; the
ratios of two things measured side by side vary much less):

1. **Job life** (in this process's children, moto in-process, the handlers called as Lambda calls them):
   ``POST /jobs`` of ``1`` (``notifications`` default, then ``"None"``), the Batch events of one attempt
   as AWS Batch emits them (PENDING, RUNNABLE, STARTING, RUNNING, SUCCEEDED: no event for SUBMITTED)
   and the tree's EventBridge rule delivers them (its pattern leaves out what cannot change a job),
   one meter tick while it runs, the settlement, ``GET /jobs/{id}/result``. Every AWS request is
   counted by service and operation (``benchmarks.capacity.RequestRecorder``, a wrapper on botocore's
   ``BaseClient._make_api_call``); DynamoDB write/read request units are COMPUTED from the item images
   and the tables' indexes (moto answers ``ReturnConsumedCapacity`` with a constant). Batch and SNS are
   fakes: notifications are counted as the sends the notifier was asked for.
2. **batch_events rate**: 40 jobs submitted, then their 200 events applied through the handler, timed,
   against conditional ``UpdateItem`` calls on the same moto table, timed before and after.
3. **Cold import** of each handler as deployed: a fresh interpreter, ``PYTHONDONTWRITEBYTECODE=1``,
   ``functions/`` as the tree's code asset holds it (built by the tree's own
   ``infra.lambda_bundle.build_code_asset``, with its unchecked-hash ``.pyc``, when the tree has one;
   else the sources alone, as the code asset was before: no ``.pyc``, compiled at every cold start;
   the third-party packages keep their ``.pyc``, as the layer does), vs ``import boto3`` the same way;
   and its **cold start**: the import and the first invocation (``GET /jobs``, a RUNNING event of an
   unknown job, a tick, an SQS message of an unknown job) against a moto server, vs boto3's import, one
   client made and one ``GetItem``. Medians of 7 rounds, each running every module of every tree in
   turn, timed inside the child (interpreter start excluded); the last tree once more the other way
   (its sources alone when it ships ``.pyc``, else compiled), so the ``.pyc``'s share shows.
4. **Local stack** (``python -m remote_batch_local`` in a child, fresh home, 2 vCPUs, every request
   moto answers counted by a wrapper on moto's WSGI application): the ``2 + 2`` round trip (POST →
   Succeeded → result) vs a bare ``python -c "print(2 + 2)"``; the S3 PUT-class requests for the keys
   of one ``4`` job; 200 concurrent ``2 + 2`` submits (``notifications: "None"``), wall time until all
   are final, submit latency p50/p99, HTTP 5xx answered to clients and 5xx moto answered to the stack
   (hidden by retries).
5. **Cost** of the cheapest job (1 credit): the job life's counts × ``benchmarks/aws_prices.toml``,
   with the worker's S3 PUTs of part 4, each Lambda call's duration as measured in part 1 (on moto,
   rounded up to the millisecond, × the function's memory from ``infra/constants.py``), an API Gateway
   request per api call, Batch's events free (AWS service events), one SNS publish and one email per
   email notification sent.

``--baseline REV`` runs every part twice in the same run: on ``git archive REV`` (``functions``,
``remote_batch``, ``worker``) and on the working tree, so "before" and "after" share the machine's load.
Results: ``benchmarks/results/latest.json`` and ``latest.md`` (``--out``).

Run: ``make bench`` (``BASELINE=<rev>`` for before/after), or
``python -m benchmarks.performance [--baseline REV] [--burst 200] [--parts life,rate,imports,local]``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
PARTS = ("life", "rate", "imports", "local")
HANDLERS = ("api", "batch_events", "meter")
# The cold import and cold start rows measure every Lambda.
IMPORT_HANDLERS = (*HANDLERS, "dispatcher")
IMPORT_RUNS = 7
RATE_JOBS = 40
RAW_UPDATES = 200
ROUND_TRIPS = 5
READY_SECONDS = 90
FINAL_STATUSES = frozenset({"Succeeded", "Failed", "Terminated"})


def _decimal_default(value: object) -> object:
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"not JSON: {value!r}")


# -- in-process moto: the job life and the batch_events rate ---------------------------------------------
def _offline_environment() -> None:
    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL"):
        os.environ.pop(var, None)
    os.environ.update(
        {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "POWERTOOLS_LOG_LEVEL": "ERROR",
            "POWERTOOLS_METRICS_NAMESPACE": "RemoteBatch",
            "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_METRICS_DISABLED": "true",
        }
    )
    import warnings

    warnings.filterwarnings("ignore", message="No application metrics to publish")


@contextmanager
def _moto_stack() -> Iterator[Any]:
    """The service on in-process moto, as the integration tests build it (``tests.integration.conftest``)."""
    from tests.integration.conftest import moto_stack

    with moto_stack() as stack:
        yield stack


def _timed(invocations: list[dict[str, Any]], function: str, call: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    result = call()
    invocations.append({"function": function, "seconds": time.perf_counter() - started})
    return result


def _rule_delivers(event: dict[str, Any]) -> bool:
    """True when the tree's EventBridge rule delivers ``event`` to batch_events (its pattern, as the
    local bus applies it); a tree without a content filter delivers every event."""
    try:
        from remote_batch_local.bus import matches_rule
    except ImportError:
        return True
    return matches_rule(event)


def _job_life(notifications: str | None) -> dict[str, Any]:
    """One Single job of ``1`` from submit to its result read, every AWS request counted."""
    import boto3

    from benchmarks.capacity import RequestRecorder
    from functions.logic.job_outcomes import output_key
    from tests.events import job_lifecycle
    from worker.entrypoint import publish
    from worker.runner import Outcome
    from worker.storage import JobStorage
    from worker.supervisor import JobRun

    with _moto_stack() as stack:
        recorder = RequestRecorder()
        invocations: list[dict[str, Any]] = []
        body: dict[str, Any] = {"code": "1"}
        if notifications is not None:
            body["notifications"] = notifications
        with recorder:
            status, job = _timed(invocations, "api", lambda: stack.api("POST", "/jobs", body=body))
            assert status == 202, job
            job_id = job["jobId"]
            with recorder.paused():
                stored = stack.services.store.get_job(job_id)
            assert stored is not None
            assert stored.batch_job_id is not None
            created = int(stack.clock().timestamp() * 1000)
            started, stopped = created + 5_000, created + 65_000
            events = job_lifecycle(
                job_id, stored.batch_job_id, created_at=created, started_at=started, stopped_at=stopped
            )
            for event in events:
                # As AWS Batch sends them: with the tags the submit gave the job (its account's).
                event["detail"]["tags"]["remote-batch:accountId"] = stored.account_id
            for event in events[:-1]:
                stack.clock.advance(1)
                if not _rule_delivers(event):
                    continue  # EventBridge's rule leaves it out: no Lambda call
                _timed(invocations, "batch_events", functools.partial(stack.deliver, event))
            stack.clock.advance(30)
            _timed(invocations, "meter", stack.tick)
            stack.clock.advance(30)
            final = _timed(invocations, "batch_events", lambda: stack.deliver(events[-1]))
            assert final.get("status") == "Succeeded", final
            with recorder.paused(), tempfile.TemporaryDirectory() as empty:
                # What the worker writes, by the measured tree's own worker code, so GET /result
                # reads that tree's layout (the worker's PUTs are counted on the local stack, part 4).
                zone = stack.settings.zones[stored.geo_zone]
                s3 = boto3.client("s3", region_name=zone.region)
                publish(
                    JobStorage(s3, zone.bucket),
                    output_key(job_id, ""),
                    JobRun.from_outcome(Outcome(result=1)),
                    Path(empty),
                )
            status, result = _timed(invocations, "api", lambda: stack.api("GET", f"/jobs/{job_id}/result"))
            assert status == 200, result
            assert result["result"] == 1, result
        with recorder.paused():
            settled = stack.services.store.get_job(job_id)
        sent = Counter(n.method for n in stack.notifier.sent)
        usage = recorder.usage.as_dict()
        usage.update(
            {
                "notifications": notifications or "Automatic (default)",
                "creditsSpent": str(settled.credits_spent if settled else None),
                "batchEvents": len(events),
                "lambdaInvocations": invocations,
                "notificationsSent": dict(sent),
            }
        )
        return usage


def part_life() -> dict[str, Any]:
    """The job life with the default notifications and with ``"None"``."""
    _offline_environment()
    return {"default": _job_life(None), "none": _job_life("None")}


def part_rate() -> dict[str, Any]:
    """batch_events: events applied per second vs conditional UpdateItem per second, same moto."""
    _offline_environment()
    import boto3

    from tests.events import job_lifecycle

    with _moto_stack() as stack:
        lives = []
        for _ in range(RATE_JOBS):
            status, job = stack.api("POST", "/jobs", body={"code": "1", "notifications": "None"})
            assert status == 202, job
            stored = stack.services.store.get_job(job["jobId"])
            assert stored is not None
            assert stored.batch_job_id is not None
            created = int(stack.clock().timestamp() * 1000)
            lives.append(
                job_lifecycle(
                    job["jobId"],
                    stored.batch_job_id,
                    created_at=created,
                    started_at=created + 5_000,
                    stopped_at=created + 65_000,
                )
            )
        client = boto3.client("dynamodb", region_name=stack.settings.home_region)  # same moto, same botocore
        table = stack.settings.jobs_table
        job_ids = [life[0]["detail"]["jobName"] for life in lives]

        def raw_rate() -> tuple[float, int]:
            started = time.perf_counter()
            for index in range(RAW_UPDATES):
                client.update_item(
                    TableName=table,
                    Key={"jobId": {"S": job_ids[index % len(job_ids)]}},
                    UpdateExpression="SET benchCounter = if_not_exists(benchCounter, :zero) + :one",
                    ConditionExpression="attribute_exists(jobId)",
                    ExpressionAttributeValues={":zero": {"N": "0"}, ":one": {"N": "1"}},
                )
            return RAW_UPDATES / (time.perf_counter() - started), RAW_UPDATES

        raw_before, _ = raw_rate()
        events = [
            event for step in zip(*lives, strict=True) for event in step
        ]  # interleaved, in order per job
        started = time.perf_counter()
        for event in events:
            stack.deliver(event)
        seconds = time.perf_counter() - started
        raw_after, _ = raw_rate()
        for job_id in job_ids:
            job = stack.services.store.get_job(job_id)
            assert job is not None
            assert job.status.value == "Succeeded", job
    events_per_second = len(events) / seconds
    raw = (raw_before + raw_after) / 2
    return {
        "events": len(events),
        "jobs": RATE_JOBS,
        "seconds": seconds,
        "eventsPerSecond": events_per_second,
        "rawConditionalUpdatesPerSecond": raw,
        "rawRuns": [raw_before, raw_after],
        "ratio": events_per_second / raw,
    }


# -- cold imports and cold starts --------------------------------------------------------------------------
_IMPORT_CHILD = """
import importlib, json, sys, time, uuid
started, started_cpu = time.perf_counter(), time.process_time()
module = importlib.import_module(sys.argv[1])
imported, imported_cpu = time.perf_counter(), time.process_time()
if sys.argv[1] == "boto3":
    client = module.client("dynamodb")
    client.get_item(TableName=sys.argv[2], Key={"jobId": {"S": "none"}})
else:
    class Context:
        function_name = "remote-batch-bench"
        function_version = "$LATEST"
        invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:remote-batch-bench"
        memory_limit_in_mb = 1024
        aws_request_id = str(uuid.uuid4())
        log_group_name = "/aws/lambda/remote-batch-bench"
        log_stream_name = "bench"
        def get_remaining_time_in_millis(self):
            return 30_000
    module.handler(json.loads(sys.argv[2]), Context())
answered, answered_cpu = time.perf_counter(), time.process_time()
print(json.dumps({
    "import": imported - started,
    "firstCall": answered - started,
    "importCpu": imported_cpu - started_cpu,
    "firstCallCpu": answered_cpu - started_cpu,
}))
"""


def _first_events() -> dict[str, dict[str, Any]]:
    """Each handler's first event: an authorized ``GET /jobs``, a RUNNING event of an unknown job, a
    tick, the dispatch queue's message of an unknown job."""
    from tests.events import api_event, batch_event, scheduled_event

    message = {
        "messageId": "m-unknown",
        "receiptHandle": "r-unknown",
        "body": json.dumps({"jobId": "job-unknown"}),
        "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1764000000000"},
        "messageAttributes": {},
        "md5OfBody": "",
        "eventSource": "aws:sqs",
        "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:remote-batch-dispatch",
        "awsRegion": "us-east-1",
    }
    return {
        "api": api_event("GET", "/jobs"),
        "batch_events": batch_event("j-unknown", "b-unknown", "RUNNING", started_at=1_764_000_000_000),
        "meter": scheduled_event(),
        "dispatcher": {"Records": [message]},
    }


def _code_asset(tree: Path, into: Path) -> tuple[Path, bool]:
    """``functions/`` of ``tree`` as its code asset holds it, under ``into``: built by the tree's own
    ``infra.lambda_bundle.build_code_asset`` (in a child importing that tree) when it has one, else the
    sources copied without ``.pyc``. Returns the folder to put on ``sys.path`` and whether it ships
    ``.pyc``."""
    bundle = tree / "infra" / "lambda_bundle.py"
    if bundle.is_file() and "def build_code_asset(" in bundle.read_text():
        built = subprocess.run(
            [
                sys.executable,
                "-P",
                "-c",
                "import sys; from pathlib import Path; from infra.lambda_bundle import build_code_asset; "
                "print(build_code_asset(Path(sys.argv[1]), Path(sys.argv[2])))",
                str(tree / "functions"),
                str(into),
            ],
            env={**os.environ, "PYTHONPATH": str(tree)},
            cwd=tree,
            check=True,
            capture_output=True,
            text=True,
        )
        return Path(built.stdout.strip().splitlines()[-1]), True
    shutil.copytree(tree / "functions", into / "functions", ignore=shutil.ignore_patterns("__pycache__"))
    return into, False


@contextmanager
def _moto_server() -> Iterator[tuple[str, dict[str, str]]]:
    """A moto server in this process with the service's tables, buckets and log groups; yields its
    endpoint and the settings' environment variables."""
    import logging

    from moto.server import ThreadedMotoServer

    from tests.integration.conftest import create_resources, make_settings

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    os.environ["AWS_ENDPOINT_URL"] = endpoint
    try:
        settings = make_settings()
        create_resources(settings)
        yield endpoint, settings.to_environment()
    finally:
        os.environ.pop("AWS_ENDPOINT_URL", None)
        server.stop()


def part_imports(trees: Sequence[Path]) -> list[dict[str, Any]]:
    """Medians (seconds) of each handler's cold import as deployed and of its cold start (import and
    first invocation, against a moto server), vs ``import boto3`` (and boto3's import, one client made
    and one ``GetItem``), in fresh interpreters; ``IMPORT_RUNS`` rounds, each running every module of
    every tree in turn (so a change of the machine's load falls on all alike). One result per tree."""
    _offline_environment()
    events = _first_events()
    with tempfile.TemporaryDirectory(prefix="rb-code-") as scratch, _moto_server() as (endpoint, settings):
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("PYTHON", "AWS_", "POWERTOOLS_", "REMOTE_"))
        }
        env.update(settings)
        env.update(
            {
                "PYTHONDONTWRITEBYTECODE": "1",
                "AWS_REGION": "us-east-1",
                "AWS_DEFAULT_REGION": "us-east-1",
                "AWS_ACCESS_KEY_ID": "testing",
                "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_ENDPOINT_URL": endpoint,
                "AWS_LAMBDA_FUNCTION_NAME": "remote-batch-bench",
                "POWERTOOLS_SERVICE_NAME": "remote-batch",
                "POWERTOOLS_METRICS_NAMESPACE": "RemoteBatch",
                "POWERTOOLS_TRACE_DISABLED": "true",
                "POWERTOOLS_LOG_LEVEL": "ERROR",
            }
        )
        codes: list[tuple[Path, bool]] = []
        for index, tree in enumerate(trees):
            codes.append(_code_asset(tree, Path(scratch) / str(index)))
        # The last tree once more the other way: its sources alone when its asset ships .pyc, else
        # compiled as the asset now is (unchecked-hash), so the .pyc's share of the import shows.
        last, last_compiled = codes[-1]
        other = Path(scratch) / "other"
        shutil.copytree(last, other, ignore=shutil.ignore_patterns("__pycache__"))
        if not last_compiled:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "compileall",
                    "-q",
                    "--invalidation-mode",
                    "unchecked-hash",
                    str(other),
                ],
                check=True,
            )
        codes.append((other, not last_compiled))
        modules = [("boto3", settings["REMOTE_BATCH_JOBS_TABLE"])]
        modules += [(f"functions.handlers.{name}", json.dumps(events[name])) for name in IMPORT_HANDLERS]
        samples: dict[tuple[int, str], list[dict[str, float]]] = {}
        for _ in range(IMPORT_RUNS):
            for index, (code, _compiled) in enumerate(codes):
                for module, argument in modules:
                    done = subprocess.run(
                        [sys.executable, "-c", _IMPORT_CHILD, module, argument],
                        env={**env, "PYTHONPATH": str(code)},
                        cwd=code,
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    samples.setdefault((index, module), []).append(
                        json.loads(done.stdout.strip().splitlines()[-1])
                    )
        shipped = [code for code, compiled in codes if compiled]
        assert not [p for p in Path(scratch).rglob("*.pyc") if not any(c in p.parents for c in shipped)], (
            "a .pyc was written"
        )

    def median(index: int, module: str, key: str) -> float:
        return statistics.median(sample[key] for sample in samples[(index, module)])

    results = []
    for index in range(len(trees) + 1):
        boto3_import, boto3_start = median(index, "boto3", "import"), median(index, "boto3", "firstCall")
        boto3_cpu, boto3_start_cpu = (
            median(index, "boto3", "importCpu"),
            median(index, "boto3", "firstCallCpu"),
        )
        handlers = {}
        for name in IMPORT_HANDLERS:
            module = f"functions.handlers.{name}"
            imported, started = median(index, module, "import"), median(index, module, "firstCall")
            imported_cpu, started_cpu = (
                median(index, module, "importCpu"),
                median(index, module, "firstCallCpu"),
            )
            handlers[name] = {
                "seconds": imported,
                "ratio": imported / boto3_import,
                "coldStartSeconds": started,
                "coldStartRatio": started / boto3_start,
                # CPU time of the child alone: what a shared machine's load changes least.
                "cpuSeconds": imported_cpu,
                "cpuRatio": imported_cpu / boto3_cpu,
                "coldStartCpuSeconds": started_cpu,
                "coldStartCpuRatio": started_cpu / boto3_start_cpu,
            }
        results.append(
            {
                "boto3Seconds": boto3_import,
                "boto3ColdStartSeconds": boto3_start,
                "boto3CpuSeconds": boto3_cpu,
                "boto3ColdStartCpuSeconds": boto3_start_cpu,
                "handlers": handlers,
                "runs": IMPORT_RUNS,
                "compiled": codes[index][1],
            }
        )
    *per_tree, other_way = results
    per_tree[-1]["otherWay"] = other_way
    return per_tree


# -- the local stack -----------------------------------------------------------------------------------
def _serve(counts_path: Path) -> None:
    """Child: the local stack with every request moto answers counted into ``counts_path`` (JSON)."""
    import re
    from urllib.parse import parse_qs

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    scope = re.compile(r"Credential=[^/]+/\d{8}/[^/]+/([^/]+)/aws4_request")
    lock = threading.Lock()
    counts: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    s3_writes: Counter[str] = Counter()
    original = DomainDispatcherApplication.__call__

    def classify(environ: dict[str, Any]) -> tuple[str, str]:
        from urllib.parse import unquote

        found = scope.search(environ.get("HTTP_AUTHORIZATION", "")) or scope.search(
            unquote(environ.get("QUERY_STRING", "")).replace("X-Amz-Credential=", "Credential=")
        )
        service = found.group(1) if found else "unsigned"
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        if target:
            return service, target.rpartition(".")[2]
        method = environ.get("REQUEST_METHOD", "")
        if service == "s3":
            query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
            path = environ.get("PATH_INFO", "")
            has_key = path.strip("/").count("/") >= 1
            if method == "PUT" and "partNumber" in query:
                return service, "UploadPart"
            if method == "POST" and "uploads" in query:
                return service, "CreateMultipartUpload"
            if method == "POST" and "uploadId" in query:
                return service, "CompleteMultipartUpload"
            names = {"PUT": "PutObject", "GET": "GetObject", "HEAD": "HeadObject", "DELETE": "DeleteObject"}
            if not has_key:
                return service, {"GET": "ListObjects"}.get(method, method + "Bucket")
            return service, names.get(method, method)
        return service, method

    def counted(self: Any, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        service, operation = classify(environ)
        name = f"{service}:{operation}"

        def recording_start(status: str, headers: Any, *rest: Any) -> Any:
            if status[:1] == "5":
                with lock:
                    errors[name] += 1
            return start_response(status, headers, *rest)

        with lock:
            counts[name] += 1
            if service == "s3" and operation in (
                "PutObject",
                "UploadPart",
                "CreateMultipartUpload",
                "CompleteMultipartUpload",
            ):
                s3_writes[f"{operation} {environ.get('PATH_INFO', '')}"] += 1
        return original(self, environ, recording_start)

    DomainDispatcherApplication.__call__ = counted  # type: ignore[method-assign]

    def dump() -> None:
        while True:
            with lock:
                document = {"requests": dict(counts), "errors": dict(errors), "s3Writes": dict(s3_writes)}
            temporary = counts_path.with_suffix(".tmp")
            temporary.write_text(json.dumps(document))
            temporary.replace(counts_path)
            time.sleep(0.2)

    threading.Thread(target=dump, name="bench-counts", daemon=True).start()
    from remote_batch_local import __main__ as local_main

    sys.exit(local_main.main([]))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Local:
    """A local stack in a child process (``python -m benchmarks.performance --serve``) and a client of it."""

    def __init__(self, tree: Path, home: Path) -> None:
        import requests

        self.counts_path = home / "bench-counts.json"
        port = _free_port()
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AWS_", "REMOTE_BATCH_", "MOTO_", "POWERTOOLS_"))
        }
        env.update(
            {
                "REMOTE_BATCH_HOME": str(home / "home"),
                "REMOTE_BATCH_PORT": str(port),
                "REMOTE_BATCH_LOCAL_VCPUS": "2",
                "PYTHONPATH": os.pathsep.join(dict.fromkeys([str(tree), str(REPO_ROOT)])),
            }
        )
        # -P: no working directory first on sys.path, so the tree's code (PYTHONPATH) is what runs.
        command = [sys.executable, "-P", "-m", "benchmarks.performance", "--serve", str(self.counts_path)]
        self.log = (home / "stack.log").open("wb")
        self.process = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.endpoint = f"http://127.0.0.1:{port}"
        self.session = requests.Session()
        deadline = time.monotonic() + READY_SECONDS
        while time.monotonic() < deadline:
            try:
                if requests.get(self.endpoint + "/health", timeout=2).status_code == 200:
                    token = json.loads((home / "home" / "credentials.json").read_text())["tokens"]["dev"]
                    self.headers = {"Authorization": f"Bearer {token}"}
                    return
            except requests.ConnectionError:
                pass
            if self.process.poll() is not None:
                break
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the local stack did not start (see {home / 'stack.log'})")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.log.close()

    def counts(self) -> dict[str, Any]:
        time.sleep(0.5)  # the child writes its counts every 0.2 s
        return dict(json.loads(self.counts_path.read_text()))

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        import requests

        return requests.request(method, self.endpoint + path, headers=self.headers, timeout=120, **kwargs)

    def submit(self, code: str) -> tuple[str, float, int]:
        started = time.perf_counter()
        response = self.call("POST", "/jobs", json={"code": code, "notifications": "None"})
        elapsed = time.perf_counter() - started
        job_id = response.json().get("jobId", "") if response.status_code == 202 else ""
        return job_id, elapsed, response.status_code

    def round_trip(self, code: str) -> tuple[str, float, Any]:
        """POST, poll every 10 ms until final, GET the result: (job id, seconds, result)."""
        started = time.perf_counter()
        job_id, _, status = self.submit(code)
        if status != 202:
            raise RuntimeError(f"submit answered {status}")
        while True:
            job = self.call("GET", f"/jobs/{job_id}").json()
            if job["status"] in FINAL_STATUSES:
                break
            time.sleep(0.01)
        result = self.call("GET", f"/jobs/{job_id}/result").json()
        return job_id, time.perf_counter() - started, result


def _bare_python() -> float:
    runs = []
    for _ in range(ROUND_TRIPS):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", "print(2 + 2)"], check=True, capture_output=True)
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def _delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: v - before.get(k, 0) for k, v in sorted(after.items()) if v - before.get(k, 0)}


def _quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def run_burst(stack: _Local, jobs: int, timeout: float = 900.0) -> dict[str, Any]:
    """``jobs`` concurrent ``POST /jobs`` of ``2 + 2`` (one thread each, released at once), then polled
    until every accepted job is final or ``timeout`` seconds passed since the release: wall time, submit
    latency p50/p99, HTTP statuses, 5xx to clients and 5xx moto answered to the stack."""
    before_burst = stack.counts()
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    job_ids: list[str] = []
    lock = threading.Lock()
    go = threading.Event()

    def client() -> None:
        go.wait()
        job, elapsed, status = stack.submit("2 + 2")
        with lock:
            latencies.append(elapsed)
            statuses[status] += 1
            if job:
                job_ids.append(job)

    threads = [threading.Thread(target=client) for _ in range(jobs)]
    for thread in threads:
        thread.start()
    started = time.perf_counter()
    go.set()
    for thread in threads:
        thread.join()
    pending = set(job_ids)
    poll_errors = 0
    while pending and time.perf_counter() - started < timeout:
        for job in list(pending):
            response = stack.call("GET", f"/jobs/{job}")
            if response.status_code >= 500:
                poll_errors += 1
            elif response.json().get("status") in FINAL_STATUSES:
                pending.discard(job)
            else:
                break  # the rest are queued behind this one: look again shortly
        time.sleep(0.25)
    wall = time.perf_counter() - started
    after_burst = stack.counts()
    moto_errors = _delta(after_burst["errors"], before_burst["errors"])
    server_errors = sum(v for k, v in statuses.items() if k >= 500) + poll_errors
    return {
        "jobs": jobs,
        "accepted": len(job_ids),
        "unfinished": len(pending),
        "wallSeconds": wall,
        "submitP50Seconds": _quantile(latencies, 0.5),
        "submitP99Seconds": _quantile(latencies, 0.99),
        "httpStatuses": {str(k): v for k, v in sorted(statuses.items())},
        "serverErrorsToClients": server_errors,
        "motoServerErrors": moto_errors,
        "serverErrors": server_errors + sum(moto_errors.values()),
    }


def part_local(tree: Path, burst: int) -> dict[str, Any]:
    """Round trip, S3 PUTs of a ``4`` job, and the burst, on one local stack of ``tree``."""
    with tempfile.TemporaryDirectory(prefix="rb-bench-") as home:
        stack = _Local(tree, Path(home))
        try:
            stack.round_trip("2 + 2")  # warm-up: first imports, first worker
            trips = []
            for _ in range(ROUND_TRIPS):
                _, seconds, result = stack.round_trip("2 + 2")
                assert result.get("result") == 4, result
                trips.append(seconds)
            bare = _bare_python()
            before = stack.counts()
            job_id, _, result = stack.round_trip("4")
            assert result.get("result") == 4, result
            after = stack.counts()
            puts = {k: v for k, v in _delta(after["s3Writes"], before["s3Writes"]).items() if job_id in k}
            burst_figures = run_burst(stack, burst)
        finally:
            stack.stop()
    return {
        "roundTrip": {
            "medianSeconds": statistics.median(trips),
            "runs": trips,
            "barePythonSeconds": bare,
            "ratio": statistics.median(trips) / bare,
        },
        "s3PutsFourJob": {"count": sum(puts.values()), "requests": puts},
        "burst": burst_figures,
    }


# -- cost -----------------------------------------------------------------------------------------------
def cost(life: dict[str, Any], s3_puts_worker: int) -> dict[str, Any]:
    """The control-plane cost of the job life (``part_life``'s figures of one variant) with the
    worker's S3 PUTs measured on the local stack (``s3_puts_worker``)."""
    from benchmarks.costing import ControlPlaneUsage, LambdaInvocation, job_cost, load_prices

    memory = _lambda_memory()
    requests = Counter(life["requests"])
    s3_put_ops = ("PutObject", "UploadPart", "CreateMultipartUpload", "CompleteMultipartUpload", "CopyObject")
    s3_puts = sum(v for k, v in requests.items() if k.startswith("s3:") and k.split(":")[1] in s3_put_ops)
    s3_gets = sum(v for k, v in requests.items() if k.startswith("s3:") and k.split(":")[1] not in s3_put_ops)
    invocations = tuple(
        LambdaInvocation(i["function"], memory[i["function"]], i["seconds"])
        for i in life["lambdaInvocations"]
    )
    sent = life["notificationsSent"]
    usage = ControlPlaneUsage(
        dynamodb_write_units=int(life["dynamodbWriteUnits"]),
        dynamodb_read_units=Decimal(life["dynamodbReadUnits"]),
        s3_puts=s3_puts + s3_puts_worker,
        s3_gets=s3_gets,
        lambda_invocations=invocations,
        api_requests=sum(1 for i in invocations if i.function == "api"),
        aws_service_events=life["batchEvents"],
        sns_publishes=sum(v for k, v in sent.items() if k != "Webhook"),
        deliveries=sent,
    )
    prices = load_prices()
    figures = job_cost(usage, prices)
    return {
        "lines": {k: str(v) for k, v in figures["lines"].items()},
        "totalUsd": str(figures["totalUsd"]),
        "creditShare": str(figures["creditShare"]),
        "pricesWritten": prices.written,
        "pricesStatus": prices.status,
        "s3Puts": usage.s3_puts,
        "s3Gets": usage.s3_gets,
        "lambdaGbSeconds": str(sum((i.billed_gb_seconds() for i in invocations), Decimal(0))),
    }


def _lambda_memory() -> dict[str, int]:
    from infra.constants import LAMBDA_MEMORY_MIB

    return dict(LAMBDA_MEMORY_MIB)


# -- orchestration ----------------------------------------------------------------------------------------
def _tree_of(revision: str, into: Path) -> Path:
    """``functions``, ``remote_batch``, ``worker`` and ``infra`` (its code asset's builder) of
    ``revision`` extracted under ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", revision, "functions", "remote_batch", "worker", "infra"],
        check=True,
        capture_output=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def _run_part(part: str, trees: Sequence[Path], burst: int) -> dict[str, Any]:
    """Run one part in a fresh interpreter importing the first of ``trees``' code first; returns its
    figures (``imports`` measures every tree, in children of its own)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([str(trees[0]), str(REPO_ROOT)]))
        # -P (Python 3.11): `-m` would put the working directory (this checkout) first on sys.path,
        # ahead of PYTHONPATH, and "before" would import this checkout's code, not the baseline's.
        command = [sys.executable, "-P", "-m", "benchmarks.performance", "--part", part]
        for tree in trees:
            command += ["--tree", str(tree)]
        command += [
            "--burst",
            str(burst),
            "--json",
            out.name,
        ]
        # The handlers' EMF metrics and logs go to stdout: the figures come back through the file.
        subprocess.run(command, cwd=REPO_ROOT, env=env, check=True, stdout=subprocess.DEVNULL)
        return dict(json.loads(Path(out.name).read_text()))


def _part_in_process(part: str, trees: Sequence[Path], burst: int) -> dict[str, Any]:
    tree = trees[0]
    if part == "life":
        return part_life()
    if part == "rate":
        return part_rate()
    if part == "imports":
        return {"trees": part_imports(trees)}
    if part == "local":
        return part_local(tree, burst)
    raise ValueError(part)


def _percent(value: str | float | Decimal) -> str:
    return f"{Decimal(str(value)) * 100:.1f}%"


def _import_figures(imports: dict[str, Any], prefix: str) -> str:
    """``api 1.40× / 1.35× (250 / 230 ms), ...; boto3 ...``: each handler's wall and CPU ratio to
    boto3's, for the import (``prefix`` "") or the cold start (``"coldStart"``)."""

    def key(name: str) -> str:
        return f"{prefix}{name[0].upper()}{name[1:]}" if prefix else name

    parts = ", ".join(
        f"{name} {v[key('ratio')]:.2f}× / {v[key('cpuRatio')]:.2f}× "
        f"({v[key('seconds')] * 1000:.0f} / {v[key('cpuSeconds')] * 1000:.0f} ms)"
        for name, v in imports["handlers"].items()
        if key("cpuRatio") in v
    )
    boto3 = "boto3ColdStart" if prefix else "boto3"
    wall, cpu = imports[boto3 + "Seconds"], imports[boto3 + "CpuSeconds"]
    return f"{parts}; boto3 {wall * 1000:.0f} / {cpu * 1000:.0f} ms"


def table_rows(figures: dict[str, Any]) -> list[tuple[str, str]]:
    """The issue's rows, one line each: (what, figure) for one tree's figures."""
    rows: list[tuple[str, str]] = []
    life = figures.get("life")
    if life:
        d, n = life["default"], life["none"]

        def ops(usage: dict[str, Any]) -> str:
            counts = {k.split(":")[1]: v for k, v in usage["requests"].items() if k.startswith("dynamodb:")}
            return ", ".join(f"{k} {v}" for k, v in counts.items())

        rows.append(
            (
                'DynamoDB requests, one Single job\'s life (default / "None")',
                f"{d['dynamodbRequests']} / {n['dynamodbRequests']} ({ops(d)} / {ops(n)})",
            )
        )
        rows.append(
            (
                'DynamoDB write units, that life, indexes included (default / "None"; computed)',
                f'{d["dynamodbWriteUnits"]} / {n["dynamodbWriteUnits"]} (by table/index, "None": '
                + ", ".join(f"{k} {v}" for k, v in n["writeUnitsByTableOrIndex"].items())
                + ")",
            )
        )
    local = figures.get("local")
    if local:
        puts = local["s3PutsFourJob"]
        names = sorted({k.split(" ", 1)[1].rsplit("/", 1)[-1] for k in puts["requests"]})
        rows.append(
            ("S3 PUTs for a job whose result is `4` (api + worker)", f"{puts['count']} ({', '.join(names)})")
        )
    rate = figures.get("rate")
    if rate:
        rows.append(
            (
                "batch_events events/s vs raw conditional UpdateItem/s (same moto)",
                f"{rate['ratio']:.2f}× ({rate['eventsPerSecond']:.1f} vs "
                f"{rate['rawConditionalUpdatesPerSecond']:.1f}/s)",
            )
        )
    imports = figures.get("imports")
    if imports:
        shipped = "functions/ with .pyc" if imports.get("compiled") else "sources without .pyc"
        rows.append(
            (
                "cold import vs `import boto3` (as deployed; wall, CPU)",
                _import_figures(imports, "") + f" ({shipped})",
            )
        )
        rows.append(
            (
                "cold start: import + first invocation on a moto server vs boto3 import + client + GetItem"
                " (wall, CPU)",
                _import_figures(imports, "coldStart"),
            )
        )
        other = imports.get("otherWay")
        if other:
            how = "with .pyc" if other["compiled"] else "from sources without .pyc"
            rows.append(
                (
                    f"the same tree's cold import {how} (the .pyc's share; wall, CPU)",
                    _import_figures(other, ""),
                )
            )
            rows.append(
                (f"the same tree's cold start {how} (wall, CPU)", _import_figures(other, "coldStart"))
            )
    if local:
        trip = local["roundTrip"]
        rows.append(
            (
                "local `2 + 2` round trip vs bare `python -c`",
                f"{trip['ratio']:.1f}× ({trip['medianSeconds']:.2f} s vs "
                f"{trip['barePythonSeconds'] * 1000:.0f} ms)",
            )
        )
        b = local["burst"]
        rows.append(
            (
                f"{b['jobs']} concurrent `2 + 2` jobs on the local stack (2 vCPUs)",
                f"{b['wallSeconds']:.1f} s wall, submit p50 {b['submitP50Seconds']:.2f} s, p99 "
                f"{b['submitP99Seconds']:.2f} s, {b['serverErrors']} server errors "
                f"({b['motoServerErrors'] or 'none'} from moto), {b['unfinished']} unfinished",
            )
        )
    costs = figures.get("cost")
    if costs:
        rows.append(
            (
                'control-plane cost of the cheapest job (1 credit = $0.001; default / "None")',
                f"{_percent(costs['default']['creditShare'])} / {_percent(costs['none']['creditShare'])} "
                f"(${Decimal(costs['default']['totalUsd']):.7f} / ${Decimal(costs['none']['totalUsd']):.7f})",
            )
        )
    return rows


def _markdown(results: dict[str, Any]) -> str:
    trees = list(results["trees"])
    lines = [
        f"# make bench: {results['startedAt']}",
        "",
        f"{results['machine']}; load average at start {results['loadAverage']:.1f}"
        " (a shared machine: read the ratios).",
        f"Prices: benchmarks/aws_prices.toml, written {results.get('pricesWritten', '?')}"
        f" ({results.get('pricesStatus', '')}).",
        "",
        "| what | " + " | ".join(trees) + " |",
        "|---|" + "---|" * len(trees),
    ]
    per_tree = {tree: dict(table_rows(results["trees"][tree])) for tree in trees}
    names = list(dict.fromkeys(name for tree in trees for name in per_tree[tree]))
    for name in names:
        lines.append(f"| {name} | " + " | ".join(per_tree[t].get(name, "") for t in trees) + " |")
    for tree in trees:
        costs = results["trees"][tree].get("cost")
        if costs:
            lines += [
                "",
                f"Cost lines ({tree}, default notifications, USD): "
                + ", ".join(f"{k} {Decimal(v):.7f}" for k, v in costs["default"]["lines"].items()),
            ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> None:
    """Run the parts on the working tree (and on ``--baseline``), print and write the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="a git revision measured in the same run, as 'before'")
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--out", type=Path, default=RESULTS_DIR)
    parser.add_argument("--part", choices=PARTS, help=argparse.SUPPRESS)
    parser.add_argument("--tree", type=Path, action="append", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        _serve(args.serve)
        return
    if args.part:
        figures = _part_in_process(args.part, args.tree, args.burst)
        args.json.write_text(json.dumps(figures, default=_decimal_default))
        return
    parts = [p for p in args.parts.split(",") if p]
    machine = (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores,"
        f" Python {platform.python_version()}"
    )
    results: dict[str, Any] = {
        "startedAt": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine,
        "loadAverage": os.getloadavg()[0],
        "trees": {},
    }
    head = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="rb-baseline-") as scratch:
        trees: list[tuple[str, Path]] = []
        if args.baseline:
            trees.append((f"before ({args.baseline})", _tree_of(args.baseline, Path(scratch))))
        trees.append(
            (f"after (working tree at {head})" if args.baseline else f"working tree at {head}", REPO_ROOT)
        )
        for label, _ in trees:
            results["trees"][label] = {}
        # Part by part, each on every tree in turn, so both see the same load (the cold imports
        # interleave the trees' runs in one part).
        for part in parts:
            if part == "imports":
                print(f"== {part}: {', '.join(label for label, _ in trees)}", flush=True)
                started = time.perf_counter()
                figures = _run_part(part, [tree for _, tree in trees], args.burst)["trees"]
                for (label, _), tree_figures in zip(trees, figures, strict=True):
                    results["trees"][label][part] = tree_figures
                print(f"   {time.perf_counter() - started:.0f} s", flush=True)
                continue
            for label, tree in trees:
                print(f"== {part}: {label}", flush=True)
                started = time.perf_counter()
                results["trees"][label][part] = _run_part(part, [tree], args.burst)
                print(f"   {time.perf_counter() - started:.0f} s", flush=True)
    from benchmarks.costing import load_prices

    prices = load_prices()
    results["pricesWritten"], results["pricesStatus"] = prices.written, prices.status
    for figures in results["trees"].values():
        if "life" in figures:
            worker_puts = 0
            if "local" in figures:
                worker_puts = sum(
                    v for k, v in figures["local"]["s3PutsFourJob"]["requests"].items() if "/outputs/" in k
                )
            figures["cost"] = {
                variant: cost(figures["life"][variant], worker_puts) for variant in ("default", "none")
            }
    results["finishedAt"] = datetime.now(UTC).isoformat(timespec="seconds")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "latest.json").write_text(json.dumps(results, indent=2, default=_decimal_default) + "\n")
    summary = _markdown(results)
    (args.out / "latest.md").write_text(summary)
    print(summary, flush=True)


if __name__ == "__main__":
    main()
