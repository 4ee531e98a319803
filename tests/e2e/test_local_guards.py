"""The local stack's guards against a hostile job or client (a new user's trial, 2026-12-01).

- A fork bomb ends at the job's process limit (``REMOTE_BATCH_LOCAL_PROCESS_LIMIT``, scaled down
  here to 64 so the bomb stays small) within seconds, ``Terminated`` with ``Process limit of 64
  exceeded``, with none of its processes left, and the stack answers meanwhile.
- Request bodies shorter than their ``Content-Length`` (the client closed early) create nothing.
"""

from __future__ import annotations

import socket
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from decimal import Decimal

import psutil
import pytest
import requests

from tests.e2e.conftest import Client, LocalStackProcess, _free_port, wait_for

PROCESS_LIMIT = 64
MARKER = f"remote-batch-bomb-{uuid.uuid4().hex}"

# A bounded fork bomb: 2**10 = 1,024 processes at most. Every process but the first becomes a sleeper
# carrying the marker in its command line (so the test can look for leftovers); the first sleeps too.
FORK_BOMB = textwrap.dedent(
    f"""
    import os, sys, time
    first = os.getpid()
    print("bombing", flush=True)
    for _ in range(10):
        os.fork()
    if os.getpid() != first:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(120)", {MARKER!r}])
    time.sleep(120)
    """
)


def bomb_processes() -> list[psutil.Process]:
    """Live (not zombie) processes carrying this run's marker."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if MARKER in (process.info["cmdline"] or []) and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


@pytest.fixture(scope="module")
def guarded_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackProcess]:
    root = tmp_path_factory.mktemp("guarded-stack")
    process = LocalStackProcess(
        root / "home", _free_port(), {"REMOTE_BATCH_LOCAL_PROCESS_LIMIT": str(PROCESS_LIMIT)}
    )
    process.start()
    yield process
    for leftover in bomb_processes():  # never leave a test's processes behind, even when it failed
        leftover.kill()
    assert process.stop() == 0


def test_a_fork_bomb_ends_at_the_process_limit_and_leaves_nothing(guarded_stack: LocalStackProcess) -> None:
    dev: Client = guarded_stack.client("dev")
    before = dev.balance()
    health_seconds: list[float] = []
    stop = threading.Event()

    def probe_health() -> None:  # the stack's own threads keep answering while the bomb runs
        while not stop.is_set():
            started = time.monotonic()
            response = requests.get(f"{guarded_stack.endpoint}/health", timeout=30)
            assert response.status_code == 200
            health_seconds.append(time.monotonic() - started)
            time.sleep(0.05)

    # When a job forks toward 1,024 processes against a limit of 64
    job = dev.submit({"code": FORK_BOMB, "timeConstraint": 20})
    running = dev.wait_status(job["jobId"], ("Running", "Succeeded", "Failed", "Terminated"), timeout=30)
    prober = threading.Thread(target=probe_health, daemon=True)
    prober.start()
    done = dev.wait_status(job["jobId"], timeout=30)
    stop.set()
    prober.join(timeout=30)

    # Then it is ended within seconds for its process count, and charged the 60 s minimum (1 credit)
    assert running["status"] == "Running" or done == running
    assert done["status"] == "Terminated", done
    assert done["statusReason"] == f"Process limit of {PROCESS_LIMIT} exceeded"
    assert Decimal(str(done["creditsSpent"])) == Decimal("1")
    assert dev.balance() == before - Decimal("1")
    # and none of its processes is left
    wait_for(lambda: bomb_processes() == [] or None, 10, "the bomb's processes to be gone")
    # and its log ends with why
    lines = [event["message"] for event in dev.get(f"/jobs/{job['jobId']}/log").json()["events"]]
    assert lines[-1].startswith(f"Process limit of {PROCESS_LIMIT} exceeded: the job held "), lines
    # and the stack answered its health check within 2 s throughout
    assert health_seconds, "no health check ran"
    assert max(health_seconds) < 2.0, health_seconds


def _truncated_post(endpoint: str, token: str) -> None:
    """POST /jobs announcing 100 bytes, sending the 12 of a valid job, then closing."""
    host, port = endpoint.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            (
                "POST /jobs HTTP/1.1\r\n"
                f"Host: {host}:{port}\r\n"
                f"Authorization: Bearer {token}\r\n"
                "Content-Type: application/json\r\n"
                "Content-Length: 100\r\n"
                "\r\n"
            ).encode()
            + b'{"code":"1"}'
        )
        sock.shutdown(socket.SHUT_WR)
        sock.recv(65536)  # whatever the stack answers (or nothing), then close


def test_truncated_request_bodies_create_nothing(guarded_stack: LocalStackProcess) -> None:
    dev: Client = guarded_stack.client("dev")
    before_jobs = dev.get("/jobs", params={"limit": 100}).json()["jobs"]
    before_balance = dev.balance()

    # When 30 clients each announce 100 bytes, send the 12 of {"code":"1"} and close
    threads = [
        threading.Thread(target=_truncated_post, args=(guarded_stack.endpoint, guarded_stack.tokens["dev"]))
        for _ in range(30)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    # Then no job was created and nothing was charged (a whole request still works)
    time.sleep(1)
    after_jobs = dev.get("/jobs", params={"limit": 100}).json()["jobs"]
    assert [j["jobId"] for j in after_jobs] == [j["jobId"] for j in before_jobs]
    assert dev.balance() == before_balance
    created = dev.submit({"code": "1"})
    assert dev.wait_status(created["jobId"], timeout=30)["status"] == "Succeeded"


def test_a_truncated_body_is_answered_400_with_the_error_body(guarded_stack: LocalStackProcess) -> None:
    host, port = guarded_stack.endpoint.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        # When a client announces 100 bytes, sends 12 and closes its sending side
        sock.sendall(
            (
                "POST /jobs HTTP/1.1\r\n"
                f"Host: {host}:{port}\r\n"
                f"Authorization: Bearer {guarded_stack.tokens['dev']}\r\n"
                "Content-Type: application/json\r\nContent-Length: 100\r\nConnection: close\r\n\r\n"
            ).encode()
            + b'{"code":"1"}'
        )
        sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk

    # Then the stack answers 400 ValidationError saying what arrived
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0].split(b" ")[1] == b"400", answer
    assert b'"code": "ValidationError"' in body, body
    assert b"ended after 12 of the 100 bytes" in body, body
