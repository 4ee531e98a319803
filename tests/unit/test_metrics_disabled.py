"""With metrics disabled (the local stack, the tests), nothing is kept or printed: powertools alone
would print an EMF document once a metric held 100 values."""

from __future__ import annotations

import pytest

from functions.observability import MetricsEvents, metrics


def test_disabled_metrics_keep_nothing_and_print_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    metrics.clear_metrics()
    for _ in range(250):
        MetricsEvents().count("JobsSubmitted")
    assert metrics.metric_set == {}
    assert "CloudWatchMetrics" not in capsys.readouterr().out


def test_enabled_metrics_are_kept_for_the_flush(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    monkeypatch.setenv("POWERTOOLS_DEV", "false")
    metrics.clear_metrics()
    try:
        MetricsEvents().count("JobsSubmitted", 2)
        assert metrics.metric_set["JobsSubmitted"]["Value"] == [2.0]
    finally:
        metrics.clear_metrics()
