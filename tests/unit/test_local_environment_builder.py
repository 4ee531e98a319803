"""The local stack's environment builder with a stand-in for uv (no network): a lock resolved and
installed once per build hash and reused by a second request, the resolver's first error line, the
time and size limits naming themselves, and a request kept until reported."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from functions.domain.environments import BuildOutcome, EnvironmentSpec, spec_hash
from functions.domain.machine_classes import GeoZone
from functions.ports import BuildRequest
from remote_batch_local.environments import LocalEnvironmentBuilder, first_error_line, parse_lock
from remote_batch_local.interpreters import Interpreter
from remote_batch_local.job_pythons import LocalPython, LocalPythons

# A uv that answers `pip compile` with its stdin pinned (or the resolver's error for a name with
# "missing"), and `pip install --target DIR` with one file per pinned line; counts its installs.
FAKE_UV = """\
import pathlib, sys, time
args = sys.argv[1:]
if args[:2] == ["pip", "compile"]:
    text = sys.stdin.read()
    if "missing" in text:
        print("error: No solution found when resolving dependencies", file=sys.stderr)
        cause = "Because missing was not found in the package registry, we can conclude ..."
        print(f"  cause: {cause}", file=sys.stderr)
        sys.exit(1)
    if "corrupt" in text:  # uv's answer to a wheel that is not a zip: a blank line before its hint
        print("error: No solution found when resolving dependencies", file=sys.stderr)
        print("  cause: Because corrupt==1.0 has an invalid package format ...", file=sys.stderr)
        print("", file=sys.stderr)
        print("hint: The structure of `corrupt` (v1.0) was invalid:", file=sys.stderr)
        sys.exit(1)
    if "slow" in text:
        time.sleep(30)
    print(text.strip().lower())
    print("Resolved 1 package in 1ms", file=sys.stderr)
elif args[:2] == ["pip", "install"]:
    target = pathlib.Path(args[args.index("--target") + 1])
    lock = pathlib.Path(args[args.index("-r") + 1]).read_text()
    target.mkdir(parents=True)
    if "grow" in lock:
        for index in range(600):  # 100 bytes every 50 ms for 30 s, unless killed
            (target / f"part{index}.py").write_text("x" * 100)
            time.sleep(0.05)
    for line in lock.splitlines():
        name = line.split("==")[0]
        (target / f"{name}.py").write_text("x" * 100)
    counter = pathlib.Path(sys.argv[0]).with_suffix(".installs")
    counter.write_text(counter.read_text() + "i" if counter.exists() else "i")
    print(f"Installed {len(lock.splitlines())} packages", file=sys.stderr)
"""


class Logs:
    """A CloudWatch Logs client in memory; like CloudWatch Logs it refuses an empty message, and with
    ``broken`` it refuses every write."""

    class exceptions:
        class ResourceAlreadyExistsException(Exception):
            pass

        class InvalidParameterException(Exception):
            pass

    def __init__(self, *, broken: bool = False) -> None:
        self.streams: dict[str, list[str]] = {}
        self.broken = broken

    def create_log_stream(self, *, logGroupName: str, logStreamName: str) -> None:
        if logStreamName in self.streams:
            raise self.exceptions.ResourceAlreadyExistsException()
        self.streams[logStreamName] = []

    def put_log_events(
        self, *, logGroupName: str, logStreamName: str, logEvents: list[dict[str, Any]]
    ) -> None:
        if self.broken or any(not e["message"] for e in logEvents):
            raise self.exceptions.InvalidParameterException("message must be at least 1 character")
        self.streams[logStreamName] += [e["message"] for e in logEvents]


class Reports:
    def __init__(self) -> None:
        self.outcomes: dict[str, BuildOutcome] = {}
        self.done = threading.Semaphore(0)

    def __call__(self, request: BuildRequest, outcome: BuildOutcome) -> None:
        self.outcomes[request.name or request.spec_hash] = outcome
        self.done.release()

    def wait(self, count: int = 1) -> None:
        for _ in range(count):
            assert self.done.acquire(timeout=20)


def _pythons() -> LocalPythons:
    here = Path(sys.executable)
    interpreter = Interpreter("3.12", "3.12.1", here, False, Path(sys.prefix), Path(sys.base_prefix))
    return LocalPythons({"3.12": LocalPython(interpreter)})


@pytest.fixture
def uv(tmp_path: Path) -> str:
    script = tmp_path / "uv.py"
    script.write_text(FAKE_UV)
    launcher = tmp_path / "uv"
    launcher.write_text(f'#!/bin/sh\nexec {sys.executable} {script} "$@"\n')
    launcher.chmod(0o755)
    return str(launcher)


def _builder(tmp_path: Path, uv: str, reports: Reports, logs: Logs, **limits: Any) -> LocalEnvironmentBuilder:
    return LocalEnvironmentBuilder(
        tmp_path / "environments",
        pythons=_pythons(),
        logs=logs,
        log_group="/aws/batch/job",
        zone=GeoZone.UNITED_STATES,
        report=reports,
        uv=uv,
        **limits,
    )


def _request(name: str, *requirements: str, account: str = "dev") -> BuildRequest:
    spec = EnvironmentSpec("3.12", requirements)
    return BuildRequest(account, name, spec, spec_hash(spec), f"environments/{account}/{name}")


def test_one_build_per_hash_shared_by_names_and_accounts(tmp_path: Path, uv: str) -> None:
    reports, logs = Reports(), Logs()
    builder = _builder(tmp_path, uv, reports, logs)
    builder.start_build(_request("ml", "six==1.16.0"))
    reports.wait()
    builder.start_build(_request("ml2", "six==1.16.0", account="other"))
    reports.wait()
    first, second = reports.outcomes["ml"], reports.outcomes["ml2"]
    assert first.error is None and first.hash == second.hash and first.hash is not None
    assert [(p.name, p.version) for p in first.packages] == [("six", "1.16.0")]
    assert first.size_bytes == second.size_bytes == 100
    assert Path(uv).with_suffix(".installs").read_text() == "i"
    assert any(line.startswith("reusing build") for line in logs.streams["environments/other/ml2"])
    site = builder.site_packages(first.hash)
    assert site is not None and (Path(site) / "six.py").is_file()
    builder.close(wait=True)
    assert list((tmp_path / "environments" / ".requests").iterdir()) == []


def test_a_failed_resolution_reports_its_first_error_line(tmp_path: Path, uv: str) -> None:
    reports, logs = Reports(), Logs()
    builder = _builder(tmp_path, uv, reports, logs)
    builder.start_build(_request("bad", "missing==1.0"))
    reports.wait()
    outcome = reports.outcomes["bad"]
    assert outcome.error == (
        "No solution found when resolving dependencies: Because missing was not found in the package "
        "registry, we can conclude ..."
    )
    assert outcome.hash is None
    assert any("Because missing was not found" in line for line in logs.streams["environments/dev/bad"])
    builder.close()


def test_a_corrupt_wheel_fails_the_build_with_uvs_message_and_its_whole_output(
    tmp_path: Path, uv: str
) -> None:
    reports, logs = Reports(), Logs()
    builder = _builder(tmp_path, uv, reports, logs)
    builder.start_build(_request("bad", "corrupt==1.0"))
    reports.wait()
    assert reports.outcomes["bad"].error == (
        "No solution found when resolving dependencies: "
        "Because corrupt==1.0 has an invalid package format ..."
    )
    lines = logs.streams["environments/dev/bad"]
    assert " " in lines and "hint: The structure of `corrupt` (v1.0) was invalid:" in lines
    builder.close()


def test_a_log_that_cannot_be_written_still_reports_the_build(tmp_path: Path, uv: str) -> None:
    reports = Reports()
    builder = _builder(tmp_path, uv, reports, Logs(broken=True))
    builder.start_build(_request("ml", "six==1.16.0"))
    reports.wait()
    outcome = reports.outcomes["ml"]
    assert outcome.error is None and [p.name for p in outcome.packages] == ["six"]
    builder.close(wait=True)
    assert list((tmp_path / "environments" / ".requests").iterdir()) == []


def test_a_build_the_stack_stops_is_not_failed_but_built_at_the_next_start(tmp_path: Path, uv: str) -> None:
    reports, logs = Reports(), Logs()
    builder = _builder(tmp_path, uv, reports, logs)
    builder.start_build(_request("ml", "slow==1.0"))
    time.sleep(0.5)  # uv is running (the fake sleeps 30 s in compile)
    (tmp_path / "environments" / ".abc.partial-12345678").mkdir()  # what a crash mid-install leaves
    started = time.monotonic()
    builder.close(wait=True)
    assert time.monotonic() - started < 10  # uv was killed, not waited for
    assert reports.outcomes == {}
    assert len(list((tmp_path / "environments" / ".requests").iterdir())) == 1
    # The next start builds it (the fake's "slow" is in the requirement, so it sleeps again: a stop
    # again leaves it again) and removes the crash's half-installed folder.
    again = _builder(tmp_path, uv, reports, logs)
    assert again.resume() == 1
    assert not (tmp_path / "environments" / ".abc.partial-12345678").exists()
    again.close(wait=True)
    assert reports.outcomes == {}


def test_the_time_limit_names_itself(tmp_path: Path, uv: str) -> None:
    reports = Reports()
    builder = _builder(tmp_path, uv, reports, Logs(), time_limit=0.5)
    builder.start_build(_request("slow", "slow==1"))
    reports.wait()
    assert reports.outcomes["slow"].error == "the build took longer than its time limit of 0.5 seconds"
    builder.close()


def test_the_size_limit_names_itself_and_leaves_nothing(tmp_path: Path, uv: str) -> None:
    reports = Reports()
    builder = _builder(tmp_path, uv, reports, Logs(), size_limit=50)
    builder.start_build(_request("big", "six==1.16.0"))
    reports.wait()
    assert reports.outcomes["big"].error == (
        "the installed packages take 100 bytes, over the size limit of 50 bytes unpacked"
    )
    assert [p.name for p in (tmp_path / "environments").iterdir()] == [".requests"]
    builder.close()


def test_an_install_growing_past_the_size_limit_is_stopped_while_it_runs(tmp_path: Path, uv: str) -> None:
    # Given an install that would write 60 kB over 30 s, and a limit of 1 kB
    reports = Reports()
    builder = _builder(tmp_path, uv, reports, Logs(), size_limit=1000)
    started = time.monotonic()
    builder.start_build(_request("growing", "grow==1"))
    reports.wait()
    # Then uv is killed once the files pass the limit, long before it would have ended
    error = reports.outcomes["growing"].error
    assert error is not None and error.endswith("over the size limit of 1000 bytes unpacked"), error
    assert time.monotonic() - started < 10
    assert [p.name for p in (tmp_path / "environments").iterdir()] == [".requests"]
    builder.close()


def test_a_request_not_reported_is_built_again_at_start(tmp_path: Path, uv: str) -> None:
    logs = Logs()

    def refuse(request: BuildRequest, outcome: BuildOutcome) -> None:
        raise RuntimeError("the stack stopped")

    first = _builder(tmp_path, uv, refuse, logs)  # type: ignore[arg-type]
    first.start_build(_request("ml", "six==1.16.0"))
    first.close(wait=True)
    reports = Reports()
    again = _builder(tmp_path, uv, reports, logs)
    assert again.resume() == 1
    reports.wait()
    assert reports.outcomes["ml"].error is None
    again.close()


def test_first_error_line_and_parse_lock() -> None:
    output = "Resolved 3 packages\nerror: Failed to download `x==1`\n  Caused by: HTTP status 404\n"
    assert first_error_line(output) == "Failed to download `x==1`: HTTP status 404"
    assert first_error_line("") == "the build ended without output"
    lock = "numpy==2.1.3\nsix==1.16.0 ; python_version >= '3'\n# comment\n"
    assert [(p.name, p.version) for p in parse_lock(lock)] == [("numpy", "2.1.3"), ("six", "1.16.0")]
    # A direct reference (``six @ https://...whl``) is a package too, its version the wheel's
    direct = (
        "six @ https://files.pythonhosted.org/packages/d9/5a/six-1.16.0-py2.py3-none-any.whl\n"
        "requests[socks] @ https://example.com/requests-2.31.0-1-py3-none-any.whl ; python_version >= '3'\n"
        "odd @ https://example.com/odd.tar.gz\n"
        "idna==3.4  # via requests\n"
    )
    assert [(p.name, p.version) for p in parse_lock(direct)] == [
        ("six", "1.16.0"),
        ("requests", "2.31.0"),
        ("odd", ""),
        ("idna", "3.4"),
    ]
