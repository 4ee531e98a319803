"""EventBridge: the Batch state-change rule and the meter's schedule."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match

from tests.infra.conftest import Synth

pytestmark = pytest.mark.infra


def _arn_of(synth: Synth, construct) -> dict:
    return {"Fn::GetAtt": [synth.logical_id(construct), "Arn"]}


def test_batch_rule_matches_only_this_services_queue_state_changes(synth: Synth) -> None:
    rule = synth.template_json["Resources"][synth.logical_id(synth.stack.events.batch_state_rule)]
    queue = synth.logical_id(synth.stack.compute.job_queue)

    assert rule["Properties"]["EventPattern"] == {
        "source": ["aws.batch"],
        "detail-type": ["Batch Job State Change"],
        "detail": {"jobQueue": [{"Fn::GetAtt": [queue, "JobQueueArn"]}]},
    }


def test_batch_rule_targets_batch_events_with_retries_and_dlq(synth: Synth) -> None:
    rule = synth.template_json["Resources"][synth.logical_id(synth.stack.events.batch_state_rule)]

    (target,) = rule["Properties"]["Targets"]
    assert target["Arn"] == _arn_of(synth, synth.stack.functions.batch_events)
    assert target["DeadLetterConfig"] == {"Arn": _arn_of(synth, synth.stack.events.dead_letter_queue)}
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 8, "MaximumEventAgeInSeconds": 7200}


def test_meter_runs_every_minute(synth: Synth) -> None:
    rule = synth.template_json["Resources"][synth.logical_id(synth.stack.events.meter_schedule)]

    assert rule["Properties"]["ScheduleExpression"] == "rate(1 minute)"
    (target,) = rule["Properties"]["Targets"]
    assert target["Arn"] == _arn_of(synth, synth.stack.functions.meter)
    assert target["DeadLetterConfig"] == {"Arn": _arn_of(synth, synth.stack.events.dead_letter_queue)}
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 2, "MaximumEventAgeInSeconds": 60}


def test_dead_letter_queue_is_encrypted_and_tls_only(synth: Synth) -> None:
    queue = synth.logical_id(synth.stack.events.dead_letter_queue)

    synth.template.has_resource_properties("AWS::SQS::Queue", {"SqsManagedSseEnabled": True})
    synth.template.has_resource_properties(
        "AWS::SQS::QueuePolicy",
        {
            "Queues": [{"Ref": queue}],
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {"Effect": "Deny", "Condition": {"Bool": {"aws:SecureTransport": "false"}}}
                        )
                    ]
                )
            },
        },
    )


def test_eventbridge_may_invoke_the_targets(synth: Synth) -> None:
    for function in (synth.stack.functions.batch_events, synth.stack.functions.meter):
        synth.template.has_resource_properties(
            "AWS::Lambda::Permission",
            {
                "Action": "lambda:InvokeFunction",
                "Principal": "events.amazonaws.com",
                "FunctionName": _arn_of(synth, function),
            },
        )


@pytest.mark.parametrize(("name", "retries"), [("batch_events", 2), ("meter", 0)])
def test_failed_invocations_land_in_the_dead_letter_queue(synth: Synth, name: str, retries: int) -> None:
    function = synth.logical_id(getattr(synth.stack.functions, name))

    synth.template.has_resource_properties(
        "AWS::Lambda::EventInvokeConfig",
        {
            "FunctionName": {"Ref": function},
            "MaximumRetryAttempts": retries,
            "DestinationConfig": {
                "OnFailure": {"Destination": _arn_of(synth, synth.stack.events.dead_letter_queue)}
            },
        },
    )
