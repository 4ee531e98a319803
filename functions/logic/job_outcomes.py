"""What a job's worker left behind, as the Lambdas read it: where its outputs are, the error line
of a failed job, and the outcome (reason, warnings, whether it is charged) of a final Batch event.

Only JSON is read: the Lambdas never unpickle or run user data.
"""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal

from aws_lambda_powertools import Logger

from functions.domain.arrays import job_data_path
from functions.domain.computes import job_on_compute_note
from functions.domain.credits import Charge, settle_charge
from functions.domain.errors import DependencyFailed, PayloadTooLarge
from functions.domain.jobs import (
    Account,
    BatchJobState,
    Job,
    JobType,
    LedgerEntry,
    LedgerKind,
    Transition,
    charge_entry_id,
    describe_failure,
    is_infrastructure_loss,
    job_rate,
    success_warnings,
)
from functions.domain.machine_classes import machine_class
from functions.domain.outcomes import (
    LEGACY_MESSAGES_OBJECT,
    OUTCOME_MAX_BYTES,
    OUTCOME_OBJECT,
    OutcomeUnreadable,
    StoredOutcome,
    error_summary,
    parse_outcome,
)
from functions.ports import BlobStore, Services

logger = Logger(child=True)

MESSAGES_MAX_BYTES = 1024 * 1024


def output_key(job_id: str, name: str) -> str:
    """Key of one of the worker's outputs (``result.json``, ``messages.json``, ...); an array child's
    are under its parent's (``outputs/<parent>/<index>/...``, ``arrays.job_data_path``)."""
    return f"outputs/{job_data_path(job_id)}/{name}"


def read_outcome(blobs: BlobStore, job_id: str) -> StoredOutcome | None:
    """A job's ``outcome.json`` (``functions.domain.outcomes``) in its zone's bucket ``blobs``, read
    whole in one GetObject.

    Returns
    -------
    StoredOutcome or None
        None when there is none: the worker wrote nothing yet (or nothing at all), or the job was
        written in the previous layout (``result.json`` and ``messages.json``, read by the callers).

    Raises
    ------
    OutcomeUnreadable
        It is over ``OUTCOME_MAX_BYTES`` or not of the format read here.
    DependencyFailed
        S3 failed.
    """
    try:
        raw = blobs.get(output_key(job_id, OUTCOME_OBJECT), OUTCOME_MAX_BYTES)
    except PayloadTooLarge as exc:
        raise OutcomeUnreadable(f"{OUTCOME_OBJECT} is over {OUTCOME_MAX_BYTES} bytes") from exc
    return None if raw is None else parse_outcome(raw)


def read_error_summary(services: Services, job: Job) -> str | None:
    """The worker's error line (``ZeroDivisionError: division by zero``) from ``outcome.json`` (or,
    for a job of the previous layout, ``messages.json``).

    When the worker gave the error a ``reason`` (a sentence of its own: ``Memory limit of 8 GiB
    exceeded``, ``Exited with code 5``, ``The job's input was rejected: ...``), that sentence is the
    line. Only JSON is read: the Lambdas never unpickle or run user data. None when there is none.
    """
    blobs = services.zones[job.geo_zone].blobs
    try:
        outcome = read_outcome(blobs, job.job_id)
        if outcome is not None:
            return error_summary(outcome.error)
        raw = blobs.get(output_key(job.job_id, LEGACY_MESSAGES_OBJECT), MESSAGES_MAX_BYTES)
    except (DependencyFailed, PayloadTooLarge, OutcomeUnreadable):
        logger.warning("messages unreadable", job_id=job.job_id)
        return None
    if raw is None:
        return None
    try:
        return error_summary(json.loads(raw).get("error"))
    except (ValueError, AttributeError):
        return None


def discard_outputs(services: Services, job: Job) -> None:
    """Delete what the worker uploaded for a job stopped at its CreditConstraint (docs/http-api.md: "its
    output discarded"). The result route refuses such a job whatever is left, so a failure here
    only delays the deletion until the bucket's lifecycle rule."""
    try:
        removed = services.zones[job.geo_zone].blobs.delete_prefix(output_key(job.job_id, ""))
    except DependencyFailed:
        logger.exception("outputs not discarded", job_id=job.job_id)
        return
    logger.info("outputs discarded", job_id=job.job_id, objects=removed)


def final_outcome(
    services: Services, job: Job, state: BatchJobState
) -> tuple[str | None, tuple[str, ...], bool]:
    """(statusReason, warnings, charged) of a final event: the plain sentence of a FAILED event and
    whether its attempt is charged (an attempt lost to infrastructure is free); the warnings of a
    SUCCEEDED one. Nothing for other events, or for a job already final."""
    if job.is_final or state.status not in ("FAILED", "SUCCEEDED"):
        return None, (), True
    machine = machine_class(job.machine_class)
    if state.status == "SUCCEEDED":
        return None, success_warnings(machine, state.reasons), True
    summary = None if job.termination_reason else read_error_summary(services, job)
    reason = describe_failure(job, machine, state.reasons, state.exit_code, summary)
    return reason, (), not is_infrastructure_loss(job, state.reasons, summary)


def final_charge(
    services: Services,
    transition: Transition,
    cap: Decimal | None,
    now: datetime,
    account: Account | None = None,
) -> tuple[Charge, LedgerEntry | None]:
    """The charge of a job's final transition (a job's or an array child's) and its ledger entry.

    The final attempt's Running time as the domain resolved it (``transition.running_ms``; None when
    it never ran or was lost to infrastructure: free), cut to the job's ``timeConstraint``, priced
    per second at its machine class's rate (60 s minimum, ``settle_charge``), cut to ``cap`` (credits;
    None: no cap) and to the account's balance, read strongly consistent.

    The entry (``charge#<jobId>``, at the job's ``completedAt`` or ``now``) is None when there is
    nothing to record: a charge the balance could not cover still gets one (credits 0, the rest
    ``unbilled``), so every running cost is explained in the ledger.

    ``account`` is the job's account as just read (strongly consistent) by the caller; None reads it.

    Raises ``DependencyFailed`` when the job's account is missing (or DynamoDB failed).
    """
    job = transition.after
    if account is None:
        account = services.store.get_account(job.account_id)
    if account is None:
        raise DependencyFailed(f"account {job.account_id} of job {job.job_id} is missing")
    running_ms = transition.running_ms
    if running_ms is not None and job.time_constraint is not None:
        # Time past the job's timeConstraint is the enforcement's latency (a meter tick, the Batch
        # timeout's 60 s minimum), not the user's: it is not billed.
        running_ms = min(running_ms, job.time_constraint * 1000)
    charge = settle_charge(running_ms, job_rate(job), cap, account.credit_balance)
    entry = None
    # A job on a dedicated compute costs 0 (the compute pays); its entry says so.
    on_compute = job.compute is not None and job.type == JobType.SINGLE and running_ms is not None
    if charge.credits > 0 or charge.unbilled > 0 or on_compute:
        entry = LedgerEntry(
            entry_id=charge_entry_id(job.job_id),
            account_id=job.account_id,
            at=job.completed_at or now,
            kind=LedgerKind.CHARGE,
            credits=charge.credits,
            balance_after=account.credit_balance - charge.credits,
            job_id=job.job_id,
            unbilled=charge.unbilled,
            reason=job_on_compute_note(job.compute) if job.compute is not None else None,
            compute=job.compute,
        )
    return charge, entry


def log_corrections(transition: Transition) -> None:
    """Log each of an event's times that could not be true and was clamped into the job's life
    (``functions.domain.charged_time``): what Batch sent is never charged as sent."""
    for correction in transition.corrections:
        logger.warning(
            "batch time clamped into the job's life",
            job_id=transition.after.job_id,
            field=correction.field,
            given_ms=correction.given_ms,
            used_ms=correction.used_ms,
            cause=correction.cause.value,
        )
