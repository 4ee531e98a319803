"""The environment a job container is started with (set by the job definition or the local executor)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from worker.errors import ConfigError

JOB_ID = "REMOTE_BATCH_JOB_ID"
BUCKET = "REMOTE_BATCH_BUCKET"
INPUT_KEY = "REMOTE_BATCH_INPUT_KEY"
OUTPUT_PREFIX = "REMOTE_BATCH_OUTPUT_PREFIX"
MEMORY_GIB = "REMOTE_BATCH_MEMORY_GIB"
REQUIRED = (JOB_ID, BUCKET, INPUT_KEY, OUTPUT_PREFIX)


@dataclass(frozen=True)
class WorkerSettings:
    """Where the job's input is and where its outputs go.

    Attributes
    ----------
    job_id : str
        The service's job id, e.g. ``job-01J...``.
    bucket : str
        The S3 bucket holding ``inputs/`` and ``outputs/``.
    input_key : str
        Key of the input JSON object.
    output_prefix : str
        Key prefix of every output object; ends with ``/``.
    memory_gib : int or None
        Memory of the machine class, in GiB, or None when not given.
    """

    job_id: str
    bucket: str
    input_key: str
    output_prefix: str
    memory_gib: int | None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> WorkerSettings:
        """Read and validate the ``REMOTE_BATCH_*`` variables.

        Parameters
        ----------
        environ : Mapping[str, str]
            The process environment (``os.environ``).

        Returns
        -------
        WorkerSettings

        Raises
        ------
        ConfigError
            A required variable is missing or empty, the output prefix does not end with ``/``, or
            ``REMOTE_BATCH_MEMORY_GIB`` is not a positive integer.
        """
        missing = [name for name in REQUIRED if not environ.get(name)]
        if missing:
            raise ConfigError(f"missing environment variable(s): {', '.join(missing)}")
        output_prefix = environ[OUTPUT_PREFIX]
        if not output_prefix.endswith("/"):
            raise ConfigError(f"{OUTPUT_PREFIX} must end with '/', got {output_prefix!r}")
        return cls(
            job_id=environ[JOB_ID],
            bucket=environ[BUCKET],
            input_key=environ[INPUT_KEY],
            output_prefix=output_prefix,
            memory_gib=_memory_gib(environ.get(MEMORY_GIB)),
        )


def _memory_gib(text: str | None) -> int | None:
    if text is None or text == "":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigError(f"{MEMORY_GIB} must be a positive integer (GiB), got {text!r}")
    return value
