"""Environment variables of the Lambdas, as one pydantic model validated at cold start.

Every Lambda reads the same variables (the CDK app passes them from the constructs; the local stack
sets them for its in-process Lambdas). Each field names its variable once (its ``validation_alias``).
A missing or malformed variable fails the cold start with a message naming it and never its value
(the values include ARNs and, in the future, secrets); there are no silent defaults: a boolean is
``true`` or ``false``, JSON is parsed as JSON.

A plain pydantic model read from the environment by ``load_settings`` (each field's variable, empty
ones left out), not a pydantic-settings ``BaseSettings``: importing pydantic-settings (its CLI, dotenv
and cloud secret sources) took about 35 ms of every cold start for a job the few lines of
``load_settings`` do alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from functions.domain.images import ImagePolicy
from functions.domain.machine_classes import MACHINE_CLASSES, GeoZone
from functions.domain.runtime import (
    DEFAULT_PYTHON_VERSION,
    PYTHON_VERSION_PATTERN,
    PYTHON_VERSIONS,
    PythonRuntime,
)


def _strict_bool(value: object) -> object:
    """``true``/``false`` in any case (or a bool); anything else is an error, never False."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError("must be true or false")


StrictEnvBool = Annotated[bool, BeforeValidator(_strict_bool)]


class RouteSettings(BaseModel):
    """A job queue and job definition (name or ARN)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    job_queue: str = Field(alias="jobQueue", min_length=1)
    job_definition: str = Field(alias="jobDefinition", min_length=1)


class ComputeTemplateSettings(BaseModel):
    """What a zone's dedicated compute environments are built from (``ComputeTemplate``): the
    subnets, security groups, instance profile and Batch service role ARNs, and each machine class's
    instance types and optional launch template id."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    subnets: tuple[str, ...] = Field(min_length=1)
    security_groups: tuple[str, ...] = Field(alias="securityGroups", min_length=1)
    instance_role: str = Field(alias="instanceRole", min_length=20)
    service_role: str = Field(alias="serviceRole", min_length=20)
    instance_types: dict[str, tuple[str, ...]] = Field(alias="instanceTypes")
    launch_templates: dict[str, str] = Field(default_factory=dict, alias="launchTemplates")
    image_types: dict[str, str] = Field(default_factory=dict, alias="imageTypes")


class ImageSettings(BaseModel):
    """Where jobs may take environments' own images from (``functions.domain.images.ImagePolicy``):
    the deployment's account, the ECR repository name prefix its job execution roles may pull, and
    the Secrets Manager secret name prefix they may read registry credentials from."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    account: str = Field(pattern=r"^[0-9]{12}$")
    repository_prefix: str = Field(alias="repositoryPrefix", min_length=1, max_length=200)
    secret_prefix: str = Field(alias="secretPrefix", min_length=1, max_length=200)

    @property
    def policy(self) -> ImagePolicy:
        """The domain's policy of these settings."""
        return ImagePolicy(self.account, self.repository_prefix, self.secret_prefix)


class ZoneSettings(BaseModel):
    """One geo zone's region, bucket, job log group and (machine class → queue, definition) routes.

    ``routes`` may be given as ``routePrefix`` instead: every class's job queue and definition base
    are then ``<routePrefix><class>`` (the deployed names, ``infra/naming.py``), which keeps
    ``REMOTE_BATCH_ZONES`` well under Lambda's 4 KB for a function's whole environment.
    """

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    @model_validator(mode="before")
    @classmethod
    def _routes_from_prefix(cls, data: Any) -> Any:
        if isinstance(data, dict) and "routePrefix" in data and "routes" not in data:
            prefix = data["routePrefix"]
            if not isinstance(prefix, str) or not prefix:
                raise ValueError("routePrefix must be a non-empty string")
            routes = {
                name: {"jobQueue": prefix + name, "jobDefinition": prefix + name} for name in MACHINE_CLASSES
            }
            data = {key: value for key, value in data.items() if key != "routePrefix"} | {"routes": routes}
        return data

    region: str = Field(min_length=1)
    bucket: str = Field(min_length=3)
    log_group: str = Field(alias="logGroup", min_length=1)
    routes: dict[str, RouteSettings]
    # Dedicated computes in the zone: the SSM parameter (in the zone's region) holding the
    # ``ComputeTemplateSettings`` JSON the zone's stack wrote; absent when the zone offers none.
    compute_template_parameter: str | None = Field(
        default=None, alias="computeTemplateParameter", min_length=1
    )
    # Environments' builds (``functions.adapters.batch_builder``): the zone's build queue and the base
    # name of its build job definitions (``<base>-py3XY``); absent where the zone builds none.
    build: RouteSettings | None = None

    @field_validator("routes")
    @classmethod
    def _every_class_routed(cls, routes: dict[str, RouteSettings]) -> dict[str, RouteSettings]:
        missing = sorted(set(MACHINE_CLASSES) - set(routes))
        if missing:
            raise ValueError(f"no job queue for machine classes {missing}")
        return routes


class Settings(BaseModel):
    """What every remote-batch Lambda is configured with.

    Variables (each field's ``validation_alias``): ``REMOTE_BATCH_JOBS_TABLE``,
    ``REMOTE_BATCH_ACCOUNTS_TABLE``,
    ``REMOTE_BATCH_LEDGER_TABLE``, ``REMOTE_BATCH_IDEMPOTENCY_TABLE``, ``REMOTE_BATCH_OPERATIONS_TABLE``
    (operators' class states and audit log), ``REMOTE_BATCH_COMPUTES_TABLE``,
    ``REMOTE_BATCH_COMPUTE_PREFIX`` (the prefix of dedicated computes' AWS Batch names, ``<prefix>-cmp-*``),
    ``REMOTE_BATCH_LEDGER_TABLE``, ``REMOTE_BATCH_IDEMPOTENCY_TABLE``, ``REMOTE_BATCH_QUOTAS_TABLE``,
    ``REMOTE_BATCH_DISPATCH_QUEUE_URL`` (optional), ``REMOTE_BATCH_DISPATCH_TPS`` (optional, default 40),
    ``REMOTE_BATCH_DISPATCH_CONCURRENCY`` (optional, default 4),
    ``REMOTE_BATCH_EMAIL_TOPIC_ARN_PREFIX`` (the ARN every account's email topic starts with,
    ``arn:aws:sns:<region>:<account>:remote-batch-<stage>-email-``),
    ``REMOTE_BATCH_EMAIL_TOPIC_KEY`` (the KMS key those topics are encrypted with; optional: none locally),
    ``REMOTE_BATCH_SMS_PER_ACCOUNT_PER_HOUR`` (optional, default 30), ``REMOTE_BATCH_ARRAY_SPAN_SIZE``
    (optional, default 10000: most children per AWS Batch array job), ``REMOTE_BATCH_ZONES`` (JSON:
    ``{"UnitedStates": {"region", "bucket", "logGroup", "routePrefix", "build": {"jobQueue",
    "jobDefinition"}}, ...}``: ``ZoneSettings`` derives each class's job queue and job definition
    from ``routePrefix``; ``routes`` ``{"Basic1x8": {"jobQueue", "jobDefinition"}, ...}`` may name
    them instead; ``build`` optional: the zone's environment build queue),
    ``REMOTE_BATCH_ALLOW_HTTP_WEBHOOKS`` (optional ``true``/``false``, default false),
    ``REMOTE_BATCH_PYTHON_VERSIONS`` (optional, the ``major.minor`` versions jobs run on,
    comma-separated, default ``3.11,3.12,3.13``: one worker image each), ``REMOTE_BATCH_DEFAULT_PYTHON``
    (optional, what a job naming none runs, default 3.12), ``REMOTE_BATCH_PYTHON_INTERPRETERS``
    (optional JSON ``{"3.12": "CPython 3.12.1 (/path)"}``, the local stack's interpreters, shown by
    ``GET /runtime``), ``REMOTE_BATCH_IMAGES`` (optional JSON ``{"account", "repositoryPrefix",
    "secretPrefix"}``: environments may name their own images, ``ImageSettings``) and ``AWS_REGION``
    (the home region).

    Built from the environment by ``load_settings`` only; ``Settings(jobs_table=..., ...)`` (by field
    name, as the local stack and tests do) reads nothing but its arguments.
    """

    model_config = ConfigDict(
        frozen=True,
        populate_by_name=True,
        hide_input_in_errors=True,
        extra="ignore",
        validate_default=True,
    )

    jobs_table: str = Field(validation_alias="REMOTE_BATCH_JOBS_TABLE", min_length=3)
    accounts_table: str = Field(validation_alias="REMOTE_BATCH_ACCOUNTS_TABLE", min_length=3)
    ledger_table: str = Field(validation_alias="REMOTE_BATCH_LEDGER_TABLE", min_length=3)
    idempotency_table: str = Field(validation_alias="REMOTE_BATCH_IDEMPOTENCY_TABLE", min_length=3)
    operations_table: str = Field(validation_alias="REMOTE_BATCH_OPERATIONS_TABLE", min_length=3)
    computes_table: str = Field(validation_alias="REMOTE_BATCH_COMPUTES_TABLE", min_length=3)
    # Dedicated computes' compute environments and job queues are named <prefix>-cmp-...: the Lambdas'
    # IAM policies allow Batch calls on exactly those names.
    compute_prefix: str = Field(
        validation_alias="REMOTE_BATCH_COMPUTE_PREFIX", pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{2,59}$"
    )
    quotas_table: str = Field(validation_alias="REMOTE_BATCH_QUOTAS_TABLE", min_length=3)
    # The SQS queue the api puts admitted jobs on for the dispatcher (``functions.logic.dispatch``);
    # empty: the job is sent to AWS Batch within the request that admitted it (tests, no queue).
    dispatch_queue_url: str = Field(default="", validation_alias="REMOTE_BATCH_DISPATCH_QUEUE_URL")
    # SubmitJob calls per second the dispatcher makes in all (AWS Batch allows about 50 per account),
    # shared by at most ``dispatch_concurrency`` dispatcher instances (the event source mapping's
    # maximum concurrency): each paces itself at dispatch_tps / dispatch_concurrency.
    dispatch_tps: float = Field(default=40.0, validation_alias="REMOTE_BATCH_DISPATCH_TPS", gt=0, le=50)
    dispatch_concurrency: int = Field(
        default=4, validation_alias="REMOTE_BATCH_DISPATCH_CONCURRENCY", ge=1, le=100
    )
    email_topic_arn_prefix: str = Field(
        validation_alias="REMOTE_BATCH_EMAIL_TOPIC_ARN_PREFIX",
        min_length=1,
        pattern=r"^arn:[^:]+:sns:[^:]+:[^:]*:[A-Za-z0-9_-]+$",
    )
    email_topic_key: str = Field(default="", validation_alias="REMOTE_BATCH_EMAIL_TOPIC_KEY")
    # At most this many SMS per account and clock hour (an SMS costs money; the rest are recorded skipped).
    sms_per_account_per_hour: int = Field(
        default=30, validation_alias="REMOTE_BATCH_SMS_PER_ACCOUNT_PER_HOUR", ge=0, le=10_000
    )
    home_region: str = Field(validation_alias="AWS_REGION", min_length=1)
    zones: dict[GeoZone, ZoneSettings] = Field(validation_alias="REMOTE_BATCH_ZONES", min_length=1)
    # The Python versions jobs run on (``functions.domain.runtime``): deployed, one worker image each;
    # the local stack: those whose interpreter it found, and which interpreter each is.
    python_versions: tuple[Annotated[str, StringConstraints(pattern=PYTHON_VERSION_PATTERN)], ...] = Field(
        default=PYTHON_VERSIONS, validation_alias="REMOTE_BATCH_PYTHON_VERSIONS", min_length=1
    )
    default_python: str = Field(
        default=DEFAULT_PYTHON_VERSION,
        validation_alias="REMOTE_BATCH_DEFAULT_PYTHON",
        pattern=PYTHON_VERSION_PATTERN,
    )
    python_interpreters: dict[str, str] = Field(
        default_factory=dict, validation_alias="REMOTE_BATCH_PYTHON_INTERPRETERS"
    )
    # Most children per AWS Batch array job: an array of more items runs as several (AWS's limit 10,000).
    array_span_size: int = Field(
        default=10_000, validation_alias="REMOTE_BATCH_ARRAY_SPAN_SIZE", ge=1, le=10_000
    )
    # Environments' own images (None: jobs run none, as on the local stack, which has no container runtime).
    images: ImageSettings | None = Field(default=None, validation_alias="REMOTE_BATCH_IMAGES")
    # Webhooks must be HTTPS; only the local stack allows http:// (to a receiver on this machine).
    allow_http_webhooks: StrictEnvBool = Field(
        default=False, validation_alias="REMOTE_BATCH_ALLOW_HTTP_WEBHOOKS"
    )

    @field_validator("python_versions", mode="before")
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        """``3.11,3.12`` → ``("3.11", "3.12")``."""
        if isinstance(value, str):
            return tuple(part.strip() for part in value.split(",") if part.strip())
        return value

    @model_validator(mode="after")
    def _default_is_run(self) -> Settings:
        if self.default_python not in self.python_versions:
            versions = ", ".join(self.python_versions)
            raise ValueError(
                f"REMOTE_BATCH_DEFAULT_PYTHON {self.default_python} is not one of {versions} "
                "(REMOTE_BATCH_PYTHON_VERSIONS)"
            )
        return self

    @property
    def python_runtime(self) -> PythonRuntime:
        """The Python versions jobs run on, as the domain takes them."""
        return PythonRuntime(
            versions=self.python_versions,
            default=self.default_python,
            interpreters=dict(self.python_interpreters),
        )

    @field_validator("zones", "python_interpreters", "images", mode="before")
    @classmethod
    def _json_fields(cls, value: Any) -> Any:
        """The variable holds JSON (parsed here, so its error names the variable, not the value)."""
        if isinstance(value, str):
            try:
                return json.loads(value)
            except ValueError as exc:
                raise ValueError(
                    f"is not JSON ({exc.__class__.__name__} at character {_json_pos(exc)})"
                ) from None
        return value

    def to_environment(self) -> dict[str, str]:
        """The environment variables that ``from_environment`` reads back into these settings."""
        return {
            "REMOTE_BATCH_JOBS_TABLE": self.jobs_table,
            "REMOTE_BATCH_ACCOUNTS_TABLE": self.accounts_table,
            "REMOTE_BATCH_LEDGER_TABLE": self.ledger_table,
            "REMOTE_BATCH_IDEMPOTENCY_TABLE": self.idempotency_table,
            "REMOTE_BATCH_OPERATIONS_TABLE": self.operations_table,
            "REMOTE_BATCH_COMPUTES_TABLE": self.computes_table,
            "REMOTE_BATCH_COMPUTE_PREFIX": self.compute_prefix,
            "REMOTE_BATCH_QUOTAS_TABLE": self.quotas_table,
            "REMOTE_BATCH_DISPATCH_QUEUE_URL": self.dispatch_queue_url,
            "REMOTE_BATCH_DISPATCH_TPS": str(self.dispatch_tps),
            "REMOTE_BATCH_DISPATCH_CONCURRENCY": str(self.dispatch_concurrency),
            "REMOTE_BATCH_EMAIL_TOPIC_ARN_PREFIX": self.email_topic_arn_prefix,
            "REMOTE_BATCH_EMAIL_TOPIC_KEY": self.email_topic_key,
            "REMOTE_BATCH_SMS_PER_ACCOUNT_PER_HOUR": str(self.sms_per_account_per_hour),
            "REMOTE_BATCH_ARRAY_SPAN_SIZE": str(self.array_span_size),
            "AWS_REGION": self.home_region,
            "REMOTE_BATCH_ALLOW_HTTP_WEBHOOKS": "true" if self.allow_http_webhooks else "false",
            "REMOTE_BATCH_PYTHON_VERSIONS": ",".join(self.python_versions),
            "REMOTE_BATCH_DEFAULT_PYTHON": self.default_python,
            **(
                {"REMOTE_BATCH_PYTHON_INTERPRETERS": json.dumps(self.python_interpreters)}
                if self.python_interpreters
                else {}
            ),
            "REMOTE_BATCH_ZONES": json.dumps(
                {zone.value: z.model_dump(by_alias=True) for zone, z in self.zones.items()}
            ),
            **(
                {"REMOTE_BATCH_IMAGES": json.dumps(self.images.model_dump(by_alias=True))}
                if self.images is not None
                else {}
            ),
        }


class SettingsError(RuntimeError):
    """The Lambda's environment is missing or has a malformed variable (a deployment bug)."""


def _json_pos(exc: ValueError) -> object:
    return getattr(exc, "pos", "?")


def variables() -> tuple[str, ...]:
    """The environment variable of each field of ``Settings`` (its ``validation_alias``)."""
    names = []
    for name, field in Settings.model_fields.items():
        alias = field.validation_alias
        if not isinstance(alias, str):  # every field names its one variable
            raise TypeError(f"Settings.{name} has no variable name")
        names.append(alias)
    return tuple(names)


def _describe(error: Mapping[str, Any]) -> str:
    """``VARIABLE[.path]: what is wrong`` for one validation error, without the value."""
    loc = [str(part) for part in error.get("loc", ())]
    where = ".".join(loc) if loc else "settings"
    message = str(error.get("msg", "invalid"))
    return f"{where}: {message.removeprefix('Value error, ')}"


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate the settings from ``environ`` (default: ``os.environ``).

    An empty variable counts as missing (the optional ones then take their defaults).

    Raises
    ------
    SettingsError
        Naming each missing or malformed variable, never its value.
    """
    env = os.environ if environ is None else environ
    values = {name: env[name] for name in variables() if env.get(name, "") != ""}
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        missing = [str(e["loc"][0]) for e in errors if e["type"] == "missing" and len(e["loc"]) == 1]
        if missing:
            raise SettingsError(f"missing environment variables: {', '.join(missing)}") from None
        raise SettingsError(
            "malformed remote-batch settings: " + "; ".join(_describe(e) for e in errors)
        ) from None
