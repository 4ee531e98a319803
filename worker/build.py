"""``python -m worker build``: an environment's build, run as an AWS Batch job on the build queue in the
worker image of the environment's Python (``functions.adapters.batch_builder`` submits it).

Steps, each line of them in the build log (CloudWatch Logs: the zone's job log group, the stream the
environment's record names, where ``GET /environments/{name}/log`` reads it):

1. read the request (``REMOTE_BATCH_BUILD_REQUEST_KEY``: the spec) from the zone's bucket;
2. resolve the requirements to a lock with ``uv pip compile`` for the image's job interpreter
   (``REMOTE_BATCH_JOB_PYTHON``, which must be the spec's version); the build hash is SHA-256 of
   (python, lock, platform) (``worker.environments.build_hash``);
3. if the zone's bucket already holds ``environments/<hash>.json``, reuse that build (nothing is
   installed; the other zones get a copy if they lack one);
4. else ``uv pip install --target`` the lock into a folder, check the size limit (10 GiB installed),
   pack it (``environments/<hash>.tar.gz``) and store it with its manifest in every zone's bucket,
   this zone's last;
5. write the outcome (``REMOTE_BATCH_BUILD_OUTCOME_KEY``: ``{"format", "hash", "packages",
   "sizeBytes", "error"}``), which the build job's state-change event brings to the service.

Wheels only (``--no-build``): no package's build code runs in the build container, whose role may
write the builds every account shares. The whole build has 30 minutes (AWS Batch's timeout, 5 minutes
later, stops a build that overran anyway). A failure of the resolver, the installer or a limit is an
outcome (``error``: the first error line), exit code 0; exit code 2 means the build program itself
failed and wrote no outcome (the service then reports AWS Batch's reason).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import boto3

from worker.environments import PLATFORM, archive_key, build_hash, manifest_key, pack
from worker.errors import ConfigError, InputNotFound, WorkerError
from worker.storage import JobStorage

if TYPE_CHECKING:
    from mypy_boto3_logs import CloudWatchLogsClient
    from mypy_boto3_logs.type_defs import InputLogEventTypeDef
    from mypy_boto3_s3 import S3Client

# The variables the build job is submitted with (``functions.domain.environment_builds``).
BUCKET = "REMOTE_BATCH_BUCKET"
REQUEST_KEY = "REMOTE_BATCH_BUILD_REQUEST_KEY"
OUTCOME_KEY = "REMOTE_BATCH_BUILD_OUTCOME_KEY"
LOG_GROUP = "REMOTE_BATCH_BUILD_LOG_GROUP"
LOG_STREAM = "REMOTE_BATCH_BUILD_LOG_STREAM"
REPLICAS = "REMOTE_BATCH_BUILD_REPLICAS"
#: The interpreter the environment is for (the image's ``python3.X``); this one when unset.
JOB_PYTHON = "REMOTE_BATCH_JOB_PYTHON"
#: The uv executable; ``uv`` on ``PATH`` when unset.
UV = "REMOTE_BATCH_UV"
REQUEST_FORMAT = "remote-batch.build-request/1"
OUTCOME_FORMAT = "remote-batch.build-outcome/1"
#: The limits (``functions.domain.environments``): seconds the whole build may take; bytes installed.
TIME_LIMIT_SECONDS = 30 * 60
SIZE_LIMIT_BYTES = 10 * 1024**3
EXIT_BUILDER_ERROR = 2
#: A build log line's most characters (CloudWatch takes 256 KB an event; uv's lines are short).
MAX_LOG_LINE_CHARS = 8192
_REQUIRED = (BUCKET, REQUEST_KEY, OUTCOME_KEY, LOG_GROUP, LOG_STREAM)


class BuildFailed(Exception):
    """A step failed; ``str(exc)`` is the reason the environment shows."""


@dataclass(frozen=True)
class BuildSettings:
    """The build job's variables."""

    bucket: str
    request_key: str
    outcome_key: str
    log_group: str
    log_stream: str
    replicas: tuple[tuple[str, str], ...]
    python: str
    uv: str

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> BuildSettings:
        """Read them. Raises ``ConfigError`` naming a missing one or malformed replicas."""
        missing = [name for name in _REQUIRED if not environ.get(name)]
        if missing:
            raise ConfigError(f"missing environment variable(s): {', '.join(missing)}")
        try:
            replicas = json.loads(environ.get(REPLICAS) or "[]")
            pairs = tuple((str(r["bucket"]), str(r["region"])) for r in replicas)
        except (ValueError, TypeError, KeyError) as exc:
            raise ConfigError(f"{REPLICAS} must be JSON [{{bucket, region}}]") from exc
        return cls(
            bucket=environ[BUCKET],
            request_key=environ[REQUEST_KEY],
            outcome_key=environ[OUTCOME_KEY],
            log_group=environ[LOG_GROUP],
            log_stream=environ[LOG_STREAM],
            replicas=pairs,
            python=environ.get(JOB_PYTHON) or sys.executable,
            uv=environ.get(UV) or shutil.which("uv") or "uv",
        )


@dataclass(frozen=True)
class BuildRequest:
    """The spec, as the service checked it."""

    python: str
    requirements: tuple[str, ...]
    index_url: str | None
    extra_index_urls: tuple[str, ...]

    @classmethod
    def from_document(cls, raw: bytes) -> BuildRequest:
        """Parse the request. Raises ``BuildFailed`` when it is not one."""
        try:
            document = json.loads(raw)
            if document.get("format") != REQUEST_FORMAT:
                raise ValueError("format")
            return cls(
                python=str(document["python"]),
                requirements=tuple(str(line) for line in document["requirements"]),
                index_url=document.get("indexUrl") or None,
                extra_index_urls=tuple(str(url) for url in document.get("extraIndexUrls") or ()),
            )
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise BuildFailed(f"the build request is not one ({type(exc).__name__})") from exc

    def index_arguments(self) -> list[str]:
        """uv's ``--index-url``/``--extra-index-url`` arguments."""
        arguments = ["--index-url", self.index_url] if self.index_url else []
        for url in self.extra_index_urls:
            arguments += ["--extra-index-url", url]
        return arguments


class BuildLog:
    """The build's lines, sent to its log stream at each :meth:`flush` and every 50 lines (and
    with ``echo``, to stderr, the build job's own console log, for the operator). An empty line is
    sent as one space (CloudWatch Logs refuses an empty message)."""

    def __init__(self, logs: CloudWatchLogsClient, group: str, stream: str, *, echo: bool = True) -> None:
        self._logs, self._group, self._stream, self._echo = logs, group, stream, echo
        self._pending: list[InputLogEventTypeDef] = []
        self._created = False

    def write(self, line: str) -> None:
        text = line[:MAX_LOG_LINE_CHARS] or " "
        if self._echo:
            with contextlib.suppress(ValueError, OSError):
                print(text, file=sys.stderr, flush=True)
        self._pending.append({"timestamp": int(time.time() * 1000), "message": text})
        if len(self._pending) >= 50:
            self.flush()

    def flush(self) -> None:
        if not self._pending:
            return
        if not self._created:
            with contextlib.suppress(self._logs.exceptions.ResourceAlreadyExistsException):
                self._logs.create_log_stream(logGroupName=self._group, logStreamName=self._stream)
            self._created = True
        self._logs.put_log_events(
            logGroupName=self._group, logStreamName=self._stream, logEvents=self._pending
        )
        self._pending = []


def first_error_line(output: str) -> str:
    """The resolver's or installer's first error line, with its first cause when it has one
    (``No solution found when resolving dependencies: Because nonexistent was not found ...``)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if line.lower().startswith("error:"):
            text = line[len("error:") :].strip()
            following = lines[index + 1] if index + 1 < len(lines) else ""
            if following.startswith("cause:") or following.startswith("Caused by:"):
                text = f"{text}: {following.split(':', 1)[1].strip()}"
            return text
    return lines[-1] if lines else "the build ended without output"


def parse_lock(lock: str) -> list[dict[str, str]]:
    """The packages of a ``uv pip compile --no-annotate`` lock, as ``{name, version}``: its
    ``name==version`` lines, and its direct references (``name @ https://.../name-1.0-py3-none-any.whl``),
    whose version is the wheel file name's (PEP 427: ``{name}-{version}-...``; ``""`` for another file)."""
    packages = []
    for line in lock.splitlines():
        text = line.split(" #", 1)[0].strip() if not line.lstrip().startswith("#") else ""
        if not text or text.startswith("-"):
            continue
        text = text.split(";", 1)[0].strip()
        if " @ " in text:
            name, _, url = text.partition(" @ ")
            file_name = unquote(urlsplit(url.strip()).path.rsplit("/", 1)[-1])
            parts = file_name.removesuffix(".whl").split("-")
            version = parts[1] if file_name.endswith(".whl") and len(parts) >= 5 else ""
            packages.append({"name": name.split("[", 1)[0].strip(), "version": version})
        elif "==" in text:
            name, _, version = text.partition("==")
            packages.append({"name": name.split("[", 1)[0].strip(), "version": version.strip()})
    return packages


def folder_bytes(root: Path) -> int:
    """What the regular files under ``root`` take (bytes; symlinks not followed)."""
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder, name)
            if not path.is_symlink():
                total += path.stat().st_size
    return total


class Builder:
    """One build (the module's steps 2 to 4); ``run`` returns the outcome document or raises
    ``BuildFailed``. ``clock`` reads seconds (monotonic); the limits default to the module's."""

    def __init__(
        self,
        settings: BuildSettings,
        storage: JobStorage,
        replicas: Sequence[JobStorage],
        log: BuildLog,
        *,
        clock: Callable[[], float] = time.monotonic,
        time_limit: float | None = None,
        size_limit: int | None = None,
    ) -> None:
        self._settings = settings
        self._storage = storage
        self._replicas = list(replicas)
        self._log = log
        self._clock = clock
        self._time_limit = TIME_LIMIT_SECONDS if time_limit is None else time_limit
        self._deadline = clock() + self._time_limit
        self._size_limit = SIZE_LIMIT_BYTES if size_limit is None else size_limit

    def run(self, request: BuildRequest, workdir: Path) -> dict[str, Any]:
        python = self._settings.python
        self._check_python(request.python)
        self._log.write(
            f"resolving {len(request.requirements)} requirements for Python {request.python} on {PLATFORM}"
        )
        compile_arguments = ["pip", "compile", "--python", python, "--no-header", "--no-annotate"]
        lock = self._uv(
            [*compile_arguments, "--no-build", *request.index_arguments(), "-"],
            stdin="\n".join(request.requirements) + "\n",
        )
        packages = parse_lock(lock)
        digest = build_hash(request.python, lock, PLATFORM)
        self._log.write(f"resolved {len(packages)} packages; build {digest}")
        manifest = self._manifest(self._storage, digest)
        if manifest is not None:
            self._log.write(f"reusing build {digest} ({manifest['sizeBytes']} bytes)")
            self._copy_to_replicas(digest, workdir)
            size = int(manifest["sizeBytes"])
        else:
            size = self._install(request, lock, digest, packages, workdir)
        return {
            "format": OUTCOME_FORMAT,
            "hash": digest,
            "packages": packages,
            "sizeBytes": size,
            "error": None,
        }

    def _check_python(self, version: str) -> None:
        done = subprocess.run(  # noqa: S603 - the image's own interpreter
            [self._settings.python, "-I", "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        found = done.stdout.strip()
        if done.returncode != 0 or found != version:
            raise BuildFailed(f"this build image runs Python {found or '?'}, not {version}")

    def _install(
        self, request: BuildRequest, lock: str, digest: str, packages: list[dict[str, str]], workdir: Path
    ) -> int:
        (workdir / "requirements.lock").write_text(lock)
        site = workdir / "site"
        install_arguments = ["pip", "install", "--python", self._settings.python, "--target", str(site)]
        lock_file = str(workdir / "requirements.lock")
        self._uv([*install_arguments, "--no-deps", "--no-build", *request.index_arguments(), "-r", lock_file])
        site.mkdir(exist_ok=True)
        size = folder_bytes(site)
        if size > self._size_limit:
            raise BuildFailed(
                f"the installed packages take {size / 1024**3:.1f} GiB, over the size limit of "
                f"{self._size_limit / 1024**3:g} GiB"
            )
        archive = workdir / "build.tar.gz"
        packed = pack(site, archive)
        self._check_time()
        self._log.write(f"installed {len(packages)} packages ({size} bytes, {packed} bytes packed)")
        manifest = {"python": request.python, "platform": PLATFORM, "sizeBytes": size, "packages": packages}
        for storage in [*self._replicas, self._storage]:  # this zone's last: its manifest says all are there
            self._store(storage, digest, archive, manifest)
        self._log.write(f"stored build {digest} in {len(self._replicas) + 1} zone(s)")
        return size

    def _copy_to_replicas(self, digest: str, workdir: Path) -> None:
        missing = [replica for replica in self._replicas if self._manifest(replica, digest) is None]
        if not missing:
            return
        archive = workdir / "build.tar.gz"
        self._storage.download(archive_key(digest), archive)
        manifest = self._manifest(self._storage, digest) or {}
        for replica in missing:
            self._store(replica, digest, archive, manifest)
        self._log.write(f"copied build {digest} to {len(missing)} more zone(s)")

    @staticmethod
    def _store(storage: JobStorage, digest: str, archive: Path, manifest: Mapping[str, Any]) -> None:
        storage.upload_file(archive, archive_key(digest), "application/gzip")
        storage.write(manifest_key(digest), json.dumps(manifest).encode(), "application/json")

    @staticmethod
    def _manifest(storage: JobStorage, digest: str) -> dict[str, Any] | None:
        if not storage.exists(manifest_key(digest)):
            return None
        try:
            document = json.loads(storage.read(manifest_key(digest)))
        except InputNotFound:
            return None
        except ValueError:
            return None  # a damaged manifest: build again, which rewrites it
        return document if isinstance(document, dict) and "sizeBytes" in document else None

    def _check_time(self) -> None:
        if self._clock() >= self._deadline:
            raise BuildFailed(self._over_time())

    def _over_time(self) -> str:
        return f"the build took longer than its time limit of {self._time_limit / 60:g} minutes"

    def _uv(self, arguments: Sequence[str], stdin: str = "") -> str:
        remaining = self._deadline - self._clock()
        if remaining <= 0:
            raise BuildFailed(self._over_time())
        environ = {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "NO_COLOR": "1"}
        try:
            done = subprocess.run(  # noqa: S603 - uv with the spec's checked requirements and URLs
                [self._settings.uv, *arguments],
                input=stdin,
                capture_output=True,
                text=True,
                timeout=remaining,
                env=environ,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise BuildFailed(self._over_time()) from None
        except OSError as exc:
            raise BuildFailed(f"uv could not be started ({exc.strerror or exc})") from exc
        for line in done.stderr.splitlines():
            self._log.write(line)
        if done.returncode != 0:
            raise BuildFailed(first_error_line(done.stderr))
        return done.stdout


def main(
    environ: Mapping[str, str] | None = None,
    s3_client: S3Client | None = None,
    logs_client: CloudWatchLogsClient | None = None,
    replica_client: Callable[[str], S3Client] | None = None,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> int:
    """Run the build the environment describes and write its outcome; returns the exit code (0: the
    outcome is written, whatever it says; 2: the build program failed and wrote none).

    ``replica_client(region)`` makes the S3 client of another zone's region (default: boto3's).
    """
    environ = os.environ if environ is None else environ
    try:
        settings = BuildSettings.from_environ(environ)
    except WorkerError as exc:
        print(f"remote-batch build: {exc}", file=sys.stderr, flush=True)
        return EXIT_BUILDER_ERROR
    s3 = s3_client or boto3.client("s3")
    make_replica = replica_client or (lambda region: boto3.client("s3", region_name=region))
    storage = JobStorage(s3, settings.bucket)
    log = BuildLog(logs_client or boto3.client("logs"), settings.log_group, settings.log_stream)
    try:
        replicas = [JobStorage(make_replica(region), bucket) for bucket, region in settings.replicas]
        outcome = _outcome(settings, Builder(settings, storage, replicas, log, clock=clock), storage, log)
        log.flush()
        storage.write(settings.outcome_key, json.dumps(outcome).encode(), "application/json")
    except Exception as exc:  # no outcome: the build job fails and the service reports AWS Batch's reason
        print(
            f"remote-batch build: internal error ({type(exc).__name__}: {exc})", file=sys.stderr, flush=True
        )
        return EXIT_BUILDER_ERROR
    return 0


def _outcome(settings: BuildSettings, builder: Builder, storage: JobStorage, log: BuildLog) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="remote-batch-build-", ignore_cleanup_errors=True) as tmp:
        try:
            request = BuildRequest.from_document(storage.read(settings.request_key))
            return builder.run(request, Path(tmp))
        except BuildFailed as exc:
            log.write(f"build failed: {exc}")
            return {"format": OUTCOME_FORMAT, "hash": None, "packages": [], "sizeBytes": 0, "error": str(exc)}
        except WorkerError as exc:  # S3 refused a read or a write: the builder's fault; the log has it
            log.write(f"build failed: {exc}")
            return {
                "format": OUTCOME_FORMAT,
                "hash": None,
                "packages": [],
                "sizeBytes": 0,
                "error": "the builder could not read or store the build in S3 (reported to the operator)",
            }
