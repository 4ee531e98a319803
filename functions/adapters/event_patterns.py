"""Which ``Batch Job State Change`` events can change a job: one EventBridge pattern for the deployed
rule (``infra/constructs/events.py``) and the local stack's bus (``remote_batch_local/bus.py``).

A PENDING or RUNNABLE event of a Single job's first attempt finds the job ``Queued`` (its status since
submit; docs/architecture.md "Status machine": SUBMITTED, PENDING, RUNNABLE → Queued) and changes nothing a
user
or the meter reads, so it need not cost a Lambda call and two DynamoDB requests. Kept are:

- every other status (STARTING, RUNNING, SUCCEEDED, FAILED; SUBMITTED is not emitted);
- events of an array job or of its children (``arrayProperties``): a child is written on its first
  event and its parent's counts move with it;
- events with a ``statusReason`` (the reason a job waits, shown while Queued);
- a retry's RUNNABLE (an earlier attempt in ``attempts``): it moves a Running job back to Queued and
  stops its metering.

No boto3 here: plain data, imported by the CDK app and by the local stack alike.

EventBridge matches a pattern's field inside an array of objects when any element has it
(EventBridge user guide, "Event patterns": "Matching on arrays"; the AWS event-ruler library's
flattening), so ``attempts.startedAt`` exists when any attempt started. An empty ``attempts`` has no
such leaf.
"""

from __future__ import annotations

from typing import Any

BATCH_SOURCE = "aws.batch"
BATCH_DETAIL_TYPE = "Batch Job State Change"
# Statuses that change nothing for a job already Queued in the same attempt.
QUEUED_ONLY_STATUSES = ("PENDING", "RUNNABLE")
# Fields of an AWS Batch ``AttemptDetail`` (API reference): one of them exists in every attempt
# the job made, so a retry's RUNNABLE (whose ``attempts`` lists the earlier ones) matches.
_ATTEMPT_FIELDS: tuple[dict[str, Any], ...] = (
    {"startedAt": [{"exists": True}]},
    {"stoppedAt": [{"exists": True}]},
    {"statusReason": [{"exists": True}]},
    {"container": {"taskArn": [{"exists": True}]}},
    {"container": {"exitCode": [{"exists": True}]}},
    {"container": {"reason": [{"exists": True}]}},
)


def job_changing_detail_pattern() -> dict[str, Any]:
    """The ``detail`` part of the pattern: the events that can change a job (see the module)."""
    return {
        "$or": [
            {"status": [{"anything-but": list(QUEUED_ONLY_STATUSES)}]},
            {"arrayProperties": {"index": [{"exists": True}]}},
            {"arrayProperties": {"size": [{"exists": True}]}},
            {"statusReason": [{"exists": True}]},
            *({"attempts": field} for field in _ATTEMPT_FIELDS),
        ]
    }


def as_event_ruler_sees(node: Any) -> Any:
    """``node`` (an event, JSON values) with every array of objects turned into one object whose
    fields hold the list of the elements' values, recursively: how EventBridge matches fields inside
    arrays (any element), for matchers that do not descend into arrays (moto's ``EventPattern``).
    An empty array stays an empty list: no field exists inside it."""
    if isinstance(node, dict):
        return {key: as_event_ruler_sees(value) for key, value in node.items()}
    if isinstance(node, list) and node and all(isinstance(element, dict) for element in node):
        merged: dict[str, list[Any]] = {}
        for element in node:
            for key, value in element.items():
                merged.setdefault(key, []).append(value)
        return {key: _merge_values(values) for key, values in merged.items()}
    return node


def _merge_values(values: list[Any]) -> Any:
    """The elements' values of one field: objects merged again, scalars (and lists) flattened."""
    if all(isinstance(value, dict) for value in values):
        return as_event_ruler_sees(values)
    flat: list[Any] = []
    for value in values:
        flat.extend(value if isinstance(value, list) else [value])
    return flat
