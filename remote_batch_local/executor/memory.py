"""How much memory a job may take on this host, and the note a job cut down by it carries."""

from __future__ import annotations

from typing import Any

import psutil

from functions.ports import BatchSubmission
from remote_batch_local.executor.constants import (
    MEMORY_FLOOR_MIB,
    MEMORY_HEADROOM_FRACTION,
    MEMORY_HEADROOM_MIN_MIB,
    MIB,
)
from remote_batch_local.executor.wording import gib_text, joined, plural


def host_note(
    submission: BatchSubmission, host_vcpus: int, host_memory_mib: int, memory_basis: str | None = None
) -> str | None:
    """The sentence saying a machine class is bigger than this host, or None when it fits.

    Example: ``Machine class needs 8 vCPUs and 64 GiB; this host runs it with 2 vCPUs and 23 GiB``.
    A GPU class always gets one: the local stack has no GPU and runs it on the CPU (``Machine class
    needs 8 vCPUs, 64 GiB and 1 GPU; this host runs it on CPU only, with 8 vCPUs and 64 GiB``).
    ``memory_basis`` (e.g. ``the host's free memory less 3.0 GiB kept for the local stack``) is added
    in parentheses when the memory was cut down.
    """
    if submission.vcpus <= host_vcpus and submission.memory_mib <= host_memory_mib and not submission.gpus:
        return None
    vcpus = min(submission.vcpus, host_vcpus)
    memory = min(submission.memory_mib, host_memory_mib)
    needs = [plural(submission.vcpus, "vCPU"), f"{gib_text(submission.memory_mib)} GiB"]
    gets = [plural(vcpus, "vCPU"), f"{gib_text(memory)} GiB"]
    basis = f" ({memory_basis})" if memory_basis and memory < submission.memory_mib else ""
    if submission.gpus:
        needs.append(plural(submission.gpus, "GPU"))
        return (
            f"Machine class needs {joined(needs)}; this host runs it on CPU only, with {joined(gets)}{basis}"
        )
    return f"Machine class needs {joined(needs)}; this host runs it with {joined(gets)}{basis}"


def job_memory_ceiling_mib(memory: Any = None) -> tuple[int, str]:
    """The most memory (MiB) one job may have on this host, and the sentence saying why.

    The host's available memory now less a headroom for the local stack (an eighth of the total, at
    least ``MEMORY_HEADROOM_MIN_MIB``), never below ``MEMORY_FLOOR_MIB``. ``memory`` is a
    ``psutil.virtual_memory()`` result (default: read now). Example on a 24 GiB host with 17 GiB
    available: ``(14336, "the host's free memory less 3.0 GiB kept for the local stack")``.
    """
    memory = memory if memory is not None else psutil.virtual_memory()
    total = int(memory.total) // MIB
    headroom = max(MEMORY_HEADROOM_MIN_MIB, int(total * MEMORY_HEADROOM_FRACTION))
    ceiling = max(MEMORY_FLOOR_MIB, min(total, int(memory.available) // MIB - headroom))
    return ceiling, f"the host's free memory less {headroom / 1024:.1f} GiB kept for the local stack"
