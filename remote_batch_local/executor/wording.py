"""Small pieces of the sentences the executor puts in a job's ``statusReason``."""

from __future__ import annotations

from collections.abc import Sequence


def plural(count: int, word: str) -> str:
    """``1 vCPU``, ``2 vCPUs``."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def joined(parts: Sequence[str]) -> str:
    """``a and b``, ``a, b and c``."""
    return " and ".join(parts) if len(parts) <= 2 else f"{', '.join(parts[:-1])} and {parts[-1]}"


def gib_text(mib: int) -> str:
    """MiB as GiB for a sentence: ``2048`` → ``2``, ``512`` → ``0.5``."""
    gib = mib / 1024
    return str(int(gib)) if gib >= 1 else f"{gib:.1f}"
