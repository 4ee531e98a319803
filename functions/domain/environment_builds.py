"""An environment's build in the cloud: an AWS Batch job on the build zone's build queue (issue 24).

The api's builder (``functions.adapters.batch_builder``) writes the build's **request** (the spec, as
the build program reads it) to the build zone's bucket under ``environment-builds/<buildId>/`` and
submits the build job, tagged with the account, the environment's name, its spec hash and the build
id (:data:`BUILD_TAG_KEYS`). The build program (``python -m worker build``, ``worker/build.py``)
writes its **outcome** beside the request; the build job's final ``Batch Job State Change`` (told from
a job's by its tags, :func:`build_tags`) brings it to ``functions.logic.environments.record_build``
through the batch_events function. The Lambdas read only that JSON document; the packages themselves
(``environments/<hash>.tar.gz`` and its manifest) are the worker's to write and read.

Pure: names, the request's and outcome's shapes, and the outcome of a build job that ended without
writing one (killed at its time limit, its instance lost).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from functions.domain.environments import (
    BUILD_TIME_LIMIT_SECONDS,
    BuildOutcome,
    EnvironmentSpec,
    Package,
)

#: Where build requests and outcomes live in the build zone's bucket (not under ``environments/``,
#: which jobs may read: a request holds another account's spec).
BUILD_REQUESTS_PREFIX = "environment-builds/"
REQUEST_DOCUMENT = "request.json"
OUTCOME_DOCUMENT = "outcome.json"
#: The format of both documents (``worker/build.py`` writes and reads the same).
REQUEST_FORMAT = "remote-batch.build-request/1"
OUTCOME_FORMAT = "remote-batch.build-outcome/1"

TAG_ACCOUNT = "remote-batch:accountId"
TAG_ENVIRONMENT = "remote-batch:environment"
TAG_SPEC_HASH = "remote-batch:specHash"
TAG_BUILD_ID = "remote-batch:buildId"
#: The environment's log stream: tells the build its record was made for from a later one under the
#: same name and spec (``record_build``'s ``log_stream_name``).
TAG_LOG_STREAM = "remote-batch:logStream"
#: The tags of a build job: the only keys the api's role may tag a build job with.
BUILD_TAG_KEYS = (TAG_ACCOUNT, TAG_ENVIRONMENT, TAG_SPEC_HASH, TAG_BUILD_ID, TAG_LOG_STREAM)

#: What a build job gets (a resolver and an installer: mostly the network and the disk).
BUILD_VCPUS = 2
BUILD_MEMORY_MIB = 8192
#: AWS Batch stops a build this long after its time limit if the build program did not
#: (``attemptDurationSeconds`` = limit + margin; the program itself ends at the limit with a reason).
BUILD_TIMEOUT_MARGIN_SECONDS = 300
BUILD_TIMEOUT_SECONDS = BUILD_TIME_LIMIT_SECONDS + BUILD_TIMEOUT_MARGIN_SECONDS

# The build program's variables (``worker/build.py`` reads them; tests check both sides agree).
BUCKET_VARIABLE = "REMOTE_BATCH_BUCKET"
REQUEST_KEY_VARIABLE = "REMOTE_BATCH_BUILD_REQUEST_KEY"
OUTCOME_KEY_VARIABLE = "REMOTE_BATCH_BUILD_OUTCOME_KEY"
LOG_GROUP_VARIABLE = "REMOTE_BATCH_BUILD_LOG_GROUP"
LOG_STREAM_VARIABLE = "REMOTE_BATCH_BUILD_LOG_STREAM"
#: JSON ``[{"bucket", "region"}, ...]``: the other zones' buckets, which get a copy of the build.
REPLICAS_VARIABLE = "REMOTE_BATCH_BUILD_REPLICAS"
#: The outcome document's largest size the Lambdas read (bytes): 500 packages fit easily.
MAX_OUTCOME_BYTES = 1024 * 1024


def request_key(build_id: str) -> str:
    """``environment-builds/<buildId>/request.json``."""
    return f"{BUILD_REQUESTS_PREFIX}{build_id}/{REQUEST_DOCUMENT}"


def outcome_key(build_id: str) -> str:
    """``environment-builds/<buildId>/outcome.json``."""
    return f"{BUILD_REQUESTS_PREFIX}{build_id}/{OUTCOME_DOCUMENT}"


def build_job_name(spec_hash: str) -> str:
    """The build job's SubmitJob ``jobName`` (``environment-build-<first 32 of the spec hash>``): Batch
    names take letters, digits, ``-`` and ``_`` only, which an environment's name may not be."""
    return f"environment-build-{spec_hash[:32]}"


def request_document(spec: EnvironmentSpec) -> dict[str, Any]:
    """The request the build program reads: ``{"format", "python", "requirements", "indexUrl",
    "extraIndexUrls"}`` (the spec as checked by ``check_spec``)."""
    return {
        "format": REQUEST_FORMAT,
        "python": spec.python,
        "requirements": list(spec.requirements),
        "indexUrl": spec.index_url,
        "extraIndexUrls": list(spec.extra_index_urls),
    }


@dataclass(frozen=True, slots=True)
class BuildTags:
    """Whose build a Batch job is (its tags): the report goes to ``record_build`` with these (``name``
    None: an unnamed environment, found by its spec hash)."""

    account_id: str
    name: str | None
    spec_hash: str
    build_id: str
    log_stream_name: str


def build_tags(tags: Mapping[str, Any]) -> BuildTags | None:
    """The build a Batch job's tags name, or None for a job that is no build (a user's job). The
    environment's name is empty for an unnamed environment; every other tag is required."""
    values = [tags.get(key) for key in BUILD_TAG_KEYS]
    if not all(isinstance(value, str) for value in values):
        return None
    account_id, name, spec_hash, build_id, stream = (str(value) for value in values)
    if not (account_id and spec_hash and build_id and stream):
        return None
    return BuildTags(account_id, name or None, spec_hash, build_id, stream)


def build_tag_values(
    account_id: str, name: str | None, spec_hash: str, build_id: str, log_stream_name: str
) -> dict[str, str]:
    """The build job's tags (:data:`BUILD_TAG_KEYS`; an unnamed environment's name is empty)."""
    return {
        TAG_ACCOUNT: account_id,
        TAG_ENVIRONMENT: name or "",
        TAG_SPEC_HASH: spec_hash,
        TAG_BUILD_ID: build_id,
        TAG_LOG_STREAM: log_stream_name,
    }


class MalformedOutcome(ValueError):
    """An outcome document not of :data:`OUTCOME_FORMAT`'s shape."""


def outcome_from_document(document: Any) -> BuildOutcome:
    """The build's outcome as the build program wrote it: ``{"format", "hash", "packages": [{"name",
    "version"}], "sizeBytes", "error"}`` (``error`` null when it succeeded; the first error line
    otherwise, at most 1,000 characters kept).

    Raises
    ------
    MalformedOutcome
        Not that shape (a succeeded build without a 64-hex ``hash``, a negative size, ...).
    """
    if not isinstance(document, dict) or document.get("format") != OUTCOME_FORMAT:
        raise MalformedOutcome("not a build outcome document")
    digest, error = document.get("hash"), document.get("error")
    if error is not None:
        if not isinstance(error, str) or not error.strip():
            raise MalformedOutcome("error must be a non-empty string or null")
        valid_hash = isinstance(digest, str) and _is_hash(digest)
        return BuildOutcome(hash=digest if valid_hash else None, error=" ".join(error.split())[:1000])
    size, packages = document.get("sizeBytes"), document.get("packages")
    if not (isinstance(digest, str) and _is_hash(digest)):
        raise MalformedOutcome("a built environment's hash must be 64 hex digits")
    if not (isinstance(size, int) and not isinstance(size, bool) and size >= 0):
        raise MalformedOutcome("sizeBytes must be a whole number of bytes")
    if not isinstance(packages, list) or not all(
        isinstance(p, dict) and isinstance(p.get("name"), str) and isinstance(p.get("version"), str)
        for p in packages
    ):
        raise MalformedOutcome("packages must be [{name, version}]")
    return BuildOutcome(
        hash=digest,
        packages=tuple(Package(p["name"], p["version"]) for p in packages),
        size_bytes=size,
    )


def _is_hash(text: str) -> bool:
    return len(text) == 64 and all(c in "0123456789abcdef" for c in text)


def outcome_without_document(status_reason: str | None) -> BuildOutcome:
    """The outcome of a build job that ended FAILED without writing its outcome: AWS Batch's timeout
    (``Job attempt duration exceeded timeout``) is the time limit's reason; anything else (the
    instance lost, the container killed) names Batch's reason."""
    reason = " ".join((status_reason or "").split())
    if "timeout" in reason.lower():
        limit = BUILD_TIME_LIMIT_SECONDS / 60
        return BuildOutcome(
            hash=None, error=f"the build took longer than its time limit of {limit:g} minutes"
        )
    return BuildOutcome(hash=None, error=f"the build job failed: {reason or 'no reason given by AWS Batch'}")
