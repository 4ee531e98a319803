"""One builder of domain ``Job`` records for the tests and benchmarks that need a job without going
through ``POST /jobs``: a single Basic1x8 code job in the United States zone with no constraints,
Queued unless told otherwise; every other field is the ``Job`` default or an override."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from functions.domain.jobs import Job, JobType, PayloadKind
from functions.domain.machine_classes import GeoZone
from functions.domain.notifications import AUTOMATIC_RULES

JOB_ID = "job-01JDXYZ0000000000000000000"
SUBMITTED_AT = datetime(2026, 12, 1, 1, 0, tzinfo=UTC)


def build_job(job_id: str = JOB_ID, **overrides: Any) -> Job:
    """A ``Job`` with ``job_id``: account ``dev``, unnamed, ``SINGLE``/``CODE``, ``Basic1x8`` in
    ``GeoZone.UNITED_STATES``, no credit or time constraint, the ``Automatic`` notifications,
    submitted at ``SUBMITTED_AT`` (2026-12-01T01:00Z), Batch id ``batch-<job_id>``; ``overrides``
    are ``Job`` fields (``status=JobStatus.RUNNING``, ``started_at=...``) replacing those."""
    fields: dict[str, Any] = {
        "job_id": job_id,
        "account_id": "dev",
        "name": None,
        "type": JobType.SINGLE,
        "payload_kind": PayloadKind.CODE,
        "machine_class": "Basic1x8",
        "geo_zone": GeoZone.UNITED_STATES,
        "credit_constraint": None,
        "time_constraint": None,
        "notifications": AUTOMATIC_RULES,
        "submitted_at": SUBMITTED_AT,
        "batch_job_id": f"batch-{job_id}",
    }
    return Job(**(fields | overrides))
