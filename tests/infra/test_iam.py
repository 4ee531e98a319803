"""Least privilege in every stack: no wildcard actions, no data actions on every resource, Batch
submission only to the service's queues and definitions, tables per function."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from functions.domain.machine_classes import MACHINE_CLASSES
from tests.infra.conftest import Synth, SynthApp

# Actions that read or write data: on Resource "*" they would reach every bucket or table.
DATA_ACTION_PREFIXES = ("s3:", "dynamodb:", "sqs:SendMessage", "sqs:ReceiveMessage", "kms:Decrypt")


def _statements(synth: Synth) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, resource in synth.template_json["Resources"].items():
        documents = []
        if resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            documents.append(resource["Properties"]["PolicyDocument"])
        if resource["Type"] == "AWS::IAM::Role":
            documents += [p["PolicyDocument"] for p in resource["Properties"].get("Policies", [])]
        for document in documents:
            for statement in document["Statement"]:
                yield name, statement


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _all_statements(app_synth: SynthApp) -> Iterator[tuple[str, dict[str, Any]]]:
    for synth in app_synth.stacks:
        for name, statement in _statements(synth):
            yield f"{synth.stack.stack_name}/{name}", statement


def test_no_statement_allows_every_action(app_synth: SynthApp) -> None:
    statements = list(_all_statements(app_synth))

    assert len(statements) > 30
    for name, statement in statements:
        actions = _listed(statement.get("Action", []))
        assert "*" not in actions, name
        assert not any(a.endswith(":*") for a in actions if isinstance(a, str)), name


def test_no_data_action_on_every_resource(app_synth: SynthApp) -> None:
    for name, statement in _all_statements(app_synth):
        if statement["Effect"] != "Allow" or "*" not in _listed(statement.get("Resource", [])):
            continue
        actions = _listed(statement["Action"])
        assert not [a for a in actions if a.startswith(DATA_ACTION_PREFIXES)], name


def _policy_of(synth: Synth, function: Any) -> list[dict[str, Any]]:
    """Every statement attached to the function's role (its default policy and any overflow)."""
    role = synth.logical_id(function.role)
    return [
        statement
        for name, statement in _statements(synth)
        if synth.template_json["Resources"][name]["Properties"].get("Roles") == [{"Ref": role}]
    ]


def _batch_arn(region: str, resource: str) -> dict[str, Any]:
    return {"Fn::Join": ["", [f"arn:aws:batch:{region}:", {"Ref": "AWS::AccountId"}, f":{resource}"]]}


def test_only_the_dispatcher_submits_and_only_to_the_service_queues_and_definitions(synth: Synth) -> None:
    functions = synth.stack.functions
    regions = ("us-east-1", "eu-central-1")

    (submit,) = [
        s for s in _policy_of(synth, functions.dispatcher) if "batch:SubmitJob" in _listed(s["Action"])
    ]
    queues = [_batch_arn(r, f"job-queue/remote-batch-dev-{mc}") for r in regions for mc in MACHINE_CLASSES]
    # Dedicated computes' queues, made at run time under one name prefix.
    queues += [_batch_arn(r, "job-queue/remote-batch-dev-cmp-*") for r in regions]
    # SubmitJob requires the job (job/*) and the queue; it is authorized on the definition with its
    # revision, or without one when the definition is named without a revision.
    # A machine class has a definition per Python version (remote-batch-dev-Basic1x8-py312): one
    # pattern for them all.
    definitions = [
        _batch_arn(r, f"job-definition/remote-batch-dev-{mc}-py3*{revision}")
        for r in regions
        for mc in MACHINE_CLASSES
        for revision in (":*", "")
    ]
    jobs = [_batch_arn(r, "job/*") for r in regions]
    assert sorted(map(json.dumps, submit["Resource"])) == sorted(map(json.dumps, jobs + queues + definitions))
    # POST /jobs never calls AWS Batch: the api only puts admitted jobs on the dispatch queue (its one
    # SubmitJob is an environment's build: test_the_api_submits_builds_only_to_the_build_queues).
    for other in (functions.batch_events, functions.meter):
        assert not [s for s in _policy_of(synth, other) if "batch:SubmitJob" in _listed(s["Action"])]


def test_the_api_submits_builds_only_to_the_build_queues_on_the_build_definitions(synth: Synth) -> None:
    from functions.domain.environment_builds import BUILD_TAG_KEYS

    regions = ("us-east-1", "eu-central-1")
    statements = _policy_of(synth, synth.stack.functions.api)
    (submit,) = [s for s in statements if "batch:SubmitJob" in _listed(s["Action"])]
    (tag,) = [
        s
        for s in statements
        if "batch:TagResource" in _listed(s["Action"])
        and "remote-batch:buildId" in json.dumps(s.get("Condition"))
    ]

    jobs = [_batch_arn(r, "job/*") for r in regions]
    queues = [_batch_arn(r, "job-queue/remote-batch-dev-build") for r in regions]
    revisions = [_batch_arn(r, "job-definition/remote-batch-dev-build-py3*:*") for r in regions]
    definitions = [_batch_arn(r, "job-definition/remote-batch-dev-build-py3*") for r in regions]
    assert sorted(map(json.dumps, submit["Resource"])) == sorted(
        map(json.dumps, jobs + queues + definitions + revisions)
    )
    assert sorted(map(json.dumps, tag["Resource"])) == sorted(map(json.dumps, jobs + revisions))
    assert tag["Condition"] == {"ForAllValues:StringEquals": {"aws:TagKeys": list(BUILD_TAG_KEYS)}}


@pytest.mark.parametrize("name", ["api", "batch_events", "meter"])
def test_functions_reach_both_zone_buckets_by_name(synth: Synth, name: str) -> None:
    statements = _policy_of(synth, getattr(synth.stack.functions, name))
    s3_resources = [
        resource
        for statement in statements
        if any(a.startswith("s3:") for a in _listed(statement["Action"]))
        for resource in _listed(statement["Resource"])
    ]

    # batch_events and the meter also write an array's result document, under outputs/ only, and a
    # released child's copies of its parents' outputs, under inputs/ only.
    paths = ("", "/*", "/outputs/*", "/inputs/*") if name in ("batch_events", "meter") else ("", "/*")
    expected = [
        {
            "Fn::Join": [
                "",
                ["arn:aws:s3:::remote-batch-dev-data-", {"Ref": "AWS::AccountId"}, f"-{region}{path}"],
            ]
        }
        for region in ("us-east-1", "eu-central-1")
        for path in paths
    ]
    assert set(map(json.dumps, s3_resources)) == set(map(json.dumps, expected))


@pytest.mark.parametrize(
    ("name", "tables"),
    [
        ("api", {"Jobs", "Accounts", "Ledger", "Idempotency", "Quotas", "Operations", "Computes"}),
        # A build job's end makes its environment Ready or Failed (environments live on Computes).
        ("batch_events", {"Jobs", "Accounts", "Ledger", "Quotas", "Computes"}),
        # The meter advances, schedules and settles dedicated computes.
        ("meter", {"Jobs", "Accounts", "Ledger", "Quotas", "Computes"}),
        # A job sent to a dedicated compute restarts its idle timer; a job whose class is out of
        # service waits (the class states read, never written: next test).
        ("dispatcher", {"Jobs", "Accounts", "Ledger", "Quotas", "Computes", "Operations"}),
    ],
)
def test_functions_reach_only_their_tables(synth: Synth, name: str, tables: set[str]) -> None:
    arn_of = {
        logical_name: {"Fn::GetAtt": [synth.logical_id(table), "Arn"]}
        for logical_name, table in synth.stack.data.tables.items()
    }
    statements = _policy_of(synth, getattr(synth.stack.functions, name))

    reached = {
        logical_name
        for statement in statements
        if any(a.startswith("dynamodb:") for a in _listed(statement["Action"]))
        for logical_name, arn in arn_of.items()
        if arn in _listed(statement["Resource"])
    }
    assert reached == tables


def test_the_dispatcher_only_reads_the_class_states(synth: Synth) -> None:
    operations = {"Fn::GetAtt": [synth.logical_id(synth.stack.data.operations_table), "Arn"]}
    actions = {
        action
        for statement in _policy_of(synth, synth.stack.functions.dispatcher)
        if operations in _listed(statement["Resource"])
        for action in _listed(statement["Action"])
    }
    assert actions == {"dynamodb:Query", "dynamodb:GetItem"}


EMAIL_TOPICS = {
    "Fn::Join": ["", ["arn:aws:sns:us-east-1:", {"Ref": "AWS::AccountId"}, ":remote-batch-dev-email-*"]]
}
TOPIC_ACTIONS = {
    "sns:CreateTopic",
    "sns:SetTopicAttributes",
    "sns:Subscribe",
    "sns:ListSubscriptionsByTopic",
    "sns:DeleteTopic",
}


def _sns_grants(synth: Synth, name: str) -> dict[str, list[Any]]:
    """SNS action → the resources the function's role allows it on."""
    grants: dict[str, list[Any]] = {}
    for statement in _policy_of(synth, getattr(synth.stack.functions, name)):
        for action in _listed(statement["Action"]):
            if action.startswith("sns:"):
                grants.setdefault(action, []).extend(_listed(statement["Resource"]))
    return grants


def test_email_topics_are_managed_by_the_api_only_under_the_stage_prefix(synth: Synth) -> None:
    # One topic per account: the api creates, subscribes, reads and deletes them, on the prefix only;
    # no action that supports no resource type (Unsubscribe, GetSubscriptionAttributes) is needed.
    grants = _sns_grants(synth, "api")
    assert set(grants) == TOPIC_ACTIONS
    assert all(resources == [EMAIL_TOPICS] for resources in grants.values()), grants
    assert synth.stack.notifications.topic_name_prefix == "remote-batch-dev-email-"


@pytest.mark.parametrize("name", ["batch_events", "meter"])
def test_notifying_functions_publish_to_the_email_topics_and_to_phones(synth: Synth, name: str) -> None:
    # Email to the accounts' topics (prefix), SMS to a phone number (no ARN: "*"); nothing else.
    grants = _sns_grants(synth, name)
    assert set(grants) == {"sns:Publish"}
    assert sorted(map(json.dumps, grants["sns:Publish"])) == sorted(map(json.dumps, [EMAIL_TOPICS, "*"]))
    key = synth.logical_id(synth.stack.notifications.key)
    kms = [
        s
        for s in _policy_of(synth, getattr(synth.stack.functions, name))
        if "kms:Decrypt" in _listed(s["Action"])
    ]
    assert [s["Resource"] for s in kms] == [{"Fn::GetAtt": [key, "Arn"]}]


def test_api_updates_exactly_the_service_queues_and_compute_environments(synth: Synth) -> None:
    from infra.constants import COMPUTE_POOLS

    regions = ("us-east-1", "eu-central-1")

    def resources_of(function: Any, action: str) -> list[str]:
        policy = _policy_of(synth, function)
        found = {
            json.dumps(r) for s in policy if action in _listed(s["Action"]) for r in _listed(s["Resource"])
        }
        return sorted(found)

    api = synth.stack.functions.api
    # The dedicated computes' own (issue 16): made at run time under one name prefix; CreateJobQueue,
    # granted with UpdateJobQueue, is authorized on the environments the queue names too.
    own_queues = [_batch_arn(r, "job-queue/remote-batch-dev-cmp-*") for r in regions]
    own_environments = [_batch_arn(r, "compute-environment/remote-batch-dev-cmp-*") for r in regions]
    queues = [_batch_arn(r, f"job-queue/remote-batch-dev-{mc}") for r in regions for mc in MACHINE_CLASSES]
    assert resources_of(api, "batch:UpdateJobQueue") == sorted(
        map(json.dumps, queues + own_queues + own_environments)
    )
    environments = [
        _batch_arn(r, f"compute-environment/remote-batch-dev-{pool}-{kind}")
        for r in regions
        for pool in COMPUTE_POOLS
        for kind in ("Spot", "OnDemand")
    ]
    assert resources_of(api, "batch:UpdateComputeEnvironment") == sorted(
        map(json.dumps, environments + own_environments)
    )
    # The describes have no resource-level permissions (Service Authorization Reference).
    assert resources_of(api, "batch:DescribeJobQueues") == [json.dumps("*")]
    assert resources_of(api, "batch:DescribeComputeEnvironments") == [json.dumps("*")]
    # batch_events switches nothing; the meter only the dedicated computes' own (schedules, idle stops).
    actions = {a for s in _policy_of(synth, synth.stack.functions.batch_events) for a in _listed(s["Action"])}
    assert not actions & {"batch:UpdateJobQueue", "batch:UpdateComputeEnvironment"}
    meter = synth.stack.functions.meter
    assert resources_of(meter, "batch:UpdateJobQueue") == sorted(
        map(json.dumps, own_queues + own_environments)
    )
    assert resources_of(meter, "batch:UpdateComputeEnvironment") == sorted(map(json.dumps, own_environments))


def test_only_the_meter_lists_jobs_and_on_every_resource_as_aws_authorizes_it(synth: Synth) -> None:
    # The backstop looks a dead dispatcher's job up by name (ListJobs); ListJobs has no resource type.
    functions = synth.stack.functions
    (listing,) = [s for s in _policy_of(synth, functions.meter) if "batch:ListJobs" in _listed(s["Action"])]
    # CDK merges it into the statement of the other actions without resource-level permissions.
    assert listing["Resource"] == "*"
    assert {"batch:ListJobs", "batch:DescribeJobs"} <= set(_listed(listing["Action"]))
    for other in (functions.api, functions.batch_events, functions.dispatcher):
        assert not [s for s in _policy_of(synth, other) if "batch:ListJobs" in _listed(s["Action"])]
