"""Models of the job routes (docs/http-api.md ``Job``, ``EvaluationResult``, uploads, logs, outputs)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from functions.domain.arrays import MAX_INLINE_ITEMS, visible_counts
from functions.domain.batch_reasons import normalize_reason
from functions.domain.computes import NAME_PATTERN as COMPUTE_NAME_PATTERN
from functions.domain.dependencies import MAX_PARENTS, MAX_PATTERNS
from functions.domain.environments import NAME_PATTERN as ENVIRONMENT_NAME_PATTERN
from functions.domain.jobs import Job, JobType
from functions.domain.limits import MAX_UPLOAD_BYTES
from functions.domain.notifications import notifications_json_schema, rules_to_json
from functions.domain.parent_inputs import MAX_INPUT_BYTES, MAX_INPUT_OBJECTS
from functions.domain.runtime import PYTHON_VERSION_PATTERN
from functions.domain.text import (
    BASE64_PATTERN,
    LABEL_PATTERN,
    MAX_ARG_BYTES,
    NO_NUL_PATTERN,
)
from functions.domain.timefmt import to_api_time
from functions.handlers.api.models.common import (
    ApiModel,
    Credits,
    CreditsIn,
    TimeConstraintIn,
    _json_integer,
    credit_constraint_field,
    geo_zone_field,
    machine_class_field,
)


def _program_first(schema: dict[str, Any]) -> None:
    """JSON Schema of ``command``: the first element, the program, is not empty."""
    for branch in schema.get("anyOf", [schema]):
        if branch.get("type") == "array":
            branch["prefixItems"] = [{**branch["items"], "minLength": 1}]


# A process argument: any text without NUL (the rest, bytes and the total, is checked by
# functions.domain.text.check_argv, which the JSON schema cannot say).
CommandArg = Annotated[str, Field(max_length=MAX_ARG_BYTES, pattern=NO_NUL_PATTERN)]

JobStatusName = Literal["Queued", "Starting", "Running", "Succeeded", "Terminated"]


class DependsOnBody(ApiModel):
    """One parent of ``POST /jobs``' ``dependsOn``."""

    model_config = ConfigDict(extra="forbid")

    jobId: str = Field(
        min_length=1, max_length=64, description="A job of the caller's account in the same zone."
    )
    condition: Literal["Succeeded", "Completed", "Terminated"] = Field(
        default="Succeeded",
        description="What the parent's final status must be: Succeeded, Terminated, or Completed (either). "
        "When it ends the other way the job ends Terminated, free ('Dependency job-X ended Succeeded; "
        "this job needed Terminated').",
    )
    mode: Literal["whole", "perItem"] = Field(
        default="whole",
        description="How the parent counts: whole (an array parent once the whole array is final), or "
        "perItem (condition Succeeded, between two arrays of one size: item i goes once the parent's "
        "item i succeeded; a parent item that ended Terminated ends item i Terminated, free).",
    )


class InputsFromBody(ApiModel):
    """One parent of ``POST /jobs``' ``inputsFrom``: which of its outputs the job starts with."""

    model_config = ConfigDict(extra="forbid")

    jobId: str = Field(min_length=1, max_length=64, description="A parent also listed in dependsOn.")
    files: list[str] = Field(
        default_factory=list,
        max_length=MAX_PATTERNS,
        description="Glob patterns (fnmatch: *, ?, [..]) over the parent's output names, relative, with "
        "no '..' part; empty or absent: every output. They land in the job's working folder under "
        "inputs/<jobId>/, with the parent's result.pickle and result.json when it has them.",
    )


class SubmitJobBody(ApiModel):
    """``POST /jobs`` body: exactly one of ``code``, ``command``, ``pickle``, ``inputKey``."""

    model_config = ConfigDict(
        extra="forbid",
        # Exactly one of code, command, pickle, inputKey, as JSON Schema says it: one branch per payload.
        json_schema_extra={
            "oneOf": [
                {"required": ["code"], "properties": {"code": {"type": "string"}}},
                {"required": ["command"], "properties": {"command": {"type": "array"}}},
                {"required": ["pickle"], "properties": {"pickle": {"type": "string"}}},
                {"required": ["inputKey"], "properties": {"inputKey": {"type": "string"}}},
            ]
        },
    )

    code: str | None = Field(default=None, description="Python source; its last expression is the result.")
    command: list[CommandArg] | None = Field(
        default=None,
        min_length=1,
        json_schema_extra=_program_first,
        description="argv run in the job container: no NUL, each argument at most 131,071 bytes of "
        "UTF-8, 1 MiB in all, a non-empty program name.",
    )
    pickle: str | None = Field(
        default=None,
        min_length=1,
        pattern=BASE64_PATTERN,
        description="base64 cloudpickle of (fn, args, kwargs), standard alphabet, padded.",
    )
    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        pattern=LABEL_PATTERN,
        description="A label: 1..128 characters on one line, no control or bidirectional formatting "
        "characters, not only spaces.",
    )
    machineClass: str = machine_class_field()
    geoZone: str = geo_zone_field("Automatic | UnitedStates | EuropeanUnion.")
    creditConstraint: CreditsIn | None = credit_constraint_field(
        "Most credits the job may spend (null: no cap)."
    )
    timeConstraint: TimeConstraintIn = Field(
        default=None, description="Most seconds of Running time (≤ 30 days)."
    )
    notifications: Any = Field(
        default="Automatic",
        description="See docs/http-api.md Notifications.",
        json_schema_extra=notifications_json_schema(),
    )
    dependsOn: list[DependsOnBody] | None = Field(
        default=None,
        max_length=MAX_PARENTS,
        description="Extension: the jobs this one waits for (AWS Batch's dependsOn; at most 100, each "
        "once): the caller's account's jobs in the same geo zone (another account's or an unknown id: "
        "404; another zone: 400); an array counts once the whole array is final. The job stays Queued "
        "('Waiting for job-X (Running) and 2 more'), holding no quota and spending no credits, until "
        "every condition holds; when one can no longer hold it ends Terminated, free.",
    )
    inputsFrom: list[InputsFromBody] | None = Field(
        default=None,
        max_length=MAX_PARENTS,
        description="Extension: parents (each also in dependsOn) whose outputs the job starts with, "
        "under inputs/<jobId>/ in its working folder, copied within the zone's bucket when the job is "
        f"released: at most {MAX_INPUT_OBJECTS} objects and {MAX_INPUT_BYTES // 1024**3} GiB from all its "
        "parents. A parent whose data expired (14 "
        "days) or was deleted, or inputs past a limit, end the job Terminated, free.",
    )
    arrayItems: list[Any] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_INLINE_ITEMS,
        description="An array job: one child per item (1..10,000 JSON values); code sees `item` and "
        "`arrayIndex`, a pickle gets the item as its first argument, a command REMOTE_BATCH_ITEM_FILE "
        "and AWS_BATCH_JOB_ARRAY_INDEX.",
    )
    parallelism: Annotated[int, BeforeValidator(_json_integer)] | None = Field(
        default=None,
        ge=1,
        le=10_000,
        description="An array job: run its items on this many containers (at most one per item), each "
        "taking the next unclaimed item until none is left, instead of a container per item. Each "
        "container is charged once (its running time, the 60-second minimum once), split over the items "
        "it ran by their own running time; an item whose container died holding it fails with that "
        "reason; items no container claimed end Terminated, free.",
    )
    compute: str | None = Field(
        default=None,
        min_length=2,
        max_length=32,
        pattern=COMPUTE_NAME_PATTERN,
        description="Extension: run on this dedicated compute of the account (Running or Starting; "
        "PUT /account/computes/{name}). Its machine class and zone are the job's; the job's own "
        "running time is not charged (the compute's is).",
    )
    arrayItemsKey: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        description="An array job of up to 100,000 items: the inputKey of an upload (POST /jobs/uploads, "
        "contentType application/jsonl) of this account in the job's zone, one JSON value a line.",
    )
    inputKey: str | None = Field(
        default=None,
        min_length=1,
        max_length=512,
        description="Extension: instead of code or pickle, the inputKey of an upload (POST /jobs/uploads) "
        "of this account in the job's zone; its Content-Type says whether it is code or a pickle.",
    )
    pythonVersion: str | None = Field(
        default=None,
        pattern=PYTHON_VERSION_PATTERN,
        description="Extension: the Python (major.minor, e.g. 3.12) the job runs on, one of GET /runtime's "
        "pythonVersions (the SDK sends its own, so a pickled function runs in the version that made it); "
        "default GET /runtime's pythonVersion. Another version is refused (400, field pythonVersion).",
    )
    # A name or an inline spec (read as EnvironmentSpecBody by the route, naming its bad fields
    # ``environment.<field>``): typed here only by the schema below, so a value of another type is
    # one error on ``environment``.
    environment: Any = Field(
        default=None,
        description="Extension: the environment to run in: its Python and packages, and nothing of the "
        "worker image's. The name of one of the account's environments (PUT /environments/{name}), or "
        "an inline spec (PUT /environments/{name}'s body: an unnamed environment, found again by the "
        "spec's hash, so the same spec twice is one build). A job submitted while it builds waits "
        "Queued ('Building environment ml (Python 3.12, 14 packages)'), neither admitted nor charged, "
        "and ends Terminated, free, if the build fails; a Failed environment is refused (400, field "
        "environment).",
        json_schema_extra={
            "anyOf": [
                {"type": "string", "pattern": ENVIRONMENT_NAME_PATTERN, "minLength": 2, "maxLength": 64},
                {"$ref": "#/components/schemas/EnvironmentSpecBody"},
                {"type": "null"},
            ]
        },
    )

    @field_validator("environment")
    @classmethod
    def _name_or_spec(cls, value: Any) -> str | dict[str, Any] | None:
        if value is not None and not isinstance(value, str | dict):
            raise ValueError("give an environment's name or an inline spec object")
        return value

    @field_validator("arrayItemsKey")
    @classmethod
    def _one_item_source(cls, key: str | None, info: ValidationInfo) -> str | None:
        """Refused on ``arrayItemsKey`` (declared after ``arrayItems``, so the error names a field)."""
        if key is not None and info.data.get("arrayItems") is not None:
            raise ValueError("give arrayItems or arrayItemsKey, not both")
        return key

    @model_validator(mode="after")
    def _exactly_one_payload(self) -> SubmitJobBody:
        names = ("code", "command", "pickle", "inputKey")
        given = [name for name in names if getattr(self, name) is not None]
        if len(given) != 1:
            found = ", ".join(given) if given else "none of them"
            raise ValueError(
                f"give exactly one of code, command or pickle, or an inputKey from POST /jobs/uploads "
                f"(found: {found})"
            )
        return self


class UploadBody(ApiModel):
    """``POST /jobs/uploads`` body: what will be uploaded (docs/http-api.md version 2 additions)."""

    model_config = ConfigDict(extra="forbid")

    size: Annotated[int, BeforeValidator(_json_integer)] = Field(
        ge=1, le=MAX_UPLOAD_BYTES, description="The object's exact size in bytes (≤ 5 GiB)."
    )
    contentType: Literal[
        "text/x-python", "application/x-python-pickle", "application/jsonl", "application/x-ndjson"
    ] = Field(
        description="text/x-python: Python source run as code; application/x-python-pickle: a "
        "cloudpickle payload as the SDK makes it; application/jsonl (or application/x-ndjson): an "
        "array's items, one JSON value a line (submit it with arrayItemsKey)."
    )
    geoZone: str = Field(
        default="Automatic",
        description="Extension: the zone of the jobs that will use it (data stays there).",
    )


class UploadView(ApiModel):
    """``POST /jobs/uploads`` → 201: PUT the bytes to ``uploadUrl`` with ``headers``, then submit
    with ``inputKey``."""

    inputKey: str
    uploadUrl: str = Field(description="Presigned SigV4 PUT; Content-Length and Content-Type are signed.")
    expiresAt: str = Field(description="When uploadUrl stops working (15 min).")
    method: Literal["PUT"] = "PUT"
    headers: dict[str, str] = Field(description="Extension: the headers the PUT must send, exactly.")
    geoZone: str = Field(description="Extension: the zone the object is stored in.")


class NotificationRecordView(ApiModel):
    """One line of ``notificationLog``: what was sent, skipped or failed, when, to whom (masked)."""

    at: str
    event: str
    method: str
    outcome: Literal["sent", "skipped", "failed"]
    to: str | None
    detail: str


class JobEnvironmentView(ApiModel):
    """The environment a job runs in: its name, its build's hash and its Python; for an image
    environment the image pinned by digest (null otherwise)."""

    name: str | None = Field(description="The environment's name; null for one given inline (a spec).")
    hash: str | None = Field(
        description="Its build's identity (GET /environments/{name}'s hash); null while the job waits "
        "for the build."
    )
    python: str
    image: str | None = None


class JobView(ApiModel):
    """``Job`` of docs/http-api.md, what every job route returns."""

    jobId: str
    name: str | None
    type: Literal["Single", "Array", "ArrayChild"]
    parentJobId: str | None
    arrayIndex: int | None
    arraySize: int | None
    status: JobStatusName
    statusReason: str | None
    machineClass: str
    geoZone: str
    creditConstraint: Credits | None
    timeConstraint: int | None
    notifications: list[dict[str, Any]]
    creditsSpent: Credits
    exitCode: int | None
    submittedAt: str
    startedAt: str | None
    completedAt: str | None
    expiresAt: str
    childStatusCounts: dict[str, int] | None
    notificationLog: list[NotificationRecordView]
    batchReason: str | None = Field(
        default=None,
        description="Extension: what AWS Batch said about how the job ended, verbatim (its reasons "
        "joined by ' | '), for support; statusReason is the plain sentence made of it.",
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="Extension: sentences about a job that ended well but not cleanly, e.g. a process "
        "killed for memory while the job still succeeded.",
    )
    compute: str | None = Field(
        default=None,
        description="Extension: the dedicated compute the job runs on (its time is charged to the compute).",
    )
    submittedBy: str | None = Field(
        default=None,
        description="Extension: the user who submitted the job (their user id; null for jobs submitted "
        "before users were recorded).",
    )
    pythonVersion: str | None = Field(
        default=None,
        description="Extension: the Python (major.minor) the job runs on (null for jobs submitted before "
        "jobs chose one: they ran GET /runtime's default).",
    )
    environment: JobEnvironmentView | None = Field(
        default=None, description="Extension: the environment the job runs in (null: the worker image's)."
    )
    dependsOn: list[DependsOnBody] = Field(
        default_factory=list, description="Extension: the job's parents and their conditions, as submitted."
    )
    inputsFrom: list[InputsFromBody] = Field(
        default_factory=list, description="Extension: the parents whose outputs the job starts with."
    )
    waitingFor: list[str] = Field(
        default_factory=list,
        description="Extension: while the job waits Queued, what it waits for ('job|job-...' for a "
        "parent, 'environment|...' for a build); its statusReason names the first. Empty once released.",
    )
    childrenWaiting: list[str] = Field(
        default_factory=list,
        description="Extension: while the job is not final, the ids of the jobs submitted depending on "
        "it (they wait for it, unless aborted or ended by another parent since), oldest first, at most "
        "1,000, then the arrays depending on an array per item (at most 1,000 more). Empty once the job "
        "is final.",
    )


class JobListView(ApiModel):
    """``GET /jobs``: a page of jobs, newest first (possibly short while ``nextToken`` is set)."""

    jobs: list[JobView]
    nextToken: str | None = Field(
        description="Set while more jobs may follow; a page may hold fewer than `limit` jobs (even "
        "none) while it is set. Null on the last page."
    )


def job_view(job: Job) -> JobView:
    """Map a domain job to the API's ``Job``. An array's ``creditsSpent`` is never below what its
    children's settlements already charged (``creditsSettled``, credits): the parent's own
    ``creditsSpent`` is only written when the array ends, while each child's ledger entry is written
    when that child ends."""
    return JobView(
        jobId=job.job_id,
        name=job.name,
        type=job.type.value,
        parentJobId=job.parent_job_id,
        arrayIndex=job.array_index,
        arraySize=job.array_size,
        status=job.status.value,
        statusReason=normalize_reason(job.status_reason),
        machineClass=job.machine_class,
        geoZone=job.geo_zone.value,
        creditConstraint=job.credit_constraint,
        timeConstraint=job.time_constraint,
        notifications=rules_to_json(job.notifications),
        creditsSpent=max(job.credits_spent, job.credits_settled)
        if job.type == JobType.ARRAY
        else job.credits_spent,
        exitCode=job.exit_code,
        submittedAt=to_api_time(job.submitted_at) or "",
        startedAt=to_api_time(job.started_at),
        completedAt=to_api_time(job.completed_at),
        expiresAt=to_api_time(job.expires_at) or "",
        childStatusCounts=visible_counts(job.child_status_counts),
        batchReason=job.batch_reason,
        warnings=list(job.warnings),
        compute=job.compute,
        submittedBy=job.submitted_by,
        pythonVersion=job.python_version,
        environment=(
            JobEnvironmentView(
                name=job.environment.name,
                hash=job.environment.hash,
                python=job.environment.python,
                image=job.environment.image,
            )
            if job.environment
            else None
        ),
        dependsOn=[
            DependsOnBody(jobId=d.job_id, condition=d.condition.value, mode=d.mode.value)
            for d in job.depends_on
        ],
        inputsFrom=[InputsFromBody(jobId=i.job_id, files=list(i.files)) for i in job.inputs_from],
        waitingFor=[p.id for p in job.waiting_for] if job.is_waiting else [],
        childrenWaiting=[] if job.is_final else [*job.dependents, *job.item_dependents],
        notificationLog=[
            NotificationRecordView.model_validate(
                {
                    "at": to_api_time(r.at),
                    "event": r.event,
                    "method": r.method,
                    "outcome": r.outcome,
                    "to": r.to,
                    "detail": r.detail,
                }
            )
            for r in job.notification_log
        ],
    )
