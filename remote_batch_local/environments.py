"""The local stack's environment builder (``functions.ports.EnvironmentBuilder``): resolves an
environment's requirements to a lock with uv (``uv pip compile``) for the interpreter of its Python,
and installs the lock (``uv pip install --target``) into a content-addressed folder under the stack's
home, ``environments/<hash>/site``, where ``hash`` is ``functions.domain.environments.build_hash`` of
(python, lock, platform). Wheels only (``--no-build``), as the cloud's build (``worker.build``): a
source distribution's build code would run here outside every job's sandbox, as the stack's user,
and a spec that builds locally must build in the cloud. A second environment (any name, any
account) whose lock is the same reuses the folder: its log says so and nothing is installed again.
Folders are kept across restarts.

Each build runs in a thread of a small pool; its output goes to the home zone's log group (stream
``BuildRequest.log_stream_name``) and its outcome to ``report``
(``functions.logic.environments.record_build``). A request is written to ``environments/.requests/``
before it is taken and removed once reported, so a stack stopped mid-build builds it again at start
(:meth:`LocalEnvironmentBuilder.resume`).

Limits (``functions.domain.environments``): the whole build (resolution and installation) has
``BUILD_TIME_LIMIT_SECONDS``; the installed files ``BUILD_SIZE_LIMIT_BYTES``, measured while uv installs
(every ``WATCH_SECONDS``: uv is killed as soon as they are over, before they can fill the disk) and once
installed; what was installed is removed. Each failure's reason names the limit
(``time_limit_reason``, ``size_limit_reason``).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from functions.domain.environments import (
    BUILD_SIZE_LIMIT_BYTES,
    BUILD_TIME_LIMIT_SECONDS,
    BuildOutcome,
    EnvironmentSpec,
    Package,
    build_hash,
    size_limit_reason,
    time_limit_reason,
)
from functions.domain.machine_classes import GeoZone
from functions.ports import BuildRequest
from remote_batch_local.job_pythons import LocalPythons
from worker.build import BuildLog, first_error_line, folder_bytes
from worker.build import parse_lock as parse_lock_lines
from worker.environments import PLATFORM

log = logging.getLogger(__name__)

__all__ = ["PLATFORM", "BuildFailed", "LocalEnvironmentBuilder", "first_error_line", "parse_lock"]
#: Builds at once (each is mostly waiting on the index and the disk).
BUILD_WORKERS = 2
#: How often a running uv is checked against the limits (seconds).
WATCH_SECONDS = 0.2
_MANIFEST = "manifest.json"
_REQUESTS = ".requests"

Report = Callable[[BuildRequest, BuildOutcome], None]


class BuildFailed(Exception):
    """A build step failed; ``str(exc)`` is the reason the environment shows."""


def parse_lock(lock: str) -> tuple[Package, ...]:
    """The ``name==version`` lines of a ``uv pip compile --no-annotate`` lock (``worker.build.parse_lock``,
    the cloud build's reading of the same lock)."""
    return tuple(Package(p["name"], p["version"]) for p in parse_lock_lines(lock))


def _index_arguments(spec: EnvironmentSpec) -> list[str]:
    arguments = ["--index-url", spec.index_url] if spec.index_url else []
    for url in spec.extra_index_urls:
        arguments += ["--extra-index-url", url]
    return arguments


class LocalEnvironmentBuilder:
    """Builds environments under ``root`` with uv (see the module docstring).

    Parameters
    ----------
    root : Path
        ``<home>/environments``.
    pythons : LocalPythons
        The interpreters jobs run in, by version: a build resolves and installs for that interpreter.
    logs : Any
        A boto3 ``logs`` client of the home zone (the local moto server).
    log_group : str
        The home zone's job log group, where build logs go too.
    zone : GeoZone
        The home zone.
    report : Report
        Called with each build's outcome (from a pool thread).
    uv : str
        The uv executable.
    time_limit, size_limit : float, int
        Seconds a build may take; bytes its installed files may take.
    """

    def __init__(
        self,
        root: Path,
        *,
        pythons: LocalPythons,
        logs: Any,
        log_group: str,
        zone: GeoZone,
        report: Report,
        uv: str,
        time_limit: float = BUILD_TIME_LIMIT_SECONDS,
        size_limit: int = BUILD_SIZE_LIMIT_BYTES,
    ) -> None:
        self.zone = zone
        self._root = root
        self._requests = root / _REQUESTS
        self._requests.mkdir(parents=True, exist_ok=True)
        self._pythons = pythons
        self._logs = logs
        self._log_group = log_group
        self._report = report
        self._uv = uv
        self._time_limit = time_limit
        self._size_limit = size_limit
        self._pool = ThreadPoolExecutor(max_workers=BUILD_WORKERS, thread_name_prefix="env-build")
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        # Set by close(): a build it stops is not reported (its request stays for the next resume).
        self._closing = threading.Event()
        self._running: set[subprocess.Popen[str]] = set()
        self._running_guard = threading.Lock()

    # -- the port ---------------------------------------------------------------------------------------
    def start_build(self, request: BuildRequest) -> None:
        """Queue the build (written to ``.requests/`` first, so a restart takes it again)."""
        path = self._requests / f"{request.spec_hash[:16]}-{uuid.uuid4().hex}.json"
        data = {**asdict(request), "spec": asdict(request.spec)}
        path.write_text(json.dumps(data))
        self._pool.submit(self._run, request, path)

    def site_packages(self, build_hash: str) -> str | None:
        """``<root>/<hash>/site`` once that build is complete, else None."""
        folder = self._root / build_hash
        return str(folder / "site") if (folder / _MANIFEST).is_file() else None

    # -- the stack's ------------------------------------------------------------------------------------
    def resume(self) -> int:
        """Queue again every request a previous run took but did not report, after removing the
        half-installed folders a crash left; returns how many."""
        for partial in self._root.glob(".*.partial-*"):
            shutil.rmtree(partial, ignore_errors=True)
        count = 0
        for path in sorted(self._requests.glob("*.json")):
            data = json.loads(path.read_text())
            spec = data.pop("spec")
            spec["requirements"] = tuple(spec["requirements"])
            spec["extra_index_urls"] = tuple(spec["extra_index_urls"])
            request = BuildRequest(spec=EnvironmentSpec(**spec), **data)
            self._pool.submit(self._run, request, path)
            count += 1
        return count

    def close(self, *, wait: bool = False) -> None:
        """Stop taking builds and stop those running (their uv killed): neither is reported, both stay
        in ``.requests/`` for the next start's :meth:`resume`. With ``wait``, until the threads have
        ended."""
        self._closing.set()
        with self._running_guard:
            for process in self._running:
                process.kill()
        self._pool.shutdown(wait=wait, cancel_futures=True)

    # -- one build --------------------------------------------------------------------------------------
    def _run(self, request: BuildRequest, path: Path) -> None:
        if self._closing.is_set():
            return
        lines = BuildLog(self._logs, self._log_group, request.log_stream_name, echo=False)
        try:
            outcome = self._build(request, lines, time.monotonic() + self._time_limit)
        except BuildFailed as exc:
            lines.write(f"build failed: {exc}")
            outcome = BuildOutcome(hash=None, error=str(exc))
        except Exception as exc:  # a fault of the builder itself: the environment must not stay Building
            log.exception("environment build crashed name=%s", request.name)
            outcome = BuildOutcome(hash=None, error=f"the builder failed: {type(exc).__name__}")
        if self._closing.is_set():  # stopped by the stack's stop, not failed: built again at next start
            log.info("environment build stopped with the stack name=%s", request.name)
            return
        try:
            lines.flush()
        except Exception:  # the log is lost, not the outcome: the environment must not stay Building
            log.exception("environment build log not written name=%s", request.name)
        try:
            self._report(request, outcome)
        except Exception:  # kept for the next start's resume: the environment stays Building until then
            log.exception("environment build report failed name=%s", request.name)
            return
        path.unlink(missing_ok=True)

    def _build(self, request: BuildRequest, lines: BuildLog, deadline: float) -> BuildOutcome:
        spec = request.spec
        python = self._pythons.by_version.get(spec.python)
        if python is None:
            raise BuildFailed(f"Python {spec.python} is not on this machine")
        interpreter = str(python.interpreter.executable)
        lines.write(f"resolving {len(spec.requirements)} requirements for {python.describe()} on {PLATFORM}")
        lock = self._uv_run(
            [
                "pip",
                "compile",
                "--python",
                interpreter,
                "--no-header",
                "--no-annotate",
                "--no-build",
                *_index_arguments(spec),
                "-",
            ],
            lines,
            deadline,
            stdin="\n".join(spec.requirements) + "\n",
        )
        packages = parse_lock(lock)
        digest = build_hash(spec.python, lock, PLATFORM)
        lines.write(f"resolved {len(packages)} packages; build {digest}")
        with self._hash_lock(digest):
            folder = self._root / digest
            if (folder / _MANIFEST).is_file():
                manifest = json.loads((folder / _MANIFEST).read_text())
                lines.write(f"reusing build {digest} ({manifest['sizeBytes']} bytes)")
                return BuildOutcome(digest, packages, int(manifest["sizeBytes"]))
            size = self._install(spec, interpreter, lock, folder, lines=lines, deadline=deadline)
        lines.write(f"installed {len(packages)} packages ({size} bytes) in {folder}")
        return BuildOutcome(digest, packages, size)

    def _install(
        self,
        spec: EnvironmentSpec,
        interpreter: str,
        lock: str,
        folder: Path,
        *,
        lines: BuildLog,
        deadline: float,
    ) -> int:
        partial = self._root / f".{folder.name}.partial-{uuid.uuid4().hex[:8]}"
        try:
            partial.mkdir()
            (partial / "requirements.lock").write_text(lock)
            self._uv_run(
                [
                    "pip",
                    "install",
                    "--python",
                    interpreter,
                    "--target",
                    str(partial / "site"),
                    "--no-deps",
                    "--no-build",
                    *_index_arguments(spec),
                    "-r",
                    str(partial / "requirements.lock"),
                ],
                lines,
                deadline,
                watch=lambda: self._over_size(partial / "site"),
            )
            (partial / "site").mkdir(exist_ok=True)
            size = folder_bytes(partial / "site")
            if size > self._size_limit:
                raise BuildFailed(size_limit_reason(size, self._size_limit))
            manifest = {"python": spec.python, "platform": PLATFORM, "sizeBytes": size}
            (partial / _MANIFEST).write_text(json.dumps(manifest))
            partial.rename(folder)
            return size
        finally:
            shutil.rmtree(partial, ignore_errors=True)

    def _uv_run(
        self,
        arguments: Sequence[str],
        lines: BuildLog,
        deadline: float,
        stdin: str = "",
        watch: Callable[[], str | None] | None = None,
    ) -> str:
        """Run uv with ``arguments`` until ``deadline`` (``time.monotonic``); every ``WATCH_SECONDS``
        while it runs, ``watch`` may name a limit it broke (the installed size). Either stops it
        (killed) and fails the build with that limit's reason; so does its failing, with its first
        error line. Returns its stdout."""
        if deadline - time.monotonic() <= 0:
            raise BuildFailed(time_limit_reason(self._time_limit))
        if self._closing.is_set():
            raise BuildFailed("the local stack stopped")  # not reported: _run sees the stop
        environ = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "NO_COLOR": "1"}
        process = subprocess.Popen(  # noqa: S603 - uv with the spec's checked requirements and URLs
            [self._uv, *arguments],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environ,
            # Its own session: a Ctrl-C at the stack's terminal stops the stack, which stops the build
            # (close()), rather than killing uv under a build that would then read as failed.
            start_new_session=True,
        )
        with self._running_guard:
            self._running.add(process)
            if self._closing.is_set():  # close() ran between the check above and this start
                process.kill()
        try:
            return self._wait_uv(process, lines, deadline, stdin, watch)
        finally:
            with self._running_guard:
                self._running.discard(process)

    def _wait_uv(
        self,
        process: subprocess.Popen[str],
        lines: BuildLog,
        deadline: float,
        stdin: str,
        watch: Callable[[], str | None] | None,
    ) -> str:
        given: str | None = stdin
        while True:
            remaining = deadline - time.monotonic()
            try:
                stdout, stderr = process.communicate(given, timeout=max(0.0, min(WATCH_SECONDS, remaining)))
                break
            except subprocess.TimeoutExpired:
                given = None  # sent by the first call; the later ones only read
                broken = time_limit_reason(self._time_limit) if remaining <= WATCH_SECONDS else None
                broken = broken or (watch() if watch is not None else None)
                if broken is not None:
                    process.kill()
                    process.communicate()
                    raise BuildFailed(broken) from None
        for line in stderr.splitlines():
            lines.write(line)
        if process.returncode != 0:
            raise BuildFailed(first_error_line(stderr))
        return stdout

    def _over_size(self, site: Path) -> str | None:
        """The size limit's reason once what is installed under ``site`` so far exceeds it."""
        size = folder_bytes(site) if site.is_dir() else 0
        return size_limit_reason(size, self._size_limit) if size > self._size_limit else None

    @contextmanager
    def _hash_lock(self, digest: str) -> Iterator[None]:
        with self._locks_guard:
            lock = self._locks.setdefault(digest, threading.Lock())
        with lock:
            yield
