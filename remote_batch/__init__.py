"""remote-batch's client package: the Python SDK, the ``remote-batch`` CLI and the local stack
(``remote_batch_local``).

Quick start (against ``make dev``'s local stack, or after ``remote-batch login``)::

    import remote_batch as rb
    rb.submit("2 + 2").result()                                 # 4
    rb.submit(lambda n: sum(range(n)), 10**6).result()           # 499999500000
    rb.map(lambda x: x * x, range(10)).result()                  # [0, 1, 4, ..., 81]

The SDK speaks only the HTTP API (docs/http-api.md): no AWS credentials, no boto3.
"""

from remote_batch.client import Client
from remote_batch.config import Profile
from remote_batch.errors import (
    ApiError,
    ClassUnavailable,
    ConfigurationError,
    Conflict,
    ConnectionFailed,
    Expired,
    Forbidden,
    InsufficientCredits,
    InternalError,
    JobNotFinished,
    LoginFailed,
    NoOutput,
    NotFound,
    PayloadTooLarge,
    QuotaExceeded,
    RateLimited,
    RemoteBatchError,
    RemoteJobError,
    Unauthorized,
    ValidationError,
)
from remote_batch.jobs import Job, OutputFile, Outputs
from remote_batch.sdk import (
    Account,
    Estimate,
    MachineClass,
    Member,
    Quota,
    account,
    connect,
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
    "Estimate",
    "Expired",
    "Forbidden",
    "InsufficientCredits",
    "InternalError",
    "Job",
    "JobNotFinished",
    "LoginFailed",
    "MachineClass",
    "Member",
    "NoOutput",
    "NotFound",
    "OutputFile",
    "Outputs",
    "PayloadTooLarge",
    "Profile",
    "Quota",
    "QuotaExceeded",
    "RateLimited",
    "RemoteBatchError",
    "RemoteJobError",
    "Unauthorized",
    "Usage",
    "UsageEntry",
    "ValidationError",
    "account",
    "connect",
    "create_account",
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
