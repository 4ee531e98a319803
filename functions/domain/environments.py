"""Environments: a named, per-account set of Python packages jobs run with (issue 24).

An environment is asked for by its **spec** (:class:`EnvironmentSpec`: a Python version, PEP 508
requirement lines, the package indexes to resolve them from, and optionally a container image). The
service resolves the requirements to a **lock** (exact pins, uv's ``pip compile``) and installs it once
per **identity**: the hash of (python, lock, platform) (:func:`build_hash`), so two names or two
accounts asking the same thing share one build. The spec's own hash (:func:`spec_hash`) says whether a
second ``PUT`` asks the same thing (200) or another (409).

This module is the pure part: the spec and its validation (each bad field a 400 naming it, before
anything is written), the canonical hashes, the record and its status machine::

    Building --built--> Ready
    Building --failed (resolver's/installer's first error line, time or size limit)--> Failed

It reads no clock and calls nothing.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement

from functions.domain.errors import Conflict, ValidationFailed
from functions.domain.images import image_hash, parse_image
from functions.domain.prerequisites import Prerequisite, PrerequisiteKind, PrerequisiteState, Standing
from functions.domain.runtime import PythonRuntime
from functions.domain.text import LABEL_PATTERN, URL_CHARS_PATTERN, full_match

#: An environment's name: a letter, then letters, digits, ``-``, ``_`` or ``.``; 2 to 64 characters.
NAME_PATTERN = r"^[A-Za-z][A-Za-z0-9._-]{1,63}$"
#: Most requirement lines in one spec.
MAX_REQUIREMENTS = 500
#: Longest requirement line, in characters (a PEP 508 line with a URL and markers fits easily).
MAX_REQUIREMENT_CHARS = 1000
#: Most extra index URLs.
MAX_EXTRA_INDEXES = 10
#: Longest index URL or image reference, in characters.
MAX_URL_CHARS = 2048
#: A build that takes longer fails (seconds): 30 minutes.
BUILD_TIME_LIMIT_SECONDS = 30 * 60
#: A build whose installed files take more fails (bytes, unpacked): 10 GiB.
BUILD_SIZE_LIMIT_BYTES = 10 * 1024**3
#: How long an unnamed environment (a job's inline spec) is kept after it was asked for: the next job
#: with the same spec after that asks for it again (its build is reused when its lock is the same).
UNNAMED_RETENTION = timedelta(days=30)
#: How long an unnamed environment that failed refuses jobs asking for it (400 on ``environment``);
#: after that the next one builds it again (a failure may have been the index's, not the spec's).
UNNAMED_RETRY_AFTER = timedelta(minutes=10)
#: The worker's variable naming the build (:func:`build_hash`) of the job's environment: the job side
#: runs with that build's packages and none of the image's.
ENVIRONMENT_HASH_VARIABLE = "REMOTE_BATCH_ENVIRONMENT_HASH"
#: Most packages a lock may resolve to (the record and ``GET /environments/{name}`` list each one); a
#: build resolving to more fails saying so.
MAX_PACKAGES = 2000
#: Builds one account may have in progress at once; one more is refused (a quota, ``QuotaExceeded``).
MAX_CONCURRENT_BUILDS = 3

# An image reference as the OCI distribution spec and Docker's reference grammar spell it:
# [registry[:port]/]path[:tag][@digest] (docker/distribution reference/regexp.go, simplified to its
# lower-case path components).
_IMAGE_PATTERN = re.compile(
    r"^(?:(?P<registry>[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]{1,5})?)/)?"
    r"(?P<path>[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?$"
)


class EnvironmentStatus(StrEnum):
    """Where an environment's build is."""

    BUILDING = "Building"
    READY = "Ready"
    FAILED = "Failed"


@dataclass(frozen=True, slots=True)
class EnvironmentSpec:
    """What an environment is asked to hold (``PUT /environments/{name}``'s body).

    Attributes
    ----------
    python : str
        ``major.minor`` (one of ``GET /runtime``'s versions).
    requirements : tuple[str, ...]
        PEP 508 requirement lines, as given (their order is kept: it is the user's).
    index_url : str | None
        The package index to resolve from instead of PyPI.
    extra_index_urls : tuple[str, ...]
        More indexes to resolve from.
    image : str | None
        A container image reference the job runs in instead of the service's worker image
        (``functions.domain.images``).
    repository_credentials : str | None
        The Secrets Manager secret ARN a private registry's ``image`` is pulled with.
    """

    python: str
    requirements: tuple[str, ...] = ()
    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()
    image: str | None = None
    repository_credentials: str | None = None

    def canonical(self) -> dict[str, object]:
        """The spec as the hash sees it: each requirement normalized by ``packaging`` (so ``Six ==
        1.16.0`` and ``six==1.16.0`` are one spec), in the user's order; ``repositoryCredentials`` only
        when given (a spec without it hashes as before the field existed)."""
        canonical: dict[str, object] = {
            "python": self.python,
            "requirements": [str(Requirement(line)) for line in self.requirements],
            "indexUrl": self.index_url,
            "extraIndexUrls": list(self.extra_index_urls),
            "image": self.image,
        }
        if self.repository_credentials is not None:
            canonical["repositoryCredentials"] = self.repository_credentials
        return canonical


def _amount(value: float, unit: str) -> str:
    return f"{value:g} {unit}" if value == 1 else f"{value:g} {unit}s"


def time_limit_reason(limit_seconds: float) -> str:
    """Why a build over its time limit failed: ``the build took longer than its time limit of 30
    minutes`` (seconds below a minute)."""
    amount = (
        _amount(limit_seconds / 60, "minute") if limit_seconds >= 60 else _amount(limit_seconds, "second")
    )
    return f"the build took longer than its time limit of {amount}"


def size_limit_reason(size_bytes: int, limit_bytes: int) -> str:
    """Why a build over its size limit failed: ``the installed packages take 12.3 GiB, over the size
    limit of 10 GiB unpacked`` (bytes below a GiB; ``size_bytes`` what was measured when it stopped,
    at least that much)."""
    if limit_bytes >= 1024**3:
        taken, limit = f"{size_bytes / 1024**3:.1f} GiB", f"{limit_bytes / 1024**3:g} GiB"
    else:
        taken, limit = f"{size_bytes} bytes", f"{limit_bytes} bytes"
    return f"the installed packages take {taken}, over the size limit of {limit} unpacked"


def _sha256(value: object) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def spec_hash(spec: EnvironmentSpec) -> str:
    """The hex SHA-256 of the canonical spec (:meth:`EnvironmentSpec.canonical`, JSON with sorted keys)."""
    return _sha256(spec.canonical())


def build_hash(python: str, lock: str, platform: str) -> str:
    """An environment's identity: the hex SHA-256 of (python, the lock's text, platform), so the same
    resolution on the same platform is one build wherever it was asked for.

    ``platform`` names where the files run (``linux-x86_64``, ``linux-aarch64``: wheels differ)."""
    return _sha256({"python": python, "lock": lock, "platform": platform})


def check_name(name: str, field_name: str = "name") -> str:
    """``name`` if it matches :data:`NAME_PATTERN`; else ``ValidationFailed`` on ``field_name``."""
    if not re.fullmatch(NAME_PATTERN, name):
        raise ValidationFailed(
            f"Environment name {name[:80]!r} must be 2 to 64 letters, digits, '.', '_' or '-', "
            "starting with a letter.",
            field=field_name,
        )
    return name


def _check_index(url: str, field_name: str, allow_http: bool) -> str:
    if not full_match(URL_CHARS_PATTERN, url):
        raise ValidationFailed(
            f"{field_name} must be a URL of visible ASCII characters (hosts in their xn-- form), "
            f"not {url[:200]!a}.",
            field_name,
        )
    parts = urlsplit(url)
    schemes = ("https", "http") if allow_http else ("https",)
    if len(url) > MAX_URL_CHARS or parts.scheme not in schemes or not parts.hostname:
        allowed = "https (or http on the local stack)" if allow_http else "https"
        raise ValidationFailed(
            f"{field_name} must be an {allowed} URL with a host, not {url[:200]!r}.", field_name
        )
    if parts.password is not None:
        raise ValidationFailed(
            f"{field_name} must not carry a password: it would be stored with the spec and shown to "
            "every member.",
            field_name,
        )
    return url


def check_image(reference: str) -> str:
    """``reference`` if it is an image name (``[registry/]repository[:tag][@sha256:digest]``); else
    ``ValidationFailed`` on ``image``."""
    if len(reference) > MAX_URL_CHARS or not _IMAGE_PATTERN.fullmatch(reference):
        raise ValidationFailed(
            f"image {reference[:200]!r} is not an image reference such as "
            "123456789012.dkr.ecr.eu-west-1.amazonaws.com/repo:tag or python:3.12-slim.",
            field="image",
        )
    return reference


def check_spec(spec: EnvironmentSpec, runtime: PythonRuntime, *, allow_http: bool = False) -> EnvironmentSpec:
    """The spec, each field checked; the first bad one raises ``ValidationFailed`` naming it.

    Parameters
    ----------
    spec : EnvironmentSpec
        As the request gave it.
    runtime : PythonRuntime
        The versions this deployment runs (``python`` must be one: ``field`` ``python``).
    allow_http : bool
        Index URLs may be ``http`` (the local stack, whose index may be a local mirror); else only
        ``https``.

    Raises
    ------
    ValidationFailed
        ``python``; ``requirements`` (over :data:`MAX_REQUIREMENTS`); ``requirements[i]`` (a line
        ``packaging`` cannot parse, over :data:`MAX_REQUIREMENT_CHARS`, or holding a character
        ``functions.domain.text.LABEL_PATTERN`` refuses, such as ESC in a marker); ``indexUrl`` and
        ``extraIndexUrls[i]`` (visible ASCII, https or allowed http, a host, no password);
        ``image``; ``requirements`` with an ``image`` (an image environment runs the image's own
        packages: requirements on top of an image are not built yet);
        ``repositoryCredentials`` without an ``image``.
    """
    if spec.python not in runtime.versions:
        raise ValidationFailed(
            f"Environments here run Python {', '.join(runtime.versions)}, not {spec.python[:20]!r}.",
            field="python",
        )
    if len(spec.requirements) > MAX_REQUIREMENTS:
        raise ValidationFailed(
            f"An environment holds at most {MAX_REQUIREMENTS} requirement lines, "
            f"not {len(spec.requirements)}.",
            field="requirements",
        )
    for index, line in enumerate(spec.requirements):
        where = f"requirements[{index}]"
        if len(line) > MAX_REQUIREMENT_CHARS:
            raise ValidationFailed(f"{where} is over {MAX_REQUIREMENT_CHARS} characters.", field=where)
        if not full_match(LABEL_PATTERN, line):
            raise ValidationFailed(
                f"{where} {line[:200]!a} holds a control, line-break or bidirectional formatting "
                "character, or only spaces.",
                field=where,
            )
        try:
            Requirement(line)
        except InvalidRequirement as exc:
            first = str(exc).splitlines()[0] if str(exc) else "not a PEP 508 requirement"
            raise ValidationFailed(
                f"{where} {line[:200]!r} is not a requirement: {first}", field=where
            ) from None
    if spec.index_url is not None:
        _check_index(spec.index_url, "indexUrl", allow_http)
    if len(spec.extra_index_urls) > MAX_EXTRA_INDEXES:
        raise ValidationFailed(f"At most {MAX_EXTRA_INDEXES} extraIndexUrls.", field="extraIndexUrls")
    for index, url in enumerate(spec.extra_index_urls):
        _check_index(url, f"extraIndexUrls[{index}]", allow_http)
    if spec.image is not None:
        check_image(spec.image)
        if spec.requirements or spec.index_url is not None or spec.extra_index_urls:
            raise ValidationFailed(
                "An environment with an image runs the image's own packages: requirements (and package "
                "indexes) on top of an image are not supported yet; install them into the image, or "
                "leave image null.",
                field="requirements",
            )
    elif spec.repository_credentials is not None:
        raise ValidationFailed(
            "repositoryCredentials is the pull secret of an image; give image too, or leave it null.",
            field="repositoryCredentials",
        )
    return spec


@dataclass(frozen=True, slots=True)
class Package:
    """One resolved package of a lock: its normalized name and exact version."""

    name: str
    version: str


@dataclass(frozen=True, slots=True)
class BuildOutcome:
    """What a build ended with (the builder reports it).

    ``hash`` is the build's identity (:func:`build_hash`; None when resolution failed before a lock
    existed); ``error`` the first error line when it failed (None when it succeeded).
    """

    hash: str | None
    packages: tuple[Package, ...] = ()
    size_bytes: int = 0
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Environment:
    """An account's environment.

    Attributes
    ----------
    account_id : str
        The owning account.
    name : str | None
        Unique per account; None for an unnamed environment, asked for inline by a job
        (``POST /jobs`` with ``environment`` a spec), which the account's spec hash finds again.
    spec : EnvironmentSpec
        As asked; ``spec_hash`` its :func:`spec_hash`.
    status : EnvironmentStatus
        ``Building`` until the builder reports, then ``Ready`` or ``Failed``.
    status_reason : str | None
        Why it is where it is (``Environment ml failed: ...`` carries the first error line).
    hash : str | None
        Its identity (:func:`build_hash`), known once the requirements are resolved.
    packages : tuple[Package, ...]
        The resolved lock (empty until Ready).
    size_bytes : int
        What the installed files take, unpacked (bytes; 0 until Ready).
    image_digest : str | None
        The digest (``sha256:...``) the spec's ``image`` resolved to (None without an image, or when
        it did not resolve); jobs run in ``repository@digest``.
    created_at, ready_at, failed_at : datetime, datetime | None, datetime | None
        When it was asked for; when it became Ready; when it became Failed.
    log_stream_name : str
        The build log's stream in the home zone's log group.
    version : int
        Guards every write (conditional on the version read).
    """

    account_id: str
    name: str | None
    spec: EnvironmentSpec
    spec_hash: str
    status: EnvironmentStatus
    created_at: datetime
    log_stream_name: str
    status_reason: str | None = None
    hash: str | None = None
    packages: tuple[Package, ...] = field(default_factory=tuple)
    size_bytes: int = 0
    ready_at: datetime | None = None
    failed_at: datetime | None = None
    version: int = 0
    image_digest: str | None = None

    @property
    def label(self) -> str:
        """How messages name it: ``environment ml``, or ``the inline environment`` (unnamed)."""
        return f"environment {self.name}" if self.name is not None else "the inline environment"

    @property
    def waiting_reason(self) -> str:
        """What a job waiting for this environment says (``Building environment ml (Python 3.12,
        14 packages)``; the count is the requirement lines until the lock is known)."""
        count = len(self.packages) if self.packages else len(self.spec.requirements)
        noun = "package" if count == 1 else "packages"
        return f"Building {self.label} (Python {self.spec.python}, {count} {noun})"

    @property
    def pinned_image(self) -> str | None:
        """The image jobs run in, by digest (``registry/repository@sha256:...``); None without one."""
        if self.spec.image is None or self.image_digest is None:
            return None
        return parse_image(self.spec.image).pinned(self.image_digest)


@dataclass(frozen=True, slots=True)
class JobEnvironment:
    """What a job records of the environment it runs in (``environment`` on ``GET /jobs/{jobId}``):
    its name (None: an inline spec), its build's hash (what the worker runs with; None while the job
    waits for the build) and its Python; for an image environment the image pinned by digest
    (``registry/repository@sha256:...``) and the pull secret's ARN."""

    name: str | None
    hash: str | None
    python: str
    image: str | None = None
    repository_credentials: str | None = None


def for_job(environment: Environment, python_version: str | None) -> JobEnvironment:
    """The environment a job submitted in ``environment`` runs with: its build's hash when Ready, None
    while it is Building (the job then waits for it: :func:`environment_prerequisite`).

    Raises
    ------
    ValidationFailed
        ``environment``: it failed (naming why); ``pythonVersion``: the request names another Python
        than the environment's.
    """
    if environment.status is EnvironmentStatus.FAILED:
        reason = (environment.status_reason or "").rstrip(".")
        if environment.name is None:
            advice = (
                f"the same inline spec builds again {int(UNNAMED_RETRY_AFTER.total_seconds() // 60)} "
                "minutes after it failed; change the requirements to try at once"
            )
        else:
            advice = f"delete environment {environment.name} and create it with a spec that builds"
        raise ValidationFailed(f"{reason}. To use it, {advice}.", "environment")
    if python_version is not None and python_version != environment.spec.python:
        raise ValidationFailed(
            f"{environment.label[0].upper()}{environment.label[1:]} runs Python {environment.spec.python}, "
            f"not {python_version}; submit from that version or choose another environment.",
            field="pythonVersion",
        )
    ready = environment.status is EnvironmentStatus.READY
    return JobEnvironment(
        environment.name,
        environment.hash if ready else None,
        environment.spec.python,
        image=environment.pinned_image,
        repository_credentials=environment.spec.repository_credentials,
    )


def for_job_spec(spec: EnvironmentSpec, python_version: str | None) -> JobEnvironment:
    """What a job records of an inline spec before its unnamed environment exists (no name, no hash).
    Raises ``ValidationFailed`` (``pythonVersion``) when the request names another Python."""
    if python_version is not None and python_version != spec.python:
        raise ValidationFailed(
            f"The inline environment runs Python {spec.python}, not {python_version}; submit from that "
            "version or give another python.",
            field="pythonVersion",
        )
    return JobEnvironment(None, None, spec.python)


def environment_prerequisite(environment: Environment) -> Prerequisite:
    """What a job submitted while ``environment`` builds waits for: that environment of that account
    with that spec (``<accountId>/<name>/<specHash>``, the name empty for an unnamed one), so one
    deleted and asked again with another spec is not the one the job waited for."""
    key = f"{environment.account_id}/{environment.name or ''}/{environment.spec_hash}"
    return Prerequisite(PrerequisiteKind.ENVIRONMENT, key)


def parse_environment_prerequisite(prerequisite: Prerequisite) -> tuple[str, str | None, str]:
    """(account id, name or None, spec hash) of an :func:`environment_prerequisite`. Raises
    ``ValueError`` for another kind or key."""
    parts = prerequisite.key.split("/")
    if prerequisite.kind is not PrerequisiteKind.ENVIRONMENT or len(parts) != 3 or not parts[2]:
        raise ValueError(f"not an environment prerequisite: {prerequisite.id!r}")
    account_id, name, digest = parts
    return account_id, name or None, digest


def deleted_reason(name: str | None) -> str:
    """Why a job that waited for an environment deleted meanwhile (or asked again with another spec)
    ends."""
    what = f"Environment {name}" if name is not None else "The inline environment"
    return f"{what} was deleted while the job waited for its build"


def prerequisite_state(prerequisite: Prerequisite, environment: Environment | None) -> PrerequisiteState:
    """How ``prerequisite`` stands given the environment stored under its account and name now (None:
    none is): Pending while Building (its waiting reason), Met when Ready (its build's hash as the
    value the job takes), Broken when Failed (its ``Environment ml failed: ...``) or gone or holding
    another spec (:func:`deleted_reason`)."""
    _, name, digest = parse_environment_prerequisite(prerequisite)
    if environment is None or environment.spec_hash != digest:
        return PrerequisiteState(prerequisite, Standing.BROKEN, deleted_reason(name))
    if environment.status is EnvironmentStatus.FAILED:
        return PrerequisiteState(prerequisite, Standing.BROKEN, environment.status_reason)
    if environment.status is EnvironmentStatus.READY and environment.hash is not None:
        return PrerequisiteState(prerequisite, Standing.MET, value=environment.hash)
    return PrerequisiteState(prerequisite, Standing.PENDING, environment.waiting_reason)


def new_environment(account_id: str, name: str | None, spec: EnvironmentSpec, now: datetime) -> Environment:
    """A new environment, Building (``name`` None: an unnamed one, asked for inline); its log stream is
    named after its spec hash and time."""
    digest = spec_hash(spec)
    folder = name if name is not None else "inline"
    stream = f"environments/{account_id}/{folder}/{now.strftime('%Y%m%dT%H%M%S')}-{digest[:12]}"
    return Environment(
        account_id=account_id,
        name=name,
        spec=spec,
        spec_hash=digest,
        status=EnvironmentStatus.BUILDING,
        status_reason="Resolving and installing the requirements",
        created_at=now,
        log_stream_name=stream,
    )


def unnamed_expires_at(environment: Environment) -> datetime:
    """When an unnamed environment's record goes (its creation + :data:`UNNAMED_RETENTION`)."""
    return environment.created_at + UNNAMED_RETENTION


def reusable(environment: Environment, now: datetime) -> bool:
    """Whether a job asking for an unnamed environment's spec at ``now`` takes this record (Building,
    Ready, or Failed less than :data:`UNNAMED_RETRY_AFTER` ago, and not past its retention) or asks
    for it again (a new build replaces it). One still Building is always taken."""
    if environment.status is EnvironmentStatus.BUILDING:
        return True
    if now >= unnamed_expires_at(environment):
        return False
    failed_at = environment.failed_at or environment.created_at
    return environment.status is not EnvironmentStatus.FAILED or now < failed_at + UNNAMED_RETRY_AFTER


def same_or_conflict(existing: Environment, spec: EnvironmentSpec) -> Environment:
    """``existing`` when it was asked with this spec (an idempotent ``PUT``); ``Conflict`` otherwise."""
    if existing.spec_hash != spec_hash(spec):
        raise Conflict(
            f"Environment {existing.name} exists with another spec; delete it first or choose another name.",
            field="name",
        )
    return existing


def finish(environment: Environment, outcome: BuildOutcome, now: datetime) -> Environment:
    """The environment once its build ended: ``Ready`` with the lock and size, or ``Failed`` with
    ``Environment <name> failed: <first error line>`` (``The inline environment failed: ...`` for an
    unnamed one). A final environment is returned unchanged (a report delivered twice). A lock of
    more than :data:`MAX_PACKAGES` packages fails it."""
    if environment.status is not EnvironmentStatus.BUILDING:
        return environment
    if outcome.error is None and len(outcome.packages) > MAX_PACKAGES:
        outcome = replace(
            outcome,
            packages=(),
            error=f"the requirements resolve to {len(outcome.packages)} packages, more than the "
            f"{MAX_PACKAGES} an environment may hold",
        )
    if outcome.error is not None:
        what = f"Environment {environment.name}" if environment.name is not None else "The inline environment"
        return replace(
            environment,
            status=EnvironmentStatus.FAILED,
            status_reason=f"{what} failed: {outcome.error}",
            hash=outcome.hash,
            failed_at=now,
        )
    return replace(
        environment,
        status=EnvironmentStatus.READY,
        status_reason=None,
        hash=outcome.hash,
        packages=outcome.packages,
        size_bytes=outcome.size_bytes,
        ready_at=now,
    )


def image_environment(
    account_id: str, name: str, spec: EnvironmentSpec, now: datetime, *, digest: str | None, error: str | None
) -> Environment:
    """A new image environment, final at once (nothing to build: its packages are the image's):
    ``Ready`` with the digest its image resolved to (``hash``: ``functions.domain.images.image_hash``),
    or ``Failed`` with ``Environment <name> failed: <error>`` when it did not resolve."""
    environment = new_environment(account_id, name, spec, now)
    if digest is None:
        reason = error or "its image did not resolve"
        return replace(
            environment,
            status=EnvironmentStatus.FAILED,
            status_reason=f"Environment {name} failed: {reason}",
            failed_at=now,
        )
    resolved = replace(environment, image_digest=digest)
    pinned = resolved.pinned_image
    if pinned is None:  # pragma: no cover - an image spec with a digest always pins
        raise ValueError("an image environment without an image")
    return replace(
        resolved,
        status=EnvironmentStatus.READY,
        status_reason=None,
        hash=image_hash(spec.python, pinned, spec.repository_credentials),
        ready_at=now,
    )
