"""The worker against S3: in-process on moto's mock_aws, and `python -m worker` against a moto server."""

import base64
import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import cloudpickle
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws
from moto.server import ThreadedMotoServer

from worker import storage as worker_storage
from worker.entrypoint import main
from worker.errors import StorageError

BUCKET = "remote-batch-test-data"
REGION = "us-east-1"
REPO_ROOT = Path(__file__).resolve().parents[2]


class Job:
    """One job's S3 keys and environment, with readers for its outputs."""

    def __init__(self, s3, **extra_env: str) -> None:
        self.s3 = s3
        self.job_id = f"job-{uuid.uuid4().hex}"
        self.input_key = f"inputs/{self.job_id}/input.json"
        self.output_prefix = f"outputs/{self.job_id}/"
        self.env = {
            "REMOTE_BATCH_JOB_ID": self.job_id,
            "REMOTE_BATCH_BUCKET": BUCKET,
            "REMOTE_BATCH_INPUT_KEY": self.input_key,
            "REMOTE_BATCH_OUTPUT_PREFIX": self.output_prefix,
            **extra_env,
        }

    def put_input(self, document: dict[str, Any]) -> "Job":
        self.s3.put_object(Bucket=BUCKET, Key=self.input_key, Body=json.dumps(document).encode())
        return self

    def output(self, name: str) -> bytes:
        data: bytes = self.s3.get_object(Bucket=BUCKET, Key=self.output_prefix + name)["Body"].read()
        return data

    def output_json(self, name: str) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.output(name))
        return document

    def output_names(self) -> list[str]:
        listing = self.s3.list_objects_v2(Bucket=BUCKET, Prefix=self.output_prefix)
        return sorted(item["Key"].removeprefix(self.output_prefix) for item in listing.get("Contents", []))

    def outcome(self) -> dict[str, Any]:
        """``outcome.json`` (``worker.layout``), checked to be of its format."""
        document = self.output_json("outcome.json")
        assert document["format"] == "remote-batch.outcome/1"
        return document

    def result_document(self) -> dict[str, Any]:
        """``{"result", "resultRepr"}``: inline in ``outcome.json``, or its ``result.json``."""
        outcome = self.outcome()
        if "resultObject" in outcome:
            assert "result" not in outcome
            return self.output_json(outcome["resultObject"])
        return {"result": outcome["result"], "resultRepr": outcome["resultRepr"]}

    def messages_document(self) -> dict[str, Any]:
        """``{"messages", "error"}`` of ``outcome.json``."""
        outcome = self.outcome()
        return {"messages": outcome["messages"], "error": outcome["error"]}

    def pickle_bytes(self) -> bytes | None:
        """The result's pickle: inline (base64) in ``outcome.json`` or its ``result.pickle``."""
        outcome = self.outcome()
        if "pickleObject" in outcome:
            return self.output(outcome["pickleObject"])
        return base64.b64decode(outcome["pickle"]) if "pickle" in outcome else None


# --- in-process, mock_aws ---------------------------------------------------------------------------


@pytest.fixture
def s3(monkeypatch):
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_REGION": REGION,
        "AWS_DEFAULT_REGION": REGION,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        client = boto3.client("s3", region_name=REGION)
        client.create_bucket(Bucket=BUCKET)
        yield client


def test_code_result_and_messages_are_uploaded(s3):
    job = Job(s3).put_input({"kind": "code", "code": "import warnings\nwarnings.warn('w')\n2 + 2"})

    exit_code = main(job.env, s3)

    assert exit_code == 0
    assert job.result_document() == {"result": 4, "resultRepr": "4"}
    assert job.messages_document() == {"messages": ["<job>:2: UserWarning: w"], "error": None}
    assert cloudpickle.loads(job.pickle_bytes()) == 4
    # Issue 14: the whole outcome is one object (one PUT): the result, its pickle, the messages and
    # the text preview are inside outcome.json.
    assert job.output_names() == ["outcome.json"]
    assert base64.b64decode(job.outcome()["preview"]).startswith(b"\x89PNG")


def test_a_job_whose_result_is_4_makes_exactly_one_s3_write(s3):
    """Issue 14: the worker's S3 requests for ``4``: the input's GET and ONE PutObject (outcome.json)."""
    job = Job(s3).put_input({"kind": "code", "code": "4"})
    calls: list[tuple[str, str]] = []
    s3.meta.events.register(
        "before-parameter-build.s3",
        lambda model, params, **_: calls.append((model.name, params.get("Key", ""))),
    )

    assert main(job.env, s3) == 0
    assert calls == [("GetObject", job.input_key), ("PutObject", job.output_prefix + "outcome.json")]
    assert job.result_document() == {"result": 4, "resultRepr": "4"}
    assert cloudpickle.loads(job.pickle_bytes()) == 4


def test_failing_code_still_uploads_its_outputs(s3):
    job = Job(s3).put_input({"kind": "code", "code": "1/0"})

    exit_code = main(job.env, s3)

    assert exit_code == 1
    assert job.result_document() == {"result": None, "resultRepr": "None"}
    messages = job.messages_document()
    assert messages["error"]["type"] == "ZeroDivisionError"
    assert messages["messages"][0] == "ZeroDivisionError: division by zero"
    assert messages["messages"][1] == messages["error"]["traceback"]


def test_exit_3_in_code_exits_3_with_outputs(s3):
    job = Job(s3).put_input({"kind": "code", "code": "exit(3)"})

    assert main(job.env, s3) == 3
    assert job.messages_document()["messages"][0] == "SystemExit: 3"


def test_memory_error_message_uses_the_machine_class_memory(s3):
    job = Job(s3, REMOTE_BATCH_MEMORY_GIB="8").put_input({"kind": "code", "code": "raise MemoryError"})

    assert main(job.env, s3) == 1
    assert job.messages_document()["error"]["message"] == "Memory limit of 8 GiB exceeded"


def test_command_files_are_uploaded_under_files(s3, capfd):
    script = (
        "import os, pathlib\n"
        "print('hello')\n"
        "out = pathlib.Path(os.environ['REMOTE_BATCH_OUTPUT_DIR'])\n"
        "(out / 'plots').mkdir()\n"
        "(out / 'plots' / 'a.csv').write_text('x\\n1\\n')\n"
        "(out / 'top.txt').write_text('top')\n"
        "os.symlink('/etc/hostname', out / 'link')\n"
    )
    job = Job(s3).put_input({"kind": "command", "command": [sys.executable, "-c", script]})

    exit_code = main(job.env, s3)

    assert exit_code == 0
    assert "hello" in capfd.readouterr().out
    assert job.output("files/plots/a.csv") == b"x\n1\n"
    assert job.output("files/top.txt") == b"top"
    assert "files/link" not in job.output_names()  # only regular files
    head = s3.head_object(Bucket=BUCKET, Key=job.output_prefix + "files/plots/a.csv")
    assert head["ContentType"] == "text/csv"
    assert job.result_document()["result"] is None


def test_failing_command_exit_code_propagates(s3):
    job = Job(s3).put_input({"kind": "command", "command": [sys.executable, "-c", "raise SystemExit(4)"]})

    assert main(job.env, s3) == 4
    assert job.messages_document()["error"]["type"] == "CalledProcessError"


def test_command_not_found_exits_127(s3):
    job = Job(s3).put_input({"kind": "command", "command": ["remote-batch-no-such-program"]})

    assert main(job.env, s3) == 127
    assert job.messages_document()["messages"] == [
        "FileNotFoundError: command not found: remote-batch-no-such-program"
    ]


def test_pickle_with_an_array_item(s3):
    payload = cloudpickle.dumps((lambda item, scale, *, shift: item * scale + shift, (10,), {"shift": 1}))
    job = Job(s3).put_input(
        {"kind": "pickle", "pickle": base64.b64encode(payload).decode(), "arrayItem": 4, "arrayIndex": 0}
    )

    assert main(job.env, s3) == 0
    assert job.result_document()["result"] == 41


def test_an_uploaded_pickle_and_uploaded_code_are_read_from_their_payload_key(s3):
    payload = cloudpickle.dumps((len, (b"x" * 3_000_000,), {}))
    s3.put_object(Bucket=BUCKET, Key="inputs/uploads/dev/upl-1", Body=payload)
    job = Job(s3).put_input({"kind": "pickle", "payloadKey": "inputs/uploads/dev/upl-1"})
    assert main(job.env, s3) == 0
    assert job.result_document()["result"] == 3_000_000

    s3.put_object(Bucket=BUCKET, Key="inputs/uploads/dev/upl-2", Body=b"x = 6\nx * 7")
    job = Job(s3).put_input({"kind": "code", "payloadKey": "inputs/uploads/dev/upl-2"})
    assert main(job.env, s3) == 0
    assert job.result_document()["result"] == 42


def test_a_missing_upload_is_a_worker_error(s3, capfd):
    job = Job(s3).put_input({"kind": "code", "payloadKey": "inputs/uploads/dev/upl-gone"})
    assert main(job.env, s3) == 2
    assert (
        "input not found: s3://remote-batch-test-data/inputs/uploads/dev/upl-gone" in capfd.readouterr().err
    )


def test_code_with_an_array_item(s3):
    job = Job(s3).put_input(
        {"kind": "code", "code": "item['n'] ** 2", "arrayItem": {"n": 7}, "arrayIndex": 3}
    )

    assert main(job.env, s3) == 0
    assert job.result_document()["result"] == 49


def test_figure_result_uploads_a_preview(s3):
    code = "from matplotlib.figure import Figure\nfig = Figure()\nfig.add_subplot().plot([3, 1, 2])\nfig"
    job = Job(s3).put_input({"kind": "code", "code": code})

    assert main(job.env, s3) == 0
    assert job.output("preview.png").startswith(b"\x89PNG")
    assert job.result_document()["result"] is None
    # A picture of the result is an object of its own (the API links it); the rest stays inline.
    assert job.output_names() == ["outcome.json", "preview.png"]
    assert job.outcome()["previewObject"] == "preview.png"
    assert "preview" not in job.outcome()


def test_missing_input_object_is_a_worker_error(s3, capsys):
    job = Job(s3)  # nothing put at the input key

    assert main(job.env, s3) == 2
    assert f"input not found: s3://{BUCKET}/{job.input_key}" in capsys.readouterr().err
    # No result: only the note saying why (its reason becomes the statusReason) and the operator's copy.
    assert job.output_names() == ["outcome.json", "worker-error.txt"]
    assert "resultRepr" not in job.outcome()  # the code never ran: no result
    assert job.messages_document()["error"]["reason"] == "The job's input is missing"


def test_malformed_input_is_a_worker_error(s3, capsys):
    job = Job(s3).put_input({"kind": "shell", "shell": "ls"})

    assert main(job.env, s3) == 2
    assert "unknown input kind 'shell'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "missing",
    ["REMOTE_BATCH_JOB_ID", "REMOTE_BATCH_BUCKET", "REMOTE_BATCH_INPUT_KEY", "REMOTE_BATCH_OUTPUT_PREFIX"],
)
def test_missing_environment_is_a_worker_error(s3, capsys, missing):
    job = Job(s3).put_input({"kind": "code", "code": "1"})
    env = {name: value for name, value in job.env.items() if name != missing}

    assert main(env, s3) == 2
    assert missing in capsys.readouterr().err
    assert job.output_names() == []


# --- `python -m worker` against a moto server ------------------------------------------------------


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    boto3.client(
        "s3", endpoint_url=endpoint, region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x"
    ).create_bucket(Bucket=BUCKET)
    yield endpoint
    server.stop()


@pytest.fixture
def server_s3(moto_endpoint):
    return boto3.client(
        "s3", endpoint_url=moto_endpoint, region_name=REGION, aws_access_key_id="x", aws_secret_access_key="x"
    )


def _worker_env(job: Job, endpoint: str) -> dict[str, str]:
    inherited = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("AWS_", "REMOTE_BATCH_")) and name != "PYTHONUNBUFFERED"
    }
    return {
        **inherited,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        **job.env,
    }


def _run_worker(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker"],
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _start_worker(job: Job, endpoint: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "worker"],
        cwd=REPO_ROOT,
        env=_worker_env(job, endpoint),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_python_m_worker_runs_code_end_to_end(moto_endpoint, server_s3):
    code = (
        "import warnings\n"
        "print('working')\n"
        "warnings.warn('old api', DeprecationWarning)\n"
        "import numpy as np\n"
        "np.arange(3) * 2"
    )
    job = Job(server_s3).put_input({"kind": "code", "code": code})

    completed = _run_worker(_worker_env(job, moto_endpoint))

    assert completed.returncode == 0, completed.stderr
    assert completed.stdout == "working\n"
    assert "<job>:3: DeprecationWarning: old api" in completed.stderr  # shown, not only captured
    assert job.result_document() == {"result": [0, 2, 4], "resultRepr": "array([0, 2, 4])"}
    assert job.messages_document()["messages"] == ["<job>:3: DeprecationWarning: old api"]


def test_python_m_worker_failure_prints_the_traceback_and_exits_1(moto_endpoint, server_s3):
    job = Job(server_s3).put_input({"kind": "code", "code": "def f():\n    return 1 / 0\nf()"})

    completed = _run_worker(_worker_env(job, moto_endpoint))

    assert completed.returncode == 1
    assert completed.stderr.rstrip().endswith("ZeroDivisionError: division by zero")
    assert 'File "<job>", line 2, in f' in completed.stderr
    assert job.messages_document()["error"]["type"] == "ZeroDivisionError"


def test_python_m_worker_never_prints_its_own_traceback_for_a_refused_input(moto_endpoint, server_s3):
    job = Job(server_s3).put_input({"kind": "command", "command": ["echo", "a\u0000b"]})

    completed = _run_worker(_worker_env(job, moto_endpoint))

    assert completed.returncode == 2
    assert completed.stdout == ""
    assert completed.stderr == (
        "remote-batch worker: The job's input was rejected: command[1] contains a NUL character, "
        "which no program can receive\n"
    )


def test_python_m_worker_survives_code_that_closes_its_output_streams(moto_endpoint, server_s3):
    code = "import os, sys\nsys.stdout.close()\nsys.stderr.close()\nos.close(1)\nos.close(2)\n10**5000"
    job = Job(server_s3).put_input({"kind": "code", "code": code})

    completed = _run_worker(_worker_env(job, moto_endpoint))

    assert completed.returncode == 0
    assert job.result_document() == {"result": None, "resultRepr": "<int with 5001 digits>"}


def test_python_m_worker_streams_output_before_the_code_ends(moto_endpoint, server_s3, tmp_path):
    # The code prints, then waits for a file the test creates only after reading that line:
    # if stdout were block-buffered the line would never arrive and the test would time out.
    go = tmp_path / "go"
    code = (
        f"import pathlib, time\nprint('started')\ngo = pathlib.Path({str(go)!r})\n"
        "deadline = time.monotonic() + 10\n"
        "while not go.exists() and time.monotonic() < deadline:\n    time.sleep(0.02)\ngo.exists()"
    )
    job = Job(server_s3).put_input({"kind": "code", "code": code})
    worker = _start_worker(job, moto_endpoint)
    try:
        assert worker.stdout is not None
        first_line = worker.stdout.readline()
        go.touch()
        worker.wait(timeout=30)
    finally:
        worker.kill()
        worker.communicate()

    assert first_line == "started\n"
    assert worker.returncode == 0
    assert job.result_document()["result"] is True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_killed_worker_leaves_no_orphan_command(moto_endpoint, server_s3, tmp_path):
    pid_file = tmp_path / "child.pid"
    script = (
        f"import os, pathlib, time\npathlib.Path({str(pid_file)!r}).write_text(str(os.getpid()))\n"
        "time.sleep(30)"
    )
    job = Job(server_s3).put_input({"kind": "command", "command": [sys.executable, "-c", script]})
    # No pipes: an orphan holding them open must not be what the test waits on.
    worker = subprocess.Popen(
        [sys.executable, "-m", "worker"],
        cwd=REPO_ROOT,
        env=_worker_env(job, moto_endpoint),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    child_pid = None
    try:
        deadline = time.monotonic() + 20
        while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
            time.sleep(0.02)
        child_pid = int(pid_file.read_text())

        worker.kill()
        worker.wait(timeout=10)

        deadline = time.monotonic() + 5
        while _is_alive(child_pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _is_alive(child_pid)
    finally:
        worker.kill()
        worker.wait()
        if child_pid is not None and _is_alive(child_pid):
            os.kill(child_pid, signal.SIGKILL)


def _is_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (a reaped-later zombie is dead)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_python_m_worker_without_environment_exits_2():
    env = {name: value for name, value in os.environ.items() if not name.startswith("REMOTE_BATCH_")}

    completed = _run_worker(env)

    assert completed.returncode == 2
    assert completed.stderr.startswith(
        "remote-batch worker: missing environment variable(s): REMOTE_BATCH_JOB_ID"
    )
    assert len(completed.stderr.strip().splitlines()) == 1


# --- results that cannot be encoded, inputs that are refused, the worker's own errors ---------------


def test_a_result_too_long_to_format_succeeds_with_a_short_repr(s3):
    job = Job(s3).put_input({"kind": "code", "code": "10**5000"})

    assert main(job.env, s3) == 0
    assert job.result_document() == {"result": None, "resultRepr": "<int with 5001 digits>"}
    assert job.messages_document() == {"messages": [], "error": None}
    assert cloudpickle.loads(job.pickle_bytes()) == 10**5000


def test_an_unpicklable_self_referencing_result_succeeds_with_a_note(s3):
    code = (
        "class Odd(list):\n    def __reduce__(self):\n        raise SystemExit(9)\n"
        "x = Odd([1])\nx.append(x)\nx"
    )
    job = Job(s3).put_input({"kind": "code", "code": code})

    assert main(job.env, s3) == 0
    assert job.result_document() == {"result": None, "resultRepr": "[1, [...]]"}
    assert job.messages_document()["messages"] == [
        "result.pickle not written: the result cannot be pickled (SystemExit: 9)"
    ]
    assert job.pickle_bytes() is None
    assert job.output_names() == ["outcome.json"]


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        (
            {"kind": "command", "command": ["echo", "a\u0000b"]},
            "The job's input was rejected: command[1] contains a NUL character, which no program can receive",
        ),
        (
            {"kind": "command", "command": ["echo", "\ud800"]},
            "The job's input was rejected: command[1] contains a lone surrogate, "
            "which no program can receive",
        ),
        (
            {"kind": "shell", "shell": "ls"},
            "The job's input was rejected: unknown input kind 'shell': "
            "expected 'code', 'command' or 'pickle'",
        ),
    ],
)
def test_a_refused_input_leaves_one_log_line_and_its_reason(s3, capsys, document, reason):
    job = Job(s3)
    s3.put_object(Bucket=BUCKET, Key=job.input_key, Body=json.dumps(document).encode())

    assert main(job.env, s3) == 2
    log = capsys.readouterr()
    assert log.out == ""
    assert log.err == f"remote-batch worker: {reason}\n"
    assert job.messages_document()["error"]["reason"] == reason
    assert job.output_names() == ["outcome.json", "worker-error.txt"]
    assert "resultRepr" not in job.outcome()


def test_input_that_is_not_utf8_is_refused_with_a_reason(s3, capsys):
    job = Job(s3)
    s3.put_object(Bucket=BUCKET, Key=job.input_key, Body=b'{"kind": "code", "code": "\xff"}')

    assert main(job.env, s3) == 2
    reason = job.messages_document()["error"]["reason"]
    assert reason.startswith("The job's input was rejected: the input is not UTF-8 JSON (")
    assert "Traceback" not in capsys.readouterr().err


def test_an_unreadable_input_says_so_without_a_traceback(s3, capsys, monkeypatch):
    from botocore.exceptions import ClientError

    job = Job(s3).put_input({"kind": "code", "code": "1"})
    real_get_object = s3.get_object

    def denied(**kwargs):
        if kwargs["Key"] == job.input_key:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "GetObject")
        return real_get_object(**kwargs)

    monkeypatch.setattr(s3, "get_object", denied)

    assert main(job.env, s3) == 2
    assert (
        capsys.readouterr().err == "remote-batch worker: The job's input could not be read (AccessDenied)\n"
    )
    assert job.messages_document()["error"]["reason"] == "The job's input could not be read (AccessDenied)"
    assert "AccessDenied" in job.output("worker-error.txt").decode()


def test_the_workers_own_error_goes_to_the_operator_not_the_log(s3, capsys, monkeypatch, tmp_path):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug in the worker")

    monkeypatch.setattr("worker.entrypoint.outcome_objects", broken)
    operator_log = tmp_path / "operator.log"
    job = Job(s3, REMOTE_BATCH_OPERATOR_LOG=str(operator_log)).put_input({"kind": "code", "code": "1"})

    assert main(job.env, s3) == 2
    log = capsys.readouterr()
    assert log.err == "remote-batch worker: internal error (RuntimeError); the operator has the details\n"
    assert job.messages_document()["error"]["reason"] == (
        "The job runner failed (an internal error, reported to the operator)"
    )
    for detail in (operator_log.read_text(), job.output("worker-error.txt").decode()):
        assert f"job {job.job_id}: internal error" in detail
        assert "Traceback (most recent call last)" in detail
        assert "RuntimeError: a bug in the worker" in detail


def test_an_output_file_that_cannot_be_read_is_skipped_with_a_message(s3, monkeypatch):
    code = (
        "import os, pathlib\nout = pathlib.Path(os.environ['REMOTE_BATCH_OUTPUT_DIR'])\n"
        "(out / 'a.txt').write_text('a')\n(out / 'locked.txt').write_text('b')\n1"
    )
    job = Job(s3).put_input({"kind": "code", "code": code})
    _refuse_opening(monkeypatch, "locked.txt", PermissionError(13, "Permission denied"))

    assert main(job.env, s3) == 0
    assert job.output("files/a.txt") == b"a"
    assert "files/locked.txt" not in job.output_names()
    assert job.messages_document()["messages"] == ["files/locked.txt not uploaded: Permission denied"]


def _refuse_opening(monkeypatch, name: str, error: OSError) -> None:
    """Make the worker's opening of output files named ``name`` raise ``error`` (the tests run as
    root, which file permissions do not stop)."""
    real_open = os.open

    def refusing(path, flags, *args, **kwargs):
        if os.path.basename(path) == name:
            raise error
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refusing)


_OUT = "import os, socket\nout = os.environ['REMOTE_BATCH_OUTPUT_DIR']\n"
_LONG_NAME = "/".join(["n" * 200] * 5) + "/f.txt"  # a name is at most 255 bytes, a path is longer

#: Outputs S3 cannot store or the worker must not read, each written beside ``ok.txt`` by code that
#: returns 42: (code writing it, the note naming it).
UNSTORABLE_OUTPUTS = {
    "name not UTF-8": (
        "open(os.path.join(os.fsencode(out), b'caf\\xe9.txt'), 'wb').write(b'x')",
        "files/caf\\xe9.txt not uploaded: its name is not UTF-8, which S3 keys must be",
    ),
    "folder name not UTF-8": (
        "d = os.path.join(os.fsencode(out), b'd\\xff')\nos.mkdir(d)\n"
        "open(os.path.join(d, b'f'), 'wb').write(b'x')",
        "files/d\\xff/f not uploaded: its name is not UTF-8, which S3 keys must be",
    ),
    "key over 1024 bytes": (
        f"os.makedirs(os.path.dirname(os.path.join(out, {_LONG_NAME!r})))\n"
        f"open(os.path.join(out, {_LONG_NAME!r}), 'w').write('x')",
        f"files/{_LONG_NAME} not uploaded: its key would be ",
    ),
    "symbolic link out of the folder": (
        "os.symlink('/etc/hostname', os.path.join(out, 'link'))",
        "files/link not uploaded: a symbolic link (outputs are regular files)",
    ),
    "symbolic link to a folder": (
        "os.symlink('/etc', os.path.join(out, 'etc'))",
        "files/etc not uploaded: a symbolic link (outputs are regular files)",
    ),
    "named pipe": (
        "os.mkfifo(os.path.join(out, 'fifo'))",
        "files/fifo not uploaded: a named pipe (outputs are regular files)",
    ),
    "socket": (
        "s = socket.socket(socket.AF_UNIX)\ns.bind(os.path.join(out, 'sock'))",
        "files/sock not uploaded: a socket (outputs are regular files)",
    ),
}


@pytest.mark.parametrize(("writes", "note"), UNSTORABLE_OUTPUTS.values(), ids=list(UNSTORABLE_OUTPUTS))
def test_an_output_s3_cannot_store_is_skipped_and_nothing_else_is_lost(s3, writes, note):
    code = f"{_OUT}open(os.path.join(out, 'ok.txt'), 'w').write('ok')\n{writes}\n42"
    job = Job(s3).put_input({"kind": "code", "code": code})

    assert main(job.env, s3) == 0
    assert job.result_document()["result"] == 42
    assert job.output("files/ok.txt") == b"ok"
    assert [n for n in job.output_names() if n.startswith("files/")] == ["files/ok.txt"]
    (message,) = job.messages_document()["messages"]
    assert message.startswith(note)
    assert job.messages_document()["error"] is None


@pytest.mark.parametrize(
    ("error", "note"),
    [
        (FileNotFoundError(2, "No such file or directory"), "removed before it was uploaded"),
        (PermissionError(13, "Permission denied"), "Permission denied"),
    ],
    ids=["removed during the upload", "unreadable"],
)
def test_an_output_that_cannot_be_read_is_skipped_and_nothing_else_is_lost(s3, monkeypatch, error, note):
    code = f"{_OUT}for n in ('a.txt', 'gone.txt', 'z.txt'):\n    open(os.path.join(out, n), 'w').write(n)\n42"
    job = Job(s3).put_input({"kind": "code", "code": code})
    _refuse_opening(monkeypatch, "gone.txt", error)

    assert main(job.env, s3) == 0
    assert job.result_document()["result"] == 42
    assert [n for n in job.output_names() if n.startswith("files/")] == ["files/a.txt", "files/z.txt"]
    assert job.messages_document()["messages"] == [f"files/gone.txt not uploaded: {note}"]


def test_an_object_s3_refuses_is_skipped_and_other_s3_errors_fail_the_upload(s3, monkeypatch, tmp_path):
    # Given S3 refusing one key as too long (what AWS answers; moto takes any length) and then
    # refusing everything as access denied
    (tmp_path / "a.txt").write_text("a")
    (tmp_path / "refused.txt").write_text("b")
    storage = worker_storage.JobStorage(s3, BUCKET)
    real_upload = s3.upload_fileobj

    def upload(body, bucket, key, **kwargs):
        if key.endswith("refused.txt"):
            raise ClientError({"Error": {"Code": "KeyTooLongError", "Message": "too long"}}, "PutObject")
        return real_upload(body, bucket, key, **kwargs)

    monkeypatch.setattr(s3, "upload_fileobj", upload)
    notes: list[str] = []

    assert storage.upload_directory(tmp_path, "outputs/job-x/files/", notes) == ["outputs/job-x/files/a.txt"]
    assert notes == ["files/refused.txt not uploaded: S3 refused it (KeyTooLongError)"]

    def denied(body, bucket, key, **kwargs):
        raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "PutObject")

    monkeypatch.setattr(s3, "upload_fileobj", denied)
    with pytest.raises(StorageError):
        storage.upload_directory(tmp_path, "outputs/job-x/files/", [])


def test_thousands_of_unstorable_outputs_make_a_bounded_number_of_messages(s3, tmp_path):
    for index in range(worker_storage.MAX_SKIPPED_NOTES + 50):
        os.mkfifo(tmp_path / f"fifo-{index:04d}")
    notes: list[str] = []

    assert (
        worker_storage.JobStorage(s3, BUCKET).upload_directory(tmp_path, "outputs/job-x/files/", notes) == []
    )
    assert len(notes) == worker_storage.MAX_SKIPPED_NOTES + 1
    assert notes[0] == "files/fifo-0000 not uploaded: a named pipe (outputs are regular files)"
    assert notes[-1] == "50 more output files not uploaded"


def test_a_command_out_of_memory_fails_with_the_memory_sentence(s3, capfd):
    script = (
        "import resource\nresource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30))\nx = bytearray(20 * 2**30)"
    )
    job = Job(s3, REMOTE_BATCH_MEMORY_GIB="8").put_input(
        {"kind": "command", "command": [sys.executable, "-c", script]}
    )

    assert main(job.env, s3) == 1
    assert job.messages_document()["error"] == {
        "type": "MemoryError",
        "message": "Memory limit of 8 GiB exceeded",
        "traceback": "",
        "reason": "Memory limit of 8 GiB exceeded",
    }
    assert capfd.readouterr().out.rstrip().endswith("MemoryError")  # the command's own traceback, relayed
