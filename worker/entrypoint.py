"""The worker's whole run: settings → input → run (in the job's Python) → outputs → exit code.

This is the supervisor (``worker.job_side`` describes the split): it runs in the service's Python and
hands the job to the job side (``worker.supervisor.run_in_job_python``), which runs it in the job's; in
an environment's own image, to the job container (``worker.job_container.run_in_job_container``). In
the worker image it runs as root and the job side as the image's user (``worker.job_user`` says who
owns which folder then); elsewhere (the local stack, tests) both run as the caller.

What the user sees of the worker's own failures is one line in the job log (``remote-batch worker:
...``) and, when the job's bucket can be written, ``outcome.json`` with an ``error`` whose ``reason``
becomes the job's ``statusReason`` (``worker.layout``). Never the worker's traceback: its details
(traceback, S3 error) go to the operator, in ``<output prefix>worker-error.txt`` and, when
``REMOTE_BATCH_OPERATOR_LOG`` names a file, appended to that file (the local stack's executor logs it).
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import sys
import tempfile
import traceback
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
from botocore.exceptions import ClientError

from worker import fork_server
from worker.environments import ENVIRONMENT_HASH_VARIABLE, cache_folder, environment_site
from worker.errors import InputNotFound, InvalidJobInput, StorageError, WorkerError
from worker.inputs import INPUTS_FOLDER, InputSource, fetch_inputs, input_sources
from worker.item_loop import Console, ItemLoop
from worker.job_container import exchange_of, run_in_job_container, share_tree
from worker.job_container import output_dir as container_output_dir
from worker.job_container import work_dir as container_work_dir
from worker.job_side import SITE_VARIABLE
from worker.job_user import JobUser, job_user, share_read_only
from worker.layout import failure_outcome, outcome_objects
from worker.runner import JobError, JobInput, parse_job_input, payload_key
from worker.settings import JOB_ID, WorkerSettings
from worker.storage import JobStorage
from worker.supervisor import JobRun, run_in_job_python

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

#: Exit code for a failure of the worker itself (configuration, input, S3), not of the user's code.
EXIT_WORKER_ERROR = 2
#: Environment variable naming a file the worker appends the details of its own errors to.
OPERATOR_LOG = "REMOTE_BATCH_OPERATOR_LOG"
#: The object, under the output prefix, holding the details of the worker's own error (for operators;
#: no route serves it).
WORKER_ERROR_OBJECT = "worker-error.txt"
#: Bytes of one entry of an array's items index (a big-endian 64-bit offset).
ITEM_INDEX_BYTES = 8
#: The ``statusReason`` of a job the worker failed on through its own fault.
INTERNAL_ERROR_REASON = "The job runner failed (an internal error, reported to the operator)"


def main(environ: Mapping[str, str] | None = None, s3_client: S3Client | None = None) -> int:
    """Run the job the environment describes and upload its outputs.

    Outputs, under ``REMOTE_BATCH_OUTPUT_PREFIX``, whether the user's code succeeded or not
    (``worker.layout``): ``files/<path>`` for each file left in ``$REMOTE_BATCH_OUTPUT_DIR``, a part of
    the outcome too big to inline or a picture of the result (``result.json``, ``result.pickle``,
    ``preview.png``, each only then), then ``outcome.json`` last, so its presence means the others are
    complete: a job whose result is ``4`` writes ``outcome.json`` alone. An input that cannot be read
    or is rejected before any user code runs leaves only ``outcome.json``, whose error says why in one
    sentence.

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
        code; 2 when the worker itself failed or refused the input (one line on stderr says why).
    """
    environ = os.environ if environ is None else environ
    try:
        settings = WorkerSettings.from_environ(environ)
    except WorkerError as exc:
        _tell_user(str(exc))
        _tell_operator(environ, None, None, str(exc), exc)
        return EXIT_WORKER_ERROR
    storage: JobStorage | None = None
    try:
        storage = JobStorage(s3_client or boto3.client("s3"), settings.bucket)
        return _run(settings, storage, environ)
    except BaseException as exc:  # a fault of the worker itself: never its traceback in the job log
        _tell_user(f"internal error ({type(exc).__name__}); the operator has the details")
        _tell_operator(environ, storage, settings, "internal error", exc)
        if storage is not None:
            _record_failure(storage, settings, "WorkerError", INTERNAL_ERROR_REASON)
        return EXIT_WORKER_ERROR


def _run(settings: WorkerSettings, storage: JobStorage, environ: Mapping[str, str]) -> int:
    # Root in the worker image: the job side runs as the image's user (worker.job_user), else as this.
    user = job_user(settings.job_uid)
    exchange = exchange_of(environ)
    # The folder the job's code starts in: this one, or an image job's in the shared volume.
    work = Path.cwd() if exchange is None else container_work_dir(exchange)
    if settings.containers is not None:
        return _run_items(settings, storage, environ, user, exchange is not None)
    try:
        job, sources = read_job(storage, settings.input_key, settings.array_index)
        # A child's inputs from its parents, in the working directory, before its code starts.
        fetch_inputs(storage, sources, work)
        if sources and exchange is not None:
            share_tree(work / INPUTS_FOLDER)  # the image's user may be any uid
        elif user is not None and sources:
            user.give(work / INPUTS_FOLDER)  # the job's to change, as the rest of its folder
    except WorkerError as exc:
        reason = rejection_reason(exc)
        _tell_user(f"{reason} ({exc})" if isinstance(exc, InputNotFound) else reason)
        _tell_operator(environ, storage, settings, reason, exc)
        _record_failure(storage, settings, type(exc).__name__, reason)
        return EXIT_WORKER_ERROR
    with (
        tempfile.TemporaryDirectory(prefix="remote-batch-output-", ignore_cleanup_errors=True) as tmp,
        tempfile.TemporaryDirectory(prefix="remote-batch-environment-", ignore_cleanup_errors=True) as own,
    ):
        if exchange is None:
            output_dir = Path(tmp)
            if user is not None:
                user.own_folder(output_dir)
                share_read_only(Path(own))  # a build unpacked here is read as the cache's is
            try:
                environ = with_environment_site(storage, environ, Path(own))
            except WorkerError as exc:
                reason = environment_reason(exc)
                _tell_user(reason)
                _tell_operator(environ, storage, settings, reason, exc)
                _record_failure(storage, settings, type(exc).__name__, reason)
                return EXIT_WORKER_ERROR
            run = run_in_job_python(
                job, output_dir=output_dir, memory_gib=settings.memory_gib, environ=environ, user=user
            )
        else:  # an environment's own image: the job side runs in the job container (worker.job_container)
            output_dir = container_output_dir(exchange)
            run = run_in_job_container(
                job, exchange=exchange, memory_gib=settings.memory_gib, environ=environ
            )
        try:
            publish(storage, settings.job_output_prefix, run, output_dir)
        except WorkerError as exc:
            _tell_user(str(exc))
            _tell_operator(environ, storage, settings, "outputs not stored", exc)
            return EXIT_WORKER_ERROR
    return run.exit_code


def _run_items(
    settings: WorkerSettings,
    storage: JobStorage,
    environ: Mapping[str, str],
    user: JobUser | None,
    in_image: bool,
) -> int:
    """A container that takes many items (``worker.item_loop``): the array's input, its parents'
    inputs, its payload and its environment's site are had once; then each item it claims runs in
    its own job side, forked from one zygote of the job's Python (``worker.fork_server``). Returns 0
    when no item is left (each item's failure is in its report), 2 when the container could not
    start on its items (its reason in ``outcome.json`` under its prefix)."""
    try:
        if in_image:
            raise InvalidJobInput("an array whose containers take many items runs in the worker image")
        raw = storage.read(settings.input_key)
        document = json.loads(raw)
        size = document.get("arraySize") if isinstance(document, dict) else None
        if not isinstance(size, int) or size < 1:
            raise InvalidJobInput("an array's input must give its 'arraySize'")
        sources = input_sources(document, settings.input_key)
        fetch_inputs(storage, sources, Path.cwd())
        if user is not None and sources:
            user.give(Path.cwd() / INPUTS_FOLDER)
        payload = _payload(storage, raw)
    except (WorkerError, ValueError) as exc:
        error = exc if isinstance(exc, WorkerError) else InvalidJobInput(f"the input is not JSON ({exc})")
        reason = rejection_reason(error)
        _tell_user(reason)
        _tell_operator(environ, storage, settings, reason, exc)
        _record_failure(storage, settings, type(error).__name__, reason)
        return EXIT_WORKER_ERROR
    with tempfile.TemporaryDirectory(prefix="remote-batch-environment-", ignore_cleanup_errors=True) as own:
        if user is not None:
            share_read_only(Path(own))
        try:
            environ = with_environment_site(storage, environ, Path(own))
        except WorkerError as exc:
            reason = environment_reason(exc)
            _tell_user(reason)
            _tell_operator(environ, storage, settings, reason, exc)
            _record_failure(storage, settings, type(exc).__name__, reason)
            return EXIT_WORKER_ERROR
        job_environ = environ

        def run_item(index: int, output_dir: Path) -> JobRun:
            job = parse_job_input(with_array_item(storage, raw, index), payload)
            return run_in_job_python(
                job, output_dir=output_dir, memory_gib=settings.memory_gib, environ=job_environ, user=user
            )

        loop = ItemLoop(
            storage=storage,
            output_prefix=settings.output_prefix,
            batch_job_id=settings.batch_job_id or "",
            container=settings.array_index or 0,
            containers=settings.containers or 1,
            size=size,
            run_item=run_item,
            publish=lambda prefix, run, folder: publish(storage, prefix, run, folder),
            console=Console(os.dup(1)),
            prepare_output_dir=(lambda _f: None) if user is None else user.own_folder,
        )
        # Every item's job side is forked from one zygote (worker.fork_server), started for the first.
        fork_server.enable()
        try:
            loop.run()
        finally:
            fork_server.shut_down()
    return 0


def _payload(storage: JobStorage, raw: bytes) -> bytes | None:
    """The array's uploaded payload (``payloadKey``), read once for all its items, or None."""
    upload = payload_key(raw)
    if upload is None:
        return None
    with tempfile.TemporaryDirectory(prefix="remote-batch-input-", ignore_cleanup_errors=True) as tmp:
        path = Path(tmp, "payload")
        storage.download(upload, path)
        return path.read_bytes()


def with_environment_site(
    storage: JobStorage, environ: Mapping[str, str], scratch: Path
) -> Mapping[str, str]:
    """``environ`` with the job side's site (``REMOTE_BATCH_JOB_SITE``) when the job names an
    environment's build (``REMOTE_BATCH_ENVIRONMENT_HASH``) and nobody set its site yet (the local
    executor does): the build fetched into the host's cache (``worker.environments.environment_site``).

    Raises
    ------
    InvalidJobInput, InputNotFound, StorageError
        A malformed hash; the zone's bucket has no such build; it could not be read or unpacked.
    """
    digest = environ.get(ENVIRONMENT_HASH_VARIABLE)
    if not digest or environ.get(SITE_VARIABLE):
        return environ
    site = environment_site(storage, digest, cache_folder(environ), scratch)
    return {**environ, SITE_VARIABLE: str(site)}


def environment_reason(exc: WorkerError) -> str:
    """The ``statusReason`` of a job whose environment could not be had (``with_environment_site``)."""
    if isinstance(exc, InputNotFound):
        return "The job's environment is not in its zone's bucket (delete and create the environment again)"
    if isinstance(exc, StorageError) and isinstance(exc.__cause__, ClientError):
        code = exc.__cause__.response.get("Error", {}).get("Code") or "ClientError"
        # S3's answer to a role without s3:ListBucket (the job role) for a missing key, too.
        if code in ("AccessDenied", "403"):
            return "The job's environment could not be fetched (AccessDenied: missing or unreadable)"
        return f"The job's environment could not be fetched ({code})"
    return " ".join(f"The job's environment could not be fetched: {exc}".split())


def read_job_input(storage: JobStorage, key: str, array_index: int | None = None) -> JobInput:
    """Read and parse the job's input object; an uploaded payload (``payloadKey``, up to 5 GiB) is
    streamed to a local file first and read from it once, so it is in memory a single time. An
    array child (``array_index``) also reads its item (``read_array_item``).

    Raises
    ------
    InputNotFound, StorageError, InvalidJobInput
        The input or its upload is missing, unreadable, or malformed.
    """
    return read_job(storage, key, array_index)[0]


def read_job(
    storage: JobStorage, key: str, array_index: int | None = None
) -> tuple[JobInput, list[InputSource]]:
    """``read_job_input``, and the parents the job takes inputs from (``worker.inputs``), from the
    one read of its input object. Raises what ``read_job_input`` raises."""
    raw = storage.read(key)
    try:
        sources = input_sources(json.loads(raw), key)
    except ValueError:
        sources = []  # parse_job_input says what is wrong with it
    if array_index is not None:
        raw = with_array_item(storage, raw, array_index)
    upload = payload_key(raw)
    if upload is None:
        return parse_job_input(raw), sources
    with tempfile.TemporaryDirectory(prefix="remote-batch-input-", ignore_cleanup_errors=True) as tmp:
        path = Path(tmp, "payload")
        storage.download(upload, path)
        payload = path.read_bytes()
    return parse_job_input(raw, payload), sources


def read_array_item(storage: JobStorage, document: dict[str, Any], index: int) -> Any:
    """Item ``index`` of an array (the service's ``functions.domain.arrays.encode_items`` layout):
    16 bytes of the offsets index at ``index * 8``, then that item's line of ``items.jsonl``; two
    ranged GETs whatever the array's size.

    Raises
    ------
    InvalidJobInput
        The input names no items, ``index`` is past ``arraySize``, or the item is not JSON.
    InputNotFound, StorageError
        The items are missing or unreadable.
    """
    items_key, index_key, size = (document.get(k) for k in ("arrayItemsKey", "arrayIndexKey", "arraySize"))
    if not (isinstance(items_key, str) and isinstance(index_key, str) and isinstance(size, int)):
        raise InvalidJobInput(
            "an array child's input must name 'arrayItemsKey', 'arrayIndexKey' and 'arraySize'"
        )
    if not 0 <= index < size:
        raise InvalidJobInput(f"array index {index} is outside the array's {size} items")
    entry = storage.read_range(index_key, index * ITEM_INDEX_BYTES, (index + 2) * ITEM_INDEX_BYTES - 1)
    start, end = struct.unpack(">2Q", entry)
    if end <= start:
        raise InvalidJobInput(f"the index of item {index} is damaged ({start}..{end})")
    line = storage.read_range(items_key, start, end - 1)
    try:
        return json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidJobInput(f"item {index} is not JSON ({exc})") from exc


def with_array_item(storage: JobStorage, raw: bytes, index: int) -> bytes:
    """The input object with ``arrayItem`` (read by ``read_array_item``) and ``arrayIndex`` added,
    as ``worker.runner.parse_job_input`` takes them."""
    try:
        document = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InvalidJobInput(f"the input is not UTF-8 JSON ({exc})") from exc
    if not isinstance(document, dict):
        raise InvalidJobInput("the input must be a JSON object")
    document["arrayItem"] = read_array_item(storage, document, index)
    document["arrayIndex"] = index
    return json.dumps(document).encode()


def rejection_reason(exc: WorkerError) -> str:
    """The one-line ``statusReason`` of a job whose input was refused before any user code ran.

    Parameters
    ----------
    exc : WorkerError
        ``InvalidJobInput``, ``InputNotFound`` or another ``StorageError`` of the input read.

    Returns
    -------
    str
        E.g. ``The job's input was rejected: command[1] contains a NUL character, ...``,
        ``The job's input is missing``, ``The job's input could not be read (AccessDenied)``.
    """
    if isinstance(exc, InvalidJobInput):
        return " ".join(f"The job's input was rejected: {exc}".split())
    if isinstance(exc, InputNotFound):
        return "The job's input is missing"
    if isinstance(exc, StorageError):
        cause = exc.__cause__
        code = (
            cause.response.get("Error", {}).get("Code") if isinstance(cause, ClientError) else None
        ) or type(cause or exc).__name__
        return f"The job's input could not be read ({code})"
    return " ".join(str(exc).split())


def publish(storage: JobStorage, prefix: str, run: JobRun, output_dir: Path) -> None:
    """Upload a finished job's outputs.

    Parameters
    ----------
    storage : JobStorage
        The job's bucket.
    prefix : str
        The output prefix, ending with ``/``.
    run : JobRun
        What the job side recorded (``JobRun.from_outcome``: an outcome of this process).
    output_dir : Path
        The directory whose files become ``<prefix>files/...``; a file that cannot be read is
        skipped with a message.

    Raises
    ------
    StorageError
        An upload failed.
    """
    notes: list[str] = []
    storage.upload_directory(output_dir, prefix + "files/", notes)
    for part in outcome_objects(run.encoded(notes)):
        storage.write(prefix + part.name, part.body, part.content_type)


def _record_failure(storage: JobStorage, settings: WorkerSettings, kind: str, reason: str) -> None:
    """Write ``outcome.json`` saying why the job failed; best effort (the log line says it too)."""
    error = JobError(type=kind, message=reason, traceback="", reason=reason)
    with contextlib.suppress(Exception):
        part = failure_outcome([f"{kind}: {reason}"], error)
        storage.write(settings.job_output_prefix + part.name, part.body, part.content_type)


def _tell_user(sentence: str) -> None:
    """One line in the job log, prefixed ``remote-batch worker:``."""
    line = "remote-batch worker: " + " ".join(sentence.split())
    try:
        print(line, file=sys.stderr, flush=True)
    except (ValueError, OSError, AttributeError):
        with contextlib.suppress(OSError):
            os.write(2, (line + "\n").encode("utf-8", "replace"))


def _tell_operator(
    environ: Mapping[str, str],
    storage: JobStorage | None,
    settings: WorkerSettings | None,
    summary: str,
    exc: BaseException,
) -> None:
    """The details of the worker's own error (the traceback, the S3 error) for the operator: appended
    to ``$REMOTE_BATCH_OPERATOR_LOG`` when set, and written to ``<prefix>worker-error.txt``; each
    best effort."""
    try:
        detail = "".join(traceback.format_exception(exc))
    except BaseException:
        detail = repr(exc)
    text = (
        f"{datetime.now(UTC).isoformat()} remote-batch worker, job {environ.get(JOB_ID) or '?'}: "
        f"{summary}\n{detail}"
    )
    path = environ.get(OPERATOR_LOG)
    if path:
        with contextlib.suppress(OSError), open(path, "a", encoding="utf-8", errors="replace") as log:
            log.write(text)
    if storage is not None and settings is not None:
        with contextlib.suppress(Exception):
            storage.write(
                settings.job_output_prefix + WORKER_ERROR_OBJECT,
                text.encode("utf-8", "replace"),
                "text/plain; charset=utf-8",
            )
