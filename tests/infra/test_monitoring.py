"""Alarms: dead-letter queue depth and each function's errors, to an encrypted operator topic."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Match

from tests.infra.conftest import HOME_REGION, Synth, SynthApp

pytestmark = pytest.mark.infra


def _alarms(synth: Synth) -> dict[str, dict[str, Any]]:
    return {name: r["Properties"] for name, r in synth.resources("AWS::CloudWatch::Alarm").items()}


def _topic_ref(synth: Synth) -> dict[str, str]:
    return {"Ref": synth.logical_id(synth.stack.monitoring.operator_topic)}


def _alarm_on(alarms: dict[str, dict[str, Any]], metric: str, dimension: dict[str, Any]) -> dict[str, Any]:
    (alarm,) = [
        a
        for a in alarms.values()
        if a["MetricName"] == metric and dimension in [d["Value"] for d in a["Dimensions"]]
    ]
    return alarm


def test_dead_letter_queue_alarms_at_one_message(synth: Synth) -> None:
    queue = synth.logical_id(synth.stack.events.dead_letter_queue)

    alarm = _alarm_on(
        _alarms(synth), "ApproximateNumberOfMessagesVisible", {"Fn::GetAtt": [queue, "QueueName"]}
    )
    assert alarm["Threshold"] == 1
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["AlarmActions"] == [_topic_ref(synth)]


@pytest.mark.parametrize("name", ["api", "batch_events", "meter"])
def test_each_function_alarms_on_errors(synth: Synth, name: str) -> None:
    function = synth.logical_id(getattr(synth.stack.functions, name))

    alarm = _alarm_on(_alarms(synth), "Errors", {"Ref": function})
    assert alarm["Namespace"] == "AWS/Lambda"
    assert alarm["Statistic"] == "Sum"
    assert alarm["Threshold"] == 1
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["AlarmActions"] == [_topic_ref(synth)]


def test_operator_topic_is_encrypted_with_a_key_cloudwatch_may_use(synth: Synth) -> None:
    key = synth.logical_id(synth.stack.monitoring.key)

    synth.template.has_resource_properties(
        "AWS::SNS::Topic", {"KmsMasterKeyId": {"Fn::GetAtt": [key, "Arn"]}}
    )
    synth.template.has_resource_properties(
        "AWS::KMS::Key",
        {
            "EnableKeyRotation": True,
            "KeyPolicy": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Action": ["kms:Decrypt", "kms:GenerateDataKey*"],
                                "Principal": {"Service": "cloudwatch.amazonaws.com"},
                            }
                        )
                    ]
                )
            },
        },
    )


def test_forwarding_dead_letter_queue_alarms_in_its_own_region(app_synth: SynthApp) -> None:
    (other,) = [c for c in app_synth.zones.values() if c.stack.region != HOME_REGION]
    queue = other.logical_id(other.stack.forwarder.dead_letter_queue)

    alarm = _alarm_on(
        _alarms(other), "ApproximateNumberOfMessagesVisible", {"Fn::GetAtt": [queue, "QueueName"]}
    )
    assert alarm["Threshold"] == 1
    assert alarm["AlarmActions"] == [_topic_ref(other)]
