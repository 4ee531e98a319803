"""A cloud build's end: the build job's final ``Batch Job State Change`` → ``record_build``.

The batch_events function hands every event of a build job (told by its tags,
``functions.domain.environment_builds.build_tags``) here instead of to the jobs' logic. A SUCCEEDED
or FAILED build reads the outcome document the build program wrote beside its request (JSON only:
the Lambdas never run what a build installed) and reports it; a FAILED build without one (its time
limit, its instance lost) reports AWS Batch's reason. Earlier statuses change nothing (the
environment says Building from its ``PUT`` on).
"""

from __future__ import annotations

import json

from aws_lambda_powertools import Logger

from functions.domain.environment_builds import (
    MAX_OUTCOME_BYTES,
    BuildTags,
    MalformedOutcome,
    outcome_from_document,
    outcome_key,
    outcome_without_document,
)
from functions.domain.environments import BuildOutcome, Environment
from functions.domain.errors import PayloadTooLarge
from functions.logic.environments import record_build
from functions.ports import Services

logger = Logger(child=True)

#: AWS Batch's final statuses: the build program has written its outcome, or never will.
FINAL_STATUSES = frozenset({"SUCCEEDED", "FAILED"})


def read_outcome(
    services: Services, build: BuildTags, status: str, status_reason: str | None
) -> BuildOutcome:
    """The outcome of a build job that ended in ``status``: the document it wrote, else (FAILED, or a
    document that is not one) an error naming why."""
    builder = services.environment_builder
    if builder is None:
        return BuildOutcome(hash=None, error="this deployment builds no environments")
    blobs = services.zones[builder.zone].blobs
    try:
        body = blobs.get(outcome_key(build.build_id), max_bytes=MAX_OUTCOME_BYTES)
    except PayloadTooLarge:
        body = None
        logger.warning("build outcome over its size limit", build_id=build.build_id)
    if body is None:
        if status == "SUCCEEDED":
            return BuildOutcome(hash=None, error="the build ended without reporting its outcome")
        return outcome_without_document(status_reason)
    try:
        return outcome_from_document(json.loads(body))
    except (ValueError, MalformedOutcome) as exc:
        logger.warning("build outcome unreadable", build_id=build.build_id, error=str(exc))
        return BuildOutcome(hash=None, error="the build's outcome could not be read")


def apply_build_state_change(
    services: Services, build: BuildTags, status: str, status_reason: str | None
) -> Environment | None:
    """Report a build job's final status to ``record_build`` (the environment Ready or Failed). Returns
    the environment as it then is, or None: not final yet, or the environment is gone or holds
    another spec. A repeated event finds it final and changes nothing."""
    if status not in FINAL_STATUSES:
        return None
    outcome = read_outcome(services, build, status, status_reason)
    logger.info(
        "environment build job ended",
        account_id=build.account_id,
        environment=build.name,
        batch_status=status,
        failed=outcome.error is not None,
    )
    return record_build(
        services,
        build.account_id,
        build.name,
        spec_hash=build.spec_hash,
        outcome=outcome,
        now=services.clock(),
        log_stream_name=build.log_stream_name,
    )
