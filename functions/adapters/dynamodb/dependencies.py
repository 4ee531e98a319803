"""DynamoDB: the parent side of job dependencies (``functions.domain.dependencies``).

A child's submit marks each parent ``hasDependents`` before the child is written, while the parent
is not final (one conditional UpdateItem per parent, which also reads it). A parent's settlement is
conditional on the flag it was computed with (``base.StoreBase._transition_update``), so a parent
that settles knows whether any child may wait for it, and only one that has some Queries their wait
items (``functions.logic.waits.settle_dependents``): a job nobody depends on pays nothing.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from functions.adapters.dynamodb.base import LIVE_JOB, StoreBase, store_errors
from functions.adapters.dynamodb.items import deserialize_item, serialize_item, serialize_value
from functions.domain.errors import ConditionFailed
from functions.domain.jobs import Job
from functions.domain.status import JobStatus


class DependencyRecords(StoreBase):
    """The dependency part of ``DynamoJobStore``."""

    def mark_has_dependents(self, parent_id: str, account_id: str) -> Job | None:
        """Set ``hasDependents`` on job ``parent_id`` of ``account_id`` unless it is final, in one
        conditional UpdateItem that answers the job as it stands either way: after the write, or
        (final already: nothing written) as it was. None when there is no such live job of the account
        (another account's is None too)."""
        key = serialize_item({"jobId": parent_id})
        try:
            with store_errors("UpdateItem"):
                response = self._db.update_item(
                    TableName=self._jobs,
                    Key=key,
                    UpdateExpression="SET #hasDependents = :true",
                    ConditionExpression=f"{LIVE_JOB} AND #accountId = :account AND NOT #status IN (:s, :t)",
                    ExpressionAttributeNames={
                        "#hasDependents": "hasDependents",
                        "#accountId": "accountId",
                        "#status": "status",
                        "#ttl": "ttl",
                    },
                    ExpressionAttributeValues={
                        ":true": serialize_value(True),
                        ":account": serialize_value(account_id),
                        ":s": serialize_value(JobStatus.SUCCEEDED.value),
                        ":t": serialize_value(JobStatus.TERMINATED.value),
                        ":liveNow": serialize_value(self._now_epoch()),
                    },
                    ReturnValues="ALL_NEW",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
        except ConditionFailed as exc:
            cause = exc.__cause__
            response_of_failure: dict[str, Any] = (
                dict(cause.response) if isinstance(cause, ClientError) else {}
            )
            old = response_of_failure.get("Item")
            if not old:
                return None
            job = self._live_job(deserialize_item(old), "mark")
            return job if job is not None and job.account_id == account_id else None
        return self._live_job(deserialize_item(response["Attributes"]), "mark")
