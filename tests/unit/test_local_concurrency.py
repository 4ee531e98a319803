"""The local stack's concurrency: Lambda invocations at once, per-thread powertools state, moto's locks.

No timings: two things are shown to run at once by a barrier that only opens when both are inside
(it breaks after its timeout when they run one after the other).
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.event_handler import APIGatewayRestResolver
from aws_lambda_powertools.metrics import MetricUnit

from remote_batch_local.confinement import confine_logger, confine_metrics, confine_resolver
from remote_batch_local.lambda_context import LocalLambdaContext
from remote_batch_local.lambdas import _Function
from remote_batch_local.moto_access import MotoAccess, ReadWriteLock, is_read, request_service

BARRIER_SECONDS = 30


def _in_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    """Run ``work(0..count-1)`` in threads at once; their results (an exception re-raised)."""
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            results[index] = work(index)
        except BaseException as exc:  # re-raised below, in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def _context(name: str) -> LocalLambdaContext:
    return LocalLambdaContext(
        function_name=name, memory_limit_in_mb=128, timeout_seconds=3, region="us-east-1"
    )


def test_two_invocations_of_one_function_run_at_once() -> None:
    barrier = threading.Barrier(2, timeout=BARRIER_SECONDS)

    def handler(event: dict[str, Any], context: Any) -> str:
        barrier.wait()  # both invocations are inside the handler here
        return str(event["n"])

    function = _Function("api", handler, "us-east-1")

    assert _in_threads(2, lambda i: function.invoke({"n": i})) == ["0", "1"]
    assert (function.running, function.peak) == (0, 2)


def test_concurrent_api_requests_each_see_their_own_event_and_context() -> None:
    # Given a resolver whose route waits until both requests are in it, then reads the request state
    # powertools keeps on the resolver (and on BaseRouter)
    app = APIGatewayRestResolver()
    barrier = threading.Barrier(2, timeout=BARRIER_SECONDS)

    @app.get("/echo/<name>")
    def echo(name: str) -> dict[str, Any]:
        barrier.wait()
        return {
            "name": name,
            "path": app.current_event.path,
            "function": app.lambda_context.function_name,
            "route": app.context["_route_args"]["name"],
        }

    confine_resolver(app)

    def request(index: int) -> dict[str, Any]:
        event = {"httpMethod": "GET", "path": f"/echo/n{index}", "requestContext": {"stage": "prod"}}
        return app.resolve(event, _context(f"f{index}"))  # type: ignore[arg-type]

    # When two requests are resolved at once
    answers = _in_threads(2, request)

    # Then each answered from its own event, route arguments and Lambda context
    assert [json.loads(a["body"]) for a in answers] == [
        {"name": f"n{i}", "path": f"/echo/n{i}", "function": f"f{i}", "route": f"n{i}"} for i in range(2)
    ]
    assert confine_resolver(app) is confine_resolver(app)  # confining twice changes nothing


def test_concurrent_invocations_keep_their_own_log_keys_and_metrics() -> None:
    logger = Logger(service="confinement-test", stream=io.StringIO())
    metrics = Metrics(namespace="ConfinementTest", service="confinement-test")
    # Powertools keeps one metric set for every Metrics instance: drop what earlier tests left in it.
    metrics.clear_metrics()
    confine_logger(logger)
    confine_metrics(metrics)
    barrier = threading.Barrier(2, timeout=BARRIER_SECONDS)

    def invocation(index: int) -> tuple[Any, set[str]]:
        logger.append_keys(invocation=index)
        metrics.add_metric(name=f"Metric{index}", unit=MetricUnit.Count, value=1)
        barrier.wait()  # both have added their key and metric
        return logger.get_current_keys()["invocation"], set(metrics.provider.metric_set)

    assert _in_threads(2, invocation) == [(0, {"Metric0"}), (1, {"Metric1"})]


def test_read_write_lock_lets_readers_in_together() -> None:
    lock = ReadWriteLock()
    barrier = threading.Barrier(2, timeout=BARRIER_SECONDS)

    def read(_: int) -> bool:
        with lock.reading():
            barrier.wait()  # both readers hold it
            return True

    assert _in_threads(2, read) == [True, True]
    with lock.writing():  # free again once both readers left
        pass


def _environ(target: str = "", method: str = "POST", scope: str = "", body: bytes = b"{}") -> dict[str, Any]:
    environ: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": "/",
        "QUERY_STRING": "",
        "wsgi.input": io.BytesIO(body),
        "CONTENT_LENGTH": str(len(body)),
    }
    if target:
        environ["HTTP_X_AMZ_TARGET"] = target
    if scope:
        environ["HTTP_AUTHORIZATION"] = (
            f"AWS4-HMAC-SHA256 Credential=AKIA/20261201/us-east-1/{scope}/aws4_request, SignedHeaders=host"
        )
    return environ


def test_each_moto_request_holds_its_own_service_lock_and_iam_shared() -> None:
    # Given moto behind the locks, as a fake that records which locks are held while it answers
    seen: list[tuple[bool, bool]] = []
    access: MotoAccess

    def moto(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        seen.append((access.lock_of("dynamodb").locked(), access.lock_of("s3").locked()))
        start_response("200 OK", [])
        return [b"{}"]

    access = MotoAccess(moto, "000000000000", "us-east-1")
    start = lambda status, headers, exc_info=None: None  # noqa: E731

    # When a DynamoDB request and an S3 GET are answered
    access(_environ("DynamoDB_20120810.Query"), start)
    access(_environ(method="GET", scope="s3", body=b""), start)

    # Then each held its own service's lock only, and released it
    assert seen == [(True, False), (False, True)]
    assert not access.lock_of("dynamodb").locked() and not access.lock_of("s3").locked()


@pytest.mark.parametrize(
    ("environ", "expected", "read"),
    [
        (_environ("DynamoDB_20120810.PutItem"), ("dynamodb", "PutItem"), False),
        (_environ("DynamoDB_20120810.Scan"), ("dynamodb", "Scan"), True),
        (_environ("Logs_20140328.PutLogEvents"), ("logs", "PutLogEvents"), False),
        (_environ(method="GET", scope="s3", body=b""), ("s3", "GET"), True),
        (_environ(method="PUT", scope="s3", body=b""), ("s3", "PUT"), False),
        (_environ(scope="iam", body=b"Action=CreateUser&UserName=u"), ("iam", "CreateUser"), False),
        (_environ(scope="iam", body=b"Action=GetUser&UserName=u"), ("iam", "GetUser"), True),
        (_environ(scope="sns", body=b"Action=ListTopics"), ("sns", "ListTopics"), True),
    ],
)
def test_requests_are_classified_by_service_and_operation(
    environ: dict[str, Any], expected: tuple[str, str], read: bool
) -> None:
    body = environ["wsgi.input"].getvalue()
    assert request_service(environ, body) == expected
    assert is_read(*expected) is read
