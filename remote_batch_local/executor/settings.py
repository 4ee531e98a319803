"""What the executor is built with and never changes after: the host's capacity, the worker's command
and environment, the limits every job gets, the sandbox, where its processes are recorded."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from remote_batch_local.executor.ports import CredentialIssuer
from remote_batch_local.job_pythons import LocalPythons
from remote_batch_local.sandbox import ProcessRegistry, Sandbox
from remote_batch_local.state_disk import StateDisk


@dataclass(frozen=True)
class ExecutorSettings:
    """The executor's fixed settings (``LocalBatchExecutor``'s parameters, resolved).

    Attributes
    ----------
    account : str
        The 12-digit AWS account id in ARNs.
    vcpus : int
        The host's vCPUs all jobs share (at least 1).
    memory_mib : int
        The ceiling of a job's address-space limit (MiB).
    memory_basis : str | None
        Why ``memory_mib`` is what it is, when the executor measured it (the note of a job it cuts).
    cpu_of_slot : tuple[int, ...]
        The CPU id vCPU slot ``i`` runs on (more slots than CPUs share them round-robin).
    command : tuple[str, ...]
        The job container's command.
    python : str | None
        The interpreter of the default worker command (None with a custom ``command``: no warm pool).
    import_root : Path
        The directory first on the worker's ``PYTHONPATH``.
    worker_environment : dict[str, str]
        The worker's base environment.
    min_timeout_seconds : int
        The smallest ``attemptDurationSeconds`` (lower ones are raised to it).
    kill_grace_seconds : float
        Seconds between SIGTERM and SIGKILL.
    log_limit_cap, output_limit_cap : int | None
        Caps (bytes) below every machine class's log and output volume limits; None: the class's.
    process_limit : int
        The most tasks (processes plus threads) a job may hold at once.
    sandbox : Sandbox
        How each job is isolated.
    registry : ProcessRegistry | None
        Where each running job's folder and processes are recorded for the next start after a crash.
    credentials : CredentialIssuer | None
        Issues and revokes each job's own AWS credentials; None: the worker environment's.
    disk : StateDisk | None
        The local stack's state disk: while it refuses writes no job starts (a host that cannot start
        a container keeps its jobs RUNNABLE); None: never checked.
    pythons : LocalPythons
        The interpreter of each Python version (``remote_batch_local.job_pythons``): a job's definition
        (``...-py312``) picks the one its job side runs in, as a definition's image would.
    environment_builds : Path | None
        Where environments are built (``remote_batch_local.environments``): a job whose submission
        names a build (``REMOTE_BATCH_ENVIRONMENT_HASH``) runs with ``<environment_builds>/<hash>/site``
        as its only site-packages; None: jobs run with the interpreter's packages only.
    """

    account: str
    vcpus: int
    memory_mib: int
    memory_basis: str | None
    cpu_of_slot: tuple[int, ...]
    command: tuple[str, ...]
    python: str | None
    import_root: Path
    worker_environment: dict[str, str]
    min_timeout_seconds: int
    kill_grace_seconds: float
    log_limit_cap: int | None
    output_limit_cap: int | None
    process_limit: int
    sandbox: Sandbox
    registry: ProcessRegistry | None
    credentials: CredentialIssuer | None
    disk: StateDisk | None = None
    pythons: LocalPythons = field(default_factory=LocalPythons)
    environment_builds: Path | None = None
