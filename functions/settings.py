"""Environment variables of the Lambdas, as pydantic models validated at cold start.

Every Lambda reads the same variables (the CDK app passes them from the constructs; the local stack
sets them for its in-process Lambdas). A missing or malformed variable fails the cold start with a
message naming it; there are no silent defaults.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from functions.domain.machine_classes import MACHINE_CLASSES, GeoZone


class RouteSettings(BaseModel):
    """A job queue and job definition (name or ARN)."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    job_queue: str = Field(alias="jobQueue", min_length=1)
    job_definition: str = Field(alias="jobDefinition", min_length=1)


class ZoneSettings(BaseModel):
    """One geo zone's region, bucket, job log group and (machine class → queue, definition) routes."""

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    region: str = Field(min_length=1)
    bucket: str = Field(min_length=3)
    log_group: str = Field(alias="logGroup", min_length=1)
    routes: dict[str, RouteSettings]

    @field_validator("routes")
    @classmethod
    def _every_class_routed(cls, routes: dict[str, RouteSettings]) -> dict[str, RouteSettings]:
        missing = sorted(set(MACHINE_CLASSES) - set(routes))
        if missing:
            raise ValueError(f"no job queue for machine classes {missing}")
        return routes


class Settings(BaseModel):
    """What every remote-batch Lambda is configured with.

    Variables: ``REMOTE_BATCH_JOBS_TABLE``, ``REMOTE_BATCH_ACCOUNTS_TABLE``, ``REMOTE_BATCH_LEDGER_TABLE``,
    ``REMOTE_BATCH_IDEMPOTENCY_TABLE``, ``REMOTE_BATCH_EMAIL_TOPIC_ARN_PREFIX`` (the ARN every account's
    email topic starts with, ``arn:aws:sns:<region>:<account>:remote-batch-<stage>-email-``),
    ``REMOTE_BATCH_EMAIL_TOPIC_KEY`` (the KMS key those topics are encrypted with; optional: none locally),
    ``REMOTE_BATCH_SMS_PER_ACCOUNT_PER_HOUR`` (optional, default 30), ``REMOTE_BATCH_ZONES`` (JSON:
    ``{"UnitedStates": {"region", "bucket", "logGroup", "routes": {"Basic1x8": {"jobQueue",
    "jobDefinition"}, ...}}, ...}``) and ``AWS_REGION`` (the home region).
    """

    model_config = ConfigDict(frozen=True)

    jobs_table: str = Field(min_length=3)
    accounts_table: str = Field(min_length=3)
    ledger_table: str = Field(min_length=3)
    idempotency_table: str = Field(min_length=3)
    email_topic_arn_prefix: str = Field(min_length=1, pattern=r"^arn:[^:]+:sns:[^:]+:[^:]*:[A-Za-z0-9_-]+$")
    email_topic_key: str = ""
    # At most this many SMS per account and clock hour (an SMS costs money; the rest are recorded skipped).
    sms_per_account_per_hour: int = Field(default=30, ge=0, le=10_000)
    home_region: str = Field(min_length=1)
    zones: dict[GeoZone, ZoneSettings] = Field(min_length=1)
    # Webhooks must be HTTPS; only the local stack allows http:// (to a receiver on this machine).
    allow_http_webhooks: bool = False

    def to_environment(self) -> dict[str, str]:
        """The environment variables that ``from_environment`` reads back into these settings."""
        return {
            "REMOTE_BATCH_JOBS_TABLE": self.jobs_table,
            "REMOTE_BATCH_ACCOUNTS_TABLE": self.accounts_table,
            "REMOTE_BATCH_LEDGER_TABLE": self.ledger_table,
            "REMOTE_BATCH_IDEMPOTENCY_TABLE": self.idempotency_table,
            "REMOTE_BATCH_EMAIL_TOPIC_ARN_PREFIX": self.email_topic_arn_prefix,
            "REMOTE_BATCH_EMAIL_TOPIC_KEY": self.email_topic_key,
            "REMOTE_BATCH_SMS_PER_ACCOUNT_PER_HOUR": str(self.sms_per_account_per_hour),
            "AWS_REGION": self.home_region,
            "REMOTE_BATCH_ALLOW_HTTP_WEBHOOKS": "true" if self.allow_http_webhooks else "false",
            "REMOTE_BATCH_ZONES": json.dumps(
                {zone.value: z.model_dump(by_alias=True) for zone, z in self.zones.items()}
            ),
        }


class SettingsError(RuntimeError):
    """The Lambda's environment is missing or has a malformed variable (a deployment bug)."""


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Read and validate the settings from ``environ`` (default: ``os.environ``).

    Raises
    ------
    SettingsError
        Naming each missing or malformed variable.
    """
    env = os.environ if environ is None else environ
    names = {
        "jobs_table": "REMOTE_BATCH_JOBS_TABLE",
        "accounts_table": "REMOTE_BATCH_ACCOUNTS_TABLE",
        "ledger_table": "REMOTE_BATCH_LEDGER_TABLE",
        "idempotency_table": "REMOTE_BATCH_IDEMPOTENCY_TABLE",
        "email_topic_arn_prefix": "REMOTE_BATCH_EMAIL_TOPIC_ARN_PREFIX",
        "home_region": "AWS_REGION",
        "zones": "REMOTE_BATCH_ZONES",
    }
    missing = [var for var in names.values() if not env.get(var)]
    if missing:
        raise SettingsError(f"missing environment variables: {', '.join(missing)}")
    values: dict[str, object] = {key: env[var] for key, var in names.items()}
    values["allow_http_webhooks"] = env.get("REMOTE_BATCH_ALLOW_HTTP_WEBHOOKS", "false").lower() == "true"
    values["email_topic_key"] = env.get("REMOTE_BATCH_EMAIL_TOPIC_KEY", "")
    if env.get("REMOTE_BATCH_SMS_PER_ACCOUNT_PER_HOUR"):
        values["sms_per_account_per_hour"] = env["REMOTE_BATCH_SMS_PER_ACCOUNT_PER_HOUR"]
    try:
        values["zones"] = json.loads(env["REMOTE_BATCH_ZONES"])
        return Settings.model_validate(values)
    except (ValueError, ValidationError) as exc:
        raise SettingsError(f"malformed remote-batch settings: {exc}") from exc
