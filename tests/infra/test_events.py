"""EventBridge: the Batch state-change rule, the meter's schedule, and forwarding from other regions."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Match

from tests.infra.conftest import HOME_REGION, Synth, SynthApp


def _arn_of(synth: Synth, construct) -> dict[str, Any]:
    return {"Fn::GetAtt": [synth.logical_id(construct), "Arn"]}


def _queue_arn_prefix(region: str) -> dict[str, Any]:
    return {
        "Fn::Join": [
            "",
            [f"arn:aws:batch:{region}:", {"Ref": "AWS::AccountId"}, ":job-queue/remote-batch-dev-"],
        ]
    }


# A first attempt's PENDING and RUNNABLE change nothing for a Queued job: left out, unless the event
# is an array's, says why the job waits (statusReason) or follows an attempt (a retry's RUNNABLE).
JOB_CHANGING = [
    {"status": [{"anything-but": ["PENDING", "RUNNABLE"]}]},
    {"arrayProperties": {"index": [{"exists": True}]}},
    {"arrayProperties": {"size": [{"exists": True}]}},
    {"statusReason": [{"exists": True}]},
    {"attempts": {"startedAt": [{"exists": True}]}},
    {"attempts": {"stoppedAt": [{"exists": True}]}},
    {"attempts": {"statusReason": [{"exists": True}]}},
    {"attempts": {"container": {"taskArn": [{"exists": True}]}}},
    {"attempts": {"container": {"exitCode": [{"exists": True}]}}},
    {"attempts": {"container": {"reason": [{"exists": True}]}}},
]


def test_batch_rule_matches_only_this_services_queues_in_every_zone(synth: Synth) -> None:
    rule = synth.template_json["Resources"][synth.logical_id(synth.stack.events.batch_state_rule)]

    # Other regions' events reach the home bus unchanged (their jobQueue is their queue's ARN).
    assert rule["Properties"]["EventPattern"] == {
        "source": ["aws.batch"],
        "detail-type": ["Batch Job State Change"],
        "detail": {
            "jobQueue": [
                {"prefix": _queue_arn_prefix("us-east-1")},
                {"prefix": _queue_arn_prefix("eu-central-1")},
            ],
            "$or": JOB_CHANGING,
        },
    }


def test_every_queue_name_starts_with_the_rule_prefix(app_synth: SynthApp) -> None:
    for compute in app_synth.zones.values():
        for queue in compute.resources("AWS::Batch::JobQueue").values():
            assert queue["Properties"]["JobQueueName"].startswith("remote-batch-dev-")


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


def test_home_zone_needs_no_forwarding(app_synth: SynthApp) -> None:
    (home,) = [c for c in app_synth.zones.values() if c.stack.region == HOME_REGION]

    home.template.resource_count_is("AWS::Events::Rule", 0)
    home.template.resource_count_is("AWS::SQS::Queue", 0)


def test_other_zone_forwards_its_batch_events_to_the_home_bus(app_synth: SynthApp) -> None:
    (other,) = [c for c in app_synth.zones.values() if c.stack.region != HOME_REGION]
    forwarder = other.stack.forwarder
    (rule,) = other.resources("AWS::Events::Rule").values()
    home_bus = {
        "Fn::Join": ["", [f"arn:aws:events:{HOME_REGION}:", {"Ref": "AWS::AccountId"}, ":event-bus/default"]]
    }

    assert rule["Properties"]["EventPattern"] == {
        "source": ["aws.batch"],
        "detail-type": ["Batch Job State Change"],
        "detail": {"jobQueue": [{"prefix": _queue_arn_prefix(other.stack.region)}], "$or": JOB_CHANGING},
    }
    (target,) = rule["Properties"]["Targets"]
    assert target["Arn"] == home_bus
    assert target["RoleArn"] == _arn_of(other, forwarder.role)
    assert target["DeadLetterConfig"] == {"Arn": _arn_of(other, forwarder.dead_letter_queue)}
    other.template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "Roles": [{"Ref": other.logical_id(forwarder.role)}],
            "PolicyDocument": {
                "Statement": [{"Action": "events:PutEvents", "Effect": "Allow", "Resource": home_bus}]
            },
        },
    )
