"""DynamoDB: the parent side of job dependencies (``functions.domain.dependencies``).

A child's submit appends its id to each parent's ``dependents`` before the child is written, while
the parent is not final and has fewer than ``MAX_DEPENDENTS`` (one conditional UpdateItem per parent,
which also reads it). A parent's settlement is conditional on the list it was computed with
(``base.StoreBase._transition_update``: its size), so a parent that settles knows every child that may
wait for it, without a Query, and a job nobody depends on pays nothing. Each child then counts the
parent's settlement on its own record (``parent_settled``: one conditional UpdateItem, which also
reads the child), so an edge costs two requests over the child's life however many parents it has.
Records from before the list carry ``hasDependents`` and wait items (``waits``) instead.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from functions.adapters.dynamodb.base import LIVE_JOB, StoreBase, store_errors
from functions.adapters.dynamodb.items import deserialize_item, serialize_item, serialize_value
from functions.domain.dependencies import MAX_DEPENDENTS
from functions.domain.errors import ConditionFailed
from functions.domain.jobs import DispatchState, Job
from functions.domain.status import JobStatus


class DependencyRecords(StoreBase):
    """The dependency part of ``DynamoJobStore``."""

    def mark_has_dependents(self, parent_id: str, account_id: str, child_id: str) -> Job | None:
        """Append ``child_id`` to the ``dependents`` of job ``parent_id`` of ``account_id`` unless it is
        final, holds ``MAX_DEPENDENTS`` ids or holds ``child_id`` already, in one conditional
        UpdateItem that answers the job as it stands either way: after the write, or (nothing
        written) as it was. None when there is no such live job of the account (another account's is
        None too)."""
        response = self._update_answering(
            parent_id,
            UpdateExpression="SET #dependents = list_append(if_not_exists(#dependents, :none), :child)",
            ConditionExpression=f"{LIVE_JOB} AND #accountId = :account AND NOT #status IN (:s, :t) "
            "AND (attribute_not_exists(#dependents) OR (size(#dependents) < :most "
            "AND NOT contains(#dependents, :childId)))",
            ExpressionAttributeNames={
                "#dependents": "dependents",
                "#accountId": "accountId",
                "#status": "status",
                "#ttl": "ttl",
            },
            ExpressionAttributeValues={
                ":none": serialize_value([]),
                ":child": serialize_value([child_id]),
                ":childId": serialize_value(child_id),
                ":most": serialize_value(MAX_DEPENDENTS),
                ":account": serialize_value(account_id),
                ":s": serialize_value(JobStatus.SUCCEEDED.value),
                ":t": serialize_value(JobStatus.TERMINATED.value),
                ":liveNow": serialize_value(self._now_epoch()),
            },
        )
        job = self._live_job(response, "mark") if response is not None else None
        return job if job is not None and job.account_id == account_id else None

    def parent_settled(self, child_id: str, parent_id: str) -> Job | None:
        """Count the settlement of parent ``parent_id`` on the waiting job ``child_id``: ``parent_id``
        added to its ``settledParents`` and its stored ``statusReason`` removed (its record then says
        it: ``items._status_reason``), in one UpdateItem conditional on the job still waiting and the
        parent not counted yet, which answers the job either way (after the write, or as it was).

        Returns the job, or None when it is gone or no longer waits (released or ended)."""
        response = self._update_answering(
            child_id,
            UpdateExpression="ADD #settled :parents REMOVE #statusReason",
            ConditionExpression=f"{LIVE_JOB} AND #dispatchState = :waiting AND NOT #status IN (:s, :t) "
            "AND NOT contains(#settled, :parent)",
            ExpressionAttributeNames={
                "#settled": "settledParents",
                "#statusReason": "statusReason",
                "#dispatchState": "dispatchState",
                "#status": "status",
                "#ttl": "ttl",
            },
            ExpressionAttributeValues={
                ":parents": {"SS": [parent_id]},
                ":parent": serialize_value(parent_id),
                ":waiting": serialize_value(DispatchState.WAITING.value),
                ":s": serialize_value(JobStatus.SUCCEEDED.value),
                ":t": serialize_value(JobStatus.TERMINATED.value),
                ":liveNow": serialize_value(self._now_epoch()),
            },
        )
        job = self._live_job(response, "settled parent") if response is not None else None
        return job if job is not None and job.is_waiting else None

    def _update_answering(self, job_id: str, **kwargs: Any) -> dict[str, Any] | None:
        """A conditional UpdateItem of job ``job_id`` that answers its item either way: as written
        (``ALL_NEW``) or, the condition failing, as it stood (``ALL_OLD``); None when there is none."""
        try:
            with store_errors("UpdateItem"):
                response = self._db.update_item(
                    TableName=self._jobs,
                    Key=serialize_item({"jobId": job_id}),
                    ReturnValues="ALL_NEW",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                    **kwargs,
                )
        except ConditionFailed as exc:
            cause = exc.__cause__
            failure: dict[str, Any] = dict(cause.response) if isinstance(cause, ClientError) else {}
            old = failure.get("Item")
            return deserialize_item(old) if old else None
        return deserialize_item(response["Attributes"])
