"""remote-batch's client package: the Python SDK, the ``remote-batch`` CLI and the local stack
(``remote_batch_local``).

Quick start (against ``make dev``'s local stack, or after ``remote-batch login``)::

    import remote_batch as rb
    rb.submit("2 + 2").result()                                 # 4
    rb.submit(lambda n: sum(range(n)), 10**6).result()           # 499999500000
    rb.map(lambda x: x * x, range(10)).result()                  # [0, 1, 4, ..., 81]
    env = rb.Environment("ml", requirements=["scikit-learn==1.9.1"]).create().wait()
    rb.submit(train, environment=env).result()                   # with exactly those packages

The SDK speaks only the HTTP API (docs/http-api.md): no AWS credentials, no boto3.
"""

from remote_batch.client import Client
from remote_batch.config import Profile
from remote_batch.connection import connect
from remote_batch.environments import Environment, Package, environment, environments
from remote_batch.errors import (
    ApiError,
    ClassUnavailable,
    ConfigurationError,
    Conflict,
    ConnectionFailed,
    EnvironmentFailed,
    Expired,
    Forbidden,
    InsufficientCredits,
    InternalError,
    JobNotFinished,
    LoginFailed,
    NoOutput,
    NotFound,
    NotSupported,
    PayloadTooLarge,
    QuotaExceeded,
    RateLimited,
    RemoteBatchError,
    RemoteJobError,
    Unauthorized,
    ValidationError,
)
from remote_batch.jobs import Job, JobEnvironment, OutputFile, Outputs
from remote_batch.requirements_file import RequirementsFileError
from remote_batch.sdk import (
    Account,
    Estimate,
    MachineClass,
    Member,
    Quota,
    account,
    create_account,
    estimate,
    grant_credits,
    job,
    jobs,
    machine_classes,
    map,
    members,
    quotas,
    remove_member,
    roles,
    runtime,
    set_contacts,
    set_member,
    submit,
    usage,
)
from remote_batch.usage import Usage, UsageEntry

__all__ = [
    "Account",
    "ApiError",
    "ClassUnavailable",
    "Client",
    "ConfigurationError",
    "Conflict",
    "ConnectionFailed",
    "Environment",
    "EnvironmentFailed",
    "Estimate",
    "Expired",
    "Forbidden",
    "InsufficientCredits",
    "InternalError",
    "Job",
    "JobEnvironment",
    "JobNotFinished",
    "LoginFailed",
    "MachineClass",
    "Member",
    "NoOutput",
    "NotFound",
    "NotSupported",
    "OutputFile",
    "Outputs",
    "Package",
    "PayloadTooLarge",
    "Profile",
    "Quota",
    "QuotaExceeded",
    "RateLimited",
    "RemoteBatchError",
    "RemoteJobError",
    "RequirementsFileError",
    "Unauthorized",
    "Usage",
    "UsageEntry",
    "ValidationError",
    "account",
    "connect",
    "create_account",
    "environment",
    "environments",
    "estimate",
    "grant_credits",
    "job",
    "jobs",
    "machine_classes",
    "map",
    "members",
    "quotas",
    "remove_member",
    "roles",
    "runtime",
    "set_contacts",
    "set_member",
    "submit",
    "usage",
]
