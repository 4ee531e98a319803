"""What the executor needs from the rest of the local stack: where its events go and who issues each
job's AWS credentials."""

from __future__ import annotations

from typing import Any, Protocol

from functions.ports import BatchSubmission


class CredentialIssuer(Protocol):
    """Gives each job AWS credentials of its own (``remote_batch_local.iam.JobCredentials``)."""

    def issue(self, batch_job_id: str, submission: BatchSubmission) -> dict[str, str]:
        """The variables (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``) of the job's credentials."""

    def revoke(self, batch_job_id: str) -> None:
        """Delete the job's credentials (once its processes are gone)."""


class EventPublisher(Protocol):
    """Where the executor sends its events (``EventBus``)."""

    def publish(self, envelope: dict[str, Any]) -> None:
        """Record and queue one envelope for delivery."""
