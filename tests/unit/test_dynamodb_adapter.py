"""The DynamoDB store at its boundary: the exact requests of the money and status writes (botocore's
``Stubber`` checks each against the expected parameters and DynamoDB's own model) and how a refused
write becomes ``ConditionFailed``, ``RecordMissing`` or ``DependencyFailed``. Shapes: DynamoDB API
reference (TransactWriteItems and its ``CancellationReasons``, UpdateItem with
``ReturnValuesOnConditionCheckFailure``)."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from functions.adapters.dynamodb import STORE_UNAVAILABLE, DynamoJobStore
from functions.domain.credits import settle_charge
from functions.domain.errors import ConditionFailed, DependencyFailed, RecordMissing
from functions.domain.jobs import (
    BatchJobState,
    Job,
    LedgerEntry,
    LedgerKind,
    Transition,
    apply_batch_event,
    charge_entry_id,
)
from functions.domain.status import JobStatus
from tests.builders import JOB_ID, SUBMITTED_AT, build_job

NOW = SUBMITTED_AT + timedelta(minutes=10)
NOW_EPOCH = "1796087400"  # NOW in epoch seconds: the ``:liveNow`` of every job write
STARTED = SUBMITTED_AT + timedelta(minutes=1)
STARTED_MS = int(STARTED.timestamp() * 1000)
RUNNING_HISTORY = (JobStatus.QUEUED, JobStatus.STARTING, JobStatus.RUNNING)
JOB_KEY = {"jobId": {"S": JOB_ID}}


@pytest.fixture
def client() -> Any:
    return boto3.client(
        "dynamodb", region_name="us-east-1", aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="secret"
    )


@pytest.fixture
def stubber(client: Any) -> Any:
    with Stubber(client) as stub:
        yield stub
        stub.assert_no_pending_responses()


@pytest.fixture
def store(client: Any) -> DynamoJobStore:
    return DynamoJobStore(client, "jobs", "accounts", "ledger", clock=lambda: NOW)


def running_job() -> Job:
    return build_job(
        status=JobStatus.RUNNING, status_history=RUNNING_HISTORY, event_position=4, started_at=STARTED
    )


def state(status: str, **times: Any) -> BatchJobState:
    return BatchJobState(
        batch_job_id=f"batch-{JOB_ID}",
        job_name=JOB_ID,
        status=status,
        status_reason=None,
        created_at_ms=STARTED_MS - 1000,
        started_at_ms=times.get("started_at_ms", STARTED_MS),
        stopped_at_ms=times.get("stopped_at_ms"),
        exit_code=times.get("exit_code"),
        log_stream_name="remote-batch-worker/default/x",
        attempt_count=1,
    )


def succeeded() -> Transition:
    transition = apply_batch_event(
        running_job(), state("SUCCEEDED", stopped_at_ms=STARTED_MS + 90_000, exit_code=0), arrived_at=NOW
    )
    assert transition is not None
    assert transition.running_ms == 90_000
    return transition


def settlement(transition: Transition) -> tuple[Any, LedgerEntry]:
    charge = settle_charge(transition.running_ms, Decimal(1), None, Decimal("10.0000"))
    assert charge.credits == Decimal("0.0250")  # 90 s at 1 credit an hour, the 60 s minimum passed
    entry = LedgerEntry(
        entry_id=charge_entry_id(JOB_ID),
        account_id="dev",
        at=transition.after.completed_at or NOW,
        kind=LedgerKind.CHARGE,
        credits=charge.credits,
        balance_after=Decimal("10.0000") - charge.credits,
        job_id=JOB_ID,
        unbilled=charge.unbilled,
    )
    return charge, entry


# The final transition's job-row condition: still alive, still at the position the transition was
# computed from, and not already Succeeded or Terminated (a stale settlement cannot overwrite one).
JOB_ROW_CONDITION = (
    "attribute_exists(jobId) AND (attribute_not_exists(#ttl) OR #ttl > :liveNow) AND "
    "#eventPosition = :before AND NOT #status IN (:succeeded, :terminated)"
)
SETTLED_NAMES = {
    f"#{name}": name
    for name in (
        "batchJobId",
        "batchReason",
        "completedAt",
        "creditsSpent",
        "eventPosition",
        "exitCode",
        "lastEventAt",
        "logStreamName",
        "meterPartition",
        "openPartition",
        "startedAt",
        "status",
        "statusHistory",
        "statusReason",
        "ttl",
        "warnings",
    )
}
SETTLEMENT = {
    "TransactItems": [
        {
            "Update": {
                "TableName": "jobs",
                "Key": JOB_KEY,
                "UpdateExpression": (
                    "SET #status = :status, #statusHistory = :statusHistory, "
                    "#eventPosition = :eventPosition, #exitCode = :exitCode, #startedAt = :startedAt, "
                    "#completedAt = :completedAt, #batchJobId = :batchJobId, "
                    "#logStreamName = :logStreamName, #lastEventAt = :lastEventAt, "
                    "#creditsSpent = :creditsSpent "
                    "REMOVE #statusReason, #meterPartition, #openPartition, #batchReason, #warnings"
                ),
                # A settlement of a job no child marked also holds only while none marks it
                # (issue 25: its ending then settles that child).
                "ConditionExpression": JOB_ROW_CONDITION
                + " AND attribute_not_exists(#hasDependents) AND attribute_not_exists(#dependents)",
                "ExpressionAttributeNames": {
                    **SETTLED_NAMES,
                    "#hasDependents": "hasDependents",
                    "#dependents": "dependents",
                },
                "ExpressionAttributeValues": {
                    ":batchJobId": {"S": f"batch-{JOB_ID}"},
                    ":before": {"N": "4"},
                    ":completedAt": {"S": "2026-12-01T01:02:30.000Z"},
                    ":creditsSpent": {"N": "0.0250"},
                    ":eventPosition": {"N": "15"},
                    ":exitCode": {"N": "0"},
                    ":lastEventAt": {"S": "2026-12-01T01:10:00.000Z"},
                    ":liveNow": {"N": NOW_EPOCH},
                    ":logStreamName": {"S": "remote-batch-worker/default/x"},
                    ":startedAt": {"S": "2026-12-01T01:01:00.000Z"},
                    ":status": {"S": "Succeeded"},
                    ":statusHistory": {
                        "L": [{"S": "Queued"}, {"S": "Starting"}, {"S": "Running"}, {"S": "Succeeded"}]
                    },
                    ":succeeded": {"S": "Succeeded"},
                    ":terminated": {"S": "Terminated"},
                },
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
        },
        {
            "Put": {
                "TableName": "ledger",
                "Item": {
                    "accountId": {"S": "dev"},
                    "entryId": {"S": f"charge#{JOB_ID}"},
                    "at": {"S": "2026-12-01T01:02:30.000Z"},
                    "kind": {"S": "charge"},
                    "credits": {"N": "0.0250"},
                    "balanceAfter": {"N": "9.9750"},
                    "jobId": {"S": JOB_ID},
                },
                "ConditionExpression": "attribute_not_exists(entryId)",
            }
        },
        {
            "Update": {
                "TableName": "accounts",
                "Key": {"accountId": {"S": "dev"}},
                "UpdateExpression": "SET creditBalance = :after",
                "ConditionExpression": "attribute_exists(accountId) AND creditBalance = :before",
                "ExpressionAttributeValues": {":after": {"N": "9.9750"}, ":before": {"N": "10.0000"}},
            }
        },
    ]
}


def cancelled(stubber: Any, *reasons: dict[str, Any]) -> None:
    stubber.add_client_error(
        "transact_write_items",
        service_error_code="TransactionCanceledException",
        service_message="Transaction cancelled",
        http_status_code=400,
        modeled_fields={"CancellationReasons": list(reasons)},
        expected_params=SETTLEMENT,
    )


# -- the settlement ------------------------------------------------------------------------------


def test_settlement_is_one_transaction_of_the_job_row_condition_the_charge_and_the_exact_balance(
    stubber: Any, store: DynamoJobStore
) -> None:
    stubber.add_response("transact_write_items", {}, SETTLEMENT)
    transition = succeeded()
    charge, entry = settlement(transition)
    store.settle(transition, charge, entry, NOW)


def test_a_settlement_whose_job_row_condition_fails_on_a_settled_job_is_a_lost_race(
    stubber: Any, store: DynamoJobStore
) -> None:
    settled = {"jobId": {"S": JOB_ID}, "status": {"S": "Succeeded"}, "eventPosition": {"N": "15"}}
    cancelled(
        stubber,
        {"Code": "ConditionalCheckFailed", "Message": "The conditional request failed", "Item": settled},
        {"Code": "None"},
        {"Code": "None"},
    )
    transition = succeeded()
    with pytest.raises(ConditionFailed) as raised:
        store.settle(transition, *settlement(transition), NOW)
    assert type(raised.value) is ConditionFailed  # not RecordMissing: the job is there, settled
    assert str(raised.value) == "TransactionCanceledException"


def test_a_settlement_of_a_job_that_is_gone_raises_record_missing(
    stubber: Any, store: DynamoJobStore
) -> None:
    cancelled(stubber, {"Code": "ConditionalCheckFailed"}, {"Code": "None"}, {"Code": "None"})
    transition = succeeded()
    with pytest.raises(RecordMissing, match=f"Job {JOB_ID} no longer exists."):
        store.settle(transition, *settlement(transition), NOW)


def test_a_settlement_cancelled_by_a_changed_balance_is_a_lost_race(
    stubber: Any, store: DynamoJobStore
) -> None:
    cancelled(stubber, {"Code": "None"}, {"Code": "None"}, {"Code": "ConditionalCheckFailed"})
    transition = succeeded()
    with pytest.raises(ConditionFailed) as raised:
        store.settle(transition, *settlement(transition), NOW)
    assert type(raised.value) is ConditionFailed


def test_a_settlement_cancelled_by_throttling_is_a_dependency_failure_not_a_race(
    stubber: Any, store: DynamoJobStore
) -> None:
    cancelled(stubber, {"Code": "ThrottlingError"}, {"Code": "None"}, {"Code": "None"})
    transition = succeeded()
    with pytest.raises(DependencyFailed) as raised:
        store.settle(transition, *settlement(transition), NOW)
    assert str(raised.value) == STORE_UNAVAILABLE
    assert raised.value.__cause__ is not None


# -- the conditional status UpdateItem -----------------------------------------------------------

STARTING_UPDATE = {
    "TableName": "jobs",
    "Key": JOB_KEY,
    "UpdateExpression": (
        "SET #status = :status, #statusHistory = :statusHistory, #eventPosition = :eventPosition, "
        "#batchJobId = :batchJobId, #logStreamName = :logStreamName, #lastEventAt = :lastEventAt, "
        "#meterPartition = :meterPartition, #openPartition = :openPartition "
        "REMOVE #statusReason, #exitCode, #startedAt, #completedAt, #batchReason, #warnings"
    ),
    "ConditionExpression": JOB_ROW_CONDITION,
    "ExpressionAttributeNames": {k: v for k, v in SETTLED_NAMES.items() if k != "#creditsSpent"},
    "ExpressionAttributeValues": {
        ":status": {"S": "Starting"},
        ":statusHistory": {"L": [{"S": "Queued"}, {"S": "Starting"}]},
        ":eventPosition": {"N": "13"},
        ":batchJobId": {"S": f"batch-{JOB_ID}"},
        ":logStreamName": {"S": "remote-batch-worker/default/x"},
        ":lastEventAt": {"S": "2026-12-01T01:10:00.000Z"},
        ":meterPartition": {"S": "metered"},
        ":openPartition": {"S": "open"},
        ":before": {"N": "-1"},
        ":succeeded": {"S": "Succeeded"},
        ":terminated": {"S": "Terminated"},
        ":liveNow": {"N": NOW_EPOCH},
    },
    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
}


def starting() -> Transition:
    transition = apply_batch_event(build_job(), state("STARTING", started_at_ms=None), arrived_at=NOW)
    assert transition is not None
    assert not transition.settles
    return transition


def test_a_status_change_is_an_update_conditional_on_the_position_it_was_computed_from(
    stubber: Any, store: DynamoJobStore
) -> None:
    stubber.add_response("update_item", {}, STARTING_UPDATE)
    store.save_transition(starting(), NOW)


def test_a_status_change_that_lost_to_a_newer_event_raises_condition_failed(
    stubber: Any, store: DynamoJobStore
) -> None:
    newer = {"jobId": {"S": JOB_ID}, "status": {"S": "Running"}, "eventPosition": {"N": "4"}}
    stubber.add_client_error(
        "update_item",
        service_error_code="ConditionalCheckFailedException",
        http_status_code=400,
        modeled_fields={"Item": newer},
        expected_params=STARTING_UPDATE,
    )
    with pytest.raises(ConditionFailed) as raised:
        store.save_transition(starting(), NOW)
    assert type(raised.value) is ConditionFailed


def test_a_status_change_of_an_expired_job_raises_record_missing(stubber: Any, store: DynamoJobStore) -> None:
    expired = {"jobId": {"S": JOB_ID}, "ttl": {"N": NOW_EPOCH}}
    stubber.add_client_error(
        "update_item",
        service_error_code="ConditionalCheckFailedException",
        http_status_code=400,
        modeled_fields={"Item": expired},
        expected_params=STARTING_UPDATE,
    )
    with pytest.raises(RecordMissing):
        store.save_transition(starting(), NOW)


@pytest.mark.parametrize(
    "code", ["ProvisionedThroughputExceededException", "ThrottlingException", "InternalServerError"]
)
def test_a_read_dynamodb_refuses_is_a_dependency_failure(
    stubber: Any, store: DynamoJobStore, code: str
) -> None:
    stubber.add_client_error(
        "get_item",
        service_error_code=code,
        http_status_code=400,
        expected_params={"TableName": "jobs", "Key": JOB_KEY, "ConsistentRead": True},
    )
    with pytest.raises(DependencyFailed) as raised:
        store.get_job(JOB_ID)
    assert str(raised.value) == STORE_UNAVAILABLE


def test_credits_spent_is_only_raised_on_a_running_job_and_never_lowered(
    stubber: Any, store: DynamoJobStore
) -> None:
    stubber.add_client_error(
        "update_item",
        service_error_code="ConditionalCheckFailedException",
        http_status_code=400,
        modeled_fields={"Item": {"jobId": {"S": JOB_ID}, "creditsSpent": {"N": "0.0500"}}},
        expected_params={
            "TableName": "jobs",
            "Key": JOB_KEY,
            "UpdateExpression": "SET creditsSpent = :c",
            "ConditionExpression": (
                "attribute_exists(jobId) AND (attribute_not_exists(#ttl) OR #ttl > :liveNow) AND "
                "(#s = :running AND creditsSpent < :c)"
            ),
            "ExpressionAttributeNames": {"#s": "status", "#ttl": "ttl"},
            "ExpressionAttributeValues": {
                ":c": {"N": "0.0250"},
                ":running": {"S": "Running"},
                ":liveNow": {"N": NOW_EPOCH},
            },
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        },
    )
    assert store.raise_credits_spent(JOB_ID, Decimal("0.0250")) is False
