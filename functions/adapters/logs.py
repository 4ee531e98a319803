"""CloudWatch Logs: a zone's job log group (``LogReader``)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from functions.adapters.errors import Absent, translate_errors
from functions.ports import LogEvent

if TYPE_CHECKING:  # the stubs are a dev dependency; the Lambda runtime has no need of them
    from mypy_boto3_logs import CloudWatchLogsClient
    from mypy_boto3_logs.type_defs import GetLogEventsRequestTypeDef

READ_FAILED = "The job's log could not be read; try again shortly."
DELETE_FAILED = "The job's log could not be deleted; try again shortly."


class CloudWatchLogReader:
    """``LogReader`` on one log group (the awslogs driver's, where AWS Batch writes job output)."""

    def __init__(self, client: CloudWatchLogsClient, log_group: str) -> None:
        self._logs = client
        self.log_group = log_group

    def events(self, log_stream_name: str, since: datetime | None) -> Iterator[LogEvent]:
        """The stream's events from ``since`` on, oldest first; GetLogEvents is called page by page
        (up to 1 MB or 10,000 events each, ``startFromHead``) only as the caller consumes them,
        each page asking from the previous one's ``nextForwardToken``. Nothing when the stream
        does not exist (``ResourceNotFoundException``).

        Raises
        ------
        DependencyFailed
            CloudWatch Logs failed, throttled or could not be reached (while iterating).
        """
        request: GetLogEventsRequestTypeDef = {
            "logGroupName": self.log_group,
            "logStreamName": log_stream_name,
            "startFromHead": True,
        }
        if since is not None:
            request["startTime"] = int(since.timestamp() * 1000)
        token = None
        while True:
            if token:
                request["nextToken"] = token
            try:
                with translate_errors("logs", "GetLogEvents", failed=READ_FAILED, absent_ok=True):
                    page = self._logs.get_log_events(**request)
            except Absent:
                return
            for event in page.get("events", []):
                yield LogEvent(datetime.fromtimestamp(event["timestamp"] / 1000, tz=UTC), event["message"])
            # The forward token repeats at the stream's end (GetLogEvents' documented end marker).
            if not page.get("events") or page.get("nextForwardToken") in (None, token):
                return
            token = page["nextForwardToken"]

    def delete(self, log_stream_name: str) -> None:
        """DeleteLogStream; a stream that does not exist is already deleted. ``DependencyFailed``
        when CloudWatch Logs fails."""
        try:
            with translate_errors("logs", "DeleteLogStream", failed=DELETE_FAILED, absent_ok=True):
                self._logs.delete_log_stream(logGroupName=self.log_group, logStreamName=log_stream_name)
        except Absent:
            return
