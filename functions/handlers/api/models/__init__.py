"""The HTTP API's models (docs/http-api.md), by resource, and their mapping from domain objects.

One model per layer: these are what clients see; domain objects never leave the handler unmapped.
The OpenAPI document at ``GET /openapi.json`` is generated from these same models.
"""

from functions.handlers.api.models.account import (
    AccountView,
    ContactsBody,
    ContactsView,
    GrantCreditsBody,
    LedgerEntryView,
    UsageView,
    account_view,
    ledger_entry_view,
)
from functions.handlers.api.models.common import (
    MAX_TIME_CONSTRAINT_SECONDS,
    Credits,
    CreditsIn,
    ErrorBody,
    ErrorDetail,
    HealthView,
)
from functions.handlers.api.models.job_data import (
    JobLogView,
    JobResultView,
    LogEventView,
    OutputFileView,
    OutputsView,
    PreviewLinkView,
    log_event_view,
)
from functions.handlers.api.models.jobs import (
    CommandArg,
    JobListView,
    JobStatusName,
    JobView,
    NotificationRecordView,
    SubmitJobBody,
    UploadBody,
    UploadView,
    job_view,
)
from functions.handlers.api.models.members import (
    AccessView,
    MemberBody,
    MembersView,
    MemberView,
    RolesView,
    member_view,
    roles_view,
)
from functions.handlers.api.models.meta import (
    EstimateBody,
    EstimateView,
    MachineClassesView,
    MachineClassView,
    RuntimeView,
    machine_class_view,
)

__all__ = [
    "MAX_TIME_CONSTRAINT_SECONDS",
    "AccessView",
    "AccountView",
    "CommandArg",
    "ContactsBody",
    "ContactsView",
    "Credits",
    "CreditsIn",
    "ErrorBody",
    "ErrorDetail",
    "EstimateBody",
    "EstimateView",
    "GrantCreditsBody",
    "HealthView",
    "JobListView",
    "JobLogView",
    "JobResultView",
    "JobStatusName",
    "JobView",
    "LedgerEntryView",
    "LogEventView",
    "MachineClassView",
    "MachineClassesView",
    "MemberBody",
    "MemberView",
    "MembersView",
    "NotificationRecordView",
    "OutputFileView",
    "OutputsView",
    "PreviewLinkView",
    "RolesView",
    "RuntimeView",
    "SubmitJobBody",
    "UploadBody",
    "UploadView",
    "UsageView",
    "account_view",
    "job_view",
    "ledger_entry_view",
    "log_event_view",
    "machine_class_view",
    "member_view",
    "roles_view",
]
