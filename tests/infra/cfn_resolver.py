"""Resolve a synthesized CloudFormation template's intrinsics into the concrete values a deploy makes.

The IAM tests need policies and environments as AWS would see them after ``cdk deploy``: ARNs, not
``{"Fn::GetAtt": [...]}``. This resolver plays CloudFormation's part for the handful of intrinsics and
resource types CDK emits in this app, and raises ``UnresolvedIntrinsic`` for anything else, so a new
construct never slips through as a half-resolved string.

What it resolves (CloudFormation's intrinsic function reference and each resource type's
"Return values" section, https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/):

- pseudo parameters ``AWS::AccountId``, ``AWS::Region`` (the stack's region), ``AWS::Partition``
  (``aws``), ``AWS::URLSuffix``, ``AWS::StackName``; ``AWS::NoValue`` drops the list item or key;
- ``Ref``, ``Fn::GetAtt`` (``Arn`` and the few attributes below), ``Fn::Join``, ``Fn::Sub`` (both forms,
  with ``${Resource}``, ``${Resource.Attr}``, ``${AWS::…}`` and ``${!Literal}``), ``Fn::Select``,
  ``Fn::Split``.

Physical names: a resource with an explicit name property keeps it; otherwise CloudFormation would make
one up (``<stack>-<logicalId>-<random>``); the resolver uses ``<stack>-<logicalId>`` (lower-cased for
buckets), deterministic, so a test can create the same resource in moto under the name the resolved
policies and environment carry.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

MOTO_ACCOUNT_ID = "123456789012"  # moto's default account (moto.core.DEFAULT_ACCOUNT_ID)
PARTITION = "aws"

_NO_VALUE = object()
_SUB_VARIABLE = re.compile(r"\$\{([^}]+)\}")


class UnresolvedIntrinsic(ValueError):
    """An intrinsic, resource type or attribute the resolver does not know (it never guesses)."""


@dataclass(frozen=True)
class ResolvedPolicy:
    """One identity policy attached to a role, resolved.

    Attributes
    ----------
    name : str
        The logical id of the ``AWS::IAM::Policy`` / ``AWS::IAM::ManagedPolicy`` (or ``<role>/<name>``
        for a role's inline ``Policies`` entry).
    managed : bool
        True for an ``AWS::IAM::ManagedPolicy`` (a customer-managed policy attached to the role).
    document : dict
        The policy document with every intrinsic resolved.
    """

    name: str
    managed: bool
    document: dict[str, Any]


class TemplateResolver:
    """Resolves values of one stack's template.

    Parameters
    ----------
    template : Mapping
        The parsed template (``Resources`` at least).
    stack_name : str
        ``AWS::StackName``; also the prefix of generated physical names.
    region : str
        ``AWS::Region`` of the stack.
    account_id : str
        ``AWS::AccountId`` (moto's by default: the stacks are account-agnostic).
    """

    def __init__(
        self,
        template: Mapping[str, Any],
        *,
        stack_name: str,
        region: str,
        account_id: str = MOTO_ACCOUNT_ID,
    ) -> None:
        self.template = template
        self.resources: Mapping[str, Any] = template.get("Resources", {})
        self.stack_name = stack_name
        self.region = region
        self.account_id = account_id

    # -- public ------------------------------------------------------------------------------------

    def resolve(self, value: Any) -> Any:
        """``value`` with every intrinsic resolved (lists and dicts recursively).

        Raises
        ------
        UnresolvedIntrinsic
            For an intrinsic, resource type or attribute this resolver does not implement.
        """
        resolved = self._resolve(value)
        return None if resolved is _NO_VALUE else resolved

    def physical_name(self, logical_id: str) -> str:
        """What ``Ref`` of a named resource returns: its name property, else ``<stack>-<logicalId>``."""
        resource = self._resource(logical_id)
        kind = resource["Type"]
        props = resource.get("Properties", {})
        name_property = _NAME_PROPERTIES.get(kind)
        if name_property and name_property in props:
            return str(self.resolve(props[name_property]))
        generated = f"{self.stack_name}-{logical_id}"
        if kind == "AWS::S3::Bucket":
            return generated.lower()[:63]
        if kind in ("AWS::IAM::Role", "AWS::IAM::ManagedPolicy"):
            return generated[:64]
        return generated

    def role_policies(self, role_logical_id: str) -> list[ResolvedPolicy]:
        """Every identity policy CDK attaches to a role: the role's inline ``Policies``, and each
        ``AWS::IAM::Policy`` / ``AWS::IAM::ManagedPolicy`` whose ``Roles`` include ``{"Ref": role}``.

        Raises
        ------
        UnresolvedIntrinsic
            When the role also carries ``ManagedPolicyArns`` (AWS-managed policies have no document in
            the template, so the role's permissions could not be rebuilt from it).
        """
        role = self._resource(role_logical_id)
        if role["Type"] != "AWS::IAM::Role":
            raise UnresolvedIntrinsic(f"{role_logical_id} is a {role['Type']}, not a role")
        props = role.get("Properties", {})
        if props.get("ManagedPolicyArns"):
            raise UnresolvedIntrinsic(
                f"{role_logical_id} has AWS-managed policies: {props['ManagedPolicyArns']}"
            )
        policies = [
            ResolvedPolicy(f"{role_logical_id}/{p['PolicyName']}", False, self.resolve(p["PolicyDocument"]))
            for p in props.get("Policies", [])
        ]
        reference = {"Ref": role_logical_id}
        for name, resource in self.resources.items():
            if resource["Type"] not in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
                continue
            if reference in resource["Properties"].get("Roles", []):
                managed = resource["Type"] == "AWS::IAM::ManagedPolicy"
                policies.append(
                    ResolvedPolicy(name, managed, self.resolve(resource["Properties"]["PolicyDocument"]))
                )
        return policies

    # -- intrinsics --------------------------------------------------------------------------------

    def _resolve(self, value: Any) -> Any:
        if isinstance(value, list):
            items = [self._resolve(item) for item in value]
            return [item for item in items if item is not _NO_VALUE]
        if not isinstance(value, dict):
            return value
        if len(value) == 1:
            ((key, argument),) = value.items()
            intrinsic = self._intrinsics().get(key)
            if intrinsic is not None:
                return intrinsic(argument)
            if key.startswith("Fn::") or key == "Condition":
                raise UnresolvedIntrinsic(f"intrinsic {key} is not supported: {value}")
        resolved = {key: self._resolve(item) for key, item in value.items()}
        return {key: item for key, item in resolved.items() if item is not _NO_VALUE}

    def _intrinsics(self) -> dict[str, Callable[[Any], Any]]:
        return {
            "Ref": self._ref,
            "Fn::GetAtt": self._get_att,
            "Fn::Join": self._join,
            "Fn::Sub": self._sub,
            "Fn::Select": self._select,
            "Fn::Split": self._split,
        }

    def _pseudo(self, name: str) -> Any:
        pseudo = {
            "AWS::AccountId": self.account_id,
            "AWS::Region": self.region,
            "AWS::Partition": PARTITION,
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": self.stack_name,
            "AWS::NoValue": _NO_VALUE,
        }
        if name not in pseudo:
            raise UnresolvedIntrinsic(f"pseudo parameter {name} is not supported")
        return pseudo[name]

    def _ref(self, name: str) -> Any:
        if name.startswith("AWS::"):
            return self._pseudo(name)
        kind = self._resource(name)["Type"]
        ref = _REF.get(kind)
        if ref is None:
            raise UnresolvedIntrinsic(f"Ref of {kind} ({name}) is not supported")
        return ref(self, name)

    def _get_att(self, argument: Any) -> Any:
        if isinstance(argument, str):
            logical_id, attribute = argument.split(".", 1)
        else:
            logical_id, attribute = argument[0], self.resolve(argument[1])
        kind = self._resource(logical_id)["Type"]
        getter = _GET_ATT.get((kind, attribute))
        if getter is None:
            raise UnresolvedIntrinsic(f"Fn::GetAtt {attribute} of {kind} ({logical_id}) is not supported")
        return getter(self, logical_id)

    def _join(self, argument: list[Any]) -> str:
        delimiter, items = argument
        return str(delimiter).join(str(item) for item in self.resolve(items))

    def _sub(self, argument: Any) -> str:
        text, variables = (argument, {}) if isinstance(argument, str) else argument
        values = {name: self.resolve(value) for name, value in variables.items()}

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name[1:] + "}"
            if name in values:
                return str(values[name])
            if name.startswith("AWS::"):
                return str(self._pseudo(name))
            if "." in name:
                return str(self._get_att(name))
            return str(self._ref(name))

        return _SUB_VARIABLE.sub(replace, text)

    def _select(self, argument: list[Any]) -> Any:
        index, items = argument
        return self.resolve(items)[int(self.resolve(index))]

    def _split(self, argument: list[Any]) -> list[str]:
        delimiter, text = argument
        return str(self.resolve(text)).split(delimiter)

    # -- resources ---------------------------------------------------------------------------------

    def _resource(self, logical_id: str) -> Any:
        if logical_id not in self.resources:
            raise UnresolvedIntrinsic(f"no resource {logical_id} in {self.stack_name}")
        return self.resources[logical_id]

    def arn(self, service: str, resource: str, *, region: bool = True, account: bool = True) -> str:
        """``arn:aws:<service>:<region>:<account>:<resource>`` in this stack's region and account."""
        return (
            f"arn:{PARTITION}:{service}:{self.region if region else ''}:"
            f"{self.account_id if account else ''}:{resource}"
        )

    def key_id(self, logical_id: str) -> str:
        """A KMS key's id: a UUID, derived from the stack and logical id so it is stable."""
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{self.stack_name}/{logical_id}"))


# Each type's name property (what Ref returns when it is set).
_NAME_PROPERTIES = {
    "AWS::DynamoDB::Table": "TableName",
    "AWS::SNS::Topic": "TopicName",
    "AWS::S3::Bucket": "BucketName",
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::SQS::Queue": "QueueName",
    "AWS::IAM::Role": "RoleName",
    "AWS::IAM::ManagedPolicy": "ManagedPolicyName",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::Batch::JobQueue": "JobQueueName",
    "AWS::Batch::JobDefinition": "JobDefinitionName",
    "AWS::Events::Rule": "Name",
}

_Getter = Callable[[TemplateResolver, str], Any]


def _name(r: TemplateResolver, i: str) -> str:
    return r.physical_name(i)


def _topic_arn(r: TemplateResolver, i: str) -> str:
    return r.arn("sns", r.physical_name(i))


def _queue_url(r: TemplateResolver, i: str) -> str:
    return f"https://sqs.{r.region}.amazonaws.com/{r.account_id}/{r.physical_name(i)}"


# Ref of each type (CloudFormation's "Return values" per resource type).
_REF: dict[str, _Getter] = {
    "AWS::DynamoDB::Table": _name,
    "AWS::SNS::Topic": _topic_arn,
    "AWS::S3::Bucket": _name,
    "AWS::Logs::LogGroup": _name,
    "AWS::SQS::Queue": _queue_url,
    "AWS::IAM::Role": _name,
    "AWS::IAM::ManagedPolicy": lambda r, i: r.arn("iam", f"policy/{r.physical_name(i)}", region=False),
    "AWS::Lambda::Function": _name,
    "AWS::KMS::Key": lambda r, i: r.key_id(i),
    "AWS::Batch::JobQueue": lambda r, i: r.arn("batch", f"job-queue/{r.physical_name(i)}"),
    "AWS::Batch::JobDefinition": lambda r, i: r.arn("batch", f"job-definition/{r.physical_name(i)}:1"),
    "AWS::Events::Rule": _name,
    # A distribution's id: E and 13 capitals or digits.
    "AWS::CloudFront::Distribution": lambda r, i: "E" + r.key_id(i).replace("-", "").upper()[:13],
}

_GET_ATT: dict[tuple[str, str], _Getter] = {
    ("AWS::DynamoDB::Table", "Arn"): lambda r, i: r.arn("dynamodb", f"table/{r.physical_name(i)}"),
    ("AWS::SNS::Topic", "TopicArn"): _topic_arn,
    ("AWS::SNS::Topic", "TopicName"): _name,
    ("AWS::S3::Bucket", "Arn"): lambda r, i: f"arn:{PARTITION}:s3:::{r.physical_name(i)}",
    # A log group's Arn attribute ends in ':*' (AWS::Logs::LogGroup return values).
    ("AWS::Logs::LogGroup", "Arn"): lambda r, i: r.arn("logs", f"log-group:{r.physical_name(i)}:*"),
    ("AWS::SQS::Queue", "Arn"): lambda r, i: r.arn("sqs", r.physical_name(i)),
    ("AWS::SQS::Queue", "QueueName"): _name,
    ("AWS::IAM::Role", "Arn"): lambda r, i: r.arn("iam", f"role/{r.physical_name(i)}", region=False),
    ("AWS::KMS::Key", "Arn"): lambda r, i: r.arn("kms", f"key/{r.key_id(i)}"),
    ("AWS::Lambda::Function", "Arn"): lambda r, i: r.arn("lambda", f"function:{r.physical_name(i)}"),
    ("AWS::Events::Rule", "Arn"): lambda r, i: r.arn("events", f"rule/{r.physical_name(i)}"),
    ("AWS::Batch::JobQueue", "JobQueueArn"): lambda r, i: r.arn("batch", f"job-queue/{r.physical_name(i)}"),
    ("AWS::CloudFront::Distribution", "DomainName"): lambda r, i: (
        "d" + r.key_id(i).replace("-", "")[:13] + ".cloudfront.net"
    ),
    # The default security group of a VPC: an id like CloudFormation's (sg- and 17 hex digits).
    ("AWS::EC2::VPC", "DefaultSecurityGroup"): lambda r, i: "sg-" + r.key_id(i).replace("-", "")[:17],
}
