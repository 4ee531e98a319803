"""CloudWatch Logs: a zone's job log group (``LogReader``)."""

from __future__ import annotations

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

    def read(self, log_stream_name: str, since: datetime | None, limit: int) -> list[LogEvent]:
        """Up to ``limit`` events from ``since`` on, oldest first; [] when the stream does not exist."""
        kwargs: dict[str, Any] = {
            "logGroupName": self.log_group,
            "logStreamName": log_stream_name,
            "startFromHead": True,
        }
        if since is not None:
            kwargs["startTime"] = int(since.timestamp() * 1000)
        events: list[LogEvent] = []
        token = None
        try:
            while len(events) < limit:
                if token:
                    kwargs["nextToken"] = token
                page = self._logs.get_log_events(**kwargs)
                for event in page.get("events", []):
                    stamp = datetime.fromtimestamp(event["timestamp"] / 1000, tz=UTC)
                    events.append(LogEvent(stamp, event["message"]))
                if not page.get("events") or page.get("nextForwardToken") in (None, token):
                    break
                token = page["nextForwardToken"]
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return []
            raise DependencyFailed("The job's log could not be read; try again shortly.") from exc
        return events[:limit]

    def delete(self, log_stream_name: str) -> None:
        """DeleteLogStream; a stream that does not exist is already deleted."""
        try:
            self._logs.delete_log_stream(logGroupName=self.log_group, logStreamName=log_stream_name)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
                raise DependencyFailed("The job's log could not be deleted; try again shortly.") from exc
