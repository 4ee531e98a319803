"""The local stack's configuration: the ``REMOTE_BATCH_*`` variables of ``make dev``, read once at start."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from functions.domain.rate_limits import ACCOUNT_BURST, ACCOUNT_REQUESTS_PER_SECOND
from functions.domain.text import ASCII_DECIMAL, is_ascii_digits
from remote_batch_local.executor.process_limit import PROCESS_LIMIT
from remote_batch_local.executor.rate_limit import DEFAULT_SUBMIT_TPS
from remote_batch_local.state_disk import DEFAULT_RESERVE_BYTES

DEFAULT_PORT = 8787
DEFAULT_METER_INTERVAL_SECONDS = 60.0
DEFAULT_SNAPSHOT_INTERVAL_SECONDS = 5.0
DEFAULT_IDLE_STOP_MINUTE_SECONDS = 60.0
DEFAULT_HOME = ".remote-batch"
DEFAULT_WARM_WORKERS = 2
HOST = "127.0.0.1"


class LocalConfigError(ValueError):
    """A ``REMOTE_BATCH_*`` variable of the local stack is malformed; the message names it."""


@dataclass(frozen=True, slots=True)
class LocalConfig:
    """What ``python -m remote_batch_local`` is configured with.

    Attributes
    ----------
    home : Path
        State directory (``REMOTE_BATCH_HOME``, default ``.remote-batch/`` in the working directory).
    port : int
        HTTP port on 127.0.0.1 (``REMOTE_BATCH_PORT``, default 8787; 0 picks a free one).
    meter_interval : float
        Seconds between meter ticks (``REMOTE_BATCH_METER_INTERVAL``, default 60).
    duplicate_events : bool
        Deliver every Batch event twice (``REMOTE_BATCH_DUPLICATE_EVENTS=1``), as EventBridge may.
    vcpus : int | None
        Cap on the vCPUs the executor uses at once (``REMOTE_BATCH_LOCAL_VCPUS``; default: the host's).
    warm_workers : int
        The most idle warm workers the executor keeps (``REMOTE_BATCH_LOCAL_WARM_WORKERS``, 0-16,
        default 2; 0 starts each job's worker when the job starts).
    snapshot_interval : float
        Seconds between state snapshots (``REMOTE_BATCH_SNAPSHOT_INTERVAL``, default 5).
    log_limit_bytes : int | None
        Caps every job's console output below its machine class's log limit
        (``REMOTE_BATCH_LOG_LIMIT_BYTES``; default: the class's, 1 GiB for Basic classes).
    output_limit_bytes : int | None
        Caps every job's files below its machine class's output limit
        (``REMOTE_BATCH_OUTPUT_LIMIT_BYTES``; default: the class's, 10 GiB for Basic classes).
    process_limit : int
        The most processes and threads one job may hold at once (``REMOTE_BATCH_LOCAL_PROCESS_LIMIT``,
        default 1024, ``executor.process_limit.PROCESS_LIMIT``); past it the job is killed and ends
        with ``Process limit of <limit> exceeded``.
    rate_limit : float
        Requests per second each account may make (``REMOTE_BATCH_RATE_LIMIT``, default 100, the
        deployed limit; 0 turns it off); past it the gateway answers 429 ``RateLimited``.
    rate_burst : int
        Requests an account may make at once (``REMOTE_BATCH_RATE_BURST``, default 200).
    batch_submit_tps : int
        SubmitJob calls the local Batch gateway accepts per second (``REMOTE_BATCH_BATCH_TPS``,
        default 50 as AWS Batch); more are refused with ``TooManyRequestsException``.
    idle_stop_minute : float
        Seconds one minute of a dedicated compute's ``idleStopMinutes`` lasts
        (``REMOTE_BATCH_IDLE_STOP_MINUTE_SECONDS``, default 60; the end-to-end tests set a few seconds
        so an idle stop of 1 minute is seen without waiting a minute).
    pythons : tuple[str, ...]
        Interpreters jobs may run in, tried before ``python3.X`` on PATH and pyenv's versions
        (``REMOTE_BATCH_LOCAL_PYTHONS``, paths separated by ``:``; ``remote_batch_local.job_pythons``).
    disk_reserve_bytes : int
        Free bytes the home's filesystem must keep for writes to be admitted
        (``REMOTE_BATCH_DISK_RESERVE_BYTES``, default 64 MiB, ``state_disk.DEFAULT_RESERVE_BYTES``;
        0 refuses only once a write failed); below it writes answer 503 ``ServiceUnavailable``.
    """

    home: Path
    port: int
    meter_interval: float
    duplicate_events: bool
    vcpus: int | None
    snapshot_interval: float = DEFAULT_SNAPSHOT_INTERVAL_SECONDS
    host: str = HOST
    log_limit_bytes: int | None = None
    output_limit_bytes: int | None = None
    process_limit: int = PROCESS_LIMIT
    rate_limit: float = ACCOUNT_REQUESTS_PER_SECOND
    rate_burst: int = ACCOUNT_BURST
    warm_workers: int = DEFAULT_WARM_WORKERS
    batch_submit_tps: int = DEFAULT_SUBMIT_TPS
    idle_stop_minute: float = DEFAULT_IDLE_STOP_MINUTE_SECONDS
    pythons: tuple[str, ...] = ()
    disk_reserve_bytes: int = DEFAULT_RESERVE_BYTES

    @property
    def state_dir(self) -> Path:
        """Where snapshots of the moto services are kept."""
        return self.home / "state"

    @classmethod
    def from_environment(cls, environ: Mapping[str, str], cwd: Path) -> LocalConfig:
        """Read the variables; unset or empty ones take their defaults.

        Raises
        ------
        LocalConfigError
            Naming the variable that is malformed.
        """
        home = environ.get("REMOTE_BATCH_HOME") or DEFAULT_HOME
        return cls(
            home=(cwd / home).resolve(),
            port=int(_number(environ, "REMOTE_BATCH_PORT", DEFAULT_PORT, minimum=0, maximum=65535)),
            meter_interval=_number(environ, "REMOTE_BATCH_METER_INTERVAL", DEFAULT_METER_INTERVAL_SECONDS),
            duplicate_events=_flag(environ, "REMOTE_BATCH_DUPLICATE_EVENTS"),
            vcpus=_optional_int(environ, "REMOTE_BATCH_LOCAL_VCPUS"),
            snapshot_interval=_number(
                environ, "REMOTE_BATCH_SNAPSHOT_INTERVAL", DEFAULT_SNAPSHOT_INTERVAL_SECONDS
            ),
            log_limit_bytes=_optional_int(environ, "REMOTE_BATCH_LOG_LIMIT_BYTES"),
            output_limit_bytes=_optional_int(environ, "REMOTE_BATCH_OUTPUT_LIMIT_BYTES"),
            process_limit=_optional_int(environ, "REMOTE_BATCH_LOCAL_PROCESS_LIMIT") or PROCESS_LIMIT,
            rate_limit=_number(environ, "REMOTE_BATCH_RATE_LIMIT", ACCOUNT_REQUESTS_PER_SECOND, minimum=0),
            rate_burst=_optional_int(environ, "REMOTE_BATCH_RATE_BURST") or ACCOUNT_BURST,
            warm_workers=int(
                _number(
                    environ, "REMOTE_BATCH_LOCAL_WARM_WORKERS", DEFAULT_WARM_WORKERS, minimum=0, maximum=16
                )
            ),
            batch_submit_tps=_optional_int(environ, "REMOTE_BATCH_BATCH_TPS") or DEFAULT_SUBMIT_TPS,
            idle_stop_minute=_number(
                environ, "REMOTE_BATCH_IDLE_STOP_MINUTE_SECONDS", DEFAULT_IDLE_STOP_MINUTE_SECONDS
            ),
            pythons=_paths(environ, "REMOTE_BATCH_LOCAL_PYTHONS", cwd),
            disk_reserve_bytes=int(
                _number(environ, "REMOTE_BATCH_DISK_RESERVE_BYTES", DEFAULT_RESERVE_BYTES, minimum=0)
            ),
        )


def _number(
    environ: Mapping[str, str], name: str, default: float, minimum: float = 0.1, maximum: float | None = None
) -> float:
    text = environ.get(name)
    if not text:
        return default
    # float() alone takes " 5\n", Unicode digits, "nan" and "inf".
    value = float(text) if ASCII_DECIMAL.fullmatch(text) else math.nan
    if not math.isfinite(value):
        raise LocalConfigError(f"{name} must be a number, got {text!r}")
    if value < minimum or (maximum is not None and value > maximum):
        bounds = f"at least {minimum}" if maximum is None else f"between {minimum} and {maximum}"
        raise LocalConfigError(f"{name} must be {bounds}, got {text!r}")
    return value


def _optional_int(environ: Mapping[str, str], name: str) -> int | None:
    text = environ.get(name)
    if not text:
        return None
    if not is_ascii_digits(text) or int(text) < 1:
        raise LocalConfigError(f"{name} must be a positive integer, got {text!r}")
    return int(text)


def _paths(environ: Mapping[str, str], name: str, cwd: Path) -> tuple[str, ...]:
    """``a:b`` → absolute paths (relative ones taken from ``cwd``)."""
    return tuple(str((cwd / part).absolute()) for part in environ.get(name, "").split(":") if part.strip())


def _flag(environ: Mapping[str, str], name: str) -> bool:
    text = environ.get(name, "").strip().lower()
    if text in ("", "0", "false", "no"):
        return False
    if text in ("1", "true", "yes"):
        return True
    raise LocalConfigError(f"{name} must be 1 or 0, got {text!r}")
