"""Environments as the submit and the builder's report reach them: the deployment's environment store
and builder, and an unnamed environment (``POST /jobs`` with ``environment`` an inline spec), found
again by its spec's hash in the account's partition (``unnamed-environment#<specHash>``), kept 30 days
(``domain.environments.UNNAMED_RETENTION``), and asked for again after that or 10 minutes after a
failure (``reusable``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from aws_lambda_powertools import Logger

from functions.domain.environments import (
    MAX_CONCURRENT_BUILDS,
    RETIRED_BUILD_GRACE,
    Environment,
    EnvironmentSpec,
    check_spec,
    new_environment,
    reusable,
)
from functions.domain.environments import spec_hash as digest_of
from functions.domain.errors import (
    ConditionFailed,
    DependencyFailed,
    NotSupported,
    QuotaExceeded,
    ValidationFailed,
)
from functions.ports import BuildRequest, EnvironmentBuilder, EnvironmentRepository, Services

logger = Logger(child=True)
#: A conditional write retried after a lost race (a report and a delete racing) before giving up.
SAVE_ATTEMPTS = 5


def environment_store(services: Services) -> EnvironmentRepository:
    """The deployment's environments. Raises ``DependencyFailed`` where none are configured."""
    if services.environment_store is None:
        raise DependencyFailed("environments are not configured in this deployment")
    return services.environment_store


def retire_stale_builds(store: EnvironmentRepository, account_id: str, now: datetime) -> bool:
    """Uncount the account's retired builds (environments deleted while they built) whose report is
    later than ``RETIRED_BUILD_GRACE`` (lost): called when the account's count is full. Returns whether
    any was uncounted (the caller asks again, once)."""
    retired = [
        stream
        for stream in store.retired_builds(account_id, now - RETIRED_BUILD_GRACE)
        if store.retire_build(account_id, stream)
    ]
    if retired:
        logger.warning("lost build reports uncounted", account_id=account_id, builds=len(retired))
    return bool(retired)


def environment_builder(services: Services) -> EnvironmentBuilder:
    """The deployment's builder. Raises ``NotSupported`` (501) where none is wired (a deployment whose
    zones have no build queue)."""
    if services.environment_builder is None:
        raise NotSupported(
            "This deployment does not build environments (none of its zones has a build queue); submit "
            "jobs without environment to run with the worker image's packages."
        )
    return services.environment_builder


def check_inline_spec(services: Services, spec: EnvironmentSpec) -> EnvironmentSpec:
    """An inline spec (``POST /jobs`` with ``environment`` an object) checked as ``put_environment``
    checks a named one, each bad field a 400 on ``environment.<field>``; nothing is written.

    Raises
    ------
    NotSupported
        The deployment has no environment builder (501).
    ValidationFailed
        ``environment.python``, ``environment.requirements[i]``, ``environment.indexUrl``, ...
    """
    environment_builder(services)
    try:
        check_spec(spec, services.python, allow_http=services.allow_http_indexes)
        if spec.image is not None:
            raise ValidationFailed(
                "An inline environment takes no image: create an image environment with "
                "PUT /environments/{name} and name it.",
                field="image",
            )
    except ValidationFailed as exc:
        raise ValidationFailed(exc.message, field=f"environment.{exc.field}") from None
    return spec


def find_unnamed_environment(
    services: Services, account_id: str, spec: EnvironmentSpec, now: datetime
) -> Environment | None:
    """The account's unnamed environment of ``spec`` (by its spec hash) a job takes at ``now``
    (``domain.environments.reusable``), or None when it must be asked for (``ask_unnamed_environment``):
    there is none, it is past its retention, or it failed long enough ago to be built again."""
    found = environment_store(services).get_unnamed_environment(account_id, digest_of(spec))
    return found if found is not None and reusable(found, now) else None


def ask_unnamed_environment(
    services: Services, account_id: str, spec: EnvironmentSpec, now: datetime
) -> Environment:
    """The unnamed environment of ``spec`` a job asks for inline: the one stored when a job may take
    it, else a new one, Building (counted among the account's builds, replacing a record past its use)
    with its build started. The same spec from any number of jobs is one environment and one build;
    a spec whose lock equals another environment's reuses that build's files (the builder's rule).

    Raises
    ------
    QuotaExceeded
        ``environment``: the account already builds ``MAX_CONCURRENT_BUILDS`` environments.
    NotSupported
        No builder (501).
    """
    builder = environment_builder(services)
    store = environment_store(services)
    digest = digest_of(spec)
    for _ in range(SAVE_ATTEMPTS):
        existing = store.get_unnamed_environment(account_id, digest)
        if existing is not None and reusable(existing, now):
            return existing
        environment = new_environment(account_id, None, spec, now)
        if existing is not None:
            environment = replace(environment, version=existing.version + 1)
        try:
            store.create_environment(environment, MAX_CONCURRENT_BUILDS, replacing=existing)
        except ConditionFailed:
            again = store.get_unnamed_environment(account_id, digest)
            if again != existing or retire_stale_builds(store, account_id, now):
                continue  # another job asked for it first, or a lost report's place is free again
            raise QuotaExceeded(
                f"The account already builds {MAX_CONCURRENT_BUILDS} environments at once, the most it "
                "may; submit again once one is Ready or Failed.",
                field="environment",
            ) from None
        builder.start_build(
            BuildRequest(
                account_id=account_id,
                name=None,
                spec=spec,
                spec_hash=digest,
                log_stream_name=environment.log_stream_name,
            )
        )
        logger.info("unnamed environment build started", account_id=account_id, spec_hash=digest)
        return environment
    raise DependencyFailed("the inline environment kept changing while it was asked for")
