"""The SDK and the CLI against the local stack: results, errors, logs, previews, outputs, retries."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import requests
from PIL import Image
from typer.testing import CliRunner

import remote_batch as rb
from remote_batch import connection, sdk
from remote_batch.cli import app
from tests.e2e.conftest import REPO_ROOT, LocalStackProcess

PLOT = "import matplotlib.pyplot as plt\nfig, ax = plt.subplots(figsize=(4, 3))\nax.plot([1, 4, 9, 16])\nfig"


@pytest.fixture
def dev_sdk(stack: LocalStackProcess, monkeypatch: pytest.MonkeyPatch) -> rb.Client:
    """The ``dev`` account as the SDK's default connection (through the environment, as a user sets it)."""
    monkeypatch.setenv("REMOTE_BATCH_ENDPOINT", stack.endpoint)
    monkeypatch.setenv("REMOTE_BATCH_TOKEN", stack.tokens["dev"])
    monkeypatch.setattr(connection, "_default", None)
    return connection.default_client()


def test_code_a_function_and_an_error(dev_sdk: rb.Client) -> None:
    four = rb.submit("2 + 2")
    total = rb.submit(lambda n: sum(range(n)), 10**6)
    failing = rb.submit("def f():\n    return 1 / 0\nf()")

    assert four.result(timeout=60) == 4
    assert total.result(timeout=60) == 499999500000
    with pytest.raises(rb.RemoteJobError) as caught:
        failing.result(timeout=60)
    assert caught.value.type == "ZeroDivisionError"
    assert caught.value.message == "division by zero"
    assert 'File "<job>", line 2, in f' in caught.value.traceback
    assert failing.status == "Terminated" and failing.exit_code == 1
    assert four.credits_spent == Decimal("1.0")  # the 60-second minimum of Basic1x8 at 60 credits/hour


def test_logs_as_text_data_and_table(dev_sdk: rb.Client) -> None:
    job = rb.submit("for i in range(3):\n    print('line', i)\n'done'")
    assert job.result(timeout=60) == "done"
    assert job.log == "line 0\nline 1\nline 2\n"
    data = job.log_data
    assert [message for _, message in data] == ["line 0", "line 1", "line 2"]
    assert all(stamp.tzinfo is not None and job.started_at is not None for stamp, _ in data)
    table = job.log_table
    assert list(table.columns) == ["timestamp", "message"]
    assert table["message"].tolist() == ["line 0", "line 1", "line 2"]
    assert str(table["timestamp"].dtype).startswith("datetime64")


def test_a_matplotlib_result_has_a_preview_image_and_a_card(dev_sdk: rb.Client) -> None:
    job = rb.submit(PLOT, name="plot")
    job.wait(timeout=60)
    assert job.status == "Succeeded", job.status_reason
    assert job.preview_image.size == (400, 300)
    card = job._repr_html_()
    assert ">Succeeded</span>" in card and "data:image/png;base64," in card and job.id in card


def test_a_commands_files_are_outputs(dev_sdk: rb.Client, tmp_path: Path) -> None:
    job = rb.submit(
        [
            "sh",
            "-c",
            'mkdir -p "$REMOTE_BATCH_OUTPUT_DIR/d" && printf abc > "$REMOTE_BATCH_OUTPUT_DIR/d/x.txt"',
        ]
    )
    job.wait(timeout=60)
    assert (job.status, job.exit_code) == ("Succeeded", 0)
    assert [(f.name, f.size) for f in job.outputs] == [("d/x.txt", 3)]
    assert job.download(tmp_path) == [tmp_path / "d" / "x.txt"]
    assert (tmp_path / "d" / "x.txt").read_text() == "abc"
    assert job.result() is None


def test_abort_delete_and_not_found(dev_sdk: rb.Client) -> None:
    job = rb.submit("import time\ntime.sleep(120)")
    with pytest.raises(rb.JobNotFinished):
        job.messages  # the property asks the service
    with pytest.raises(rb.Conflict):
        job.delete()
    job.abort()
    job.wait(timeout=60)
    assert (job.status, job.status_reason) == ("Terminated", "Aborted by user")
    with pytest.raises(rb.RemoteJobError, match="Aborted by user"):
        job.result()
    job.delete()
    with pytest.raises(rb.NotFound):
        rb.job("job-01NOSUCHJOB0000000000000")


def test_jobs_account_machine_classes_and_usage(dev_sdk: rb.Client) -> None:
    name = f"listed-{uuid.uuid4().hex[:8]}"
    job = rb.submit("1", name=name)
    job.wait(timeout=60)
    assert job in rb.jobs(limit=20)
    account = rb.account()
    assert account.account_id == "dev" and isinstance(account.credit_balance, Decimal)
    classes = {m.name: m for m in rb.machine_classes()}
    assert classes["Basic1x8"].credits_per_hour == Decimal(60) and classes["GPU4xL4"].gpus == 4
    usage = rb.usage()
    charge = next(r for r in usage if r.job_id == job.id)
    assert (charge.kind, charge.credits) == ("charge", Decimal("1.0"))
    frame = usage.dataframe()
    assert frame.loc[frame["jobId"] == job.id, "machineClass"].tolist() == ["Basic1x8"]
    figure = usage.plot()
    assert "Basic1x8" in [line.get_label() for line in figure.axes[0].get_lines()]


class DroppingProxy(http.server.ThreadingHTTPServer):
    """A proxy to the stack that forwards the first ``POST /jobs`` and then drops the connection
    before answering: the service made the job, the client never heard of it."""

    def __init__(self, target: str) -> None:
        super().__init__(("127.0.0.1", 0), _ProxyHandler)
        self.target = target
        self.posts: list[dict[str, str]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    server: DroppingProxy

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _forward(self) -> requests.Response:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
        return requests.request(
            self.command,
            self.server.target + self.path,
            data=body,
            headers=headers,
            timeout=30,
            allow_redirects=False,
        )

    def do_GET(self) -> None:
        self._relay(self._forward())

    def do_POST(self) -> None:
        response = self._forward()
        if self.path == "/jobs":
            self.server.posts.append(
                {"key": self.headers["Idempotency-Key"], "jobId": response.json()["jobId"]}
            )
            if len(self.server.posts) == 1:
                self.close_connection = True  # the answer is lost on the way back
                return
        self._relay(response)

    def _relay(self, response: requests.Response) -> None:
        self.send_response(response.status_code)
        for name in ("Content-Type", "Location"):
            if name in response.headers:
                self.send_header(name, response.headers[name])
        self.send_header("Content-Length", str(len(response.content)))
        self.end_headers()
        self.wfile.write(response.content)


@pytest.fixture
def proxy(stack: LocalStackProcess) -> Iterator[DroppingProxy]:
    server = DroppingProxy(stack.endpoint)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_a_submit_whose_answer_was_lost_is_retried_into_the_same_job(
    stack: LocalStackProcess, proxy: DroppingProxy
) -> None:
    through_proxy = rb.Client(rb.Profile(endpoint=proxy.url, token=stack.tokens["dev"]))
    name = f"retried-{uuid.uuid4().hex[:8]}"

    job = rb.submit("21 * 2", name=name, client=through_proxy)

    assert len(proxy.posts) == 2  # the service received the POST twice
    assert proxy.posts[0]["key"] == proxy.posts[1]["key"]
    assert proxy.posts[0]["jobId"] == proxy.posts[1]["jobId"] == job.id
    direct = rb.Client(rb.Profile(endpoint=stack.endpoint, token=stack.tokens["dev"]))
    assert [j.id for j in rb.jobs(limit=50, client=direct) if j.name == name] == [job.id]
    assert job.result(timeout=60) == 42


# -- the CLI ---------------------------------------------------------------------------------------
def test_cli_submit_wait_follow_then_result_jobs_logs_and_usage(dev_sdk: rb.Client, tmp_path: Path) -> None:
    runner = CliRunner()
    submitted = runner.invoke(
        app, ["submit", "--wait", "--follow", "--name", "cli", "--code", "print('hello from the job')\n6 * 7"]
    )
    assert submitted.exit_code == 0, submitted.output
    assert "hello from the job" in submitted.stderr
    job_id = submitted.stderr.split()[1]  # "submitted job-..."
    assert job_id.startswith("job-")
    assert f"{job_id} Succeeded" in submitted.stderr

    result = runner.invoke(app, ["result", job_id, "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["result"] == 42
    listed = runner.invoke(app, ["jobs", "--json", "--limit", "10"])
    assert job_id in [j["jobId"] for j in json.loads(listed.stdout)]
    table = runner.invoke(app, ["jobs", "--limit", "10"])
    assert job_id in table.stdout and "Succeeded" in table.stdout
    logs = runner.invoke(app, ["logs", job_id, "--format", "csv"])
    assert logs.stdout.splitlines()[0] == "timestamp,message"
    assert logs.stdout.splitlines()[1].endswith(",hello from the job")
    chart = tmp_path / "usage.png"
    usage = runner.invoke(app, ["usage", "--chart", str(chart)])
    assert usage.exit_code == 0, usage.output
    with Image.open(chart) as image:
        assert image.format == "PNG" and image.size == (800, 450)
    status = runner.invoke(app, ["status", job_id, "--json"])
    assert json.loads(status.stdout)["status"] == "Succeeded"


def test_cli_as_a_real_process(stack: LocalStackProcess, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMOTE_BATCH_")}
    env.update(
        {
            "REMOTE_BATCH_ENDPOINT": stack.endpoint,
            "REMOTE_BATCH_TOKEN": stack.tokens["dev"],
            "REMOTE_BATCH_CONFIG_DIR": str(tmp_path / "config"),
            "PYTHONPATH": str(REPO_ROOT),
        }
    )
    command = [sys.executable, "-m", "remote_batch"]
    failed = subprocess.run(
        [*command, "submit", "--wait", "--code", "1 / 0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert failed.returncode == 2, failed.stderr
    last = failed.stderr.splitlines()[-1]  # not a terminal: plain status lines
    assert " Terminated " in last and last.endswith("credits (ZeroDivisionError: division by zero)")
    assert "Traceback" not in failed.stderr
    bad = subprocess.run(
        [*command, "submit", "--machine-class", "Nope", "--code", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 1
    assert bad.stderr.startswith("Error: ValidationError: Unknown machine class 'Nope'")
    assert bad.stderr.rstrip().endswith("(field: machineClass)") and "Traceback" not in bad.stderr


def test_estimate_runtime_and_a_pickle_of_another_python(
    dev_sdk: rb.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert rb.estimate("Basic1x8", 1) == rb.Estimate(Decimal("1.0"), Decimal("60.0"), 60)
    hour = rb.estimate("GPU1xL40S", 3600)
    gpu = next(m for m in rb.machine_classes() if m.name == "GPU1xL40S")
    assert hour.credits == gpu.credits_per_hour
    assert rb.estimate("Basic1x8", 3600, credit_constraint="2.5").credits == Decimal("2.5")
    estimated = CliRunner().invoke(app, ["estimate", "-m", "Basic2x8", "--seconds", "90", "--json"])
    basic2 = next(m for m in rb.machine_classes() if m.name == "Basic2x8").credits_per_hour
    assert estimated.exit_code == 0, estimated.output
    assert json.loads(estimated.stdout, parse_float=Decimal)["credits"] == Decimal(90) * basic2 / 3600
    local = f"{sys.version_info.major}.{sys.version_info.minor}"
    runtime = rb.runtime()
    # The local default is the stack's own version (its jobs get the worker image's packages).
    assert runtime["pythonVersion"] == local and local in runtime["pythonVersions"]
    assert set(runtime["interpreters"]) == set(runtime["pythonVersions"])

    monkeypatch.setattr(sdk, "python_version", lambda: "3.9")
    before = len(rb.jobs(limit=100))
    with pytest.raises(rb.ValidationError) as caught:
        rb.submit(lambda: 1)
    assert caught.value.field == "pythonVersion"
    assert caught.value.message.startswith(
        f"Jobs here run Python {', '.join(runtime['pythonVersions'])}, not 3.9;"
    )
    assert len(rb.jobs(limit=100)) == before


def test_map_runs_one_array_job_and_returns_the_results_in_order(dev_sdk: rb.Client) -> None:
    """Needs array jobs (issue 12) in the service and the local executor."""
    squares = rb.map(lambda x: x * x, range(6), name="squares")
    assert squares.type == "Array" and squares.data["arraySize"] == 6
    assert squares.result(timeout=120) == [0, 1, 4, 9, 16, 25]
    children = squares.children()
    assert [c.data["arrayIndex"] for c in children] == list(range(6))
    assert {c.status for c in children} == {"Succeeded"}
    assert squares.credits_spent == sum((c.credits_spent for c in children), Decimal(0))
    assert rb.map("item['a'] + 1", [{"a": 1}, {"a": 41}]).result(timeout=120) == [2, 42]


def test_cli_logs_follow_outputs_preview_abort_delete_and_account(dev_sdk: rb.Client, tmp_path: Path) -> None:
    runner = CliRunner()
    talker = rb.submit("import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(1)")
    followed = runner.invoke(app, ["logs", "-f", talker.id])  # returns once the job is final
    assert followed.exit_code == 0 and followed.stdout == "tick 0\ntick 1\ntick 2\n"
    assert talker.status == "Succeeded"

    writer = rb.submit(["sh", "-c", 'printf 12 > "$REMOTE_BATCH_OUTPUT_DIR/n.txt"'])
    plot = rb.submit(PLOT)
    writer.wait(timeout=60)
    plot.wait(timeout=60)
    downloaded = runner.invoke(app, ["outputs", writer.id, "--download", str(tmp_path / "out"), "--json"])
    assert downloaded.exit_code == 0, downloaded.output
    assert [f["name"] for f in json.loads(downloaded.stdout)] == ["n.txt"]
    assert (tmp_path / "out" / "n.txt").read_text() == "12"
    picture = tmp_path / "p.png"
    assert runner.invoke(app, ["preview", plot.id, "-o", str(picture)]).exit_code == 0
    with Image.open(picture) as image:
        assert image.size == (400, 300)

    sleeper = rb.submit("import time\ntime.sleep(120)")
    aborted = runner.invoke(app, ["abort", sleeper.id, "--json"])
    assert aborted.exit_code == 0 and json.loads(aborted.stdout)["jobId"] == sleeper.id
    assert runner.invoke(app, ["wait", sleeper.id]).exit_code == 2  # Terminated: Aborted by user
    assert runner.invoke(app, ["delete", sleeper.id]).exit_code == 0
    missing = runner.invoke(app, ["status", "job-01NOSUCHJOB0000000000000"])
    assert missing.exit_code == 1 and missing.output.startswith("Error: NotFound: ")

    account = json.loads(runner.invoke(app, ["account", "--json"]).stdout)
    assert account["accountId"] == "dev" and Decimal(str(account["creditBalance"])) > 0
    classes = json.loads(runner.invoke(app, ["machine-classes", "--json"]).stdout)
    assert [c["name"] for c in classes][:2] == ["Basic1x8", "Basic2x8"]
    phone = runner.invoke(app, ["contacts", "set", "--phone", "12345"])
    assert phone.exit_code == 1 and phone.output.rstrip().endswith("(field: phone)")
