"""CloudWatch Logs: a zone's job log group (``LogReader``)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from botocore.exceptions import ClientError

from functions.domain.errors import DependencyFailed
from functions.ports import LogEvent


class CloudWatchLogReader:
    """``LogReader`` on one log group (the awslogs driver's, where AWS Batch writes job output)."""

    def __init__(self, client: Any, log_group: str) -> None:
        self._logs = client
        self.log_group = log_group

    def events(self, log_stream_name: str, since: datetime | None) -> Iterator[LogEvent]:
        """The stream's events from ``since`` on, oldest first; GetLogEvents is called page by page
        (up to 1 MB or 10,000 events each) only as the caller consumes them. Nothing when the stream
        does not exist.

        Raises
        ------
        DependencyFailed
            CloudWatch Logs failed (while iterating).
        """
        kwargs: dict[str, Any] = {
            "logGroupName": self.log_group,
            "logStreamName": log_stream_name,
            "startFromHead": True,
        }
        if since is not None:
            kwargs["startTime"] = int(since.timestamp() * 1000)
        token = None
        while True:
            if token:
                kwargs["nextToken"] = token
            try:
                page = self._logs.get_log_events(**kwargs)
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                    return
                raise DependencyFailed("The job's log could not be read; try again shortly.") from exc
            for event in page.get("events", []):
                yield LogEvent(datetime.fromtimestamp(event["timestamp"] / 1000, tz=UTC), event["message"])
            # The forward token repeats at the stream's end (GetLogEvents' documented end marker).
            if not page.get("events") or page.get("nextForwardToken") in (None, token):
                return
            token = page["nextForwardToken"]

    def delete(self, log_stream_name: str) -> None:
        """DeleteLogStream; a stream that does not exist is already deleted."""
        try:
            self._logs.delete_log_stream(logGroupName=self.log_group, logStreamName=log_stream_name)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise DependencyFailed("The job's log could not be deleted; try again shortly.") from exc
