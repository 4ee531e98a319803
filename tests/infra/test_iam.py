"""Least privilege: no wildcard actions, no data actions on every resource, scoped Batch access."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.infra.conftest import Synth

pytestmark = pytest.mark.infra

# Actions that read or write data: on Resource "*" they would reach every bucket or table.
DATA_ACTION_PREFIXES = ("s3:", "dynamodb:", "sqs:SendMessage", "sqs:ReceiveMessage", "kms:Decrypt")


def _statements(synth: Synth) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, resource in synth.template_json["Resources"].items():
        documents = []
        if resource["Type"] == "AWS::IAM::Policy":
            documents.append(resource["Properties"]["PolicyDocument"])
        if resource["Type"] == "AWS::IAM::Role":
            documents += [p["PolicyDocument"] for p in resource["Properties"].get("Policies", [])]
        for document in documents:
            for statement in document["Statement"]:
                yield name, statement


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_no_statement_allows_every_action(synth: Synth) -> None:
    for name, statement in _statements(synth):
        actions = _listed(statement.get("Action", []))
        assert "*" not in actions, name
        assert not any(a.endswith(":*") for a in actions if isinstance(a, str)), name


def test_no_data_action_on_every_resource(synth: Synth) -> None:
    for name, statement in _statements(synth):
        if statement["Effect"] != "Allow" or "*" not in _listed(statement.get("Resource", [])):
            continue
        actions = _listed(statement["Action"])
        assert not [a for a in actions if a.startswith(DATA_ACTION_PREFIXES)], name


def _policy_of(synth: Synth, function: Any) -> list[dict[str, Any]]:
    role = synth.logical_id(function.role)
    return [
        statement
        for name, statement in _statements(synth)
        if synth.template_json["Resources"][name]["Properties"].get("Roles") == [{"Ref": role}]
    ]


def test_only_api_submits_and_only_to_the_service_queue_and_definition(synth: Synth) -> None:
    functions = synth.stack.functions
    queue = synth.logical_id(synth.stack.compute.job_queue)
    definition = synth.logical_id(synth.stack.compute.job_definition)

    (submit,) = [s for s in _policy_of(synth, functions.api) if "batch:SubmitJob" in _listed(s["Action"])]
    assert submit["Resource"] == [{"Fn::GetAtt": [queue, "JobQueueArn"]}, {"Ref": definition}]
    for other in (functions.batch_events, functions.meter):
        assert not [s for s in _policy_of(synth, other) if "batch:SubmitJob" in _listed(s["Action"])]


@pytest.mark.parametrize(
    ("name", "tables"),
    [
        ("api", {"Jobs", "Accounts", "Ledger", "Idempotency"}),
        ("batch_events", {"Jobs", "Accounts", "Ledger"}),
        ("meter", {"Jobs", "Accounts", "Ledger"}),
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
