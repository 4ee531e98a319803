"""Issue 10 acceptance: every process of a job dies with it, whatever it did to escape.

Five jobs each start a child that tries to outlive them (a new session, a cleared environment, a
double fork, SIGTERM ignored, and all of these at once), then sleep. The children carry a marker in
their command line that is unique to this test run; after an abort, and after ``kill -9`` of the
stack and a restart, none may be left.
"""

from __future__ import annotations

import json
import signal
import textwrap
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psutil
import pytest
import requests

from tests.e2e.conftest import Client, LocalStackProcess, _free_port, wait_for

MARKER = f"remote-batch-escapee-{uuid.uuid4().hex}"

# The escaping child: python sleeping 600 s with the marker as its argument (SIGTERM ignored if asked).
ESCAPE_JOB = textwrap.dedent(
    """
    import os, subprocess, sys, time
    VARIANT = {variant!r}
    MARKER = {marker!r}
    sleeper = "import signal, sys, time\\n"
    if VARIANT in ("sigterm-ignored", "all"):
        sleeper += "signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
    sleeper += "time.sleep(600)"
    child = [sys.executable, "-c", sleeper, MARKER]
    if VARIANT in ("env-i", "all"):
        child = ["env", "-i", *child]
    if VARIANT in ("double-fork", "all"):
        if os.fork() == 0:
            if VARIANT == "all":
                os.setsid()
            if os.fork() == 0:
                os.execvp(child[0], child)
            os._exit(0)
        os.wait()
    else:
        subprocess.Popen(child, start_new_session=VARIANT == "new-session", stdin=subprocess.DEVNULL)
    print("escaped", VARIANT, flush=True)
    time.sleep(600)
    """
)
VARIANTS = ("new-session", "env-i", "double-fork", "sigterm-ignored", "all")


def escapees() -> list[psutil.Process]:
    """Live (not zombie) processes carrying this run's marker."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if MARKER in (process.info["cmdline"] or []) and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


@pytest.fixture(scope="module")
def escape_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackProcess]:
    """A stack of its own (it is killed with SIGKILL), with room for the five jobs at once."""
    root = tmp_path_factory.mktemp("escape-stack")
    process = LocalStackProcess(root / "home", _free_port(), {"REMOTE_BATCH_LOCAL_VCPUS": str(len(VARIANTS))})
    process.start()
    yield process
    for leftover in escapees():  # never leave a test's processes behind, even when it failed
        leftover.kill()
    assert process.stop() == 0


def _start_escapes(client: Client) -> dict[str, str]:
    """Submit one job per variant; returns variant → job id once every child has escaped."""
    jobs = {
        variant: client.submit({"code": ESCAPE_JOB.format(variant=variant, marker=MARKER)})["jobId"]
        for variant in VARIANTS
    }
    for job_id in jobs.values():
        client.wait_status(job_id, ("Running",), timeout=30)
    wait_for(lambda: len(escapees()) == len(VARIANTS), 30, f"{len(VARIANTS)} escaped children")
    return jobs


def test_escaped_processes_die_when_their_jobs_are_aborted(escape_stack: LocalStackProcess) -> None:
    client = escape_stack.client("dev")
    jobs = _start_escapes(client)
    assert len(escapees()) == 5

    for job_id in jobs.values():
        response = client.post(f"/jobs/{job_id}/abort")
        assert response.status_code == 202, response.text
    for job_id in jobs.values():
        assert client.wait_status(job_id, timeout=30)["status"] == "Terminated"

    assert escapees() == []


def test_escaped_processes_die_after_kill_9_and_folders_are_removed_at_restart(
    escape_stack: LocalStackProcess,
) -> None:
    client = escape_stack.client("dev")
    jobs = _start_escapes(client)
    escaped = escapees()
    records = [json.loads(p.read_text()) for p in (escape_stack.home / "processes").glob("*.json")]
    folders = [Path(record["workdir"]) for record in records]
    assert len(records) == 5
    assert all(folder.is_dir() for folder in folders)
    assert all(len(record["processes"]) == 2 for record in records)  # the sandbox and its namespace's init

    escape_stack.stop(signal.SIGKILL)
    escape_stack.start()

    # The crashed run's escaped processes are dead, its job folders and their records gone
    assert [p for p in escaped if p.is_running() and p.status() != psutil.STATUS_ZOMBIE] == []
    assert [folder for folder in folders if folder.exists()] == []
    left = [json.loads(p.read_text()) for p in (escape_stack.home / "processes").glob("*.json")]
    assert {Path(record["workdir"]) for record in left}.isdisjoint(folders)
    # The jobs themselves run again (AWS Batch retries an attempt whose host was lost: test_crash), in
    # new folders; aborted, they end with every process they started
    for job_id in jobs.values():
        assert client.post(f"/jobs/{job_id}/abort").status_code == 202
    for job_id in jobs.values():
        assert client.wait_status(job_id, timeout=60)["status"] == "Terminated"
    assert escapees() == []


HOSTILE_JOB = textwrap.dedent(
    """
    import json, os, urllib.error, urllib.request
    import boto3
    from botocore.exceptions import ClientError

    def attempt(action):
        try:
            return "ALLOWED: " + str(action())[:200]
        except ClientError as exc:
            return f"{exc.response['Error']['Code']}: {exc.response['Error'].get('Message', '')}"
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code}: {exc.read().decode()[:200]}"
        except OSError as exc:
            return f"{type(exc).__name__}: {exc}"

    def post(url, body):
        request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
        return urllib.request.urlopen(request, timeout=10).read()

    s3 = boto3.client("s3", region_name="us-east-1")
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    moto = os.environ["AWS_ENDPOINT_URL"]
    attempts = {
        "read credentials.json": attempt(lambda: open(CREDENTIALS).read()),
        "read another account's output": attempt(
            lambda: s3.get_object(Bucket=BUCKET, Key=OTHER_OUTPUT)["Body"].read()
        ),
        "read another account's upload": attempt(
            lambda: s3.get_object(Bucket=BUCKET, Key=OTHER_UPLOAD)["Body"].read()
        ),
        "list the bucket": attempt(lambda: s3.list_objects_v2(Bucket=BUCKET)),
        "write another job's output": attempt(
            lambda: s3.put_object(Bucket=BUCKET, Key=OTHER_OUTPUT, Body=b"forged")
        ),
        "set own balance": attempt(
            lambda: dynamodb.update_item(
                TableName="remote-batch-local-accounts",
                Key={"accountId": {"S": "dev"}},
                UpdateExpression="SET creditBalance = :b",
                ExpressionAttributeValues={":b": {"N": "777777"}},
            )
        ),
        "call an admin route": attempt(
            lambda: post(f"{GATEWAY}/admin/accounts/dev/credits", {"credits": 777777, "reason": "mine"})
        ),
        "reset moto": attempt(lambda: post(f"{moto}/moto-api/reset", {})),
        "unsigned request": attempt(lambda: urllib.request.urlopen(f"{moto}/{BUCKET}/{OTHER_OUTPUT}").read()),
        "read own input": attempt(lambda: s3.get_object(Bucket=BUCKET, Key=OWN_INPUT)["ContentLength"]),
    }
    print(json.dumps(attempts, indent=1))
    attempts
    """
)


def test_hostile_job_is_refused_everything_but_its_own_data(
    stack: LocalStackProcess, dev: Client, admin: Client
) -> None:
    # Given another account's finished job, with an output
    account = f"other-{uuid.uuid4().hex[:8]}"
    created = admin.post("/admin/accounts", json={"accountId": account, "email": None, "credits": 100})
    assert created.status_code == 201, created.text
    other = Client(stack.endpoint, created.json()["token"])
    secret = other.submit({"code": "'secret of another account'"})
    assert other.wait_status(secret["jobId"])["status"] == "Succeeded"
    balance = dev.balance()

    # When a job of `dev` tries to take what is not its own
    code = (
        f"CREDENTIALS = {str(stack.home / 'credentials.json')!r}\n"
        f"BUCKET = 'remote-batch-local-us-east-1'\n"
        f"OTHER_OUTPUT = 'outputs/{secret['jobId']}/outcome.json'\n"
        f"OTHER_UPLOAD = 'inputs/uploads/{account}/upl-01M8QNC6S7CZYCD2DX3CPV8RJ7'\n"
        f"GATEWAY = {stack.endpoint!r}\n"
        "OWN_INPUT = __import__('os').environ['REMOTE_BATCH_INPUT_KEY']\n"
    )
    job = dev.submit({"code": code + HOSTILE_JOB})
    done = dev.wait_status(job["jobId"], timeout=60)
    assert done["status"] == "Succeeded", done
    attempts = dev.get(f"/jobs/{job['jobId']}/result").json()["result"]

    # Then every attempt was refused, each with its error
    print(json.dumps(attempts, indent=1))  # the evidence, with -s
    assert attempts["read credentials.json"].startswith(
        "FileNotFoundError: [Errno 2] No such file or directory"
    )
    assert attempts["read another account's output"].startswith("AccessDenied: ")
    assert attempts["read another account's upload"].startswith("AccessDenied: ")
    assert attempts["list the bucket"].startswith("AccessDenied: ")
    assert attempts["write another job's output"].startswith("AccessDenied: ")
    # (moto answers DynamoDB's JSON protocol with an XML error: botocore shows its status as the code)
    assert "<Code>AccessDenied</Code>" in attempts["set own balance"]
    assert "is not authorized to perform: dynamodb:UpdateItem" in attempts["set own balance"]
    assert attempts["call an admin route"].startswith("HTTP 401: ")
    assert attempts["reset moto"].startswith("HTTP 403: ")
    assert attempts["unsigned request"].startswith("HTTP 403: ")
    assert attempts["read own input"].startswith("ALLOWED: ")  # its own data, and only that
    assert dev.balance() == balance - Decimal(str(done["creditsSpent"]))  # only its own charge
    assert other.get(f"/jobs/{secret['jobId']}/result").json()["result"] == "secret of another account"


def test_presigned_urls_work_and_forged_ones_are_refused(dev: Client) -> None:
    # Given a finished job and its outputs' presigned URLs
    code = (
        "import os\nopen(os.path.join(os.environ['REMOTE_BATCH_OUTPUT_DIR'], 'note.txt'), 'w').write('mine')"
    )
    job = dev.submit({"code": code})
    assert dev.wait_status(job["jobId"])["status"] == "Succeeded"
    files = dev.get(f"/jobs/{job['jobId']}/outputs").json()["files"]
    assert files, "the job has no output files"

    # Then each URL works as signed
    for file in files:
        response = requests.get(file["url"], timeout=10)
        assert response.status_code == 200, response.text
        assert len(response.content) == file["size"]

    # and a URL pointed at another key, or re-signed with a made-up signature, is refused
    url = files[0]["url"]
    other_key = url.replace(job["jobId"], "job-01AAAAAAAAAAAAAAAAAAAAAAAA", 1)
    parts = urlsplit(url)
    query = [
        (k, "0" * len(v) if k in ("Signature", "X-Amz-Signature") else v) for k, v in parse_qsl(parts.query)
    ]
    forged = urlunsplit(parts._replace(query=urlencode(query)))
    assert forged != url
    for bad in (other_key, forged):
        response = requests.get(bad, timeout=10)
        assert response.status_code == 403, response.text
        assert "<Code>SignatureDoesNotMatch</Code>" in response.text
