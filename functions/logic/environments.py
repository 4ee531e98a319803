"""Environments' use cases: ``PUT/GET/DELETE /environments/{name}``, the build log, and the builder's
report of a build's end, which releases or ends the jobs waiting for the build (``functions.logic.waits``;
``functions.domain.environments`` holds the rules)."""

from __future__ import annotations

import contextlib
from datetime import datetime

from aws_lambda_powertools import Logger

from functions.domain.environments import (
    MAX_CONCURRENT_BUILDS,
    BuildOutcome,
    Environment,
    EnvironmentSpec,
    EnvironmentStatus,
    check_name,
    check_spec,
    environment_prerequisite,
    finish,
    image_environment,
    new_environment,
    same_or_conflict,
)
from functions.domain.errors import (
    ConditionFailed,
    DependencyFailed,
    ImageNotFound,
    NotFound,
    QuotaExceeded,
    ValidationFailed,
)
from functions.domain.images import check_image_source
from functions.logic import waits
from functions.logic.environment_waits import stored_environment
from functions.logic.inline_environments import (
    SAVE_ATTEMPTS,
    environment_builder,
    environment_store,
    retire_stale_builds,
)
from functions.logic.queries import LogPage, read_log_page
from functions.ports import BuildRequest, Services

logger = Logger(child=True)


def not_found(name: str) -> NotFound:
    """The 404 of an environment the caller's account does not have (another account's is one too)."""
    return NotFound(f"No environment {name} in this account.", field="name")


def get_environment(services: Services, account_id: str, name: str) -> Environment:
    """``GET /environments/{name}``. Raises ``NotFound`` (another account's environment too)."""
    environment = environment_store(services).get_environment(account_id, check_name(name))
    if environment is None:
        raise not_found(name)
    return environment


def list_environments(
    services: Services, account_id: str, limit: int, next_token: str | None
) -> tuple[list[Environment], str | None]:
    """``GET /environments``: a page of at most ``limit`` of the account's environments by name, and
    the next page's token. Raises ``ValidationFailed`` (``nextToken``)."""
    return environment_store(services).list_environments(account_id, limit, next_token)


def put_environment(
    services: Services, account_id: str, name: str, spec: EnvironmentSpec, now: datetime
) -> tuple[Environment, bool]:
    """``PUT /environments/{name}``: the environment and whether this call created it.

    A new one is written Building (counted among the account's builds) and its build started; an
    image environment (``image``) has nothing to build: its image is resolved to a digest first and
    it is written Ready (or Failed, naming the missing image or tag) at once (``_create_image``). The
    same spec again returns the stored one (any status); another spec is a conflict.

    Raises
    ------
    NotSupported
        The deployment has no environment builder (501), for a spec with requirements; nothing is
        written.
    ValidationFailed
        A bad name or spec field (``functions.domain.environments.check_spec``), an ``image`` where the
        deployment runs no images (the local stack), or one it may not pull
        (``functions.domain.images.check_image_source``); nothing is written.
    Conflict
        The name holds another spec.
    QuotaExceeded
        The account already has ``MAX_CONCURRENT_BUILDS`` environments Building.
    DependencyFailed
        The build could not be started (the record written for it is deleted again), or the image's
        registry failed or could not be reached (nothing is written).
    """
    check_name(name)
    if spec.image is not None:
        return _create_image(services, account_id, name, spec, now)
    check_spec(spec, services.python, allow_http=services.allow_http_indexes)
    builder = environment_builder(services)
    store = environment_store(services)
    existing = store.get_environment(account_id, name)
    if existing is not None:
        return same_or_conflict(existing, spec), False
    environment = new_environment(account_id, name, spec, now)
    try:
        try:
            store.create_environment(environment, MAX_CONCURRENT_BUILDS)
        except ConditionFailed:
            if store.get_environment(account_id, name) is not None or not retire_stale_builds(
                store, account_id, now
            ):
                raise
            store.create_environment(environment, MAX_CONCURRENT_BUILDS)  # a lost report's place
    except ConditionFailed:
        existing = store.get_environment(account_id, name)
        if existing is not None:
            return same_or_conflict(existing, spec), False
        raise QuotaExceeded(
            f"The account already builds {MAX_CONCURRENT_BUILDS} environments at once, the most it may; "
            "ask again once one is Ready or Failed.",
            field="name",
        ) from None
    request = BuildRequest(
        account_id=account_id,
        name=name,
        spec=spec,
        spec_hash=environment.spec_hash,
        log_stream_name=environment.log_stream_name,
    )
    try:
        builder.start_build(request)
    except DependencyFailed:
        # Nothing builds it: take the record back (and its place among the account's builds), so the
        # same PUT asked again starts afresh instead of finding an environment Building forever.
        with contextlib.suppress(ConditionFailed):
            store.delete_environment(environment, now, build_started=False)
        raise
    logger.info("environment build started", account_id=account_id, environment=name)
    return environment, True


def _create_image(
    services: Services, account_id: str, name: str, spec: EnvironmentSpec, now: datetime
) -> tuple[Environment, bool]:
    """``put_environment`` of an image environment: checked, resolved (``ImageRegistry.resolve``: a
    tag to its digest, a digest as is), then written final in one conditional put (it is never
    Building, so it takes no build from the account's quota)."""
    if services.images is None:
        raise ValidationFailed(
            "This deployment runs no container images of its own (the local stack has no container "
            "runtime); leave image null to run in the service's worker image.",
            field="image",
        )
    check_spec(spec, services.python, allow_http=services.allow_http_indexes)
    image = check_image_source(spec.image or "", spec.repository_credentials, services.images.policy)
    store = environment_store(services)
    existing = store.get_environment(account_id, name)
    if existing is not None:
        return same_or_conflict(existing, spec), False
    digest: str | None
    try:
        digest, error = services.images.resolve(image), None
    except ImageNotFound as exc:
        digest, error = None, str(exc)
    environment = image_environment(account_id, name, spec, now, digest=digest, error=error)
    try:
        store.create_environment(environment, MAX_CONCURRENT_BUILDS)
    except ConditionFailed:
        existing = store.get_environment(account_id, name)
        if existing is None:  # pragma: no cover - a final environment counts no build
            raise DependencyFailed(f"environment {name} could not be written") from None
        return same_or_conflict(existing, spec), False
    logger.info(
        "image environment created",
        account_id=account_id,
        environment=name,
        status=environment.status.value,
        digest=digest,
    )
    return environment, True


def delete_environment(services: Services, account_id: str, name: str, now: datetime) -> Environment:
    """``DELETE /environments/{name}``: the environment as it was. A build in progress goes on (another
    environment may share it) and stays counted among the account's builds until it reports (so
    deleting and asking again cannot run more than ``MAX_CONCURRENT_BUILDS`` at once); the jobs that
    waited for it end
    ``Terminated``, free, saying it was deleted (``waits.prerequisite_settled``). Jobs released before
    keep the build they were given. Raises ``NotFound``."""
    store = environment_store(services)
    for _ in range(SAVE_ATTEMPTS):
        environment = get_environment(services, account_id, name)
        try:
            store.delete_environment(environment, now)
        except ConditionFailed:
            continue
        if environment.status is EnvironmentStatus.BUILDING:
            _settle_waiters(services, environment, now)
        return environment
    raise DependencyFailed(f"environment {name} kept changing while it was deleted")


def _same_build(environment: Environment, log_stream_name: str | None) -> bool:
    """Whether a report naming ``log_stream_name`` (None: not said) is of ``environment``'s own build
    (each creation names its own stream: ``domain.environments.new_environment``)."""
    return log_stream_name is None or log_stream_name == environment.log_stream_name


def _settle_waiters(services: Services, environment: Environment, now: datetime) -> None:
    """Release or end the jobs waiting for ``environment`` (it left Building, or is gone). A failure is
    logged: the meter's backstop settles them later."""
    try:
        waits.prerequisite_settled(services, environment_prerequisite(environment), now)
    except DependencyFailed:
        logger.exception(
            "waiting jobs not settled", account_id=environment.account_id, environment=environment.name
        )


def get_build_log(
    services: Services, account_id: str, name: str, since: datetime | None, next_token: str | None
) -> LogPage:
    """``GET /environments/{name}/log``: the build's output, paged as a job's log is
    (``functions.logic.queries.get_log``). Raises ``NotFound``, ``ValidationFailed`` for a bad token,
    ``NotSupported`` where no builder is wired."""
    environment = get_environment(services, account_id, name)
    zone = services.zones[environment_builder(services).zone]
    return read_log_page(zone.logs, environment.log_stream_name, since, next_token)


def record_build(
    services: Services,
    account_id: str,
    name: str | None,
    *,
    spec_hash: str,
    outcome: BuildOutcome,
    now: datetime,
    log_stream_name: str | None = None,
) -> Environment | None:
    """The builder's report: the environment becomes Ready or Failed, then the jobs waiting for it are
    released (Ready) or end ``Terminated``, free, with its reason (Failed), each once
    (``waits.prerequisite_settled``). Returns it, or None when it is gone or now holds another spec
    (deleted and asked again: its waiting jobs ended then); a report delivered twice changes nothing
    but settles any job a lost Query left waiting. ``name`` is None for an unnamed environment (found
    by ``spec_hash``); ``log_stream_name``, the request's, tells the build the record was made for from
    a later one under the same name and spec (an unnamed environment asked for again): a report of an
    earlier build is ignored."""
    store = environment_store(services)
    for _ in range(SAVE_ATTEMPTS):
        environment = stored_environment(services, account_id, name, spec_hash)
        if (
            environment is None
            or environment.spec_hash != spec_hash
            or not _same_build(environment, log_stream_name)
        ):
            # The environment was deleted while it built: its build leaves the account's count now.
            retired = log_stream_name is not None and store.retire_build(account_id, log_stream_name)
            logger.info(
                "build report for no environment", account_id=account_id, environment=name, retired=retired
            )
            return None
        if environment.status is not EnvironmentStatus.BUILDING:
            # A report delivered again: the jobs it released or ended are settled; any a lost Query
            # left waiting are settled now.
            _settle_waiters(services, environment, now)
            return environment
        try:
            saved = store.save_environment(environment, finish(environment, outcome, now))
        except ConditionFailed:
            continue
        logger.info(
            "environment build ended", account_id=account_id, environment=name, status=saved.status.value
        )
        _settle_waiters(services, saved, now)
        return saved
    raise DependencyFailed(f"environment {name} kept changing while its build was recorded")
