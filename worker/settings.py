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
#: An array span's global offset (set by the service) and the child's index in the span (set by AWS
#: Batch for an array job's children; absent for a span of one item, which is its index 0).
ARRAY_OFFSET = "REMOTE_BATCH_ARRAY_OFFSET"
BATCH_ARRAY_INDEX = "AWS_BATCH_JOB_ARRAY_INDEX"
#: Set by the service on an array whose containers take many items (``worker.item_loop``): how many
#: containers the array runs on (1..10,000); the container's own index is its ``array_index``.
ARRAY_CONTAINERS = "REMOTE_BATCH_ARRAY_CONTAINERS"
#: AWS Batch's id of this container's job (``<array job id>:<index>`` for an array's child).
BATCH_JOB_ID = "AWS_BATCH_JOB_ID"
#: Most containers of one array: AWS Batch's largest array job.
MAX_ARRAY_CONTAINERS = 10_000
#: The uid the job side runs as when the supervisor is root (``worker.job_user``): the worker images
#: set it to their ``worker`` user's, 10001; unset, the job side runs as the supervisor does.
JOB_UID = "REMOTE_BATCH_JOB_UID"
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
    array_index : int or None
        An array child's index in the whole array (``REMOTE_BATCH_ARRAY_OFFSET`` plus
        ``AWS_BATCH_JOB_ARRAY_INDEX``); None for a job that is no array child.
    job_uid : int or None
        ``REMOTE_BATCH_JOB_UID``: the uid (>= 1) the job side runs as when the supervisor is root;
        None when unset.
    containers : int or None
        ``REMOTE_BATCH_ARRAY_CONTAINERS``: the array's containers when each takes many items (then
        ``array_index`` is this container's index among them, and ``batch_job_id`` is set); None for
        a container that runs one item or a single job.
    batch_job_id : str or None
        ``AWS_BATCH_JOB_ID``, AWS Batch's id of this container's job (None when unset).
    """

    job_id: str
    bucket: str
    input_key: str
    output_prefix: str
    memory_gib: int | None
    array_index: int | None = None
    job_uid: int | None = None
    containers: int | None = None
    batch_job_id: str | None = None

    @property
    def job_output_prefix(self) -> str:
        """Where this container's outputs go: the output prefix, and for an array child its index
        under it (``outputs/<parent>/<index>/``, where the service reads a child's outputs); for a
        container that takes many items its own prefix (``outputs/<parent>/containers/<batch job
        id>/``: its items' reports, ``worker.item_loop``), each item's outputs going to its index's."""
        if self.containers is not None:
            return f"{self.output_prefix}containers/{self.batch_job_id}/"
        if self.array_index is None:
            return self.output_prefix
        return f"{self.output_prefix}{self.array_index}/"

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
            ``REMOTE_BATCH_MEMORY_GIB`` is not a positive integer, or the array variables are not
            integers >= 0, or ``REMOTE_BATCH_JOB_UID`` is not an integer >= 1, or
            ``REMOTE_BATCH_ARRAY_CONTAINERS`` is not in 1..10,000, set without the array's offset or
            without ``AWS_BATCH_JOB_ID``, or not above the container's index.
        """
        missing = [name for name in REQUIRED if not environ.get(name)]
        if missing:
            raise ConfigError(f"missing environment variable(s): {', '.join(missing)}")
        output_prefix = environ[OUTPUT_PREFIX]
        if not output_prefix.endswith("/"):
            raise ConfigError(f"{OUTPUT_PREFIX} must end with '/', got {output_prefix!r}")
        array_index = _array_index(environ.get(ARRAY_OFFSET), environ.get(BATCH_ARRAY_INDEX))
        containers = _containers(environ.get(ARRAY_CONTAINERS), array_index, environ.get(BATCH_JOB_ID))
        return cls(
            job_id=environ[JOB_ID],
            bucket=environ[BUCKET],
            input_key=environ[INPUT_KEY],
            output_prefix=output_prefix,
            memory_gib=_memory_gib(environ.get(MEMORY_GIB)),
            array_index=array_index,
            job_uid=_job_uid(environ.get(JOB_UID)),
            containers=containers,
            batch_job_id=environ.get(BATCH_JOB_ID) or None,
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


def _whole_number(name: str, text: str) -> int:
    if not (text.isascii() and text.isdigit()):
        raise ConfigError(f"{name} must be an integer >= 0, got {text!r}")
    return int(text)


def _array_index(offset: str | None, index: str | None) -> int | None:
    """The child's index in the whole array, or None when the span's offset is not set."""
    if offset is None or offset == "":
        return None
    return _whole_number(ARRAY_OFFSET, offset) + (_whole_number(BATCH_ARRAY_INDEX, index) if index else 0)


def _containers(text: str | None, array_index: int | None, batch_job_id: str | None) -> int | None:
    """The array's containers (``ARRAY_CONTAINERS``), or None when unset."""
    if text is None or text == "":
        return None
    count = _whole_number(ARRAY_CONTAINERS, text)
    if not 1 <= count <= MAX_ARRAY_CONTAINERS:
        raise ConfigError(f"{ARRAY_CONTAINERS} must be 1..{MAX_ARRAY_CONTAINERS}, got {text!r}")
    if array_index is None or not batch_job_id:
        raise ConfigError(f"{ARRAY_CONTAINERS} needs {ARRAY_OFFSET} and {BATCH_JOB_ID}")
    if array_index >= count:
        raise ConfigError(f"container {array_index} is outside the array's {count} containers")
    return count


def _job_uid(text: str | None) -> int | None:
    """The job side's uid, or None when unset; root (0) is refused: it would share the supervisor's."""
    if text is None or text == "":
        return None
    if not (text.isascii() and text.isdigit()) or int(text) == 0:
        raise ConfigError(f"{JOB_UID} must be a uid >= 1 (the job's user, not root), got {text!r}")
    return int(text)
