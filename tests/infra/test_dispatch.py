"""The dispatch queue, its DLQ, the dispatcher's event source mapping, their alarms and grants."""

from __future__ import annotations

import json
from typing import Any

from infra import constants
from tests.infra.conftest import Synth


def _queue(synth: Synth, construct: Any) -> dict[str, Any]:
    props: dict[str, Any] = synth.template_json["Resources"][synth.logical_id(construct)]["Properties"]
    return props


def test_the_queue_and_its_dlq_are_encrypted_and_the_dlq_takes_repeated_failures(synth: Synth) -> None:
    dispatch = synth.stack.dispatch
    queue = _queue(synth, dispatch.queue)
    dlq = _queue(synth, dispatch.dead_letter_queue)
    assert queue["SqsManagedSseEnabled"] is True and dlq["SqsManagedSseEnabled"] is True
    assert queue["VisibilityTimeout"] == constants.DISPATCH_VISIBILITY_TIMEOUT_SECONDS
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [synth.logical_id(dispatch.dead_letter_queue), "Arn"]},
        "maxReceiveCount": constants.DISPATCH_MAX_RECEIVE_COUNT,
    }


def test_both_queues_refuse_requests_without_tls(synth: Synth) -> None:
    dispatch = synth.stack.dispatch
    ids = {synth.logical_id(dispatch.queue), synth.logical_id(dispatch.dead_letter_queue)}
    denied = set()
    for policy in synth.resources("AWS::SQS::QueuePolicy").values():
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Deny" and statement["Condition"] == {
                "Bool": {"aws:SecureTransport": "false"}
            }:
                denied |= {q["Ref"] for q in policy["Properties"]["Queues"]}
    assert ids <= denied


def test_the_dispatcher_consumes_with_bounded_concurrency_and_partial_batch_answers(synth: Synth) -> None:
    (mapping,) = synth.resources("AWS::Lambda::EventSourceMapping").values()
    props = mapping["Properties"]
    assert props["FunctionName"] == {"Ref": synth.logical_id(synth.stack.functions.dispatcher)}
    assert props["EventSourceArn"] == {"Fn::GetAtt": [synth.logical_id(synth.stack.dispatch.queue), "Arn"]}
    assert props["ScalingConfig"] == {"MaximumConcurrency": constants.DISPATCH_MAX_CONCURRENCY}
    assert props["BatchSize"] == constants.DISPATCH_BATCH_SIZE
    assert props["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    # Together the instances stay below AWS Batch's ~50 SubmitJob per second.
    assert constants.DISPATCH_TPS < 50


def test_alarms_watch_the_dlq_depth_and_the_backlog_age(synth: Synth) -> None:
    alarms = synth.stack.monitoring.alarms
    assert {"DispatchDeadLetterQueueDepth", "DispatchBacklogAge", "DispatcherFunctionErrors"} <= set(alarms)
    age = synth.template_json["Resources"][synth.logical_id(alarms["DispatchBacklogAge"])]["Properties"]
    assert age["MetricName"] == "ApproximateAgeOfOldestMessage"
    assert age["Threshold"] == constants.DISPATCH_BACKLOG_ALARM_SECONDS


def _statements(synth: Synth, function: Any) -> list[dict[str, Any]]:
    role = synth.template_json["Resources"][synth.logical_id(function)]["Properties"]["Role"]["Fn::GetAtt"][0]
    found = []
    for resource in synth.template_json["Resources"].values():
        if resource["Type"] not in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"):
            continue
        props = resource["Properties"]
        if {"Ref": role} in props.get("Roles", []):
            found += props["PolicyDocument"]["Statement"]
    return found


def _actions(statements: list[dict[str, Any]]) -> set[str]:
    actions: set[str] = set()
    for statement in statements:
        given = statement["Action"]
        actions |= {given} if isinstance(given, str) else set(given)
    return actions


def test_only_the_dispatcher_submits_jobs_and_the_others_only_send_to_its_queue(synth: Synth) -> None:
    functions = synth.stack.functions
    dispatcher = _actions(_statements(synth, functions.dispatcher))
    assert {"batch:SubmitJob", "sqs:ReceiveMessage", "sqs:DeleteMessage"} <= dispatcher
    for name in ("api", "batch_events", "meter"):
        statements = _statements(synth, getattr(functions, name))
        actions = _actions(statements)
        # The api's one SubmitJob is an environment's build, on the build queues only
        # (test_iam.py: test_the_api_submits_builds_only_to_the_build_queues_on_the_build_definitions).
        submits = [s for s in statements if "batch:SubmitJob" in json.dumps(s["Action"])]
        assert all("job-queue/remote-batch-dev-build" in json.dumps(s["Resource"]) for s in submits), name
        assert not submits or name == "api", name
        assert "sqs:SendMessage" in actions, name
        assert "sqs:ReceiveMessage" not in actions, name
    queue_arn = {"Fn::GetAtt": [synth.logical_id(synth.stack.dispatch.queue), "Arn"]}
    for statement in _statements(synth, functions.api):
        if "sqs:SendMessage" in json.dumps(statement["Action"]):
            assert statement["Resource"] == queue_arn
