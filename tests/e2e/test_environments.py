"""Issue 24's second bullet on the local stack: an environment with ``six==1.16.0`` (the stack's own
venv has another six) builds with uv, a job in it sees exactly that six and the environment's Python;
the same spec under another name reuses the build (same hash, no second install in its log); a
requirement that does not exist ends Failed with the resolver's message.

The stack resolves from the package index the machine reaches (PyPI here); the test is skipped when
the index cannot be reached, saying so.
"""

from __future__ import annotations

import importlib.metadata
import time
from decimal import Decimal
from typing import Any

import pytest
import requests

from tests.e2e.conftest import Client, LocalStackProcess
from tests.local_stack import wait_for

pytestmark = pytest.mark.e2e

SPEC = {"python": "3.12", "requirements": ["six==1.16.0"]}


@pytest.fixture(scope="module", autouse=True)
def index_reachable() -> None:
    try:
        requests.head("https://pypi.org/simple/six/", timeout=10)
    except requests.RequestException as exc:
        pytest.skip(f"the package index cannot be reached from here: {exc}")


def _ready(dev: Client, name: str, timeout: float = 180) -> dict[str, Any]:
    def settled() -> dict[str, Any] | None:
        body: dict[str, Any] = dev.get(f"/environments/{name}").json()
        return body if body["status"] != "Building" else None

    return wait_for(settled, timeout, f"environment {name} built")


def _log(dev: Client, name: str) -> list[str]:
    return [e["message"] for e in dev.get(f"/environments/{name}/log").json()["events"]]


def test_a_job_sees_exactly_the_environments_packages_and_the_build_is_shared(
    stack: LocalStackProcess, dev: Client
) -> None:
    assert importlib.metadata.version("six") != "1.16.0"  # the stack's own six is another
    started = time.monotonic()
    created = dev.request("PUT", "/environments/six116", json=SPEC)
    assert created.status_code == 201, created.text
    ready = _ready(dev, "six116")
    first_build = time.monotonic() - started
    assert ready["status"] == "Ready", ready
    assert ready["packages"] == [{"name": "six", "version": "1.16.0"}]
    assert len(ready["hash"]) == 64 and ready["sizeBytes"] > 0

    job = dev.submit(
        {
            "code": "import six, sys\n{'six': six.__version__, 'python': list(sys.version_info[:2])}",
            "environment": "six116",
        }
    )
    assert job["environment"] == {"name": "six116", "hash": ready["hash"], "python": "3.12", "image": None}
    done = dev.wait_status(job["jobId"], timeout=60)
    assert done["status"] == "Succeeded", done
    assert dev.get(f"/jobs/{job['jobId']}/result").json()["result"] == {"six": "1.16.0", "python": [3, 12]}

    started = time.monotonic()
    again = dev.request("PUT", "/environments/six116-again", json=SPEC)
    assert again.status_code == 201, again.text
    shared = _ready(dev, "six116-again")
    cached_build = time.monotonic() - started
    print(f"\nfirst build {first_build:.1f} s, the same lock under another name {cached_build:.1f} s")
    assert shared["hash"] == ready["hash"]
    log = _log(dev, "six116-again")
    assert any(line.startswith(f"reusing build {ready['hash']}") for line in log), log
    assert not any(line.startswith("installed") for line in log), log


def test_a_requirement_that_does_not_exist_fails_with_the_resolvers_message(dev: Client) -> None:
    created = dev.request(
        "PUT",
        "/environments/nothing",
        json={"python": "3.12", "requirements": ["remote-batch-no-such-pkg==1.0"]},
    )
    assert created.status_code == 201, created.text
    failed = _ready(dev, "nothing")
    print(f"\n{failed['statusReason']}")
    assert failed["status"] == "Failed"
    assert failed["statusReason"].startswith("Environment nothing failed: No solution found when resolving")
    assert any("remote-batch-no-such-pkg" in line for line in _log(dev, "nothing"))
    refused = dev.post("/jobs", json={"code": "1", "environment": "nothing"})
    assert refused.status_code == 400 and refused.json()["error"]["field"] == "environment"


def test_jobs_submitted_while_their_environment_builds_wait_then_run_or_end_free(
    stack: LocalStackProcess, dev: Client
) -> None:
    # A job submitted right after its environment was asked for waits for the build, then runs in it.
    spec = {"python": "3.12", "requirements": ["six==1.15.0"]}
    assert dev.request("PUT", "/environments/six115", json=spec).status_code == 201
    waiting = dev.submit({"code": "import six\nsix.__version__", "environment": "six115"})
    assert waiting["status"] == "Queued"
    assert waiting["statusReason"] == "Building environment six115 (Python 3.12, 1 package)", waiting
    assert waiting["environment"] == {"name": "six115", "hash": None, "python": "3.12", "image": None}
    done = dev.wait_status(waiting["jobId"], timeout=180)
    assert done["status"] == "Succeeded", done
    assert done["environment"]["hash"] == _ready(dev, "six115")["hash"]
    assert dev.get(f"/jobs/{waiting['jobId']}/result").json()["result"] == "1.15.0"

    # A job given an inline spec that cannot resolve waits, then ends Terminated with 0 credits.
    broken = {"python": "3.12", "requirements": ["remote-batch-no-such-pkg-2==1.0"]}
    doomed = dev.submit({"code": "1", "environment": broken})
    assert doomed["statusReason"] == "Building the inline environment (Python 3.12, 1 package)", doomed
    ended = dev.wait_status(doomed["jobId"], timeout=180)
    print(f"\n{ended['statusReason']}")
    assert ended["status"] == "Terminated"
    assert ended["statusReason"].startswith("The inline environment failed: No solution found")
    assert Decimal(str(ended["creditsSpent"])) == Decimal("0")
    assert ended["startedAt"] is None
