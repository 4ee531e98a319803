"""The worker's whole run: settings → input → run → outputs → exit code."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import boto3

from worker.encoding import encode_outcome
from worker.errors import WorkerError
from worker.runner import JobInput, Outcome, parse_job_input, payload_key, run_job
from worker.settings import WorkerSettings
from worker.storage import JobStorage

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

#: Exit code for a failure of the worker itself (configuration, input, S3), not of the user's code.
EXIT_WORKER_ERROR = 2


def main(environ: Mapping[str, str] | None = None, s3_client: S3Client | None = None) -> int:
    """Run the job the environment describes and upload its outputs.

    Outputs, under ``REMOTE_BATCH_OUTPUT_PREFIX``, whether the user's code succeeded or not:
    ``files/<path>`` for each file left in ``$REMOTE_BATCH_OUTPUT_DIR``, ``preview.png`` (Figure
    results only), ``result.pickle``, ``result.json``, then ``messages.json`` last, so its presence
    means the others are complete.

    Parameters
    ----------
    environ : Mapping[str, str] or None
        The environment; ``os.environ`` when None.
    s3_client : S3Client or None
        The S3 client; one built from the environment when None.

    Returns
    -------
    int
        0 on success; 1 when the user's code raised; the ``SystemExit`` code or the command's exit
        code; 2 when the worker itself failed (one line on stderr says why).
    """
    environ = os.environ if environ is None else environ
    try:
        settings = WorkerSettings.from_environ(environ)
        storage = JobStorage(s3_client or boto3.client("s3"), settings.bucket)
        job = read_job_input(storage, settings.input_key)
    except WorkerError as exc:
        _report_worker_error(exc)
        return EXIT_WORKER_ERROR
    with tempfile.TemporaryDirectory(prefix="remote-batch-output-", ignore_cleanup_errors=True) as tmp:
        output_dir = Path(tmp)
        outcome = run_job(job, output_dir=output_dir, memory_gib=settings.memory_gib)
        try:
            publish(storage, settings.output_prefix, outcome, output_dir)
        except WorkerError as exc:
            _report_worker_error(exc)
            return EXIT_WORKER_ERROR
    return outcome.exit_code


def read_job_input(storage: JobStorage, key: str) -> JobInput:
    """Read and parse the job's input object; an uploaded payload (``payloadKey``, up to 5 GiB) is
    streamed to a local file first and read from it once, so it is in memory a single time.

    Raises
    ------
    InputNotFound, StorageError, InvalidJobInput
        The input or its upload is missing, unreadable, or malformed.
    """
    raw = storage.read(key)
    upload = payload_key(raw)
    if upload is None:
        return parse_job_input(raw)
    with tempfile.TemporaryDirectory(prefix="remote-batch-input-", ignore_cleanup_errors=True) as tmp:
        path = Path(tmp, "payload")
        storage.download(upload, path)
        payload = path.read_bytes()
    return parse_job_input(raw, payload)


def publish(storage: JobStorage, prefix: str, outcome: Outcome, output_dir: Path) -> None:
    """Upload a finished job's outputs.

    Parameters
    ----------
    storage : JobStorage
        The job's bucket.
    prefix : str
        The output prefix, ending with ``/``.
    outcome : Outcome
        What the runner returned.
    output_dir : Path
        The directory whose files become ``<prefix>files/...``.

    Raises
    ------
    StorageError
        An upload failed.
    """
    storage.upload_directory(output_dir, prefix + "files/")
    encoded = encode_outcome(outcome)
    if encoded.preview_png is not None:
        storage.write(prefix + "preview.png", encoded.preview_png, "image/png")
    if encoded.result_pickle is not None:
        storage.write(prefix + "result.pickle", encoded.result_pickle, "application/octet-stream")
    storage.write(prefix + "result.json", encoded.result_json, "application/json")
    storage.write(prefix + "messages.json", encoded.messages_json, "application/json")


def _report_worker_error(exc: WorkerError) -> None:
    print(f"remote-batch worker: {exc}", file=sys.stderr, flush=True)
