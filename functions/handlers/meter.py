"""meter Lambda: the 1-minute EventBridge schedule → ``creditsSpent`` of running jobs."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from functions.bootstrap import get_services
from functions.logic.health import count_stuck_jobs
from functions.logic.metering import meter_tick
from functions.observability import EVENT_BRIDGE_EVENT_ID, lambda_entry, metrics


@lambda_entry(EVENT_BRIDGE_EVENT_ID)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """One meter tick (the event's content is not used: the tick reads its own clock).

    Returns counts: jobs metered, ``creditsSpent`` raised, terminations sent, stale jobs reconciled,
    jobs skipped (unreadable or failing; also the ``SkippedJobs`` metric), jobs stuck past their
    Batch timeout (also the ``StuckJobs`` metric).
    """
    services = get_services()
    report = meter_tick(services, services.clock())
    stuck = count_stuck_jobs(services, services.clock(), report.running)
    metrics.add_metric(name="MeteredJobs", unit=MetricUnit.Count, value=report.metered)
    # Jobs whose item could not be read or written this tick (logged with their ids; alarm on it).
    metrics.add_metric(name="SkippedJobs", unit=MetricUnit.Count, value=report.skipped)
    return {
        "metered": report.metered,
        "updated": report.updated,
        "terminated": report.terminated,
        "reconciled": report.reconciled,
        "skipped": report.skipped,
        "stuck": stuck,
    }
