"""The jobs the executor accepted, kept on disk: what AWS Batch keeps of a job it acknowledged.

AWS Batch keeps every job it answered SubmitJob for until the job ends, whatever happens to the hosts
that run it. The local executor keeps its jobs in memory; so that a crash of the local stack
(``kill -9``, a power cut) loses none, each SubmitJob it answers is first appended here, one JSON line
per job (an array job is one line, with its size), written and ``fsync``-ed before its id is returned.
At the next start after a crash the lines of the jobs that had not ended are read back
(``load``) and the jobs run again (``remote_batch_local.recovery_accepted``); the file is then
rewritten without the others (``forget``). A line cut by the crash (no final newline) is no job: its
SubmitJob was never answered.

Line: ``{"jobId", "region", "logGroup", "createdAtMs", "submission": {BatchSubmission's fields}}``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Collection
from contextlib import nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from functions.ports import BatchSubmission
from remote_batch_local.executor.constants import logger
from remote_batch_local.files import append_line, write_bytes_atomic
from remote_batch_local.state_disk import StateDisk


@dataclass(frozen=True)
class AcceptedJob:
    """One job (or array job) the executor accepted.

    Attributes
    ----------
    job_id : str
        Its Batch job id.
    region, log_group : str
        The zone it was submitted in: its region and its jobs' log group.
    created_at_ms : int
        When it was accepted (ms since the epoch, its ``createdAt``).
    submission : BatchSubmission
        What SubmitJob was given (``array_size`` set for an array job).
    """

    job_id: str
    region: str
    log_group: str
    created_at_ms: int
    submission: BatchSubmission

    def to_line(self) -> str:
        """The record as one JSON line (no newline)."""
        submission = asdict(self.submission)
        submission["environment"] = dict(self.submission.environment)
        submission["tags"] = dict(self.submission.tags)
        record = {
            "jobId": self.job_id,
            "region": self.region,
            "logGroup": self.log_group,
            "createdAtMs": self.created_at_ms,
            "submission": submission,
        }
        return json.dumps(record, separators=(",", ":"))

    @classmethod
    def from_line(cls, line: str) -> AcceptedJob:
        """The record of one line ``to_line`` wrote.

        Raises
        ------
        ValueError, KeyError, TypeError
            The line is not such a record.
        """
        record: dict[str, Any] = json.loads(line)
        submission = dict(record["submission"])
        return cls(
            job_id=str(record["jobId"]),
            region=str(record["region"]),
            log_group=str(record["logGroup"]),
            created_at_ms=int(record["createdAtMs"]),
            submission=BatchSubmission(**submission),
        )


class AcceptedJobs:
    """The append-only file of accepted jobs (thread-safe).

    Parameters
    ----------
    path : Path
        The file (``<home>/state/batch-accepted.jsonl`` in the local stack); made on the first record.
    disk : StateDisk | None
        The filesystem it is on, as the local stack watches it: a record is refused before it is
        written while that filesystem takes no writes, and a write that fails for it is reported.
    """

    def __init__(self, path: Path, disk: StateDisk | None = None) -> None:
        self.path = path
        self._disk = disk
        self._lock = threading.Lock()
        self._cut_partial_line()

    def _cut_partial_line(self) -> None:
        """Cut a last line a crash left without its newline, so that the next record starts a line."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        if data and not data.endswith(b"\n"):
            with self.path.open("r+b") as out:
                out.truncate(data.rfind(b"\n") + 1)

    def record(self, job: AcceptedJob) -> None:
        """Append ``job`` and ``fsync`` it; returns once it is on disk.

        Raises
        ------
        StateDiskUnavailable
            The filesystem is full or read-only (refused before writing, or the write failed so).
        OSError
            It could not be written otherwise. Either way the job must not be acknowledged.
        """
        line = (job.to_line() + "\n").encode()
        if self._disk is not None:
            self._disk.check()
        with self._lock, self._disk.writing() if self._disk is not None else nullcontext():
            self.path.parent.mkdir(parents=True, exist_ok=True)
            append_line(self.path, line, durable=True)

    def load(self) -> list[AcceptedJob]:
        """Every job recorded, in order; a line cut by a crash, or unreadable, is skipped (logged)."""
        with self._lock:
            try:
                text = self.path.read_text(encoding="utf-8")
            except FileNotFoundError:
                return []
        jobs: list[AcceptedJob] = []
        for line in text.split("\n"):
            if not line.strip():
                continue
            try:
                jobs.append(AcceptedJob.from_line(line))
            except (ValueError, KeyError, TypeError) as exc:
                logger.warning("accepted job record unreadable path=%s error=%s", self.path, exc)
        return jobs

    def forget(self, job_ids: Collection[str]) -> None:
        """Rewrite the file without the records of ``job_ids`` (jobs that ended) and without any line
        cut by a crash; atomically (a crash meanwhile leaves the old file or the new one). Records
        appended meanwhile are kept."""
        with self._lock:
            try:
                lines = self.path.read_text(encoding="utf-8").split("\n")
            except FileNotFoundError:
                return
            kept: list[str] = []
            for line in lines:
                try:
                    if line.strip() and AcceptedJob.from_line(line).job_id not in job_ids:
                        kept.append(line)
                except (ValueError, KeyError, TypeError):
                    continue
            if not kept:
                self.path.unlink(missing_ok=True)
                return
            write_bytes_atomic(self.path, "".join(line + "\n" for line in kept).encode(), mode=0o600)
