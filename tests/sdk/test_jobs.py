"""``Job``, ``rb.map``, pickling and the CLI's output against a fake server."""

from __future__ import annotations

import base64
import io
import json
import os
import subprocess
import sys
from decimal import Decimal
from html.parser import HTMLParser
from pathlib import Path

import cloudpickle
import pytest
from PIL import Image
from pytest_httpserver import HTTPServer
from typer.testing import CliRunner
from werkzeug import Response

import remote_batch as rb
from remote_batch import interpreter, sdk
from remote_batch.cli import app
from remote_batch.client import path_segment
from remote_batch.progress import watch
from tests.sdk.conftest import Recorder, error, job, ok

TRACEBACK = (
    'Traceback (most recent call last):\n  File "<job>", line 1, in <module>\n    1/0\n'
    "ZeroDivisionError: division by zero\n"
)


def square_plus(x: int, offset: int = 0) -> int:
    """A function of this test module, which a job's container could not import."""
    return x * x + offset


def test_a_failed_job_raises_remote_job_error_with_the_remote_traceback(
    httpserver: HTTPServer, api: rb.Client
) -> None:
    failed = job(status="Terminated", statusReason="ZeroDivisionError: division by zero", exitCode=1)
    httpserver.expect_request("/jobs/job-01TEST").respond_with_json(failed)
    httpserver.expect_request("/jobs/job-01TEST/result").respond_with_json(
        {"jobId": "job-01TEST", "result": None, "resultRepr": "None",
         "messages": ["ZeroDivisionError: division by zero", TRACEBACK]}
    )  # fmt: skip
    with pytest.raises(rb.RemoteJobError) as caught:
        rb.job("job-01TEST").result()
    assert caught.value.type == "ZeroDivisionError"
    assert caught.value.message == "division by zero"
    assert caught.value.traceback == TRACEBACK
    assert "Remote traceback:" in str(caught.value) and "1/0" in str(caught.value)


def test_a_job_ended_by_a_constraint_raises_with_its_reason(httpserver: HTTPServer, api: rb.Client) -> None:
    ended = job(status="Terminated", statusReason="TimeConstraint of 600 s reached")
    httpserver.expect_request("/jobs/job-01TEST").respond_with_json(ended)
    httpserver.expect_request("/jobs/job-01TEST/result").respond_with_response(
        error(409, "NoOutput", "Job job-01TEST ended Terminated without output.")
    )
    with pytest.raises(rb.RemoteJobError) as caught:
        rb.job("job-01TEST").result()
    assert caught.value.type is None
    assert caught.value.message == "TimeConstraint of 600 s reached"
    assert caught.value.traceback == ""


def test_a_result_comes_back_as_the_python_object_it_was(httpserver: HTTPServer, api: rb.Client) -> None:
    httpserver.expect_request("/jobs/job-01TEST").respond_with_json(job())
    pickled = base64.b64encode(cloudpickle.dumps((1, {2, 3}))).decode()
    httpserver.expect_request("/jobs/job-01TEST/result", query_string="format=pickle").respond_with_json(
        {"jobId": "job-01TEST", "pickle": pickled}
    )
    assert rb.job("job-01TEST").result() == (1, {2, 3})


def test_a_result_that_does_not_unpickle_here_falls_back_to_json(
    httpserver: HTTPServer, api: rb.Client
) -> None:
    httpserver.expect_request("/jobs/job-01TEST").respond_with_json(job())
    httpserver.expect_request("/jobs/job-01TEST/result", query_string="format=pickle").respond_with_json(
        {"jobId": "job-01TEST", "pickle": base64.b64encode(b"\x80\x05cnot_a_module\nThing\n.").decode()}
    )
    httpserver.expect_request("/jobs/job-01TEST/result", query_string="format=json").respond_with_json(
        {"jobId": "job-01TEST", "result": [1, 2], "resultRepr": "array([1, 2])", "messages": []}
    )
    with pytest.warns(UserWarning, match="cannot be unpickled here"):
        assert rb.job("job-01TEST").result() == [1, 2]


def test_a_large_result_is_fetched_from_its_link_without_the_token(
    httpserver: HTTPServer, api: rb.Client
) -> None:
    httpserver.expect_request("/jobs/job-01TEST").respond_with_json(job(type="Array", arraySize=2))
    link = httpserver.url_for("/s3/result.json")
    httpserver.expect_request("/jobs/job-01TEST/result").respond_with_json(
        {"jobId": "job-01TEST", "resultUrl": link}
    )
    stored = Recorder(ok({"result": [1, 4], "resultRepr": "[1, 4]"}))
    httpserver.expect_request("/s3/result.json").respond_with_handler(stored)
    assert rb.job("job-01TEST").result() == [1, 4]
    assert "Authorization" not in stored.requests[0]["headers"]


def test_map_sends_items_inline_up_to_ten_thousand(httpserver: HTTPServer, api: rb.Client) -> None:
    recorder = Recorder(ok(job(type="Array", status="Queued", arraySize=3), 202))
    httpserver.expect_request("/jobs", method="POST").respond_with_handler(recorder)
    rb.map("item ** 2", [1, 2, 3], machine_class="Basic2x8")
    assert json.loads(recorder.requests[0]["body"]) == {
        "code": "item ** 2",
        "arrayItems": [1, 2, 3],
        "machineClass": "Basic2x8",
    }


def test_map_sends_its_parallelism(httpserver: HTTPServer, api: rb.Client) -> None:
    recorder = Recorder(ok(job(type="Array", status="Queued", arraySize=3), 202))
    httpserver.expect_request("/jobs", method="POST").respond_with_handler(recorder)
    rb.map("item + 1", [1, 2, 3], parallelism=2)
    assert json.loads(recorder.requests[0]["body"]) == {
        "code": "item + 1",
        "arrayItems": [1, 2, 3],
        "parallelism": 2,
    }


def test_map_uploads_more_than_ten_thousand_items_as_json_lines(
    httpserver: HTTPServer, api: rb.Client
) -> None:
    upload_url = httpserver.url_for("/s3/upload")
    uploads = Recorder(
        ok({"inputKey": "inputs/u-1.jsonl", "uploadUrl": upload_url, "method": "PUT",
            "headers": {"Content-Type": "application/jsonl"}, "expiresAt": "2026-11-29T17:35:00Z",
            "geoZone": "UnitedStates"}, 201)
    )  # fmt: skip
    httpserver.expect_request("/jobs/uploads", method="POST").respond_with_handler(uploads)
    put = Recorder(Response("", status=200))
    httpserver.expect_request("/s3/upload", method="PUT").respond_with_handler(put)
    submits = Recorder(ok(job(type="Array", status="Queued", arraySize=10_001), 202))
    httpserver.expect_request("/jobs", method="POST").respond_with_handler(submits)

    rb.map(square_plus, range(10_001))

    lines = put.requests[0]["body"].decode().splitlines()
    assert len(lines) == 10_001 and lines[:2] == ["0", "1"] and lines[-1] == "10000"
    assert json.loads(uploads.requests[0]["body"]) == {
        "size": len(put.requests[0]["body"]),
        "contentType": "application/jsonl",
    }
    assert "Authorization" not in put.requests[0]["headers"]
    body = json.loads(submits.requests[0]["body"])
    assert body["arrayItemsKey"] == "inputs/u-1.jsonl" and "arrayItems" not in body
    fn, args, kwargs = cloudpickle.loads(base64.b64decode(body["pickle"]))
    assert (fn(3), args, kwargs) == (9, (), {})


def test_a_function_of_the_users_own_module_is_pickled_by_value(tmp_path: Path) -> None:
    data = sdk.dumps_call(square_plus, (4,), {"offset": 1})
    (tmp_path / "call.pickle").write_bytes(data)
    # Loaded where this test module cannot be imported, as in a job's container.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    loaded = subprocess.run(
        [sys.executable, "-c", "import cloudpickle; f, a, k = cloudpickle.load(open('call.pickle', 'rb')); "
         "import sys; assert 'tests' not in sys.modules; print(f(*a, **k))"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert (loaded.returncode, loaded.stdout.strip()) == (0, "17"), loaded.stderr
    assert "tests.sdk.test_jobs" not in cloudpickle.list_registry_pickle_by_value()  # registration undone
    assert sdk._by_value_modules(json.dumps) == []  # the standard library goes by reference


def test_a_pickle_carries_the_python_version(httpserver: HTTPServer, api: rb.Client) -> None:
    recorder = Recorder(ok(job(status="Queued"), 202))
    httpserver.expect_request("/jobs", method="POST").respond_with_handler(recorder)
    rb.submit(square_plus, 2, kwargs={"offset": 3}, name="sq")
    body = json.loads(recorder.requests[0]["body"])
    assert body["pythonVersion"] == interpreter.python_version() and body["name"] == "sq"
    fn, args, kwargs = cloudpickle.loads(base64.b64decode(body["pickle"]))
    assert fn(*args, **kwargs) == 7


def test_submit_refuses_what_is_not_code_a_command_or_a_function(api: rb.Client) -> None:
    with pytest.raises(TypeError, match="not int"):
        rb.submit(42)
    with pytest.raises(TypeError, match="only taken with a function"):
        rb.submit("x", 1)


def png(colour: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (30, 20), colour).save(out, format="PNG")
    return out.getvalue()


class Parsed(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[dict[str, str | None]] = []
        self.spans: list[str] = []
        self.text: list[str] = []
        self._in_span = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "img":
            self.images.append(dict(attrs))
        self._in_span = tag == "span"

    def handle_data(self, data: str) -> None:
        (self.spans if self._in_span else self.text).append(data)
        self._in_span = False


def test_the_jupyter_repr_shows_the_status_credits_times_and_the_preview(
    httpserver: HTTPServer, api: rb.Client
) -> None:
    picture = png("red")
    link = httpserver.url_for("/s3/preview.png")
    httpserver.expect_request("/jobs/job-01TEST").respond_with_json(job(name="plot <1>", creditsSpent=1.0))
    httpserver.expect_request("/jobs/job-01TEST/preview.png").respond_with_response(
        Response(
            json.dumps({"url": link}), status=303, headers={"Location": link}, content_type="application/json"
        )
    )
    httpserver.expect_request("/s3/preview.png").respond_with_data(picture, content_type="image/png")
    found = rb.job("job-01TEST")

    rendered = found._repr_html_()

    parsed = Parsed()
    parsed.feed(rendered)
    assert parsed.spans == ["Succeeded"]
    assert "#198754" in rendered  # the green badge
    assert "plot <1>" in parsed.text and "plot <1>" not in rendered  # escaped
    assert "2026-11-29T17:20:02Z" in parsed.text and "1.0" in parsed.text
    (image,) = parsed.images
    src = str(image["src"])
    assert src.startswith("data:image/png;base64,")
    assert base64.b64decode(src.split(",", 1)[1]) == picture
    assert found.preview_image.size == (30, 20)
    assert repr(found) == "<Job job-01TEST 'plot <1>' Succeeded Basic1x8 credits=1.0>"


def test_a_running_jobs_repr_has_no_preview(httpserver: HTTPServer, api: rb.Client) -> None:
    httpserver.expect_request("/jobs/job-01TEST").respond_with_json(job(status="Running", completedAt=None))
    rendered = rb.job("job-01TEST")._repr_html_()
    assert "Running" in rendered and "<img" not in rendered and "#0d6efd" in rendered


def test_wait_prints_plain_lines_when_not_a_terminal(httpserver: HTTPServer, api: rb.Client) -> None:
    states = Recorder(ok(job(status="Queued")), ok(job(status="Running", creditsSpent=0.0167)), ok(job()))
    httpserver.expect_request("/jobs/job-01TEST").respond_with_handler(states)
    found = rb.Job(api, job(status="Queued"))
    stream = io.StringIO()
    with watch(found, enabled=True, stream=stream) as display:
        for _ in range(3):
            found.refresh()
            display.show(found)
    lines = stream.getvalue().splitlines()
    assert [line.split()[1] for line in lines] == ["Queued", "Running", "Succeeded"]
    assert lines[1].endswith("0.0167 credits")
    assert not display.live


def test_outputs_download_keeps_relative_paths(
    httpserver: HTTPServer, api: rb.Client, tmp_path: Path
) -> None:
    httpserver.expect_request("/jobs/job-01TEST/outputs").respond_with_json(
        {"files": [{"name": "out/a.csv", "size": 4, "url": httpserver.url_for("/s3/a")}]}
    )
    httpserver.expect_request("/s3/a").respond_with_data(b"x,y\n")
    written = rb.Job(api, job()).outputs.download(tmp_path / "d")
    assert written == [tmp_path / "d" / "out" / "a.csv"]
    assert written[0].read_bytes() == b"x,y\n"


def test_outputs_and_the_cli_download_follow_every_page(
    httpserver: HTTPServer, api: rb.Client, tmp_path: Path
) -> None:
    # Given outputs listed over three pages (GET /jobs/{jobId}/outputs with nextToken)
    names = [f"f{index}.txt" for index in range(5)]
    pages = [names[:2], names[2:4], names[4:]]
    for number, page in enumerate(pages):
        query = {} if number == 0 else {"nextToken": f"t{number}"}
        files = [{"name": n, "size": 1, "url": httpserver.url_for(f"/s3/{n}")} for n in page]
        token = f"t{number + 1}" if number + 1 < len(pages) else None
        httpserver.expect_request("/jobs/job-01TEST/outputs", query_string=query).respond_with_json(
            {"files": files, "nextToken": token}
        )
    for name in names:
        httpserver.expect_request(f"/s3/{name}").respond_with_data(name.encode())

    assert rb.Job(api, job()).outputs.names == names
    httpserver.expect_request("/jobs/job-01TEST").respond_with_json(job())
    done = CliRunner().invoke(app, ["outputs", "job-01TEST", "--download", str(tmp_path / "d")])
    assert done.exit_code == 0, done.output
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == names
    assert all((tmp_path / "d" / n).read_bytes() == n.encode() for n in names)


def test_cli_errors_print_the_message_and_field_and_no_traceback(
    httpserver: HTTPServer, api: rb.Client
) -> None:
    httpserver.expect_request("/jobs", method="POST").respond_with_response(
        error(400, "ValidationError", "Unknown machine class 'Nope'.", "machineClass")
    )
    result = CliRunner().invoke(app, ["submit", "--machine-class", "Nope", "--code", "1"])
    assert result.exit_code == 1
    assert (
        result.output.strip() == "Error: ValidationError: Unknown machine class 'Nope'. (field: machineClass)"
    )


def test_cli_submit_wait_exits_2_when_terminated(httpserver: HTTPServer, api: rb.Client) -> None:
    httpserver.expect_request("/jobs", method="POST").respond_with_json(job(status="Queued"), status=202)
    ended = job(status="Terminated", statusReason="Exit code 3", exitCode=3)
    httpserver.expect_request("/jobs/job-01TEST").respond_with_json(ended)
    result = CliRunner().invoke(app, ["submit", "--wait", "--json", "--", "sh", "-c", "exit 3"])
    assert result.exit_code == 2
    assert json.loads(result.stdout[result.stdout.index("{") :])["exitCode"] == 3


def test_a_log_tail_returns_each_line_once_even_within_one_millisecond(
    httpserver: HTTPServer, api: rb.Client
) -> None:
    from remote_batch.jobs import LogTail

    first = [{"timestamp": "2026-11-29T17:20:01.000Z", "message": "a"},
             {"timestamp": "2026-11-29T17:20:01.500Z", "message": "b"}]  # fmt: skip
    # The second read is since b's millisecond: b again, c written in the same millisecond, then d.
    second = [{"timestamp": "2026-11-29T17:20:01.500Z", "message": "b"},
              {"timestamp": "2026-11-29T17:20:01.500Z", "message": "c"},
              {"timestamp": "2026-11-29T17:20:02.000Z", "message": "d"}]  # fmt: skip
    pages = Recorder(
        ok({"jobId": "job-01TEST", "events": first, "nextToken": None}),
        ok({"jobId": "job-01TEST", "events": second, "nextToken": None}),
        ok({"jobId": "job-01TEST", "events": second[2:], "nextToken": None}),
    )
    httpserver.expect_request("/jobs/job-01TEST/log").respond_with_handler(pages)
    tail = LogTail(rb.Job(api, job(status="Running")))

    assert [m for _, m in tail.new_lines()] == ["a", "b"]
    assert [m for _, m in tail.new_lines()] == ["c", "d"]
    assert tail.new_lines() == []
    assert "since" not in pages.requests[0]["args"]
    assert pages.requests[1]["args"]["since"] == "2026-11-29T17:20:01.500000Z"
    assert pages.requests[2]["args"]["since"] == "2026-11-29T17:20:02Z"


def test_cli_result_writes_the_json_result(httpserver: HTTPServer, api: rb.Client, tmp_path: Path) -> None:
    httpserver.expect_request("/jobs/job-01TEST").respond_with_json(job())
    httpserver.expect_request("/jobs/job-01TEST/result", query_string="format=json").respond_with_json(
        {"jobId": "job-01TEST", "result": {"a": [1, 2.5]}, "resultRepr": "{'a': [1, 2.5]}", "messages": []}
    )
    target = tmp_path / "r.json"
    done = CliRunner().invoke(app, ["result", "job-01TEST", "-o", str(target)])
    assert done.exit_code == 0, done.output
    assert json.loads(target.read_text()) == {"a": [1, 2.5]}


def test_usage_follows_every_page_and_adds_their_totals_exactly(
    httpserver: HTTPServer, api: rb.Client
) -> None:
    def entry(job_id: str) -> dict[str, object]:
        return {"at": "2026-11-29T17:20:00Z", "kind": "charge", "credits": "0.1", "jobId": job_id,
                "balanceAfter": "1"}  # fmt: skip

    httpserver.expect_request("/account/usage", query_string={"nextToken": "t1"}).respond_with_json(
        {"entries": [entry("job-b")], "totalCharged": "0.2", "nextToken": None}
    )
    httpserver.expect_request("/account/usage").respond_with_json(
        {"entries": [entry("job-a")], "totalCharged": "0.1", "nextToken": "t1"}
    )

    found = rb.usage()

    assert [row.job_id for row in found] == ["job-a", "job-b"]
    assert found.total_charged == Decimal("0.3")


@pytest.mark.parametrize(
    ("value", "segment"),
    [
        ("job-01TEST", "job-01TEST"),
        ("../account", "..%2Faccount"),
        ("../account/members/someone", "..%2Faccount%2Fmembers%2Fsomeone"),
        ("a?b#c", "a%3Fb%23c"),
        ("a b%", "a%20b%25"),
    ],
)
def test_an_id_is_always_one_path_segment(value, segment):
    assert path_segment(value) == segment


@pytest.mark.parametrize("value", ["", ".", ".."])
def test_an_empty_or_dot_id_is_refused_naming_what_it_is(value):
    with pytest.raises(ValueError, match=f"job id {value!r} is not an id"):
        path_segment(value, "job id")


def test_an_id_with_a_path_in_it_reaches_no_other_route(httpserver: HTTPServer, api: rb.Client) -> None:
    # Given an account route a crafted id could reach if it were put in the URL as it is
    recorder = Recorder(error(404, "NotFound", "No job ../account."))
    httpserver.expect_request("/account").respond_with_json({"accountId": "dev"})
    httpserver.expect_request("/jobs/../account").respond_with_handler(recorder)
    httpserver.expect_request("/account/members/x", method="DELETE").respond_with_json({})

    # When the SDK and the CLI are given it, they ask for that job and nothing else
    with pytest.raises(rb.NotFound):
        rb.job("../account", client=api)
    status = CliRunner().invoke(app, ["status", "../account"])
    deleted = CliRunner().invoke(app, ["delete", "../account/members/x"])
    empty = CliRunner().invoke(app, ["status", ""])

    assert len(recorder.requests) >= 2
    assert all(r["path"] == "/jobs/../account" for r in recorder.requests)
    assert status.exit_code == 1
    assert deleted.exit_code == 1
    assert empty.exit_code == 1
    assert "job id '' is not an id" in empty.output
    assert not any(r.path.startswith("/account") for r, _ in httpserver.log)
