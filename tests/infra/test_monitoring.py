"""Alarms: dead-letter queue depth and each function's errors, to an encrypted operator topic."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Match

from tests.infra.conftest import HOME_REGION, Synth, SynthApp


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


def _alarm_named(synth: Synth, name: str) -> dict[str, Any]:
    alarm = synth.stack.monitoring.alarms[name]
    alarms = synth.resources("AWS::CloudWatch::Alarm")
    properties: dict[str, Any] = alarms[synth.logical_id(alarm)]["Properties"]
    return properties


def _stage_dimensions(synth: Synth) -> list[dict[str, Any]]:
    stage = synth.stack.api.rest_api.deployment_stage
    return [
        {"Name": "ApiName", "Value": "remote-batch"},
        {"Name": "Stage", "Value": {"Ref": synth.logical_id(stage)}},
    ]


def test_api_5xx_rate_alarms_above_five_percent(synth: Synth) -> None:
    alarm = _alarm_named(synth, "ApiServerErrorRate")
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == (
        "AWS/ApiGateway",
        "5XXError",
        "Average",
    )
    assert alarm["Dimensions"] == _stage_dimensions(synth)
    assert alarm["Threshold"] == 0.05
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert (alarm["Period"], alarm["EvaluationPeriods"]) == (300, 1)
    assert alarm["AlarmActions"] == [_topic_ref(synth)]


def test_api_p90_latency_alarms_above_five_seconds(synth: Synth) -> None:
    alarm = _alarm_named(synth, "ApiLatencyP90")
    assert (alarm["Namespace"], alarm["MetricName"], alarm["ExtendedStatistic"]) == (
        "AWS/ApiGateway",
        "Latency",
        "p90",
    )
    assert alarm["Dimensions"] == _stage_dimensions(synth)
    assert alarm["Threshold"] == 5000
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["EvaluationPeriods"] == 2
    assert alarm["AlarmActions"] == [_topic_ref(synth)]


@pytest.mark.parametrize(
    ("name", "short", "threshold"),
    [("api", "Api", 5000), ("batch_events", "BatchEvents", 30_000), ("meter", "Meter", 27_500)],
)
def test_each_function_alarms_on_its_p90_duration(
    synth: Synth, name: str, short: str, threshold: int
) -> None:
    function = synth.logical_id(getattr(synth.stack.functions, name))
    alarm = _alarm_named(synth, f"{short}DurationP90")
    assert (alarm["Namespace"], alarm["MetricName"], alarm["ExtendedStatistic"]) == (
        "AWS/Lambda",
        "Duration",
        "p90",
    )
    assert alarm["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": function}}]
    assert alarm["Threshold"] == threshold
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["AlarmActions"] == [_topic_ref(synth)]


def test_a_meter_silent_for_three_minutes_alarms(synth: Synth) -> None:
    meter = synth.logical_id(synth.stack.functions.meter)
    alarm = _alarm_named(synth, "MeterNotRunning")
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == (
        "AWS/Lambda",
        "Invocations",
        "Sum",
    )
    assert alarm["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": meter}}]
    assert (alarm["Period"], alarm["EvaluationPeriods"]) == (60, 3)
    assert alarm["Threshold"] == 1
    assert alarm["ComparisonOperator"] == "LessThanThreshold"
    assert alarm["TreatMissingData"] == "breaching"  # no invocation publishes no datapoint
    assert alarm["AlarmActions"] == [_topic_ref(synth)]


def test_any_stuck_job_alarms(synth: Synth) -> None:
    alarm = _alarm_named(synth, "StuckJobs")
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == (
        "RemoteBatch",
        "StuckJobs",
        "Maximum",
    )
    # powertools Metrics(service="remote-batch") publishes with this one dimension.
    assert alarm["Dimensions"] == [{"Name": "service", "Value": "remote-batch"}]
    assert alarm["Threshold"] == 0
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["AlarmActions"] == [_topic_ref(synth)]


def test_jobs_the_meter_skipped_alarm(synth: Synth) -> None:
    alarm = _alarm_named(synth, "SkippedJobs")
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == (
        "RemoteBatch",
        "SkippedJobs",
        "Maximum",
    )
    assert alarm["Dimensions"] == [{"Name": "service", "Value": "remote-batch"}]
    assert alarm["Threshold"] == 0
    assert alarm["ComparisonOperator"] == "GreaterThanThreshold"
    assert alarm["AlarmActions"] == [_topic_ref(synth)]


def test_every_alarm_has_a_runbook_line() -> None:
    from pathlib import Path

    guide = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    operations = guide.split("## Alarms", 1)[1].split("\n## ", 1)[0]
    for name in (
        "DeadLetterQueueDepth",
        "FunctionErrors",
        "DurationP90",
        "ApiServerErrorRate",
        "ApiLatencyP90",
        "MeterNotRunning",
        "StuckJobs",
        "SkippedJobs",
    ):
        assert f"`{name}`" in operations or f"`<Name>{name}`" in operations, name
