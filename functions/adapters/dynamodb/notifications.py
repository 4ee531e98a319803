"""Notification bookkeeping on the job item: claims (``sentNotifications``, one writer per key),
retries (``retryNotifications``, the sparse ``notifyRetry`` index) and the bounded
``notificationLog``."""

from __future__ import annotations

from collections.abc import Iterator

from functions.adapters.dynamodb.base import StoreBase, logger
from functions.adapters.dynamodb.items import RETRY_PARTITION, record_to_item, serialize_value
from functions.domain.errors import RecordMissing
from functions.domain.jobs import NotificationRecord

NOTIFICATION_LOG_LIMIT = 200


class NotificationClaims(StoreBase):
    """The notification half of ``JobRepository``."""

    def claim_notification(self, job_id: str, key: str, while_open: bool = False) -> bool:
        """Add ``key`` to ``sentNotifications``; True only for the writer that added it. With
        ``while_open`` (progress notifications), only while the job is not final.
        ``RecordMissing`` when the job is gone."""
        condition = "NOT contains(sentNotifications, :key)"
        if while_open:
            condition += " AND attribute_exists(openPartition)"
        added = self._update_job(
            job_id,
            "ADD sentNotifications :k DELETE retryNotifications :k",
            condition=condition,
            values={":k": {key}, ":key": key},
        )
        return added is not None

    def release_notification(self, job_id: str, key: str, failure: str) -> None:
        """After a transient publish failure: remove ``key`` from ``sentNotifications``, keep it owed
        (``retryNotifications``), record the attempt (``publishFailures``, see
        ``notification_schedule.failure_record``) and list the job for the meter's retries (sparse
        ``notifyRetry``). ``RecordMissing`` when the job is gone (nothing is created)."""
        self._update_job(
            job_id,
            "DELETE sentNotifications :k ADD retryNotifications :k, publishFailures :f "
            "SET retryPartition = :r",
            values={":k": {key}, ":f": {failure}, ":r": RETRY_PARTITION},
        )

    def list_notification_retries(self) -> Iterator[str]:
        """Ids of jobs with a notification to send again (the sparse, keys-only ``notifyRetry``
        index; callers read each job, which leaves out the expired ones)."""
        for item in self._query(
            TableName=self._jobs,
            IndexName="notifyRetry",
            KeyConditionExpression="retryPartition = :r",
            ExpressionAttributeValues={":r": serialize_value(RETRY_PARTITION)},
        ):
            yield str(item["jobId"])

    def request_notification_retry(self, job_id: str) -> None:
        """List the job for the meter's next tick (more is owed than one delivery sends).
        ``RecordMissing`` when the job is gone."""
        self._update_job(job_id, "SET retryPartition = :r", values={":r": RETRY_PARTITION})

    def clear_notification_retry(self, job_id: str) -> None:
        """Take the job out of ``notifyRetry`` once nothing is left to send again (no-op while some
        is). ``RecordMissing`` when the job is gone."""
        self._update_job(
            job_id, "REMOVE retryPartition", condition="attribute_not_exists(retryNotifications)"
        )

    def append_notification_record(self, job_id: str, record: NotificationRecord) -> None:
        """Append to the job's ``notificationLog``, keeping the newest ``NOTIFICATION_LOG_LIMIT``
        lines (a DynamoDB item is at most 400 KB; a year of Hourly would not fit).
        ``RecordMissing`` when the job is gone."""
        entry = [record_to_item(record)]
        for _ in range(5):
            appended = self._update_job(
                job_id,
                "SET notificationLog = list_append(if_not_exists(notificationLog, :empty), :e)",
                condition="attribute_not_exists(notificationLog) OR size(notificationLog) < :limit",
                values={":e": entry, ":empty": [], ":limit": NOTIFICATION_LOG_LIMIT},
            )
            if appended is not None:
                return
            job = self.get_job(job_id)
            if job is None:
                raise RecordMissing(f"Job {job_id} no longer exists.")
            kept = [record_to_item(r) for r in job.notification_log[-(NOTIFICATION_LOG_LIMIT // 2) :]]
            self._update_job(
                job_id,
                "SET notificationLog = :kept",
                condition="size(notificationLog) = :n",
                values={":kept": kept, ":n": len(job.notification_log)},
            )
        logger.warning("notification log line dropped", job_id=job_id)
